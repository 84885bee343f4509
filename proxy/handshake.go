package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/internal/wire"
)

// passCaps are the capability flags the proxy understands and relays. Every
// other flag (compression, query attributes, optional result set metadata,
// MariaDB's extended capabilities) is removed from the greeting the client
// sees and from the response the backend sees, so both sides agree. CLIENT_SSL
// is decided per hop by the proxy's own TLS settings.
const passCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_LONG_FLAG |
	mysql.CLIENT_CONNECT_WITH_DB | mysql.CLIENT_NO_SCHEMA | mysql.CLIENT_ODBC | mysql.CLIENT_LOCAL_FILES |
	mysql.CLIENT_IGNORE_SPACE | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_INTERACTIVE |
	mysql.CLIENT_IGNORE_SIGPIPE | mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_RESERVED |
	mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_MULTI_RESULTS |
	mysql.CLIENT_PS_MULTI_RESULTS | mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_CONNECT_ATTRS |
	mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS |
	mysql.CLIENT_SESSION_TRACK | mysql.CLIENT_DEPRECATE_EOF

// handshakePacketLimit bounds handshake packets (greeting, response, auth
// data); real ones are a few hundred bytes, connection attributes included.
const handshakePacketLimit = 1 << 20

// greeting is a parsed Protocol::HandshakeV10 packet. Offsets point into raw
// so the proxy can patch capability flags in place and relay the rest as is.
type greeting struct {
	raw           []byte
	serverVersion string
	connID        uint32
	caps          uint32
	capsLowAt     int
	capsHighAt    int // -1 when the greeting stops after the lower flags
	extCapsAt     int // MariaDB extended capabilities, -1 when absent
	scramble      []byte
	plugin        string
}

func parseGreeting(b []byte) (*greeting, error) {
	bad := func(what string) error { return fmt.Errorf("%w: backend greeting: %s", wire.ErrMalformed, what) }
	if len(b) == 0 || b[0] != 10 {
		return nil, bad("not protocol version 10")
	}
	nul := bytes.IndexByte(b[1:], 0)
	if nul < 0 {
		return nil, bad("unterminated server version")
	}
	g := &greeting{raw: b, serverVersion: string(b[1 : 1+nul]), capsHighAt: -1, extCapsAt: -1}
	pos := 2 + nul
	if len(b) < pos+15 {
		return nil, bad("too short")
	}
	g.connID = binary.LittleEndian.Uint32(b[pos:])
	g.scramble = append(g.scramble, b[pos+4:pos+12]...)
	g.capsLowAt = pos + 13
	g.caps = uint32(binary.LittleEndian.Uint16(b[g.capsLowAt:]))
	pos += 15
	if len(b) < pos+16 {
		return g, nil
	}
	g.capsHighAt = pos + 3
	g.caps |= uint32(binary.LittleEndian.Uint16(b[g.capsHighAt:])) << 16
	authLen := int(b[pos+5])
	if g.caps&mysql.CLIENT_LONG_PASSWORD == 0 {
		g.extCapsAt = pos + 12
	}
	pos += 16
	if g.caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		n := max(13, authLen-8)
		if len(b) < pos+n {
			return nil, bad("truncated auth data")
		}
		g.scramble = append(g.scramble, bytes.TrimRight(b[pos:pos+n], "\x00")...)
		pos += n
	}
	if g.caps&mysql.CLIENT_PLUGIN_AUTH != 0 && pos < len(b) {
		name := b[pos:]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		g.plugin = string(name)
	}
	return g, nil
}

// setCaps rewrites the capability flags in the raw greeting and clears
// MariaDB's extended capabilities.
func (g *greeting) setCaps(caps uint32) {
	if g.capsHighAt < 0 {
		caps &= 0xffff
	}
	g.caps = caps
	binary.LittleEndian.PutUint16(g.raw[g.capsLowAt:], uint16(caps))
	if g.capsHighAt >= 0 {
		binary.LittleEndian.PutUint16(g.raw[g.capsHighAt:], uint16(caps>>16))
	}
	if g.extCapsAt >= 0 {
		clear(g.raw[g.extCapsAt : g.extCapsAt+4])
	}
}

