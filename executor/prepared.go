package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// stmtInfo is a prepared statement whose executions need the proxy.
type stmtInfo struct {
	plan     rewrite.Plan
	params   int
	types    []byte // parameter types last bound
	longData []bool // parameters sent as long data since the last execute
	// longVals keeps a copy of that long data, up to maxKeptLongData bytes
	// per parameter (nil beyond), for the parameters the proxy may need: a
	// key to check or lock, a delta, or every parameter when the statement
	// may run as written instead of rewritten.
	longVals [][]byte
	// origCols are a rewritten read's own column definitions (nil: unknown).
	origCols [][]byte
	// rw is the rewriter the statement was planned with: the catalog's
	// epoch. A write planned with another catalog than the current one is
	// planned again at its next execution (executeReplanned).
	rw *rewrite.Rewriter
	// slotStmt, when slotted, is the proxy's own preparation of an
	// increment's upsert with the slot as parameter slotParam (see
	// rewrite.Rewriter.SlotParam): each execution picks a slot of its own
	// instead of the one the client's preparation was planned with.
	slotStmt  uint32
	slotParam int
	slotted   bool
	// relayed: the client's statement was prepared on the backend as it
	// is (planned as written): its executions are relayed as they are
	// while the catalog is the one it was prepared with.
	relayed bool
}

// maxKeptLongData bounds the long data the proxy copies per parameter. Keys
// and deltas are numbers; a longer value is never one.
const maxKeptLongData = 4 << 10

// keepLongData copies a COM_STMT_SEND_LONG_DATA chunk for parameter i.
func (st *stmtInfo) keepLongData(i int, chunk []byte) {
	if st.longData == nil {
		st.longData = make([]bool, st.params)
		st.longVals = make([][]byte, st.params)
	}
	if !st.longData[i] {
		st.longData[i] = true
		st.longVals[i] = []byte{}
	}
	if v := st.longVals[i]; v != nil {
		if len(v)+len(chunk) > maxKeptLongData {
			st.longVals[i] = nil
		} else {
			st.longVals[i] = append(v, chunk...)
		}
	}
}

// resetLongData forgets the long data (after an execute or COM_STMT_RESET).
func (st *stmtInfo) resetLongData() { st.longData, st.longVals = nil, nil }

func (s *Session) handlePrepare(rw *rewrite.Rewriter, payload []byte) error {
	s.noteSessionSets(payload[1:]) // its executions may set them
	plans, err := s.planAll(rw, payload[1:])
	if ue := (*rewrite.UnparsedError)(nil); errors.As(err, &ue) {
		return s.checkUnparsed(payload[1:], ue, true)
	}
	if err != nil {
		return err
	}
	if len(plans) != 1 {
		return s.prepareRelayed(rw, payload, nil)
	}
	p := plans[0]
	switch p.Op.(type) {
	case *rewrite.UpsertIncrement, *rewrite.UpsertRows:
		// Prepared, it runs as its fallback (see execUpsertIncrement).
		p = upsertFallback(p.Op)
	}
	sql := p.SQL()
	if inc, ok := p.Op.(*rewrite.Increment); ok && inc.Sorted != "" {
		// Its executions may run in a transaction: each slot row tested
		// before any is inserted (see rewrite.Increment.Sorted).
		sql = inc.Sorted
	}
	_, refused := p.Op.(*rewrite.Refused)
	switch {
	case refused && !p.Shadow:
		seq := s.respSeq
		return s.refuse(p.Table, p.Reason, &seq)
	case p.Shadow:
		// Prepared as the client wrote it; executions are counted.
		sql = p.Original
	case p.AsWritten():
		aw, _ := p.Op.(*rewrite.AsWritten)
		return s.prepareRelayed(rw, payload, aw.Reads)
	}
	var orig [][]byte
	switch p.Op.(type) {
	case *rewrite.Read, *rewrite.LockingRead:
		if !p.Shadow {
			if orig, err = s.originalColumns(p); err != nil {
				return err
			}
		}
	}
	// Rewritten statements are prepared by the executor, to learn the
	// statement id their executions will name.
	id, params, errPkt, err := s.preparePatched([]byte(sql), true, newColumnPatch(orig, false))
	if err != nil || errPkt != nil {
		return err
	}
	if s.rw.stmts == nil {
		s.rw.stmts = map[uint32]*stmtInfo{}
	}
	st := &stmtInfo{plan: p, params: params, origCols: orig, rw: rw}
	s.rw.stmts[id] = st
	if _, ok := p.Op.(*rewrite.Increment); ok && !p.Shadow {
		if sql, param, ok := rw.SlotParam(p, s.rewriteSession()); ok {
			sid, n, errPkt, err := s.prepare([]byte(sql), false)
			if err != nil {
				return fmt.Errorf("%w: preparing the slotted statement: %w", ErrAnswered, err)
			}
			if errPkt == nil && n == params+1 {
				st.slotStmt, st.slotParam, st.slotted = sid, param, true
			} else if errPkt == nil {
				s.closeStmt(sid)
			}
		}
	}
	return nil
}

