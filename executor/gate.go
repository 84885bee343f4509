package executor

import (
	"sync/atomic"
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
// A gated increment or counter read waits only for row or table locks, and
// those are held by transactions, LOCK TABLES sessions or statements that
// hold a turn or are not gated, none of which waits for a turn: no deadlock
// through the gate. (Another statement of the same multi-statement command
// could wait for a lock of a session waiting for a turn, a user lock say;
// the overflow below ends that.) And it does not stall: when no turn has been given back for the gate's wait (every
// holder stuck, say in a long lock wait or sending a big result to a slow
// client), waiting statements run without a turn (an overflow). A long
// queue that moves is waited out. Safe for concurrent use; a nil *Gate lets
// everything through.
type Gate struct {
	turns chan struct{}
	wait  time.Duration
	// left is when a turn was last given back (or the gate made), in
	// nanoseconds since start.
	left  atomic.Int64
	start time.Time
}

// NewGate returns a gate of n turns whose waiters overflow after wait
// without a turn given back; nil when n is not positive (no limit).
func NewGate(n int, wait time.Duration) *Gate {
	if n <= 0 {
		return nil
	}
	return &Gate{turns: make(chan struct{}, n), wait: wait, start: time.Now()}
}

// enter waits for a turn. It reports whether it took one (then the caller
// calls leave once done), whether it waited, and whether it stopped waiting
// because no turn was given back for the gate's wait.
func (g *Gate) enter() (entered, waited, overflowed bool) {
	if g == nil {
		return false, false, false
	}
	select {
	case g.turns <- struct{}{}:
		return true, false, false
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	for {
		select {
		case g.turns <- struct{}{}:
			return true, true, false
		case <-t.C:
			stalled := time.Since(g.start) - time.Duration(g.left.Load())
			if stalled >= g.wait {
				return false, true, true
			}
			t.Reset(g.wait - stalled)
		}
	}
}

// leave gives back a turn enter took.
func (g *Gate) leave() {
	g.left.Store(int64(time.Since(g.start)))
	<-g.turns
}

// enterGate waits for a turn at the Env's Gate when the command runs plans
// the gate applies to: a slotted increment or a counter read, in a session
// outside a transaction and LOCK TABLES. It reports whether the command
// holds a turn, to give back with s.env.Gate.leave once it ran.
func (s *Session) enterGate(plans ...rewrite.Plan) bool {
	if s.env.Gate == nil || !s.autocommitted() || s.tablesLocked() {
		return false
	}
	for _, p := range plans {
		if k := p.Kind(); !p.Shadow && (k == rewrite.KindIncrement || k == rewrite.KindRead) {
			entered, waited, overflowed := s.env.Gate.enter()
			if waited {
				s.metrics().Queued(overflowed)
			}
			return entered
		}
	}
	return false
}
