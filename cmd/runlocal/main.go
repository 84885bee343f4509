// Command runlocal is "make run": a throwaway MariaDB (or MySQL) and
// slotproxy in front of it, on free ports, with an admin account, the
// example rule (or your own rules and configuration) and roll-up, in the
// foreground until Ctrl-C. docs/tutorial.md starts from it.
//
//	go run ./cmd/runlocal [--server mariadb|mysql] [--config FILE] [--rules DIR] [--dir DIR]
//
// The server is started for this run alone (internal/testdb: its own data
// directory and port), so runlocal never stops or changes a server it did
// not start, and the accounts it creates live in that server only: root,
// app/app-pass (ALL on database app) and slotproxy/admin-pass (the
// proxy's admin account), or the admin account --config names. Its state
// (the configuration serve runs with, a writable copy of the rules, the
// proxy's pid and log, and env, a file of shell variables and functions
// for the tutorial) is in --dir, default .local/run.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

const (
	appUser, appPass     = "app", "app-pass"
	adminUser, adminPass = "slotproxy", "admin-pass"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "run: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("runlocal", flag.ContinueOnError)
	server := fs.String("server", envOr("SERVER", "mariadb"), "the server to start: mariadb or mysql (env SERVER)")
	cfgPath := fs.String("config", os.Getenv("CONFIG"), "your slotproxy configuration `FILE` (env CONFIG); listen, backend and metrics are replaced by this run's")
	rulesDir := fs.String("rules", os.Getenv("RULES"), "your rules `DIR` (env RULES; default: the config's rules, else the example rule)")
	dir := fs.String("dir", ".local/run", "state `DIR` of this run")
	bin := fs.String("slotproxy", ".local/bin/slotproxy", "the slotproxy `BINARY` to run")
	proxyPort := fs.Int("port", 3307, "the proxy's `PORT` when free (0: any free port)")
	metricsPort := fs.Int("metrics-port", 9307, "the metrics `PORT` when free (0: any free port)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	flavor := testdb.Flavor(*server)
	if flavor != testdb.MariaDB && flavor != testdb.MySQL {
		return fmt.Errorf("--server %q: want mariadb or mysql", *server)
	}
	state, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	// Another make run is using the directory: this one takes the next
	// free one (.local/run-2, …), so both run side by side and each stops
	// only its own server and proxy.
	for n, base := 2, state; running(state); n++ {
		state = base + "-" + strconv.Itoa(n)
	}
	slotproxy, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}

	// The user's configuration, read first: a broken one stops us before a
	// server is started.
	var user *config.Config
	if *cfgPath != "" {
		if user, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}

	fmt.Printf("run: starting %s (a server of this run's own: its data directory and port)...\n", flavor)
	srv, err := testdb.Start(testdb.Options{Flavor: flavor})
	if err != nil {
		return fmt.Errorf("%w\n(run scripts/deps.sh to install the servers)", err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "run: stopping %s: %v\n", flavor, err)
		}
	}()

	admin, password := adminUser, adminPass
	if user != nil && user.Admin.User != "" {
		admin, password = user.Admin.User, user.Admin.Password
	}
	if err := srv.Exec(
		"CREATE DATABASE app",
		"CREATE TABLE app.repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL DEFAULT '', downloads BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO app.repos (id, name) VALUES (1, 'slotproxy'), (2, 'mariadb'), (3, 'mysql')",
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", appUser, appPass),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON app.* TO '%s'@'%%'", appUser),
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", sqlString(admin), sqlString(password)),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%'", sqlString(admin)),
	); err != nil {
		return err
	}

	proxyAddr, err := freeAddr(*proxyPort)
	if err != nil {
		return err
	}
	metricsAddr, err := freeAddr(*metricsPort)
	if err != nil {
		return err
	}
	rules, err := rulesFor(state, *rulesDir, user)
	if err != nil {
		return err
	}
	cfg := filepath.Join(state, "config.yaml")
	if err := writeConfig(cfg, *cfgPath, proxyAddr, srv.Addr, metricsAddr, rules, admin, password); err != nil {
		return err
	}

	migrate := exec.Command(slotproxy, "migrate", "--config", cfg)
	migrate.Stdout, migrate.Stderr = io.Discard, os.Stderr
	if err := migrate.Run(); err != nil {
		return fmt.Errorf("slotproxy migrate: %w", err)
	}
	logPath := filepath.Join(state, "slotproxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	serve := exec.Command(slotproxy, "serve", "--config", cfg)
	// A process group of its own: the terminal's Ctrl-C (SIGINT to the
	// foreground group) reaches this run only, which then sends serve one
	// SIGTERM (two signals would cut its graceful shutdown short). And it
	// never outlives this run.
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	serve.Stdout, serve.Stderr = io.MultiWriter(os.Stdout, logFile), io.MultiWriter(os.Stderr, logFile)
	if err := serve.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	pidFile := filepath.Join(state, "slotproxy.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(serve.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	if err := waitReady(metricsAddr, exited); err != nil {
		return err
	}

	host, port, _ := net.SplitHostPort(proxyAddr)
	_, sport, _ := net.SplitHostPort(srv.Addr)
	env := filepath.Join(state, "env")
	envText := fmt.Sprintf(`# slotproxy's local run: . %s
SLOTPROXY=%q
CONFIG=%q
RULES=%q
PIDFILE=%q
PROXY=%q
DATABASE=%q
METRICS=%q
app()  { mariadb --no-defaults --protocol=TCP -h%s -P%s -u%s -p%s app "$@"; }
root() { mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P%s -u%s -p%s "$@"; }
reload() { kill -HUP "$(cat "$PIDFILE")"; }
`, env, slotproxy, cfg, rules, pidFile, proxyAddr, srv.Addr, "http://"+metricsAddr,
		host, port, appUser, appPass, sport, srv.RootUser, srv.RootPassword)
	if err := os.WriteFile(env, []byte(envText), 0o644); err != nil {
		return err
	}
	fmt.Printf(`
  %s %s: %s   (its own, gone when this run ends)
  slotproxy:       %s -> %s   (rules: %s; log: %s)
  metrics:         http://%s/metrics

  As the app, through the proxy:
    mariadb -h%s -P%s -u%s -p%s app
    DSN (go-sql-driver): %s:%s@tcp(%s)/app
  As root, directly on the server:
    mariadb -h127.0.0.1 -P%s -u%s -p%s
  The proxy's admin account: %s

  In another shell, ". %s" defines app, root and reload for docs/tutorial.md.
  Ctrl-C stops slotproxy and the server.

`, flavor, srv.Version, srv.Addr, proxyAddr, srv.Addr, rules, logPath, metricsAddr,
		host, port, appUser, appPass, appUser, appPass, proxyAddr,
		sport, srv.RootUser, srv.RootPassword, admin, env)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err := watch(exited, sigs, srv.Running, time.Second); err != nil {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = serve.Process.Kill()
		}
		_ = os.Remove(pidFile)
		if errors.Is(err, errServerGone) {
			return fmt.Errorf("%w: the %s server of this run stopped (its log: %s); slotproxy stopped too", err, flavor, filepath.Join(srv.Dir, "server.log"))
		}
		return fmt.Errorf("slotproxy exited: %v (log: %s)", err, logPath)
	}
	_ = serve.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = serve.Process.Kill()
		<-exited
	}
	_ = os.Remove(pidFile)
	return nil
}

