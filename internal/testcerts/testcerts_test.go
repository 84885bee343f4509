package testcerts_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slotproxy/slotproxy/internal/testcerts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// handshake runs a TLS handshake between client and server configurations
// over a loopback TCP connection and returns both sides' errors. (net.Pipe
// is unbuffered and deadlocks when both sides write alerts at once.)
func handshake(t *testing.T, client, server *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	deadline := time.Now().Add(10 * time.Second)
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer s.Close()
		_ = s.SetDeadline(deadline)
		sc := tls.Server(s, server)
		if err := sc.Handshake(); err != nil {
			done <- err
			return
		}
		// Echo one byte so the client learns the handshake was accepted
		// (TLS 1.3 servers verify client certificates after the client's
		// Handshake has already returned).
		buf := make([]byte, 1)
		if _, err := sc.Read(buf); err != nil {
			done <- err
			return
		}
		_, err = sc.Write(buf)
		done <- err
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	cc := tls.Client(c, client)
	clientErr = cc.Handshake()
	if clientErr == nil {
		if _, err := cc.Write([]byte{1}); err == nil {
			_, _ = cc.Read(make([]byte, 1))
		}
	}
	c.Close()
	serverErr = <-done
	return clientErr, serverErr
}

func TestTrustedHandshake(t *testing.T) {
	b := testcerts.MustNew(t)
	for _, name := range []string{testcerts.ServerIP, testcerts.ServerDNSName} {
		cErr, sErr := handshake(t, b.ClientTLS(name), b.ServerTLS())
		if cErr != nil || sErr != nil {
			t.Fatalf("serverName %q: client err %v, server err %v", name, cErr, sErr)
		}
	}
}

func TestWrongServerNameFails(t *testing.T) {
	b := testcerts.MustNew(t)
	cErr, _ := handshake(t, b.ClientTLS("example.com"), b.ServerTLS())
	var hostErr x509.HostnameError
	if !errors.As(cErr, &hostErr) {
		t.Fatalf("client err = %v, want x509.HostnameError", cErr)
	}
}

func TestUntrustedServerFails(t *testing.T) {
	b := testcerts.MustNew(t)
	cErr, _ := handshake(t, b.ClientTLS(testcerts.ServerIP), b.UntrustedServerTLS())
	var unknown x509.UnknownAuthorityError
	if !errors.As(cErr, &unknown) {
		t.Fatalf("client err = %v, want x509.UnknownAuthorityError", cErr)
	}
}

func TestClientCertificates(t *testing.T) {
	b := testcerts.MustNew(t)

	t.Run("trusted", func(t *testing.T) {
		cErr, sErr := handshake(t, b.ClientTLSWithCert(testcerts.ServerIP), b.ServerTLSRequireClientCert())
		if cErr != nil || sErr != nil {
			t.Fatalf("client err %v, server err %v", cErr, sErr)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, sErr := handshake(t, b.ClientTLS(testcerts.ServerIP), b.ServerTLSRequireClientCert())
		if sErr == nil {
			t.Fatal("server accepted a client without certificate")
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		cfg := b.ClientTLS(testcerts.ServerIP)
		// crypto/tls only offers Certificates that match the server's
		// acceptable-CA list; force the untrusted one onto the wire.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &b.UntrustedClient.TLS, nil
		}
		_, sErr := handshake(t, cfg, b.ServerTLS())
		var unknown x509.UnknownAuthorityError
		if !errors.As(sErr, &unknown) {
			t.Fatalf("server err = %v, want x509.UnknownAuthorityError", sErr)
		}
	})
}

func TestBundlesAreIndependent(t *testing.T) {
	b1, b2 := testcerts.MustNew(t), testcerts.MustNew(t)
	if bytes.Equal(b1.CA.CertPEM, b2.CA.CertPEM) {
		t.Fatal("two bundles share a CA")
	}
	if _, err := b1.Server.Cert.Verify(x509.VerifyOptions{Roots: b2.CA.Pool()}); err == nil {
		t.Fatal("server certificate of one bundle verifies against another bundle's CA")
	}
}

func TestWriteFiles(t *testing.T) {
	b := testcerts.MustNew(t)
	dir := t.TempDir()

	caPath, certPath, keyPath, err := b.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatalf("load server pair: %v", err)
	}
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA file holds no certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: testcerts.ServerDNSName}); err != nil {
		t.Fatalf("server certificate from files does not verify: %v", err)
	}
	if err := leaf.VerifyHostname(testcerts.ServerIP); err != nil {
		t.Fatalf("server certificate lacks IP SAN: %v", err)
	}
	st, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Fatalf("key file mode = %v, want 0600", perm)
	}

	clientCert, clientKey, err := b.WriteClientFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(clientCert, clientKey); err != nil {
		t.Fatalf("load client pair: %v", err)
	}

	if _, _, _, err := b.WriteFiles(dir + "/does-not-exist"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteFiles into missing dir: err = %v, want os.ErrNotExist", err)
	}
}
