// Package testcerts generates throw-away X.509 material for tests.
//
// Everything is created in memory at runtime (ECDSA P-256 keys, so
// generation is fast); nothing is checked into the repository and nothing
// is trusted outside the process unless a test writes it to disk with
// [Bundle.WriteFiles] / [Bundle.WriteClientFiles].
//
// A [Bundle] holds two independent certificate authorities:
//
//   - CA, the trusted one, which signs Server (valid for 127.0.0.1 and
//     localhost) and Client;
//   - UntrustedCA, unrelated to CA, which signs UntrustedServer and
//     UntrustedClient with the same names. Peers configured from the
//     Bundle's trusted side must reject them, which is what negative tests
//     need: the failure is a chain failure, not a name mismatch.
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Validity window of every generated certificate, relative to New. The
// backdating tolerates small clock differences between processes.
const (
	backdate = time.Hour
	lifetime = 24 * time.Hour
)

// ServerIP and ServerDNSName are the subject alternative names of the
// server certificates; clients must dial or verify one of them.
const (
	ServerIP      = "127.0.0.1"
	ServerDNSName = "localhost"
)

// ClientCommonName is the subject common name of the client certificates.
const ClientCommonName = "slotproxy-test-client"

// Authority is a self-signed certificate authority.
type Authority struct {
	// Cert is the parsed CA certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded ("CERTIFICATE").
	CertPEM []byte

	key crypto.Signer
}

// Pool returns a new certificate pool containing only this authority.
func (a *Authority) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(a.Cert)
	return pool
}

// KeyPair is a leaf certificate and its private key.
type KeyPair struct {
	// Cert is the parsed leaf certificate.
	Cert *x509.Certificate
	// CertPEM is the leaf certificate, PEM-encoded ("CERTIFICATE"). It does
	// not include the issuing CA.
	CertPEM []byte
	// KeyPEM is the private key, PEM-encoded as PKCS#8 ("PRIVATE KEY"),
	// which Go, OpenSSL-based MySQL/MariaDB clients and servers all accept.
	KeyPEM []byte
	// TLS is the pair ready for tls.Config.Certificates.
	TLS tls.Certificate
}

// Bundle is a complete set of test PKI material; see the package comment.
// All fields are set by New and must be treated as read-only.
type Bundle struct {
	CA     *Authority
	Server *KeyPair // signed by CA; SANs: IP 127.0.0.1, DNS localhost
	Client *KeyPair // signed by CA; client-auth usage

	UntrustedCA     *Authority
	UntrustedServer *KeyPair // signed by UntrustedCA; same SANs as Server
	UntrustedClient *KeyPair // signed by UntrustedCA
}

// New generates a fresh Bundle. Each call produces unrelated keys.
func New() (*Bundle, error) {
	now := time.Now()
	b := &Bundle{}
	var err error
	if b.CA, err = newAuthority("slotproxy test CA", now); err != nil {
		return nil, fmt.Errorf("testcerts: trusted CA: %w", err)
	}
	if b.Server, err = b.CA.issue(serverTemplate(), now); err != nil {
		return nil, fmt.Errorf("testcerts: server certificate: %w", err)
	}
	if b.Client, err = b.CA.issue(clientTemplate(), now); err != nil {
		return nil, fmt.Errorf("testcerts: client certificate: %w", err)
	}
	if b.UntrustedCA, err = newAuthority("slotproxy UNTRUSTED test CA", now); err != nil {
		return nil, fmt.Errorf("testcerts: untrusted CA: %w", err)
	}
	if b.UntrustedServer, err = b.UntrustedCA.issue(serverTemplate(), now); err != nil {
		return nil, fmt.Errorf("testcerts: untrusted server certificate: %w", err)
	}
	if b.UntrustedClient, err = b.UntrustedCA.issue(clientTemplate(), now); err != nil {
		return nil, fmt.Errorf("testcerts: untrusted client certificate: %w", err)
	}
	return b, nil
}