// errServerGone: the run's database server stopped on its own.
var errServerGone = errors.New("database server gone")

// watch waits until the run ends: nil when a signal arrives on sigs (the
// user's Ctrl-C), the exit of slotproxy when it arrives on exited first,
// and errServerGone when running (the database server's liveness, checked
// every interval) turns false.
func watch(exited <-chan error, sigs <-chan os.Signal, running func() bool, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			return err
		case <-sigs:
			return nil
		case <-tick.C:
			if !running() {
				return errServerGone
			}
		}
	}
}

// rulesFor returns the rules directory of the run: dir when given, else
// the user's configuration's, else a writable copy of the example rules
// in state/rules (your own rule files go there).
func rulesFor(state, dir string, user *config.Config) (string, error) {
	switch {
	case dir != "":
		return filepath.Abs(dir)
	case user != nil && user.Rules != "":
		return user.Rules, nil
	}
	rules := filepath.Join(state, "rules")
	if err := os.RemoveAll(rules); err != nil {
		return "", err
	}
	if err := os.MkdirAll(rules, 0o755); err != nil {
		return "", err
	}
	example, err := os.ReadFile("testdata/rules/repos.yaml")
	if err != nil {
		return "", fmt.Errorf("the example rule (run from the repository's top): %w", err)
	}
	return rules, os.WriteFile(filepath.Join(rules, "repos.yaml"), example, 0o644)
}

