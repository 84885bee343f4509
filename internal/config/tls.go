package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
)

// BackendTLSConfig returns the TLS configuration for connections to the
// backend, or nil for mode disabled. It reads the files named in
// Backend.TLS, so c should have passed Validate; errors name the key at
// fault.
//
//   - preferred, required: InsecureSkipVerify; the certificate is not
//     checked at all (preferred uses it only when the backend offers TLS,
//     see BackendTLSPreferred).
//   - verify-ca: InsecureSkipVerify plus a VerifyConnection callback that
//     checks the chain against the CA (system roots when none is set) but
//     not the name.
//   - verify-identity: standard verification against the CA with
//     ServerName (server_name, else the host of Backend.Address).
//
// Every mode sends ServerName as SNI and presents the client certificate
// if one is set.
func (c *Config) BackendTLSConfig() (*tls.Config, error) {
	return c.backendTLS(&source{})
}

// BackendTLSPreferred reports whether BackendTLSConfig is to be used only
// when the backend offers TLS (mode preferred).
func (c *Config) BackendTLSPreferred() bool { return c.Backend.TLS.Mode == TLSPreferred }

// ClientTLSConfig returns the TLS configuration the proxy offers clients,
// or nil when tls.cert and tls.key are both empty and tls.generate is off
// (the proxy then does not offer TLS). With tls.generate on and no files,
// the certificate is self-signed and made now; generated is then its
// SHA-256 fingerprint (hex, colon-separated), for the log. It reads the
// files named in TLS, so c should have passed Validate; errors name the key
// at fault.
func (c *Config) ClientTLSConfig() (cfg *tls.Config, generated string, err error) {
	cfg, err = c.clientTLS(&source{})
	if err != nil || cfg != nil || !c.TLS.Generate {
		return cfg, "", err
	}
	host, _, _ := net.SplitHostPort(c.Listen)
	cert, fp, err := SelfSigned(host)
	if err != nil {
		return nil, "", fmt.Errorf("tls: generate a certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: c.TLS.MinVersion}, fp, nil
}

// backendTLS builds BackendTLSConfig, reporting problems through s. It reads
// and checks every file that is set, even in mode disabled, so that a
// broken path is caught before someone turns TLS on.
func (c *Config) backendTLS(s *source) (*tls.Config, error) {
	t := c.Backend.TLS
	if !slices.Contains(tlsModes, t.Mode) {
		return nil, s.err("backend.tls.mode", fmt.Errorf("unknown mode %q (want %s)", t.Mode, joinModes()))
	}
	var roots *x509.CertPool // nil: system roots
	if t.CA != "" {
		if t.Mode == TLSRequired || t.Mode == TLSPreferred {
			return nil, s.err("backend.tls.ca", fmt.Errorf("mode %q does not verify the server, so a CA has no effect (use %s or %s)",
				t.Mode, TLSVerifyCA, TLSVerifyIdentity))
		}
		var err error
		if roots, err = loadCertPool(t.CA); err != nil {
			return nil, s.err("backend.tls.ca", err)
		}
	}
	cert, err := loadKeyPair(s, "backend.tls", t.Cert, t.Key)
	if err != nil {
		return nil, err
	}
	serverName := t.ServerName
	if serverName == "" {
		serverName, _, _ = net.SplitHostPort(c.Backend.Address)
	}
	cfg := &tls.Config{ServerName: serverName}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	switch t.Mode {
	case TLSDisabled:
		return nil, nil
	case TLSRequired, TLSPreferred:
		cfg.InsecureSkipVerify = true
	case TLSVerifyCA:
		// crypto/tls cannot check the chain without the name, so turn its
		// verification off and do the chain part in VerifyConnection, which
		// runs regardless.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = verifyChain(roots)
	case TLSVerifyIdentity:
		// An empty address is still to come from a flag; Validate rejects it.
		if serverName == "" && c.Backend.Address != "" {
			return nil, s.err("backend.tls.mode", fmt.Errorf("%s needs backend.tls.server_name, since backend address %q has no host",
				t.Mode, c.Backend.Address))
		}
		cfg.RootCAs = roots
	}
	return cfg, nil
}

// clientTLS builds ClientTLSConfig, reporting problems through s.
func (c *Config) clientTLS(s *source) (*tls.Config, error) {
	t := c.TLS
	if t.MinVersion < tls.VersionTLS10 || t.MinVersion > tls.VersionTLS13 {
		return nil, s.err("tls.min_version", fmt.Errorf("unsupported TLS version %#04x", t.MinVersion))
	}
	cert, err := loadKeyPair(s, "tls", t.Cert, t.Key)
	if err != nil || cert == nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: t.MinVersion}, nil
}

// verifyChain returns a tls.Config.VerifyConnection callback that accepts a
// peer whose certificate chains to roots (the system roots when nil), for
// server authentication, whatever names it holds.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("backend presented no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("verifying backend certificate chain: %w", err)
		}
		return nil
	}
}

// loadKeyPair loads the PEM certificate chain certFile and its private key
// keyFile, found under the keys prefix.cert and prefix.key. It returns nil
// when both are empty; a problem is reported on the key of the file at
// fault.
func loadKeyPair(s *source, prefix, certFile, keyFile string) (*tls.Certificate, error) {
	certKey, keyKey := prefix+".cert", prefix+".key"
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case keyFile == "":
		return nil, s.err(certKey, fmt.Errorf("set without %s", keyKey))
	case certFile == "":
		return nil, s.err(keyKey, fmt.Errorf("set without %s", certKey))
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, s.err(certKey, err)
	}
	if _, err := parseCertificates(certPEM); err != nil {
		return nil, s.err(certKey, fmt.Errorf("%s: %w", certFile, err))
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, s.err(keyKey, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, s.err(keyKey, fmt.Errorf("%s (for %s): %w", keyFile, certFile, err))
	}
	return &pair, nil
}

// loadCertPool reads a PEM bundle of CA certificates.
func loadCertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// parseCertificates parses every CERTIFICATE block in data, of which there
// must be at least one; other blocks (such as keys) are skipped.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// joinModes lists the TLS modes for error messages.
func joinModes() string {
	names := make([]string, len(tlsModes))
	for i, m := range tlsModes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}