// MustNew is New for tests: it calls tb.Fatal on error.
func MustNew(tb testing.TB) *Bundle {
	tb.Helper()
	b, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// ServerTLS returns a server configuration presenting Server. Client
// certificates are optional, but one that is presented must chain to CA
// (tls.VerifyClientCertIfGiven), so UntrustedClient is rejected. Each call
// returns a new, independent *tls.Config.
func (b *Bundle) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{b.Server.TLS},
		ClientCAs:    b.CA.Pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
}

// ServerTLSRequireClientCert is ServerTLS but demands a client certificate
// signed by CA (tls.RequireAndVerifyClientCert).
func (b *Bundle) ServerTLSRequireClientCert() *tls.Config {
	c := b.ServerTLS()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	return c
}

// UntrustedServerTLS returns a server configuration presenting
// UntrustedServer. A client built by ClientTLS must fail to verify it.
func (b *Bundle) UntrustedServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{b.UntrustedServer.TLS},
	}
}

// ClientTLS returns a client configuration that trusts only CA and verifies
// the server against serverName, which should be ServerIP or ServerDNSName
// (an IP address is matched against IP SANs by crypto/tls). It presents no
// client certificate. Each call returns a new, independent *tls.Config.
func (b *Bundle) ClientTLS(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    b.CA.Pool(),
		ServerName: serverName,
	}
}

// ClientTLSWithCert is ClientTLS that also presents Client.
func (b *Bundle) ClientTLSWithCert(serverName string) *tls.Config {
	c := b.ClientTLS(serverName)
	c.Certificates = []tls.Certificate{b.Client.TLS}
	return c
}

// File names used by WriteFiles and WriteClientFiles.
const (
	CAFile         = "ca.pem"
	ServerCertFile = "server-cert.pem"
	ServerKeyFile  = "server-key.pem"
	ClientCertFile = "client-cert.pem"
	ClientKeyFile  = "client-key.pem"
)

// WriteFiles writes CA's certificate and Server's certificate and key into
// dir (which must exist) as CAFile, ServerCertFile and ServerKeyFile, and
// returns their paths. Key files are written with mode 0600, certificates
// with 0644. Existing files are overwritten.
func (b *Bundle) WriteFiles(dir string) (caPath, certPath, keyPath string, err error) {
	caPath = filepath.Join(dir, CAFile)
	certPath = filepath.Join(dir, ServerCertFile)
	keyPath = filepath.Join(dir, ServerKeyFile)
	err = errors.Join(
		writeFile(caPath, b.CA.CertPEM, 0o644),
		writeFile(certPath, b.Server.CertPEM, 0o644),
		writeFile(keyPath, b.Server.KeyPEM, 0o600),
	)
	if err != nil {
		return "", "", "", err
	}
	return caPath, certPath, keyPath, nil
}

// WriteClientFiles writes Client's certificate and key into dir as
// ClientCertFile and ClientKeyFile (modes as in WriteFiles) and returns
// their paths.
func (b *Bundle) WriteClientFiles(dir string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, ClientCertFile)
	keyPath = filepath.Join(dir, ClientKeyFile)
	err = errors.Join(
		writeFile(certPath, b.Client.CertPEM, 0o644),
		writeFile(keyPath, b.Client.KeyPEM, 0o600),
	)
	if err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.WriteFile(path, data, perm); err != nil {
		return fmt.Errorf("testcerts: write %s: %w", path, err)
	}
	return nil
}

func serverTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: ServerDNSName},
		DNSNames:    []string{ServerDNSName},
		IPAddresses: []net.IP{net.ParseIP(ServerIP)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func clientTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: ClientCommonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func newAuthority(commonName string, now time.Time) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"slotproxy tests"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &Authority{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
	}, nil
}

// issue signs tmpl (whose serial and validity it fills in) with a fresh key.
func (a *Authority) issue(tmpl *x509.Certificate, now time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if tmpl.SerialNumber, err = randomSerial(); err != nil {
		return nil, err
	}
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(lifetime)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.key)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("build tls.Certificate: %w", err)
	}
	return &KeyPair{Cert: cert, CertPEM: certPEM, KeyPEM: keyPEM, TLS: pair}, nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return serial, nil
}
