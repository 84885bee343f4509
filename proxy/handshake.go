package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
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
	connIDAt      int
	scramble      []byte
	// scrambleAt locate the scramble's two parts in raw (the second is
	// absent when scrambleLen[1] is 0).
	scrambleAt, scrambleLen [2]int
	plugin                  string
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
	g.connIDAt = pos
	g.connID = binary.LittleEndian.Uint32(b[pos:])
	g.scramble = append(g.scramble, b[pos+4:pos+12]...)
	g.scrambleAt[0], g.scrambleLen[0] = pos+4, 8
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
		part := bytes.TrimRight(b[pos:pos+n], "\x00")
		g.scramble = append(g.scramble, part...)
		g.scrambleAt[1], g.scrambleLen[1] = pos, len(part)
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
	// pluginStart and pluginEnd locate the plugin name (pluginStart is -1
	// when the response names none).
	pluginStart, pluginEnd int
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
	h := clientHello{pluginStart: -1}
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
		h.pluginStart = at(rest)
		h.pluginEnd = h.pluginStart + i
	}
	return h, nil
}

// withPlugin returns the handshake response resp with its plugin name
// replaced by name (resp as it is when it names none).
func (h clientHello) withPlugin(resp []byte, name string) []byte {
	if h.pluginStart < 0 || h.plugin == name {
		return resp
	}
	out := make([]byte, 0, len(resp)+len(name))
	out = append(out, resp[:h.pluginStart]...)
	out = append(out, name...)
	return append(out, resp[h.pluginEnd:]...)
}

// handshake relays the connection phase: a greeting to the client, the
// client's response to the backend, and every auth round trip until the
// backend says OK or ERR. TLS is terminated per hop. On return without
// error the session is authenticated and s.caps holds the flags both
// client and backend work with.
//
// The greeting is the backend's own when a handshake slot is free at once
// (the slot is taken and the backend dialed before the client is
// greeted). Otherwise, once the proxy has relayed one backend greeting, the
// client is greeted by the proxy with a copy of the last one (a fresh
// scramble, connection id 0) and no backend connection: a client that
// never answers costs one socket and nothing else. When it answers, the
// session takes a slot, dials the backend, and sends the client an auth
// switch request with the backend's scramble, so that the client computes
// its auth data again for this backend connection (see reauthenticate). A
// session whose slot was taken over while it waited for its client
// (parked, see handshakeSlots) goes the same way.
func (s *session) handshake(ctx context.Context) error {
	err := s.connectionPhase(ctx)
	s.metrics().handshake(handshakeOutcome(err))
	if errors.Is(err, errAuthFailed) {
		s.metrics().authFailed()
	}
	return err
}

var (
	// errNoSlot: no handshake slot came free within the handshake deadline.
	errNoSlot = errors.New("no handshake slot within the handshake deadline")
	// errCannotReauth: a client greeted by the proxy cannot be asked for
	// its auth data again (see reauthenticate).
	errCannotReauth = errors.New("cannot re-authenticate a client without CLIENT_PLUGIN_AUTH")
)

// handshakeOutcome is the outcome label of slotproxy_handshakes_total for
// the connection phase's result err.
func handshakeOutcome(err error) string {
	var bf *backendFailure
	switch {
	case err == nil:
		return handshakeOK
	case errors.Is(err, errAuthFailed):
		return handshakeAuthFailed
	case errors.Is(err, errNoSlot), errors.Is(err, errCannotReauth):
		return handshakeRefused
	case errors.As(err, &bf), errors.Is(err, errBackendHop):
		return handshakeBackendFailed
	}
	return handshakeAborted
}

// errBackendHop marks failures of the backend connection during the auth
// exchange.
var errBackendHop = errors.New("backend connection")

