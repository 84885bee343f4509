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
	// MaxUnauthenticated caps the backend connections of clients in the
	// handshake (handshake slots). A connection accepted while a slot is
	// free is greeted with its backend's greeting at once; one accepted
	// while every slot is taken is greeted by the proxy itself and takes a
	// slot only once the client has answered (see handshakeSlots), so a
	// client that sends nothing never holds one. A slot whose holder has
	// waited ParkAfter for its client is taken over by a connection that
	// has answered (the holder is parked: its backend connection closed,
	// its client kept). Connections wait for a slot within
	// HandshakeTimeout. Zero means 64, well under a default
	// max_connections (151) of the backend.
	MaxUnauthenticated int
	// MaxHandshakeQueue caps connections in the handshake that hold no
	// handshake slot (greeted by the proxy, waiting for one, or parked;
	// they hold no backend connection); a connection over it gets ERR
	// 1040 and is closed. Zero means 10,000.
	MaxHandshakeQueue int
	// ParkAfter is how long a handshake that holds a slot may wait for its
	// client before a connection whose client has answered may take the
	// slot over. Zero means 200ms.
	ParkAfter time.Duration
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
	// Coalesce sends concurrent autocommit increments of one record as one
	// increment by their sum (executor.Env.Coalesce).
	Coalesce bool
	// Consolidate lets identical concurrent autocommit reads of counters
	// by one account share one query (executor.Env.Consolidate).
	Consolidate bool
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
	// slots bounds the backend connections of handshakes; greeting is
	// the last backend greeting the proxy relayed, which greetings of its
	// own copy (nil before the first).
	slots    *handshakeSlots
	greeting atomic.Pointer[greetingTemplate]

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
	if cfg.ParkAfter <= 0 {
		cfg.ParkAfter = 200 * time.Millisecond
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
	env.Coalesce = cfg.Coalesce
	env.Consolidate = cfg.Consolidate
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
		slots:     newHandshakeSlots(cfg.MaxUnauthenticated, cfg.MaxHandshakeQueue, cfg.ParkAfter),
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

// SetSlotPartition makes increments from now on pick only slots s with
// s % count == index (of rules with at least count slots), so that proxies
// in front of different nodes of a multi-primary cluster, each given its
// own index, never write one slot row. count <= 1 gives every slot.
func (s *Server) SetSlotPartition(count, index int) error {
	p := executor.SlotPartition{Count: count, Index: index}
	if count <= 1 {
		p = executor.SlotPartition{}
	}
	if !p.Valid() {
		return fmt.Errorf("slot partition: index %d of %d parts", index, count)
	}
	s.env.SetSlotPartition(p)
	return nil
}

// SlotPartition returns the part of the slots increments pick from now
// (count <= 1: every slot).
func (s *Server) SlotPartition() (count, index int) {
	p := s.env.SlotPartition()
	return p.Count, p.Index
}

// Rewriter returns the current rewriter (nil when rewriting is off).
func (s *Server) Rewriter() *rewrite.Rewriter { return s.rewriter.Load() }

// StatsSnapshot is a copy of the server's counters since start.
type StatsSnapshot struct {
	RewrittenReads, RewrittenWrites, GuardedWrites, ParseFailures, Shadowed, Retries, Refused uint64
	// Coalesced are the autocommit increments sent in Batches of two or
	// more (Config.Coalesce).
	Coalesced, Batches uint64
	// ConsolidatedReads are the reads answered by a query shared with
	// others (Config.Consolidate).
	ConsolidatedReads uint64
	// LockedTables are the ruled tables whose increments inside
	// transactions lock the record, since transactions read their counters
	// after incrementing them.
	LockedTables []string
}

// Stats returns the current counters.
func (s *Server) Stats() StatsSnapshot {
	st := &s.env.Stats
	return StatsSnapshot{
		RewrittenReads:    st.RewrittenReads.Load(),
		RewrittenWrites:   st.RewrittenWrites.Load(),
		GuardedWrites:     st.GuardedWrites.Load(),
		ParseFailures:     st.ParseFailures.Load(),
		Shadowed:          st.Shadowed.Load(),
		Retries:           st.Retries.Load(),
		Refused:           st.Refused.Load(),
		Coalesced:         st.Coalesced.Load(),
		Batches:           st.Batches.Load(),
		ConsolidatedReads: st.ConsolidatedReads.Load(),
		LockedTables:      s.env.LockedTables(),
	}
}

// HandshakesWaiting is how many connections in the handshake hold no
// handshake slot: greeted by the proxy and not yet answered, waiting for a
// slot, or parked.
func (s *Server) HandshakesWaiting() int {
	return s.slots.waiting()
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
	s.cfg.Metrics.accepted()
	if tc, ok := sess.rawClient.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if !s.slots.enter(sess) {
		s.cfg.Metrics.handshake(handshakeRefused)
		s.log.Warn("too many connections waiting for the handshake; refusing", "client", sess.rawClient.RemoteAddr().String(), "limit", s.cfg.MaxHandshakeQueue)
		_ = sess.rawClient.SetWriteDeadline(time.Now().Add(time.Second))
		_ = sendError(sess.client, 0, errTooManyConns("too many connections waiting for the handshake"))
		_ = sess.rawClient.Close()
		return
	}
	// The handshake takes its slot itself (see session.handshake): a
	// client greeted by the proxy takes one only once it has answered.
	defer s.slots.leave(sess)
	sess.serve(s.ctx, func(time.Time) bool { return true }, func() { s.slots.leave(sess) })
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

// handshakeSlots bounds the backend connections of sessions in the
// handshake (Config.MaxUnauthenticated) without letting clients that send
// nothing hold them:
//
//   - A session takes a slot before it dials its backend, and keeps it until
//     its handshake ends (leave).
//   - While a holder waits for its client (the client's answer to the
//     greeting, or its TLS handshake), it is idle; an idle holder that has
//     waited parkAfter is parked when another session needs a slot: its
//     backend connection is closed and its slot goes to that session. The
//     parked session keeps its client, and takes a slot again (and dials a
//     new backend connection) if the client ever answers.
//   - Sessions waiting for a slot are served in arrival order as slots are
//     given back; a waiter also checks for idle holders to park whenever the
//     oldest reaches parkAfter.
//
// Sessions in the handshake that hold no slot are bounded by maxWaiting
// (Config.MaxHandshakeQueue). Lock order: handshakeSlots.mu, then
// session.mu.
type handshakeSlots struct {
	parkAfter  time.Duration
	maxWaiting int

	mu      sync.Mutex
	free    int
	held    map[*session]bool // holders; true while idle (waiting for the client)
	idle    []idleHolder      // idle holders, oldest first
	waiters []*slotWaiter     // sessions waiting for a slot, in arrival order
	unheld  int               // sessions in the handshake holding no slot
	entered map[*session]bool // sessions between enter and leave
}

type idleHolder struct {
	s     *session
	since time.Time
}

type slotWaiter struct {
	s       *session
	granted chan struct{} // closed when a slot is given to s
}

func newHandshakeSlots(n, maxWaiting int, parkAfter time.Duration) *handshakeSlots {
	return &handshakeSlots{parkAfter: parkAfter, maxWaiting: maxWaiting, free: n,
		held: make(map[*session]bool), entered: make(map[*session]bool)}
}

// enter registers a new session in the handshake, holding no slot; false
// when maxWaiting sessions already hold none.
func (h *handshakeSlots) enter(s *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unheld >= h.maxWaiting {
		return false
	}
	h.unheld++
	h.entered[s] = true
	return true
}

// leave ends s's handshake: its slot, if it holds one, goes to the first
// waiter or back to the free ones. Safe to call more than once.
func (h *handshakeSlots) leave(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.entered[s] {
		return
	}
	delete(h.entered, s)
	h.removeIdle(s)
	if _, ok := h.held[s]; ok {
		delete(h.held, s)
		h.giveBack()
	} else {
		h.unheld--
	}
}

// waiting is the number of sessions in the handshake holding no slot.
func (h *handshakeSlots) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unheld
}

// giveBack passes a slot that was given back to the first waiter, or frees
// it. Called with mu held.
func (h *handshakeSlots) giveBack() {
	if len(h.waiters) > 0 {
		w := h.waiters[0]
		h.waiters = h.waiters[1:]
		h.grant(w.s)
		close(w.granted)
		return
	}
	h.free++
}

// grant records s as a holder. Called with mu held.
func (h *handshakeSlots) grant(s *session) {
	h.held[s] = false
	h.unheld--
}

// tryTake gives s a slot if one is free and nobody waits for one.
func (h *handshakeSlots) tryTake(s *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.free == 0 || len(h.waiters) > 0 {
		return false
	}
	h.free--
	h.grant(s)
	return true
}

// take gives s a slot, waiting until deadline at most (or until s is
// closed); it parks idle holders that have waited parkAfter for their
// clients to get one. It reports whether s got a slot.
func (h *handshakeSlots) take(s *session, deadline time.Time) bool {
	h.mu.Lock()
	if h.free > 0 && len(h.waiters) == 0 {
		h.free--
		h.grant(s)
		h.mu.Unlock()
		return true
	}
	w := &slotWaiter{s: s, granted: make(chan struct{})}
	h.waiters = append(h.waiters, w)
	h.mu.Unlock()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		next, ok := h.parkFor(w)
		if ok {
			return true
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return h.giveUp(w)
		}
		timer.Reset(min(wait, next))
		select {
		case <-w.granted:
			return true
		case <-s.closed:
			return h.giveUp(w)
		case <-timer.C:
		}
	}
}

