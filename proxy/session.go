package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/executor"
	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/internal/wire"
)

// Buffer sizes per connection. Backend reads and client writes carry result
// sets; client reads and backend writes carry mostly small commands.
const (
	clientReadBuf   = 4 << 10
	clientWriteBuf  = 16 << 10
	backendReadBuf  = 16 << 10
	backendWriteBuf = 4 << 10
)

// phase is where a session is in its life. It changes only in the session's
// own goroutine; Shutdown reads it (under session.mu) to decide whether the
// session can be closed at once.
type phase uint8

const (
	phaseHandshake phase = iota // relaying the connection phase
	phaseIdle                   // waiting for the client's next command; nothing is owed
	phaseBusy                   // a command is in flight: its response is owed
	phaseClosed                 // torn down
)

func (p phase) String() string {
	return [...]string{"handshake", "idle", "busy", "closed"}[p]
}

// session is one client connection and its own backend connection, served
// by one goroutine as a synchronous loop: read one command from the client,
// forward it (or hand it to the executor when it may need rewriting), relay
// its whole response, and read the next command. Who owns what:
//
//   - The session goroutine owns both connections, always, except while it
//     waits for a client command after a second of idleness: then an idle
//     watcher (see watchBackend) owns reading the backend and writing the
//     client, so that a backend that closes or speaks on its own (MySQL's
//     ERR 4031 before it closes an idle connection) reaches the client at
//     once, as it would directly. The session takes both back before it
//     touches them again.
//   - The response expected is implicit in the loop: exactly one command is
//     in flight while phase is busy, and its kind (wire.KindOf) says how its
//     response ends. A pipelining client's later commands wait in the socket
//     buffer.
//   - The transaction state (server status flags) lives in the executor
//     session (ex), updated after every response.
//
// Every blocking call also ends with the session: close shuts both sockets.
type session struct {
	srv     *Server
	id      uint64
	log     *slog.Logger
	started time.Time

	client, back *wire.Conn

	// Set by the handshake, read-only afterwards.
	caps          uint32
	serverVersion string
	dialect       dialect.Dialect
	backendConnID uint32
	user, db      string
	tls           bool // the client's hop is TLS
	backendTLS    bool // the backend's hop is TLS
	authStatus    uint16
	scramble      []byte // the greeting's, which COM_CHANGE_USER's auth data is computed over
	plugin        string // the auth plugin the handshake started with

	ex       *executor.Session
	commands uint64

	// Shared with Shutdown and close, under mu.
	mu        sync.Mutex
	phase     phase
	draining  bool
	rawClient net.Conn
	rawBack   net.Conn
	closed    chan struct{}
	// backendGone is set by the idle watcher when the backend closed the
	// connection while the session waited for the client.
	backendGone atomic.Bool
}

func newSession(srv *Server, id uint64, c net.Conn) *session {
	return &session{
		srv:       srv,
		id:        id,
		client:    wire.NewConn(c, wire.Options{ReadBuf: clientReadBuf, WriteBuf: clientWriteBuf}),
		rawClient: c,
		started:   time.Now(),
		log:       srv.log.With("conn", id, "client", c.RemoteAddr().String()),
		closed:    make(chan struct{}),
	}
}

// close tears the session down: both sockets are closed, which unblocks
// every read and write of the session's goroutines. Safe to call from any
// goroutine, any number of times.
func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase == phaseClosed {
		return
	}
	s.phase = phaseClosed
	close(s.closed)
	_ = s.rawClient.Close()
	if s.rawBack != nil {
		_ = s.rawBack.Close()
		s.metrics().conns(0, -1)
	}
}

// setPhase moves the session to p. It reports false when the session must
// stop instead: it was closed, or it is draining and p is idle (the command
// in flight has been answered).
func (s *session) setPhase(p phase) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase == phaseClosed || (s.draining && p == phaseIdle) {
		return false
	}
	s.phase = p
	return true
}

// drain asks the session to close as soon as no command is in flight: at
// once when it is in the handshake or idle.
func (s *session) drain() {
	s.mu.Lock()
	s.draining = true
	idle := s.phase == phaseIdle || s.phase == phaseHandshake
	s.mu.Unlock()
	if idle {
		s.close()
	}
}

// setRawBack records the backend socket so close can reach it. It fails
// (and closes c) when the session was closed meanwhile.
func (s *session) setRawBack(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase == phaseClosed {
		_ = c.Close()
		return false
	}
	s.rawBack = c
	s.metrics().conns(0, 1)
	return true
}

func (s *session) metrics() *Metrics { return s.srv.cfg.Metrics }