func (s *session) connectionPhase(ctx context.Context) error {
	cfg := &s.srv.cfg
	slots := s.srv.slots
	deadline, _ := ctx.Deadline()

	var gr *greeting // the backend's greeting; nil while the session has no backend connection
	var backendCaps, advertised uint32
	var greet []byte
	haveSlot := slots.tryTake(s)
	tmpl := s.srv.greeting.Load()
	if !haveSlot && tmpl == nil {
		// No backend greeting to copy yet: wait for a slot.
		if !slots.take(s, deadline) {
			if !s.isClosed() {
				_ = sendError(s.client, 0, errTooManyConns("too many connections in handshake"))
			}
			return errNoSlot
		}
		haveSlot = true
	}
	if haveSlot {
		g, err := s.dialBackend(ctx)
		if err != nil {
			s.reportBackendFailure(ctx, err, false, 0)
			return err
		}
		gr, backendCaps = g, g.caps
		advertised = gr.caps & passCaps
		if cfg.ClientTLS != nil {
			advertised |= mysql.CLIENT_SSL
		}
		gr.setCaps(advertised)
		s.srv.greeting.Store(newGreetingTemplate(gr))
		greet = gr.raw
	} else {
		greet, advertised = tmpl.greet(), tmpl.caps
		s.metrics().proxyGreeted()
	}
	if _, err := s.client.WritePacket(greet, 0); err != nil {
		return err
	}
	if err := s.client.Flush(); err != nil {
		return err
	}

	// The client's turn: an idle holder's slot may be taken over.
	slots.clientPaced(s)
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
	if !slots.clientAnswered(s) && gr != nil {
		// Parked while the client took its time: the backend connection
		// is closed.
		gr, s.back = nil, nil
		s.log.Debug("handshake slot was taken over while waiting for the client; opening a new backend connection")
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
	s.plugin = hello.plugin
	if s.plugin == "" && gr != nil {
		s.plugin = gr.plugin
	}

	if gr == nil {
		// Greeted by the proxy, or parked: now that the client has
		// answered, a slot and a backend connection of its own.
		if !slots.take(s, deadline) {
			if !s.isClosed() {
				_ = sendError(s.client, cseq+1, errTooManyConns("too many connections in handshake"))
			}
			return errNoSlot
		}
		g, err := s.dialBackend(ctx)
		if err != nil {
			s.reportBackendFailure(ctx, err, true, cseq+1)
			return err
		}
		gr, backendCaps = g, g.caps
		if missing := s.caps & passCaps &^ backendCaps; missing != 0 {
			_ = sendError(s.client, cseq+1, errHandshake("the backend's capabilities changed during the handshake (%#x missing); connect again", missing))
			return fmt.Errorf("backend lacks capabilities %#x the client was offered", missing)
		}
		if resp, hello, err = s.reauthenticate(resp, hello, cseq); err != nil {
			return err
		}
	}
	s.serverVersion = gr.serverVersion
	lastVersion.Store(&s.serverVersion)
	s.dialect = dialect.Parse(s.serverVersion)
	s.backendConnID = gr.connID
	s.log = s.log.With("user", hello.user, "backend_conn", gr.connID)
	backendTLS := s.backendTLS

	toBackend := hello.caps & passCaps & backendCaps
	if backendTLS {
		toBackend |= mysql.CLIENT_SSL
	}
	binary.LittleEndian.PutUint32(resp, toBackend)
	if hello.caps&mysql.CLIENT_LONG_PASSWORD == 0 {
		clear(resp[28:32]) // MariaDB extended capabilities: none offered
	}
	s.scramble = gr.scramble
	if s.plugin == "" {
		s.plugin = gr.plugin
	}
	plugin := hello.plugin // reauthPlugin after reauthenticate
	if plugin == "" {
		plugin = gr.plugin
	}
	a := authRelay{
		s:          s,
		scramble:   append([]byte(nil), gr.scramble...),
		plugin:     plugin,
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
			return fmt.Errorf("%w: %w", errBackendHop, err)
		}
		if err := s.back.Flush(); err != nil {
			return fmt.Errorf("%w: %w", errBackendHop, err)
		}
		tc := tls.Client(s.back.Detach(), cfg.BackendTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = sendError(s.client, cseq+1, errBackendUnreachable("TLS handshake with backend %s failed: %v", cfg.Backend, err))
			return fmt.Errorf("%w: TLS handshake: %w", errBackendHop, err)
		}
		s.back = wire.NewConn(tc, wire.Options{ReadBuf: backendReadBuf, WriteBuf: backendWriteBuf, Server: true})
		bseq = 2
	}
	if _, err := s.back.WritePacket(resp, bseq); err != nil {
		return fmt.Errorf("%w: %w", errBackendHop, err)
	}
	clear(resp) // the auth response is a credential: do not keep it around
	if err := s.back.Flush(); err != nil {
		return fmt.Errorf("%w: %w", errBackendHop, err)
	}
	a.delta = bseq - cseq
	err = a.run()
	s.authStatus = a.status
	return err
}

