package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// setBackend rewrites the backend of the configuration at path (as
// schemaConfig writes it) to addr.
func setBackend(t *testing.T, path, addr string) {
	t.Helper()
	text := readFile(t, path)
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "backend: ") {
			l = "backend: " + addr
		}
		out = append(out, l)
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// metricsOf returns metrics.listen of the configuration at path.
func metricsOf(t *testing.T, path string) string {
	t.Helper()
	for _, l := range strings.Split(readFile(t, path), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "listen: "); ok && strings.HasPrefix(l, "  ") {
			return v
		}
	}
	t.Fatalf("%s has no metrics.listen", path)
	return ""
}

// TestServeWaitsForBackend: serve with rules whose backend is down at start
// binds its port at once (a port in use would be reported before anything
// else), does not exit, reports not ready with the reason, and tries again;
// when the backend comes up it loads the rules, becomes ready, and serves
// the client that connected while it waited.
func TestServeWaitsForBackend(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	migrateSchema(t, path)
	down := freeAddr(t) // nothing listens there yet
	setBackend(t, path, down)
	metrics := metricsOf(t, path)

	p := startServe(t, "serve", "--config", path)
	line := p.waitFor(t, "trying again")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "connection refused") {
		t.Errorf("retry logged as: %s", line)
	}
	code, body := get(t, metrics, "/readyz")
	if want := "not ready: rules not loaded yet: backend " + down + " unreachable: "; code != http.StatusServiceUnavailable || !strings.HasPrefix(body, want) {
		t.Errorf("/readyz while the backend is down: %d %q, want 503 %q…", code, body, want)
	}
	// The client port is bound already: a client may connect (it waits in
	// the backlog for its greeting).
	early, err := net.DialTimeout("tcp", listen, 5*time.Second)
	if err != nil {
		t.Fatalf("the client port is not bound while serve waits for the backend: %v", err)
	}
	early.Close()
	// A second serve on the same port fails at once, before the rules.
	if _, stderr, code := runCLI(t, "serve", "--listen", listen, "--backend", down, "--metrics", ""); code != 1 ||
		!strings.Contains(stderr, "address already in use") {
		t.Errorf("a second serve on %s: exit %d, stderr %q; want 1 and address already in use", listen, code, stderr)
	}

	stop := startRelay(t, down, testdb.Shared().Addr) // the backend comes up
	defer stop()
	p.waitFor(t, `msg="loaded rules"`)
	p.waitFor(t, "msg=listening")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = get(t, metrics, "/readyz")
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Fatalf("/readyz once the backend is up: %d %q\nstderr:\n%s", code, body, p.stderr())
	}
	db := openProxy(t, testdb.Shared(), listen, schema)
	if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
		t.Fatalf("increment through serve once ready: %v", err)
	}
	var n int
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("downloads = %d, %v; want 1", n, err)
	}
	db.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v\nstderr:\n%s", err, p.stderr())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve still running 15s after SIGTERM")
	}
}