// prepareRelayed relays a COM_STMT_PREPARE the catalog rw plans as written
// (or does not plan) and keeps the statement's text: an execution after a
// reload that gives it a plan (a rule added for the table it reads) runs by
// that plan (see handleExecute).
func (s *Session) prepareRelayed(rw *rewrite.Rewriter, payload []byte, reads []*rewrite.Table) error {
	res, err := s.forward(payload, wire.Prepare, nil)
	if err != nil || res.Failed() || rw == nil {
		return err
	}
	if s.rw.stmts == nil {
		s.rw.stmts = map[uint32]*stmtInfo{}
	}
	s.rw.stmts[res.StmtID] = &stmtInfo{plan: rewrite.Plan{Op: &rewrite.AsWritten{Reads: reads}, Original: string(payload[1:])}, params: res.Params, rw: rw, relayed: true}
	return nil
}

// closeStmt closes a statement the proxy prepared for itself (COM_STMT_CLOSE
// has no response; a failure to send shows on the next command).
func (s *Session) closeStmt(id uint32) {
	_, _ = s.link.Backend.WritePacket(binary.LittleEndian.AppendUint32([]byte{mysql.COM_STMT_CLOSE}, id), 0)
}

func (s *Session) handleExecute(rw *rewrite.Rewriter, payload []byte) error {
	// One statement, also for the read of a relayed statement's own
	// records (snapshotFolds: a transaction of its BEGIN and increments so
	// far makes its snapshot now, and refreshes nothing).
	s.stmtsInCommand = 1
	var st *stmtInfo
	if len(payload) >= 5 && len(s.rw.stmts) > 0 {
		st = s.rw.stmts[binary.LittleEndian.Uint32(payload[1:])]
	}
	if st != nil && st.relayed && (st.rw == rw || rw == nil) {
		// (A read of other columns of records the transaction
		// incremented refreshes them first.)
		if errPkt, err := s.refreshOwnReads(st.plan); err != nil {
			return err
		} else if errPkt != nil {
			seq := s.respSeq
			return s.writeErr(errPkt, &seq)
		}
		st = nil
	}
	if st != nil && st.relayed {
		// The catalog changed since it was prepared: still as written?
		plans, err := s.plan(rw, []byte(st.plan.Original))
		if err == nil && (len(plans) == 0 || len(plans) == 1 && plans[0].AsWritten()) {
			st.rw, st = rw, nil
		}
	}
	if st == nil {
		s.metrics().Statement(PathPassThrough, "")
		_, err := s.forward(payload, wire.Results, nil)
		return err
	}
	p := st.plan
	switch p.Op.(type) {
	case *rewrite.Increment, *rewrite.UpsertIncrement, *rewrite.UpsertRows, *rewrite.Guarded, *rewrite.WriteOthers, *rewrite.Read, *rewrite.LockingRead, *rewrite.AsWritten:
		if st.rw != rw && rw != nil {
			if done, err := s.executeReplanned(rw, st, payload); done || err != nil {
				return err
			}
		}
	}
	if s.enterGate(p) {
		defer s.env.Gate.leave()
	}
	if g, ok, err := s.refreshing(p); err != nil {
		return err
	} else if ok {
		p = g
	}
	if p.Shadow {
		s.countShadow(p)
		_, err := s.forward(payload, wire.Results, nil)
		return err
	}
	switch op := p.Op.(type) {
	case *rewrite.LockingRead:
		seq := s.respSeq
		ep, err := parseExecute(payload, st.params, st.types, st.longData)
		ep.longVals = st.longVals
		st.resetLongData()
		if err != nil {
			return err
		}
		if len(ep.types) == 2*st.params && (len(st.types) == 0 || &ep.types[0] != &st.types[0]) {
			st.types = bytes.Clone(ep.types)
		}
		ex := &execution{payload: payload, params: ep, stmtID: binary.LittleEndian.Uint32(payload[1:])}
		_, err = s.execLockedRead(op, "", ex, &seq, false, newColumnPatch(st.origCols, true))
		return err
	case *rewrite.Read:
		s.env.Stats.RewrittenReads.Add(1)
		s.metrics().Statement(PathRewrittenRead, "")
		if errPkt, err := s.foldOwn(op.Reads, true); err != nil || errPkt != nil {
			if err != nil {
				return err
			}
			seq := s.respSeq
			return s.writeErr(errPkt, &seq)
		}
		_, err := s.forwardPatched(payload, wire.Results, nil, newColumnPatch(st.origCols, true))
		return err
	}
	ep, err := parseExecute(payload, st.params, st.types, st.longData)
	ep.longVals = st.longVals
	st.resetLongData()
	if err != nil {
		return err
	}
	if len(ep.types) == 2*st.params && (len(st.types) == 0 || &ep.types[0] != &st.types[0]) {
		st.types = bytes.Clone(ep.types)
	}
	ex := &execution{payload: payload, params: ep, stmtID: binary.LittleEndian.Uint32(payload[1:])}
	if st.slotted {
		ex.slotStmt, ex.slotParam, ex.slotted = st.slotStmt, st.slotParam, true
	}
	seq := s.respSeq
	_, err = s.runPlan(p, ex, &seq, false)
	return err
}