// greetingTemplate is a backend greeting as the proxy relayed it (its
// capabilities set to what the proxy offers), which the proxy copies to
// greet clients itself while every handshake slot is taken.
type greetingTemplate struct {
	g    greeting // never modified
	caps uint32   // the capabilities it offers
}

func newGreetingTemplate(gr *greeting) *greetingTemplate {
	t := &greetingTemplate{g: *gr, caps: gr.caps}
	t.g.raw = bytes.Clone(gr.raw)
	t.g.scramble = nil
	return t
}

// greet returns a greeting of the proxy's own: the template with a fresh
// scramble and connection id 0 (the client's connection has no backend
// connection yet, so no server thread id; CONNECTION_ID() still gives the
// real one once it has logged in).
func (t *greetingTemplate) greet() []byte {
	raw := bytes.Clone(t.g.raw)
	binary.LittleEndian.PutUint32(raw[t.g.connIDAt:], 0)
	for i := range 2 {
		part := raw[t.g.scrambleAt[i] : t.g.scrambleAt[i]+t.g.scrambleLen[i]]
		_, _ = rand.Read(part)
		for j, c := range part { // no NUL: clients read the scramble up to one
			part[j] = c&0x7f | 1
		}
	}
	return raw
}

// reauthPlugin is the plugin name a handshake response names when the
// proxy wants the backend to ask the client for its auth data again. No
// account uses it, so the server answers with an auth switch request to the
// account's own plugin, with its own scramble.
const reauthPlugin = "slotproxy_reauthenticate"

// reauthenticate prepares the handshake response resp of a client that was
// not greeted by its backend connection (greeted by the proxy, or parked)
// for that connection: its auth data was computed over a scramble the
// backend never sent. The response goes to the backend with no auth data
// and naming reauthPlugin, so that the backend sends an auth switch request
// to the account's plugin with its own scramble, which the auth relay
// passes to the client: the client authenticates once more, exactly as it
// does directly when its first guess of the plugin was wrong (one switch,
// to the account's plugin). A client without CLIENT_PLUGIN_AUTH cannot be
// asked again; one that sent no auth data (no password) needs not be.
func (s *session) reauthenticate(resp []byte, hello clientHello, cseq byte) ([]byte, clientHello, error) {
	if hello.authStart == hello.authEnd {
		return resp, hello, nil // no password: nothing was computed over the scramble
	}
	if hello.caps&mysql.CLIENT_PLUGIN_AUTH == 0 || hello.pluginStart < 0 {
		_ = sendError(s.client, cseq+1, errTooManyConns("slotproxy was too busy to relay this handshake to the server at once, and the client cannot be asked to authenticate again (no CLIENT_PLUGIN_AUTH); connect again"))
		return nil, hello, errCannotReauth
	}
	named := hello.withPlugin(resp, reauthPlugin)
	h, err := parseHandshakeResponse(named)
	if err != nil {
		return nil, hello, err
	}
	out := h.withAuth(named, nil)
	clear(resp)
	if h, err = parseHandshakeResponse(out); err != nil {
		return nil, hello, err
	}
	return out, h, nil
}

// backendFailure is a failure to open a backend connection for a
// handshake, with what the client is told: the backend's own ERR packet
// (errPkt), or else an error of the proxy's (tell).
type backendFailure struct {
	tell   *wire.Error
	errPkt []byte
	err    error
}