// TestReloadReadiness: a SIGHUP reload that fails makes /readyz 503 with
// the reason (serve runs on with the rules it had) and is counted in
// slotproxy_reloads_total and slotproxy_config_last_reload_successful,
// which exist, at 0 failures, from the start; the next reload that
// succeeds makes serve ready again.
func TestReloadReadiness(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	appendConfig(t, path, "rollup:\n  enabled: false\n")
	migrateSchema(t, path)
	ruleFile := filepath.Join(filepath.Dir(path), "rules", "repos.yaml")
	good := readFile(t, ruleFile)

	p := startServe(t, "serve", "--config", path)
	metrics := p.metricsAddr(t)
	m := scrape(t, metrics)
	for _, k := range []string{
		`slotproxy_reloads_total{result="failed",trigger="sighup"}`, `slotproxy_reloads_total{result="ok",trigger="sighup"}`,
		`slotproxy_reloads_total{result="failed",trigger="ddl"}`, `slotproxy_reloads_total{result="ok",trigger="ddl"}`,
	} {
		if v, ok := m[k]; !ok || v != 0 {
			t.Errorf("at start: %s = %v (present %v), want 0", k, v, ok)
		}
	}
	if m["slotproxy_config_last_reload_successful"] != 1 || m["slotproxy_config_last_reload_success_timestamp_seconds"] < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("at start: last reload successful %v at %v", m["slotproxy_config_last_reload_successful"], m["slotproxy_config_last_reload_success_timestamp_seconds"])
	}
	if code, _ := get(t, metrics, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz at start: %d", code)
	}

	// A rule that does not match the schema.
	if err := os.WriteFile(ruleFile, []byte("table: "+schema+".repos\nkey: id\ncounters: [downloads, name]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "reload failed")
	code, body := get(t, metrics, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: the last reload failed") || !strings.Contains(body, "not an integer column") {
		t.Errorf("/readyz after a failed reload: %d %q", code, body)
	}
	m = scrape(t, metrics)
	if m[`slotproxy_reloads_total{result="failed",trigger="sighup"}`] != 1 || m["slotproxy_config_last_reload_successful"] != 0 {
		t.Errorf("after a failed reload: failed reloads %v, last reload successful %v; want 1 and 0",
			m[`slotproxy_reloads_total{result="failed",trigger="sighup"}`], m["slotproxy_config_last_reload_successful"])
	}
	// The old rules still serve.
	db := openProxy(t, testdb.Shared(), listen, schema)
	if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
		t.Fatalf("increment after a failed reload: %v", err)
	}

	// Fixed: ready again.
	if err := os.WriteFile(ruleFile, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, `msg="reloaded rules"`)
	if code, body := get(t, metrics, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after a successful reload: %d %q", code, body)
	}
	m = scrape(t, metrics)
	if m[`slotproxy_reloads_total{result="ok",trigger="sighup"}`] != 1 || m["slotproxy_config_last_reload_successful"] != 1 {
		t.Errorf("after a successful reload: ok reloads %v, last reload successful %v; want 1 and 1",
			m[`slotproxy_reloads_total{result="ok",trigger="sighup"}`], m["slotproxy_config_last_reload_successful"])
	}
	// DDL reloads are counted too.
	if _, err := db.Exec("ALTER TABLE repos ADD COLUMN note VARCHAR(10)"); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, `msg="reloaded the catalog after DDL"`)
	if v := scrape(t, metrics)[`slotproxy_reloads_total{result="ok",trigger="ddl"}`]; v != 1 {
		t.Errorf("reloads after DDL counted %v, want 1", v)
	}
}

// TestSystemdNotify: under systemd's Type=notify (NOTIFY_SOCKET set), serve
// sends READY=1 once it accepts clients (not before: the client port
// answers by then), RELOADING=1 and READY=1 around a SIGHUP reload, and
// STOPPING=1 when it shuts down. deploy/systemd/slotproxy.service relies on
// it.
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	messages := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := ln.ReadFromUnix(buf)
			if err != nil {
				close(messages)
				return
			}
			messages <- string(buf[:n])
		}
	}()
	next := func(want string) string {
		t.Helper()
		select {
		case m := <-messages:
			if !strings.HasPrefix(m, want) {
				t.Fatalf("notification %q, want %q first", m, want)
			}
			return m
		case <-time.After(15 * time.Second):
			t.Fatalf("no %s notification within 15 s", want)
		}
		return ""
	}
	listen := freeAddr(t)
	_, path := schemaConfig(t, listen)
	migrateSchema(t, path)
	cmd := exec.Command(binary, "serve", "--config", path)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := next("READY=1")
	if !strings.Contains(ready, "STATUS=serving on "+listen) {
		t.Errorf("READY notification %q lacks the status", ready)
	}
	c, err := net.DialTimeout("tcp", listen, 5*time.Second)
	if err != nil {
		t.Fatalf("READY=1 sent, but the client port does not answer: %v", err)
	}
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next("RELOADING=1")
	next("READY=1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
}