// writeConfig writes the configuration serve runs with: the user's (from),
// with listen, backend, metrics, rules and admin set to this run's, or a
// fresh one; roll-up on.
func writeConfig(path, from, listen, backend, metrics, rules, admin, password string) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	if from != "" {
		data, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return err
		}
		if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
			root = doc.Content[0]
		}
		// Relative paths were relative to the user's file.
		absPaths(root, filepath.Dir(from), []string{"tls", "cert"}, []string{"tls", "key"},
			[]string{"backend", "tls", "ca"}, []string{"backend", "tls", "cert"}, []string{"backend", "tls", "key"})
	}
	set(root, []string{"listen"}, listen)
	if b := get(root, "backend"); b != nil && b.Kind == yaml.MappingNode {
		set(root, []string{"backend", "address"}, backend)
	} else {
		set(root, []string{"backend"}, backend)
	}
	set(root, []string{"metrics", "listen"}, metrics)
	set(root, []string{"rules"}, rules)
	set(root, []string{"admin", "user"}, admin)
	set(root, []string{"admin", "password"}, password)
	if from == "" {
		set(root, []string{"rollup", "enabled"}, "true")
		set(root, []string{"rollup", "interval"}, "1s")
	}
	out, err := yaml.Marshal(root)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("# written by make run (cmd/runlocal)\n"), out...), 0o600)
}

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// set sets the scalar at path under mapping m, creating mappings on the way.
func set(m *yaml.Node, path []string, value string) {
	for i, key := range path {
		v := get(m, key)
		if i == len(path)-1 {
			if v == nil {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
			} else {
				*v = yaml.Node{Kind: yaml.ScalarNode, Value: value}
			}
			return
		}
		if v == nil || v.Kind != yaml.MappingNode {
			nv := &yaml.Node{Kind: yaml.MappingNode}
			if v == nil {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, nv)
			} else {
				*v = *nv
				nv = v
			}
			v = nv
		}
		m = v
	}
}

// absPaths makes the scalars at paths absolute, relative to dir.
func absPaths(root *yaml.Node, dir string, paths ...[]string) {
	for _, p := range paths {
		m := root
		for _, key := range p[:len(p)-1] {
			if m = get(m, key); m == nil || m.Kind != yaml.MappingNode {
				break
			}
		}
		if m == nil || m.Kind != yaml.MappingNode {
			continue
		}
		if v := get(m, p[len(p)-1]); v != nil && v.Kind == yaml.ScalarNode && v.Value != "" && !filepath.IsAbs(v.Value) {
			v.Value = filepath.Join(dir, v.Value)
		}
	}
}

// freeAddr returns 127.0.0.1:preferred when that port is free, else a free
// port the system picks.
func freeAddr(preferred int) (string, error) {
	for _, p := range []int{preferred, 0} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr, nil
	}
	return "", errors.New("no free port on 127.0.0.1")
}

// waitReady waits until serve's /readyz (on metrics) answers 200, or serve
// exits.
func waitReady(metrics string, exited chan error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := http.Get("http://" + metrics + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("slotproxy exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slotproxy was not ready within a minute (http://%s/readyz)", metrics)
		}
	}
}

// running reports whether the state directory dir belongs to a make run
// that is still running (its slotproxy's pid is alive).
func running(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "slotproxy.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return err == nil && pid > 0 && syscall.Kill(pid, 0) == nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func sqlString(s string) string { return strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) }