func (f *backendFailure) Error() string { return f.err.Error() }
func (f *backendFailure) Unwrap() error { return f.err }

// dialBackend opens the session's backend connection (s.back, s.rawBack,
// s.backendTLS) and reads its greeting. Errors are *backendFailure, except
// when the session was closed meanwhile.
func (s *session) dialBackend(ctx context.Context) (*greeting, error) {
	cfg := &s.srv.cfg
	dialer := net.Dialer{Timeout: cfg.ConnectTimeout}
	bc, err := dialer.DialContext(ctx, "tcp", cfg.Backend)
	if err != nil {
		return nil, &backendFailure{tell: errBackendUnreachable("can't connect to backend %s: %v", cfg.Backend, unwrapNetErr(err)),
			err: fmt.Errorf("dial backend: %w", err)}
	}
	if tc, ok := bc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if !s.setRawBack(bc) {
		return nil, errors.New("session closed during dial")
	}
	if cfg.ProxyProtocol {
		h, err := proxyHeader(s.rawClient.RemoteAddr(), s.rawClient.LocalAddr())
		if err == nil {
			_, err = bc.Write(h)
		}
		if err != nil {
			return nil, &backendFailure{tell: errBackendUnreachable("PROXY protocol header to backend %s: %v", cfg.Backend, err),
				err: fmt.Errorf("PROXY protocol header: %w", err)}
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = bc.SetDeadline(dl)
	}
	s.back = wire.NewConn(bc, wire.Options{ReadBuf: backendReadBuf, WriteBuf: backendWriteBuf, Server: true})

	g, _, err := s.back.ReadPacket(nil, handshakePacketLimit)
	if err != nil {
		return nil, &backendFailure{tell: errBackendUnreachable("backend %s closed the connection before its greeting", cfg.Backend),
			err: fmt.Errorf("read backend greeting: %w", err)}
	}
	if len(g) > 0 && g[0] == 0xff { // the backend refused us (too many connections, host blocked): relay
		return nil, &backendFailure{errPkt: g, err: errors.New("backend refused the connection")}
	}
	gr, err := parseGreeting(g)
	if err != nil {
		return nil, &backendFailure{tell: errHandshake("backend %s sent an invalid greeting", cfg.Backend), err: err}
	}
	backendTLS := cfg.BackendTLS != nil
	if backendTLS && cfg.BackendTLSPreferred && gr.caps&mysql.CLIENT_SSL == 0 {
		backendTLS = false // preferred: plaintext to a backend without TLS
	}
	s.backendTLS = backendTLS
	if backendTLS && gr.caps&mysql.CLIENT_SSL == 0 {
		return nil, &backendFailure{tell: errBackendUnreachable("backend %s does not offer TLS, which the proxy is configured to require", cfg.Backend),
			err: errors.New("backend does not offer TLS")}
	}
	return gr, nil
}

// reportBackendFailure tells the client why it cannot be served. A client
// not greeted yet gets the backend's ERR as it is, or the proxy's error
// after a greeting of the proxy's own (refuseHandshake); a greeted client
// gets the ERR with sequence id seq, in answer to its last packet.
func (s *session) reportBackendFailure(ctx context.Context, err error, greeted bool, seq byte) {
	var f *backendFailure
	if !errors.As(err, &f) {
		return
	}
	switch {
	case f.errPkt != nil:
		if !greeted {
			seq = 0
		}
		_, _ = s.client.WritePacket(f.errPkt, seq)
		_ = s.client.Flush()
	case greeted:
		_ = sendError(s.client, seq, f.tell)
	default:
		s.refuseHandshake(ctx, f.tell)
	}
}

// park closes the backend connection of s, whose handshake slot was taken
// over while it waited for its client (see handshakeSlots); the session's
// goroutine notices in clientAnswered. Called with handshakeSlots.mu held.
func (s *session) park() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rawBack != nil {
		_ = s.rawBack.Close()
		s.rawBack = nil
		s.metrics().conns(0, -1)
	}
	s.metrics().parked()
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
