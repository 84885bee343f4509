package proxy_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// needFDs fails the test when the process may not open n file
// descriptors (Go raises the soft limit to the hard one at start).
func needFDs(t *testing.T, n uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < n {
		t.Fatalf("this test needs %d file descriptors; RLIMIT_NOFILE allows %d (hard limit %d): raise it (ulimit -n, LimitNOFILE=)", n, rl.Cur, rl.Max)
	}
}

// idleSocket is a client that connects, reads its greeting and then sends
// nothing more; with tls set it first sends an SSL request and the first
// bytes of a TLS ClientHello, and stops in the middle of the TLS handshake.
type idleSocket struct {
	conn    net.Conn
	greeted bool
	proxied bool // the greeting was the proxy's own (connection id 0)
}

func openIdleSocket(addr string, tls bool) (*idleSocket, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	s := &idleSocket{conn: c}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var h [4]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return s, fmt.Errorf("no greeting: %w", err)
	}
	g := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
	if _, err := io.ReadFull(br, g); err != nil {
		return s, fmt.Errorf("truncated greeting: %w", err)
	}
	if len(g) < 20 || g[0] != 10 {
		return s, fmt.Errorf("not a greeting: %q", g)
	}
	s.greeted = true
	if nul := strings.IndexByte(string(g[1:]), 0); nul >= 0 && len(g) >= nul+6 {
		s.proxied = binary.LittleEndian.Uint32(g[nul+2:]) == 0
	}
	if tls {
		req := binary.LittleEndian.AppendUint32(nil, gomysql.CLIENT_PROTOCOL_41|gomysql.CLIENT_SECURE_CONNECTION|gomysql.CLIENT_SSL|gomysql.CLIENT_PLUGIN_AUTH)
		req = binary.LittleEndian.AppendUint32(req, 1<<24)
		req = append(req, 45)
		req = append(req, make([]byte, 23)...)
		pkt := append([]byte{byte(len(req)), 0, 0, 1}, req...)
		// A TLS record header announcing a 200-byte ClientHello, and its
		// first byte: the server waits for the rest.
		pkt = append(pkt, 0x16, 0x03, 0x01, 0x00, 0xc8, 0x01)
		if _, err := c.Write(pkt); err != nil {
			return s, err
		}
	}
	return s, nil
}

