package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// binary is the slotproxy executable under test, built by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

// buildAndRun builds slotproxy into a temporary directory (with the race
// detector when the tests have it), runs the tests against a throwaway
// MariaDB (see setupDB) and cleans up.
func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "slotproxy-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "slotproxy")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return testdb.Run(m, testdb.Options{}, setupDB)
}

// runCLI runs slotproxy with args to completion and returns its output and
// exit status.
func runCLI(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIEnv(t, nil, args...)
}

// runCLIEnv is runCLI with env ("KEY=value") added to the environment.
func runCLIEnv(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		code = exit.ExitCode()
	default:
		t.Fatalf("slotproxy %q: %v\nstderr:\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String(), code
}

// writeFile writes a file named name into a new temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, below the kernel's range of ephemeral ports where it can: a port of
// that range, freed, may become the local port of any process's outgoing
// connection before the test's serve binds it (a CI run saw "bind: address
// already in use"). The two servers' runs, side by side, draw from halves
// of the ports below it.
func freeAddr(t testing.TB) string {
	t.Helper()
	for {
		ln, err := listenBelowEphemeral()
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		// The kernel may hand a port it just freed out again: never the
		// same one twice in this process (a test's listen and metrics
		// addresses, say).
		freeAddrs.Lock()
		seen := freeAddrs.given[addr]
		if freeAddrs.given == nil {
			freeAddrs.given = map[string]bool{}
		}
		freeAddrs.given[addr] = true
		freeAddrs.Unlock()
		if !seen {
			return addr
		}
	}
}

// listenBelowEphemeral listens on a loopback port below the ephemeral
// range (/proc/sys/net/ipv4/ip_local_port_range), in the half of the ports
// from 10000 up to it that SLOTPROXY_TEST_SERVER picks; on a port the
// kernel picks where there is no such room.
func listenBelowEphemeral() (net.Listener, error) {
	low := 0
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			low, _ = strconv.Atoi(f[0])
		}
	}
	const base = 10000
	if low-base < 2000 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	half := (low - base) / 2
	from := base
	if os.Getenv("SLOTPROXY_TEST_SERVER") == "mysql" {
		from += half
	}
	for range 100 {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", from+rand.IntN(half))); err == nil {
			return ln, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// freeAddrs are the addresses freeAddr returned.
var freeAddrs struct {
	sync.Mutex
	given map[string]bool
}

// TestErrors checks that every bad command line or configuration ends with a
// non-zero exit and exactly one line on stderr, before anything is served.
func TestErrors(t *testing.T) {
	badYAML := writeFile(t, "bad.yaml", "listen: 127.0.0.1:3307\nbackend: x\n  address: y\n")
	badMode := writeFile(t, "config.yaml", `# the example from the contract
listen: 127.0.0.1:3307
backend:
  address: 127.0.0.1:3306

  tls:
    mode: maybe
`)
	noListen := writeFile(t, "nolisten.yaml", "backend: 127.0.0.1:3306\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // the whole stderr line
	}{
		{"no command", nil, 2,
			`slotproxy: no command given (run "slotproxy help")`},
		{"unknown command", []string{"serv"}, 2,
			`slotproxy: unknown command "serv" (run "slotproxy help")`},
		{"unknown flag", []string{"serve", "--lsiten", "127.0.0.1:3307"}, 2,
			`slotproxy: serve: flag provided but not defined: -lsiten (run "slotproxy help serve")`},
		{"flag without value", []string{"serve", "--config"}, 2,
			`slotproxy: serve: flag needs an argument: -config (run "slotproxy help serve")`},
		{"bad listen flag", []string{"serve", "--listen", "nope", "--backend", "127.0.0.1:3306"}, 2,
			`slotproxy: serve: --listen: "nope": missing port in address (want HOST:PORT)`},
		{"bad backend flag", []string{"serve", "--config", noListen, "--listen", "127.0.0.1:3307", "--backend", "db:99999"}, 2,
			`slotproxy: serve: --backend: "db:99999": port "99999" is not a number from 1 to 65535`},
		{"bad metrics flag", []string{"serve", "--listen", "127.0.0.1:3307", "--backend", "127.0.0.1:3306", "--metrics", "9307"}, 2,
			`slotproxy: serve: --metrics: "9307": missing port in address (want HOST:PORT)`},
		{"metrics address in use", []string{"serve", "--listen", "127.0.0.1:3307", "--backend", "127.0.0.1:3306", "--metrics", busy.Addr().String()}, 1,
			`slotproxy: metrics.listen: listen tcp ` + busy.Addr().String() + `: bind: address already in use`},
		{"positional argument", []string{"serve", "--listen", "127.0.0.1:3307", "--backend", "127.0.0.1:3306", "now"}, 2,
			`slotproxy: serve: unexpected argument "now"`},
		{"listen flag alone", []string{"serve", "--listen", "127.0.0.1:3307"}, 2,
			`slotproxy: serve: --config is required unless both --listen and --backend are given`},
		{"backend flag alone", []string{"serve", "--backend", "127.0.0.1:3306"}, 2,
			`slotproxy: serve: --config is required unless both --listen and --backend are given`},
		{"nothing", []string{"serve"}, 2,
			`slotproxy: serve: --config is required unless both --listen and --backend are given`},
		{"YAML syntax error", []string{"serve", "--config", badYAML}, 1,
			`slotproxy: ` + badYAML + `:3: invalid YAML: mapping values are not allowed in this context`},
		{"bad TLS mode", []string{"serve", "--config", badMode}, 1,
			`slotproxy: ` + badMode + `:7: backend.tls.mode: unknown mode "maybe" (want disabled, preferred, required, verify-ca, verify-identity)`},
		{"config without listen", []string{"serve", "--config", noListen}, 1,
			`slotproxy: ` + noListen + `: listen: not set (add it to the file or pass --listen)`},
		{"missing config file", []string{"serve", "--config", missing}, 1,
			`slotproxy: reading config: open ` + missing + `: no such file or directory`},
		{"listen address in use", []string{"serve", "--listen", busy.Addr().String(), "--backend", "127.0.0.1:3306", "--metrics", ""}, 1,
			`slotproxy: listen tcp ` + busy.Addr().String() + `: bind: address already in use`},
		{"help for unknown command", []string{"help", "serv"}, 2,
			`slotproxy: help: unknown command "serv"`},
		{"version with argument", []string{"version", "now"}, 2,
			`slotproxy: version: unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			if stderr != tc.want+"\n" {
				t.Errorf("stderr:\n got %q\nwant %q", stderr, tc.want+"\n")
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"help"}, []string{"Usage: slotproxy COMMAND", "serve", "migrate", "explain", "check", "version", "help"}},
		{[]string{"help", "migrate"}, []string{"Usage: slotproxy migrate --config FILE [--backend HOST:PORT]", "-config FILE", "-backend HOST:PORT"}},
		{[]string{"help", "explain"}, []string{"Usage: slotproxy explain --config FILE [--backend HOST:PORT] [--db NAME] SQL", "-db NAME"}},
		{[]string{"--help"}, []string{"Usage: slotproxy COMMAND"}},
		{[]string{"help", "serve"}, []string{"Usage: slotproxy serve --config FILE", "-listen HOST:PORT", "-backend HOST:PORT", "-config FILE"}},
		{[]string{"serve", "-h"}, []string{"Usage: slotproxy serve", "-metrics HOST:PORT", "SIGHUP", "/readyz"}},
		{[]string{"help", "check"}, []string{"Usage: slotproxy check --config FILE [--backend HOST:PORT]", "-backend HOST:PORT", "read-only"}},
		{[]string{"version"}, []string{"slotproxy ", "go1."}},
	} {
		stdout, stderr, code := runCLI(t, tc.args...)
		if code != 0 || stderr != "" {
			t.Errorf("slotproxy %q: exit status %d, stderr %q; want 0 and nothing", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("slotproxy %q: stdout lacks %q:\n%s", tc.args, w, stdout)
			}
		}
	}
}

// TestServeLifecycle starts serve, checks that it accepts a client and
// relays it to the backend, then sends SIGTERM and expects a clean exit.
// Unlike the other tests it depends on proxy.Server working: with a Serve
// that returns at once, serve exits 1 ("proxy stopped serving without being
// asked to") before the client connects or the SIGTERM is sent. Under -race
// the binary is built with the race detector, which fails the test (exit
// status 66) on any data race in serve or the proxy.
func TestServeLifecycle(t *testing.T) {
	backend := newFakeBackend(t)
	for _, tc := range []struct {
		name string
		args func(listen string) []string
	}{
		{"flags only", func(listen string) []string {
			return []string{"serve", "--listen", listen, "--backend", backend.addr, "--metrics", ""}
		}},
		{"flags override the file", func(listen string) []string {
			path := writeFile(t, "config.yaml", "listen: 127.0.0.1:1\nbackend: 127.0.0.1:1\ntimeouts:\n  shutdown: 5s\nmetrics:\n  listen: 127.0.0.1:2\n")
			return []string{"serve", "--config", path, "--listen", listen, "--backend", backend.addr, "--metrics", freeAddr(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen := freeAddr(t)
			p := startServe(t, tc.args(listen)...)

			line := p.waitFor(t, "msg=listening")
			if want := "listen=" + listen + " backend=" + backend.addr; !strings.Contains(line, want) {
				t.Errorf("listening line %q lacks %q", line, want)
			}
			client, err := net.DialTimeout("tcp", listen, 5*time.Second)
			if err != nil {
				t.Fatalf("connecting to serve: %v\nstderr:\n%s", err, p.stderr())
			}
			defer client.Close()
			backend.waitConn(t) // the proxy dialed the backend for our client

			// Stub-dependent from here on: serve must still be running.
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatalf("SIGTERM: %v (serve already exited? with a stub proxy.Serve it does)\nstderr:\n%s", err, p.stderr())
			}
			select {
			case err := <-p.exited:
				out := p.stderr()
				if err != nil && strings.Contains(out, "WARNING: DATA RACE") {
					t.Fatalf("serve after SIGTERM: %v: the race detector found a data race in the binary:\n%s", err, out)
				}
				if err != nil {
					t.Fatalf("serve after SIGTERM: %v, want exit status 0\nstderr:\n%s", err, out)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("serve still running 10s after SIGTERM\nstderr:\n%s", p.stderr())
			}
			if out := p.stderr(); !strings.Contains(out, "msg=stopped") || strings.Contains(out, "slotproxy: ") {
				t.Errorf("want a clean stop in the log, got:\n%s", out)
			}
		})
	}
}

// process is a running slotproxy whose stderr is collected line by line.
type process struct {
	cmd    *exec.Cmd
	exited chan error // the result of Wait, once stderr is drained

	mu   sync.Mutex
	all  []string      // every stderr line so far
	next int           // all[:next] have been examined by waitFor
	done bool          // stderr ended
	more chan struct{} // a line arrived or stderr ended (capacity 1)
}

// startServe starts slotproxy with args; the test kills it if it is still
// running at the end. Its stderr is read all the time, whatever the test
// does: a proxy whose log pipe filled up would block on its next log line.
func startServe(t testing.TB, args ...string) *process {
	t.Helper()
	cmd := exec.Command(binary, args...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, exited: make(chan error, 1), more: make(chan struct{}, 1)}
	signal := func() {
		select {
		case p.more <- struct{}{}:
		default:
		}
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.all = append(p.all, sc.Text())
			p.mu.Unlock()
			signal()
		}
		p.mu.Lock()
		p.done = true
		p.mu.Unlock()
		signal()
		p.exited <- cmd.Wait() // only after the pipe is drained, as Wait requires
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return p
}

// waitFor returns the first stderr line containing s that an earlier
// waitFor has not examined, failing the test if the process ends or 10s
// pass first.
func (p *process) waitFor(t testing.TB, s string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		for p.next < len(p.all) {
			line := p.all[p.next]
			p.next++
			if strings.Contains(line, s) {
				p.mu.Unlock()
				return line
			}
		}
		done := p.done
		p.mu.Unlock()
		if done {
			t.Fatalf("serve ended before logging %q\nstderr:\n%s", s, p.stderr())
		}
		select {
		case <-p.more:
		case <-timeout:
			t.Fatalf("serve did not log %q within 10s\nstderr:\n%s", s, p.stderr())
		}
	}
}

// stderr returns what the process wrote to stderr so far, after giving it
// half a second to write more (less once stderr has ended).
func (p *process) stderr() string {
	deadline := time.After(500 * time.Millisecond)
	for {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		if done {
			break
		}
		select {
		case <-p.more:
			continue
		case <-deadline:
		}
		break
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.all, "\n")
}

// fakeBackend is a TCP listener that accepts connections and never answers,
// so a proxied client stays in the handshake.
type fakeBackend struct {
	addr  string
	conns chan net.Conn
}

func newFakeBackend(t *testing.T) *fakeBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBackend{addr: ln.Addr().String(), conns: make(chan net.Conn, 100)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-b.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return b
}

// waitConn waits up to 10s for a connection to the backend.
func (b *fakeBackend) waitConn(t *testing.T) {
	t.Helper()
	select {
	case c := <-b.conns:
		t.Cleanup(func() { c.Close() })
	case <-time.After(10 * time.Second):
		t.Fatal("no connection reached the backend within 10s")
	}
}