// clientHello is what the proxy learns from Protocol::HandshakeResponse41.
type clientHello struct {
	caps   uint32
	user   string
	db     string
	plugin string
	// authStart and authEnd locate the auth data; authForm is how its
	// length is given (see the CLIENT_* flags in parseHandshakeResponse).
	authStart, authEnd int
	authForm           authForm
}

// authForm is how a handshake response encodes its auth data's length.
type authForm uint8

const (
	authLenEnc authForm = iota // CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
	authByte                   // CLIENT_SECURE_CONNECTION: one length byte
	authNUL                    // NUL-terminated
)

// withAuth returns the handshake response resp with its auth data replaced
// by data, encoded the same way.
func (h clientHello) withAuth(resp, data []byte) []byte {
	out := make([]byte, 0, len(resp)+len(data))
	switch h.authForm {
	case authLenEnc:
		prefixStart := h.authStart - lenEncSize(uint64(h.authEnd-h.authStart))
		out = append(out, resp[:prefixStart]...)
		out = mysql.AppendLengthEncodedInteger(out, uint64(len(data)))
		out = append(out, data...)
		return append(out, resp[h.authEnd:]...)
	case authByte:
		out = append(out, resp[:h.authStart-1]...)
		out = append(out, byte(len(data)))
		out = append(out, data...)
		return append(out, resp[h.authEnd:]...)
	default:
		out = append(out, resp[:h.authStart]...)
		out = append(out, data...)
		return append(out, resp[h.authEnd:]...)
	}
}

func lenEncSize(n uint64) int {
	switch {
	case n < 0xfb:
		return 1
	case n < 1<<16:
		return 3
	case n < 1<<24:
		return 4
	}
	return 9
}

// parseHandshakeResponse reads the fields the proxy needs for logging and
// routing decisions. It never keeps the auth response.
func parseHandshakeResponse(b []byte) (clientHello, error) {
	bad := func(what string) error { return fmt.Errorf("%w: handshake response: %s", wire.ErrMalformed, what) }
	var h clientHello
	if len(b) < 32 {
		return h, bad("too short")
	}
	h.caps = binary.LittleEndian.Uint32(b)
	if h.caps&mysql.CLIENT_PROTOCOL_41 == 0 {
		return h, bad("client does not speak protocol 4.1")
	}
	rest := b[32:]
	nul := bytes.IndexByte(rest, 0)
	if nul < 0 {
		return h, bad("unterminated user name")
	}
	h.user, rest = string(rest[:nul]), rest[nul+1:]
	at := func(r []byte) int { return len(b) - len(r) }
	switch {
	case h.caps&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
		n, w, ok := wire.LenEnc(rest)
		if !ok || uint64(len(rest)-w) < n {
			return h, bad("truncated auth response")
		}
		h.authForm, h.authStart = authLenEnc, at(rest)+w
		h.authEnd = h.authStart + int(n)
		rest = rest[w+int(n):]
	case h.caps&mysql.CLIENT_SECURE_CONNECTION != 0:
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return h, bad("truncated auth response")
		}
		h.authForm, h.authStart = authByte, at(rest)+1
		h.authEnd = h.authStart + int(rest[0])
		rest = rest[1+int(rest[0]):]
	default:
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return h, bad("unterminated auth response")
		}
		h.authForm, h.authStart = authNUL, at(rest)
		h.authEnd = h.authStart + i
		rest = rest[i+1:]
	}
	if h.caps&mysql.CLIENT_CONNECT_WITH_DB != 0 && len(rest) > 0 {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			i = len(rest)
		}
		h.db, rest = string(rest[:i]), rest[min(i+1, len(rest)):]
	}
	if h.caps&mysql.CLIENT_PLUGIN_AUTH != 0 && len(rest) > 0 {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			i = len(rest)
		}
		h.plugin = string(rest[:i])
	}
	return h, nil
}

