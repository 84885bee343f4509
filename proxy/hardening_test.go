package proxy_test

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// ---------------------------------------------------------------------------
// wireConn: a raw protocol client that puts exact bytes on the wire. It is
// safe to use from goroutines (it reports errors instead of failing tests).

const wireMax = 1<<24 - 1 // largest payload of one wire packet

// wireCaps are the capability flags a wireConn asks for.
const wireCaps = gomysql.CLIENT_LONG_PASSWORD | gomysql.CLIENT_LONG_FLAG | gomysql.CLIENT_PROTOCOL_41 |
	gomysql.CLIENT_SECURE_CONNECTION | gomysql.CLIENT_PLUGIN_AUTH | gomysql.CLIENT_TRANSACTIONS |
	gomysql.CLIENT_MULTI_RESULTS | gomysql.CLIENT_PS_MULTI_RESULTS

type wireConn struct {
	net.Conn
	br           *bufio.Reader
	connID       uint32 // backend connection id from the greeting
	scramble     []byte
	deprecateEOF bool
}

// serverError is an ERR packet.
type serverError struct {
	Code    uint16
	Message string
}

func (e *serverError) Error() string { return fmt.Sprintf("ERR %d: %s", e.Code, e.Message) }

func parseErrPacket(p []byte) *serverError {
	e := &serverError{}
	if len(p) >= 3 {
		e.Code = binary.LittleEndian.Uint16(p[1:])
		msg := p[3:]
		if len(msg) >= 6 && msg[0] == '#' {
			msg = msg[6:]
		}
		e.Message = string(msg)
	}
	return e
}

func dialWire(addr string, timeout time.Duration) (*wireConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	return &wireConn{Conn: c, br: bufio.NewReaderSize(c, 64<<10)}, nil
}

// readPacket reads one wire packet.
func (w *wireConn) readPacket() ([]byte, byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		return nil, 0, err
	}
	p := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
	if _, err := io.ReadFull(w.br, p); err != nil {
		return nil, 0, err
	}
	return p, h[3], nil
}

// readFull reads one logical packet (continuations joined).
func (w *wireConn) readFull() ([]byte, byte, error) {
	var out []byte
	for {
		p, seq, err := w.readPacket()
		if err != nil {
			return out, seq, err
		}
		out = append(out, p...)
		if len(p) < wireMax {
			return out, seq, nil
		}
	}
}

// writePacket frames payload as one logical packet from sequence id seq.
func (w *wireConn) writePacket(payload []byte, seq byte) error {
	for {
		n := min(len(payload), wireMax)
		var buf []byte
		if n < 64<<10 {
			buf = append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload[:n]...)
		} else {
			if _, err := w.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}); err != nil {
				return err
			}
			buf = payload[:n]
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		seq++
		payload = payload[n:]
		if n < wireMax {
			return nil
		}
	}
}

func (w *wireConn) command(payload []byte) error { return w.writePacket(payload, 0) }

func (w *wireConn) query(q string) error { return w.command(append([]byte{gomysql.COM_QUERY}, q...)) }

// greet reads the server greeting and keeps the connection id and scramble.
func (w *wireConn) greet() error {
	g, _, err := w.readFull()
	if err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	if len(g) > 0 && g[0] == 0xff {
		return parseErrPacket(g)
	}
	if len(g) < 1 || g[0] != 10 {
		return fmt.Errorf("greeting: not protocol 10: %q", g)
	}
	nul := bytes.IndexByte(g[1:], 0)
	if nul < 0 {
		return errors.New("greeting: no version terminator")
	}
	pos := 2 + nul
	if len(g) < pos+31 {
		return errors.New("greeting: too short")
	}
	w.connID = binary.LittleEndian.Uint32(g[pos:])
	w.scramble = append([]byte{}, g[pos+4:pos+12]...)
	authLen := int(g[pos+20])
	pos += 31
	n := max(13, authLen-8)
	if len(g) < pos+n {
		return errors.New("greeting: truncated scramble")
	}
	w.scramble = append(w.scramble, bytes.TrimRight(g[pos:pos+n], "\x00")...)
	return nil
}

// handshakeResponse builds a HandshakeResponse41 payload. The auth response
// is framed as caps ask (length-encoded, one length byte, or NUL-ended).
func handshakeResponse(caps uint32, user string, auth []byte, db, plugin string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, caps)
	b = binary.LittleEndian.AppendUint32(b, 1<<24)
	b = append(b, 45) // utf8mb4_general_ci
	b = append(b, make([]byte, 23)...)
	b = append(b, user...)
	b = append(b, 0)
	switch {
	case caps&gomysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
		b = appendLenEnc(b, uint64(len(auth)))
		b = append(b, auth...)
	case caps&gomysql.CLIENT_SECURE_CONNECTION != 0:
		b = append(b, byte(len(auth)))
		b = append(b, auth...)
	default:
		b = append(b, auth...)
		b = append(b, 0)
	}
	if caps&gomysql.CLIENT_CONNECT_WITH_DB != 0 {
		b = append(b, db...)
		b = append(b, 0)
	}
	if caps&gomysql.CLIENT_PLUGIN_AUTH != 0 {
		b = append(b, plugin...)
		b = append(b, 0)
	}
	return b
}

func appendLenEnc(b []byte, n uint64) []byte {
	switch {
	case n < 251:
		return append(b, byte(n))
	case n < 1<<16:
		return append(b, 0xfc, byte(n), byte(n>>8))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xfe), n)
}

// login answers the greeting as user with the shared server's default
// authentication plugin (testdb.Server.DefaultAuthPlugin) and waits for OK,
// following an auth switch if the server asks for one and, for
// caching_sha2_password, a full authentication with the RSA key exchange.
func (w *wireConn) login(user, pass, db string, extraCaps uint32) error {
	caps := wireCaps | extraCaps
	if db != "" {
		caps |= gomysql.CLIENT_CONNECT_WITH_DB
	}
	w.deprecateEOF = caps&gomysql.CLIENT_DEPRECATE_EOF != 0
	plugin := testdb.Shared().DefaultAuthPlugin()
	scramble := w.scramble
	auth, err := authResponse(plugin, scramble, pass)
	if err != nil {
		return err
	}
	if err := w.writePacket(handshakeResponse(caps, user, auth, db, plugin), 1); err != nil {
		return err
	}
	for {
		p, seq, err := w.readFull()
		if err != nil {
			return fmt.Errorf("login: %w", err)
		}
		if len(p) == 0 {
			return errors.New("login: empty packet")
		}
		switch {
		case p[0] == 0x00:
			return nil
		case p[0] == 0xff:
			return parseErrPacket(p)
		case p[0] == 0xfe: // auth switch request: plugin name, then its data
			name, data, _ := bytes.Cut(p[1:], []byte{0})
			plugin, scramble = string(name), switchScramble(string(name), data)
			auth, err := authResponse(plugin, scramble, pass)
			if err != nil {
				return err
			}
			if err := w.writePacket(auth, seq+1); err != nil {
				return err
			}
		case p[0] == 0x01 && plugin == "caching_sha2_password" && len(p) == 2 && p[1] == 3:
			// fast authentication succeeded; OK follows
		case p[0] == 0x01 && plugin == "caching_sha2_password" && len(p) == 2 && p[1] == 4:
			// full authentication on a plaintext connection: ask for the
			// server's RSA key
			if err := w.writePacket([]byte{2}, seq+1); err != nil {
				return err
			}
		case p[0] == 0x01 && plugin == "caching_sha2_password":
			block, _ := pem.Decode(p[1:])
			if block == nil {
				return fmt.Errorf("login: no RSA public key in %q", p)
			}
			key, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return fmt.Errorf("login: %w", err)
			}
			rsaKey, ok := key.(*rsa.PublicKey)
			if !ok {
				return fmt.Errorf("login: server key is a %T", key)
			}
			enc, err := gomysql.EncryptPassword(pass, scramble, rsaKey)
			if err != nil {
				return fmt.Errorf("login: %w", err)
			}
			if err := w.writePacket(enc, seq+1); err != nil {
				return err
			}
		default:
			return fmt.Errorf("login: unexpected packet %q", p)
		}
	}
}

// authResponse is the first authentication answer of plugin to scramble.
// switchScramble is the scramble an auth switch request carries for plugin:
// MariaDB's ed25519 sends 32 random bytes with no terminator (any of them,
// the last included, may be 0); the other plugins send a NUL-terminated one.
func switchScramble(plugin string, data []byte) []byte {
	if plugin == "client_ed25519" {
		return data
	}
	return bytes.TrimSuffix(data, []byte{0})
}

func authResponse(plugin string, scramble []byte, pass string) ([]byte, error) {
	switch plugin {
	case "mysql_native_password":
		return gomysql.CalcNativePassword(scramble, []byte(pass)), nil
	case "caching_sha2_password":
		return gomysql.CalcCachingSha2Password(scramble, []byte(pass)), nil
	case "client_ed25519":
		return gomysql.CalcEd25519Password(scramble, pass)
	}
	return nil, fmt.Errorf("login: no support for the %s plugin", plugin)
}

