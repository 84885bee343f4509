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

	"github.com/slotproxy/slotproxy/rewrite"
)

// Config is everything a Server needs. The zero value of each optional field
// is documented next to it.
type Config struct {
	// Backend is the HOST:PORT of the MySQL or MariaDB server. Required.
	Backend string
	// BackendTLS, when non-nil, makes every backend connection use TLS with
	// this configuration. A backend that does not offer TLS is then refused
	// (never a silent downgrade). Nil means plaintext.
	BackendTLS *tls.Config
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
	// MaxUnauthenticated caps connections that have not finished the
	// handshake; further connections get ERR 1040 and are closed. Zero means 1000.
	MaxUnauthenticated int
	// Logger receives structured logs. Nil means slog.Default().
	Logger *slog.Logger
	// MaxRetries bounds how often a rewritten autocommit statement is
	// retried after a deadlock (1213) or lock wait timeout (1205). Zero
	// means 3; negative disables retries.
	MaxRetries int
	// Rewriter rewrites statements that touch ruled tables. Nil relays
	// every statement unchanged. SetRewriter replaces it while serving.
	Rewriter *rewrite.Rewriter
	// Metrics, when set, receives the proxy's measurements (NewMetrics).
	Metrics *Metrics
	// OnDDL, when set, is called in a goroutine of its own after a DDL
	// statement on a ruled table succeeded, so the owner can reload the
	// catalog and call SetRewriter.
	OnDDL func()
}

// Server is a running proxy. Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Shutdown and Close: aborts dials and TLS handshakes
	cancel context.CancelFunc

	commandHook  func(cmd byte) // tests only: fault injection, set before Serve
	rewriter     atomic.Pointer[rewrite.Rewriter]
	exists       *existsCache
	stats        Stats
	shadowLogged atomic.Int64 // unix nanoseconds of the last shadow log line at info

	nextID          atomic.Uint64
	unauthenticated atomic.Int64

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
		cfg.MaxUnauthenticated = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 3
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
		exists:    newExistsCache(1 << 20),
	}
	srv.rewriter.Store(cfg.Rewriter)
	return srv, nil
}

// SetRewriter replaces the rewriter for statements prepared or sent from
// now on; statements already prepared keep the plan they were prepared
// with. Nil turns rewriting off.
func (s *Server) SetRewriter(r *rewrite.Rewriter) { s.rewriter.Store(r) }

// Rewriter returns the current rewriter (nil when rewriting is off).
func (s *Server) Rewriter() *rewrite.Rewriter { return s.rewriter.Load() }

// Stats are the server's counters since start. Safe for concurrent use.
type Stats struct {
	rewrittenReads  atomic.Uint64
	rewrittenWrites atomic.Uint64
	guardedWrites   atomic.Uint64
	parseFailures   atomic.Uint64
	shadowed        atomic.Uint64
	existsHits      atomic.Uint64
	retries         atomic.Uint64
}

// StatsSnapshot is a copy of the counters.
type StatsSnapshot struct {
	RewrittenReads, RewrittenWrites, GuardedWrites, ParseFailures, Shadowed, ExistsHits, Retries uint64
	ExistsCacheSize                                                                              int
}

// Stats returns the current counters.
func (s *Server) Stats() StatsSnapshot {
	return StatsSnapshot{
		RewrittenReads:  s.stats.rewrittenReads.Load(),
		RewrittenWrites: s.stats.rewrittenWrites.Load(),
		GuardedWrites:   s.stats.guardedWrites.Load(),
		ParseFailures:   s.stats.parseFailures.Load(),
		Shadowed:        s.stats.shadowed.Load(),
		ExistsHits:      s.stats.existsHits.Load(),
		Retries:         s.stats.retries.Load(),
		ExistsCacheSize: s.exists.size(),
	}
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
	c := sess.clientConn
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if n := s.unauthenticated.Add(1); n > int64(s.cfg.MaxUnauthenticated) {
		s.unauthenticated.Add(-1)
		s.log.Warn("too many connections in handshake; refusing", "client", c.RemoteAddr().String(), "limit", s.cfg.MaxUnauthenticated)
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = sess.client.sendError(0, proxyError(codeTooManyConns, "too many connections in handshake"))
		_ = c.Close()
		return
	}
	sess.serve(s.ctx)
}

// handshakeDone is called once per session when its handshake ends, however.
func (s *Server) handshakeDone() { s.unauthenticated.Add(-1) }

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
