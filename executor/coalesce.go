package executor

import (
	"math/big"
	"strconv"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// Coalescing (group commit for counters). Concurrent autocommit increments
// of one record, alike in everything but their deltas (the same statement
// shape, in sessions whose state gives it the same meaning), are sent as
// one slotted increment carrying the sum. As in InnoDB's group commit, no
// increment waits when there is nothing to join: the first one of a record
// runs at once, alone, and those that arrive while it runs queue; when it
// is done, the first of the queue sends the queue's increments as one, and
// those that arrive meanwhile form the next batch.
//
// Each client gets the OK packet it would have got alone, once the batch's
// statement committed: a batch commits or fails as a whole, so no
// acknowledged increment is lost and none counts twice. When the batch
// fails (a delta sum beyond the slot's share of the range, a missing
// record, a privilege or any other error), each of its increments runs
// alone, and gets the server's own answer.

// coalescer keeps the lanes of records whose increments are running.
// Safe for concurrent use.
type coalescer struct {
	lanes lanes[*member]
	// noWarnings are SHOW WARNINGS responses with no warning, by client
	// character set and capabilities: what a batch's members get for it
	// after a batch without warnings (and consolidated reads' followers).
	noWarnings sync.Map
}

// member is one session's increment waiting in a lane.
type member struct {
	delta   *big.Int // signed
	changed bool     // its delta is not 0: it changes the row
	done    chan turn
}

// turn is what a member's wait in a lane ends with: it leads a batch
// (lead, itself first), or the batch it was in succeeded (ok), or failed
// with an unknown outcome (lost), or else it runs alone.
type turn struct {
	lead []*member
	ok   *batchResult
	lost bool
}

// batchResult is a successful batch's outcome, the same for every member.
type batchResult struct {
	ok       wire.OK // the batch's OK packet
	matched  uint64  // records it matched (1)
	warnings *wire.Buffer
}

// enter queues m in the lane of key, or opens the lane when no increment
// of it runs (first: m runs at once). A queued member waits for its turn.
func (c *coalescer) enter(key string, m *member) (first bool, t turn) {
	if c.lanes.enter(key, m) {
		return true, turn{}
	}
	return false, <-m.done
}

// leave ends the running increment or batch of key's lane: the members
// queued meanwhile become the next batch, led by the first of them, or the
// lane closes.
func (c *coalescer) leave(key string) {
	if batch := c.lanes.leave(key); len(batch) > 0 {
		batch[0].done <- turn{lead: batch}
	}
}

// coalesceKey returns the lane key of an increment the session may
// coalesce, or "": a text statement alone in its command, in autocommit
// with no transaction or table locks, of one record by a literal delta
// (rewrite.Increment.CoalesceKey). The key is the slotted statement with
// its slot and delta masked, and the session state that gives it its
// meaning: the default database (it may name its table unqualified), the
// client character set and capabilities, and the sql_mode flags that
// decide range errors; and the sign of its delta.
func (s *Session) coalesceKey(inc *rewrite.Increment, up *rewrite.UpsertIncrement, ex *execution, more bool) string {
	if !s.env.Coalesce || up != nil || ex != nil || more || s.stmtsInCommand > 1 || !s.autocommitted() || s.tablesLocked() {
		return ""
	}
	k := inc.CoalesceKey()
	if k == "" {
		return ""
	}
	delta, ok := signedDelta(inc)
	if !ok {
		return ""
	}
	// Increments and decrements have lanes of their own: a batch whose
	// deltas have one sign passes its range check exactly when every
	// order of its increments does, each alone (the total moves one way);
	// +100 and -100 near a bound would pass as a sum of 0, where directly
	// one of them fails whichever runs first.
	sign := "+"
	if delta.Sign() < 0 {
		sign = "-"
	}
	flags := []byte("----")
	for i, on := range []bool{s.rw.strict, s.rw.noUnsignedSub, s.rw.ansiQuotes, s.rw.noBackslash} {
		if on {
			flags[i] = '+'
		}
	}
	return sign + s.rw.db + "\x00" + s.rw.charset + "\x00" + strconv.FormatUint(uint64(s.link.Caps), 10) + "\x00" + string(flags) + "\x00" + k
}

// signedDelta returns inc's one delta, negated for a decrement.
func signedDelta(inc *rewrite.Increment) (*big.Int, bool) {
	if len(inc.Deltas) != 1 {
		return nil, false
	}
	d, ok := new(big.Int).SetString(inc.Deltas[0].Literal, 10)
	if !ok {
		return nil, false
	}
	if inc.Deltas[0].Minus {
		d.Neg(d)
	}
	return d, true
}

// coalesced runs inc, an increment coalesceKey gave key, through its
// record's lane. done reports that the client has its answer; otherwise
// the increment runs alone (the caller's slotted path), and the lane is
// handed on when the caller returns (the returned leave, never nil).
func (s *Session) coalesced(p rewrite.Plan, inc *rewrite.Increment, key string, changed bool, seq *byte) (done, failed bool, leave func(), err error) {
	nop := func() {}
	delta, ok := signedDelta(inc)
	if !ok {
		return false, false, nop, nil
	}
	m := &member{delta: delta, changed: changed, done: make(chan turn, 1)}
	first, t := s.env.coalesce.enter(key, m)
	leave = func() { s.env.coalesce.leave(key) }
	switch {
	case first:
		return false, false, leave, nil // alone, at once
	case t.lead != nil:
		if len(t.lead) == 1 {
			return false, false, leave, nil // a batch of one: alone
		}
		done, failed, err := s.runBatch(p, inc, t.lead, seq)
		return done, failed, leave, err
	case t.ok != nil:
		s.env.Stats.RewrittenWrites.Add(1)
		s.metrics().Statement(PathRewrittenWrite, ruleName(p.Table))
		return true, false, nop, s.answerBatched(t.ok, changed, seq)
	case t.lost:
		return true, true, nop, s.writeErr(wire.Errorf(mysql.ER_UNKNOWN_ERROR, "HY000",
			"the outcome of this increment is unknown: the backend connection that sent it with others of record %s broke", ruleName(p.Table)).Packet(), seq)
	}
	return false, false, nop, nil // the batch failed: alone
}

// runBatch sends the increments of batch (this session's first) as one
// increment by their sum, on this session's connection, and answers every
// member. done is false when the batch did not succeed: then every member
// runs alone (this one too, in the caller).
func (s *Session) runBatch(p rewrite.Plan, inc *rewrite.Increment, batch []*member, seq *byte) (done, failed bool, err error) {
	sum := new(big.Int)
	for _, m := range batch {
		sum.Add(sum, m.delta)
	}
	alone := func() {
		for _, m := range batch[1:] {
			m.done <- turn{}
		}
	}
	sql, ok := inc.WithDelta(sum.String())
	if !ok {
		alone()
		return false, false, nil
	}
	s.metrics().Coalesced(len(batch))
	s.env.Stats.Batches.Add(1)
	s.env.Stats.Coalesced.Add(uint64(len(batch)))
	var r *wire.Response
	for attempt := 1; ; attempt++ {
		if err := s.send(queryPacket(sql)); err != nil {
			s.lost(batch)
			return false, false, err
		}
		var err error
		if r, err = s.read(wire.Results); err != nil {
			s.lost(batch)
			return false, false, err
		}
		if r.Failed() && s.retry(r.ErrCode, attempt) {
			continue
		}
		break
	}
	if r.Failed() || r.OK == nil {
		// Beyond the slot's share, say: each runs alone, and gets the
		// server's own answer.
		alone()
		return false, false, nil
	}
	matched := uint64(0)
	if n, ok := infoRecords(r.OK.Info); ok {
		matched = n
	} else if r.OK.Affected > 0 {
		matched = 1
	}
	if matched != 1 {
		// No such record (nothing was written): each runs alone, as
		// written.
		alone()
		return false, false, nil
	}
	res := &batchResult{ok: *r.OK, matched: matched}
	// What SHOW WARNINGS shows after it, which each client would have got
	// alone (its own backend connection ran nothing): the batch's
	// warnings, or none, as the server answers (kept once per character
	// set and capabilities for batches without warnings).
	cacheKey := s.rw.charset + "\x00" + strconv.FormatUint(uint64(s.link.Caps), 10)
	if cached, ok := s.env.coalesce.noWarnings.Load(cacheKey); ok && r.OK.Warnings == 0 {
		res.warnings = cached.(*wire.Buffer)
	} else {
		if err := s.saveWarnings(); err != nil {
			s.lost(batch)
			return false, false, err
		}
		res.warnings = s.warnings
		if r.OK.Warnings == 0 && res.warnings != nil {
			s.env.coalesce.noWarnings.Store(cacheKey, res.warnings)
		}
	}
	for _, m := range batch[1:] {
		m.done <- turn{ok: res}
	}
	s.env.Stats.RewrittenWrites.Add(1)
	s.metrics().Statement(PathRewrittenWrite, ruleName(p.Table))
	return true, false, s.answerBatched(res, batch[0].changed, seq)
}

// lost answers the other members of a batch whose outcome is unknown (the
// connection broke while it ran): none of them may run again.
func (s *Session) lost(batch []*member) {
	for _, m := range batch[1:] {
		m.done <- turn{lost: true}
	}
}

// answerBatched writes the OK packet a member of a successful batch would
// have got alone: one row matched, changed when its delta is not 0.
func (s *Session) answerBatched(res *batchResult, changed bool, seq *byte) error {
	ok := res.ok
	rows := uint64(0)
	if changed {
		rows = res.matched
	}
	s.incPatch(res.matched, rows)(&ok)
	s.warnings = res.warnings
	s.status = ok.Status
	return s.writeOK(ok, seq, false)
}
