// Package proxy is slotproxy's wire-protocol layer: it accepts MySQL client
// connections, relays the handshake to the backend (the proxy holds no client
// credentials), and relays every command and response packet by packet.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotproxy/slotproxy/executor"
	"github.com/slotproxy/slotproxy/rewrite"
)

// Config is everything a Server needs. The zero value of each optional field
// is documented next to it.
type Config struct {
	// Backend is the HOST:PORT of the MySQL or MariaDB server. Required.
	Backend string
	// ProxyProtocol sends a PROXY protocol v2 header with the client's
	// address first on every backend connection (MariaDB's
	// proxy_protocol_networks), so the backend sees who connects. MySQL
	// does not support it.
	ProxyProtocol bool
	// BackendTLS, when non-nil, makes every backend connection use TLS with
	// this configuration. A backend that does not offer TLS is then refused
	// (never a silent downgrade). Nil means plaintext.
	BackendTLS *tls.Config
	// BackendTLSPreferred makes BackendTLS apply only to a backend that
	// offers TLS; one that does not is used in plaintext (mode preferred).
	BackendTLSPreferred bool
	// ClientTLS, when non-nil, is offered to clients (CLIENT_SSL). Nil means
	// the proxy does not advertise TLS; a client that insists gets an error.
	ClientTLS *tls.Config
	// ConnectTimeout bounds dialing the backend. Zero means 5s.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds the whole handshake (greeting to OK). Zero means 10s.
	HandshakeTimeout time.Duration
	// ClientWriteTimeout closes a connection whose client has not read
	// for that long while the proxy had a response to write (a stalled
	// client holds a backend connection). Zero means 8h.
	ClientWriteTimeout time.Duration
	// MaxUnauthenticated caps connections in the handshake at once (each
	// holds a backend connection). Further connections wait their turn
	// within HandshakeTimeout; beyond MaxHandshakeQueue waiting, they get
	// ERR 1040 and are closed. Zero means 64, well under a default
	// max_connections (151) of the backend.
	MaxUnauthenticated int
	// MaxHandshakeQueue caps connections waiting for a handshake slot
	// (they hold no backend connection). Zero means 10,000.
	MaxHandshakeQueue int
	// MaxStatementBytes bounds the statements the proxy reads whole to plan
	// them (with rules, every COM_QUERY and COM_STMT_PREPARE naming a ruled
	// table, and executions of rewritten statements). Zero means 64 MiB.
	MaxStatementBytes int
	// Logger receives structured logs. Nil means slog.Default().
	Logger *slog.Logger
	// MaxRetries bounds how often a rewritten autocommit statement is
	// retried after a deadlock (1213) or lock wait timeout (1205). Zero
	// means 3; negative disables retries.
	MaxRetries int
	// MaxConcurrentRewrites bounds how many rewritten statements (slotted
	// increments, counter reads) of sessions outside transactions run at
	// the backend at once; others wait their turn (executor.Gate). Zero
	// means 64; negative means no bound.
	MaxConcurrentRewrites int
	// QueueWait: when no turn has been given back for this long, waiting
	// statements run without one. Zero means 2 s.
	QueueWait time.Duration
	// Rewriter rewrites statements that touch ruled tables. Nil relays
	// every statement unchanged. SetRewriter replaces it while serving.
	Rewriter *rewrite.Rewriter
	// Metrics, when set, receives the proxy's measurements (NewMetrics).
	Metrics *Metrics
	// OnDDL, when set, is called by the session after a DDL statement on a
	// ruled table succeeded, before it reads its next command, so the
	// owner can reload the catalog and call SetRewriter; the session's
	// next statement is planned with the rewriter set by then.
	OnDDL func()
}

// Server is a running proxy. Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Shutdown and Close: aborts dials and TLS handshakes
	cancel context.CancelFunc

	commandHook func(cmd byte) // tests only: fault injection, set before Serve
	rewriter    atomic.Pointer[rewrite.Rewriter]
	env         *executor.Env

	nextID atomic.Uint64
	// slots holds a token per connection in the handshake; queued counts
	// connections waiting for one.
	slots  chan struct{}
	queued atomic.Int64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{} // every accepted connection, in handshake or not
	shutting  bool
	allGone   chan struct{} // closed when shutting and no session is left
	wg        sync.WaitGroup
}

// NewServer validates cfg and returns a Server that is not yet serving.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Backend == "" {
		return nil, errors.New("proxy: no backend address")
	}
	if _, _, err := net.SplitHostPort(cfg.Backend); err != nil {
		return nil, fmt.Errorf("proxy: backend address %q: %w", cfg.Backend, err)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.ClientWriteTimeout <= 0 {
		cfg.ClientWriteTimeout = 8 * time.Hour
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.MaxUnauthenticated <= 0 {
		cfg.MaxUnauthenticated = 64
	}
	if cfg.MaxHandshakeQueue <= 0 {
		cfg.MaxHandshakeQueue = 10000
	}
	if cfg.MaxStatementBytes <= 0 {
		cfg.MaxStatementBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 3
	}
	env := executor.NewEnv()
	env.MaxRetries = max(cfg.MaxRetries, 0)
	if cfg.MaxConcurrentRewrites == 0 {
		cfg.MaxConcurrentRewrites = 64
	}
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = 2 * time.Second
	}
	env.Gate = executor.NewGate(cfg.MaxConcurrentRewrites, cfg.QueueWait)
	env.OnDDL = cfg.OnDDL
	if cfg.Metrics != nil {
		env.Metrics = cfg.Metrics
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		sessions:  make(map[*session]struct{}),
		allGone:   make(chan struct{}),
		env:       env,
		slots:     make(chan struct{}, cfg.MaxUnauthenticated),
	}
	srv.rewriter.Store(cfg.Rewriter)
	return srv, nil
}

