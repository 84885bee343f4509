package fakebackend_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/slotproxy/slotproxy/internal/fakebackend"
	"github.com/slotproxy/slotproxy/internal/testcerts"
)

func TestMain(m *testing.M) {
	// go-sql-driver logs unexpected connection errors; the negative tests
	// provoke some on purpose.
	_ = mysql.SetLogger(&mysql.NopLogger{})
	goleak.VerifyTestMain(m)
}

const (
	testUser     = "alice"
	testPassword = "s3cret-Pa55"
)

func start(t *testing.T, opts fakebackend.Options) *fakebackend.Backend {
	t.Helper()
	if opts.Users == nil {
		opts.Users = map[string]string{testUser: testPassword}
	}
	b, err := fakebackend.Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

var nameSeq atomic.Int64

// registerTLS registers cfg with go-sql-driver under a unique name, for the
// DSN parameter tls=<name>.
func registerTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	name := fmt.Sprintf("fakebackend-test-%d", nameSeq.Add(1))
	if err := mysql.RegisterTLSConfig(name, cfg); err != nil {
		t.Fatalf("RegisterTLSConfig: %v", err)
	}
	t.Cleanup(func() { mysql.DeregisterTLSConfig(name) })
	return name
}

// registerPubKey registers the backend's RSA public key with go-sql-driver,
// for the DSN parameter serverPubKey=<name>.
func registerPubKey(t *testing.T, b *fakebackend.Backend) string {
	t.Helper()
	name := fmt.Sprintf("fakebackend-test-key-%d", nameSeq.Add(1))
	mysql.RegisterServerPubKey(name, b.RSAPublicKey())
	t.Cleanup(func() { mysql.DeregisterServerPubKey(name) })
	return name
}

func dsn(b *fakebackend.Backend, user, password, params string) string {
	s := fmt.Sprintf("%s:%s@tcp(%s)/", user, password, b.Addr())
	if params != "" {
		s += "?" + params
	}
	return s
}

// login opens one physical connection with go-sql-driver. The connection
// and its pool are closed at the end of the test unless closed earlier.
func login(t *testing.T, dsn string) (*sql.Conn, error) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, nil
}

func mustLogin(t *testing.T, dsn string) *sql.Conn {
	t.Helper()
	conn, err := login(t, dsn)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	return conn
}

func queryString(t *testing.T, conn *sql.Conn, query string) string {
	t.Helper()
	var s sql.NullString
	if err := conn.QueryRowContext(context.Background(), query).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if !s.Valid {
		return "NULL"
	}
	return s.String
}

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func lastEvent(t *testing.T, b *fakebackend.Backend) fakebackend.AuthEvent {
	t.Helper()
	ev := b.Events()
	if len(ev) == 0 {
		t.Fatal("no auth events recorded")
	}
	return ev[len(ev)-1]
}

// wantEvent checks the most recent authentication event.
func wantEvent(t *testing.T, b *fakebackend.Backend, path fakebackend.AuthPath, tls, pubKey, ok bool) {
	t.Helper()
	ev := lastEvent(t, b)
	if ev.Path != path || ev.TLS != tls || ev.PublicKeyRequested != pubKey || (ev.Err == nil) != ok {
		t.Fatalf("last auth event = %+v (path %v); want path %v, TLS %v, PublicKeyRequested %v, success %v",
			ev, ev.Path, path, tls, pubKey, ok)
	}
}

