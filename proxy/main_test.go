package proxy_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/testcerts"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// certs is the test PKI shared by the backend (which serves TLS with
// certs.Server) and the tests.
var (
	certs    *testcerts.Bundle
	certsDir string
)

func TestMain(m *testing.M) {
	var err error
	if certs, err = testcerts.New(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	if certsDir, err = os.MkdirTemp("", "slotproxy-proxy-certs-"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	ca, cert, key, err := certs.WriteFiles(certsDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	code := testdb.Run(m, testdb.Options{ExtraArgs: []string{
		"--ssl-ca=" + ca, "--ssl-cert=" + cert, "--ssl-key=" + key,
	}}, testdb.Setup)
	os.RemoveAll(certsDir)
	os.Exit(code)
}

// syncBuffer is a goroutine-safe log sink tests can search.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sharedSlotReader reads slot rows of the shared server as its root
// account, as serve does as the admin account.
func sharedSlotReader() *catalog.SlotReader {
	srv := testdb.Shared()
	return catalog.NewSlotReader(func(ctx context.Context) (*client.Conn, error) {
		return client.ConnectWithContext(ctx, srv.Addr, srv.RootUser, srv.RootPassword, "", time.Minute)
	}, 2)
}

// testProxy is a proxy.Server listening on a loopback port.
type testProxy struct {
	srv  *proxy.Server
	addr string
	logs *syncBuffer
	done chan error
}

// startProxy starts a proxy in front of the shared server. mutate may
// adjust the configuration. The proxy is closed when the test ends.
func startProxy(t testing.TB, mutate func(*proxy.Config)) *testProxy {
	t.Helper()
	return startProxyFull(t, mutate, nil)
}

// startProxyWith is startProxy with a hook that runs on the Server before
// it starts serving.
func startProxyWith(t testing.TB, before func(*proxy.Server)) *testProxy {
	t.Helper()
	return startProxyFull(t, nil, before)
}

func startProxyFull(t testing.TB, mutate func(*proxy.Config), before func(*proxy.Server)) *testProxy {
	t.Helper()
	logs := &syncBuffer{}
	cfg := proxy.Config{
		Backend: testdb.Shared().Addr,
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// As serve does by default (coalesce: true, consolidate: true).
		Coalesce:    true,
		Consolidate: true,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := proxy.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sr := sharedSlotReader()
	srv.SetSlotReader(sr)
	t.Cleanup(sr.Close)
	if before != nil {
		before(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &testProxy{srv: srv, addr: ln.Addr().String(), logs: logs, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-p.done
		if t.Failed() {
			t.Logf("proxy log:\n%s", logs.String())
		}
	})
	return p
}

// pluginAccount is the shared server's account whose authentication plugin
// is not the server's default, named explicitly: MariaDB's ed25519 account,
// MySQL's caching_sha2_password account (see testdb.Setup).
func pluginAccount() (user, pass, plugin string) {
	if testdb.Shared().IsMySQL() {
		return testdb.Sha2User, testdb.Sha2Password, "caching_sha2_password"
	}
	return testdb.EdUser, testdb.EdPassword, "ed25519"
}

// newRewriter returns a rewriter for cat as slotproxy builds it for the
// shared server: with the dialect of its version string.
func newRewriter(cat *rewrite.Catalog) *rewrite.Rewriter {
	return catalog.NewRewriter(cat, testdb.Shared().Version)
}

// dsn is a go-sql-driver DSN through the proxy.
func (p *testProxy) dsn(user, pass, db, params string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, pass, "tcp", p.addr, db
	s := cfg.FormatDSN()
	if params != "" {
		if strings.Contains(s, "?") {
			s += "&" + params
		} else {
			s += "?" + params
		}
	}
	return s
}

// open returns a *sql.DB through the proxy as testdb.User.
func (p *testProxy) open(t testing.TB, params string) *sql.DB {
	t.Helper()
	return openDSN(t, p.dsn(testdb.User, testdb.Password, testdb.DBName, params))
}

func openDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := openDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openDB is sql.Open("mysql", dsn) whose logins as the ed25519 account
// survive a bug of go-sql-driver: it drops a 0 byte that ends the data of
// an auth switch request (readAuthResult), and then refuses the
// client_ed25519 nonce, 32 random bytes, as malformed (ErrMalformPkt)
// whenever it ends in 0 — one login in 256, directly as through the proxy.
// Such a login is tried again (a new nonce), up to three times.
func openDB(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.User != testdb.EdUser {
		return sql.OpenDB(c), nil
	}
	return sql.OpenDB(edConnector{c}), nil
}

// edConnector retries a login that go-sql-driver failed with ErrMalformPkt
// (see openDB).
type edConnector struct{ driver.Connector }

func (c edConnector) Connect(ctx context.Context) (driver.Conn, error) {
	for try := 1; ; try++ {
		conn, err := c.Connector.Connect(ctx)
		if !errors.Is(err, mysql.ErrMalformPkt) || try == 3 {
			return conn, err
		}
	}
}

// directDB is a *sql.DB straight to the server, for comparisons and set-up.
func directDB(t testing.TB, params string) *sql.DB {
	t.Helper()
	return openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, testdb.DBName, params))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args ...any) sql.Result {
	t.Helper()
	res, err := db.ExecContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return res
}

func queryString(t testing.TB, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string, args ...any) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s.String
}