// SetRewriter replaces the rewriter for statements prepared or sent from
// now on; statements already prepared keep the plan they were prepared
// with. Nil turns rewriting off.
func (s *Server) SetRewriter(r *rewrite.Rewriter) {
	s.env.SchemaChanged()
	s.rewriter.Store(r)
}

// Rewriter returns the current rewriter (nil when rewriting is off).
func (s *Server) Rewriter() *rewrite.Rewriter { return s.rewriter.Load() }

// StatsSnapshot is a copy of the server's counters since start.
type StatsSnapshot struct {
	RewrittenReads, RewrittenWrites, GuardedWrites, ParseFailures, Shadowed, Retries, Refused uint64
	// LockedTables are the ruled tables whose increments inside
	// transactions lock the record, since transactions read their counters
	// after incrementing them.
	LockedTables []string
}

// Stats returns the current counters.
func (s *Server) Stats() StatsSnapshot {
	st := &s.env.Stats
	return StatsSnapshot{
		RewrittenReads:  st.RewrittenReads.Load(),
		RewrittenWrites: st.RewrittenWrites.Load(),
		GuardedWrites:   st.GuardedWrites.Load(),
		ParseFailures:   st.ParseFailures.Load(),
		Shadowed:        st.Shadowed.Load(),
		Retries:         st.Retries.Load(),
		Refused:         st.Refused.Load(),
		LockedTables:    s.env.LockedTables(),
	}
}

// HandshakesWaiting is how many connections wait for a handshake slot.
func (s *Server) HandshakesWaiting() int {
	return int(s.queued.Load())
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("proxy: server closed")

// Serve accepts connections on ln until Shutdown or Close is called, then
// returns ErrServerClosed. Accept errors other than a closed listener (such
// as running out of file descriptors) are logged and retried with backoff.
// Serve closes ln when it returns.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutting {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		_ = ln.Close()
	}()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isShutting() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		sess := newSession(s, s.nextID.Add(1), c)
		if !s.add(sess) {
			_ = c.Close()
			return ErrServerClosed
		}
		go s.handle(sess)
	}
}

func (s *Server) isShutting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutting
}

// add registers a new session; false once shutdown has begun.
func (s *Server) add(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting {
		return false
	}
	s.sessions[sess] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) remove(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	if s.shutting && len(s.sessions) == 0 {
		closeOnce(s.allGone)
	}
	s.mu.Unlock()
	s.wg.Done()
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (s *Server) handle(sess *session) {
	defer s.remove(sess)
	if tc, ok := sess.rawClient.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if n := s.queued.Add(1); n > int64(s.cfg.MaxHandshakeQueue) {
		s.queued.Add(-1)
		s.log.Warn("too many connections waiting for the handshake; refusing", "client", sess.rawClient.RemoteAddr().String(), "limit", s.cfg.MaxHandshakeQueue)
		_ = sess.rawClient.SetWriteDeadline(time.Now().Add(time.Second))
		_ = sendError(sess.client, 0, errTooManyConns("too many connections waiting for the handshake"))
		_ = sess.rawClient.Close()
		return
	}
	acquired := false
	slot := func(deadline time.Time) bool {
		defer s.queued.Add(-1)
		select {
		case s.slots <- struct{}{}:
			acquired = true
			return true
		default:
		}
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case s.slots <- struct{}{}:
			acquired = true
			return true
		case <-t.C:
		case <-sess.closed:
		}
		return false
	}
	release := func() {
		if acquired {
			acquired = false
			<-s.slots
		}
	}
	defer release()
	sess.serve(s.ctx, slot, release)
}

// beginShutdown stops accepting and returns the sessions alive now.
func (s *Server) beginShutdown() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shutting {
		s.shutting = true
		if len(s.sessions) == 0 {
			closeOnce(s.allGone)
		}
	}
	for ln := range s.listeners {
		_ = ln.Close()
	}
	out := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}

// Shutdown stops accepting, lets statements in flight finish, closes idle
// connections and those still in the handshake, and returns when all
// connections are gone or ctx is done (then the remaining connections are
// closed and ctx.Err() is returned).
func (s *Server) Shutdown(ctx context.Context) error {
	sessions := s.beginShutdown()
	s.cancel()
	for _, sess := range sessions {
		sess.drain()
	}
	select {
	case <-s.allGone:
		s.wg.Wait()
		return nil
	case <-ctx.Done():
		_ = s.Close()
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once, and waits for
// their goroutines to finish.
func (s *Server) Close() error {
	sessions := s.beginShutdown()
	s.cancel()
	for _, sess := range sessions {
		sess.close()
	}
	s.wg.Wait()
	return nil
}
