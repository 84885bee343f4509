package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestBackendUnreachable(t *testing.T) {
	dead := freeAddr(t)
	p := startProxy(t, func(c *proxy.Config) { c.Backend = dead })
	for range 3 { // the proxy keeps serving: every attempt gets the same clear error
		db := openDSN(t, p.dsn(testdb.User, testdb.Password, "", "timeout=5s"))
		start := time.Now()
		err := db.Ping()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != proxy.ErrCodeBackend || string(me.SQLState[:]) != proxy.SQLStateBackend || !strings.Contains(me.Message, dead) {
			t.Fatalf("Ping with the backend down: %v, want error %d (%s) naming %s", err, proxy.ErrCodeBackend, proxy.SQLStateBackend, dead)
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("error took %v", time.Since(start))
		}
	}
}

// TestBackendLostMidSession kills one backend connection: its client's
// connection is closed at once, as a server crash would look, and other
// clients carry on.
func TestBackendLostMidSession(t *testing.T) {
	p := startProxy(t, nil)
	victim := dialRaw(t, p.addr, true)
	bystander := p.open(t, "")
	id := victim.scalar("SELECT CONNECTION_ID()")
	if err := testdb.Shared().Exec("KILL " + id); err != nil {
		t.Fatal(err)
	}
	// The victim's socket ends without it sending anything (an ERR from the
	// server announcing the kill may come first).
	_ = victim.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		pkt, err := victim.ReadPacket()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("client connection still open 5s after its backend connection died")
			}
			break
		}
		if pkt[0] != 0xff {
			t.Fatalf("unexpected packet %q after kill", pkt)
		}
	}
	if got := queryString(t, bystander, "SELECT 1"); got != "1" {
		t.Fatalf("bystander: %q", got)
	}
}