// TestHealthCommand: "slotproxy health" asks a running serve's endpoint
// (from its configuration file) and exits 0 with "ok" when it is ready;
// --live asks /healthz; not ready or not running is exit status 1 with the
// reason on one line.
func TestHealthCommand(t *testing.T) {
	listen := freeAddr(t)
	_, path := schemaConfig(t, listen)
	migrateSchema(t, path)

	// Nothing runs yet.
	_, stderr, code := runCLI(t, "health", "--config", path, "--timeout", "2s")
	if code != 1 || !strings.HasPrefix(stderr, "slotproxy: health: ") || !strings.Contains(stderr, "connection refused") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("health without serve: exit %d, stderr %q; want 1 and one line saying connection refused", code, stderr)
	}
	p := startServe(t, "serve", "--config", path)
	metrics := p.metricsAddr(t)
	for _, args := range [][]string{{"health", "--config", path}, {"health", "--metrics", metrics}, {"health", "--config", path, "--live"}} {
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 || stdout != "ok\n" || stderr != "" {
			t.Errorf("slotproxy %q with serve ready: exit %d, stdout %q, stderr %q; want 0 and ok", args, code, stdout, stderr)
		}
	}
	// An endpoint on every interface is asked on the loopback.
	_, port, _ := net.SplitHostPort(metrics)
	if stdout, _, code := runCLI(t, "health", "--metrics", ":"+port); code != 0 || stdout != "ok\n" {
		t.Errorf("health --metrics :%s: exit %d, stdout %q", port, code, stdout)
	}

	// Not ready: a serve whose backend is down.
	down := freeAddr(t)
	listen2, metrics2 := freeAddr(t), freeAddr(t)
	q := startServe(t, "serve", "--listen", listen2, "--backend", down, "--metrics", metrics2)
	q.waitFor(t, "msg=listening")
	_, stderr, code = runCLI(t, "health", "--metrics", metrics2)
	if want := "slotproxy: health: http://" + metrics2 + "/readyz: 503 not ready: backend " + down + " unreachable: "; code != 1 || !strings.HasPrefix(stderr, want) {
		t.Errorf("health of a serve that is not ready: exit %d, stderr %q; want 1 and %q…", code, stderr, want)
	}
	if stdout, _, code := runCLI(t, "health", "--metrics", metrics2, "--live"); code != 0 || stdout != "ok\n" {
		t.Errorf("health --live of a running serve that is not ready: exit %d, stdout %q; want 0", code, stdout)
	}
}

// TestVersionFromBuild: "slotproxy version" gives the version and commit
// the build was stamped with: by -ldflags, as the Makefile does, and by
// "make build" itself, which stamps "git describe" and the commit of the
// checkout.
func TestVersionFromBuild(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "slotproxy-stamped")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7-test -X main.commit=0123456789abcdef", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "slotproxy v9.8.7-test (commit 0123456789abcdef, go1.") {
		t.Errorf("version of a stamped build: %q", out)
	}

	// make build, in this checkout.
	describe, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe (the tests run in a git checkout): %v", err)
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(dir, "slotproxy-make")
	mk := exec.Command("make", "-C", "../..", "--no-print-directory", "build", "BIN="+made)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err = exec.Command(made, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "slotproxy " + strings.TrimSpace(string(describe)) + " (commit " + strings.TrimSpace(string(rev))
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("make build's version: %q, want %q…", out, want)
	}
	if strings.Contains(string(out), " dev ") {
		t.Errorf("make build's binary reports dev: %q", out)
	}
}

// TestPortInUseReportedFirst: with rules, a listen address in use is the
// one error serve reports, before it loads the rules or starts the
// roll-up (it binds first).
func TestPortInUseReportedFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, path := schemaConfig(t, busy.Addr().String())
	migrateSchema(t, path)
	_, stderr, code := runCLI(t, "serve", "--config", path)
	if want := "slotproxy: listen tcp " + busy.Addr().String() + ": bind: address already in use\n"; code != 1 || stderr != want {
		t.Fatalf("serve with rules on a port in use: exit %d, stderr:\n%s\nwant 1 and only:\n%s", code, stderr, want)
	}
}