// parkFor parks the oldest idle holder if it has waited parkAfter, giving
// its slot to w. Otherwise it reports how long until it should look again.
func (h *handshakeSlots) parkFor(w *slotWaiter) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-w.granted:
		return 0, true
	default:
	}
	if len(h.idle) == 0 {
		return h.parkAfter, false
	}
	oldest := h.idle[0]
	if age := time.Since(oldest.since); age < h.parkAfter {
		return h.parkAfter - age, false
	}
	h.idle = h.idle[1:]
	delete(h.held, oldest.s)
	h.unheld++
	oldest.s.park()
	for i, x := range h.waiters {
		if x == w {
			h.waiters = append(h.waiters[:i], h.waiters[i+1:]...)
			break
		}
	}
	h.grant(w.s)
	close(w.granted)
	return 0, true
}

// giveUp withdraws w; it reports true if a slot was granted meanwhile.
func (h *handshakeSlots) giveUp(w *slotWaiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-w.granted:
		return true
	default:
	}
	for i, x := range h.waiters {
		if x == w {
			h.waiters = append(h.waiters[:i], h.waiters[i+1:]...)
			break
		}
	}
	return false
}

// clientPaced marks s, which holds a slot, idle: it waits for its client.
func (h *handshakeSlots) clientPaced(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if idle, ok := h.held[s]; ok && !idle {
		h.held[s] = true
		h.idle = append(h.idle, idleHolder{s: s, since: time.Now()})
	}
}

// clientAnswered marks s busy again and reports whether it still holds a
// slot (false when it was parked meanwhile, or never held one).
func (h *handshakeSlots) clientAnswered(s *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeIdle(s)
	if _, ok := h.held[s]; ok {
		h.held[s] = false
		return true
	}
	return false
}

// removeIdle drops s from the idle holders. Called with mu held.
func (h *handshakeSlots) removeIdle(s *session) {
	for i, x := range h.idle {
		if x.s == s {
			h.idle = append(h.idle[:i], h.idle[i+1:]...)
			return
		}
	}
}