// TestIdleSocketsDoNotLockOutLogins: 1,000 sockets sit idle, half after
// reading their greeting and half in the middle of a TLS handshake, with
// the default limits (64 handshake slots). Every one of them is greeted at
// once, they hold no more backend connections than there are slots, and
// meanwhile real clients (the mariadb CLI, go-sql-driver with and without
// TLS, the account of another auth plugin) log in and query, each in under
// a second: sockets that send nothing hold no slot a login needs.
func TestIdleSocketsDoNotLockOutLogins(t *testing.T) {
	const idle = 1000
	needFDs(t, 2*idle+1000)
	reg := prometheus.NewRegistry()
	metrics := proxy.NewMetrics(reg)
	p := startProxy(t, func(c *proxy.Config) {
		c.ClientTLS = certs.ServerTLS()
		c.HandshakeTimeout = 30 * time.Second // they stay idle for the whole test
		c.Metrics = metrics
	})
	registerTLS(t, "slowloris-verify", certs.ClientTLS("127.0.0.1"))
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	root.SetMaxOpenConns(1)
	threads := func() int {
		var name string
		var n int
		if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := threads()

	// A login that fills the proxy's greeting template, as in production
	// (the proxy has served someone before the flood).
	if err := p.open(t, "").Ping(); err != nil {
		t.Fatal(err)
	}

	sockets := make([]*idleSocket, idle)
	errs := make([]error, idle)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := range idle {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sockets[i], errs[i] = openIdleSocket(p.addr, i%2 == 1)
		}()
	}
	wg.Wait()
	defer func() {
		for _, s := range sockets {
			if s != nil {
				_ = s.conn.Close()
			}
		}
	}()
	proxied := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("idle socket %d: %v", i, err)
		}
		if sockets[i].proxied {
			proxied++
		}
	}
	t.Logf("%d idle sockets greeted in %v, %d of them by the proxy itself", idle, time.Since(start).Round(time.Millisecond), proxied)
	if proxied < idle-64 {
		t.Fatalf("only %d of %d idle sockets were greeted by the proxy; with 64 slots at least %d should be", proxied, idle, idle-64)
	}
	if n := threads(); n > before+64+8 {
		t.Fatalf("the backend has %d connections during the idle flood, %d before: idle sockets hold backend connections beyond the 64 slots", n, before)
	}

	pUser, pPass, _ := pluginAccount()
	logins := []struct {
		name  string
		login func() error
	}{
		{"mariadb -e 'SELECT 1'", func() error {
			out, err := mariadbCLI(t, p.addr, testdb.User, testdb.Password, "-e", "SELECT 1")
			if err != nil || strings.TrimSpace(out) != "1\n1" && strings.TrimSpace(out) != "1" {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
		{"go-sql-driver", func() error { return selectOne(p.dsn(testdb.User, testdb.Password, testdb.DBName, "timeout=5s")) }},
		{"go-sql-driver over TLS", func() error {
			return selectOne(p.dsn(testdb.User, testdb.Password, testdb.DBName, "timeout=5s&tls=slowloris-verify"))
		}},
		{"go-sql-driver as " + pUser, func() error { return selectOne(p.dsn(pUser, pPass, "", "timeout=5s")) }},
	}
	// fill keeps every slot taken, as an attacker opening sockets would:
	// it opens idle sockets until one is greeted by the proxy.
	fill := func() {
		for {
			s, err := openIdleSocket(p.addr, false)
			if s != nil {
				sockets = append(sockets, s)
			}
			if err != nil {
				t.Fatalf("idle socket: %v", err)
			}
			if s.proxied {
				return
			}
		}
	}
	greetedBefore := metricValue(t, reg, "slotproxy_handshakes_proxy_greeted_total")
	var slowest time.Duration
	for round := range 3 {
		for _, l := range logins {
			fill()
			t0 := time.Now()
			if err := l.login(); err != nil {
				t.Fatalf("%s during the idle flood (round %d): %v", l.name, round, err)
			}
			d := time.Since(t0)
			slowest = max(slowest, d)
			if d > time.Second {
				t.Fatalf("%s took %v during the idle flood (round %d), want under 1 s", l.name, d, round)
			}
		}
	}
	greeted := metricValue(t, reg, "slotproxy_handshakes_proxy_greeted_total") - greetedBefore
	parked := metricValue(t, reg, "slotproxy_handshakes_parked_total")
	t.Logf("%d logins during the idle flood, the slowest in %v; %v greetings by the proxy meanwhile, %v handshakes parked",
		3*len(logins), slowest.Round(time.Millisecond), greeted, parked)
	// Every login found every slot taken: it was greeted by the proxy and
	// took over the slot of an idle socket.
	if want := float64(2 * 3 * len(logins)); greeted < want || parked < float64(3*len(logins)) {
		t.Fatalf("%v greetings by the proxy and %v parked handshakes during %d logins: the logins did not find the slots taken", greeted, parked, 3*len(logins))
	}
	for i, s := range sockets {
		// Still open and unanswered: the proxy closes them at the
		// handshake deadline only.
		_ = s.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := s.conn.Read(make([]byte, 1)); !isTimeout(err) {
			t.Fatalf("idle socket %d: %v, want it still open", i, err)
		}
	}
	if n := threads(); n > before+64+8 {
		t.Fatalf("the backend has %d connections after the logins, %d before", n, before)
	}
	noPanics(t, p)
}

// selectOne logs in with dsn and runs SELECT 1.
func selectOne(dsn string) error {
	db, err := openDB(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return fmt.Errorf("SELECT 1 = %d", one)
	}
	return nil
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// metricValue returns the value of the counter or gauge name (its first
// series) in reg, 0 when it has none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// TestProxyGreetedClients: with the only handshake slot held by an idle
// socket before each login, every client is greeted by the proxy itself,
// takes over the idle socket's slot once it answers, and authenticates
// again over its new backend connection's scramble (the backend's auth
// switch, relayed). Real clients of every kind log in that way: the
// server's default plugin and the other one (ed25519 or
// caching_sha2_password, fast and, on MySQL, full authentication), TLS,
// the mariadb CLI (and Oracle's mysql CLI on MySQL), COM_CHANGE_USER
// afterwards; a wrong password is refused as directly; a client that cannot
// take an auth switch is told to connect again. The handshake metrics count
// each outcome.
func TestProxyGreetedClients(t *testing.T) {
	dir := t.TempDir()
	ca, _, _, err := certs.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := proxy.NewMetrics(reg)
	p := startProxy(t, func(c *proxy.Config) {
		c.ClientTLS = certs.ServerTLS()
		c.MaxUnauthenticated = 1
		c.ParkAfter = time.Millisecond
		c.HandshakeTimeout = time.Minute
		c.Metrics = metrics
	})
	registerTLS(t, "greeted-verify", certs.ClientTLS("127.0.0.1"))
	if err := selectOne(p.dsn(testdb.User, testdb.Password, "", "")); err != nil {
		t.Fatal(err) // the first login gives the proxy a greeting to copy
	}
	var idle []*idleSocket
	t.Cleanup(func() {
		for _, s := range idle {
			_ = s.conn.Close()
		}
	})
	// hold makes sure an idle socket holds the only slot.
	hold := func() {
		t.Helper()
		for {
			s, err := openIdleSocket(p.addr, false)
			if s != nil {
				idle = append(idle, s)
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.proxied {
				return
			}
		}
	}
	greeted := func() float64 { return metricValue(t, reg, "slotproxy_handshakes_proxy_greeted_total") }
	// through runs login with the slot held, and checks that the login was
	// greeted by the proxy.
	through := func(name string, login func() error) {
		t.Helper()
		hold()
		before := greeted()
		if err := login(); err != nil {
			t.Fatalf("%s, greeted by the proxy: %v", name, err)
		}
		if greeted() < before+1 {
			t.Fatalf("%s was not greeted by the proxy", name)
		}
	}
	pUser, pPass, _ := pluginAccount()
	currentUser := func(dsn, want string) func() error {
		return func() error {
			db, err := openDB(dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			var got string
			if err := db.QueryRow("SELECT CURRENT_USER()").Scan(&got); err != nil {
				return err
			}
			if got != want+"@%" {
				return fmt.Errorf("CURRENT_USER() = %q, want %s@%%", got, want)
			}
			return nil
		}
	}
	through("go-sql-driver", currentUser(p.dsn(testdb.User, testdb.Password, "", ""), testdb.User))
	through("go-sql-driver as "+pUser, currentUser(p.dsn(pUser, pPass, "", ""), pUser))
	through("go-sql-driver over TLS", currentUser(p.dsn(testdb.User, testdb.Password, "", "tls=greeted-verify"), testdb.User))
	through("go-sql-driver as "+pUser+" over TLS", currentUser(p.dsn(pUser, pPass, "", "tls=greeted-verify"), pUser))
	for _, u := range [][2]string{{testdb.User, testdb.Password}, {pUser, pPass}} {
		through("mariadb as "+u[0], func() error {
			out, err := mariadbCLI(t, p.addr, u[0], u[1], "-e", "SELECT CURRENT_USER()")
			if err != nil || !strings.Contains(out, u[0]+"@%") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		through("mariadb --ssl as "+u[0], func() error {
			out, err := mariadbCLI(t, p.addr, u[0], u[1], "--ssl", "--ssl-ca="+ca, "--ssl-verify-server-cert", "-e", "SHOW STATUS LIKE 'Ssl_cipher'")
			if err != nil || !strings.Contains(out, "Ssl_cipher") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}
	if testdb.Shared().IsMySQL() {
		through("mysql", func() error {
			out, err := mysqlCLI(t, p.addr, testdb.Sha2User, testdb.Sha2Password, "-e", "SELECT CURRENT_USER()")
			if err != nil || !strings.Contains(out, testdb.Sha2User+"@%") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		// Full authentication: the server forgot the account's cached
		// hash; the plaintext client gets the server's RSA key.
		mustExec(t, openDSN(t, testdb.Shared().RootDSN("", "")), "FLUSH PRIVILEGES")
		through("caching_sha2_password full authentication", func() error {
			w, err := loginWire(p.addr, testdb.DBName, true, 10*time.Second)
			if err != nil {
				return err
			}
			defer w.Close()
			stillServes(t, w)
			return nil
		})
	}
	// COM_CHANGE_USER after a login greeted by the proxy.
	through("go-mysql client and COM_CHANGE_USER", func() error {
		r := dialRaw(t, p.addr, true)
		defer r.Close()
		plugin := testdb.Shared().DefaultAuthPlugin()
		changeUser(t, r, testdb.DriverUser, testdb.DriverPassword, plugin)
		if got := r.scalar("SELECT CURRENT_USER()"); got != testdb.DriverUser+"@%" {
			return fmt.Errorf("after change user: %q", got)
		}
		return nil
	})
	// A wrong password is refused as directly (1045), and counted.
	failedBefore := metricValue(t, reg, "slotproxy_auth_failures_total")
	through("a wrong password", func() error {
		err := selectOne(p.dsn(testdb.User, "wrong", "", ""))
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1045 {
			return fmt.Errorf("got %v, want error 1045", err)
		}
		return nil
	})
	// The session counts it once the client has its ERR: wait a moment.
	waitMetric(t, reg, "slotproxy_auth_failures_total", failedBefore+1)
	// A client without CLIENT_PLUGIN_AUTH cannot be asked for its auth
	// data again: it is told to connect again, with a password; without
	// one it needs not be asked.
	through("a client without CLIENT_PLUGIN_AUTH", func() error {
		w, err := dialWire(p.addr, 10*time.Second)
		if err != nil {
			return err
		}
		defer w.Close()
		if err := w.greet(); err != nil {
			return err
		}
		caps := uint32(wireCaps) &^ gomysql.CLIENT_PLUGIN_AUTH &^ gomysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
		auth := gomysql.CalcNativePassword(w.scramble, []byte(testdb.Password))
		if err := w.writePacket(handshakeResponse(caps, testdb.User, auth, "", ""), 1); err != nil {
			return err
		}
		pkt, _, err := w.readFull()
		if err != nil {
			return err
		}
		if pkt[0] != 0xff || parseErrPacket(pkt).Code != gomysql.ER_CON_COUNT_ERROR || !strings.Contains(string(pkt), "connect again") {
			return fmt.Errorf("got %q, want ERR 1040 telling it to connect again", pkt)
		}
		return nil
	})
	want := map[string]bool{"ok": true, "auth_failed": true, "refused": true}
	// The last session counts its outcome once the client has its ERR.
	waitOutcome := func(outcome string) {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if handshakeOutcomes(t, reg)[outcome] > 0 {
				return
			}
		}
	}
	for o := range want {
		waitOutcome(o)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "slotproxy_handshakes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			outcome := m.GetLabel()[0].GetValue()
			if want[outcome] && m.GetCounter().GetValue() == 0 {
				t.Errorf("slotproxy_handshakes_total{outcome=%q} is 0", outcome)
			}
			delete(want, outcome)
		}
	}
	if len(want) > 0 {
		t.Errorf("slotproxy_handshakes_total lacks outcomes %v", want)
	}
	noPanics(t, p)
}

// waitMetric waits up to 5 s for the counter name in reg to reach want
// (a session counts an outcome after its client has the answer), and fails
// the test if it does not, or goes past it.
func waitMetric(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := metricValue(t, reg, name)
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// handshakeOutcomes returns slotproxy_handshakes_total by outcome.
func handshakeOutcomes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "slotproxy_handshakes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}