// account names the client's account for the executor (Link.Account):
// the user it logged in as and the host it came from.
func (s *session) account() string {
	host, _, err := net.SplitHostPort(s.rawClient.RemoteAddr().String())
	if err != nil {
		host = s.rawClient.RemoteAddr().String()
	}
	return s.user + "@" + host
}

func (s *session) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *session) recoverPanic(where string) {
	if v := recover(); v != nil {
		s.log.Error("panic in connection; closing it", "where", where, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		s.close()
	}
}

// serve runs the session to completion. It never panics: a panic is logged
// with its stack and closes only this session.
func (s *session) serve(ctx context.Context, slot func(deadline time.Time) bool, release func()) {
	s.metrics().conns(1, 0)
	defer s.metrics().conns(-1, 0)
	defer s.close()
	defer s.recoverPanic("session")

	// The handshake deadline counts from accept, the wait for a slot
	// included.
	deadline := s.started.Add(s.srv.cfg.HandshakeTimeout)
	_ = s.rawClient.SetDeadline(deadline)
	hctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	stop := context.AfterFunc(hctx, func() {
		if ctx.Err() != nil { // shutdown: abort the handshake at once
			s.close()
		}
	})
	// Wait for a handshake slot (the backend connections that clients still
	// in the handshake may hold are bounded), within the handshake deadline.
	if !slot(deadline) {
		stop()
		if !s.isClosed() {
			s.log.Info("handshake slot not granted in time; closing")
			_ = sendError(s.client, 0, errTooManyConns("too many connections in handshake"))
		}
		return
	}
	err := s.handshake(hctx)
	release()
	stop()
	if err != nil {
		if errors.Is(err, errAuthFailed) {
			s.log.Info("authentication failed")
		} else {
			s.log.Info("handshake failed", "err", err)
		}
		return
	}
	_ = s.client.SetDeadline(time.Time{})
	_ = s.back.SetDeadline(time.Time{})
	s.client.SetWriteTimeout(s.srv.cfg.ClientWriteTimeout)
	s.ex = executor.NewSession(s.srv.env, executor.Link{Client: s.client, Backend: s.back, Caps: s.caps, Account: s.account()},
		s.log, s.authStatus, s.serverVersion)
	s.log.Info("connection open", "tls", s.tls, "db", s.db)

	err = s.commandLoop()
	s.ex.Close()
	switch {
	case err == nil, s.isClosed(), errors.Is(err, io.EOF):
	case errors.Is(err, errBackendEnded):
		s.log.Info("backend connection ended", "err", err)
		s.lingerClose()
	default:
		s.log.Info("connection ended", "err", err)
	}
	s.close()
	s.log.Info("connection closed", "duration", time.Since(s.started).Round(time.Millisecond), "commands", s.commands)
}

// lingerTime bounds reading off a client after the backend went away.
const lingerTime = 2 * time.Second

// lingerClose closes the client the way a server closes a connection: what
// was sent is flushed, the client gets FIN, and what it still sends is read
// off for a moment, so that it reads the last packets (an ERR) instead of a
// reset.
func (s *session) lingerClose() {
	_ = s.client.Flush()
	conn := s.client.Conn
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 64<<20))
}

// errBackendEnded marks the end of a session because its backend
// connection ended; the client was told (an ERR relayed or made up).
var errBackendEnded = errors.New("backend connection ended")

// commandLoop serves commands until the client quits, a connection fails,
// or the session drains.
func (s *session) commandLoop() error {
	for {
		h, err := s.nextCommand()
		if err != nil {
			return err
		}
		if err := s.command(h); err != nil {
			return err
		}
		s.commands++
	}
}

// nextCommand waits for the header of the client's next command. While it
// waits the session is idle.
func (s *session) nextCommand() (wire.Header, error) {
	if s.client.Buffered() >= 4 { // pipelined: the next command is here already
		return s.client.ReadHeader()
	}
	if err := s.client.Flush(); err != nil {
		return wire.Header{}, err
	}
	// Commands without a response (COM_STMT_CLOSE) wait in the backend's
	// buffer for the next one; not longer than this.
	if err := s.back.Flush(); err != nil {
		return wire.Header{}, fmt.Errorf("%w: %w", errBackendEnded, err)
	}
	if !s.setPhase(phaseIdle) {
		return wire.Header{}, io.EOF
	}
	h, err := s.waitClient()
	if err != nil {
		return h, err
	}
	if !s.setPhase(phaseBusy) {
		return h, io.EOF
	}
	return h, nil
}

