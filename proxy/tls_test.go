package proxy_test

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

func registerTLS(t *testing.T, name string, cfg *tls.Config) {
	t.Helper()
	if err := mysql.RegisterTLSConfig(name, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mysql.DeregisterTLSConfig(name) })
}

// backendCipher returns the TLS cipher the server sees on this session's
// connection: empty when the proxy→backend hop is plaintext.
func backendCipher(t *testing.T, p *testProxy, params string) string {
	t.Helper()
	db := p.open(t, params)
	var name, value string
	if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &value); err != nil {
		t.Fatal(err)
	}
	return value
}

func TestClientTLS(t *testing.T) {
	p := startProxy(t, func(c *proxy.Config) { c.ClientTLS = certs.ServerTLS() })
	registerTLS(t, "proxytest-verify", certs.ClientTLS("127.0.0.1"))
	db := p.open(t, "tls=proxytest-verify")
	if got := queryString(t, db, "SELECT 1"); got != "1" {
		t.Fatal(got)
	}
	if !strings.Contains(p.logs.String(), "tls=true") {
		t.Fatalf("proxy did not log a TLS session:\n%s", p.logs.String())
	}
	// The backend hop stays plaintext unless configured.
	if c := backendCipher(t, p, "tls=proxytest-verify"); c != "" {
		t.Fatalf("backend hop uses TLS (%s) without configuration", c)
	}
	// A client that does not trust the proxy's certificate fails.
	registerTLS(t, "proxytest-untrusted", &tls.Config{RootCAs: certs.UntrustedCA.Pool(), ServerName: "127.0.0.1"})
	if err := p.open(t, "tls=proxytest-untrusted").Ping(); err == nil {
		t.Fatal("client accepted a certificate from an untrusted CA")
	}
	// Plaintext clients are still served.
	if got := queryString(t, p.open(t, ""), "SELECT 1"); got != "1" {
		t.Fatal(got)
	}
}

// TestClientDemandsTLSWithoutCertificate: a proxy with no certificate does
// not offer TLS; a client that requires it gets an error, never plaintext.
func TestClientDemandsTLSWithoutCertificate(t *testing.T) {
	p := startProxy(t, nil)
	err := p.open(t, "tls=skip-verify").Ping()
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("go-sql-driver with tls=skip-verify: %v, want a TLS error", err)
	}
	// A client that sends an SSL request anyway gets an ERR packet, and the
	// connection goes no further.
	c := dialTCP(t, p.addr)
	if g := readPacket(t, c); g[0] != 10 {
		t.Fatalf("greeting %q", g)
	}
	sslRequest := make([]byte, 4+32)
	sslRequest[0], sslRequest[3] = 32, 1
	binary.LittleEndian.PutUint32(sslRequest[4:], gomysql.CLIENT_PROTOCOL_41|gomysql.CLIENT_SSL|gomysql.CLIENT_SECURE_CONNECTION)
	if _, err := c.Write(sslRequest); err != nil {
		t.Fatal(err)
	}
	if e := readPacket(t, c); e[0] != 0xff || !strings.Contains(string(e), "TLS") {
		t.Fatalf("reply to an SSL request: %q, want an ERR about TLS", e)
	}
	if err := drainUntilClosed(c); err != nil {
		t.Fatal("connection left open after refusing TLS")
	}
}

func TestBackendTLS(t *testing.T) {
	t.Run("verified", func(t *testing.T) {
		p := startProxy(t, func(c *proxy.Config) {
			c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
		})
		pUser, pPass, _ := pluginAccount()
		accounts := [][2]string{{testdb.User, testdb.Password}, {pUser, pPass}, {testdb.DriverUser, testdb.DriverPassword}}
		// A plaintext client in front of a TLS backend hop gets no full
		// caching_sha2_password authentication (see TestCachingSha2Server):
		// have the server cache the accounts.
		for _, u := range accounts {
			if err := openDSN(t, testdb.Shared().DSN(u[0], u[1], "", "")).Ping(); err != nil {
				t.Fatal(err)
			}
		}
		if c := backendCipher(t, p, ""); c == "" {
			t.Fatal("backend hop is plaintext with BackendTLS set")
		}
		for _, u := range accounts[1:] {
			db := openDSN(t, p.dsn(u[0], u[1], "", ""))
			if err := db.Ping(); err != nil {
				t.Fatalf("%s over backend TLS: %v", u[0], err)
			}
		}
	})
	t.Run("both hops", func(t *testing.T) {
		p := startProxy(t, func(c *proxy.Config) {
			c.ClientTLS = certs.ServerTLS()
			c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "localhost"}
		})
		registerTLS(t, "proxytest-both", certs.ClientTLS("127.0.0.1"))
		if c := backendCipher(t, p, "tls=proxytest-both"); c == "" {
			t.Fatal("backend hop is plaintext")
		}
	})
	t.Run("untrusted backend certificate", func(t *testing.T) {
		p := startProxy(t, func(c *proxy.Config) {
			c.BackendTLS = &tls.Config{RootCAs: certs.UntrustedCA.Pool(), ServerName: "127.0.0.1"}
		})
		start := time.Now()
		err := p.open(t, "").Ping()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != proxy.ErrCodeBackend || !strings.Contains(me.Message, "TLS") {
			t.Fatalf("backend with an untrusted certificate: %v, want error %d about TLS", err, proxy.ErrCodeBackend)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("took too long")
		}
	})
}

// TestBackendTLSPreferred: in mode preferred the proxy uses TLS toward a
// backend that offers it and plaintext toward one that does not, and a
// client asking for TLS gets it from the generated certificate.
func TestBackendTLSPreferred(t *testing.T) {
	preferred := func(c *proxy.Config) {
		c.BackendTLS = &tls.Config{InsecureSkipVerify: true}
		c.BackendTLSPreferred = true
	}
	p := startProxy(t, preferred)
	var name, cipher string
	if err := p.open(t, "").QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
		t.Fatalf("backend offering TLS: Ssl_cipher %q, %v; want a cipher", cipher, err)
	}
	plain := startFakeBackend(t, false)
	p2 := startProxy(t, func(c *proxy.Config) {
		preferred(c)
		c.Backend = plain.Addr()
	})
	if u, err := login(t, p2, sha2Pass, ""); err != nil || u != sha2User+"@%" {
		t.Fatalf("backend without TLS: %q, %v", u, err)
	}
	cert, fp, err := config.SelfSigned("127.0.0.1")
	if err != nil || len(fp) != 95 {
		t.Fatal(fp, err)
	}
	p3 := startProxy(t, func(c *proxy.Config) {
		preferred(c)
		c.ClientTLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	})
	registerTLS(t, "any-server", &tls.Config{InsecureSkipVerify: true})
	db := openDSN(t, p3.dsn(testdb.User, testdb.Password, "", "tls=any-server"))
	if err := db.Ping(); err != nil {
		t.Fatalf("client TLS with the generated certificate: %v", err)
	}
}