// executeReplanned plans a prepared statement again with the current catalog
// rw, which replaced the one it was prepared with (a reload: a rule
// removed, set to shadow, given other slots or counters). When the plan is
// the same, the statement goes on as prepared (done false) and is not
// planned again. Otherwise this execution runs the client's statement by
// the new plan, with the client's parameters, on statements the proxy
// prepares itself: as written when the table is no longer ruled, else on
// the base row after its records' slots are folded (exact for any plan;
// the client prepares the statement again to have it slotted).
func (s *Session) executeReplanned(rw *rewrite.Rewriter, st *stmtInfo, payload []byte) (done bool, err error) {
	old := st.plan
	plans, err := s.plan(rw, []byte(old.Original))
	if err != nil && !errors.As(err, new(*rewrite.UnparsedError)) {
		return false, err
	}
	var p rewrite.Plan
	switch {
	case err == nil && plans == nil: // it names no ruled table any more
		p = rewrite.Plan{Op: &rewrite.AsWritten{}, Original: old.Original}
	case err != nil || len(plans) != 1:
		p = rewrite.Plan{Op: &rewrite.Refused{}, Table: old.Table, Original: old.Original,
			Reason: "a prepared statement that can no longer be planned as one statement: prepare it again"}
	default:
		p = plans[0]
	}
	if s.samePlan(st.rw, old, rw, p) {
		st.rw = rw
		return false, nil
	}
	ep, err := parseExecute(payload, st.params, st.types, st.longData)
	ep.longVals = st.longVals
	st.resetLongData()
	if err != nil {
		return true, err
	}
	if len(ep.types) == 2*st.params && (len(st.types) == 0 || &ep.types[0] != &st.types[0]) {
		st.types = bytes.Clone(ep.types)
	}
	ex := &execution{payload: payload, params: ep, stmtID: binary.LittleEndian.Uint32(payload[1:])}
	seq := s.respSeq
	if p.Shadow {
		s.countShadow(p)
		_, err := s.execAsWritten(p, ex, &seq, false)
		return true, err
	}
	if st.origCols == nil && st.relayed {
		switch p.Op.(type) {
		case *rewrite.Read, *rewrite.LockingRead:
			// The columns the client was told of are the statement's own.
			if st.origCols, err = s.originalColumns(p); err != nil {
				return true, err
			}
		}
	}
	switch op := p.Op.(type) {
	case *rewrite.Refused:
		return true, s.refuse(p.Table, p.Reason, &seq)
	case *rewrite.Increment:
		_, err := s.execOnBase(p, op, ex, &seq, false)
		return true, err
	case *rewrite.UpsertIncrement, *rewrite.UpsertRows:
		// Prepared, an upsert runs as its fallback.
		fallback := upsertFallback(op)
		if g, ok := fallback.Op.(*rewrite.Guarded); ok {
			_, err := s.execGuardedWith(fallback, g, nil, ex, &seq, false, func() ([]byte, []byte, error) { return s.statementPacket(g.SQL, ex) }, nil)
			return true, err
		}
		_, err := s.execAsWritten(p, ex, &seq, false)
		return true, err
	case *rewrite.Guarded:
		_, err := s.execGuardedWith(p, op, nil, ex, &seq, false, func() ([]byte, []byte, error) { return s.statementPacket(op.SQL, ex) }, nil)
		return true, err
	case *rewrite.Read:
		// Its counters read as the new catalog has them (a rule added
		// since it was prepared: its slots count now), with the columns
		// the client was told of.
		if errPkt, err := s.foldOwn(op.Reads, true); err != nil || errPkt != nil {
			if err != nil {
				return true, err
			}
			return true, s.writeErr(errPkt, &seq)
		}
		pkt, errPkt, err := s.statementPacket(op.SQL, ex)
		if err != nil || errPkt != nil {
			if err != nil {
				return true, err
			}
			return true, s.writeErr(errPkt, &seq)
		}
		_, err = s.forwardPatched(pkt, wire.Results, nil, newColumnPatch(st.origCols, true))
		return true, err
	case *rewrite.LockingRead:
		pkt, errPkt, err := s.statementPacket(op.SQL, ex)
		if err != nil || errPkt != nil {
			if err != nil {
				return true, err
			}
			return true, s.writeErr(errPkt, &seq)
		}
		ex.payload = pkt
		_, err = s.execLockedRead(op, "", ex, &seq, false, newColumnPatch(st.origCols, true))
		return true, err
	default:
		_, err := s.execAsWritten(p, ex, &seq, false)
		return true, err
	}
}

// samePlan reports whether plan a (by rewriter ra) and plan b (by rb) of
// one statement run the same SQL, but for the slot an increment's plan
// picked.
func (s *Session) samePlan(ra *rewrite.Rewriter, a rewrite.Plan, rb *rewrite.Rewriter, b rewrite.Plan) bool {
	if a.Kind() != b.Kind() || a.Shadow != b.Shadow || ruleName(a.Table) != ruleName(b.Table) {
		return false
	}
	if a.Kind() != rewrite.KindIncrement {
		return a.SQL() == b.SQL()
	}
	sess := s.rewriteSession()
	sa, oka := ra.SlotSentinelSQL(a, sess)
	sb, okb := rb.SlotSentinelSQL(b, sess)
	return oka && okb && sa == sb
}

// upsertFallback is the Fallback of an UpsertIncrement or UpsertRows.
func upsertFallback(op rewrite.Op) rewrite.Plan {
	switch up := op.(type) {
	case *rewrite.UpsertIncrement:
		return up.Fallback
	case *rewrite.UpsertRows:
		return up.Fallback
	}
	return rewrite.Plan{}
}
