package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// This file is the authentication phase: relayed packet by packet between
// client and backend after the handshake response or COM_CHANGE_USER. The
// proxy holds no credentials; it only makes sure that no password crosses
// the backend hop in clear:
//
//   - A plugin that sends the password as it is (mysql_clear_password,
//     MariaDB's dialog for PAM) is refused when the backend hop is
//     plaintext, with an error saying why.
//   - caching_sha2_password full authentication and sha256_password send
//     the password as it is when the client's connection is TLS; when the
//     backend's is not, the proxy asks the backend for its RSA public key
//     and sends the password encrypted with it instead ("bridging").

// Auth plugins by how they treat the password.
const (
	pluginCachingSHA2 = "caching_sha2_password"
	pluginSHA256      = "sha256_password"
)

// cleartextPlugin reports whether plugin sends the password as it is, to
// whatever hop it is on.
func cleartextPlugin(plugin string) bool {
	return plugin == "mysql_clear_password" || plugin == "dialog"
}

// errAuthFailed means the backend rejected the credentials; its ERR packet
// was relayed to the client.
var errAuthFailed = errors.New("authentication failed")

// errCleartext refuses a cleartext password over a plaintext backend hop.
func errCleartext(plugin string) *wire.Error {
	return wire.Errorf(mysql.ER_NOT_SUPPORTED_AUTH_MODE, "08004",
		"the backend asks for the password in clear (auth plugin %s) and the proxy's connection to it is not TLS; set backend.tls", plugin)
}

// authRelay relays the auth exchange after the handshake response or
// COM_CHANGE_USER, translating sequence ids between the two hops (TLS on one
// hop and not the other shifts them, and so do packets the proxy exchanges
// with the backend on its own).
type authRelay struct {
	s          *session
	delta      byte // backend sequence id minus client sequence id
	scramble   []byte
	plugin     string // the plugin in use
	clientTLS  bool
	backendTLS bool
	buf        []byte
	status     uint16 // of the backend's final OK
	// pending is a cleartext password the client sent and the proxy held
	// back, having asked the backend for its public key instead: it goes
	// to the backend RSA-encrypted when the key arrives.
	pending []byte
}

// mustBridge reports whether a password the client sends as it is, over
// its TLS connection, must be encrypted for the plaintext backend hop.
func (a *authRelay) mustBridge() bool { return a.clientTLS && !a.backendTLS }

// holdPassword decides what the backend gets for the auth data the client
// sent with its handshake response or COM_CHANGE_USER. Usually the data as
// it is; for sha256_password over a TLS client and a plaintext backend the
// data is the cleartext password, which is held back (pending) while the
// backend is asked for its public key (the data 0x01).
func (a *authRelay) holdPassword(data []byte) []byte {
	if a.plugin != pluginSHA256 || !a.mustBridge() || len(data) == 0 || bytes.Equal(data, []byte{1}) {
		return data
	}
	a.pending = append([]byte(nil), data...)
	return []byte{1}
}

func (a *authRelay) run() error {
	defer clear(a.pending)
	s := a.s
	for {
		pkt, seq, err := s.back.ReadPacket(a.buf, handshakePacketLimit)
		if err != nil {
			return fmt.Errorf("backend during auth: %w", wire.NoEOF(err))
		}
		a.buf = pkt
		if len(pkt) == 0 {
			return fmt.Errorf("%w: empty auth packet from backend", wire.ErrMalformed)
		}
		if a.pending != nil && pkt[0] == 0x01 {
			// The public key the proxy asked for.
			if err := a.sendEncrypted(a.pending, pkt, seq); err != nil {
				return err
			}
			clear(a.pending)
			a.pending = nil
			continue
		}
		if pkt[0] == 0xfe && len(pkt) > 1 { // auth switch request: plugin name, NUL, new scramble
			rest := pkt[1:]
			if i := bytes.IndexByte(rest, 0); i >= 0 {
				a.plugin = string(rest[:i])
				a.scramble = append(a.scramble[:0], bytes.TrimSuffix(rest[i+1:], []byte{0})...) // one terminator; a scramble may hold NUL bytes
			} else {
				a.plugin = string(rest)
			}
			if cleartextPlugin(a.plugin) && !a.backendTLS {
				_ = sendError(s.client, seq-a.delta, errCleartext(a.plugin))
				return fmt.Errorf("refused auth plugin %s over a plaintext backend connection", a.plugin)
			}
		}
		if err := a.toClient(pkt, seq); err != nil {
			return err
		}
		switch pkt[0] {
		case 0x00:
			a.status = wire.OKStatus(pkt)
			return nil
		case 0xff:
			return errAuthFailed
		case 0xfe:
		case 0x01: // extra auth data
			if len(pkt) == 2 && pkt[1] == 3 { // caching_sha2 fast auth succeeded: OK follows
				continue
			}
			if len(pkt) == 2 && pkt[1] == 4 && !a.clientTLS && a.backendTLS {
				if err := a.bridgeToTLS(); err != nil {
					return err
				}
				continue
			}
			if len(pkt) == 2 && pkt[1] == 4 && a.mustBridge() {
				// caching_sha2 full authentication: the client sends its
				// password in clear next.
				pw, cseq, err := s.client.ReadPacket(nil, handshakePacketLimit)
				if err != nil {
					return fmt.Errorf("client during auth: %w", wire.NoEOF(err))
				}
				err = a.bridge(pw, cseq, 2)
				clear(pw)
				if err != nil {
					return err
				}
				continue
			}
		default:
			return fmt.Errorf("%w: unexpected auth packet 0x%02x from backend", wire.ErrMalformed, pkt[0])
		}
		// The client answers the packet just relayed.
		pkt, cseq, err := s.client.ReadPacket(a.buf, handshakePacketLimit)
		if err != nil {
			return fmt.Errorf("client during auth: %w", wire.NoEOF(err))
		}
		a.buf = pkt
		if a.plugin == pluginSHA256 && a.mustBridge() && len(pkt) > 0 && !bytes.Equal(pkt, []byte{1}) {
			// sha256_password after an auth switch: the client's answer
			// is its password in clear.
			err := a.bridge(pkt, cseq, 1)
			clear(pkt)
			if err != nil {
				return err
			}
			continue
		}
		if _, err := s.back.WritePacket(pkt, cseq+a.delta); err != nil {
			return err
		}
		clear(pkt)
		if err := s.back.Flush(); err != nil {
			return err
		}
	}
}

