package executor

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// A hand-out — BEGIN, an increment of a record, a read of it, COMMIT —
// waits directly: the second transaction's UPDATE queues on the row lock
// of the first. Through the proxy both increments go to slots under a
// shared lock of the base row, and the first read of its own increment
// folds the record under an exclusive lock: two such transactions each
// wait for the other's shared lock, and the server rolls one back (1213).
// From then on the table's increments inside transactions take the base
// row's exclusive lock (noteReadAfterIncrement), but the transactions
// already under way have failed where directly they would have waited.
//
// The proxy runs such a transaction again instead: when it consisted only
// of its BEGIN and increments, one command each, so far, the client has
// seen nothing but their OK packets. The proxy opens it again with the
// same BEGIN and runs each increment on the base row (which now waits,
// as directly); when each answers with the same affected rows and
// warnings the client already has, the transaction is the one the client
// believes it ran, and its read goes on. Otherwise the client gets the
// deadlock, as before.

// replayed is an increment of the open transaction, as the client saw it.
type replayed struct {
	plan     rewrite.Plan
	inc      *rewrite.Increment // plan's
	ex       *execution         // nil for a text statement
	affected uint64
	warnings uint16
}

// maxReplayed bounds the increments one transaction keeps for a replay.
const maxReplayed = 16

// recordIncrement keeps a slotted increment the client got ok for, when
// it is the only statement of its command and every command of the
// transaction since its BEGIN was one (see replayable).
func (s *Session) recordIncrement(p rewrite.Plan, inc *rewrite.Increment, ex *execution, ok *wire.OK) {
	if !s.inTransaction() || s.stmtsInCommand != 1 || len(s.txn.replay) >= maxReplayed || !s.replayable() {
		return
	}
	if ex != nil {
		if ex.params.hasLong() {
			return
		}
		ex = ex.clone()
	}
	s.txn.replay = append(s.txn.replay, replayed{plan: p, inc: inc, ex: ex, affected: ok.Affected, warnings: ok.Warnings})
}

// replayable reports whether the open transaction (or the one the server
// just rolled back) was its BEGIN and the recorded increments only, the
// command running now being the next that runs a statement.
func (s *Session) replayable() bool {
	return s.txn.begin != nil && s.stmtsInCommand == 1 && s.steps-s.txn.beginStep == uint64(len(s.txn.replay))+1
}

// stepCommand reports whether a command may run a statement, or change
// what the transaction's statements mean: every command but those that
// prepare, close or reset prepared statements, send their long data, or
// ping.
func stepCommand(cmd byte) bool {
	switch cmd {
	case mysql.COM_STMT_PREPARE, mysql.COM_STMT_CLOSE, mysql.COM_STMT_RESET, mysql.COM_STMT_SEND_LONG_DATA, mysql.COM_PING:
		return false
	}
	return true
}

// replayTxn runs the transaction the server rolled back in a deadlock
// again (see above): its BEGIN, then each increment on the base row. It
// reports whether the transaction is open again exactly as the client
// saw it; when not, the session is as the deadlock left it (no
// transaction) and the client is to get the deadlock.
func (s *Session) replayTxn() (bool, error) {
	if !s.replayable() {
		return false, nil
	}
	steps := s.txn.replay
	s.txn.replay = nil
	s.txn.own, s.txn.ownGuards = nil, nil
	s.releaseSlots()
	for attempt := 1; ; attempt++ {
		same, deadlocked, err := s.replayOnce(steps)
		if err != nil || same {
			if same {
				s.txn.replay = steps
				s.env.Stats.Retries.Add(1)
				s.metrics().Retry()
			}
			return same, err
		}
		if !deadlocked || attempt >= maxReplays {
			return false, nil
		}
	}
}

// maxReplays bounds how often replayTxn runs a transaction again when the
// replay itself is rolled back in a deadlock.
const maxReplays = 5

// replayOnce opens the transaction again and runs steps on the base rows.
// same reports whether each answered as the client saw it; otherwise the
// transaction is rolled back, and deadlocked says whether a deadlock did
// it.
func (s *Session) replayOnce(steps []replayed) (same, deadlocked bool, err error) {
	// The deadlock is the client's only if the replay differs: then the
	// caller reports it.
	untold := s.untold
	s.untold = nil
	defer func() {
		if !same && err == nil {
			s.untold = untold
		}
	}()
	r, err := s.query(string(s.txn.begin))
	if err != nil || r.Failed() {
		return false, false, err
	}
	for _, st := range steps {
		p := st.plan
		op := &rewrite.Guarded{SQL: p.Original, Guards: []*rewrite.Guard{st.inc.Guard}, SingleTable: true}
		res, errPkt, _, err := s.guardedOnce(p, op, st.ex, false, guardMode{}, func() ([]byte, []byte, error) { return s.statementPacket(p.Original, st.ex) })
		if err != nil {
			return false, false, err
		}
		if isDeadlock(errPkt) {
			return false, true, nil // the server rolled the transaction back
		}
		ok := errPkt == nil && res != nil && len(res.Packets) > 0
		if ok {
			o, perr := wire.ParseOK(res.Packets[len(res.Packets)-1])
			ok = perr == nil && o.Affected == st.affected && o.Warnings == st.warnings
		}
		if !ok {
			if _, err := s.query("ROLLBACK"); err != nil {
				return false, false, err
			}
			return false, false, nil
		}
	}
	return true, false, nil
}

// hasLong reports whether a parameter was sent as long data.
func (ep execParams) hasLong() bool {
	for _, l := range ep.long {
		if l {
			return true
		}
	}
	return false
}

// clone returns a copy of ex that shares no memory with the command it
// was read from.
func (ex *execution) clone() *execution {
	c := *ex
	c.payload = append([]byte(nil), ex.payload...)
	p := ex.params
	c.params = execParams{n: p.n, null: append([]bool(nil), p.null...), types: append([]byte(nil), p.types...), long: append([]bool(nil), p.long...)}
	for _, v := range p.values {
		c.params.values = append(c.params.values, append([]byte(nil), v...))
	}
	return &c
}

// isDeadlock reports whether an ERR packet is the server's deadlock.
func isDeadlock(errPkt []byte) bool {
	return errPkt != nil && wire.ErrCode(errPkt) == mysql.ER_LOCK_DEADLOCK
}
