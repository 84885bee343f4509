package proxy_test

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/fakebackend"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// caching_sha2_password cannot be served by MariaDB 10.11, so these tests
// put the proxy in front of an in-process fake MySQL 8.4 backend.

const sha2User, sha2Pass = "sha2user", "sha2-secret"

func startFakeBackend(t *testing.T, withTLS bool) *fakebackend.Backend {
	t.Helper()
	opts := fakebackend.Options{Users: map[string]string{sha2User: sha2Pass}}
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

// login connects through the proxy and returns CURRENT_USER() or the error.
func login(t *testing.T, p *testProxy, pass, params string) (string, error) {
	t.Helper()
	db := openDSN(t, p.dsn(sha2User, pass, "", params))
	var u string
	err := db.QueryRow("SELECT CURRENT_USER()").Scan(&u)
	_ = db.Close()
	return u, err
}

func TestCachingSha2(t *testing.T) {
	registerTLS(t, "sha2-client", certs.ClientTLS("127.0.0.1"))
	backendTLS := &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
	cases := []struct {
		name             string
		clientTLS        bool // client→proxy
		backendTLS       bool // proxy→backend
		wantFullAuthPath fakebackend.AuthPath
	}{
		{"RSA exchange, no TLS", false, false, fakebackend.PathFullRSA},
		{"TLS on both hops", true, true, fakebackend.PathFullTLS},
		{"TLS client, plaintext backend (proxy bridges with RSA)", true, false, fakebackend.PathFullRSA},
		{"plaintext client, TLS backend (proxy answers with its own RSA key)", false, true, fakebackend.PathFullTLS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			backend := startFakeBackend(t, tc.backendTLS)
			p := startProxy(t, func(c *proxy.Config) {
				c.Backend = backend.Addr()
				if tc.clientTLS {
					c.ClientTLS = certs.ServerTLS()
				}
				if tc.backendTLS {
					c.BackendTLS = backendTLS
				}
			})
			params := ""
			if tc.clientTLS {
				params = "tls=sha2-client"
			}
			// First login: the server has nothing cached, full authentication.
			if u, err := login(t, p, sha2Pass, params); err != nil || u != sha2User+"@%" {
				t.Fatalf("full auth: %q, %v", u, err)
			}
			// Second login: fast authentication from the server's cache.
			if u, err := login(t, p, sha2Pass, params); err != nil || u != sha2User+"@%" {
				t.Fatalf("fast auth: %q, %v", u, err)
			}
			// After a server restart (cache lost), full authentication again.
			backend.ClearAuthCache()
			if u, err := login(t, p, sha2Pass, params); err != nil || u != sha2User+"@%" {
				t.Fatalf("full auth after cache loss: %q, %v", u, err)
			}
			// A wrong password is refused, with and without a cache entry.
			_, err := login(t, p, "wrong", params)
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1045 {
				t.Fatalf("wrong password: %v, want 1045", err)
			}
			paths := map[fakebackend.AuthPath]int{}
			for _, ev := range backend.Events() {
				if ev.Err == nil {
					paths[ev.Path]++
				}
			}
			if paths[tc.wantFullAuthPath] != 2 || paths[fakebackend.PathFast] != 1 {
				t.Fatalf("auth paths %v: want 2× %v and 1× fast", paths, tc.wantFullAuthPath)
			}
			if strings.Contains(p.logs.String(), sha2Pass) {
				t.Fatal("a password reached the proxy's log")
			}
		})
	}
}

// TestBackendTLSRequiredButNotOffered: a proxy configured for backend TLS
// never falls back to plaintext.
func TestBackendTLSRequiredButNotOffered(t *testing.T) {
	backend := startFakeBackend(t, false)
	p := startProxy(t, func(c *proxy.Config) {
		c.Backend = backend.Addr()
		c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
	})
	_, err := login(t, p, sha2Pass, "")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != proxy.ErrCodeBackend || !strings.Contains(me.Message, "TLS") {
		t.Fatalf("backend without TLS: %v, want error %d about TLS", err, proxy.ErrCodeBackend)
	}
	if n := backend.Stats().Logins; n != 0 {
		t.Fatalf("%d logins reached the backend in plaintext", n)
	}
}

// TestCompressionNotOffered: the proxy cannot relay compressed packets, so
// it removes CLIENT_COMPRESS from the greeting and clients stay uncompressed.
func TestCompressionNotOffered(t *testing.T) {
	p := startProxy(t, nil)
	c := dialTCP(t, p.addr)
	g := readPacket(t, c)
	// Capability flags: lower half after version, connection id, scramble.
	nul := strings.IndexByte(string(g[1:]), 0)
	pos := 1 + nul + 1 + 4 + 8 + 1
	caps := uint32(g[pos]) | uint32(g[pos+1])<<8 | uint32(g[pos+5])<<16 | uint32(g[pos+6])<<24
	if caps&gomysql.CLIENT_COMPRESS != 0 || caps&gomysql.CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
		t.Fatalf("greeting offers compression (caps %#x)", caps)
	}
	if caps&gomysql.CLIENT_PROTOCOL_41 == 0 || caps&gomysql.CLIENT_PLUGIN_AUTH == 0 {
		t.Fatalf("greeting lost needed capabilities (caps %#x)", caps)
	}
	// go-sql-driver with compress=true works (uncompressed) through the proxy.
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, "", "compress=true"))
	if got := queryString(t, db, "SELECT 1"); got != "1" {
		t.Fatal(got)
	}
}