func (a *authRelay) toClient(pkt []byte, seq byte) error {
	if _, err := a.s.client.WritePacket(pkt, seq-a.delta); err != nil {
		return err
	}
	return a.s.client.Flush()
}

// bridge sends the backend the password pw (the client's cleartext answer,
// sequence id cseq) RSA-encrypted: it asks for the backend's public key
// with the byte request (2 for caching_sha2_password, 1 for
// sha256_password) and encrypts with it. The password exists only in the
// caller's buffer, which the caller wipes.
func (a *authRelay) bridge(pw []byte, cseq, request byte) error {
	s := a.s
	if _, err := s.back.WritePacket([]byte{request}, cseq+a.delta); err != nil {
		return err
	}
	if err := s.back.Flush(); err != nil {
		return err
	}
	keyPkt, kseq, err := s.back.ReadPacket(nil, handshakePacketLimit)
	if err != nil {
		return fmt.Errorf("backend public key: %w", wire.NoEOF(err))
	}
	if len(keyPkt) > 0 && keyPkt[0] == 0xff {
		if err := a.toClient(keyPkt, kseq); err != nil {
			return err
		}
		return errAuthFailed
	}
	return a.sendEncrypted(pw, keyPkt, kseq)
}

// sendEncrypted sends the backend the password pw encrypted with the
// public key in keyPkt, which the backend sent with sequence id kseq in
// answer to a packet of the proxy's own; the backend's replies are then
// two ahead of the client's numbering.
func (a *authRelay) sendEncrypted(pw, keyPkt []byte, kseq byte) error {
	s := a.s
	pub, err := parsePublicKey(keyPkt)
	if err == nil && len(a.scramble) == 0 {
		err = errors.New("no scramble to encrypt the password with")
	}
	if err != nil {
		_ = sendError(s.client, kseq-a.delta, wire.Errorf(mysql.ER_ACCESS_DENIED_ERROR, "28000",
			"the backend's RSA public key for %s is not usable: %v", a.plugin, err))
		return err
	}
	password := string(bytes.TrimRight(pw, "\x00"))
	enc, err := mysql.EncryptPassword(password, a.scramble, pub)
	if err != nil {
		return fmt.Errorf("encrypt password for backend: %w", err)
	}
	if _, err := s.back.WritePacket(enc, kseq+1); err != nil {
		return err
	}
	a.delta += 2
	return s.back.Flush()
}

// proxyKey is the proxy's own RSA key pair, made on first use, for clients
// that ask for a public key on their plaintext hop while the backend's hop
// is TLS (see bridgeToTLS).
var proxyKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

// bridgeToTLS completes caching_sha2_password full authentication for a
// plaintext client in front of a TLS backend hop: the backend, on TLS,
// expects the password in clear; the client, on plaintext, asks for a
// public key (2) to encrypt it with. The proxy answers with its own key,
// decrypts what the client sends, and passes the password on inside the
// backend's TLS. A client that encrypts with a key it already had (the
// server's) is relayed as it is and fails, as the proxy cannot read it.
func (a *authRelay) bridgeToTLS() error {
	s := a.s
	ans, cseq, err := s.client.ReadPacket(nil, handshakePacketLimit)
	if err != nil {
		return fmt.Errorf("client during auth: %w", wire.NoEOF(err))
	}
	defer clear(ans)
	bseq := cseq + a.delta
	if len(ans) == 1 && ans[0] == 2 {
		key, err := proxyKey()
		if err != nil {
			return fmt.Errorf("make the proxy's RSA key: %w", err)
		}
		der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		if _, err := s.client.WritePacket(append([]byte{1}, pemKey...), cseq+1); err != nil {
			return err
		}
		if err := s.client.Flush(); err != nil {
			return err
		}
		enc, _, err := s.client.ReadPacket(nil, handshakePacketLimit)
		if err != nil {
			return fmt.Errorf("client during auth: %w", wire.NoEOF(err))
		}
		plain, err := rsa.DecryptOAEP(sha1.New(), rand.Reader, key, enc, nil)
		if err != nil {
			_ = sendError(s.client, cseq+3, wire.Errorf(mysql.ER_ACCESS_DENIED_ERROR, "28000",
				"the password the client encrypted cannot be decrypted"))
			return fmt.Errorf("decrypt the client's password: %w", err)
		}
		defer clear(plain)
		for i := range plain {
			if len(a.scramble) > 0 {
				plain[i] ^= a.scramble[i%len(a.scramble)]
			}
		}
		ans = append(ans[:0], plain...) // the password and its NUL
		a.delta -= 2                    // two packets the backend never saw
	}
	if _, err := s.back.WritePacket(ans, bseq); err != nil {
		return err
	}
	return s.back.Flush()
}