func TestGarbageClient(t *testing.T) {
	p := startProxy(t, nil)
	healthy := p.open(t, "")
	healthy.SetMaxIdleConns(1)
	if got := queryString(t, healthy, "SELECT 1"); got != "1" {
		t.Fatal(got)
	}
	cases := map[string]func(t *testing.T) net.Conn{
		"http request instead of a handshake": func(t *testing.T) net.Conn {
			c := dialTCP(t, p.addr)
			readPacket(t, c) // greeting
			_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			return c
		},
		"truncated handshake response": func(t *testing.T) net.Conn {
			c := dialTCP(t, p.addr)
			readPacket(t, c)
			_, _ = c.Write([]byte{10, 0, 0, 1, 0x85, 0xa6})
			_ = c.(*net.TCPConn).CloseWrite()
			return c
		},
		"bad sequence id after login": func(t *testing.T) net.Conn {
			r := dialRaw(t, p.addr, true)
			_, _ = r.Conn.Conn.Conn.Write([]byte{1, 0, 0, 7, gomysql.COM_PING})
			return r.Conn.Conn.Conn
		},
		"empty command packet": func(t *testing.T) net.Conn {
			r := dialRaw(t, p.addr, true)
			_, _ = r.Conn.Conn.Conn.Write([]byte{0, 0, 0, 0})
			return r.Conn.Conn.Conn
		},
	}
	for name, attack := range cases {
		t.Run(name, func(t *testing.T) {
			c := attack(t)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if err := drainUntilClosed(c); err != nil {
				t.Fatalf("connection not closed: %v", err)
			}
			if got := queryString(t, healthy, "SELECT 2"); got != "2" {
				t.Fatalf("healthy connection after attack: %q", got)
			}
		})
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

func readPacket(t *testing.T, c net.Conn) []byte {
	t.Helper()
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
	if _, err := io.ReadFull(c, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// drainUntilClosed reads until the peer closes (nil) or the deadline hits.
func drainUntilClosed(c net.Conn) error {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return err
			}
			return nil
		}
	}
}

func TestHandshakeDeadline(t *testing.T) {
	p := startProxy(t, func(c *proxy.Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	c := dialTCP(t, p.addr)
	readPacket(t, c) // the greeting, then silence from the client
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := drainUntilClosed(c); err != nil {
		t.Fatalf("silent client not disconnected: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("disconnected after %v, want about 300ms", d)
	}
	db := p.open(t, "")
	if got := queryString(t, db, "SELECT 1"); got != "1" {
		t.Fatal(got)
	}
}

// TestMaxUnauthenticated: with both handshake slots held by silent
// clients (greeted by the backend) and the one place of the handshake
// queue held by a silent client the proxy greeted itself, one more
// connection gets ERR 1040 at once; once the queue has room, a client that
// answers its greeting gets in although both slots are still held by
// silent clients: it takes over the slot of one that has waited ParkAfter
// (parked), and that one still logs in when it finally answers.
func TestMaxUnauthenticated(t *testing.T) {
	const parkAfter = 300 * time.Millisecond
	p := startProxy(t, func(c *proxy.Config) {
		c.MaxUnauthenticated = 2
		c.MaxHandshakeQueue = 1
		c.ParkAfter = parkAfter
		// Long enough that a loaded machine does not drop the idle
		// handshakes (freeing their places) before the test is done.
		c.HandshakeTimeout = time.Minute
	})
	var silent []*wireConn
	for range 2 {
		w, err := dialWire(p.addr, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		if err := w.greet(); err != nil {
			t.Fatal(err)
		}
		if w.connID == 0 {
			t.Fatalf("a connection greeted while slots were free got connection id 0: not the backend's greeting")
		}
		silent = append(silent, w)
	}
	queued := dialTCP(t, p.addr)
	g := readPacket(t, queued) // greeted by the proxy itself: every slot is taken
	if g[0] != 10 {
		t.Fatalf("the queued connection got %q, want a greeting", g)
	}
	if n := p.srv.HandshakesWaiting(); n != 1 {
		t.Fatalf("HandshakesWaiting = %d, want 1 (the queued connection)", n)
	}
	// The queue is full: one more is refused at once.
	err := openDSN(t, p.dsn(testdb.User, testdb.Password, "", "timeout=5s")).Ping()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 {
		t.Fatalf("a connection over the queue: %v, want 1040", err)
	}
	_ = queued.Close()
	for until := time.Now().Add(10 * time.Second); p.srv.HandshakesWaiting() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(until) {
			t.Fatalf("the closed queued connection still counts as waiting after 10 s")
		}
	}
	// Both slots are still held by silent clients; a client that answers
	// gets in once one of them has waited parkAfter.
	start := time.Now()
	if err := openDSN(t, p.dsn(testdb.User, testdb.Password, "", "timeout=9s")).Ping(); err != nil {
		t.Fatalf("a client that answers while silent clients hold every slot: %v", err)
	}
	if d := time.Since(start); d > parkAfter+2*time.Second {
		t.Fatalf("the client got in after %v; a silent holder is parked after %v", d, parkAfter)
	}
	// The parked client answers late: it gets a backend connection of
	// its own again and logs in (an auth switch gives it the new scramble).
	for i, w := range silent {
		if err := w.login(testdb.User, testdb.Password, testdb.DBName, gomysql.CLIENT_DEPRECATE_EOF); err != nil {
			t.Fatalf("silent client %d answering late: %v", i, err)
		}
		stillServes(t, w)
	}
	if !strings.Contains(p.logs.String(), "taken over while waiting for the client") {
		t.Fatalf("no handshake was parked:\n%s", p.logs.String())
	}
}

func TestPanicIsolated(t *testing.T) {
	p := startProxyWith(t, func(s *proxy.Server) {
		proxy.SetCommandHook(s, func(cmd byte) {
			if cmd == gomysql.COM_DEBUG {
				panic("injected fault")
			}
		})
	})
	other := p.open(t, "")
	victim := dialRaw(t, p.addr, true)
	victim.command(gomysql.COM_DEBUG)
	if _, err := victim.ReadPacket(); err == nil {
		t.Fatal("connection survived a panic")
	}
	if got := queryString(t, other, "SELECT 1"); got != "1" {
		t.Fatal(got)
	}
	logs := p.logs.String()
	if !strings.Contains(logs, "injected fault") || !strings.Contains(logs, "goroutine") {
		t.Fatalf("panic not logged with its stack:\n%s", logs)
	}
}

// TestShutdownLetsStatementsFinish: Shutdown stops accepting, lets a running
// statement complete and deliver its result, closes idle connections, and
// leaves no goroutine behind.
func TestShutdownLetsStatementsFinish(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := startProxy(t, nil)
	busy := p.open(t, "")
	idle := p.open(t, "")
	if err := idle.Ping(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var slept sql.NullInt64
	var busyErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		busyErr = busy.QueryRow("SELECT SLEEP(1)").Scan(&slept)
	}()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wg.Wait()
	if busyErr != nil || !slept.Valid || slept.Int64 != 0 {
		t.Fatalf("statement in flight: %v %v, want its result", busyErr, slept)
	}
	if _, err := net.DialTimeout("tcp", p.addr, time.Second); err == nil {
		t.Fatal("proxy still accepting after Shutdown")
	}
	if err := <-p.done; !errors.Is(err, proxy.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	p.done <- proxy.ErrServerClosed // for the cleanup
	busy.Close()
	idle.Close()
}
