package proxy_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/goleak"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// leakProxy is a proxy the test closes itself, before checking for leaks
// (startProxy closes its proxy only in the test's cleanup, after deferred
// checks ran).
type leakProxy struct {
	srv  *proxy.Server
	addr string
	logs *syncBuffer
	done chan error
}

func startLeakProxy(t *testing.T, mutate func(*proxy.Config)) *leakProxy {
	t.Helper()
	logs := &syncBuffer{}
	cfg := proxy.Config{
		Backend: testdb.Shared().Addr,
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := proxy.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &leakProxy{srv: srv, addr: ln.Addr().String(), logs: logs, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ln) }()
	return p
}

// close closes the proxy and waits for Serve to return.
func (p *leakProxy) close(t *testing.T) {
	t.Helper()
	if err := p.srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if !errors.Is(err, proxy.ErrServerClosed) {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	if t.Failed() {
		t.Logf("proxy log (last 8 KiB):\n%s", tail(p.logs.String(), 8<<10))
	}
	if strings.Contains(p.logs.String(), "panic") {
		t.Fatalf("the proxy logged a panic:\n%s", tail(p.logs.String(), 8<<10))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count file descriptors: %v", err)
	}
	return len(entries)
}

// waitFor polls cond until it holds or d passes; it returns the last value
// cond saw.
func waitFor(d time.Duration, cond func() (int, bool)) (int, bool) {
	deadline := time.Now().Add(d)
	for {
		n, ok := cond()
		if ok || time.Now().After(deadline) {
			return n, ok
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeakConnectCycles: 10,000 connections that end every way a client can
// end one (COM_QUIT, abrupt close after login, abrupt close mid-handshake,
// close before even reading the greeting, close right after sending a query)
// leave no goroutine and no file descriptor behind: the sessions are gone
// as soon as the clients are (before Close), and the process is back to its
// baseline after Close.
func TestLeakConnectCycles(t *testing.T) {
	const cycles, workers = 10_000, 12
	baseFDs := openFDs(t)
	baseG := runtime.NumGoroutine()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := startLeakProxy(t, func(c *proxy.Config) { c.MaxUnauthenticated = 4 * workers })

	kinds := []string{"COM_QUIT", "close after login", "close mid-handshake", "close before the greeting", "close after a query"}
	var counts [5]atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > cycles {
					return
				}
				kind := int(i % int64(len(kinds)))
				if err := connectCycle(p.addr, kind); err != nil {
					errs <- fmt.Errorf("cycle %d (%s): %w", i, kinds[kind], err)
					return
				}
				counts[kind].Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var summary []string
	for i, k := range kinds {
		summary = append(summary, fmt.Sprintf("%s %d", k, counts[i].Load()))
	}
	t.Logf("%d connect/disconnect cycles with %d clients in %v (%.0f/s): %s", cycles, workers, elapsed.Round(time.Millisecond),
		float64(cycles)/elapsed.Seconds(), strings.Join(summary, ", "))
	if t.Failed() {
		p.close(t)
		return
	}

	// Sessions end with their clients: only the Serve goroutine is left.
	if n, ok := waitFor(5*time.Second, func() (int, bool) {
		n := runtime.NumGoroutine()
		return n, n <= baseG+1+2
	}); !ok {
		t.Errorf("%d goroutines 5s after the last client left, %d before the proxy started", n, baseG)
	}
	if n, ok := waitFor(5*time.Second, func() (int, bool) {
		n := openFDs(t)
		return n, n <= baseFDs+1+3 // the listener
	}); !ok {
		t.Errorf("%d open file descriptors 5s after the last client left, %d before the proxy started", n, baseFDs)
	}
	// The proxy still serves.
	w, err := loginWire(p.addr, testdb.DBName, true, 10*time.Second)
	if err != nil {
		t.Fatalf("login after the cycles: %v", err)
	}
	stillServes(t, w)
	_ = w.Close()

	p.close(t)
	if n, ok := waitFor(5*time.Second, func() (int, bool) {
		n := runtime.NumGoroutine()
		return n, n <= baseG+2
	}); !ok {
		t.Errorf("%d goroutines after Close, %d before the proxy started", n, baseG)
	}
	if n, ok := waitFor(5*time.Second, func() (int, bool) {
		n := openFDs(t)
		return n, n <= baseFDs+3
	}); !ok {
		t.Errorf("%d open file descriptors after Close, %d before the proxy started", n, baseFDs)
	}
}

// connectCycle opens one connection and ends it the given way.
func connectCycle(addr string, kind int) error {
	const timeout = 20 * time.Second
	switch kind {
	case 3: // close before the greeting
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		return c.Close()
	case 2: // close mid-handshake: greeting read, half a response sent
		w, err := dialWire(addr, timeout)
		if err != nil {
			return err
		}
		defer w.Close()
		if err := w.greet(); err != nil {
			return err
		}
		_, err = w.Write([]byte{80, 0, 0, 1, 0x85, 0xa6, 0x3f})
		return err
	}
	w, err := loginWire(addr, testdb.DBName, kind%2 == 0, timeout)
	if err != nil {
		return err
	}
	defer w.Close()
	switch kind {
	case 0: // COM_QUIT, then wait for the proxy to close
		if err := w.command([]byte{gomysql.COM_QUIT}); err != nil {
			return err
		}
		if _, err := w.readUntilClosed(timeout); err != nil {
			return fmt.Errorf("after COM_QUIT: %w", err)
		}
	case 4: // a query, then gone before the answer
		if err := w.query("SELECT SLEEP(0.01), REPEAT('x', 100000)"); err != nil {
			return err
		}
		if tc, ok := w.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // an RST, as from a crashed client
		}
	}
	return nil
}

// TestLeakBackendKilled: backend connections killed on the server (KILL)
// end their client sessions: idle ones, ones waiting for a running
// statement, and ones whose client had stopped reading a large result once
// that client reads again. Afterwards no goroutine of theirs is left.
func TestLeakBackendKilled(t *testing.T) {
	const idle, busy, stalled = 20, 15, 15
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := startLeakProxy(t, nil)
	baseG := runtime.NumGoroutine()

	type victim struct {
		w    *wireConn
		kind string
	}
	var victims []victim
	for i := range idle + busy + stalled {
		w, err := loginWire(p.addr, testdb.DBName, true, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		v := victim{w: w, kind: "idle"}
		switch {
		case i >= idle+busy:
			v.kind = "stalled reader"
			if err := w.query("SELECT seq, REPEAT('x', 1000) FROM " + testdb.Seq(20000)); err != nil {
				t.Fatal(err)
			}
		case i >= idle:
			v.kind = "statement running"
			if err := w.query("SELECT SLEEP(20)"); err != nil {
				t.Fatal(err)
			}
		}
		victims = append(victims, v)
	}
	// One goroutine per session, and an idle watcher for a session
	// whose client is idle.
	sessions := idle + busy + stalled
	// (The watchers start after a second of idleness; a loaded machine
	// may take longer to schedule them.)
	if n, ok := waitFor(20*time.Second, func() (int, bool) {
		n := runtime.NumGoroutine()
		return n, n >= baseG+sessions+idle
	}); !ok {
		t.Fatalf("%d goroutines with %d sessions open, %d before", n, sessions, baseG)
	}
	time.Sleep(200 * time.Millisecond) // the stalled results fill the socket buffers
	kills := make([]string, 0, sessions)
	for _, v := range victims {
		kills = append(kills, fmt.Sprintf("KILL %d", v.w.connID))
	}
	if err := testdb.Shared().Exec(kills...); err != nil {
		t.Fatal(err)
	}
	// Idle and busy clients see their connection end at once.
	for _, v := range victims {
		if v.kind == "stalled reader" {
			continue
		}
		pkts, err := v.w.readUntilClosed(5 * time.Second)
		if err != nil {
			t.Fatalf("%s client: %v after its backend connection was killed", v.kind, err)
		}
		for _, pkt := range pkts {
			if pkt[0] != 0xff {
				t.Fatalf("%s client: unexpected packet %q after the kill", v.kind, pkt[:min(len(pkt), 16)])
			}
		}
	}
	// Sessions whose client does not read stay until it reads (the proxy
	// has no write deadline): count them, then let the clients read.
	time.Sleep(500 * time.Millisecond)
	left := runtime.NumGoroutine() - baseG
	t.Logf("%d goroutines above baseline after the kills while %d clients are not reading", left, stalled)
	for _, v := range victims {
		if v.kind != "stalled reader" {
			continue
		}
		if _, err := v.w.readUntilClosed(20 * time.Second); err != nil {
			t.Fatalf("stalled reader: %v after its backend connection was killed", err)
		}
	}
	if n, ok := waitFor(5*time.Second, func() (int, bool) {
		n := runtime.NumGoroutine()
		return n, n <= baseG+2
	}); !ok {
		t.Errorf("%d goroutines after every killed session ended, %d before", n, baseG)
	}
	p.close(t)
}