func parsePublicKey(pkt []byte) (*rsa.PublicKey, error) {
	if len(pkt) < 2 || pkt[0] != 0x01 {
		return nil, fmt.Errorf("%w: expected public key packet", wire.ErrMalformed)
	}
	block, _ := pem.Decode(pkt[1:])
	if block == nil {
		return nil, fmt.Errorf("%w: public key is not PEM", wire.ErrMalformed)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse backend public key: %w", err)
	}
	rk, ok := key.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("backend public key is not RSA")
	}
	return rk, nil
}

// changeUser relays COM_CHANGE_USER, whose header h was read: the command
// goes to the backend (its auth data held back for bridging when needed),
// then the re-authentication is relayed like the handshake's. The server
// forgets the session's state, and so does the executor.
func (s *session) changeUser(h wire.Header) error {
	payload, _, err := s.client.ReadRest(nil, h, handshakePacketLimit)
	if err != nil {
		return err
	}
	defer clear(payload)
	cu, err := parseChangeUser(payload, s.caps)
	if err != nil {
		_ = sendError(s.client, 1, errHandshake("bad COM_CHANGE_USER"))
		return err
	}
	a := authRelay{s: s, scramble: append([]byte(nil), s.scramble...), plugin: cu.plugin,
		clientTLS: s.tls, backendTLS: s.backendTLS}
	if a.plugin == "" {
		a.plugin = s.plugin
	}
	if cleartextPlugin(a.plugin) && !a.backendTLS {
		_ = sendError(s.client, 1, errCleartext(a.plugin))
		s.ex.Reset(0)
		return nil // the backend never saw it; the session stays as it was
	}
	out := payload
	if data := payload[cu.authStart:cu.authEnd]; cu.secure {
		if held := a.holdPassword(data); len(held) != len(data) || !bytes.Equal(held, data) {
			out = append(append(append([]byte(nil), payload[:cu.authStart-1]...), byte(len(held))), held...)
			out = append(out, payload[cu.authEnd:]...)
		}
	}
	if _, err := s.back.WritePacket(out, 0); err != nil {
		return err
	}
	if err := s.back.Flush(); err != nil {
		return err
	}
	err = a.run()
	s.ex.Reset(a.status)
	if errors.Is(err, errAuthFailed) {
		s.metrics().authFailed()
		return nil // the client saw the ERR; the server closes the connection if it wants to
	}
	return err
}

// changeUserPacket locates the fields of COM_CHANGE_USER the proxy needs.
type changeUserPacket struct {
	authStart, authEnd int  // the auth data, payload[authStart:authEnd]
	secure             bool // the auth data has a one-byte length prefix
	plugin             string
}

func parseChangeUser(p []byte, caps uint32) (changeUserPacket, error) {
	var cu changeUserPacket
	bad := func(what string) error { return fmt.Errorf("%w: COM_CHANGE_USER: %s", wire.ErrMalformed, what) }
	pos := 1
	nul := bytes.IndexByte(p[pos:], 0)
	if nul < 0 {
		return cu, bad("unterminated user name")
	}
	pos += nul + 1
	if caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		if pos >= len(p) || pos+1+int(p[pos]) > len(p) {
			return cu, bad("truncated auth data")
		}
		cu.secure = true
		cu.authStart, cu.authEnd = pos+1, pos+1+int(p[pos])
		pos = cu.authEnd
	} else {
		i := bytes.IndexByte(p[pos:], 0)
		if i < 0 {
			return cu, bad("unterminated auth data")
		}
		cu.authStart, cu.authEnd = pos, pos+i
		pos += i + 1
	}
	if pos >= len(p) {
		return cu, nil
	}
	i := bytes.IndexByte(p[pos:], 0) // database
	if i < 0 {
		return cu, nil
	}
	pos += i + 1
	if pos+2 > len(p) {
		return cu, nil
	}
	pos += 2 // character set
	if caps&mysql.CLIENT_PLUGIN_AUTH != 0 && pos < len(p) {
		name := p[pos:]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		cu.plugin = string(name)
	}
	return cu, nil
}
