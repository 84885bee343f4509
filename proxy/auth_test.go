package proxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/fakebackend"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// Passwords never cross the proxy's backend hop in clear: plugins that send
// the password as it is are refused when that hop is plaintext.

const clearUser, clearPass = "clearuser", "clear-secret"

func startPluginBackend(t *testing.T, withTLS bool) *fakebackend.Backend {
	t.Helper()
	opts := fakebackend.Options{
		Users:          map[string]string{clearUser: clearPass, sha2User: sha2Pass},
		UserAuthPlugin: map[string]string{clearUser: gomysql.AUTH_CLEAR_PASSWORD},
	}
	if withTLS {
		opts.TLS = certs.ServerTLS()
	}
	b, err := fakebackend.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// currentUser logs in through p and returns CURRENT_USER() or the error.
func currentUser(t *testing.T, p *testProxy, user, pass, params string) (string, error) {
	t.Helper()
	db := openDSN(t, p.dsn(user, pass, "", params))
	defer db.Close()
	var u string
	err := db.QueryRow("SELECT CURRENT_USER()").Scan(&u)
	return u, err
}

func TestCleartextPluginRefusedOverPlaintextBackend(t *testing.T) {
	registerTLS(t, "clear-client", certs.ClientTLS("127.0.0.1"))
	for _, backendTLS := range []bool{false, true} {
		backend := startPluginBackend(t, backendTLS)
		p := startProxy(t, func(c *proxy.Config) {
			c.Backend = backend.Addr()
			c.ClientTLS = certs.ServerTLS()
			if backendTLS {
				c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
			}
		})
		_, err := currentUser(t, p, clearUser, clearPass, "tls=clear-client&allowCleartextPasswords=true")
		var me *mysql.MySQLError
		if backendTLS {
			// Over TLS the exchange is relayed (the fake backend itself
			// cannot switch to this plugin: go-mysql's server lacks it).
			if errors.As(err, &me) && strings.Contains(me.Message, "slotproxy") {
				t.Fatalf("backend over TLS: the proxy refused: %v", err)
			}
			continue
		}
		if !errors.As(err, &me) || me.Number != gomysql.ER_NOT_SUPPORTED_AUTH_MODE || !strings.Contains(me.Message, "backend.tls") {
			t.Fatalf("plaintext backend: %v, want error %d saying to set backend.tls", err, gomysql.ER_NOT_SUPPORTED_AUTH_MODE)
		}
		for _, ev := range backend.Events() {
			if ev.User == clearUser && ev.Err == nil {
				t.Fatal("the backend verified the cleartext password over plaintext")
			}
		}
		if strings.Contains(p.logs.String(), clearPass) {
			t.Fatal("the password reached the proxy's log")
		}
	}
}

// TestProxyProtocol: with the PROXY protocol on, MariaDB (with
// proxy_protocol_networks naming the proxy) sees the client's own address:
// in USER(), in the process list, and for a host-based grant that only the
// client's address matches.
func TestProxyProtocol(t *testing.T) {
	if testdb.Shared().IsMySQL() {
		t.Skip("MySQL has no PROXY protocol support; the MariaDB run covers this")
	}
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	var orig string
	if err := root.QueryRow("SELECT @@GLOBAL.proxy_protocol_networks").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	mustExec(t, root, "SET GLOBAL proxy_protocol_networks = '127.0.0.1'")
	t.Cleanup(func() { mustExec(t, root, "SET GLOBAL proxy_protocol_networks = '"+orig+"'") })
	mustExec(t, root, "CREATE OR REPLACE USER 'pp'@'127.0.0.2' IDENTIFIED BY 'pp-pass'")
	t.Cleanup(func() { mustExec(t, root, "DROP USER IF EXISTS 'pp'@'127.0.0.2'") })

	// The client connects from 127.0.0.2; the proxy dials from 127.0.0.1.
	mysql.RegisterDialContext("from127002", func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		return d.DialContext(ctx, "tcp", addr)
	})
	dsn := func(p *testProxy, user, pass string) string {
		return strings.Replace(p.dsn(user, pass, "", ""), "@tcp(", "@from127002(", 1)
	}
	on := startProxy(t, func(c *proxy.Config) { c.ProxyProtocol = true })
	db := openDSN(t, dsn(on, "pp", "pp-pass"))
	if got := queryString(t, db, "SELECT USER()"); got != "pp@127.0.0.2" {
		t.Fatalf("USER() with the PROXY protocol: %q, want pp@127.0.0.2", got)
	}
	off := startProxy(t, nil)
	_, err := openDSN(t, dsn(off, "pp", "pp-pass")).Exec("SELECT 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1045 && me.Number != 1130 {
		t.Fatalf("without the PROXY protocol the grant for 127.0.0.2 must not match: %v", err)
	}
}
