package proxy_test

import (
	"bytes"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestCachingSha2Server exercises caching_sha2_password through the proxy
// against the real server (TestCachingSha2 does the same against an
// in-process fake): for every combination of TLS on the two hops, the first
// login after FLUSH PRIVILEGES (the server's cache emptied: full
// authentication), the next one (fast authentication), a wrong password,
// COM_CHANGE_USER with full and fast authentication, and
// COM_RESET_CONNECTION. A recording relay between the proxy and the server
// shows, on a plaintext backend hop, which path the server took and that the
// password never crossed it in clear.
//
// MariaDB 10.11 has no caching_sha2_password: there the test checks that
// the proxy relays the server's refusal of an account with that plugin.
func TestCachingSha2Server(t *testing.T) {
	s := testdb.Shared()
	if !s.IsMySQL() {
		// MariaDB's spelling, so that the refusal is about the plugin.
		create := "CREATE USER sha2_probe@'%' IDENTIFIED VIA caching_sha2_password"
		p := startProxy(t, nil)
		_, directErr := directDB(t, "").Exec(create)
		_, proxyErr := p.open(t, "").Exec(create)
		var d, q *mysql.MySQLError
		if !errors.As(directErr, &d) || !errors.As(proxyErr, &q) || *d != *q {
			t.Fatalf("%s: directly %v, through the proxy %v; want the same server error", create, directErr, proxyErr)
		}
		t.Logf("%s %s: %v, directly and through the proxy", s.Flavor, s.Version, directErr)
		return
	}

	clientTLS := certs.ClientTLS("127.0.0.1")
	registerTLS(t, "sha2-server-client", clientTLS)
	// The server's RSA key, for clients configured with it (serverPubKey).
	var name, keyPEM string
	if err := directDB(t, "").QueryRow("SHOW STATUS LIKE 'Caching_sha2_password_rsa_public_key'").Scan(&name, &keyPEM); err != nil {
		t.Fatal(err)
	}
	key, err := parsePublicKey([]byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	mysql.RegisterServerPubKey("sha2-server-key", key)
	t.Cleanup(func() { mysql.DeregisterServerPubKey("sha2-server-key") })

	cases := []struct {
		name                  string
		clientTLS, backendTLS bool
		params                string // go-sql-driver DSN parameters
		// wantKeyRequest: on full authentication the server is asked for
		// its RSA key (by the client, relayed, or by the proxy bridging a
		// client's cleartext password from TLS).
		wantKeyRequest bool
	}{
		{name: "plaintext both hops, RSA key exchange relayed", wantKeyRequest: true},
		{name: "plaintext both hops, client knows the server's key", params: "serverPubKey=sha2-server-key"},
		{name: "client TLS, plaintext backend: the proxy bridges with RSA", clientTLS: true, params: "tls=sha2-server-client", wantKeyRequest: true},
		{name: "TLS on both hops", clientTLS: true, backendTLS: true, params: "tls=sha2-server-client"},
	}
	t.Run("plaintext client, TLS backend: the proxy answers the key request", func(t *testing.T) {
		// The client asks for a public key on its plaintext hop; the
		// proxy answers with its own, decrypts the password and passes
		// it on inside the backend's TLS.
		p := startProxy(t, func(c *proxy.Config) {
			c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
		})
		if err := s.Exec("FLUSH PRIVILEGES"); err != nil {
			t.Fatal(err)
		}
		if err := openDSN(t, p.dsn(testdb.Sha2User, testdb.Sha2Password, "", "")).Ping(); err != nil {
			t.Fatalf("full authentication of a plaintext client over a TLS backend hop: %v", err)
		}
		if err := s.Exec("FLUSH PRIVILEGES"); err != nil {
			t.Fatal(err)
		}
		if err := openDSN(t, p.dsn(testdb.Sha2User, "wrong", "", "")).Ping(); err == nil {
			t.Fatal("a wrong password was accepted")
		}
		if err := openDSN(t, p.dsn(testdb.Sha2User, testdb.Sha2Password, "", "")).Ping(); err != nil {
			t.Fatalf("fast authentication of a plaintext client over a TLS backend hop: %v", err)
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp := startTap(t, s.Addr)
			p := startProxy(t, func(c *proxy.Config) {
				c.Backend = tp.addr()
				if tc.clientTLS {
					c.ClientTLS = certs.ServerTLS()
				}
				if tc.backendTLS {
					c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
				}
			})
			login := func(pass string) (string, error) {
				db := openDSN(t, p.dsn(testdb.Sha2User, pass, "", tc.params))
				defer db.Close()
				var u string
				err := db.QueryRow("SELECT CURRENT_USER()").Scan(&u)
				return u, err
			}
			// checkPath asserts what the server did on the latest backend
			// connection since mark: "full" or "fast" authentication, and,
			// with keyCheck, whether its key was asked for.
			checkPath := func(t *testing.T, m tapMark, want string, keyCheck bool) {
				t.Helper()
				up, down := tp.last(t).since(m)
				if bytes.Contains(up, []byte(testdb.Sha2Password)) {
					t.Fatalf("the password crossed the backend hop in clear")
				}
				if tc.backendTLS {
					// After the greeting the proxy sends an SSL request
					// (36 bytes) and then a TLS handshake record.
					if m != (tapMark{}) {
						return // encrypted: the path cannot be read here
					}
					if len(up) < 38 || up[36] != 0x16 || up[37] != 0x03 {
						t.Fatalf("the backend hop is not on TLS: %q", up[:min(len(up), 40)])
					}
					return
				}
				fromServer, toServer := mysqlPackets(down), mysqlPackets(up)
				full := containsPacket(fromServer, []byte{1, 4})
				fast := containsPacket(fromServer, []byte{1, 3})
				switch {
				case want == "full" && !full:
					t.Fatalf("the server did not ask for full authentication; server packets %q", fromServer)
				case want == "fast" && (!fast || full):
					t.Fatalf("not a fast authentication; server packets %q", fromServer)
				}
				if asked := containsPacket(toServer, []byte{2}); keyCheck && want == "full" && asked != tc.wantKeyRequest {
					t.Fatalf("the server's key was asked for: %v, want %v", asked, tc.wantKeyRequest)
				}
			}

			if err := s.Exec("FLUSH PRIVILEGES"); err != nil { // empties the server's cache
				t.Fatal(err)
			}
			if u, err := login(testdb.Sha2Password); err != nil || u != testdb.Sha2User+"@%" {
				t.Fatalf("first login after FLUSH PRIVILEGES (full authentication): %q, %v", u, err)
			}
			checkPath(t, tapMark{}, "full", true)
			if u, err := login(testdb.Sha2Password); err != nil || u != testdb.Sha2User+"@%" {
				t.Fatalf("second login (fast authentication): %q, %v", u, err)
			}
			checkPath(t, tapMark{}, "fast", true)

			// A wrong password: the server's error, unchanged.
			_, proxyErr := login("wrong")
			direct := openDSN(t, s.DSN(testdb.Sha2User, "wrong", "", ""))
			directErr := direct.Ping()
			var d, q *mysql.MySQLError
			if !errors.As(directErr, &d) || !errors.As(proxyErr, &q) || d.Number != 1045 || *d != *q {
				t.Fatalf("wrong password: through the proxy %v, directly %v; want the same error 1045", proxyErr, directErr)
			}

			// COM_CHANGE_USER: to another account (default plugin, also
			// caching_sha2_password), then back after FLUSH PRIVILEGES (full
			// authentication inside COM_CHANGE_USER), then again (fast).
			var cfg *tls.Config
			if tc.clientTLS {
				cfg = clientTLS
			}
			r := dialRawAs(t, p.addr, testdb.User, testdb.Password, cfg)
			changeUser(t, r, testdb.DriverUser, testdb.DriverPassword, "caching_sha2_password")
			if got := r.scalar("SELECT CURRENT_USER()"); got != testdb.DriverUser+"@%" {
				t.Fatalf("after change user: %q", got)
			}
			if err := s.Exec("FLUSH PRIVILEGES"); err != nil {
				t.Fatal(err)
			}
			// This client asks for the key itself on a plaintext hop.
			m := tp.last(t).mark()
			changeUser(t, r, testdb.Sha2User, testdb.Sha2Password, "caching_sha2_password")
			checkPath(t, m, "full", false)
			m = tp.last(t).mark()
			changeUser(t, r, testdb.Sha2User, testdb.Sha2Password, "caching_sha2_password")
			checkPath(t, m, "fast", false)
			if got := r.scalar("SELECT CURRENT_USER()"); got != testdb.Sha2User+"@%" {
				t.Fatalf("after change user: %q", got)
			}

			// COM_RESET_CONNECTION keeps the user and forgets the session.
			if _, err := r.Execute("SET @v = 5"); err != nil {
				t.Fatal(err)
			}
			r.command(gomysql.COM_RESET_CONNECTION)
			r.expectOK("reset connection")
			if got := r.scalar("SELECT CONCAT(CURRENT_USER(), ' ', COALESCE(@v, 'unset'))"); got != testdb.Sha2User+"@% unset" {
				t.Fatalf("after COM_RESET_CONNECTION: %q", got)
			}
			if strings.Contains(p.logs.String(), testdb.Sha2Password) {
				t.Fatal("a password reached the proxy's log")
			}
		})
	}
}

// dialRawAs is dialRaw as user, on TLS when cfg is set.
func dialRawAs(t *testing.T, addr, user, pass string, cfg *tls.Config) *rawConn {
	t.Helper()
	c, err := client.Connect(addr, user, pass, "", func(c *client.Conn) error {
		c.UnsetCapability(gomysql.CLIENT_QUERY_ATTRIBUTES) // see dialRaw
		if cfg != nil {
			c.SetTLSConfig(cfg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return &rawConn{t: t, Conn: c, deprecateEOF: true, tls: cfg != nil}
}

// tap is a TCP relay to a server that keeps the first bytes each of its
// connections carried in either direction.
type tap struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*tapConn
}

// tapConn is one relayed connection's recorded traffic.
type tapConn struct {
	mu       sync.Mutex
	up, down bytes.Buffer // to the server, from the server
}

// tapLimit bounds what a tapConn records per direction.
const tapLimit = 64 << 10

func startTap(t *testing.T, target string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{ln: ln, target: target}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			tc := &tapConn{}
			tp.mu.Lock()
			tp.conns = append(tp.conns, tc)
			tp.mu.Unlock()
			copyRec := func(dst, src net.Conn, rec *bytes.Buffer) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						tc.mu.Lock()
						if rec.Len() < tapLimit {
							rec.Write(buf[:min(n, tapLimit-rec.Len())])
						}
						tc.mu.Unlock()
						if _, werr := dst.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_ = dst.Close()
				_ = src.Close()
			}
			wg.Go(func() { copyRec(s, c, &tc.up) })
			wg.Go(func() { copyRec(c, s, &tc.down) })
			wg.Go(func() { <-done; _ = c.Close(); _ = s.Close() })
		}
	})
	return tp
}

func (tp *tap) addr() string { return tp.ln.Addr().String() }

// last returns the most recent connection, once the server has answered
// something on it.
func (tp *tap) last(t *testing.T) *tapConn {
	t.Helper()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.conns) == 0 {
		t.Fatal("no connection went through the tap")
	}
	return tp.conns[len(tp.conns)-1]
}

// tapMark is a position in a tapConn's recorded traffic; the zero value
// is its start.
type tapMark struct{ up, down int }

// mark returns the current end of the recording (take it while the
// connection is idle, so that it falls between packets).
func (c *tapConn) mark() tapMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return tapMark{c.up.Len(), c.down.Len()}
}

// since returns what was recorded after m in either direction.
func (c *tapConn) since(m tapMark) (up, down []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.up.Bytes()[m.up:]), bytes.Clone(c.down.Bytes()[m.down:])
}

// mysqlPackets splits a recorded plaintext stream into packet payloads
// (a truncated last packet is dropped).
func mysqlPackets(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 4 {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if len(b) < 4+n {
			break
		}
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out
}

func containsPacket(pkts [][]byte, want []byte) bool {
	for _, p := range pkts {
		if bytes.Equal(p, want) {
			return true
		}
	}
	return false
}

// parsePublicKey reads an RSA public key in PEM.
func parsePublicKey(data []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM data")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("not an RSA key")
	}
	return rk, nil
}