// handshake relays the connection phase: the backend's greeting to the
// client, the client's response to the backend, and every auth round trip
// until the backend says OK or ERR. TLS is terminated per hop. On return
// without error the session is authenticated and s.caps holds the flags both
// client and backend work with.
func (s *session) handshake(ctx context.Context) error {
	cfg := &s.srv.cfg
	dialer := net.Dialer{Timeout: cfg.ConnectTimeout}
	bc, err := dialer.DialContext(ctx, "tcp", cfg.Backend)
	if err != nil {
		s.refuseHandshake(ctx, errBackendUnreachable("can't connect to backend %s: %v", cfg.Backend, unwrapNetErr(err)))
		return fmt.Errorf("dial backend: %w", err)
	}
	if tc, ok := bc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if !s.setRawBack(bc) {
		return errors.New("session closed during dial")
	}
	if cfg.ProxyProtocol {
		h, err := proxyHeader(s.rawClient.RemoteAddr(), s.rawClient.LocalAddr())
		if err == nil {
			_, err = bc.Write(h)
		}
		if err != nil {
			s.refuseHandshake(ctx, errBackendUnreachable("PROXY protocol header to backend %s: %v", cfg.Backend, err))
			return fmt.Errorf("PROXY protocol header: %w", err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = bc.SetDeadline(dl)
	}
	s.back = wire.NewConn(bc, wire.Options{ReadBuf: backendReadBuf, WriteBuf: backendWriteBuf, Server: true})

	g, _, err := s.back.ReadPacket(nil, handshakePacketLimit)
	if err != nil {
		s.refuseHandshake(ctx, errBackendUnreachable("backend %s closed the connection before its greeting", cfg.Backend))
		return fmt.Errorf("read backend greeting: %w", err)
	}
	if len(g) > 0 && g[0] == 0xff { // the backend refused us (too many connections, host blocked): relay
		_, _ = s.client.WritePacket(g, 0)
		_ = s.client.Flush()
		return errors.New("backend refused the connection")
	}
	gr, err := parseGreeting(g)
	if err != nil {
		s.refuseHandshake(ctx, errHandshake("backend %s sent an invalid greeting", cfg.Backend))
		return err
	}
	backendTLS := cfg.BackendTLS != nil
	if backendTLS && cfg.BackendTLSPreferred && gr.caps&mysql.CLIENT_SSL == 0 {
		backendTLS = false // preferred: plaintext to a backend without TLS
	}
	s.backendTLS = backendTLS
	if backendTLS && gr.caps&mysql.CLIENT_SSL == 0 {
		s.refuseHandshake(ctx, errBackendUnreachable("backend %s does not offer TLS, which the proxy is configured to require", cfg.Backend))
		return errors.New("backend does not offer TLS")
	}
	backendCaps := gr.caps
	advertised := gr.caps & passCaps
	if cfg.ClientTLS != nil {
		advertised |= mysql.CLIENT_SSL
	}
	gr.setCaps(advertised)
	s.serverVersion = gr.serverVersion
	lastVersion.Store(&s.serverVersion)
	s.dialect = dialect.Parse(s.serverVersion)
	s.backendConnID = gr.connID
	if _, err := s.client.WritePacket(gr.raw, 0); err != nil {
		return err
	}
	if err := s.client.Flush(); err != nil {
		return err
	}

	resp, cseq, err := s.client.ReadPacket(nil, handshakePacketLimit)
	if err != nil {
		return fmt.Errorf("read handshake response: %w", err)
	}
	if len(resp) < 32 {
		return fmt.Errorf("%w: handshake response of %d bytes", wire.ErrMalformed, len(resp))
	}
	clientTLS := false
	if caps := binary.LittleEndian.Uint32(resp); caps&mysql.CLIENT_SSL != 0 {
		if cfg.ClientTLS == nil {
			_ = sendError(s.client, cseq+1, errHandshake("client requested TLS but slotproxy has no certificate configured"))
			return errors.New("client requested TLS, none configured")
		}
		if len(resp) != 32 {
			return fmt.Errorf("%w: CLIENT_SSL set without an SSL request", wire.ErrMalformed)
		}
		tc := tls.Server(s.client.Detach(), cfg.ClientTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("client TLS handshake: %w", err)
		}
		s.client = wire.NewConn(tc, wire.Options{ReadBuf: clientReadBuf, WriteBuf: clientWriteBuf})
		s.tls = true
		clientTLS = true
		if resp, cseq, err = s.client.ReadPacket(nil, handshakePacketLimit); err != nil {
			return fmt.Errorf("read handshake response after TLS: %w", err)
		}
	}
	if want := byte(1) + boolByte(clientTLS); cseq != want {
		_ = sendError(s.client, cseq+1, wire.Errorf(mysql.ER_NET_PACKETS_OUT_OF_ORDER, "08S01", "Got packets out of order"))
		return fmt.Errorf("%w: handshake response with sequence id %d", wire.ErrMalformed, cseq)
	}
	hello, err := parseHandshakeResponse(resp)
	if err != nil {
		_ = sendError(s.client, cseq+1, errHandshake("bad handshake"))
		return err
	}
	if unsupported := hello.caps &^ advertised & (mysql.CLIENT_COMPRESS | mysql.CLIENT_ZSTD_COMPRESSION_ALGORITHM | mysql.CLIENT_SSL); unsupported != 0 {
		_ = sendError(s.client, cseq+1, errHandshake("client asked for capabilities the proxy did not offer (%#x)", unsupported))
		return errors.New("client used capabilities that were not offered")
	}
	s.caps = hello.caps & advertised
	s.user, s.db = hello.user, hello.db
	s.log = s.log.With("user", hello.user, "backend_conn", gr.connID)

	toBackend := hello.caps & passCaps & backendCaps
	if backendTLS {
		toBackend |= mysql.CLIENT_SSL
	}
	binary.LittleEndian.PutUint32(resp, toBackend)
	if hello.caps&mysql.CLIENT_LONG_PASSWORD == 0 {
		clear(resp[28:32]) // MariaDB extended capabilities: none offered
	}
	s.scramble = gr.scramble
	s.plugin = hello.plugin
	if s.plugin == "" {
		s.plugin = gr.plugin
	}
	a := authRelay{
		s:          s,
		scramble:   append([]byte(nil), gr.scramble...),
		plugin:     s.plugin,
		clientTLS:  clientTLS,
		backendTLS: backendTLS,
	}
	if cleartextPlugin(a.plugin) && !backendTLS {
		clear(resp)
		_ = sendError(s.client, cseq+1, errCleartext(a.plugin))
		return fmt.Errorf("refused auth plugin %s over a plaintext backend connection", a.plugin)
	}
	if data := resp[hello.authStart:hello.authEnd]; len(data) > 0 {
		if held := a.holdPassword(data); !bytes.Equal(held, data) {
			old := resp
			resp = hello.withAuth(resp, held)
			clear(old)
		}
	}
	bseq := byte(1)
	if backendTLS {
		if _, err := s.back.WritePacket(resp[:32], bseq); err != nil {
			return err
		}
		if err := s.back.Flush(); err != nil {
			return err
		}
		tc := tls.Client(s.back.Detach(), cfg.BackendTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = sendError(s.client, cseq+1, errBackendUnreachable("TLS handshake with backend %s failed: %v", cfg.Backend, err))
			return fmt.Errorf("backend TLS handshake: %w", err)
		}
		s.back = wire.NewConn(tc, wire.Options{ReadBuf: backendReadBuf, WriteBuf: backendWriteBuf, Server: true})
		bseq = 2
	}
	if _, err := s.back.WritePacket(resp, bseq); err != nil {
		return err
	}
	clear(resp) // the auth response is a credential: do not keep it around
	if err := s.back.Flush(); err != nil {
		return err
	}
	a.delta = bseq - cseq
	err = a.run()
	s.authStatus = a.status
	return err
}

// unwrapNetErr keeps dial errors short: "connection refused" rather than
// the whole op/address chain, since the message already names the backend.
func unwrapNetErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
