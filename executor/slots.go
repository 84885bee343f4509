package executor

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/slotproxy/slotproxy/rewrite"
)

// Slots in use. Increments of one record in concurrent transactions that
// pick the same slot wait for each other on that slot row until the first
// commits: with 32 transactions on 100 slots, about one in four would. So
// the process keeps, per ruled table, how many of its open transactions
// (and autocommit increments in flight) hold each slot, and an increment
// picks a slot none holds, starting at a random one; when every slot is
// held it takes the random one. Other proxies' transactions are not seen:
// they collide as often as random slots do, unless each proxy has a
// partition of its own (SlotPartition): proxies in front of different nodes
// of a multi-primary cluster, whose collisions fail certification at COMMIT.

// SlotPartition is the part of every rule's slots this proxy picks from:
// slot s is this proxy's when s % Count == Index. Proxies given different
// indexes of one Count never pick the same slot of a rule with at least
// Count slots; a rule with fewer slots is picked from whole. The zero value
// (or Count 1) is every slot.
type SlotPartition struct {
	Count, Index int
}

// Valid reports whether p names a partition: 0 <= Index < Count, or the
// zero value.
func (p SlotPartition) Valid() bool {
	return p == SlotPartition{} || p.Count >= 1 && p.Index >= 0 && p.Index < p.Count
}

// of returns the slots of a rule of n slots that p gives this proxy: the
// first and the step between them, and how many there are.
func (p SlotPartition) of(n int) (first, step, count int) {
	if p.Count <= 1 || n < p.Count {
		return 0, 1, n
	}
	return p.Index, p.Count, (n - p.Index + p.Count - 1) / p.Count
}

// splits reports whether p gives a rule of n slots only a part of them.
func (p SlotPartition) splits(n int) bool { return p.Count > 1 && n >= p.Count }

// has reports whether slot is in p's part (of a rule it splits).
func (p SlotPartition) has(slot int) bool { return slot%p.Count == p.Index }

// slotUse counts the holders of each slot of each ruled table, by rule
// name. Safe for concurrent use.
type slotUse struct {
	mu  sync.Mutex
	use map[string][]int32
	// part is the SlotPartition picks come from.
	part atomic.Pointer[SlotPartition]
}

// pick returns a slot of t in the proxy's partition that no one holds, if
// any, and holds it.
func (u *slotUse) pick(t *rewrite.Table) int {
	n := t.Slots
	var part SlotPartition
	if p := u.part.Load(); p != nil {
		part = *p
	}
	first, step, m := part.of(n)
	start := rand.IntN(m)
	name := ruleName(t)
	u.mu.Lock()
	defer u.mu.Unlock()
	counts := u.use[name]
	if len(counts) != n {
		// First use, or the rule's slots changed with a reload: holders
		// of the old numbering release into nothing (see release).
		counts = make([]int32, n)
		if u.use == nil {
			u.use = map[string][]int32{}
		}
		u.use[name] = counts
	}
	slot := first + start*step
	for i := range m {
		if c := first + (start+i)%m*step; counts[c] == 0 {
			slot = c
			break
		}
	}
	counts[slot]++
	return slot
}

// release gives back a slot pick returned.
func (u *slotUse) release(name string, slot int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if counts := u.use[name]; slot < len(counts) && counts[slot] > 0 {
		counts[slot]--
	}
}

// heldSlot is a slot a session holds.
type heldSlot struct {
	rule string
	slot int
}

// slotFor picks the slot of an increment of t and holds it until the
// session's transaction ends (rewrite.Session.SlotFor). A transaction's
// increments of t all go to the slot its first one picked: one slot row
// per record, one row lock, so two transactions never each hold a slot row
// of a record that the other then waits for (a deadlock the server would
// not raise for the same statements on the base row, where both queue on
// one lock).
func (s *Session) slotFor(t *rewrite.Table) int {
	if t.Slots < 1 {
		return 0
	}
	name := ruleName(t)
	for _, h := range s.txn.held {
		if h.rule == name && h.slot < t.Slots {
			return h.slot
		}
	}
	slot := s.env.slots.pick(t)
	s.txn.held = append(s.txn.held, heldSlot{name, slot})
	return slot
}

// releaseSlots gives back the slots the session holds.
func (s *Session) releaseSlots() {
	for _, h := range s.txn.held {
		s.env.slots.release(h.rule, h.slot)
	}
	s.txn.held = s.txn.held[:0]
}

// Close releases what the session holds in the Env; call it once the
// session has ended.
func (s *Session) Close() { s.releaseSlots() }

// endTransaction resets what the session knew of its transaction, which
// has ended (committed, rolled back, or never begun): the one place that
// does (see txnState).
func (s *Session) endTransaction() {
	if len(s.txn.held) > 0 {
		s.releaseSlots()
	}
	if s.txn.begin != nil || s.txn.own != nil || s.txn.ownGuards != nil || s.txn.replay != nil || s.txn.ownRows != nil || s.txn.isolation != "" {
		s.txn = txnState{held: s.txn.held[:0]}
	}
}