func TestCachingSha2FullAuthOverTLS(t *testing.T) {
	certs := testcerts.MustNew(t)
	b := start(t, fakebackend.Options{TLS: certs.ServerTLS()})
	params := "tls=" + registerTLS(t, certs.ClientTLS(testcerts.ServerIP))

	conn := mustLogin(t, dsn(b, testUser, testPassword, params))
	wantEvent(t, b, fakebackend.PathFullTLS, true, false, true)
	if got := queryString(t, conn, "SELECT 1"); got != "1" {
		t.Fatalf("SELECT 1 = %q", got)
	}
	_ = conn.Close()

	// The full auth populated the cache: the next login is fast.
	mustLogin(t, dsn(b, testUser, testPassword, params))
	wantEvent(t, b, fakebackend.PathFast, true, false, true)

	st := b.Stats()
	if st.FullAuthsTLS != 1 || st.FullAuthsRSA != 0 || st.FastAuths != 1 || st.PublicKeyRequests != 0 || st.Logins != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestCachingSha2FullAuthRSA(t *testing.T) {
	b := start(t, fakebackend.Options{})

	// No TLS and no key configured: go-sql-driver requests the public key
	// (0x02) and sends the password RSA-encrypted.
	conn := mustLogin(t, dsn(b, testUser, testPassword, ""))
	wantEvent(t, b, fakebackend.PathFullRSA, false, true, true)
	if got := queryString(t, conn, "SELECT CURRENT_USER()"); got != testUser+"@%" {
		t.Fatalf("CURRENT_USER() = %q", got)
	}
	_ = conn.Close()

	mustLogin(t, dsn(b, testUser, testPassword, ""))
	wantEvent(t, b, fakebackend.PathFast, false, false, true)

	// As after a server restart, the cache is gone and full auth is back.
	b.ClearAuthCache()
	mustLogin(t, dsn(b, testUser, testPassword, ""))
	wantEvent(t, b, fakebackend.PathFullRSA, false, true, true)

	st := b.Stats()
	if st.FullAuthsRSA != 2 || st.FastAuths != 1 || st.PublicKeyRequests != 2 || st.FullAuths != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestCachingSha2FullAuthPresharedPublicKey(t *testing.T) {
	b := start(t, fakebackend.Options{})
	params := "serverPubKey=" + registerPubKey(t, b)

	// The client already knows the key: encrypted password, no request.
	mustLogin(t, dsn(b, testUser, testPassword, params))
	wantEvent(t, b, fakebackend.PathFullRSA, false, false, true)
	if st := b.Stats(); st.PublicKeyRequests != 0 || st.FullAuthsRSA != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWrongPassword(t *testing.T) {
	certs := testcerts.MustNew(t)
	b := start(t, fakebackend.Options{TLS: certs.ServerTLS()})
	tlsParams := "tls=" + registerTLS(t, certs.ClientTLS(testcerts.ServerDNSName))

	cases := []struct {
		name, user, password, params string
		path                         fakebackend.AuthPath
		tls, pubKey                  bool
	}{
		{"rsa/empty-cache", testUser, "wrong", "", fakebackend.PathFullRSA, false, true},
		{"tls/empty-cache", testUser, "wrong", tlsParams, fakebackend.PathFullTLS, true, false},
		{"unknown-user", "mallory", testPassword, "", fakebackend.PathFullRSA, false, true},
		{"no-password", testUser, "", "", fakebackend.PathEmptyPassword, false, false},
		// Populate the cache, then a wrong scramble must fall back to
		// full auth and fail there.
		{"warm-up", testUser, testPassword, tlsParams, fakebackend.PathFullTLS, true, false},
		{"rsa/cached", testUser, "wrong", "", fakebackend.PathFullRSA, false, true},
		{"tls/cached", testUser, "wrong", tlsParams, fakebackend.PathFullTLS, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := b.Stats()
			_, err := login(t, dsn(b, tc.user, tc.password, tc.params))
			if tc.name == "warm-up" {
				if err != nil {
					t.Fatalf("login: %v", err)
				}
				return
			}
			if errno := mysqlErrno(err); errno != 1045 {
				t.Fatalf("err = %v (errno %d), want 1045", err, errno)
			}
			wantEvent(t, b, tc.path, tc.tls, tc.pubKey, false)
			after := b.Stats()
			if after.LoginFailures != before.LoginFailures+1 || after.Logins != before.Logins {
				t.Fatalf("stats before %+v, after %+v", before, after)
			}
		})
	}
	// The failures must not have evicted the good verifier.
	mustLogin(t, dsn(b, testUser, testPassword, ""))
	wantEvent(t, b, fakebackend.PathFast, false, false, true)
}

func TestNativePassword(t *testing.T) {
	t.Run("server-default", func(t *testing.T) {
		b := start(t, fakebackend.Options{AuthPlugin: gomysql.AUTH_NATIVE_PASSWORD})
		conn := mustLogin(t, dsn(b, testUser, testPassword, ""))
		wantEvent(t, b, fakebackend.PathNative, false, false, true)
		if got := queryString(t, conn, "select 1;"); got != "1" {
			t.Fatalf("SELECT 1 = %q", got)
		}
		_, err := login(t, dsn(b, testUser, "wrong", ""))
		if errno := mysqlErrno(err); errno != 1045 {
			t.Fatalf("wrong password: err = %v, want 1045", err)
		}
		wantEvent(t, b, fakebackend.PathNative, false, false, false)
		if st := b.Stats(); st.NativeAuths != 1 || st.FastAuths+st.FullAuths != 0 {
			t.Fatalf("stats = %+v", st)
		}
	})
	t.Run("auth-switch", func(t *testing.T) {
		// The server announces caching_sha2_password; bob is switched to
		// mysql_native_password with an AuthSwitchRequest.
		b := start(t, fakebackend.Options{
			Users:          map[string]string{testUser: testPassword, "bob": "bobpw"},
			UserAuthPlugin: map[string]string{"bob": gomysql.AUTH_NATIVE_PASSWORD},
		})
		mustLogin(t, dsn(b, "bob", "bobpw", ""))
		wantEvent(t, b, fakebackend.PathNative, false, false, true)
		if ev := lastEvent(t, b); ev.User != "bob" || ev.Plugin != gomysql.AUTH_NATIVE_PASSWORD {
			t.Fatalf("event = %+v", ev)
		}
		mustLogin(t, dsn(b, testUser, testPassword, ""))
		wantEvent(t, b, fakebackend.PathFullRSA, false, true, true)
	})
}

func TestEmptyPasswordUser(t *testing.T) {
	b := start(t, fakebackend.Options{Users: map[string]string{"anon": ""}})
	mustLogin(t, dsn(b, "anon", "", ""))
	wantEvent(t, b, fakebackend.PathEmptyPassword, false, false, true)
	_, err := login(t, dsn(b, "anon", "something", ""))
	if errno := mysqlErrno(err); errno != 1045 {
		t.Fatalf("err = %v, want 1045", err)
	}
}

func TestUntrustedServerCertificate(t *testing.T) {
	certs := testcerts.MustNew(t)
	b := start(t, fakebackend.Options{TLS: certs.UntrustedServerTLS()})
	_, err := login(t, dsn(b, testUser, testPassword, "tls="+registerTLS(t, certs.ClientTLS(testcerts.ServerIP))))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("err = %v, want x509.UnknownAuthorityError", err)
	}
	if st := b.Stats(); st.Logins != 0 || len(b.Events()) != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestQueries(t *testing.T) {
	b := start(t, fakebackend.Options{Version: "8.0.99-fake"})
	conn := mustLogin(t, dsn(b, testUser, testPassword, ""))
	ctx := context.Background()

	if err := conn.PingContext(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	for query, want := range map[string]string{
		"SELECT 1":              "1",
		"  select 1 ; ":         "1",
		"SELECT CURRENT_USER()": testUser + "@%",
		"SELECT USER()":         testUser + "@127.0.0.1",
		"SELECT VERSION()":      "8.0.99-fake",
		"SELECT @@version":      "8.0.99-fake",
		"SELECT DATABASE()":     "NULL",
	} {
		if got := queryString(t, conn, query); got != want {
			t.Errorf("%q = %q, want %q", query, got, want)
		}
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil || id <= 0 {
		t.Errorf("CONNECTION_ID() = %d, %v", id, err)
	}

	for _, query := range []string{"SELECT 2", "SHOW DATABASES", "SELECT", "SELECT1"} {
		_, err := conn.ExecContext(ctx, query)
		if errno := mysqlErrno(err); errno != gomysql.ER_NOT_SUPPORTED_YET {
			t.Errorf("%q: err = %v, want errno %d", query, err, gomysql.ER_NOT_SUPPORTED_YET)
		}
	}
	// An ERR must leave the connection usable.
	if got := queryString(t, conn, "SELECT 1"); got != "1" {
		t.Fatalf("SELECT 1 after error = %q", got)
	}

	// Prepared statements (binary protocol) for the same statements.
	stmt, err := conn.PrepareContext(ctx, "SELECT CURRENT_USER()")
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	var user string
	if err := stmt.QueryRowContext(ctx).Scan(&user); err != nil || user != testUser+"@%" {
		t.Fatalf("prepared CURRENT_USER() = %q, %v", user, err)
	}
	_ = stmt.Close()
	if _, err := conn.PrepareContext(ctx, "SELECT ?"); mysqlErrno(err) != gomysql.ER_NOT_SUPPORTED_YET {
		t.Fatalf("prepare with parameter: err = %v", err)
	}

	if st := b.Stats(); st.Queries < 10 {
		t.Fatalf("stats = %+v, want Queries >= 10", st)
	}
}

// TestInitDBAndPing uses go-mysql's client, which exposes COM_INIT_DB and
// COM_PING directly.
func TestInitDBAndPing(t *testing.T) {
	b := start(t, fakebackend.Options{Databases: []string{"app"}})

	c, err := client.Connect(b.Addr(), testUser, testPassword, "")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	wantEvent(t, b, fakebackend.PathFullRSA, false, true, true)

	if err := c.Ping(); err != nil {
		t.Fatalf("COM_PING: %v", err)
	}
	if err := c.UseDB("app"); err != nil {
		t.Fatalf("COM_INIT_DB app: %v", err)
	}
	r, err := c.Execute("SELECT DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r.GetString(0, 0); got != "app" {
		t.Fatalf("DATABASE() = %q", got)
	}
	err = c.UseDB("nope")
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != gomysql.ER_BAD_DB_ERROR {
		t.Fatalf("COM_INIT_DB nope: err = %v, want ER_BAD_DB_ERROR", err)
	}
	if err := c.Ping(); err != nil {
		t.Fatalf("COM_PING after error: %v", err)
	}
}

func TestDatabaseInHandshake(t *testing.T) {
	b := start(t, fakebackend.Options{Databases: []string{"app"}})
	base := fmt.Sprintf("%s:%s@tcp(%s)/", testUser, testPassword, b.Addr())

	conn := mustLogin(t, base+"app")
	if got := queryString(t, conn, "SELECT DATABASE()"); got != "app" {
		t.Fatalf("DATABASE() = %q", got)
	}
	_, err := login(t, base+"nope")
	if errno := mysqlErrno(err); errno != gomysql.ER_BAD_DB_ERROR {
		t.Fatalf("err = %v, want errno %d", err, gomysql.ER_BAD_DB_ERROR)
	}
}

func TestConcurrentLogins(t *testing.T) {
	certs := testcerts.MustNew(t)
	b := start(t, fakebackend.Options{TLS: certs.ServerTLS()})
	tlsParams := "tls=" + registerTLS(t, certs.ClientTLS(testcerts.ServerIP))

	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			params := ""
			if i%2 == 0 {
				params = tlsParams
			}
			db, err := sql.Open("mysql", dsn(b, testUser, testPassword, params))
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			var one int
			if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := b.Stats()
	if st.Logins != n || st.FastAuths+st.FullAuths != n {
		t.Fatalf("stats = %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.WaitConns(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

func TestCloseDropsConnections(t *testing.T) {
	b, err := fakebackend.Start(fakebackend.Options{Users: map[string]string{testUser: testPassword}})
	if err != nil {
		t.Fatal(err)
	}
	conn := mustLogin(t, dsn(b, testUser, testPassword, ""))

	// A client stuck before sending its handshake response.
	raw, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.WaitConns(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := b.Conns(); n != 0 {
		t.Fatalf("Conns after Close = %d", n)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := conn.PingContext(ctx); err == nil {
		t.Fatal("ping succeeded after Close")
	}
	if c, err := net.Dial("tcp", b.Addr()); err == nil {
		c.Close()
		t.Fatal("dial succeeded after Close")
	}
}

func TestStartValidation(t *testing.T) {
	for name, opts := range map[string]fakebackend.Options{
		"bad default plugin": {AuthPlugin: "client_ed25519"},
		"bad user plugin": {
			Users:          map[string]string{"a": "b"},
			UserAuthPlugin: map[string]string{"a": "auth_gssapi_client"},
		},
		"plugin for unknown user": {UserAuthPlugin: map[string]string{"ghost": gomysql.AUTH_NATIVE_PASSWORD}},
	} {
		if b, err := fakebackend.Start(opts); err == nil {
			_ = b.Close()
			t.Errorf("%s: Start succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "fakebackend: ") {
			t.Errorf("%s: unexpected error %v", name, err)
		}
	}
}