// loginWire connects and logs in as testdb.User.
func loginWire(addr, db string, deprecateEOF bool, timeout time.Duration) (*wireConn, error) {
	w, err := dialWire(addr, timeout)
	if err != nil {
		return nil, err
	}
	var extra uint32
	if deprecateEOF {
		extra = gomysql.CLIENT_DEPRECATE_EOF
	}
	if err := w.greet(); err != nil {
		_ = w.Close()
		return nil, err
	}
	if err := w.login(testdb.User, testdb.Password, db, extra); err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

func mustLoginWire(t *testing.T, addr, db string) *wireConn {
	t.Helper()
	w, err := loginWire(addr, db, true, 30*time.Second)
	if err != nil {
		t.Fatalf("login at %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// readRows reads the rest of a text result set after its column count:
// cols column definitions, then rows (discarded, streamed) up to the
// terminator. It returns the number of rows read.
func (w *wireConn) readRows(cols int) (int, error) {
	for range cols {
		if _, _, err := w.readFull(); err != nil {
			return 0, err
		}
	}
	rows := 0
	for {
		first, n, err := w.streamPacket(io.Discard)
		if err != nil {
			return rows, err
		}
		if first == 0xfe && n < wireMax {
			return rows, nil
		}
		rows++
	}
}

// streamPacket reads one logical packet, copying its wire bytes (headers
// included) to dst, and returns its first payload byte and its length.
func (w *wireConn) streamPacket(dst io.Writer) (first byte, n int, err error) {
	for i := 0; ; i++ {
		var h [4]byte
		if _, err := io.ReadFull(w.br, h[:]); err != nil {
			return first, n, err
		}
		_, _ = dst.Write(h[:])
		l := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if i == 0 && l > 0 {
			b, err := w.br.Peek(1)
			if err != nil {
				return first, n, err
			}
			first = b[0]
		}
		if _, err := io.CopyN(dst, w.br, int64(l)); err != nil {
			return first, n, err
		}
		n += l
		if l < wireMax {
			return first, n, nil
		}
	}
}

// streamResult reads the response to a single-statement query (OK, ERR, or
// one result set with fewer than 251 columns) and returns the SHA-256 of
// every byte of it as read from the socket, and the number of rows.
func (w *wireConn) streamResult() (sum [32]byte, rows int, err error) {
	h := sha256.New()
	first, _, err := w.streamPacket(h)
	if err != nil {
		return sum, 0, err
	}
	if first == 0x00 || first == 0xff {
		copy(sum[:], h.Sum(nil))
		return sum, 0, nil
	}
	for range int(first) {
		if _, _, err := w.streamPacket(h); err != nil {
			return sum, 0, err
		}
	}
	if !w.deprecateEOF {
		if _, _, err := w.streamPacket(h); err != nil {
			return sum, 0, err
		}
	}
	for {
		first, n, err := w.streamPacket(h)
		if err != nil {
			return sum, rows, err
		}
		if first == 0xff || (first == 0xfe && n < wireMax) {
			copy(sum[:], h.Sum(nil))
			return sum, rows, nil
		}
		rows++
	}
}

// readUntilClosed reads logical packets until the peer closes the
// connection (nil error) or the deadline passes.
func (w *wireConn) readUntilClosed(d time.Duration) ([][]byte, error) {
	_ = w.SetReadDeadline(time.Now().Add(d))
	var pkts [][]byte
	for {
		p, _, err := w.readFull()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return pkts, fmt.Errorf("still open after %v (%d packets read)", d, len(pkts))
			}
			return pkts, nil
		}
		pkts = append(pkts, p)
	}
}

// noPanics fails the test when the proxy logged a recovered panic.
func noPanics(t *testing.T, p *testProxy) {
	t.Helper()
	if logs := p.logs.String(); strings.Contains(logs, "panic") {
		t.Fatalf("the proxy logged a panic:\n%s", logs)
	}
}

// stillServes checks that an established connection still answers.
func stillServes(t *testing.T, w *wireConn) {
	t.Helper()
	_ = w.SetDeadline(time.Now().Add(10 * time.Second))
	if err := w.query("SELECT 1"); err != nil {
		t.Fatalf("established connection: %v", err)
	}
	if got := readScalar(t, w); got != "1" {
		t.Fatalf("established connection: SELECT 1 = %q", got)
	}
}

// readScalar reads a one-row, one-column text result and returns its value.
func readScalar(t *testing.T, w *wireConn) string {
	t.Helper()
	p, _, err := w.readFull()
	if err != nil {
		t.Fatalf("read result: %v", err)
	}
	if p[0] == 0xff {
		t.Fatalf("query failed: %v", parseErrPacket(p))
	}
	for range int(p[0]) {
		if _, _, err := w.readFull(); err != nil {
			t.Fatal(err)
		}
	}
	if !w.deprecateEOF {
		if _, _, err := w.readFull(); err != nil {
			t.Fatal(err)
		}
	}
	var val string
	for {
		row, _, err := w.readFull()
		if err != nil {
			t.Fatal(err)
		}
		if row[0] == 0xfe && len(row) < wireMax {
			return val
		}
		if row[0] == 0xff {
			t.Fatalf("query failed: %v", parseErrPacket(row))
		}
		if row[0] == 0xfb {
			val = "NULL"
			continue
		}
		l, n := lenEncAt(row)
		val = string(row[n : n+int(l)])
	}
}

func lenEncAt(b []byte) (uint64, int) {
	switch b[0] {
	case 0xfc:
		return uint64(b[1]) | uint64(b[2])<<8, 3
	case 0xfd:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4
	case 0xfe:
		return binary.LittleEndian.Uint64(b[1:]), 9
	}
	return uint64(b[0]), 1
}

// ---------------------------------------------------------------------------
// 1. Malformed clients.

// TestMalformedHandshake: broken handshakes close only their own connection,
// release their unauthenticated slot (the cap is 2, and the cases run one
// after the other), and never panic the proxy.
func TestMalformedHandshake(t *testing.T) {
	p := startProxy(t, func(c *proxy.Config) {
		c.HandshakeTimeout = time.Second
		c.MaxUnauthenticated = 2
	})
	healthy := mustLoginWire(t, p.addr, testdb.DBName)
	greeted := func(t *testing.T, addr string) *wireConn {
		t.Helper()
		w, err := dialWire(addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		if err := w.greet(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	write := func(t *testing.T, w *wireConn, b ...[]byte) {
		t.Helper()
		for _, x := range b {
			if _, err := w.Write(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	halfClose := func(w *wireConn) { _ = w.Conn.(*net.TCPConn).CloseWrite() }
	nativeAuth := func(w *wireConn) []byte {
		return gomysql.CalcNativePassword(w.scramble, []byte(testdb.Password))
	}
	const anyPackets, serverAnswer = -1, -2
	plugin := testdb.Shared().DefaultAuthPlugin()
	cases := []struct {
		name string
		// attack drives one connection to addr; it returns it for the
		// close check.
		attack func(t *testing.T, addr string) *wireConn
		// wantErr: the ERR code the client must get before the close; 0
		// means no packet at all, anyPackets means whatever the server
		// says, serverAnswer means what the server answers to the same
		// bytes sent to it directly (its own answer, relayed).
		wantErr int
	}{
		{"zero-length handshake response", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			write(t, w, []byte{0, 0, 0, 1})
			return w
		}, 0},
		{"truncated handshake response, then close", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			write(t, w, []byte{100, 0, 0, 1}, bytes.Repeat([]byte{0x85}, 20))
			halfClose(w)
			return w
		}, 0},
		{"truncated handshake response, client stays (handshake deadline)", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			write(t, w, []byte{100, 0, 0, 1}, bytes.Repeat([]byte{0x85}, 20))
			return w
		}, 0},
		{"length 0xffffff with 10 bytes, then close", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			write(t, w, []byte{0xff, 0xff, 0xff, 1}, bytes.Repeat([]byte{0xa5}, 10))
			halfClose(w)
			return w
		}, 0},
		{"handshake response above the 1 MiB limit", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			write(t, w, []byte{0, 0, 0x20, 1}, bytes.Repeat([]byte{0xa5}, 64<<10))
			return w
		}, 0},
		{"HTTP request before the greeting", func(t *testing.T, addr string) *wireConn {
			w, err := dialWire(addr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			write(t, w, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			if err := w.greet(); err != nil { // the greeting still comes first
				t.Fatal(err)
			}
			return w
		}, 0},
		{"TLS ClientHello before the greeting", func(t *testing.T, addr string) *wireConn {
			w, err := dialWire(addr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			hello := append([]byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03}, bytes.Repeat([]byte{7}, 160)...)
			write(t, w, hello)
			return w
		}, anyPackets},
		{"random garbage after the greeting", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			rng := rand.New(rand.NewPCG(1, 2))
			junk := make([]byte, 4096)
			for i := range junk {
				junk[i] = byte(rng.UintN(256))
			}
			write(t, w, junk)
			halfClose(w)
			return w
		}, anyPackets},
		{"empty auth field", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			resp := handshakeResponse(wireCaps|gomysql.CLIENT_CONNECT_WITH_DB, testdb.User, nil, testdb.DBName, plugin)
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, serverAnswer},
		{"auth field of 255 bytes", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			resp := handshakeResponse(wireCaps|gomysql.CLIENT_CONNECT_WITH_DB, testdb.User, bytes.Repeat([]byte{0x41}, 255), testdb.DBName, plugin)
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, serverAnswer},
		{"auth length byte 255 with 20 bytes following", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			resp := handshakeResponse(wireCaps, testdb.User, nil, "", "")
			resp = resp[:len(resp)-2] // drop the empty auth and plugin name
			resp = append(resp, 255)
			resp = append(resp, nativeAuth(w)...)
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, gomysql.ER_HANDSHAKE_ERROR},
		{"length-encoded auth length 65535 with 20 bytes following", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			caps := uint32(wireCaps | gomysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
			resp := handshakeResponse(caps, testdb.User, nil, "", "")
			resp = resp[:len(resp)-2]
			resp = append(resp, 0xfc, 0xff, 0xff)
			resp = append(resp, nativeAuth(w)...)
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, gomysql.ER_HANDSHAKE_ERROR},
		{"length-encoded auth length 2^64-1", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			caps := uint32(wireCaps | gomysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
			resp := handshakeResponse(caps, testdb.User, nil, "", "")
			resp = resp[:len(resp)-2]
			resp = append(resp, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
			resp = append(resp, nativeAuth(w)...)
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, gomysql.ER_HANDSHAKE_ERROR},
		{"user name without terminator", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			resp := handshakeResponse(wireCaps, "", nil, "", "")[:32]
			resp = append(resp, "nativenativenative"...)
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, gomysql.ER_HANDSHAKE_ERROR},
		{"pre-4.1 handshake response", func(t *testing.T, addr string) *wireConn {
			w := greeted(t, addr)
			resp := handshakeResponse(wireCaps&^gomysql.CLIENT_PROTOCOL_41, testdb.User, nativeAuth(w), "", "mysql_native_password")
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			return w
		}, gomysql.ER_HANDSHAKE_ERROR},
		{"truncated auth switch response, then close", func(t *testing.T, addr string) *wireConn {
			// Naming another plugin makes the server ask for an auth switch;
			// the answer is a packet header promising more than follows.
			w := greeted(t, addr)
			resp := handshakeResponse(wireCaps, testdb.User, []byte("x"), "", "client_ed25519")
			if err := w.writePacket(resp, 1); err != nil {
				t.Fatal(err)
			}
			sw, _, err := w.readFull()
			if err != nil || len(sw) == 0 || sw[0] != 0xfe {
				t.Fatalf("want an auth switch request, got %q %v", sw, err)
			}
			write(t, w, []byte{0xff, 0xff, 0xff, 3}, []byte("abc"))
			halfClose(w)
			return w
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.attack(t, p.addr)
			pkts, err := w.readUntilClosed(5 * time.Second)
			if err != nil {
				t.Fatalf("connection not closed: %v", err)
			}
			if tc.wantErr == serverAnswer {
				direct, err := tc.attack(t, testdb.Shared().Addr).readUntilClosed(5 * time.Second)
				if err != nil {
					t.Fatalf("directly: connection not closed: %v", err)
				}
				if len(direct) != 1 || direct[0][0] != 0xff {
					t.Fatalf("the server answers %q directly; this case expects an ERR", direct)
				}
				tc.wantErr = int(parseErrPacket(direct[0]).Code)
				t.Logf("the server answers ERR %d directly", tc.wantErr)
			}
			switch {
			case tc.wantErr == 0 && len(pkts) > 0:
				t.Fatalf("got %d packets (%q), want a silent close", len(pkts), pkts[0])
			case tc.wantErr > 0:
				if len(pkts) != 1 || pkts[0][0] != 0xff {
					t.Fatalf("got %q, want one ERR %d", pkts, tc.wantErr)
				}
				if e := parseErrPacket(pkts[0]); int(e.Code) != tc.wantErr {
					t.Fatalf("got %v, want ERR %d", e, tc.wantErr)
				}
			}
			stillServes(t, healthy)
		})
	}
	// Every failed handshake gave its slot back: with a cap of 2, new
	// logins still work.
	for range 3 {
		w := mustLoginWire(t, p.addr, testdb.DBName)
		stillServes(t, w)
	}
	noPanics(t, p)
}

// TestMalformedCommands: broken packets after login close only their own
// connection, with and without a rewriter configured (different read paths).
func TestMalformedCommands(t *testing.T) {
	for _, ruled := range []bool{false, true} {
		t.Run(fmt.Sprintf("rewriter=%v", ruled), func(t *testing.T) {
			var p *testProxy
			db := testdb.DBName
			if ruled {
				p = startRuledProxy(t)
				db = ruledSchema
			} else {
				p = startProxy(t, nil)
			}
			healthy := mustLoginWire(t, p.addr, db)
			login := func(t *testing.T) *wireConn {
				t.Helper()
				return mustLoginWire(t, p.addr, db)
			}
			halfClose := func(w *wireConn) { _ = w.Conn.(*net.TCPConn).CloseWrite() }
			cases := []struct {
				name   string
				attack func(t *testing.T) *wireConn
			}{
				{"truncated command, then close", func(t *testing.T) *wireConn {
					w := login(t)
					_, _ = w.Write(append([]byte{100, 0, 0, 0, gomysql.COM_QUERY}, "SELECT 1"...))
					halfClose(w)
					return w
				}},
				{"length 0xffffff with 100 bytes, then close", func(t *testing.T) *wireConn {
					w := login(t)
					_, _ = w.Write(append([]byte{0xff, 0xff, 0xff, 0, gomysql.COM_QUERY}, bytes.Repeat([]byte("x"), 99)...))
					halfClose(w)
					return w
				}},
				{"length 0xffffff naming a ruled table, then close", func(t *testing.T) *wireConn {
					w := login(t)
					_, _ = w.Write(append([]byte{0xff, 0xff, 0xff, 0, gomysql.COM_QUERY}, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1"...))
					halfClose(w)
					return w
				}},
				{"continuation packet with a wrong sequence id", func(t *testing.T) *wireConn {
					w := login(t)
					first := append([]byte{gomysql.COM_QUERY}, "SELECT LENGTH('"...)
					first = append(first, bytes.Repeat([]byte("y"), wireMax-len(first))...)
					if _, err := w.Write([]byte{0xff, 0xff, 0xff, 0}); err != nil {
						t.Fatal(err)
					}
					if _, err := w.Write(first); err != nil {
						t.Fatal(err)
					}
					_, _ = w.Write(append([]byte{2, 0, 0, 7}, "')"...))
					return w
				}},
				{"HTTP request after login", func(t *testing.T) *wireConn {
					w := login(t)
					_, _ = w.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
					return w
				}},
				{"empty command packet with sequence id 0, then close", func(t *testing.T) *wireConn {
					w := login(t)
					_, _ = w.Write([]byte{0, 0, 0, 0})
					halfClose(w)
					return w
				}},
			}
			// Random well-framed commands (only harmless command bytes: no
			// shutdown, kill or drop), then trailing garbage and a close.
			safe := []byte{gomysql.COM_QUERY, gomysql.COM_STMT_PREPARE, gomysql.COM_STMT_EXECUTE, gomysql.COM_STMT_FETCH,
				gomysql.COM_STMT_SEND_LONG_DATA, gomysql.COM_STMT_CLOSE, gomysql.COM_STMT_RESET, gomysql.COM_FIELD_LIST,
				gomysql.COM_CHANGE_USER, gomysql.COM_INIT_DB, gomysql.COM_PING, gomysql.COM_SET_OPTION, 0xfa, 0x99}
			for seed := range uint64(12) {
				cases = append(cases, struct {
					name   string
					attack func(t *testing.T) *wireConn
				}{fmt.Sprintf("random commands seed %d", seed), func(t *testing.T) *wireConn {
					w := login(t)
					rng := rand.New(rand.NewPCG(seed, 99))
					var buf []byte
					for range 1 + rng.IntN(4) {
						payload := []byte{safe[rng.IntN(len(safe))]}
						for range rng.IntN(64) {
							payload = append(payload, byte(rng.UintN(256)))
						}
						buf = append(buf, byte(len(payload)), 0, 0, 0)
						buf = append(buf, payload...)
					}
					for range rng.IntN(300) {
						buf = append(buf, byte(rng.UintN(256)))
					}
					_, _ = w.Write(buf)
					halfClose(w)
					return w
				}})
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					w := tc.attack(t)
					if _, err := w.readUntilClosed(10 * time.Second); err != nil {
						t.Fatalf("connection not closed: %v", err)
					}
					stillServes(t, healthy)
				})
			}
			noPanics(t, p)
		})
	}
}

// TestMalformedCommandsDifferential: well-framed but invalid commands get the
// server's own answer through the proxy, and the connection stays usable
// exactly when it does directly.
func TestMalformedCommandsDifferential(t *testing.T) {
	plain := startProxy(t, nil)
	ruled := startRuledProxy(t)
	stmtID := func(id uint32) []byte { return binary.LittleEndian.AppendUint32(nil, id) }
	cases := []struct {
		name    string
		payload []byte
	}{
		{"unknown command byte", []byte{0x99, 1, 2, 3}},
		{"empty query", []byte{gomysql.COM_QUERY}},
		{"short COM_STMT_EXECUTE", []byte{gomysql.COM_STMT_EXECUTE, 1, 0}},
		{"COM_STMT_EXECUTE of an unknown statement", append(append([]byte{gomysql.COM_STMT_EXECUTE}, stmtID(4242)...), 0, 1, 0, 0, 0)},
		{"COM_STMT_FETCH of an unknown statement", append(append([]byte{gomysql.COM_STMT_FETCH}, stmtID(4242)...), 1, 0, 0, 0)},
		{"COM_STMT_RESET of an unknown statement", append([]byte{gomysql.COM_STMT_RESET}, stmtID(4242)...)},
		{"short COM_STMT_SEND_LONG_DATA", []byte{gomysql.COM_STMT_SEND_LONG_DATA, 1}},
		{"short COM_STMT_CLOSE", []byte{gomysql.COM_STMT_CLOSE, 1}},
		{"COM_FIELD_LIST of an unknown table", append([]byte{gomysql.COM_FIELD_LIST}, "no_such_table\x00"...)},
		{"empty COM_INIT_DB", []byte{gomysql.COM_INIT_DB}},
		{"COM_SET_OPTION with a bad option", []byte{gomysql.COM_SET_OPTION, 9, 0}},
		{"COM_QUERY of NUL bytes", []byte{gomysql.COM_QUERY, 0, 0, 0}},
		{"bulk execute of an unknown statement", append([]byte{0xfa}, stmtID(4242)...)},
	}
	// outcome sends the command then SELECT 1 and renders what comes back.
	outcome := func(t *testing.T, addr, db string, payload []byte) string {
		w := mustLoginWire(t, addr, db)
		_ = w.SetDeadline(time.Now().Add(10 * time.Second))
		if err := w.command(payload); err != nil {
			t.Fatal(err)
		}
		if err := w.query("SELECT 1"); err != nil {
			return "write failed"
		}
		var out []string
		_ = w.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			pkt, _, err := w.readFull()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return strings.Join(append(out, "(silence)"), " ")
				}
				return strings.Join(append(out, "(closed)"), " ")
			}
			switch {
			case pkt[0] == 0xff:
				out = append(out, fmt.Sprintf("ERR %d", parseErrPacket(pkt).Code))
			case pkt[0] == 0x00:
				out = append(out, "OK")
			case pkt[0] == 0xfe && len(pkt) < 9:
				out = append(out, "EOF")
			default:
				out = append(out, fmt.Sprintf("%x", pkt[:min(len(pkt), 4)]))
			}
			// The SELECT 1 row (0x01 '1') followed by its terminator ends it.
			if len(out) >= 2 && out[len(out)-2] == "0131" && (pkt[0] == 0xfe) {
				return strings.Join(out, " ")
			}
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := outcome(t, testdb.Shared().Addr, ruledSchema, tc.payload)
			t.Logf("directly: %s", want)
			for _, p := range []*testProxy{plain, ruled} {
				if got := outcome(t, p.addr, ruledSchema, tc.payload); got != want {
					t.Errorf("proxy (rewriter %v): %s\ndirect: %s", p == ruled, got, want)
				}
			}
		})
	}
	noPanics(t, plain)
	noPanics(t, ruled)
}

// TestMalformedOverMaxAllowedPacket: a query larger than the backend
// session's max_allowed_packet ends that connection (the server refuses it
// with ERR 1153, which the client must get through the proxy too) and
// nothing else. The global is lowered only while the victim connects.
func TestMalformedOverMaxAllowedPacket(t *testing.T) {
	p := startProxy(t, nil)
	healthy := mustLoginWire(t, p.addr, testdb.DBName)
	var orig string
	if err := directDB(t, "").QueryRow("SELECT @@GLOBAL.max_allowed_packet").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := testdb.Shared().Exec("SET GLOBAL max_allowed_packet = " + orig); err != nil {
			t.Error(err)
		}
	}
	if err := testdb.Shared().Exec("SET GLOBAL max_allowed_packet = 1048576"); err != nil {
		t.Fatal(err)
	}
	var victims []*wireConn
	func() {
		defer restore()
		for _, addr := range []string{testdb.Shared().Addr, p.addr} {
			victims = append(victims, mustLoginWire(t, addr, testdb.DBName))
		}
	}()
	for i, w := range victims {
		via := []string{"directly", "through the proxy"}[i]
		if got := func() string { _ = w.query("SELECT @@SESSION.max_allowed_packet"); return readScalar(t, w) }(); got != "1048576" {
			t.Fatalf("%s: session max_allowed_packet = %s", via, got)
		}
		q := append([]byte{gomysql.COM_QUERY}, "SELECT LENGTH('"...)
		q = append(q, bytes.Repeat([]byte("z"), 2<<20)...)
		q = append(q, "')"...)
		_ = w.SetDeadline(time.Now().Add(10 * time.Second))
		werr := w.command(q)
		pkts, err := w.readUntilClosed(5 * time.Second)
		if err != nil {
			t.Fatalf("%s: connection not closed: %v", via, err)
		}
		// The server says why before it closes, and so must the proxy
		// (the backend's ERR, relayed before the client is closed).
		if len(pkts) != 1 || pkts[0][0] != 0xff {
			t.Fatalf("%s: got %q, want one ERR 1153 then the close", via, pkts)
		}
		if e := parseErrPacket(pkts[0]); e.Code != gomysql.ER_NET_PACKET_TOO_LARGE {
			t.Fatalf("%s: got %v, want ERR 1153", via, e)
		}
		t.Logf("%s: write error %v, %d ERR packets before the close", via, werr, len(pkts))
	}
	stillServes(t, healthy)
	noPanics(t, p)
}

// ---------------------------------------------------------------------------
// 2. Big payloads.

// bigData is a deterministic pseudo-random byte string (AES-CTR keystream).
func bigData(n int, seed byte) []byte {
	block, _ := aes.NewCipher(bytes.Repeat([]byte{seed}, 16))
	out := make([]byte, n)
	cipher.NewCTR(block, make([]byte, 16)).XORKeyStream(out, out)
	return out
}

var bigSourceOnce sync.Once

// bigSource stores about 48 MiB of random bytes as hardening_big.b (id 1),
// generated by the server itself (cheaper than sending them).
func bigSource(t *testing.T) {
	t.Helper()
	bigSourceOnce.Do(func() {
		conn, err := directDB(t, "").Conn(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		mustExec(t, conn, "CREATE TABLE IF NOT EXISTS hardening_big (id INT PRIMARY KEY, b LONGBLOB)")
		mustExec(t, conn, "SET SESSION group_concat_max_len = 67108864")
		mustExec(t, conn, "REPLACE INTO hardening_big SELECT 1, GROUP_CONCAT(RANDOM_BYTES(1024) SEPARATOR '') FROM "+testdb.Seq((3*wireMax+100)/1024+1))
	})
}

// TestBigResultRows: result rows whose packets end exactly at, just before
// and just after the 16 MiB packet boundaries arrive byte-identical through
// the proxy: the whole response stream read from the socket equals the one
// read directly, the value go-sql-driver reads through the proxy hashes to
// what the server's SHA2 says, and SHA2 through the proxy agrees.
func TestBigResultRows(t *testing.T) {
	bigSource(t)
	p := startProxy(t, nil)
	// Text-protocol row payload sizes (length prefix + value).
	payloads := []int{wireMax - 1, wireMax, wireMax + 1, 2 * wireMax, 2*wireMax + 50, 3 * wireMax}
	direct := mustLoginWire(t, testdb.Shared().Addr, testdb.DBName)
	proxied := mustLoginWire(t, p.addr, testdb.DBName)
	viaDriver := p.open(t, "maxAllowedPacket=0")
	// valueLen is the length of a value whose text row, with extra bytes
	// of other columns, has the given payload size.
	valueLen := func(payload, extra int) int {
		if n := payload - extra - 4; n < 1<<24 { // 0xfd + 3-byte length
			return n
		}
		return payload - extra - 9 // 0xfe + 8-byte length
	}
	// The driver reads the value and its SHA2 (a 64-byte string, 65 bytes
	// with its length) in one row of the same payload size.
	sizes := make([]int, len(payloads))
	var shaCols []string
	for i, payload := range payloads {
		sizes[i] = valueLen(payload, 65)
		shaCols = append(shaCols, fmt.Sprintf("SHA2(LEFT(b, %d), 256)", sizes[i]))
	}
	// SHA2 of every value the driver reads, computed by the server, read
	// directly.
	wantSHA := make([]any, len(sizes))
	for i := range wantSHA {
		wantSHA[i] = new(string)
	}
	if err := directDB(t, "").QueryRow("SELECT " + strings.Join(shaCols, ", ") + " FROM hardening_big WHERE id = 1").Scan(wantSHA...); err != nil {
		t.Fatal(err)
	}
	for i, payload := range payloads {
		q := fmt.Sprintf("SELECT LEFT(b, %d) FROM hardening_big WHERE id = 1", valueLen(payload, 0))
		var sums [2][32]byte
		for i, w := range []*wireConn{direct, proxied} {
			_ = w.SetDeadline(time.Now().Add(time.Minute))
			if err := w.query(q); err != nil {
				t.Fatal(err)
			}
			sum, rows, err := w.streamResult()
			if err != nil || rows != 1 {
				t.Fatalf("row payload %d: %d rows, %v", payload, rows, err)
			}
			sums[i] = sum
		}
		if sums[0] != sums[1] {
			t.Errorf("row payload %d (0x%x): response bytes through the proxy differ from the direct ones", payload, payload)
		}
		// Through the proxy with go-sql-driver: the value and the server's
		// SHA2 of it.
		n, want := sizes[i], *wantSHA[i].(*string)
		var got []byte
		var sha string
		if err := viaDriver.QueryRow(fmt.Sprintf("SELECT LEFT(b, %d), SHA2(LEFT(b, %d), 256) FROM hardening_big WHERE id = 1", n, n)).Scan(&got, &sha); err != nil {
			t.Fatalf("row payload %d: %v", payload, err)
		}
		if sha != want {
			t.Errorf("row payload %d: SHA2 through the proxy %s, directly %s", payload, sha, want)
		}
		if sum := sha256.Sum256(got); len(got) != n || hex.EncodeToString(sum[:]) != want {
			t.Errorf("row payload %d: go-sql-driver read %d bytes through the proxy that differ from the %d stored", payload, len(got), n)
		}
	}
}

// TestBigQueriesAndParams: COM_QUERY and COM_STMT_EXECUTE packets at the
// 16 MiB boundaries reach the server intact, with and without a rewriter
// (which reads packets below 16 MiB into memory and forwards larger ones).
func TestBigQueriesAndParams(t *testing.T) {
	data := bigData(2*wireMax+100, 2)
	letters := make([]byte, len(data))
	hex.Encode(letters, data[:len(data)/2])
	plain := startProxy(t, nil)
	ruled := startRuledProxy(t)
	for _, p := range []*testProxy{plain, ruled} {
		name := "plain"
		if p == ruled {
			name = "rewriter"
		}
		t.Run(name, func(t *testing.T) {
			db := p.open(t, "maxAllowedPacket=0")
			prefix, suffix := "SELECT SHA2('", "', 256)"
			querySizes := []int{wireMax - 1, wireMax, wireMax + 1, 2*wireMax + 50}
			paramSizes := []int{wireMax - 1, wireMax, wireMax + 1}
			if p == ruled { // the rewriter only changes how packets below 16 MiB are read
				querySizes, paramSizes = querySizes[:2], paramSizes[:2]
			}
			for _, payload := range querySizes {
				n := payload - 1 - len(prefix) - len(suffix)
				s := letters[:n]
				want := sha256.Sum256(s)
				if got := queryString(t, db, prefix+string(s)+suffix); got != hex.EncodeToString(want[:]) {
					t.Errorf("COM_QUERY payload %d: SHA2 differs", payload)
				}
			}
			// COM_STMT_EXECUTE payload: command(1) id(4) flags(1) iterations(4)
			// NULL bitmap(1) bound(1) type(2) + length prefix + value.
			for _, payload := range paramSizes {
				n := payload - 14 - 4
				if n >= 1<<24 {
					n = payload - 14 - 9
				}
				want := sha256.Sum256(data[:n])
				if got := queryString(t, db, "SELECT SHA2(?, 256)", data[:n]); got != hex.EncodeToString(want[:]) {
					t.Errorf("COM_STMT_EXECUTE payload %d: SHA2 of the BLOB parameter differs", payload)
				}
			}
		})
	}
}

// TestBigLongDataUTF8Split: COM_STMT_SEND_LONG_DATA chunks are relayed as
// they are: a 4-byte UTF-8 character split 2/2 across two chunks is stored
// whole in a utf8mb4 column, and a chunk whose packet is exactly 16 MiB - 1
// (followed by an empty continuation packet) arrives intact.
func TestBigLongDataUTF8Split(t *testing.T) {
	mustExec(t, directDB(t, ""), "CREATE TABLE IF NOT EXISTS hardening_text (id INT PRIMARY KEY, txt MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin) DEFAULT CHARSET=utf8mb4")
	mustExec(t, directDB(t, ""), "DELETE FROM hardening_text")
	plain := startProxy(t, nil)
	ruled := startRuledProxy(t)
	emoji := "\U0001F600" // 4 bytes: f0 9f 98 80
	chunks := []string{"naïve ☃ " + emoji[:2], emoji[2:] + " done " + emoji}
	want := strings.Join(chunks, "")
	big := bigData(wireMax+400, 3)
	bigChunks := [][]byte{big[:wireMax-7], big[wireMax-7 : wireMax-6], big[wireMax-6:]} // the first packet is exactly 0xffffff
	bigSum := sha256.Sum256(big)
	for i, addr := range []string{testdb.Shared().Addr, plain.addr, ruled.addr} {
		r := dialRaw(t, addr, true)
		if _, err := r.Execute("SET NAMES utf8mb4"); err != nil {
			t.Fatal(err)
		}
		id := prepareRaw(t, r, "INSERT INTO hardening_text (id, txt) VALUES (?, ?)")
		for _, c := range chunks {
			r.command(gomysql.COM_STMT_SEND_LONG_DATA, append(binary.LittleEndian.AppendUint32(nil, id), append([]byte{1, 0}, c...)...)...)
		}
		exec := binary.LittleEndian.AppendUint32(nil, id)
		exec = append(exec, 0, 1, 0, 0, 0, 0 /* NULL bitmap */, 1, gomysql.MYSQL_TYPE_LONGLONG, 0, gomysql.MYSQL_TYPE_STRING, 0)
		exec = binary.LittleEndian.AppendUint64(exec, uint64(i))
		r.command(gomysql.COM_STMT_EXECUTE, exec...)
		r.expectOK("insert with long data")
		res, err := r.Execute(fmt.Sprintf("SELECT txt, HEX(txt) FROM hardening_text WHERE id = %d", i))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := res.GetString(0, 0)
		gotHex, _ := res.GetString(0, 1)
		if got != want || gotHex != strings.ToUpper(hex.EncodeToString([]byte(want))) {
			t.Errorf("target %d: stored %q (%s), want %q", i, got, gotHex, want)
		}

		id = prepareRaw(t, r, "SELECT SHA2(?, 256), LENGTH(?)")
		for _, c := range bigChunks {
			r.command(gomysql.COM_STMT_SEND_LONG_DATA, append(binary.LittleEndian.AppendUint32(nil, id), append([]byte{0, 0}, c...)...)...)
		}
		r.command(gomysql.COM_STMT_SEND_LONG_DATA, append(binary.LittleEndian.AppendUint32(nil, id), append([]byte{1, 0}, big[:100]...)...)...)
		exec = binary.LittleEndian.AppendUint32(nil, id)
		exec = append(exec, 0, 1, 0, 0, 0, 0, 1, gomysql.MYSQL_TYPE_BLOB, 0, gomysql.MYSQL_TYPE_BLOB, 0)
		r.command(gomysql.COM_STMT_EXECUTE, exec...)
		r.read() // column count
		r.read()
		r.read() // two column definitions
		row := r.read()
		r.readUntilEOF("long data rows")
		// Binary row: 0x00, NULL bitmap, a length-prefixed string, a BIGINT.
		sum, rest := lenEncString(row[2:])
		var length uint64
		switch len(rest) { // LENGTH() is an INT (4 bytes) in MariaDB, a BIGINT elsewhere
		case 4:
			length = uint64(binary.LittleEndian.Uint32(rest))
		case 8:
			length = binary.LittleEndian.Uint64(rest)
		}
		if string(sum) != hex.EncodeToString(bigSum[:]) || length != 100 {
			t.Errorf("target %d: SHA2 %s LENGTH %d of the long data parameters, want %x and 100", i, sum, length, bigSum)
		}
	}
}

func lenEncString(b []byte) ([]byte, []byte) {
	l, n := lenEncAt(b)
	return b[n : n+int(l)], b[n+int(l):]
}

// prepareRaw prepares a statement on a rawConn and reads the whole
// response; it returns the statement id.
func prepareRaw(t *testing.T, r *rawConn, q string) uint32 {
	t.Helper()
	r.command(gomysql.COM_STMT_PREPARE, []byte(q)...)
	ok := r.read()
	if ok[0] != 0 {
		t.Fatalf("prepare %q: %v", q, parseErrPacket(ok))
	}
	id := binary.LittleEndian.Uint32(ok[1:])
	columns, params := binary.LittleEndian.Uint16(ok[5:]), binary.LittleEndian.Uint16(ok[7:])
	for _, n := range []uint16{params, columns} {
		for range n {
			r.read()
		}
		if n > 0 && !r.deprecateEOF {
			r.read()
		}
	}
	return id
}

// ---------------------------------------------------------------------------
// 3. Slow and idle peers.

// TestSlowIdleHandshakes: 1000 sockets that connect and never answer the
// greeting, with the default 64 handshake slots, are all greeted at once
// (all but the slots' holders by the proxy itself, with no backend
// connection), are all closed at the handshake deadline, the backend
// connections the proxy opened for them are gone afterwards, and logins
// keep succeeding meanwhile.
//
// (With 2,000 slots, as this test once had, every socket waited for a
// backend connection of its own before its greeting, and on a loaded
// machine some got none before the deadline: "idle socket 263 got no
// greeting".)
func TestSlowIdleHandshakes(t *testing.T) {
	const idle = 1000
	const timeout = 2 * time.Second
	needFDs(t, 2*idle+500)
	p := startProxy(t, func(c *proxy.Config) {
		c.HandshakeTimeout = timeout
	})
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	root.SetMaxOpenConns(1)
	threads := func() int {
		var name string
		var n int
		if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := threads()

	type result struct {
		greeted bool
		open    time.Duration // connect to close
		err     error
	}
	results := make([]result, idle)
	var wg sync.WaitGroup
	start := time.Now()
	sem := make(chan struct{}, 64)
	for i := range idle {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", p.addr, 10*time.Second)
			<-sem
			if err != nil {
				results[i].err = err
				return
			}
			defer c.Close()
			t0 := time.Now()
			_ = c.SetReadDeadline(t0.Add(20 * time.Second))
			br := bufio.NewReader(c)
			var h [5]byte
			if _, err := io.ReadFull(br, h[:]); err == nil {
				results[i].greeted = h[4] == 10
			}
			_, err = io.Copy(io.Discard, br)
			results[i].open = time.Since(t0)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				results[i].err = fmt.Errorf("still open after %v", results[i].open)
			}
		}()
	}
	// Meanwhile, real clients log in and query.
	logins, slowest := 0, time.Duration(0)
	for time.Since(start) < timeout+timeout/2 {
		t0 := time.Now()
		w, err := loginWire(p.addr, testdb.DBName, true, 10*time.Second)
		if err != nil {
			t.Fatalf("login during the idle flood: %v", err)
		}
		stillServes(t, w)
		_ = w.Close()
		slowest = max(slowest, time.Since(t0))
		logins++
	}
	wg.Wait()
	var longest time.Duration
	shortest := time.Hour
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("idle socket %d: %v", i, r.err)
		}
		if !r.greeted {
			t.Fatalf("idle socket %d got no greeting", i)
		}
		longest, shortest = max(longest, r.open), min(shortest, r.open)
	}
	t.Logf("%d idle sockets closed after %v to %v; %d logins meanwhile, slowest %v; flood took %v", idle, shortest, longest, logins, slowest, time.Since(start))
	if shortest < timeout/2 {
		t.Fatalf("an idle socket was closed after %v, before the %v handshake deadline", shortest, timeout)
	}
	if longest > timeout+3*time.Second {
		t.Fatalf("an idle socket stayed open %v with a %v handshake deadline", longest, timeout)
	}
	if slowest > 3*time.Second {
		t.Fatalf("a login took %v during the flood", slowest)
	}
	// The proxy closed the backend connections it had opened for them.
	deadline := time.Now().Add(10 * time.Second)
	for n := threads(); n > before+5; n = threads() {
		if time.Now().After(deadline) {
			t.Fatalf("backend still has %d connections, %d before the flood", n, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	noPanics(t, p)
}

// TestSlowUnauthenticatedCap extends TestMaxUnauthenticated: the cap counts
// only connections in the handshake (authenticated ones do not use it up),
// in a burst every connection beyond the queue gets ERR 1040 at once while
// the queued ones wait, and slots held by silent clients come back at the
// handshake deadline without the clients closing anything.
func TestSlowUnauthenticatedCap(t *testing.T) {
	const limit = 5
	p := startProxy(t, func(c *proxy.Config) {
		c.MaxUnauthenticated = limit
		c.MaxHandshakeQueue = 1
		c.HandshakeTimeout = 2 * time.Second
	})
	var authed []*wireConn
	for range 2 * limit {
		authed = append(authed, mustLoginWire(t, p.addr, testdb.DBName))
	}
	var silent []net.Conn
	for range limit {
		c := dialTCP(t, p.addr)
		readPacket(t, c)
		silent = append(silent, c)
	}
	time.Sleep(500 * time.Millisecond) // the queued client's deadline comes well after theirs
	queued := dialTCP(t, p.addr)       // takes the one place in the queue
	time.Sleep(100 * time.Millisecond)
	var wg sync.WaitGroup
	var refused atomic.Int32
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			w := &wireConn{Conn: c, br: bufio.NewReader(c)}
			pkt, seq, err := w.readFull()
			if err != nil {
				errs <- fmt.Errorf("no immediate answer over the cap: %v", err)
				return
			}
			if pkt[0] != 0xff || parseErrPacket(pkt).Code != gomysql.ER_CON_COUNT_ERROR || seq != 0 {
				errs <- fmt.Errorf("over the cap: got %q (seq %d), want ERR 1040", pkt, seq)
				return
			}
			if _, err := w.readUntilClosed(2 * time.Second); err != nil {
				errs <- fmt.Errorf("refused connection not closed: %v", err)
				return
			}
			refused.Add(1)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if refused.Load() != 20 {
		t.Fatalf("%d of 20 connections over the cap refused", refused.Load())
	}
	// The queued client gets its greeting once the silent ones time out.
	_ = queued.SetReadDeadline(time.Now().Add(5 * time.Second))
	readPacket(t, queued)
	for _, w := range authed {
		stillServes(t, w)
	}
	// The silent clients keep their sockets; their slots come back when the
	// proxy closes them at the deadline.
	deadline := time.Now().Add(5 * time.Second)
	for {
		w, err := loginWire(p.addr, testdb.DBName, true, 5*time.Second)
		if err == nil {
			stillServes(t, w)
			_ = w.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 5s after the silent handshakes expired: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range silent {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if err := drainUntilClosed(c); err != nil {
			t.Fatalf("silent client not disconnected: %v", err)
		}
	}
	noPanics(t, p)
}

// slowReader hands out at most chunk bytes per Read and sleeps between
// reads while slow is set.
type slowReader struct {
	r     io.Reader
	chunk int
	pause time.Duration
	slow  atomic.Bool
}

func (s *slowReader) Read(b []byte) (int, error) {
	if s.slow.Load() {
		time.Sleep(s.pause)
		if len(b) > s.chunk {
			b = b[:s.chunk]
		}
	}
	return s.r.Read(b)
}

// TestSlowReaderMemoryBounded: a client that reads a 200 MiB result slowly
// (and stalls completely for a while) costs the proxy (in this process) no
// more than its fixed buffers: the heap stays far below the result size,
// and other clients are served meanwhile.
func TestSlowReaderMemoryBounded(t *testing.T) {
	const rows, width = 200_000, 1000
	p := startProxy(t, nil)
	other := mustLoginWire(t, p.addr, testdb.DBName)
	w := mustLoginWire(t, p.addr, testdb.DBName)
	_ = w.SetDeadline(time.Now().Add(2 * time.Minute))
	sr := &slowReader{r: w.Conn, chunk: 512, pause: 2 * time.Millisecond}
	sr.slow.Store(true)
	w.br = bufio.NewReaderSize(sr, 4096)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	if err := w.query(fmt.Sprintf("SELECT seq, REPEAT('x', %d) FROM %s", width, testdb.Seq(rows))); err != nil {
		t.Fatal(err)
	}
	// Read a few packets, then stall with nothing read for 2 seconds.
	if _, _, err := w.readFull(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	stillServes(t, other)
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("another client waited %v while one stalled", d)
	}
	// Trickle for a second, then read the rest at full speed.
	time.AfterFunc(time.Second, func() { sr.slow.Store(false) })
	got, err := w.readRows(2)
	if err != nil {
		t.Fatalf("after %d rows: %v", got, err)
	}
	close(stop)
	<-sampled
	growth := int64(peak.Load()) - int64(base)
	t.Logf("%d rows of %d bytes (%d MiB) read slowly; heap in use grew by at most %.1f MiB", got, width, rows*width>>20, float64(growth)/(1<<20))
	if got != rows {
		t.Fatalf("%d rows, want %d", got, rows)
	}
	if growth > 64<<20 {
		t.Fatalf("heap grew by %d MiB while a client read a %d MiB result slowly", growth>>20, rows*width>>20)
	}
	stillServes(t, w)
	noPanics(t, p)
}

// ---------------------------------------------------------------------------
// 5. Rewrite safety: injection attempts through rewritten statements.

// schemaState renders both tables of a differential schema as a client sees
// them. For the ruled schema it adds the slots to the base counters itself
// (directly on the server, independent of the proxy's read rewrite) and
// lists orphan slot rows.
func schemaState(t *testing.T, c *client.Conn, schema string) string {
	t.Helper()
	var q string
	if schema == ruledSchema {
		slot := func(rt int, col, as string) string {
			return fmt.Sprintf("CAST(r.%s + COALESCE((SELECT SUM(s.count) FROM %s.slotted_counters s WHERE s.record_type = %d AND s.record_id = r.id), 0) AS %s)", col, schema, rt, as)
		}
		q = fmt.Sprintf("SELECT r.id, r.name, r.owner_id, %s, %s, %s FROM %s.repos r ORDER BY r.id",
			slot(1, "downloads", "SIGNED"), slot(2, "stars", "UNSIGNED"), slot(3, "big", "UNSIGNED"), schema)
	} else {
		q = "SELECT id, name, owner_id, downloads, stars, big FROM " + schema + ".repos ORDER BY id"
	}
	out := renderRows(t, c, q)
	out += " | users " + renderRows(t, c, "SELECT * FROM "+schema+".users ORDER BY id")
	if schema == ruledSchema {
		out += " | orphan slots " + renderRows(t, c, "SELECT COUNT(*) FROM "+schema+".slotted_counters s WHERE NOT EXISTS (SELECT 1 FROM "+schema+".repos r WHERE r.id = s.record_id)")
	} else {
		out += " | orphan slots (0)"
	}
	return out
}

// renderRows renders a query's rows, strings quoted.
func renderRows(t *testing.T, c *client.Conn, q string) string {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var b strings.Builder
	for _, row := range r.Values {
		b.WriteString("(")
		for i, v := range row {
			if i > 0 {
				b.WriteString(",")
			}
			if x, ok := v.Value().([]byte); ok {
				fmt.Fprintf(&b, "%q", x)
			} else {
				fmt.Fprintf(&b, "%v", v.Value())
			}
		}
		b.WriteString(")")
	}
	return b.String()
}

// injectionPair is one client session on each side of the differential:
// directly on the plain schema, and through the proxy on the ruled one,
// plus an observer connection (direct, utf8mb4, default sql_mode).
type injectionPair struct {
	direct, proxied, observer *client.Conn
}

func newInjectionPair(t *testing.T, p *testProxy, session ...string) *injectionPair {
	t.Helper()
	connect := func(addr, db string) *client.Conn {
		c, err := client.Connect(addr, testdb.User, testdb.Password, db, func(c *client.Conn) error {
			return c.SetCapability(gomysql.CLIENT_MULTI_STATEMENTS)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		return c
	}
	ip := &injectionPair{direct: connect(testdb.Shared().Addr, plainSchema), proxied: connect(p.addr, ruledSchema), observer: connect(testdb.Shared().Addr, "")}
	for _, c := range []*client.Conn{ip.direct, ip.proxied} {
		for _, s := range session {
			if _, err := c.Execute(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		// A rewritten statement: the proxy now knows the session's state.
		if _, err := c.Execute("UPDATE repos SET downloads = downloads + 1 WHERE id = 4"); err != nil {
			t.Fatal(err)
		}
	}
	return ip
}

// check runs st on both sides and compares the result and both schemas'
// full contents afterwards.
func (ip *injectionPair) check(t *testing.T, st step) {
	t.Helper()
	want := runStep(ip.direct, st)
	got := runStep(ip.proxied, st)
	if got != want {
		t.Errorf("%q %q:\n proxy:  %s\n direct: %s", st.sql, st.args, got, want)
	}
	ws, gs := schemaState(t, ip.observer, plainSchema), schemaState(t, ip.observer, ruledSchema)
	if ws != gs {
		t.Errorf("after %q %q the tables differ:\n ruled (via proxy): %s\n plain (direct):    %s", st.sql, st.args, gs, ws)
		// Make the ruled side equal again, so the next check stands alone.
		for _, q := range []string{
			"DELETE FROM " + ruledSchema + ".slotted_counters",
			"DELETE FROM " + ruledSchema + ".repos",
			"INSERT INTO " + ruledSchema + ".repos SELECT * FROM " + plainSchema + ".repos",
			"DELETE FROM " + ruledSchema + ".users",
			"INSERT INTO " + ruledSchema + ".users SELECT * FROM " + plainSchema + ".users",
		} {
			if _, err := ip.observer.Execute(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}

// injectionAttacks are statements built to be read differently by a lexer
// that gets quoting, comments or the character set wrong.
var injectionAttacks = []string{
	`UPDATE repos SET downloads = downloads + 1 WHERE id = '1\' OR 1=1 -- '`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = '1\\' OR 1=1 -- '`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = '1'' OR 1=1 -- '`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = "1\" OR 1=1 -- "`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = "1" OR "1"="1"`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = "id"`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 1 -- ' OR 1=1`,
	"UPDATE repos SET downloads = downloads + 1 WHERE id = 1 --\tOR 1=1",
	"UPDATE repos SET downloads = downloads + 1 WHERE id = 1 -- x\nOR id = 2",
	"UPDATE repos SET downloads = downloads + 1 WHERE id = 1 #\rOR id = 2",
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 1 /* ' */ OR id = 2 /* ' */`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 2 /*!OR 1=1*/`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 2 /*!99999 OR 1=1*/`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 2 /*!999999 OR 1=1*/`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 2 /*M! OR 1=1*/`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 2 /*M!100000 OR 1=1*/`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = 3 AND name = 'gamma\' OR 1=1 -- '`,
	"UPDATE repos SET downloads = downloads + 1 WHERE id = '1\xbf\\' OR 1=1 -- '",
	"UPDATE repos SET downloads = downloads + 1 WHERE id = '1\xbf' OR 1=1 -- '",
	"UPDATE repos SET downloads = downloads + 1 WHERE id = 2 OR name = '\xbf\\' OR id = 3 -- '",
	"UPDATE repos SET downloads = downloads + 1 WHERE id = 1; UPDATE users SET downloads = downloads + 1 WHERE id = 1",
	"UPDATE repos SET downloads = 7 WHERE name = 'x\\'; UPDATE users SET downloads = downloads + 1 WHERE id = 2 -- '",
	"UPDATE repos SET downloads = 7 WHERE name = 'x\xbf\\'; UPDATE users SET downloads = downloads + 1 WHERE id = 3 -- '",
	"UPDATE repos SET downloads = 7 WHERE name = 'x\x95\\'; UPDATE users SET downloads = downloads + 1 WHERE id = 3 -- '",
	"UPDATE repos SET downloads = 8 WHERE id = 1 OR name = '\x95\\' OR id = 2 -- '",
	// Valid UTF-8 whose last byte pairs with the backslash in GBK (中 is
	// e4 b8 ad: GBK reads e4b8, ad5c).
	"UPDATE repos SET downloads = 9 WHERE id = 3 OR name = '中\\' OR id = 4 -- '",
	"SELECT id, downloads FROM repos WHERE name = '中\\' OR id = 4 -- '",
	`UPDATE repos SET downloads = downloads + 1 WHERE id = X'31' OR 1=1`,
	`UPDATE repos SET downloads = downloads + 1 WHERE id = \N`,
	`SELECT downloads FROM repos WHERE id = 1 AND name = '\' UNION SELECT downloads FROM users -- '`,
	`SELECT downloads FROM repos WHERE name = 'alpha\xbf\' OR id = 2 -- '`,
	// Last, as it changes the character set: the statements after SET NAMES
	// are read in GBK, where the string ends after 0xbf5c.
	"SET NAMES gbk; UPDATE repos SET downloads = 8 WHERE id = 1 OR name = '\xbf\\' OR id = 2 -- '\n; SELECT id, downloads FROM repos ORDER BY id",
}

// TestMalformedHandshakeSequenceID: a handshake response with a wrong
// sequence id. MariaDB itself refuses it ("packets out of order"); the proxy
// must not accept it as a login either.
func TestMalformedHandshakeSequenceID(t *testing.T) {
	p := startProxy(t, func(c *proxy.Config) { c.HandshakeTimeout = 2 * time.Second })
	for _, addr := range []string{testdb.Shared().Addr, p.addr} {
		w, err := dialWire(addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.greet(); err != nil {
			t.Fatal(err)
		}
		auth := gomysql.CalcNativePassword(w.scramble, []byte(testdb.Password))
		resp := handshakeResponse(wireCaps|gomysql.CLIENT_CONNECT_WITH_DB, testdb.User, auth, testdb.DBName, "mysql_native_password")
		if err := w.writePacket(resp, 7); err != nil {
			t.Fatal(err)
		}
		via := "directly"
		if addr == p.addr {
			via = "through the proxy"
		}
		_ = w.SetReadDeadline(time.Now().Add(5 * time.Second))
		first, _, err := w.readFull()
		if err == nil && len(first) > 0 && first[0] == 0x00 {
			t.Errorf("%s: a handshake response with sequence id 7 logged in (MariaDB answers ERR 1156 Got packets out of order)", via)
			continue
		}
		if err == nil {
			t.Logf("%s: %v", via, parseErrPacket(first))
			_, err = w.readUntilClosed(5 * time.Second)
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: no answer and no close", via)
			continue
		} else {
			err = nil
		}
		if err != nil {
			t.Errorf("%s: connection not closed: %v", via, err)
		}
	}
	noPanics(t, p)
}

// TestInjectionHiddenSessionChange: the proxy must know the sql_mode and
// database the server uses, however the client changed them. The session
// starts (non-strict) with ANSI_QUOTES and the proxy learns that; then the
// client turns ANSI_QUOTES off in a way the server applies, and the attack
// WHERE "id" = 2 means the string 'id' (no row) to the server, the key
// column to a proxy that missed the change.
func TestInjectionHiddenSessionChange(t *testing.T) {
	mustExec(t, directDB(t, ""), "CREATE DATABASE IF NOT EXISTS hardening_empty")
	attack := text(`UPDATE repos SET downloads = downloads + 1 WHERE "id" = 2`)
	const off = "SET SESSION sql_mode = ''"
	cases := []struct {
		name   string
		change []string
		steps  []step
	}{
		{"control: plain SET", []string{off}, []step{attack}},
		{"SET after a comment", []string{"/* app */ " + off}, []step{attack}},
		{"SET after a form feed", []string{"\f" + off}, []step{attack}},
		{"SET/**/sql_mode", []string{"SET/**/sql_mode = ''"}, []step{attack}},
		{"SET inside a multi-statement query", []string{"DO 1; " + off}, []step{attack}},
		{"EXECUTE IMMEDIATE", []string{"EXECUTE IMMEDIATE 'SET SESSION sql_mode = '''''"}, []step{attack}},
		{"PREPARE and EXECUTE", []string{"PREPARE s FROM 'SET SESSION sql_mode = '''''", "EXECUTE s"}, []step{attack}},
		{"SET STATEMENT … FOR", nil, []step{text("SET STATEMENT sql_mode = '' FOR " + attack.sql)}},
		{"USE after a comment", []string{"/* app */ USE hardening_empty"},
			[]step{text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")}},
		{"USE inside a multi-statement query", []string{"DO 1; USE hardening_empty"},
			[]step{text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startRuledProxy(t)
			ip := newInjectionPair(t, p, "SET SESSION sql_mode = 'ANSI_QUOTES'")
			for _, s := range tc.change {
				st := text(s)
				if strings.Contains(s, "; ") {
					st = multi(s)
				}
				ip.check(t, st)
			}
			for _, st := range tc.steps {
				ip.check(t, st)
			}
			noPanics(t, p)
		})
	}
}

// TestHardeningNonUTF8Statements: a statement whose text is not valid UTF-8
// (any non-ASCII text from a latin1, gbk or sjis client, which the server
// accepts) is still a statement on a ruled table: its counter reads must see
// the slots and its absolute writes must fold them first.
func TestHardeningNonUTF8Statements(t *testing.T) {
	p := startRuledProxy(t)
	direct := dialRawDB(t, testdb.Shared().Addr, plainSchema)
	proxied := dialRawDB(t, p.addr, ruledSchema)
	for _, c := range []*rawConn{direct, proxied} {
		if _, err := c.Execute("SET NAMES latin1"); err != nil {
			t.Fatal(err)
		}
	}
	steps := []step{
		text("UPDATE repos SET downloads = downloads + 5 WHERE id = 1"),
		text("SELECT id, downloads FROM repos WHERE name <> 'caf\xe9' ORDER BY id"),
		text("UPDATE repos SET downloads = 0, name = 'caf\xe9' WHERE id = 1"),
		text("SELECT id, downloads FROM repos ORDER BY id"),
	}
	for i, st := range steps {
		want := runStep(direct.Conn, st)
		got := runStep(proxied.Conn, st)
		if got != want {
			t.Errorf("step %d %q:\n proxy:  %s\n direct: %s", i, st.sql, got, want)
		}
	}
	if n := p.srv.Stats().ParseFailures; n > 0 {
		t.Logf("the proxy counted %d statements as not parsing", n)
	}
}

// TestBigStatementOnRuledTable: a statement of 16 MiB or more that names a
// ruled table must still be rewritten (or refused), never relayed as is: as
// is, reads miss the slots and absolute writes leave the slots in place.
func TestBigStatementOnRuledTable(t *testing.T) {
	p := startRuledProxy(t)
	pad := " /* " + strings.Repeat("p", wireMax) + " */"
	direct := dialRawDB(t, testdb.Shared().Addr, plainSchema)
	proxied := dialRawDB(t, p.addr, ruledSchema)
	steps := []step{
		text("UPDATE repos SET downloads = downloads + 5 WHERE id = 1"),
		text("SELECT id, downloads FROM repos WHERE id = 1" + pad),
		prep("SELECT id, downloads FROM repos WHERE id = ?"+pad, 1),
		text("UPDATE repos SET downloads = 100 WHERE id = 1" + pad),
		text("SELECT id, downloads FROM repos ORDER BY id"),
		prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, strings.Repeat(" ", wireMax)+"999"),
		text("SELECT COUNT(*) FROM slotted_counters WHERE record_id = 999"),
	}
	for i, st := range steps {
		// A minute for each step (dialRaw's deadline is a minute for the
		// whole connection): a 16 MiB statement under -race on a loaded
		// machine takes tens of seconds.
		for _, c := range []*rawConn{direct, proxied} {
			_ = c.SetDeadline(time.Now().Add(time.Minute))
		}
		if strings.Contains(st.sql, "slotted_counters") {
			// Slot rows exist only in the ruled schema: count them there
			// directly, and expect none (as the plain schema has no slots).
			got := runStep(direct.Conn, text(strings.Replace(st.sql, "slotted_counters", ruledSchema+".slotted_counters", 1)))
			if !strings.Contains(got, "rows=(0)") {
				t.Errorf("step %d: orphan slot rows for a key without a base row: %s", i, got)
			}
			continue
		}
		want := runStep(direct.Conn, st)
		got := runStep(proxied.Conn, st)
		if got != want {
			t.Errorf("step %d %.80q (%d bytes):\n proxy:  %s\n direct: %s", i, st.sql, len(st.sql), got, want)
		}
	}
}

// TestHardeningLongDataKey: the key or the delta of a rewritten increment
// or guarded write may be sent with COM_STMT_SEND_LONG_DATA, also as a
// string the server converts with a warning. The statement must behave as
// it does directly, not end the connection.
func TestHardeningLongDataKey(t *testing.T) {
	p := startRuledProxy(t)
	for _, tc := range []struct {
		q    string
		long int    // parameter sent as long data
		data string // its value
	}{
		{"UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, "2"},
		{"UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, "2abc"},
		{"UPDATE repos SET downloads = downloads + ? WHERE id = ?", 0, "2"},
		{"UPDATE repos SET downloads = downloads + ? WHERE id = ?", 0, " 4"},
		{"UPDATE repos SET downloads = ? WHERE id = ?", 1, "2"},
	} {
		var results []string
		for _, target := range []struct{ addr, db string }{{testdb.Shared().Addr, plainSchema}, {p.addr, ruledSchema}} {
			r := dialRawDB(t, target.addr, target.db)
			id := prepareRaw(t, r, tc.q)
			r.command(gomysql.COM_STMT_SEND_LONG_DATA, append(binary.LittleEndian.AppendUint32(nil, id), append([]byte{byte(tc.long), 0}, tc.data...)...)...)
			exec := binary.LittleEndian.AppendUint32(nil, id)
			exec = append(exec, 0, 1, 0, 0, 0, 0, 1)
			for i := range 2 {
				if i == tc.long {
					exec = append(exec, gomysql.MYSQL_TYPE_STRING, 0)
				} else {
					exec = append(exec, gomysql.MYSQL_TYPE_LONGLONG, 0)
				}
			}
			exec = binary.LittleEndian.AppendUint64(exec, 3) // the other parameter
			r.command(gomysql.COM_STMT_EXECUTE, exec...)
			pkt, err := r.ReadPacket()
			var res string
			switch {
			case err != nil:
				res = "connection lost: " + err.Error()
			case pkt[0] == 0xff:
				res = parseErrPacket(pkt).Error()
			default:
				ok := r.HandleOKPacket(pkt)
				res = fmt.Sprintf("OK affected=%d warnings=%d", ok.AffectedRows, ok.Warnings)
				res += " then " + render(r.Execute("SELECT id, downloads FROM repos ORDER BY id"))
			}
			results = append(results, res)
		}
		if results[0] != results[1] {
			t.Errorf("%s with parameter %d as long data %q:\n proxy:  %s\n direct: %s", tc.q, tc.long, tc.data, results[1], results[0])
		}
	}
	noPanics(t, p)
}

// TestInjectionPreparedParams: hostile strings as parameters of rewritten
// prepared statements behave exactly as they do directly.
func TestInjectionPreparedParams(t *testing.T) {
	hostile := []any{
		"1' OR 1=1 -- ", `1\' OR 1=1 -- `, "1\" OR 1=1 -- ", "1 OR 1=1", "1; DELETE FROM repos",
		"1\xbf' OR 1=1 -- ", "1\xbf\\' OR 1=1 -- ", "0x31", "1e0", " 1", "01", "-0", "2\x00' OR 1=1", "\\N", "1abc",
		"18446744073709551616", "-9223372036854775809", []byte("1' OR '1'='1"),
	}
	for _, mode := range []struct {
		name    string
		session []string
	}{
		{"default", nil},
		{"non-strict gbk NO_BACKSLASH_ESCAPES", []string{"SET NAMES gbk", "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p := startRuledProxy(t)
			ip := newInjectionPair(t, p, mode.session...)
			for _, h := range hostile {
				ip.check(t, prep("UPDATE repos SET downloads = downloads + 1 WHERE id = ?", h))
				ip.check(t, prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", h, 2))
				ip.check(t, prep("UPDATE repos SET stars = stars + 1, downloads = downloads + ? WHERE id = ?", 1, h))
				ip.check(t, prep("UPDATE repos SET downloads = ? WHERE id = ?", 5, h))
				ip.check(t, prep("UPDATE repos SET downloads = 6 WHERE name = ?", h))
				ip.check(t, prep("SELECT id, downloads FROM repos WHERE id = ? OR name = ?", h, h))
				ip.check(t, prep("INSERT INTO repos (id, name, downloads) VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1", h, "x"))
			}
			noPanics(t, p)
		})
	}
}

// TestInjectionRewriteModes runs the attacks in each session mode on both
// sides of the differential and compares results and full table contents.
func TestInjectionRewriteModes(t *testing.T) {
	modes := []struct {
		name    string
		session []string
	}{
		{"default", nil},
		{"NO_BACKSLASH_ESCAPES", []string{"SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"}},
		{"ANSI_QUOTES", []string{"SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')"}},
		{"non-strict NO_BACKSLASH_ESCAPES,ANSI_QUOTES", []string{"SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES'"}},
		{"non-strict", []string{"SET SESSION sql_mode = ''"}},
		{"gbk", []string{"SET NAMES gbk"}},
		{"gbk non-strict", []string{"SET NAMES gbk", "SET SESSION sql_mode = ''"}},
		{"sjis non-strict", []string{"SET NAMES sjis", "SET SESSION sql_mode = ''"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startRuledProxy(t)
			ip := newInjectionPair(t, p, m.session...)
			for _, a := range injectionAttacks {
				if strings.Contains(a, "; ") {
					ip.check(t, multi(a))
				} else {
					ip.check(t, text(a))
				}
			}
			noPanics(t, p)
		})
	}
}

// TestMultiStatementSessionChange: statements after a USE (or SET NAMES,
// SET sql_mode) in the same query are planned in the session as it is once
// that statement has run: a ruled table read after USE of an unruled
// schema is not rewritten, and one read after USE of the ruled schema is.
func TestMultiStatementSessionChange(t *testing.T) {
	p := startRuledProxy(t)
	ip := newInjectionPair(t, p)
	ip.check(t, text("UPDATE repos SET downloads = downloads + 3 WHERE id = 1"))
	q := fmt.Sprintf("USE %s; SELECT id, downloads FROM repos ORDER BY id; USE %s; SELECT id, downloads FROM repos ORDER BY id", plainSchema, ruledSchema)
	got := runStep(ip.proxied, multi(q))
	parts := strings.Split(got, " | ")
	if len(parts) != 4 || parts[1] != parts[3] || !strings.Contains(parts[1], "rows=(1,") {
		t.Fatalf("%s through the proxy:\n%s\nwant both reads equal (the schemas hold the same totals)", q, got)
	}
	// The session ends in the ruled schema, and the proxy knows it.
	ip.check(t, text("UPDATE repos SET downloads = downloads + 1 WHERE id = 2"))
	ip.check(t, text("SELECT id, downloads FROM repos ORDER BY id"))
	noPanics(t, p)
}

// TestStalledClientClosed: a client that stops reading while the proxy has
// a response for it is closed after ClientWriteTimeout, and its backend
// connection is released; a client that reads slowly but steadily is not
// cut off.
func TestStalledClientClosed(t *testing.T) {
	p := startProxy(t, func(c *proxy.Config) { c.ClientWriteTimeout = time.Second })
	admin := directDB(t, "")
	backendThreads := func(id string) int {
		var n int
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	stalled := mustLoginWire(t, p.addr, testdb.DBName)
	_ = stalled.query("SELECT CONNECTION_ID()")
	id := readScalar(t, stalled)
	// 64 MiB: far more than the socket buffers hold, so the proxy's writes
	// block once the client stops reading (it never reads at all).
	if err := stalled.query("SELECT seq, REPEAT('x', 1000) FROM " + testdb.Seq(65536)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for backendThreads(id) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backend connection %s of a client that stopped reading still open after 15s", id)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Slow but steady: 512 bytes every 2 ms is far below the socket
	// buffers' drain rate the timeout is about, and each write progresses.
	w := mustLoginWire(t, p.addr, testdb.DBName)
	_ = w.SetDeadline(time.Now().Add(time.Minute))
	sr := &slowReader{r: w.Conn, chunk: 512, pause: 2 * time.Millisecond}
	sr.slow.Store(true)
	w.br = bufio.NewReaderSize(sr, 4096)
	if err := w.query("SELECT seq, REPEAT('y', 1000) FROM " + testdb.Seq(700)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.readFull(); err != nil { // column count
		t.Fatal(err)
	}
	rows, err := w.readRows(2)
	if err != nil {
		t.Fatalf("slow reader cut off after %d rows: %v", rows, err)
	}
	if rows != 700 {
		t.Fatalf("slow reader got %d rows, want 700", rows)
	}
	noPanics(t, p)
}