// idleWatchAfter is how long a session waits for its client before an idle
// watcher starts watching the backend.
const idleWatchAfter = time.Second

// waitClient reads the next command header, watching the backend while the
// client is idle for long.
func (s *session) waitClient() (wire.Header, error) {
	conn := s.client.Conn
	_ = conn.SetReadDeadline(time.Now().Add(idleWatchAfter))
	h, err := s.client.ReadHeader()
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		if err == nil {
			_ = conn.SetReadDeadline(time.Time{})
		}
		return h, err
	}
	_ = conn.SetReadDeadline(time.Time{})
	w := s.startWatch()
	h, err = s.client.ReadHeader()
	w.stop()
	if s.backendGone.Load() {
		// The client was told and half-closed; whatever it sent is read
		// off by lingerClose.
		return h, errBackendEnded
	}
	return h, err
}

// command serves one command whose header h was read.
func (s *session) command(h wire.Header) error {
	if h.Seq != 0 {
		return fmt.Errorf("%w: command packet with sequence id %d", wire.ErrMalformed, h.Seq)
	}
	if h.Length == 0 {
		return fmt.Errorf("%w: empty command packet", wire.ErrMalformed)
	}
	first, err := s.client.PeekPayload(h, 1)
	if err != nil {
		return wire.NoEOF(err)
	}
	cmd := first[0]
	if s.srv.commandHook != nil {
		s.srv.commandHook(cmd)
	}
	rw := s.srv.rewriter.Load()
	start := time.Now()
	statement := cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_EXECUTE
	if rw != nil && executor.Intercepts(cmd) {
		head, err := s.client.PeekPayload(h, 16)
		if err != nil {
			return wire.NoEOF(err)
		}
		s.client.MarkSeq()
		if !s.ex.NeedsPayload(head, h.Length) {
			s.ex.Relayed(head)
			if cmd == mysql.COM_STMT_EXECUTE {
				s.metrics().statement(PathPassThrough, "")
			}
			err := s.backendErr(s.relay(cmd, h))
			if statement {
				s.timed(PathPassThrough, start)
			}
			return err
		}
		if h.Length >= wire.MaxPayload || h.Length > s.srv.cfg.MaxStatementBytes {
			// Not timed: the executor does not say whether it ran it.
			return s.backendErr(s.bigCommand(rw, cmd, h))
		}
		payload := make([]byte, h.Length)
		if err := s.client.ReadFull(payload); err != nil {
			return err
		}
		err = s.backendErr(s.ex.Handle(rw, payload, 1))
		s.timed(s.ex.LastPath(), start)
		return err
	}
	if statement {
		s.metrics().statement(PathPassThrough, "")
	}
	s.client.MarkSeq()
	err = s.backendErr(s.relay(cmd, h))
	if statement {
		s.timed(PathPassThrough, start)
	}
	return err
}

// timed records the time since start, when the command that arrived then
// has run a statement under path ("" when it ran none), in
// slotproxy_statement_seconds.
func (s *session) timed(path string, start time.Time) {
	if path != "" {
		s.metrics().statementTook(path, time.Since(start))
	}
}

// backendErr handles a failure of the backend connection in the middle of
// a command: the client is told, as the server would have told it, and the
// session ends. A write failure means the server closed while the command
// was on its way; it may have said why first (ERR 1153 for a command over
// max_allowed_packet), and what it said is relayed. Otherwise the client
// gets an ERR of the proxy's own. Other errors are returned as they are.
func (s *session) backendErr(err error) error {
	if err == nil || !errors.Is(err, wire.ErrServer) || s.isClosed() {
		return err
	}
	if errors.Is(err, executor.ErrAnswered) {
		// The client has its answer: one command, one response.
		return fmt.Errorf("%w: %w", errBackendEnded, err)
	}
	told := false
	if errors.Is(err, wire.ErrWrite) {
		told = s.salvage()
	}
	if !told {
		seq := s.client.NextSeq(1)
		_ = sendError(s.client, seq, errBackendLost("lost the connection to the backend: %v", err))
	}
	return fmt.Errorf("%w: %w", errBackendEnded, err)
}

// salvage relays the complete packets the backend sent before it closed,
// and reports whether there were any.
func (s *session) salvage() bool {
	_ = s.back.SetReadDeadline(time.Now().Add(lingerTime))
	relayed := false
	for {
		h, err := s.back.ReadHeader()
		if err != nil {
			break
		}
		if s.back.ForwardRest(s.client, h) != nil {
			break
		}
		relayed = true
	}
	_ = s.client.Flush()
	return relayed
}
