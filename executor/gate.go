package executor

import (
	"container/list"
	"sync"
	"time"

	"github.com/slotproxy/slotproxy/rewrite"
)

// Gate bounds how many rewritten statements of sessions that hold nothing
// (autocommit, no transaction, no LOCK TABLES) run at the backend at once.
//
// Directly, clients that update one hot row sleep in the server's lock
// wait; through the proxy the slots take that wait away, and thousands of
// clients busy at once would all run, which makes a server with one thread
// per connection thrash. The gate queues them instead.
//
// It cannot deadlock: a gated statement waits only for row or table locks,
// and those are held by transactions, LOCK TABLES sessions or statements
// that hold a turn or are not gated, none of which waits for a turn. And it
// does not stall: when no turn has been given back for the gate's wait (every
// holder stuck, say in a long lock wait or sending a big result to a slow
// client), waiting statements run without a turn (an overflow). A long
// queue that moves is waited out, in order of arrival. Safe for concurrent
// use; a nil *Gate lets everything through.
type Gate struct {
	wait time.Duration

	mu      sync.Mutex
	free    int       // turns nobody holds
	waiters list.List // of *gateWaiter, first come first served
	left    time.Time // when a turn was last given back (or the gate made)
}

// gateWaiter is a statement waiting for a turn; ready is closed when leave
// hands it one (granted, under the gate's mutex).
type gateWaiter struct {
	ready   chan struct{}
	granted bool
}

// NewGate returns a gate of n turns whose waiters overflow after wait
// without a turn given back; nil when n is not positive (no limit).
func NewGate(n int, wait time.Duration) *Gate {
	if n <= 0 {
		return nil
	}
	return &Gate{free: n, wait: wait, left: time.Now()}
}

// enter waits for a turn, in the order statements came. It returns the
// function that gives the turn back (nil if none was taken), whether it
// waited, and whether it stopped waiting because no turn was given back for
// the gate's wait.
func (g *Gate) enter() (leave func(), waited, overflowed bool) {
	if g == nil {
		return nil, false, false
	}
	g.mu.Lock()
	if g.free > 0 {
		g.free--
		g.mu.Unlock()
		return g.leave, false, false
	}
	w := &gateWaiter{ready: make(chan struct{})}
	e := g.waiters.PushBack(w)
	g.mu.Unlock()
	t := time.NewTimer(g.wait)
	defer t.Stop()
	for {
		select {
		case <-w.ready:
			return g.leave, true, false
		case <-t.C:
		}
		g.mu.Lock()
		if w.granted {
			g.mu.Unlock()
			return g.leave, true, false
		}
		stalled := time.Since(g.left)
		if stalled >= g.wait {
			g.waiters.Remove(e)
			g.mu.Unlock()
			return nil, true, true
		}
		g.mu.Unlock()
		t.Reset(g.wait - stalled)
	}
}

// leave gives a turn back: to the first waiter, if any.
func (g *Gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.left = time.Now()
	if e := g.waiters.Front(); e != nil {
		w := g.waiters.Remove(e).(*gateWaiter)
		w.granted = true
		close(w.ready)
		return
	}
	g.free++
}

// enterGate waits for a turn at the Env's Gate when the command runs plans
// the gate applies to: a slotted increment or a counter read, in a session
// outside a transaction and LOCK TABLES. It returns the function that gives
// the turn back, or nil when the command runs without one.
func (s *Session) enterGate(plans ...rewrite.Plan) func() {
	if s.env.Gate == nil || !s.autocommitted() || s.tablesLocked() {
		return nil
	}
	for _, p := range plans {
		if !p.Shadow && (p.Kind == rewrite.KindIncrement || p.Kind == rewrite.KindRead) {
			leave, waited, overflowed := s.env.Gate.enter()
			if waited {
				s.env.metrics().Queued(overflowed)
			}
			return leave
		}
	}
	return nil
}
