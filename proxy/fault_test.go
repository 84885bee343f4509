package proxy_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// TestFaults ends a session's backend connection, or its client, at every
// point of a command's life: idle, while a relayed statement runs, while
// the executor waits inside a guarded write, during COM_CHANGE_USER, and
// while a result streams. Each time the session ends, the client is told
// (an ERR, or the connection closed the way the server closes it), and
// nothing is left behind: goroutines, file descriptors and backend
// connections return to where they were.
func TestFaults(t *testing.T) {
	setupDiffSchemas(t)
	p := startLeakProxy(t, func(c *proxy.Config) {
		c.Rewriter = rewrite.New(diffCatalog(), rewrite.Options{})
	})
	defer p.close(t)
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	root.SetMaxIdleConns(1)
	_ = queryString(t, root, "SELECT 1") // the pool's connection and goroutine count in the baseline
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	kill := func(t *testing.T, id uint32) {
		t.Helper()
		if _, err := root.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
			t.Fatal(err)
		}
	}
	// lockRow holds the base row of repos 1 until the returned function
	// is called.
	lockRow := func(t *testing.T) func() {
		t.Helper()
		conn, err := root.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, conn, "BEGIN")
		mustExec(t, conn, "SELECT * FROM "+ruledSchema+".repos WHERE id = 1 FOR UPDATE")
		return func() {
			mustExec(t, conn, "ROLLBACK")
			_ = conn.Close()
		}
	}
	// waitState waits until backend connection id shows state s (a
	// substring of the process list's STATE or INFO).
	waitState := func(t *testing.T, id uint32, s string) {
		t.Helper()
		if _, ok := waitFor(10*time.Second, func() (int, bool) {
			var state, info sql.NullString
			_ = root.QueryRow("SELECT STATE, INFO FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&state, &info)
			return 0, strings.Contains(state.String+" "+info.String, s)
		}); !ok {
			t.Fatalf("backend connection %d never showed %q", id, s)
		}
	}
	login := func(t *testing.T) *wireConn {
		t.Helper()
		w, err := loginWire(p.addr, ruledSchema, true, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		return w
	}
	// told: the client gets nothing but ERR packets, then the close.
	told := func(t *testing.T, w *wireConn) {
		t.Helper()
		pkts, err := w.readUntilClosed(10 * time.Second)
		if err != nil {
			t.Fatalf("the client was not told: %v", err)
		}
		for _, pkt := range pkts {
			if pkt[0] != 0xff {
				t.Fatalf("unexpected packet %q after the fault", pkt[:min(len(pkt), 16)])
			}
		}
	}
	changeUserSwitch := func(t *testing.T, w *wireConn) {
		t.Helper()
		payload := append([]byte{gomysql.COM_CHANGE_USER}, testdb.User...)
		payload = append(payload, 0, 0, 0, 0x2d, 0)
		payload = append(payload, "dummy_plugin\x00"...)
		payload = append(payload, 0)
		if err := w.command(payload); err != nil {
			t.Fatal(err)
		}
		sw, _, err := w.readFull()
		if err != nil || sw[0] != 0xfe {
			t.Fatalf("change user: %q, %v; want an auth switch request", sw, err)
		}
	}

	cases := []struct {
		name  string
		fault func(t *testing.T, w *wireConn)
	}{
		{"backend killed while idle", func(t *testing.T, w *wireConn) {
			kill(t, w.connID)
			told(t, w)
		}},
		{"backend killed while a relayed statement runs", func(t *testing.T, w *wireConn) {
			if err := w.query("SELECT SLEEP(30)"); err != nil {
				t.Fatal(err)
			}
			waitState(t, w.connID, "SLEEP")
			kill(t, w.connID)
			told(t, w)
		}},
		{"backend killed inside a guarded write", func(t *testing.T, w *wireConn) {
			unlock := lockRow(t)
			defer unlock()
			if err := w.query("UPDATE repos SET downloads = 7 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			waitState(t, w.connID, "FOR UPDATE")
			kill(t, w.connID)
			told(t, w)
		}},
		{"backend killed during COM_CHANGE_USER", func(t *testing.T, w *wireConn) {
			changeUserSwitch(t, w)
			kill(t, w.connID)
			time.Sleep(100 * time.Millisecond)
			_ = w.writePacket(gomysql.CalcNativePassword(bytes.Repeat([]byte{1}, 20), []byte(testdb.Password)), 2)
			told(t, w)
		}},
		{"client gone inside a guarded write", func(t *testing.T, w *wireConn) {
			unlock := lockRow(t)
			if err := w.query("UPDATE repos SET downloads = 7 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			waitState(t, w.connID, "FOR UPDATE")
			_ = w.Close()
			unlock()
		}},
		{"client gone while a result streams", func(t *testing.T, w *wireConn) {
			if err := w.query("SELECT seq, REPEAT('x', 1000) FROM seq_1_to_200000"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.readFull(); err != nil {
				t.Fatal(err)
			}
			_ = w.Close()
		}},
		{"client gone during COM_CHANGE_USER", func(t *testing.T, w *wireConn) {
			changeUserSwitch(t, w)
			_ = w.Close()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := login(t)
			id := w.connID
			tc.fault(t, w)
			if n, ok := waitFor(10*time.Second, func() (int, bool) {
				var n int
				_ = root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n)
				return n, n == 0
			}); !ok {
				t.Errorf("backend connection %d still open (%d)", id, n)
			}
			if n, ok := waitFor(10*time.Second, func() (int, bool) {
				n := runtime.NumGoroutine()
				return n, n <= baseG+1 // the subtest's own goroutine
			}); !ok {
				t.Errorf("%d goroutines after the session ended, %d before", n, baseG)
			}
			if n, ok := waitFor(10*time.Second, func() (int, bool) {
				_ = w.Close()
				n := openFDs(t)
				return n, n <= baseFD
			}); !ok {
				t.Errorf("%d file descriptors after the session ended, %d before", n, baseFD)
			}
		})
	}
	t.Logf("after the faults: %d goroutines (%d before), %d file descriptors (%d before)", runtime.NumGoroutine(), baseG, openFDs(t), baseFD)
}

// TestShutdownBoundedByTimeout: Shutdown returns within its timeout even
// when sessions are stuck in statements that outlast it, and every session
// is gone afterwards (SIGTERM always stops the process).
func TestShutdownBoundedByTimeout(t *testing.T) {
	p := startLeakProxy(t, nil)
	baseG := runtime.NumGoroutine()
	var victims []*wireConn
	for range 5 {
		w, err := loginWire(p.addr, testdb.DBName, true, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.query("SELECT SLEEP(60)"); err != nil {
			t.Fatal(err)
		}
		victims = append(victims, w)
	}
	idle, err := loginWire(p.addr, testdb.DBName, true, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err = p.srv.Shutdown(ctx)
	took := time.Since(start)
	if err == nil || took > 3*time.Second {
		t.Fatalf("Shutdown returned %v after %v, want the timeout's error after about 1s", err, took)
	}
	if _, err := idle.readUntilClosed(5 * time.Second); err != nil {
		t.Fatalf("idle client: %v", err)
	}
	for _, w := range victims {
		if _, err := w.readUntilClosed(5 * time.Second); err != nil {
			t.Fatalf("busy client: %v", err)
		}
	}
	if n, ok := waitFor(5*time.Second, func() (int, bool) {
		n := runtime.NumGoroutine()
		return n, n <= baseG
	}); !ok {
		t.Fatalf("%d goroutines after Shutdown, %d before", n, baseG)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
}
