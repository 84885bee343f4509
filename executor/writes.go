package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// foldBatch bounds how many keys one fold statement names.
const foldBatch = rewrite.FoldBatch

// execution is a client's COM_STMT_EXECUTE of a rewritten statement.
type execution struct {
	payload []byte
	params  execParams
	stmtID  uint32
	// slotStmt, when slotted, runs the increment with a slot of the
	// execution's own (stmtInfo.slotStmt).
	slotStmt  uint32
	slotParam int
	slotted   bool
}

// slottedPacket is the execution of the increment's upsert with a slot
// picked for this execution, or the client's own execution (the slot its
// preparation was planned with) when there is no such statement or the
// parameters cannot be copied.
func (ex *execution) slottedPacket(s *Session, t *rewrite.Table) []byte {
	if !ex.slotted || t.Slots < 1 {
		return ex.payload
	}
	pkt, err := ex.params.executePacketWith(ex.slotStmt, ex.slotParam, uint64(s.slotFor(t)))
	if err != nil {
		return ex.payload
	}
	return pkt
}

// incPatch returns the patch that turns an upsert's OK into the OK the
// UPDATE would have sent: matched and changed rows, no insert id, the
// UPDATE's info string.
func (s *Session) incPatch(matched, changed uint64) func(*wire.OK) {
	return func(ok *wire.OK) {
		ok.Affected = changed
		if s.link.Caps&mysql.CLIENT_FOUND_ROWS != 0 {
			ok.Affected = matched
		}
		ok.InsertID = 0
		// The proxy's statement may scan without an index; the UPDATE by
		// primary key would not have.
		ok.Status &^= mysql.SERVER_STATUS_NO_INDEX_USED | mysql.SERVER_STATUS_NO_GOOD_INDEX_USED
		ok.Info = wire.UpdateInfo(matched, changed, ok.Warnings)
	}
}

// execPlan runs one plan and writes the client's response, numbering
// packets from *seq. ex, when set, is the client's COM_STMT_EXECUTE of a
// prepared plan. It reports whether the client got an ERR.
func (s *Session) execPlan(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	if s.planDepth == 0 {
		s.openAtStart = s.inTransaction()
	}
	s.planDepth++
	defer func() { s.planDepth-- }()
	if saved := s.warnings; saved != nil {
		if _, ok := p.Op.(*rewrite.AsWritten); ok && ex == nil && isShowWarnings([]byte(p.Original)) {
			// SHOW WARNINGS after a statement of the same query whose
			// warnings the proxy's own statements cleared on the server.
			status := func(uint16) uint16 {
				if more {
					return s.status | mysql.SERVER_MORE_RESULTS_EXISTS
				}
				return s.status &^ mysql.SERVER_MORE_RESULTS_EXISTS
			}
			return false, s.writeHeld(saved, seq, status)
		}
		s.warnings = nil // they were the statement before this one's
		if _, ok := p.Op.(*rewrite.AsWritten); ok && ex == nil && more && s.dial.IsMariaDB() && rewrite.LeavesDiagnostics(p.Original, s.rewriteSession()) {
			// It leaves MariaDB's diagnostics as they were unless it
			// raises a condition itself: a SHOW WARNINGS after it in the
			// query shows the saved ones.
			failed, err := s.execPlan(p, ex, seq, more)
			if err == nil && !failed && s.lastWarnings == 0 {
				s.warnings = saved
			}
			return failed, err
		}
	}
	if p.Shadow {
		s.countShadow(p)
		return s.relayPlan(p, queryPacket(p.Original), ex, seq, more)
	}
	if write, ok := s.rw.locked[ruleName(p.Table)]; ok && p.Table != nil {
		switch op := p.Op.(type) {
		case *rewrite.UpsertIncrement:
			return s.execPlan(op.Fallback, ex, seq, more)
		case *rewrite.UpsertRows:
			return s.execPlan(op.Fallback, ex, seq, more)
		case *rewrite.Increment:
			if write {
				// The table is the session's alone until it unlocks it:
				// the increment runs on the base row.
				return s.execOnBase(p, op, ex, seq, more)
			}
			// Locked READ: the server refuses the write, as directly.
			return s.execAsWritten(p, ex, seq, more)
		case *rewrite.Guarded:
			if !write {
				return s.execAsWritten(p, ex, seq, more)
			}
		}
	}
	if g, ok, err := s.refreshing(p); err != nil {
		return false, err
	} else if ok {
		p = g
	}
	if errPkt, err := s.openViews(p); err != nil {
		return false, err
	} else if lockErr(errPkt) {
		return true, s.writeErr(errPkt, seq) // the wait the statement's own opening met
	} else if errPkt != nil && ex == nil {
		s.metrics().Statement(PathPassThrough, ruleName(p.Table))
		return s.relayPlan(p, queryPacket(p.Original), ex, seq, more)
	}
	switch op := p.Op.(type) {
	case *rewrite.Refused:
		return true, s.refuse(p.Table, p.Reason, seq)
	case *rewrite.Increment:
		return s.execIncrement(p, op, ex, seq, more)
	case *rewrite.UpsertIncrement:
		return s.execUpsertIncrement(p, op, ex, seq, more)
	case *rewrite.UpsertRows:
		return s.execUpsertRows(p, op, ex, seq, more)
	case *rewrite.Guarded:
		return s.execGuarded(p, op, ex, seq, more)
	case *rewrite.LockingRead:
		return s.execLockedRead(op, p.Original, ex, seq, more, nil)
	case *rewrite.Read:
		return s.execRead(p, op.SQL, op.Reads, ex, seq, more)
	case *rewrite.WriteOthers:
		if len(op.Reads) > 0 {
			return s.execRead(p, op.SQL, op.Reads, ex, seq, more)
		}
		s.metrics().Statement(PathPassThrough, ruleName(p.Table))
		return s.relayPlan(p, queryPacket(op.SQL), ex, seq, more)
	case *rewrite.LockTables:
		s.metrics().Statement(PathPassThrough, ruleName(p.Table))
		return s.relayPlan(p, queryPacket(op.SQL), ex, seq, more)
	default: // *rewrite.AsWritten
		if errPkt, err := s.refreshOwnReads(p); err != nil {
			return false, err
		} else if errPkt != nil {
			return true, s.writeErr(errPkt, seq)
		}
		s.metrics().Statement(PathPassThrough, ruleName(p.Table))
		if sub, _, ok := s.rowCountFor(p.Original); ok && ex == nil {
			return s.relayAsOriginal(p, sub, seq, more)
		}
		return s.relayPlan(p, queryPacket(p.Original), ex, seq, more)
	}
}

// relayAsOriginal runs sql in place of the client's statement p.Original
// (a rewritten read; the statement with its ROW_COUNT() calls replaced by
// a value, see rowCountFor), relays the response with the column
// definitions of the statement as written, and does the plan's follow-up.
func (s *Session) relayAsOriginal(p rewrite.Plan, sql string, seq *byte, more bool) (bool, error) {
	orig, err := s.originalColumns(p)
	if err != nil {
		return false, err
	}
	res, err := s.relayAsPatched(queryPacket(sql), seq, more, newColumnPatch(orig, false))
	if err != nil || res.Failed() {
		return res.Failed(), err
	}
	return false, s.afterSuccess(p)
}

// refreshOwnReads runs before p, a read of ruled tables that reads none of
// their counters (rewrite.AsWritten.Reads), in a transaction that
// incremented records of them after its snapshot began: those records are
// folded (foldOwn), which makes their rows the transaction's own versions,
// as the client's UPDATE would have, so that their other columns read as
// directly. errPkt is the server's error that ended the fold.
func (s *Session) refreshOwnReads(p rewrite.Plan) (errPkt []byte, err error) {
	aw, ok := p.Op.(*rewrite.AsWritten)
	if !ok || !s.readsOwn([]rewrite.Plan{p}) {
		return nil, nil
	}
	refresh, err := s.snapshotFolds()
	if err != nil || !refresh {
		return nil, err
	}
	return s.foldOwn(aw.Reads, true)
}

// openViews opens, in the client's transaction, the views whose
// definitions plan p reads in their place (rewrite.Plan.Views): the
// transaction then holds their metadata locks as it does directly (a
// CREATE OR REPLACE VIEW or DROP VIEW of one waits for it to end). In
// autocommit the statement's own locks end with it: nothing is opened.
// errPkt is the server's error when they could not be opened: a lock wait
// timeout or deadlock (lockErr) is the client's statement's answer, as it
// met it opening them; after any other (a view whose table is gone, say)
// the client's statement, run as written, gets the server's answer.
func (s *Session) openViews(p rewrite.Plan) (errPkt []byte, err error) {
	probe := rewrite.ViewsProbeSQL(p)
	if probe == "" || !s.inTransaction() && s.autocommit() || s.tablesLocked() {
		return nil, nil
	}
	return s.queryErr(probe)
}

// lockErr reports whether errPkt is a lock wait timeout or a deadlock.
func lockErr(errPkt []byte) bool {
	if errPkt == nil {
		return false
	}
	code := wire.ErrCode(errPkt)
	return code == mysql.ER_LOCK_WAIT_TIMEOUT || code == mysql.ER_LOCK_DEADLOCK
}

// execRead runs a statement whose counter reads are rewritten (sql):
// once the transaction's own increments of the tables it reads (reads)
// are folded, as its exclusive locks would have them; a statement of a
// multi-statement query gets its own statement's column definitions, as
// a single read does.
func (s *Session) execRead(p rewrite.Plan, sql string, reads []*rewrite.Table, ex *execution, seq *byte, more bool) (bool, error) {
	s.env.Stats.RewrittenReads.Add(1)
	s.metrics().Statement(PathRewrittenRead, "")
	errPkt, err := s.foldOwn(reads, true)
	if err != nil {
		return false, err
	}
	if errPkt != nil {
		return true, s.writeErr(errPkt, seq)
	}
	if ex != nil {
		return s.relayPlan(p, nil, ex, seq, more)
	}
	return s.relayAsOriginal(p, sql, seq, more)
}

// relayPlan sends payload (for a prepared plan, the client's execution ex
// instead), relays its response, and does the plan's follow-up once it
// succeeded.
func (s *Session) relayPlan(p rewrite.Plan, payload []byte, ex *execution, seq *byte, more bool) (bool, error) {
	if ex != nil {
		payload = ex.payload // the client's execution of the statement prepared as planned
	}
	res, err := s.relayAs(payload, seq, more)
	if err == nil && res.Failed() && res.ErrCode == mysql.ER_LOCK_WAIT_TIMEOUT && ex == nil &&
		len(payload) > 0 && payload[0] == mysql.COM_QUERY && rewrite.CommitsImplicitly([]byte(p.Original)) {
		// It committed the transaction, then waited for a lock and gave
		// up (a TRUNCATE that waited for another transaction's table
		// lock, say): the session is in none. (Other errors of such a
		// statement may come before its commit, a read-only server's
		// say: the transaction is left as the proxy knew it.)
		s.status &^= mysql.SERVER_STATUS_IN_TRANS
	}
	if err != nil || res.Failed() {
		return res.Failed(), err
	}
	return false, s.afterSuccess(p)
}

// afterSuccess does a plan's follow-up once its statement succeeded and
// the client has its response.
func (s *Session) afterSuccess(p rewrite.Plan) error {
	if lt, ok := p.Op.(*rewrite.LockTables); ok {
		s.rw.locked = map[string]bool{}
		for _, l := range lt.Locks {
			s.rw.locked[ruleName(l.Table)] = l.Write
		}
	}
	for _, e := range p.Then {
		switch e := e.(type) {
		case *rewrite.SQLPrepare:
			s.notePrepared(e.Prepares.Name, e.Prepares.Write)
		case *rewrite.ClearSlots:
			if err := s.clearSlots(e); err != nil {
				return fmt.Errorf("%w: %w", ErrAnswered, err)
			}
		case *rewrite.TempTables:
			for _, name := range e.Names {
				s.rw.temp = slices.DeleteFunc(s.rw.temp, func(t string) bool { return t == name })
				if e.Create {
					s.rw.temp = append(s.rw.temp, name)
				}
			}
		case *rewrite.Reload:
			s.env.SchemaChanged()
			if s.env.OnDDL != nil {
				// The session's next statement is planned with the new
				// catalog (a view it just created is read through).
				s.env.OnDDL()
			}
		}
	}
	return nil
}

// clearSlots runs a plan's slot clean-up (after a TRUNCATE or a DROP
// TABLE, which committed any open transaction) as a transaction of its
// own: with autocommit off it would otherwise open a transaction that the
// client's next ROLLBACK undoes, leaving the slots to count for keys
// inserted again. A deadlock or lock wait timeout is tried again.
func (s *Session) clearSlots(c *rewrite.ClearSlots) error {
	for attempt := 1; ; attempt++ {
		r, err := s.query(c.SQL)
		if err != nil {
			return err
		}
		failed := r.Failed()
		if !s.autocommit() {
			end := "COMMIT"
			if failed {
				end = "ROLLBACK"
			}
			c, err := s.query(end)
			if err != nil {
				return err
			}
			failed = failed || c.Failed()
		}
		if !failed {
			return nil
		}
		if attempt >= 3 {
			s.log.Error("slot clean-up after the statement failed: the table's slots stay until roll-up removes them as orphans",
				"table", c.Table.Qualified(), "err", (&backendError{r.Err}).Error())
			return nil
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
	}
}

// incArgs returns the keys of the records an increment names (canonical
// decimal integers) and whether its deltas change a row, for a text
// statement (ex nil) or an execution. ok is false when a key or a delta is
// not exactly one integer: the statement then runs as written.
func incArgs(inc *rewrite.Increment, ex *execution) (keys []string, changed, ok bool) {
	keys = make([]string, len(inc.Keys))
	for i, k := range inc.Keys {
		switch {
		case k.Param < 0:
			keys[i] = literalKey(k.Literal)
		case ex != nil:
			keys[i], _ = ex.params.intParam(k.Param)
		default:
			continue // a placeholder's text (EXPLAIN): any key
		}
		if keys[i] == "" {
			// '1abc', ' 1', 1.5: the server converts it with its own
			// rules, warnings and errors, which differ between the UPDATE
			// and the upsert's SELECT.
			return nil, false, false
		}
	}
	if ex == nil {
		return keys, !inc.Zero, true
	}
	for j, i := range inc.DeltaParams {
		if i < 0 {
			changed = changed || j >= len(inc.DeltaZero) || !inc.DeltaZero[j]
			continue
		}
		v, ok := ex.params.intParam(i)
		if !ok {
			return nil, false, false
		}
		changed = changed || v != "0"
	}
	for j, i := range inc.TouchParams {
		if i < 0 {
			continue
		}
		if j < len(inc.TouchInts) && inc.TouchInts[j] {
			if _, ok := ex.params.intParam(i); !ok {
				return nil, false, false
			}
		} else if !ex.params.timeParam(i) {
			return nil, false, false
		}
	}
	if len(inc.TouchParams) > 0 && !changed {
		// Increments by 0 with a time: whether the row changes depends on
		// its current time.
		return nil, false, false
	}
	return keys, changed, true
}

// literalKey returns a key literal as a canonical decimal integer: an
// integer, or a string holding one ('1', as PHP and ORMs quote them), or
// "" for anything else.
func literalKey(lit string) string {
	if len(lit) >= 2 && (lit[0] == '\'' || lit[0] == '"') && lit[len(lit)-1] == lit[0] {
		lit = lit[1 : len(lit)-1]
	}
	if canonicalInt([]byte(lit)) {
		return lit
	}
	return ""
}

// errLongData is the client's error when a parameter the proxy must pass on
// was sent as long data too long to keep.
func errLongData() []byte {
	return wire.Errorf(mysql.ER_UNKNOWN_ERROR, "HY000",
		"a parameter of a rewritten statement sent with COM_STMT_SEND_LONG_DATA is longer than %d bytes", maxKeptLongData).Packet()
}

// execAsWritten runs an increment as the client wrote it: on the base row,
// with the server's own conversions, warnings and errors, relaying the
// response. It is the path for parameters the slotted upsert cannot take as
// they are, and for a WHERE that matched no row.
func (s *Session) execAsWritten(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	s.metrics().Statement(PathPassThrough, ruleName(p.Table))
	pkt, errPkt, err := s.asWrittenPacket(p, ex)
	if err != nil {
		return false, err
	}
	if errPkt != nil {
		return true, s.writeErr(errPkt, seq)
	}
	res, err := s.relayAs(pkt, seq, more)
	return res.Failed(), err
}

// asWrittenPacket is the command that runs the client's statement as
// written (for a prepared one, the proxy's own preparation of its text with
// the client's parameters), or the ERR to answer instead.
func (s *Session) asWrittenPacket(p rewrite.Plan, ex *execution) (pkt, errPkt []byte, err error) {
	if ex != nil && slices.Contains(ex.params.long, true) {
		// The client's statement holds that long data on the backend too:
		// drop it, as its execution would have.
		reset := binary.LittleEndian.AppendUint32([]byte{mysql.COM_STMT_RESET}, ex.stmtID)
		if err := s.send(reset); err != nil {
			return nil, nil, err
		}
		if _, err := s.read(wire.One); err != nil {
			return nil, nil, err
		}
	}
	return s.statementPacket(p.Original, ex)
}

func (s *Session) execIncrement(p rewrite.Plan, inc *rewrite.Increment, ex *execution, seq *byte, more bool) (bool, error) {
	return s.execIncrementOf(p, inc, nil, ex, seq, more)
}

// execUpsertIncrement runs an upsert planned as an UpsertIncrement: its
// record's increments in a slot when the record exists, answered as the
// upsert that updated its row; the upsert as written when it does not; its
// Fallback (the guarded upsert) where the increment cannot be slotted. A
// prepared one runs as its Fallback.
func (s *Session) execUpsertIncrement(p rewrite.Plan, op *rewrite.UpsertIncrement, ex *execution, seq *byte, more bool) (bool, error) {
	if ex != nil {
		return s.execPlan(op.Fallback, ex, seq, more)
	}
	return s.execIncrementOf(p, op.Increment, op, ex, seq, more)
}

// execUpsertRows runs an upsert of several rows planned as UpsertRows (see
// rewrite.UpsertRows): in autocommit row by row, in one transaction of the
// proxy's, answered as the statement; else, and wherever a row cannot be
// slotted or a statement fails (everything then rolled back), as its
// Fallback.
func (s *Session) execUpsertRows(p rewrite.Plan, op *rewrite.UpsertRows, ex *execution, seq *byte, more bool) (bool, error) {
	fallback := func() (bool, error) { return s.execPlan(op.Fallback, ex, seq, more) }
	if ex != nil || !s.autocommitted() || s.tablesLocked() || len(op.Rows) == 0 {
		return fallback()
	}
	for _, row := range op.Rows {
		if narrowDelta(p.Table, row.Increment) {
			return fallback() // no slot can take it
		}
	}
	if denied, err := s.checkPrivileges(op.Rows[0].Increment); err != nil || denied != nil {
		if err != nil {
			return false, err
		}
		return true, s.writeErr(denied, seq)
	}
	var affected, updated uint64
	for attempt := 1; ; attempt++ {
		var again, failed bool
		var err error
		affected, updated, again, failed, err = s.upsertRowsOnce(op, attempt)
		if err != nil {
			return false, err
		}
		if failed {
			// A row its slot cannot take, a NULL counter, an error: the
			// server's own answer, by the guarded write.
			return fallback()
		}
		if !again {
			break
		}
	}
	c, err := s.query("COMMIT")
	if err != nil {
		return false, err
	}
	if c.Failed() || c.OK == nil {
		return fallback() // (the transaction is gone with its COMMIT)
	}
	ok := *c.OK
	ok.Affected, ok.InsertID, ok.Warnings = affected, 0, 0
	if op.WarnSQL != "" {
		// The statement's own warnings (MySQL's for its VALUES() calls),
		// which SHOW WARNINGS then shows.
		wr, err := s.query(op.WarnSQL)
		if err != nil {
			return false, err
		}
		if !wr.Failed() && wr.OK != nil {
			ok.Warnings = wr.OK.Warnings
		}
	}
	ok.Info = fmt.Appendf(nil, "Records: %d  Duplicates: %d  Warnings: %d", len(op.Rows), updated, ok.Warnings)
	s.env.Stats.RewrittenWrites.Add(1)
	s.metrics().Statement(PathRewrittenWrite, ruleName(p.Table))
	return false, s.writeOK(ok, seq, more)
}

// upsertRowsOnce runs the rows of op in a transaction of the proxy's, up
// to its COMMIT (not sent), and returns the statement's affected rows and
// updated rows. Where a row's statement fails, the transaction is rolled
// back: again after a deadlock or lock wait an autocommit statement would
// be retried for (attempt), failed otherwise.
func (s *Session) upsertRowsOnce(op *rewrite.UpsertRows, attempt int) (affected, updated uint64, again, failed bool, err error) {
	s.wrapping = true
	defer func() { s.wrapping = false }()
	if errPkt, err := s.queryErr("BEGIN"); err != nil || errPkt != nil {
		return 0, 0, false, errPkt != nil, err
	}
	rollback := func(code uint16) (uint64, uint64, bool, bool, error) {
		if _, err := s.query("ROLLBACK"); err != nil {
			return 0, 0, false, false, err
		}
		if s.retry(code, attempt) {
			return 0, 0, true, false, nil
		}
		return 0, 0, false, true, nil
	}
	for i, row := range op.Rows {
		inc := row.Increment
		r, err := s.query(inc.SQL)
		if err != nil {
			return 0, 0, false, false, err
		}
		if r.Failed() || r.OK == nil {
			return rollback(r.ErrCode) // beyond the slot's share, a NULL counter, a lock error
		}
		matched := uint64(0)
		if n, ok := infoRecords(r.OK.Info); ok && inc.Counters > 0 {
			matched = n / uint64(inc.Counters)
		} else if r.OK.Affected > 0 {
			matched = 1
		}
		if matched > 0 {
			affected += 2 // the row updated (its deltas are not 0)
			updated++
			continue
		}
		w, err := s.query(op.RowSQL[i])
		if err != nil {
			return 0, 0, false, false, err
		}
		if w.Failed() || w.OK == nil {
			return rollback(w.ErrCode)
		}
		if w.OK.Warnings > 0 {
			return rollback(0)
		}
		affected += w.OK.Affected
		if w.OK.Affected > 1 {
			updated++ // inserted meanwhile by another client, then updated
		}
	}
	return affected, updated, false, false, nil
}

// execIncrementOf runs inc, the increment of p, or of the upsert up when
// up is not nil (see execUpsertIncrement).
func (s *Session) execIncrementOf(p rewrite.Plan, inc *rewrite.Increment, up *rewrite.UpsertIncrement, ex *execution, seq *byte, more bool) (bool, error) {
	onBase := func() (bool, error) {
		if up != nil {
			return s.execPlan(up.Fallback, ex, seq, more)
		}
		return s.execOnBase(p, inc, ex, seq, more)
	}
	keys, changed, plain := incArgs(inc, ex)
	if !plain {
		// A key or a delta the server converts with its own rules ('1e3',
		// a DOUBLE, a time of a touch column): the statement runs on the
		// base row, which the record's slots are folded into first, so that
		// the server computes from the total (in DOUBLE arithmetic, say)
		// and checks the total against the column's range.
		return onBase()
	}
	if narrowDelta(p.Table, inc) {
		// No slot can take it: a slotted attempt would always fail and
		// the statement run again on the base row, in a transaction of
		// its own that a statement waiting for the table (a TRUNCATE)
		// could run before. On the base row at once, in one transaction.
		return onBase()
	}
	if s.env.lockedCounters(p.Table) && (s.inTransaction() || !s.autocommit()) {
		// This table's counters are read after increments in transactions
		// (see noteReadAfterIncrement): increments inside a transaction
		// lock the record, so such readers wait instead of deadlocking.
		return onBase()
	}
	if denied, err := s.checkPrivileges(inc); err != nil || denied != nil {
		if err != nil {
			return false, err
		}
		return true, s.writeErr(denied, seq)
	}
	if up != nil && s.missingRecord(p.Table, inc) {
		// No such record: the upsert inserts its row, as written (the
		// slotted attempt would lock the gap where it goes).
		return s.execAsWritten(p, ex, seq, more)
	}
	if up != nil && up.Generated != nil && ex == nil {
		return s.execGeneratedUpsert(p, up, changed, seq, more)
	}
	if key := s.coalesceKey(inc, up, ex, more); key != "" {
		done, failed, leave, err := s.coalesced(p, inc, key, changed, seq)
		defer leave()
		if done || err != nil {
			return failed, err
		}
	}
	s.env.Stats.RewrittenWrites.Add(1)
	s.metrics().Statement(PathRewrittenWrite, ruleName(p.Table))
	autocommitted := s.autocommitted()
	// Long data the client sent is gone once the statement ran as written
	// (see asWrittenPacket): such an execution is not run twice.
	retryable := autocommitted || (s.txnFresh() && (ex == nil || !slices.Contains(ex.params.long, true)))
	for attempt := 1; ; attempt++ {
		payload := queryPacket(inc.SQL)
		if inc.Sorted != "" && !autocommitted {
			// Each slot row tested before any is inserted: a failed
			// attempt leaves no lock in the slot table.
			payload = queryPacket(inc.Sorted)
		}
		if ex != nil {
			payload = ex.slottedPacket(s, p.Table)
		} else if inc.ByKeys != "" {
			byKeys, errPkt, err := s.incrementByKeys(p.Table, inc)
			if err != nil || errPkt != nil {
				if err != nil {
					return false, err
				}
				return true, s.writeErr(errPkt, seq)
			}
			if byKeys != "" {
				payload = queryPacket(byKeys)
			}
		}
		if err := s.send(payload); err != nil {
			return false, err
		}
		r, err := s.read(wire.Results)
		if err != nil {
			return false, err
		}
		if r.Failed() {
			switch r.ErrCode {
			case errOutOfRange, errDataOutOfRange, errCheckViolated:
				// Beyond the slot's share of the counter's range: the
				// client's statement decides on the base row, with the
				// server's own errors.
				return onBase()
			case errTableDefChanged, mysql.ER_TABLE_DEF_CHANGED:
				// The table was re-created (TRUNCATE) since the
				// transaction's snapshot: MariaDB fails the slotted
				// statement's locking read with its own error (159),
				// the client's statement with 1412. Nothing was
				// written; the client's statement gives its own.
				return s.execAsWritten(p, ex, seq, more)
			}
			if retryable && s.retry(r.ErrCode, attempt) {
				if errPkt, err := s.restartTxn(autocommitted); err != nil || errPkt != nil {
					return errPkt != nil, errOr(err, s.writeErr(errPkt, seq))
				}
				continue
			}
			if up == nil {
				if err := s.lockErrorAsUpdate(r.ErrCode, p, inc, ex); err != nil {
					return false, err
				}
			}
			return true, s.writeErr(r.Err, seq)
		}
		if r.OK == nil {
			return false, errors.New("slotted increment returned rows")
		}
		matched := uint64(0)
		if n, ok := infoRecords(r.OK.Info); ok && inc.Counters > 0 {
			matched = n / uint64(inc.Counters)
		} else if r.OK.Affected > 0 {
			matched = 1
		}
		if matched == 0 {
			// No row: nothing was written. The statement as written
			// changes nothing either, and answers exactly as the server
			// does (an impossible WHERE, say, gets no info string from
			// MariaDB).
			if autocommitted || !retryable {
				return s.execAsWritten(p, ex, seq, more)
			}
			// The first statement of a transaction: the upsert's share
			// locks on rows the WHERE read but did not match are held,
			// and taking them exclusively may deadlock with another
			// transaction holding them too, where the UPDATE alone would
			// have waited. The transaction held nothing else, so it runs
			// again.
			failed, again, err := s.asWrittenRetrying(p, ex, seq, more, attempt)
			if again {
				continue
			}
			return failed, err
		}
		if r.Status&mysql.SERVER_STATUS_IN_TRANS != 0 {
			guard := -1
			if len(keys) == 0 {
				keys = []string{""} // named by a UNIQUE key: any record
				s.noteOwnGuard(p.Table, inc, ex, matched)
				guard = len(s.txn.ownGuards[ruleName(p.Table)]) - 1
			}
			s.noteOwnIncrement(p.Table, keys)
			slot := s.slotFor(p.Table)
			if ex != nil && !ex.slotted && inc.Slot >= 0 {
				// A prepared increment that could not take its slot as a
				// parameter writes the slot it was planned with.
				slot = inc.Slot
			}
			s.txn.noteOwnRows(ruleName(p.Table), keys, inc.RecordTypes, slot, guard)
		}
		ok := *r.OK
		rowsChanged := uint64(0)
		if changed {
			rowsChanged = matched // every record a non-zero delta names changes
		}
		if up != nil {
			// The upsert updated its row: 2 affected rows (changed), the
			// key as insert id when it is AUTO_INCREMENT, no info.
			ok.Affected, ok.InsertID, ok.Info = 2*rowsChanged, up.InsertID, nil
		} else {
			s.incPatch(matched, rowsChanged)(&ok)
		}
		s.recordIncrement(p, inc, ex, &ok)
		return false, s.writeOK(ok, seq, more)
	}
}

// semiConsistent reports whether the session's UPDATEs read rows another
// transaction holds by their committed versions and skip those that do not
// match (InnoDB's semi-consistent read: READ COMMITTED and READ
// UNCOMMITTED). Where the proxy reads a statement's rows without locks
// first to do the same, at READ UNCOMMITTED that read sees another
// transaction's uncommitted changes of a base row instead (an absolute
// write, a delete or an insert not yet committed; a slotted increment
// leaves the base row as it is): see docs/limits.md.
func (s *Session) semiConsistent() bool {
	switch s.isolation() {
	case "READ-COMMITTED", "READ-UNCOMMITTED":
		return true
	}
	return false
}

// incrementByKeys returns the slotted increment inc (whose records a
// condition on the row finds) made to increment the records whose rows
// the condition matches now, read without locks, when the session runs at
// READ COMMITTED or READ UNCOMMITTED (see rewrite.Increment.ByKeys and
// semiConsistent); "" to run inc.SQL (another level, or more rows than a
// guard may lock).
func (s *Session) incrementByKeys(t *rewrite.Table, inc *rewrite.Increment) (string, []byte, error) {
	if err := s.ensureSessionInfo(); err != nil {
		return "", nil, err
	}
	if !s.semiConsistent() {
		return "", nil, nil
	}
	read, ok := inc.Guard.ReadKeysSQL()
	if !ok {
		return "", nil, nil
	}
	limit := s.maxGuardKeys()
	keys, errPkt, err := s.queryKeys(t, read+" LIMIT "+strconv.Itoa(limit+1))
	if err != nil || errPkt != nil || len(keys) > limit {
		return "", errPkt, err
	}
	return t.Narrowed(inc.ByKeys, keys, false), nil, nil
}

// execGeneratedUpsert runs up, an upsert whose row leaves out its table's
// AUTO_INCREMENT key and names its record by a UNIQUE key (see
// rewrite.GeneratedKey). In autocommit, in a transaction of the proxy's:
// the slotted increment (which locks the row in share mode); then one
// AUTO_INCREMENT value taken as the upsert takes it when it meets the
// duplicate; a read of the row's key (which also clears the warning of the
// statement before); COMMIT. The answer is the server's to an upsert that
// updated: 2 affected rows and the record's key as the insert id, or 0
// and 0 when every delta is 0 (changed false); no warnings. No such row:
// the statement as written. A delta beyond its slot's share: the
// fallback (nothing taken yet).
//
// In a client's transaction the value would be taken by an insert that
// meets the duplicate, whose lock on the gap at the end of the table the
// server keeps to the transaction's end: two such transactions taking a
// second value each wait for the other (MySQL reports the deadlock). So
// there, a row that does not exist (asked on a connection of the
// proxy's) is inserted as written, and one that does runs as the
// fallback. Under LOCK TABLES (which BEGIN would release), the fallback.
func (s *Session) execGeneratedUpsert(p rewrite.Plan, up *rewrite.UpsertIncrement, changed bool, seq *byte, more bool) (bool, error) {
	inc, g := up.Increment, up.Generated
	if s.tablesLocked() {
		return s.execPlan(up.Fallback, nil, seq, more)
	}
	if !s.autocommitted() {
		if s.env.SlotReader != nil {
			ctx, cancel := context.WithTimeout(context.Background(), slotReadTimeout)
			rows, err := s.env.SlotReader.ReadSlotRows(ctx, g.ExistsSQL)
			cancel()
			if err != nil {
				s.log.Warn("reading whether an upsert's record exists failed", "rule", ruleName(p.Table), "err", err)
			} else if len(rows) == 0 {
				return s.execAsWritten(p, nil, seq, more)
			}
		}
		return s.execPlan(up.Fallback, nil, seq, more)
	}
	s.wrapping = true
	defer func() { s.wrapping = false }()
	for attempt := 1; ; attempt++ {
		if errPkt, err := s.queryErr("BEGIN"); err != nil || errPkt != nil {
			return errPkt != nil, errOr(err, s.writeErr(errPkt, seq))
		}
		// failed ends the transaction after a statement failed: again
		// after a deadlock or lock wait an autocommit statement is retried
		// for; else the error is the upsert's, answered (the statement
		// failed when err is nil).
		failed := func(r *wire.Response) (again bool, err error) {
			if _, err := s.query("ROLLBACK"); err != nil {
				return false, err
			}
			if s.retry(r.ErrCode, attempt) {
				return true, nil
			}
			return false, s.writeErr(r.Err, seq)
		}
		r, err := s.query(inc.SQL)
		if err != nil {
			return false, err
		}
		if r.Failed() {
			switch r.ErrCode {
			case errOutOfRange, errDataOutOfRange, errCheckViolated:
				// Beyond the slot's share: the fallback decides on the
				// base row, with the server's own errors.
				if _, err := s.query("ROLLBACK"); err != nil {
					return false, err
				}
				return s.execPlan(up.Fallback, nil, seq, more)
			}
			if again, err := failed(r); !again {
				return err == nil, err
			}
			continue
		}
		if r.OK == nil {
			return false, errors.New("slotted increment returned rows")
		}
		if n, ok := infoRecords(r.OK.Info); r.OK.Affected == 0 && (!ok || n == 0) {
			// No such row: the upsert inserts it.
			if _, err := s.query("ROLLBACK"); err != nil {
				return false, err
			}
			return s.execAsWritten(p, nil, seq, more)
		}
		burn, err := s.query(g.BurnSQL)
		if err != nil {
			return false, err
		}
		if burn.Failed() {
			if again, err := failed(burn); !again {
				return err == nil, err
			}
			continue
		}
		if burn.OK == nil || burn.OK.Affected != 0 {
			// The row is locked: the INSERT IGNORE meets it. Anything
			// else is a server this plan does not know.
			return false, errors.New("upsert: taking an AUTO_INCREMENT value inserted a row")
		}
		id, err := s.query(g.IDSQL)
		if err != nil {
			return false, err
		}
		if id.Failed() {
			if again, err := failed(id); !again {
				return err == nil, err
			}
			continue
		}
		var insertID uint64
		if len(id.Rows) == 1 {
			vals, err := wire.TextRow(id.Rows[0])
			if err == nil && len(vals) == 1 && vals[0] != nil {
				insertID, err = strconv.ParseUint(string(vals[0]), 10, 64)
			}
			if err != nil {
				return false, fmt.Errorf("upsert: the record's key: %w", err)
			}
		} else {
			return false, errors.New("upsert: the locked row was not found by its key")
		}
		c, err := s.query("COMMIT")
		if err != nil {
			return false, err
		}
		if c.Failed() || c.OK == nil {
			return s.execPlan(up.Fallback, nil, seq, more) // (the transaction is gone with its COMMIT)
		}
		s.env.Stats.RewrittenWrites.Add(1)
		s.metrics().Statement(PathRewrittenWrite, ruleName(p.Table))
		ok := *c.OK // the status after it, no warnings (as the upsert that updated)
		ok.Warnings, ok.Affected, ok.InsertID, ok.Info = 0, 0, 0, nil
		if changed {
			ok.Affected, ok.InsertID = 2, insertID
		}
		return false, s.writeOK(ok, seq, more)
	}
}

// narrowDelta reports whether inc changes a counter of t whose range is
// too narrow for any slot to take a delta (rewrite.Counter.Narrow) by a
// delta that may not be 0.
func narrowDelta(t *rewrite.Table, inc *rewrite.Increment) bool {
	for _, d := range inc.Deltas {
		if d.Literal == "0" {
			continue
		}
		for i := range t.Counters {
			if c := &t.Counters[i]; strings.EqualFold(c.Name, d.Column) && c.Narrow() {
				return true
			}
		}
	}
	return false
}

// Errors a slotted increment raises when a delta is beyond its slot's
// share of the counter's range (see rewrite.Rewriter.slottedIncrement).
const (
	errOutOfRange     = 1690 // ER_DATA_OUT_OF_RANGE: the increment's own check
	errDataOutOfRange = 1264 // ER_WARN_DATA_OUT_OF_RANGE
	errCheckViolated  = 3819 // ER_CHECK_CONSTRAINT_VIOLATED
	// errSortAborted is the error a sorted slotted increment (see
	// rewrite.Increment.Sorted) adds to its lock error's diagnostics.
	errSortAborted = 1028
	// errTableDefChanged is MariaDB's error for a locking read of a table
	// re-created since the transaction's snapshot ("InnoDB: insufficient
	// history for index").
	errTableDefChanged = 159
)

// infoRecords reads N from an INSERT … SELECT's info string, "Records: N
// Duplicates: D  Warnings: W".
func infoRecords(info []byte) (uint64, bool) {
	const prefix = "Records: "
	if !bytes.HasPrefix(info, []byte(prefix)) {
		return 0, false
	}
	rest := info[len(prefix):]
	n := bytes.IndexByte(rest, ' ')
	if n < 0 {
		n = len(rest)
	}
	v, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	return v, err == nil
}

// execOnBase runs an increment as the client wrote it, on the base row: the
// record is locked and its slots folded into the base row first, in one
// transaction (the client's, or one of the proxy's own around an
// autocommit statement). The response is the statement's own.
func (s *Session) execOnBase(p rewrite.Plan, inc *rewrite.Increment, ex *execution, seq *byte, more bool) (bool, error) {
	if keys, deltas, ok := s.orderedKeys(p.Table, inc, ex); ok {
		// Its rows are locked and folded one at a time, in the order the
		// statement writes them, up to the first it cannot write.
		g := *inc.Guard
		g.Keys, g.KeysSQL, g.KeysParams = nil, "", nil
		op := &rewrite.Guarded{SQL: p.Original, Guards: []*rewrite.Guard{&g}, SingleTable: true}
		lockInOrder := func() ([]string, []byte, error) { return s.lockIncrementInOrder(p.Table, keys, deltas) }
		return s.execGuardedWith(p, op, inc, ex, seq, more, func() ([]byte, []byte, error) { return s.statementPacket(p.Original, ex) }, lockInOrder)
	}
	op := &rewrite.Guarded{SQL: p.Original, Guards: []*rewrite.Guard{inc.Guard}, SingleTable: true, Restrict: inc.Restrict}
	main := func() ([]byte, []byte, error) { return s.statementPacket(p.Original, ex) }
	var narrow func([]string)
	if len(inc.Keys) == 0 && inc.Restrict != "" && s.semiConsistent() {
		// At READ COMMITTED the UPDATE skips a row another transaction
		// holds when the row's committed version does not match (InnoDB's
		// semi-consistent read), where the guard's locking read of every
		// row its scan reads would wait for it: the records are those the
		// statement matches now, read without locks (scanInOrder), and
		// the statement is narrowed to them, whose slots were folded.
		narrow = func(keys []string) {
			restricted := p.Table.Narrowed(inc.Restrict, keys, true)
			main = func() ([]byte, []byte, error) { return s.statementPacket(restricted, ex) }
		}
	}
	lock := s.guardInOrder(p, op, ex, narrow)
	if narrow != nil && lock != nil {
		asWritten, locks := main, lock
		lock = func() ([]string, []byte, error) {
			main = asWritten // until this attempt's lock narrows it again
			return locks()
		}
	}
	return s.execGuardedWith(p, op, inc, ex, seq, more, func() ([]byte, []byte, error) { return main() }, lock)
}

// counterUnits returns a counter's value as the server sends it (text) in
// the counter's units: the integer itself, or a DECIMAL's digits with its
// point removed (scale digits after it, as the server writes them).
func counterUnits(v string, scale int) (*big.Int, bool) {
	if scale > 0 {
		whole, frac, ok := strings.Cut(v, ".")
		if !ok || len(frac) != scale {
			return nil, false
		}
		v = whole + frac
	}
	return new(big.Int).SetString(v, 10)
}

// orderedKeys returns the keys of an increment of several records by key
// (canonical integers, ascending: the order an UPDATE … WHERE key IN (…)
// writes them in) and its deltas by counter, when a row can make it fail
// part way, with every delta an integer: in a strict sql_mode, at the
// first row out of its counter's range; in another, at the first row
// whose total certainly fails (see failsAnyMode). Directly the UPDATE
// then stops there, having locked only the rows before it; its guard must
// not lock the others (see lockIncrementInOrder).
func (s *Session) orderedKeys(t *rewrite.Table, inc *rewrite.Increment, ex *execution) (keys []string, deltas map[string]*big.Int, ok bool) {
	if !s.rw.strict && s.rw.noUnsignedSub {
		return nil, nil, false
	}
	return incKeysDeltas(t, inc, ex, 2)
}

var (
	minBigint   = new(big.Int).Lsh(big.NewInt(-1), 63)
	maxBigint   = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 63), big.NewInt(1))
	maxUnsigned = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1))
)

// failsAnyMode reports whether an increment that makes a total v of a
// counter whose range is [lo, hi] fails outside the strict modes too
// (where a value beyond the column's type is clamped with a warning):
// below 0 when the range starts at 0 (an UNSIGNED column's arithmetic
// fails with 1690, unless NO_UNSIGNED_SUBTRACTION, which orderedKeys
// excludes; a CHECK (c >= 0) fails on the negative value), or beyond
// BIGINT's arithmetic. Other totals beyond the range may be clamped (a
// type's bound) or fail (a CHECK's): not certain, so the guard goes on
// locking, as it did before.
func failsAnyMode(v, lo, hi *big.Int) bool {
	return lo.Sign() == 0 && v.Sign() < 0 || v.Cmp(minBigint) < 0 || v.Cmp(maxUnsigned) > 0 ||
		lo.Sign() < 0 && hi.Cmp(maxBigint) == 0 && v.Cmp(maxBigint) > 0
}

// missingRecord reports whether the record an upsert's increment names has
// no row, as far as the committed rows tell (read by the SlotReader,
// outside the transaction), in a client's transaction: there the slotted
// attempt's locking read of a missing row would lock the gap where it
// goes, and two transactions inserting rows into that gap would deadlock
// where their inserts alone do not wait for each other. False when it
// cannot tell (autocommit, where the attempt's locks go with it; no
// reader).
func (s *Session) missingRecord(t *rewrite.Table, inc *rewrite.Increment) bool {
	if s.autocommitted() || s.env.SlotReader == nil || len(inc.Keys) != 1 || inc.Keys[0].Param >= 0 {
		return false
	}
	key := literalKey(inc.Keys[0].Literal)
	if key == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), slotReadTimeout)
	defer cancel()
	rows, err := s.env.SlotReader.ReadSlotRows(ctx, t.ExistsSQL(key))
	if err != nil {
		s.log.Warn("reading whether an upsert's record exists failed", "rule", ruleName(t), "err", err)
		return false
	}
	return len(rows) == 0
}

// incKeysDeltas returns the keys of an increment of several records, in
// ascending order, and its deltas by lower-case counter name; ok is false
// for one key, keys or deltas it cannot tell, or a counter assigned twice.
func incKeysDeltas(t *rewrite.Table, inc *rewrite.Increment, ex *execution, minKeys int) (keys []string, deltas map[string]*big.Int, ok bool) {
	if len(inc.Keys) < minKeys || len(inc.Deltas) == 0 || t == nil {
		return nil, nil, false
	}
	keys, ok = resolveKeys(t, inc.Keys, ex)
	if !ok || len(keys) < minKeys {
		return nil, nil, false
	}
	deltas = map[string]*big.Int{}
	for _, d := range inc.Deltas {
		v := d.Literal
		if d.Param >= 0 {
			if ex == nil {
				return nil, nil, false
			}
			v, _ = ex.params.intParam(d.Param)
		}
		n, ok := new(big.Int).SetString(v, 10)
		if !ok {
			return nil, nil, false
		}
		if d.Minus {
			n.Neg(n)
		}
		if prev := deltas[strings.ToLower(d.Column)]; prev != nil {
			return nil, nil, false // a counter assigned twice: as written
		}
		deltas[strings.ToLower(d.Column)] = n
	}
	sortIntKeys(keys)
	return keys, deltas, true
}

// sortIntKeys sorts canonical integer keys ascending, the order an UPDATE
// … WHERE key IN (…) writes their rows in.
func sortIntKeys(keys []string) {
	slices.SortFunc(keys, func(a, b string) int {
		x, _ := new(big.Int).SetString(a, 10)
		y, _ := new(big.Int).SetString(b, 10)
		return x.Cmp(y)
	})
}

// lockIncrementInOrder locks and folds the records of an increment one at
// a time, keys ascending, and stops after the first whose total plus its
// delta is out of its counter's range (the statement fails there,
// directly having locked no row after it). It returns the keys locked.
func (s *Session) lockIncrementInOrder(t *rewrite.Table, keys []string, deltas map[string]*big.Int) (locked []string, errPkt []byte, err error) {
	var cols []string
	var ctrs []*rewrite.Counter
	for i := range t.Counters {
		c := &t.Counters[i]
		if deltas[strings.ToLower(c.Name)] != nil {
			cols = append(cols, "`"+strings.ReplaceAll(c.Name, "`", "``")+"`")
			ctrs = append(ctrs, c)
		}
	}
	return s.lockEachInOrder(t, keys, func(_ int, k string) (bool, []byte, error) {
		r, err := s.query(t.ValuesSQL(cols, k))
		if err != nil {
			return false, nil, err
		}
		if r.Failed() {
			return false, r.Err, nil
		}
		if len(r.Rows) != 1 {
			return false, nil, nil
		}
		vals, err := wire.TextRow(r.Rows[0])
		if err != nil || len(vals) != len(ctrs) {
			return false, nil, errors.New("guard: cannot read the record's counters")
		}
		for i, c := range ctrs {
			if vals[i] == nil {
				continue // NULL + d is NULL: no error
			}
			v, ok := counterUnits(string(vals[i]), c.Scale)
			if !ok {
				continue
			}
			d := deltas[strings.ToLower(c.Name)]
			if c.Scale > 0 {
				// A DECIMAL counter's range is in its units (10^-Scale).
				d = new(big.Int).Mul(d, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(c.Scale)), nil))
			}
			v.Add(v, d)
			lo, hi := c.Range()
			if s.rw.strict && (v.Cmp(lo) < 0 || v.Cmp(hi) > 0) || !s.rw.strict && failsAnyMode(v, lo, hi) {
				return true, nil, nil // the statement stops here
			}
		}
		return false, nil, nil
	})
}

// lockEachInOrder locks the rows of keys of t one at a time, in order,
// folding each record's slots, and asks stops after each (i its index)
// whether the statement stops at that row; it returns the keys it locked
// (those of rows that exist), the last being the one it stopped at.
func (s *Session) lockEachInOrder(t *rewrite.Table, keys []string, stops func(i int, k string) (bool, []byte, error)) (locked []string, errPkt []byte, err error) {
	for i, k := range keys {
		found, errPkt, err := s.lockKeys(t, []string{k})
		if err != nil || errPkt != nil {
			return nil, errPkt, err
		}
		if len(found) == 0 {
			continue
		}
		locked = append(locked, k)
		if errPkt, err := s.foldKeys(t, found); err != nil || errPkt != nil {
			return nil, errPkt, err
		}
		stop, errPkt, err := stops(i, k)
		if err != nil || errPkt != nil {
			return nil, errPkt, err
		}
		if stop {
			break
		}
	}
	return locked, nil, nil
}

// noteOwnIncrement records that the open transaction incremented records
// of t with the given keys ("" for a key the proxy cannot tell: then every
// slotted record of t counts as its own).
func (s *Session) noteOwnIncrement(t *rewrite.Table, keys []string) {
	name := ruleName(t)
	if s.txn.own == nil {
		s.txn.own = map[string]map[string]bool{}
	}
	if s.txn.own[name] == nil {
		s.txn.own[name] = map[string]bool{}
	}
	for _, k := range keys {
		s.txn.own[name][k] = true // "" marks an unknown key
	}
}

// noteOwnGuard records inc's guard (txnState.ownGuards), an increment of
// records of t whose keys the proxy could not tell, which matched matched
// records: a read in the transaction locks them by running it again (a
// prepared increment's with a copy of its parameters).
func (s *Session) noteOwnGuard(t *rewrite.Table, inc *rewrite.Increment, ex *execution, matched uint64) {
	o := ownGuard{guard: inc.Guard, matched: matched}
	switch {
	case o.guard == nil || len(o.guard.KeysParams) > 0 && ex == nil:
		o.guard = nil
	case len(o.guard.KeysParams) > 0:
		o.params = ex.params.clone()
		if o.params == nil {
			o.guard = nil // long data it did not keep
		}
	}
	if s.txn.ownGuards == nil {
		s.txn.ownGuards = map[string][]ownGuard{}
	}
	name := ruleName(t)
	s.txn.ownGuards[name] = append(s.txn.ownGuards[name], o)
}

// ownKeys returns the keys of the records of t the transaction
// incremented, found again by the guards of its increments that named them
// by a UNIQUE key or a key of several columns (noteOwnGuard), and locks them
// (FOR UPDATE); ok is false when a guard cannot run or finds other records
// than its increment matched: every slotted record is folded then.
func (s *Session) ownKeys(t *rewrite.Table, known map[string]bool) (keys []string, ok bool, errPkt []byte, err error) {
	for k := range known {
		if k != "" {
			keys = append(keys, k)
		}
	}
	for _, o := range s.txn.ownGuards[ruleName(t)] {
		if o.guard == nil {
			return nil, false, nil, nil
		}
		var found []string
		if byKey, ok := resolveKeys(t, o.guard.Keys, o.execution()); ok && len(byKey) > 0 {
			// By key (a locking read of the WHERE clause may scan).
			if found, errPkt, err = s.lockKeys(t, byKey); err != nil || errPkt != nil {
				return nil, false, errPkt, err
			}
		} else if o.params == nil {
			if found, errPkt, err = s.queryKeys(t, o.guard.KeysSQL); err != nil || errPkt != nil {
				return nil, false, errPkt, err
			}
		} else {
			r, err := s.executeInternalRows(o.guard.KeysSQL, *o.params, o.guard.KeysParams, s.maxGuardKeys())
			var be *backendError
			switch {
			case errors.As(err, &be):
				return nil, false, be.pkt, nil
			case err != nil:
				return nil, false, nil, err
			case r.Failed():
				return nil, false, r.Err, nil
			case r.Dropped > 0:
				return nil, false, nil, nil
			}
			if found, err = guardKeys(t, r, true); err != nil {
				return nil, false, nil, err
			}
		}
		if uint64(len(found)) != o.matched {
			return nil, false, nil, nil
		}
		for _, k := range found {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys, true, nil, nil
}

// privilegeTTL bounds how long a session trusts a privilege check of its
// own (grants changed by another session apply within it).
const privilegeTTL = time.Second

// checkPrivileges makes sure the client's account may run the increment's
// own statement: the slotted write needs other privileges (SELECT on the
// table, INSERT and UPDATE on the slot table) than the UPDATE (UPDATE on
// the column), so the proxy runs the client's statement made to touch no
// row, at most once a second per statement shape and session, and again
// after the session changed privileges. denied is the server's ERR.
func (s *Session) checkPrivileges(inc *rewrite.Increment) (denied []byte, err error) {
	if t, ok := s.rw.privOK[inc.PrivKey]; ok && time.Since(t) < privilegeTTL {
		return nil, nil
	}
	r, err := s.query(inc.ProbeSQL)
	if err != nil {
		return nil, err
	}
	if r.Failed() {
		return r.Err, nil
	}
	if s.rw.privOK == nil {
		s.rw.privOK = map[string]time.Time{}
	}
	s.rw.privOK[inc.PrivKey] = time.Now()
	return nil, nil
}

// asWrittenRetrying runs an increment as written in a transaction that
// held nothing before it (see txnFresh) and answers the client, unless it
// deadlocked or timed out waiting for a lock: then again is true and the
// transaction was restarted for another attempt.
func (s *Session) asWrittenRetrying(p rewrite.Plan, ex *execution, seq *byte, more bool, attempt int) (failed, again bool, err error) {
	s.metrics().Statement(PathPassThrough, ruleName(p.Table))
	pkt, errPkt, err := s.asWrittenPacket(p, ex)
	if err != nil {
		return false, false, err
	}
	if errPkt != nil {
		return true, false, s.writeErr(errPkt, seq)
	}
	if err := s.send(pkt); err != nil {
		return false, false, err
	}
	buf := &wire.Buffer{}
	res, err := s.rd.Read(wire.Results, buf)
	if err != nil {
		return false, false, err
	}
	if res.Failed() {
		s.noteErr(res.ErrCode)
		if s.retry(res.ErrCode, attempt) {
			errPkt, err := s.restartTxn(false)
			if err != nil || errPkt != nil {
				return errPkt != nil, false, errOr(err, s.writeErr(errPkt, seq))
			}
			return false, true, nil
		}
	} else {
		s.noteStatus(res)
	}
	status := func(st uint16) uint16 {
		if more {
			st |= mysql.SERVER_MORE_RESULTS_EXISTS
		}
		return st
	}
	return res.Failed(), false, s.writeHeld(buf, seq, status)
}

// retriable reports whether retry would run a statement that failed with
// code at attempt again.
func (s *Session) retriable(code uint16, attempt int) bool {
	return (code == mysql.ER_LOCK_DEADLOCK || code == errRollbackDuringCommit || code == mysql.ER_ERROR_DURING_COMMIT) && attempt <= s.env.MaxRetries
}

// errRollbackDuringCommit is Group Replication's certification failure
// (ER_TRANSACTION_ROLLBACK_DURING_COMMIT); Galera's is a deadlock (1213).
// A transaction that a remote one aborts while it commits fails with
// ER_ERROR_DURING_COMMIT (1180, "Got error 149 - 'Lock deadlock'"). Both
// rolled the whole transaction back, as a deadlock does: on a cluster the
// proxy's own statements (a fold of slots another node wrote) meet them
// where the client's would not.
const errRollbackDuringCommit = 3101

// errOr returns err, or else alt.
func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// retry decides whether to run a failed statement again (one that ran in a
// transaction of its own, or first in its transaction: see txnFresh), and
// waits a jittered backoff first. Only deadlocks (and a cluster's
// certification failures, see errRollbackDuringCommit) are: the proxy's own
// statements can meet in deadlocks the client's would not (two upserts
// inserting slot rows, say). A lock wait timeout is not: it took a whole
// innodb_lock_wait_timeout, for a lock that the client's own statement
// would have waited for too (a slotted increment waits for the base row,
// or for a slot row whose holder holds the base row).
func (s *Session) retry(code uint16, attempt int) bool {
	if !s.retriable(code, attempt) {
		return false
	}
	s.untold = nil // the failed statement was the whole transaction
	s.env.Stats.Retries.Add(1)
	s.metrics().Retry()
	backoff := time.Duration(attempt) * time.Millisecond
	time.Sleep(backoff + rand.N(backoff))
	if err := s.boundLockWait(); err != nil {
		// The backend is gone: the retry's own send reports it.
		s.log.Debug("bounding the retry's lock wait", "err", err)
	}
	return true
}

// execGuarded folds the slots of every record the write may touch into the
// base rows, then runs the write, all in one transaction (the client's, or
// one the proxy opens and commits around an autocommit statement).
func (s *Session) execGuarded(p rewrite.Plan, op *rewrite.Guarded, ex *execution, seq *byte, more bool) (bool, error) {
	if op.Local {
		return s.execGuardedLocal(p, op, seq, more)
	}
	if len(op.Guards) == 1 && op.Guards[0].ScanWhere {
		// A statement over every row whose WHERE clause the server finds
		// always false (MySQL folds c < 0 on an UNSIGNED column) writes,
		// reads and locks nothing, whatever the isolation level: it runs
		// as written, without a guard (a rewritten clause that reads
		// totals is not folded, and its scan would lock rows).
		impossible, err := s.impossibleScan(op.Guards[0], ex)
		if err != nil {
			return false, err
		}
		if impossible {
			return s.execAsWritten(p, ex, seq, more)
		}
		checked, g := *op, *op.Guards[0]
		g.ScanWhere = false // asked already
		checked.Guards = []*rewrite.Guard{&g}
		op = &checked
	}
	return s.execGuardedWith(p, op, nil, ex, seq, more, func() ([]byte, []byte, error) {
		if ex != nil {
			return ex.payload, nil, nil
		}
		return queryPacket(op.SQL), nil, nil
	}, s.guardInOrder(p, op, ex, nil))
}

// guardInOrder returns, for a guarded UPDATE of several records of an
// integer key named by `key IN (…)` (a counter whose CHECK the slots
// cannot keep, say), the guard's lock that takes their rows one at a
// time, in the order the UPDATE writes them, up to the first the
// statement fails on: directly the UPDATE stops there (a range error, a
// CHECK), never reaching, or waiting for, the rows after it. After each
// row is locked and folded, the statement restricted to that row
// (Guarded.Restrict) is tried under a savepoint and undone; a failure
// there is the statement's at that row. nil when the statement is not
// such an UPDATE.
func (s *Session) guardInOrder(p rewrite.Plan, op *rewrite.Guarded, ex *execution, narrow func([]string)) func() ([]string, []byte, error) {
	if s.tablesLocked() {
		// Under LOCK TABLES no other session holds its rows, and an
		// autocommit statement runs outside any transaction, where a
		// trial could not be undone.
		return nil
	}
	if len(op.Guards) != 1 || op.Restrict == "" || !op.SingleTable || op.Delete || op.FoldAfter || p.Table == nil || p.Table.Key == "" && !p.Table.Keyed() {
		return nil
	}
	g := op.Guards[0]
	upper := strings.ToUpper(p.Original)
	if g.Wide || g.Fallback != nil || !strings.HasPrefix(strings.TrimSpace(upper), "UPDATE") || strings.Contains(upper, "ORDER BY") {
		return nil
	}
	if len(g.Keys) == 0 && g.KeysSQL != "" && s.autocommitted() {
		return s.scanInOrder(p, op, ex, narrow)
	}
	if len(g.Keys) < 2 || len(g.Keys) > maxTriedRows || p.Table.Key == "" {
		return nil
	}
	keys, ok := resolveKeys(p.Table, g.Keys, ex)
	if !ok || len(keys) < 2 {
		return nil
	}
	for _, k := range keys {
		if !canonicalInt([]byte(k)) {
			return nil
		}
	}
	sortIntKeys(keys)
	keys = slices.Compact(keys)
	t := p.Table
	return func() ([]string, []byte, error) {
		return s.lockEachInOrder(t, keys, s.tryEach(op, ex, len(keys)))
	}
}

// tryEach is lockEachInOrder's stops for n rows of op's statement: the
// statement tried on each row but the last (see tryRestricted).
func (s *Session) tryEach(op *rewrite.Guarded, ex *execution, n int) func(int, string) (bool, []byte, error) {
	return func(i int, k string) (bool, []byte, error) {
		if i == n-1 {
			return true, nil, nil
		}
		return s.tryRestricted(op, k, ex)
	}
}

// maxTriedRows bounds the rows a guarded UPDATE locks one at a time with a
// trial each (guardInOrder, scanInOrder): beyond it they are locked at
// once, as the statement's guard locks them.
const maxTriedRows = 16

// scanInOrder is guardInOrder for an autocommit UPDATE whose rows its
// WHERE clause finds by a scan (a condition that names no key): the rows it
// matches now, read without locks in the order the statement's own scan
// reads them (the guard's query, whose WHERE clause is the statement's),
// are locked, folded and tried one at a time up to the first it fails on;
// when none fails, every row it may touch is locked and folded as the
// guard locks them (rows committed since the read among them) — or, with
// narrow set, none other: narrow gets the rows locked, to which the caller
// narrows the statement (op.Restrict).
func (s *Session) scanInOrder(p rewrite.Plan, op *rewrite.Guarded, ex *execution, narrow func([]string)) func() ([]string, []byte, error) {
	g := op.Guards[0]
	t := p.Table
	plain, found := g.OrderSQL, g.OrderSQL != ""
	if !found {
		plain, found = g.ReadKeysSQL()
	}
	if !found {
		return nil
	}
	return func() ([]string, []byte, error) {
		var r *wire.Response
		var err error
		binaryRows := ex != nil && len(g.KeysParams) > 0
		if binaryRows {
			r, err = s.executeInternalRows(plain, ex.params, g.KeysParams, maxTriedRows)
		} else if err = s.send(queryPacket(plain)); err == nil {
			r, err = s.readRows(maxTriedRows)
		}
		var be *backendError
		switch {
		case errors.As(err, &be):
			return nil, be.pkt, nil
		case err != nil:
			return nil, nil, err
		case r.Failed():
			return nil, r.Err, nil
		}
		candidates, err := guardKeys(t, r, binaryRows)
		if err != nil {
			return nil, nil, err
		}
		if r.Dropped == 0 && narrow != nil {
			locked, errPkt, err := s.lockEachInOrder(t, candidates, s.tryEach(op, ex, len(candidates)))
			if err == nil && errPkt == nil {
				narrow(locked)
			}
			return locked, errPkt, err
		}
		if r.Dropped == 0 && len(candidates) > 0 {
			stopped := false
			try := s.tryEach(op, ex, len(candidates))
			locked, errPkt, err := s.lockEachInOrder(t, candidates, func(i int, k string) (bool, []byte, error) {
				if i == len(candidates)-1 {
					return false, nil, nil // the rest are locked below
				}
				stop, errPkt, err := try(i, k)
				stopped = stop
				return stop, errPkt, err
			})
			if err != nil || errPkt != nil || stopped {
				// Stopped: the statement fails at the last row locked.
				return locked, errPkt, err
			}
		}
		locked, errPkt, err := s.lockAndFoldKeys(op.Guards, ex)
		if errors.Is(err, errTooManyKeys) {
			// Every slotted record was folded instead (see
			// lockAndFoldKeys): which rows it locked is not known.
			return nil, nil, nil
		}
		return locked, errPkt, err
	}
}

// tryRestricted runs op's statement restricted to the record of key k
// under a savepoint, undoes it, and reports whether it failed (other than
// on a lock, whose error it returns).
func (s *Session) tryRestricted(op *rewrite.Guarded, k string, ex *execution) (fails bool, errPkt []byte, err error) {
	const sp = "`_slotproxy_try`"
	if r, err := s.query("SAVEPOINT " + sp); err != nil || r.Failed() {
		if err != nil {
			return false, nil, err
		}
		return false, r.Err, nil
	}
	restricted := op.Guards[0].Table.Narrowed(op.Restrict, []string{k}, false) // read by key: this row only
	buf, res, errPkt, err := s.sendMain(func() ([]byte, []byte, error) { return s.statementPacket(restricted, ex) })
	if err != nil || errPkt != nil {
		return false, errPkt, err
	}
	if res.Failed() && (res.ErrCode == mysql.ER_LOCK_DEADLOCK || res.ErrCode == mysql.ER_LOCK_WAIT_TIMEOUT) {
		return false, buf.Packets[len(buf.Packets)-1], nil
	}
	if ok, perr := wire.ParseOK(buf.Packets[len(buf.Packets)-1]); !res.Failed() && perr == nil && ok.Warnings > 0 {
		// The row's warnings (a note of a rounded value, say): the
		// statement raises them before a later row's lock stops it.
		if err := s.send(queryPacket("SHOW WARNINGS")); err != nil {
			return false, nil, err
		}
		w := &wire.Buffer{}
		if r, err := s.rd.Read(wire.Results, w); err != nil {
			return false, nil, err
		} else if !r.Failed() {
			for i, role := range w.Roles {
				if role == wire.RoleRow {
					s.triedWarnings = append(s.triedWarnings, w.Packets[i])
				}
			}
		}
	}
	for _, q := range []string{"ROLLBACK TO SAVEPOINT " + sp, "RELEASE SAVEPOINT " + sp} {
		if r, err := s.query(q); err != nil || r.Failed() {
			if err != nil {
				return false, nil, err
			}
			return false, r.Err, nil
		}
	}
	return res.Failed(), nil, nil
}

// execGuardedWith is execGuarded whose statement is main's: the command
// to send, or an ERR to report instead. inc, when set, is the increment
// op is made of (an increment run on the base row: see execOnBase).
//
// lock, when set, locks and folds the records in place of op's guards (see
// lockIncrementInOrder) and returns the keys it locked.
func (s *Session) execGuardedWith(p rewrite.Plan, op *rewrite.Guarded, inc *rewrite.Increment, ex *execution, seq *byte, more bool, main func() ([]byte, []byte, error), lock func() ([]string, []byte, error)) (bool, error) {
	// An autocommit statement gets a transaction of its own around the
	// fold and the statement; inside the client's transaction (or with
	// autocommit off) everything runs in the client's transaction.
	wrapped := s.autocommitted() && !s.tablesLocked()
	gm, refusal, err := s.guardModeFor(p, op, inc, ex, wrapped)
	if err != nil {
		return false, err
	}
	if refusal != "" {
		return true, s.refuse(p.Table, refusal, seq)
	}
	gm.lock = lock
	s.env.Stats.GuardedWrites.Add(1)
	s.metrics().Statement(PathGuarded, ruleName(p.Table))
	for attempt := 1; ; attempt++ {
		s.warnings = nil // a failed attempt's, if any
		res, errPkt, again, err := s.guardedOnce(p, op, ex, wrapped, gm, main)
		if err != nil {
			return false, err
		}
		if again {
			if attempt >= guardAttempts {
				// Like a lock wait timeout: the statement is undone, the
				// transaction stays open.
				return true, s.writeErr(wire.Errorf(mysql.ER_LOCK_WAIT_TIMEOUT, "HY000",
					"rows of %s kept appearing while this write ran; the statement was rolled back, try it again", ruleName(p.Table)).Packet(), seq)
			}
			continue
		}
		if errPkt == nil {
			// The statement's result, as it ended: in the proxy's own
			// transaction, its status says so, which the client's
			// autocommit statement's would not.
			status := func(st uint16) uint16 {
				if wrapped {
					st &^= mysql.SERVER_STATUS_IN_TRANS
				}
				if more {
					st |= mysql.SERVER_MORE_RESULTS_EXISTS
				}
				return st
			}
			if inc != nil && !wrapped && len(res.Packets) > 0 {
				if ok, err := wire.ParseOK(res.Packets[len(res.Packets)-1]); err == nil {
					s.recordIncrement(p, inc, ex, &ok)
				}
			}
			if err := s.writeHeld(res, seq, status); err != nil {
				return false, err
			}
			return false, s.afterSuccess(p)
		}
		code := wire.ErrCode(errPkt)
		if wrapped && s.retry(code, attempt) {
			continue
		}
		if !wrapped && inc != nil && code == mysql.ER_LOCK_DEADLOCK && attempt <= guardAttempts {
			// An increment on the base row in a transaction that has run
			// nothing but increments: the transaction runs again (see
			// replay.go) and the increment with it.
			if again, err := s.replayTxn(); err != nil || again {
				if err != nil {
					return false, err
				}
				continue
			}
		}
		return true, s.writeErr(errPkt, seq)
	}
}

// execGuardedLocal runs a LOAD DATA LOCAL … REPLACE (op.Local): its guards
// fold the records it may replace, then its response is relayed to the
// client as it comes (the server asks the client for its file in the
// middle of it), all in one transaction, once: the client's file cannot
// be asked for again.
func (s *Session) execGuardedLocal(p rewrite.Plan, op *rewrite.Guarded, seq *byte, more bool) (bool, error) {
	wrapped := s.autocommitted() && !s.tablesLocked()
	gm, refusal, err := s.guardModeFor(p, op, nil, nil, wrapped)
	if err != nil {
		return false, err
	}
	if refusal != "" {
		return true, s.refuse(p.Table, refusal, seq)
	}
	s.env.Stats.GuardedWrites.Add(1)
	s.metrics().Statement(PathGuarded, ruleName(p.Table))
	s.warnings = nil
	s.wrapping = wrapped
	defer func() { s.wrapping = false }()
	end := func(cmd string) error {
		if !wrapped {
			return nil
		}
		_, err := s.query(cmd)
		return err
	}
	if wrapped {
		if gm.repeatable {
			if errPkt, err := s.queryErr("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil || errPkt != nil {
				return errPkt != nil, errOr(err, s.writeErr(errPkt, seq))
			}
		}
		if errPkt, err := s.queryErr("BEGIN"); err != nil || errPkt != nil {
			return errPkt != nil, errOr(err, s.writeErr(errPkt, seq))
		}
	}
	if errPkt, err := s.lockAndFold(op.Guards, nil); err != nil || errPkt != nil {
		if err != nil {
			return false, err
		}
		if wrapped {
			if err := s.saveWarnings(); err != nil {
				return false, err
			}
		}
		if err := end("ROLLBACK"); err != nil {
			return false, err
		}
		return true, s.writeErr(errPkt, seq)
	}
	if err := s.send(queryPacket(op.SQL)); err != nil {
		return false, err
	}
	f := &wire.Forward{Client: s.link.Client, Server: s.link.Backend, Caps: s.link.Caps, Seq: seq, More: more}
	if wrapped {
		f.Status = func(st uint16) uint16 { return st &^ mysql.SERVER_STATUS_IN_TRANS }
	}
	res, err := s.rd.Read(wire.Results, f)
	if err != nil {
		return false, err
	}
	s.Observe(res)
	if res.Failed() {
		if wrapped {
			if err := s.saveWarnings(); err != nil {
				return false, err
			}
		}
		if err := end("ROLLBACK"); err != nil {
			return false, err
		}
		return true, nil
	}
	if wrapped {
		// COMMIT clears the load's warnings: keep them.
		if err := s.saveWarnings(); err != nil {
			return false, err
		}
		// The client has its OK: a COMMIT that fails now cannot answer it.
		r, err := s.query("COMMIT")
		if err == nil && r.Failed() {
			err = &backendError{r.Err}
		}
		if err != nil {
			return false, fmt.Errorf("%w: committing the fold and the load: %w", ErrAnswered, err)
		}
		if gm.repeatable {
			s.rw.weakAt, s.rw.weakTx = 0, false
		}
	}
	return false, s.afterSuccess(p)
}

// guardAttempts bounds the attempts of a guarded write at READ COMMITTED
// whose keys' rows keep appearing while it runs (guardByKey).
const guardAttempts = 10

// guardMode is how a guarded write keeps its fold exact.
type guardMode struct {
	// repeatable: the proxy's own transaction runs at REPEATABLE READ
	// (the session's level is weaker).
	repeatable bool
	// keys: the client's transaction runs at READ COMMITTED or READ
	// UNCOMMITTED, and the statement touches only rows of these keys
	// (canonical integers) of table: those rows are locked by key, the
	// statement runs, and when keys without a row got one meanwhile, it
	// is undone (to a savepoint) and runs again.
	keys  []string
	table *rewrite.Table
	// restrict: the client's transaction runs at READ COMMITTED or READ
	// UNCOMMITTED, and the statement runs as its Guarded.Restrict with the
	// keys its guard locked: it touches no row whose slots the guard did
	// not fold, as if it had run when the guard did.
	restrict bool
	// unguarded: the statement may touch rows whose slots its guard did
	// not fold (a DELETE at READ COMMITTED that cannot be narrowed): it
	// runs as Plan.Unguarded, which reads their counters as totals.
	unguarded bool
	// lock, when set, locks and folds the records instead of the guards.
	lock func() (locked []string, errPkt []byte, err error)
}

// guardModeFor decides how plan p's guards keep their fold exact at the
// session's isolation level, or why they cannot (refusal; nothing has
// run). A guard's locking read (FOR UPDATE) takes gap locks only at
// REPEATABLE READ and SERIALIZABLE: at a weaker level a row the guard did
// not lock can appear, with increments in its slots, before the
// statement writes it.
func (s *Session) guardModeFor(p rewrite.Plan, op *rewrite.Guarded, inc *rewrite.Increment, ex *execution, wrapped bool) (guardMode, string, error) {
	if s.tablesLocked() || inc != nil || rewrite.Has[*rewrite.Reload](p) {
		// LOCK TABLES: nobody else writes the table. An increment run on
		// the base row adds to whatever it finds: a slot it did not fold
		// still counts.
		return guardMode{}, "", nil
	}
	weak, err := s.weakIsolation()
	if err != nil || !weak {
		return guardMode{}, "", err
	}
	if wrapped {
		// The proxy's own transaction: at REPEATABLE READ, whose gap locks
		// keep rows from appearing between the fold and the statement;
		// but a statement of one key runs at the session's level, as
		// directly (neither waits for a gap another transaction locked),
		// its row locked by key and the statement run again if that row
		// appeared meanwhile (see guardMode.keys).
		if len(op.Guards) == 1 && len(op.Guards[0].Keys) == 1 && !op.Guards[0].Wide {
			g := op.Guards[0]
			if keys, ok := resolveKeys(g.Table, g.Keys, ex); ok && len(keys) == 1 {
				return guardMode{keys: keys, table: g.Table}, "", nil
			}
		}
		return guardMode{repeatable: true}, "", nil
	}
	level := strings.ReplaceAll(s.isolation(), "-", " ")
	if s.rw.weakAt != 0 && !strings.HasPrefix(level, "READ") {
		level = "the level a SET TRANSACTION statement chose"
	}
	refusal := "the transaction runs at " + level + ", where InnoDB takes no gap locks, so rows this write finds only as it runs " +
		"could hold increments the proxy did not fold. Run it at REPEATABLE READ or SERIALIZABLE, in autocommit, or name its rows by key (" +
		keyName(p) + " = value or IN (values))"
	g := op.Guards[0]
	narrowable := len(op.Guards) == 1 && (len(g.Keys) > 0 || op.Restrict != "" && !g.Wide)
	if op.Delete && !narrowable {
		// A DELETE the proxy cannot narrow to the rows its guard locked
		// (no WHERE clause, several tables) runs as usual: a row it finds
		// only as it runs leaves slot rows without a base row, which no
		// total reads and roll-up deletes (docs/limits.md).
		return guardMode{unguarded: true}, "", nil
	}
	if !narrowable {
		// Its guard locks the slotted records only (a WHERE clause that
		// reads counters only, or none): rows it finds as it runs could
		// hold increments the guard did not fold.
		return guardMode{}, refusal, nil
	}
	if len(g.Keys) == 0 {
		return guardMode{restrict: true}, "", nil
	}
	keys, ok := resolveKeys(g.Table, g.Keys, ex)
	if !ok {
		return guardMode{}, refusal, nil
	}
	return guardMode{keys: keys, table: g.Table}, "", nil
}

// recordKey returns the key (rewrite.Table.KeyOf) of a record of t, a
// keyed table, named by parts (see rewrite.KeyValue.Parts), or "" when a
// parameter's value cannot be encoded exactly.
func recordKey(t *rewrite.Table, parts []rewrite.KeyValue, ex *execution) string {
	if len(parts) != len(t.KeyColumns) {
		return ""
	}
	enc := make([]string, len(parts))
	for i, p := range parts {
		if p.Param < 0 {
			enc[i] = p.Literal
			continue
		}
		if ex == nil {
			return ""
		}
		v := rewrite.KeyPart{}
		if t.KeyColumns[i].Integer {
			d, _ := ex.params.intParam(p.Param)
			v = rewrite.IntKeyPart(d)
		} else if str, ok := ex.params.stringParam(p.Param); ok {
			v = rewrite.StrKeyPart(str)
		}
		e, ok := rewrite.EncodeKeyPart(v, t.KeyColumns[i])
		if !ok {
			return ""
		}
		enc[i] = e
	}
	return "'" + strings.Join(enc, ",") + "'"
}

// resolveKeys returns the values of keys (literals, or the execution's
// parameters) as canonical decimal integers without repeats (a keyed
// table's record keys as they are), or false when one is not exactly an
// integer.
func resolveKeys(t *rewrite.Table, kvs []rewrite.KeyValue, ex *execution) ([]string, bool) {
	keys := make([]string, 0, len(kvs))
	for _, k := range kvs {
		v := ""
		switch {
		case k.Parts != nil:
			v = recordKey(t, k.Parts, ex) // a keyed table's record
		case k.Param < 0:
			v = literalKey(k.Literal)
		case ex != nil:
			v, _ = ex.params.intParam(k.Param)
		}
		if v == "" {
			return nil, false
		}
		if !slices.Contains(keys, v) {
			keys = append(keys, v)
		}
	}
	return keys, true
}

// keyName is the key column of the table a plan writes, for messages.
func keyName(p rewrite.Plan) string {
	if p.Table == nil {
		return "key"
	}
	return p.Table.KeyDescription()
}

// guardedOnce runs one attempt of a guarded write: the statement's whole
// response (an OK, or the rows of a RETURNING clause), or the ERR to report
// (the proxy's own transaction already rolled back), or again: the attempt
// was undone and must be made again (guardMode.keys).
func (s *Session) guardedOnce(p rewrite.Plan, op *rewrite.Guarded, ex *execution, wrapped bool, gm guardMode, main func() ([]byte, []byte, error)) (_ *wire.Buffer, _ []byte, again bool, _ error) {
	s.triedWarnings = nil
	s.wrapping = wrapped
	defer func() { s.wrapping = false }()
	// In a client's transaction that may have read, the fold makes the
	// records' rows the transaction's own versions (visible to its
	// snapshot, refreshed): undone with the statement when it fails, as
	// directly a failed statement leaves them as they were.
	undoable := false
	if !wrapped {
		var err error
		if undoable, err = s.snapshotFolds(); err != nil {
			return nil, nil, false, err
		}
		if undoable {
			if errPkt, err := s.queryErr("SAVEPOINT " + foldSavepoint); err != nil || errPkt != nil {
				return nil, errPkt, false, err
			}
		}
	}
	undo := func(code uint16) error {
		if !undoable || code == mysql.ER_LOCK_DEADLOCK {
			return nil // (a deadlock rolled the whole transaction back)
		}
		if s.warnings == nil {
			// ROLLBACK TO SAVEPOINT clears the diagnostics: keep them.
			if err := s.saveWarnings(); err != nil {
				return err
			}
		}
		_, err := s.query("ROLLBACK TO SAVEPOINT " + foldSavepoint)
		return err
	}
	fail := func(pkt []byte) (*wire.Buffer, []byte, bool, error) {
		if wrapped {
			if _, err := s.query("ROLLBACK"); err != nil {
				return nil, nil, false, err
			}
		}
		return nil, pkt, false, nil
	}
	// A statement of the proxy's own failed in place of the client's (a
	// lock wait its guard met, say): the diagnostics are the client's
	// statement's, kept before the ROLLBACK that would clear them.
	failOwn := func(pkt []byte) (*wire.Buffer, []byte, bool, error) {
		var err error
		switch code := wire.ErrCode(pkt); {
		case code == mysql.ER_LOCK_WAIT_TIMEOUT || code == mysql.ER_LOCK_DEADLOCK:
			// MariaDB lists the error twice after an UPDATE or DELETE of
			// one table that reads its rows by key, once after one that
			// scans (WHERE c IS NULL).
			n := 1
			byKey := gm.keys != nil || gm.lock != nil || len(op.Guards) > 0 && len(op.Guards[0].Keys) > 0
			if op.SingleTable && s.dial.IsMariaDB() && byKey {
				n = 2
			}
			err = s.lockErrorRows(code, func() int { return n })
			if err == nil && len(s.triedWarnings) > 0 && s.warnings != nil {
				// The warnings of the rows before the one it waited for.
				b := s.warnings
				at := slices.Index(b.Roles, wire.RoleRow)
				if at < 0 {
					at = len(b.Roles) - 1 // before the result's end
				}
				for _, row := range s.triedWarnings {
					b.Packets = slices.Insert(b.Packets, at, row)
					b.Roles = slices.Insert(b.Roles, at, wire.RoleRow)
					at++
				}
			}
		case wrapped:
			err = s.saveWarnings()
		}
		if err != nil {
			return nil, nil, false, err
		}
		if err := undo(wire.ErrCode(pkt)); err != nil {
			return nil, nil, false, err
		}
		return fail(pkt)
	}
	run := s.queryErr
	if wrapped {
		if gm.repeatable {
			// One transaction's level: the session's own is untouched.
			if errPkt, err := run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil || errPkt != nil {
				return nil, errPkt, false, err
			}
		}
		if errPkt, err := run("BEGIN"); err != nil || errPkt != nil {
			return nil, errPkt, false, err
		}
	}
	if op.FoldAfter && undoable {
		return s.foldAfter(op, ex, main, fail, failOwn)
	}
	var missing []string
	if gm.keys != nil {
		var errPkt []byte
		var err error
		missing, errPkt, err = s.lockKeysAndFold(gm.table, gm.keys)
		if err != nil {
			return nil, nil, false, err
		}
		if errPkt != nil {
			return failOwn(errPkt)
		}
		if len(missing) > 0 {
			if errPkt, err := run("SAVEPOINT " + guardSavepoint); err != nil || errPkt != nil {
				return nil, errPkt, false, err
			}
		}
		if s.env.GuardWindow != nil {
			s.env.GuardWindow()
		}
	} else if gm.lock != nil {
		if _, errPkt, err := gm.lock(); err != nil || errPkt != nil {
			if err != nil {
				return nil, nil, false, err
			}
			return failOwn(errPkt)
		}
	} else if locked, errPkt, err := s.lockAndFoldKeys(op.Guards, ex); errPkt != nil || err != nil && !errors.Is(err, errTooManyKeys) {
		if err != nil {
			return nil, nil, false, err
		}
		return failOwn(errPkt)
	} else if gm.restrict && err != nil {
		// Narrowing it to the rows its guard locked would need their keys.
		return fail(wire.Errorf(mysql.ER_NOT_SUPPORTED_YET, "42000",
			"rule %s: statement refused: it may touch more than %d rows at %s; run it at REPEATABLE READ or in autocommit",
			ruleName(p.Table), s.maxGuardKeys(), strings.ReplaceAll(s.isolation(), "-", " ")).Packet())
	} else if gm.restrict {
		if s.env.GuardWindow != nil {
			s.env.GuardWindow()
		}
		restricted := p.Table.Narrowed(op.Restrict, locked, true)
		main = func() ([]byte, []byte, error) { return s.statementPacket(restricted, ex) }
	}
	if gm.unguarded && op.Unguarded != "" {
		main = func() ([]byte, []byte, error) { return s.statementPacket(op.Unguarded, ex) }
	}
	buf, res, errPkt, err := s.sendMain(main)
	if err != nil {
		return nil, nil, false, err
	}
	if errPkt != nil {
		return fail(errPkt)
	}
	if res.Failed() {
		s.noteErr(res.ErrCode)
		if wrapped {
			// ROLLBACK clears the server's diagnostics: keep them.
			if err := s.saveWarnings(); err != nil {
				return nil, nil, false, err
			}
		}
		if err := undo(res.ErrCode); err != nil {
			return nil, nil, false, err
		}
		return fail(buf.Packets[len(buf.Packets)-1])
	}
	s.noteStatus(res)
	if wrapped || len(missing) > 0 {
		// COMMIT and the checks below clear the server's diagnostics.
		if err := s.keepWarningsOf(buf); err != nil {
			return nil, nil, false, err
		}
	}
	if len(missing) > 0 {
		// Keys that had no row when they were locked: if one has a row
		// now, it appeared before the statement ran (the statement may
		// have written it, with slots never folded): undo and again.
		appeared, errPkt, err := s.lockKeys(gm.table, missing)
		if err != nil || errPkt != nil {
			return nil, errPkt, false, err
		}
		if len(appeared) > 0 {
			// Only a row with slot rows matters: one without (the row an
			// upsert inserted itself, say) was written exactly.
			if appeared, errPkt, err = s.slotted(gm.table, appeared); err != nil || errPkt != nil {
				return nil, errPkt, false, err
			}
		}
		if len(appeared) > 0 {
			s.warnings = nil
			if errPkt, err := run("ROLLBACK TO SAVEPOINT " + guardSavepoint); err != nil || errPkt != nil {
				return nil, errPkt, false, err
			}
			return nil, nil, true, nil
		}
		if errPkt, err := run("RELEASE SAVEPOINT " + guardSavepoint); err != nil || errPkt != nil {
			return nil, errPkt, false, err
		}
	}
	if wrapped {
		if errPkt, err := run("COMMIT"); err != nil || errPkt != nil {
			return nil, errPkt, false, err
		}
		if gm.repeatable {
			// The proxy's transaction used up any one-shot level.
			s.rw.weakAt, s.rw.weakTx = 0, false
		}
	}
	return buf, nil, false, nil
}

// foldAfter runs a guarded write whose guards fold after it (op.FoldAfter)
// in the client's transaction, after the savepoint its undo returns to:
// the statement first, as directly; when it succeeded, its guards lock
// and fold its records (a failure there undoes the statement and is
// reported instead); then its result, kept until then, is the client's.
func (s *Session) foldAfter(op *rewrite.Guarded, ex *execution, main func() ([]byte, []byte, error),
	fail, failOwn func([]byte) (*wire.Buffer, []byte, bool, error)) (*wire.Buffer, []byte, bool, error) {
	buf, res, errPkt, err := s.sendMain(main)
	if err != nil {
		return nil, nil, false, err
	}
	if errPkt != nil {
		return fail(errPkt)
	}
	if res.Failed() {
		// Nothing folded yet: nothing to undo.
		s.noteErr(res.ErrCode)
		return fail(buf.Packets[len(buf.Packets)-1])
	}
	s.noteStatus(res)
	if changedNone(buf) {
		// An UPDATE that changed no row made none of them the
		// transaction's own version: its snapshot still sees their old
		// versions, slots included, as directly (a refresh would make
		// them its own, and a row inserted after the snapshot visible).
		return buf, nil, false, nil
	}
	if err := s.keepWarningsOf(buf); err != nil { // the fold clears the server's diagnostics
		return nil, nil, false, err
	}
	if errPkt, err := s.lockAndFold(op.Guards, ex); err != nil || errPkt != nil {
		if err != nil {
			return nil, nil, false, err
		}
		s.warnings = nil // the statement's are undone with it
		return failOwn(errPkt)
	}
	return buf, nil, false, nil
}

// changedNone reports whether buf ends with the OK of an UPDATE that
// changed no row ("Rows matched: N  Changed: 0  Warnings: W").
func changedNone(buf *wire.Buffer) bool {
	last := buf.Packets[len(buf.Packets)-1]
	if len(last) == 0 || last[0] != 0x00 {
		return false
	}
	ok, err := wire.ParseOK(last)
	if err != nil {
		return false
	}
	_, rest, found := bytes.Cut(ok.Info, []byte("Changed: "))
	if !found {
		return false
	}
	n := bytes.IndexByte(rest, ' ')
	if n < 0 {
		n = len(rest)
	}
	return string(rest[:n]) == "0"
}

// sendMain sends the command main makes and reads its result; errPkt is
// the ERR main gives instead of a command (nothing was sent).
func (s *Session) sendMain(main func() ([]byte, []byte, error)) (buf *wire.Buffer, res wire.Result, errPkt []byte, err error) {
	payload, errPkt, err := main()
	if err != nil || errPkt != nil {
		return nil, wire.Result{}, errPkt, err
	}
	if err := s.send(payload); err != nil {
		return nil, wire.Result{}, nil, err
	}
	buf = &wire.Buffer{}
	res, err = s.rd.Read(wire.Results, buf)
	return buf, res, nil, err
}

// keepWarningsOf saves the server's diagnostics (saveWarnings) when the
// result buf ends with an OK that carries warnings: for a statement of
// the client's that statements of the proxy's own follow.
func (s *Session) keepWarningsOf(buf *wire.Buffer) error {
	last := buf.Packets[len(buf.Packets)-1]
	if len(last) == 0 || last[0] != 0x00 {
		return nil
	}
	if ok, err := wire.ParseOK(last); err == nil && ok.Warnings > 0 {
		return s.saveWarnings()
	}
	return nil
}

// statementPacket is the command that runs sql for a text statement (ex
// nil) or, with the execution's parameters, for a prepared one (sql has
// the same placeholders in the same order as the client's statement): the
// command, or an ERR to report instead.
func (s *Session) statementPacket(sql string, ex *execution) ([]byte, []byte, error) {
	if ex == nil {
		return queryPacket(sql), nil, nil
	}
	id, err := s.internalStmt(sql)
	if err != nil {
		var be *backendError
		if errors.As(err, &be) {
			return nil, be.pkt, nil
		}
		return nil, nil, err
	}
	idx := make([]int, ex.params.n)
	for i := range idx {
		idx[i] = i
	}
	pkt, err := ex.params.executePacket(id, idx)
	if err != nil {
		return nil, errLongData(), nil
	}
	return pkt, nil, nil
}

// guardSavepoint is the savepoint a guarded write at READ COMMITTED may
// return to (guardMode.keys).
const guardSavepoint = "`_slotproxy_guard`"

// foldSavepoint is the savepoint a guarded write in a transaction that
// may have read returns to when its statement fails (undoing its fold).
const foldSavepoint = "`_slotproxy_fold`"

// lockKeys locks the base rows of keys of t (FOR UPDATE) and returns the
// keys that have one.
func (s *Session) lockKeys(t *rewrite.Table, keys []string) (found []string, errPkt []byte, err error) {
	return s.queryKeys(t, t.LockSQL(keys))
}

// queryKeys runs a statement of the proxy's own that selects keys of t
// (record ids) in its first column, and returns them (or the server's ERR).
func (s *Session) queryKeys(t *rewrite.Table, sql string) (found []string, errPkt []byte, err error) {
	r, err := s.query(sql)
	if err != nil {
		return nil, nil, err
	}
	if r.Failed() {
		return nil, r.Err, nil
	}
	for _, row := range r.Rows {
		vals, err := wire.TextRow(row)
		if err != nil || len(vals) == 0 || vals[0] == nil || !t.Keyed() && !isInteger(vals[0]) {
			return nil, nil, errors.New("guard: key is not a record id")
		}
		found = append(found, t.KeyOf(string(vals[0])))
	}
	return found, nil, nil
}

// slotted returns the keys of t among keys that have slot rows.
func (s *Session) slotted(t *rewrite.Table, keys []string) (found []string, errPkt []byte, err error) {
	return s.queryKeys(t, t.SlottedSQL(keys))
}

// lockKeysAndFold locks the base rows of keys of t and folds their slots;
// missing are the keys without a row.
func (s *Session) lockKeysAndFold(t *rewrite.Table, keys []string) (missing []string, errPkt []byte, err error) {
	found, errPkt, err := s.lockKeys(t, keys)
	if err != nil || errPkt != nil {
		return nil, errPkt, err
	}
	for _, k := range keys {
		if !slices.Contains(found, k) {
			missing = append(missing, k)
		}
	}
	errPkt, err = s.foldKeys(t, found)
	return missing, errPkt, err
}

// refreshing returns p as the guarded write it must run as now (ok): a
// write of rows of a ruled table that assigns no counter (WriteOthers), in
// a transaction whose snapshot may predate folds of those records
// (snapshotFolds). Its guard folds and refreshes them first.
func (s *Session) refreshing(p rewrite.Plan) (g rewrite.Plan, ok bool, err error) {
	w, isWrite := p.Op.(*rewrite.WriteOthers)
	if !isWrite || p.Shadow {
		return p, false, nil
	}
	on, err := s.snapshotFolds()
	if err != nil || !on {
		return p, false, err
	}
	g = p
	// A write that reads no counter refreshes its records after it ran
	// (its rows are then the transaction's own, locked as directly).
	g.Op, g.Table = &rewrite.Guarded{SQL: w.SQL, Guards: []*rewrite.Guard{w.Guard}, FoldAfter: len(w.Reads) == 0}, w.Guard.Table
	return g, true, nil
}

// snapshotFolds reports whether a fold now runs in the client's
// transaction at REPEATABLE READ or SERIALIZABLE after it may have read: its
// snapshot may then predate other folds of the records, and the fold
// refreshes them (rewrite.Table.FoldSQL). A transaction that has run only
// its BEGIN (not WITH CONSISTENT SNAPSHOT) and slotted increments has no
// snapshot yet: its first plain read makes one.
func (s *Session) snapshotFolds() (bool, error) {
	if !s.inTransaction() || s.wrapping {
		return false, nil
	}
	if s.txn.begin != nil && !bytes.Contains(bytes.ToUpper(s.txn.begin), []byte("SNAPSHOT")) && s.replayable() {
		return false, nil
	}
	if err := s.ensureSessionInfo(); err != nil {
		return false, err
	}
	// A weaker level the session variable shows takes a new snapshot per
	// statement; one a statement may have set (weakAt) is not certain, and
	// refreshing at READ COMMITTED changes nothing.
	return !strings.HasPrefix(s.isolation(), "READ"), nil
}

// guardKeys returns the keys of t in r, the rows of a guard's KeysSQL or
// OrderSQL (as text, or with binaryRows in the binary protocol): the first
// column of each, of at most 6 (one byte of NULL bitmap).
func guardKeys(t *rewrite.Table, r *wire.Response, binaryRows bool) ([]string, error) {
	keys := make([]string, 0, len(r.Rows))
	more := len(r.Columns) > 1
	if len(r.Columns) > 6 {
		return nil, errors.New("guard: more than 6 columns")
	}
	for _, row := range r.Rows {
		var k string
		var ok bool
		switch {
		case binaryRows && t.Keyed():
			k, ok = binaryString(row, more)
			k = t.KeyOf(k)
		case binaryRows:
			k, ok = binaryInt(r.Columns[0], row)
		default:
			if vals, err := wire.TextRow(row); err == nil && len(vals) == len(r.Columns) && vals[0] != nil {
				k, ok = t.KeyOf(string(vals[0])), t.Keyed() || isInteger(vals[0])
			}
		}
		if !ok {
			return nil, errors.New("guard: key is not a record id")
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// lockAndFold runs guards: each locks the records its statement may touch
// and their slots are folded into their base rows. errPkt is the error to
// report (the statement must not run).
func (s *Session) lockAndFold(guards []*rewrite.Guard, ex *execution) (errPkt []byte, err error) {
	_, errPkt, err = s.lockAndFoldKeys(guards, ex)
	if errors.Is(err, errTooManyKeys) {
		err = nil // the records are folded; which keys is not needed
	}
	return errPkt, err
}

// lockAndFoldKeys is lockAndFold that also returns the keys the first
// guard locked, or errTooManyKeys when they were too many to keep (the
// records are folded all the same).
func (s *Session) lockAndFoldKeys(guards []*rewrite.Guard, ex *execution) (locked []string, errPkt []byte, err error) {
	overflowed := false
	for i, g := range guards {
		if g.Fallback != nil {
			if g, errPkt, err = s.probeGuard(g, ex); err != nil || errPkt != nil {
				return nil, errPkt, err
			}
		}
		t := g.Table
		if g.ScanSQL != "" {
			if err := s.ensureSessionInfo(); err != nil {
				return nil, nil, err
			}
		}
		if g.ScanSQL != "" && s.locksGaps() {
			if impossible, err := s.impossibleScan(g, ex); err != nil {
				return nil, nil, err
			} else if impossible {
				continue // the statement reads no row: nothing to lock or fold
			}
			// Every base row and gap locked, as the statement's own
			// scan locks them; then the slotted records, read by key.
			if _, errPkt, err := s.guardQuery(g.ScanSQL, ex, g.ScanParams); err != nil || errPkt != nil {
				return nil, errPkt, err
			}
			if errPkt, err := s.foldAllSlotted(t); err != nil || errPkt != nil {
				return nil, errPkt, err
			}
			continue
		}
		if byKey, ok := resolveKeys(t, g.Keys, ex); ok && len(byKey) > 0 {
			// The statement touches rows of these keys only: they are
			// locked by key, as the statement itself locks them (its
			// WHERE clause's other conditions never unlock a row it read).
			keys, errPkt, err := s.lockKeys(t, byKey)
			if err != nil || errPkt != nil {
				return nil, errPkt, err
			}
			if i == 0 {
				locked = slices.Clone(keys)
			}
			if errPkt, err := s.foldKeys(t, keys); err != nil || errPkt != nil {
				return nil, errPkt, err
			}
			continue
		}
		var keysResp *wire.Response
		binaryRows := false
		if ex != nil && len(g.KeysParams) > 0 {
			keysResp, err = s.executeInternalRows(g.KeysSQL, ex.params, g.KeysParams, s.maxGuardKeys())
			binaryRows = true
		} else {
			if err = s.send(queryPacket(g.KeysSQL)); err == nil {
				keysResp, err = s.readRows(s.maxGuardKeys())
			}
		}
		if err != nil {
			var be *backendError
			if errors.As(err, &be) {
				return nil, be.pkt, nil
			}
			return nil, nil, err
		}
		if keysResp.Failed() {
			return nil, keysResp.Err, nil
		}
		keys, err := guardKeys(t, keysResp, binaryRows)
		if err != nil {
			return nil, nil, err
		}
		if keysResp.Dropped > 0 {
			// More rows than the proxy keeps keys of: every slotted
			// record it may touch is among the table's slotted records,
			// which are folded instead (those the statement does not
			// touch as well).
			if i == 0 {
				locked = nil
				overflowed = true
			}
			if errPkt, err := s.foldAllSlotted(t); err != nil || errPkt != nil {
				return nil, errPkt, err
			}
			continue
		}
		if i == 0 {
			locked = slices.Clone(keys)
		}
		if errPkt, err := s.foldKeys(t, keys); err != nil || errPkt != nil {
			return nil, errPkt, err
		}
	}
	if overflowed {
		return nil, nil, errTooManyKeys
	}
	return locked, nil, nil
}

// probeGuard returns g, whose locking read may name rows that do not
// exist, or the guard to run instead, g.Fallback (see
// rewrite.Guard.Fallback). In a transaction of the proxy's own g's probe
// decides: g when it finds a row (locked as the statement locks it), else
// g.Fallback (a locking read of a row that does not exist would lock the
// gap where it goes, which the statement does not). In the client's
// transaction, where a probe would take the transaction's snapshot early,
// g runs: a row that does not exist has its gap locked (none can be
// inserted there until the transaction ends, so there is nothing to fold),
// which two such upserts of one new row meet (docs/limits.md). (At READ
// COMMITTED, where no gap is locked, guardModeFor refuses the statement.)
func (s *Session) probeGuard(g *rewrite.Guard, ex *execution) (*rewrite.Guard, []byte, error) {
	if !s.wrapping {
		return g, nil, nil
	}
	r, errPkt, err := s.guardQuery(g.ProbeSQL, ex, g.KeysParams)
	if err != nil || errPkt != nil {
		return nil, errPkt, err
	}
	if len(r.Rows) == 0 && r.Dropped == 0 {
		return g.Fallback, nil, nil
	}
	return g, nil, nil
}

// guardQuery runs a guard's sql, which takes the client's parameters
// params of a prepared statement's execution ex (nil for text), keeping
// at most one row of its result when it runs prepared. errPkt is the
// server's error to report.
func (s *Session) guardQuery(sql string, ex *execution, params []int) (r *wire.Response, errPkt []byte, err error) {
	if ex != nil && len(params) > 0 {
		r, err = s.executeInternalRows(sql, ex.params, params, 1)
	} else {
		r, err = s.query(sql)
	}
	if err != nil {
		var be *backendError
		if errors.As(err, &be) {
			return nil, be.pkt, nil
		}
		return nil, nil, err
	}
	if r.Failed() {
		return nil, r.Err, nil
	}
	return r, nil, nil
}

// impossibleScan reports whether the server finds the WHERE clause of a
// scan guard's statement always false (MySQL does for c < 0 on an UNSIGNED
// column): its EXPLAIN says "Impossible WHERE". The statement then reads,
// locks and writes no row. False when the guard has no WHERE clause or
// placeholders in it.
func (s *Session) impossibleScan(g *rewrite.Guard, ex *execution) (bool, error) {
	if !g.ScanWhere || ex != nil && len(g.ScanParams) > 0 {
		return false, nil
	}
	r, err := s.query("EXPLAIN " + g.ScanSQL)
	if err != nil || r.Failed() {
		return false, err
	}
	for _, row := range r.Rows {
		vals, err := wire.TextRow(row)
		if err != nil {
			return false, nil
		}
		for _, v := range vals {
			// MariaDB's Extra column, or MySQL's tree ("-> Zero input
			// rows (Impossible WHERE), …"); not "Impossible WHERE
			// noticed after reading const tables", which depends on
			// base values.
			if string(bytes.TrimSpace(v)) == "Impossible WHERE" || bytes.Contains(v, []byte("(Impossible WHERE)")) {
				return true, nil
			}
		}
	}
	return false, nil
}

// locksGaps reports whether the session's statements lock the gaps they
// scan: at REPEATABLE READ or SERIALIZABLE, as far as the proxy knows.
func (s *Session) locksGaps() bool {
	return s.isolation() != "" && !strings.HasPrefix(s.isolation(), "READ") && s.rw.weakAt == 0
}

// errTooManyKeys: the first guard locked more rows than the proxy keeps
// keys of (maxGuardKeys), so the keys it locked are not known; the
// records were folded.
var errTooManyKeys = errors.New("the guard locked more rows than the proxy keeps keys of")

// maxGuardKeys is the Env's bound on the keys a guard keeps in memory: a
// write of more rows (a DELETE of a whole table, say) folds the table's
// slotted records instead of the ones among its rows (foldAllSlotted).
func (s *Session) maxGuardKeys() int {
	if s.env.MaxGuardKeys > 0 {
		return s.env.MaxGuardKeys
	}
	return 100_000
}

// foldAllSlotted folds every record of t that has slot rows with counts,
// in pages of foldBatch keys: their base rows are locked and folded (see
// foldKeys). Which records have them is read where every row that counts
// is visible (see slotRowsOf). A fold that refreshes (snapshotFolds) takes
// the records with rows roll-up zeroed too: the transaction's snapshot
// may predate their zeroing and still see their counts.
func (s *Session) foldAllSlotted(t *rewrite.Table) (errPkt []byte, err error) {
	refresh, err := s.snapshotFolds()
	if err != nil {
		return nil, err
	}
	after := ""
	for {
		keys, next, ok, err := s.slottedKeys(t, after, foldBatch, refresh)
		if err != nil {
			return nil, err
		}
		if !ok {
			// Cannot be read exactly: every slotted record, locked by
			// range (the gaps too).
			_, errPkt, err := s.lockAndFoldKeys([]*rewrite.Guard{{Table: t, KeysSQL: t.WideLockSQL(), Wide: true}}, nil)
			return errPkt, err
		}
		if len(keys) == 0 {
			return nil, nil
		}
		found, errPkt, err := s.lockKeys(t, keys)
		if err != nil || errPkt != nil {
			return errPkt, err
		}
		if errPkt, err := s.foldKeys(t, found); err != nil || errPkt != nil {
			return errPkt, err
		}
		if next == "" {
			return nil, nil
		}
		after = next
	}
}

// execLockedRead runs a locking read of counters (p.Locking): the records
// it may read are locked and folded first (the client's transaction, or
// one of the proxy's own around an autocommit statement), so it reads the
// latest totals and concurrent increments of them wait.
//
// Once its guards ran at REPEATABLE READ or SERIALIZABLE, every record it
// may read is folded and locked, the gaps too (no increment can add to its
// slots, no row can appear): a text read runs as the client wrote it, its
// counters' base columns being their totals (not one that skips locked
// rows: those are not folded). It then takes no
// consistent read where the client's would take none (the slot sums of
// the rewritten read would make the transaction's snapshot, earlier than
// its first plain read makes it directly), and its columns are the
// client's own.
func (s *Session) execLockedRead(op *rewrite.LockingRead, original string, ex *execution, seq *byte, more bool, cp *columnPatch) (bool, error) {
	s.env.Stats.RewrittenReads.Add(1)
	s.metrics().Statement(PathRewrittenRead, "")
	wrapped := s.autocommitted() && !s.tablesLocked()
	s.wrapping = wrapped
	defer func() { s.wrapping = false }()
	for attempt := 1; ; attempt++ {
		if wrapped {
			r, err := s.query("BEGIN")
			if err != nil {
				return false, err
			}
			if r.Failed() {
				return true, s.writeErr(r.Err, seq)
			}
		}
		errPkt, err := s.lockAndFold(op.Guards, ex)
		if err != nil {
			return false, err
		}
		if errPkt != nil {
			if wrapped {
				code := wire.ErrCode(errPkt)
				if !s.retriable(code, attempt) {
					// The ROLLBACK clears the diagnostics, which are
					// the client's statement's (its own lock wait).
					if err := s.saveWarnings(); err != nil {
						return false, err
					}
				}
				if _, err := s.query("ROLLBACK"); err != nil {
					return false, err
				}
				if s.retry(code, attempt) {
					continue
				}
			}
			return true, s.writeErr(errPkt, seq)
		}
		payload := queryPacket(op.SQL)
		switch {
		case ex != nil:
			payload = ex.payload
		case s.lockedReadAsWritten(original):
			payload, cp = queryPacket(original), nil
		}
		if err := s.send(payload); err != nil {
			return false, err
		}
		f := &wire.Forward{Client: s.link.Client, Server: s.link.Backend, Caps: s.link.Caps, Seq: seq, More: more}
		if wrapped {
			f.Status = func(st uint16) uint16 { return st &^ mysql.SERVER_STATUS_IN_TRANS }
		}
		cp.install(f)
		res, err := s.rd.Read(wire.Results, f)
		if err != nil {
			return false, err
		}
		s.Observe(res)
		if wrapped {
			cmd := "COMMIT"
			if res.Failed() {
				cmd = "ROLLBACK"
				if err := s.saveWarnings(); err != nil {
					return false, err
				}
			}
			if _, err := s.query(cmd); err != nil {
				return false, err
			}
		}
		return res.Failed(), nil
	}
}

// lockedReadAsWritten reports whether a locking read whose text is
// original runs as written once its guards ran (see execLockedRead).
func (s *Session) lockedReadAsWritten(original string) bool {
	return original != "" && s.locksGaps() && !strings.Contains(strings.ToUpper(original), "SKIP LOCKED")
}

func isInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// foldOwn runs before a read of ruled tables (p.Reads) in a transaction
// that incremented records of them: directly, that transaction holds those
// rows' exclusive locks, so it reads their latest values and nobody else
// changes them until it ends. Through the proxy its increments hold shared
// locks; so the proxy takes the exclusive locks now (waiting for the
// increments of others in flight) and folds the records' slots, and the
// read sees the latest totals. errPkt is an error to report instead of
// running the read.
//
// A read of totals (base column plus every slot: totals) that makes the
// transaction's snapshot, or one of its own (READ COMMITTED), sees the
// latest totals once the locks are taken: then the records are locked
// and not folded. The transaction writes no base row, which on a cluster
// another node would have to apply (see limits.md: a fold a node applies
// can wait for its increments while they commit).
func (s *Session) foldOwn(tables []*rewrite.Table, totals bool) (errPkt []byte, err error) {
	if len(s.txn.own) == 0 || !s.inTransaction() {
		return nil, nil
	}
	lockOnly := false
	if totals {
		refresh, err := s.snapshotFolds()
		if err != nil {
			return nil, err
		}
		lockOnly = !refresh
	}
	for _, t := range tables {
		keys := s.txn.own[ruleName(t)]
		if len(keys) == 0 {
			continue
		}
		if keys[""] {
			// Keys the proxy could not tell when the increments ran:
			// their guards find them again.
			found, ok, errPkt, err := s.ownKeys(t, keys)
			if err != nil {
				return nil, err
			}
			if errPkt != nil {
				return s.ownLockFailed(t, errPkt)
			}
			if ok {
				keys = map[string]bool{}
				for _, k := range found {
					keys[k] = true
				}
			}
		}
		if len(keys) == 0 {
			continue
		}
		if keys[""] {
			// A key the proxy could not tell: every slotted record.
			if errPkt, err := s.lockAndFold([]*rewrite.Guard{{Table: t, KeysSQL: t.WideLockSQL(), Wide: true}}, nil); err != nil {
				return nil, err
			} else if errPkt != nil {
				return s.ownLockFailed(t, errPkt)
			}
			continue
		}
		list := make([]string, 0, len(keys))
		for k := range keys {
			list = append(list, k)
		}
		slices.Sort(list)
		found, errPkt, err := s.lockKeys(t, list)
		if err == nil && errPkt == nil && !lockOnly {
			errPkt, err = s.foldKeysOf(t, found, true)
		}
		if err != nil {
			return nil, err
		}
		if errPkt != nil {
			return s.ownLockFailed(t, errPkt)
		}
	}
	return nil, nil
}

// ownLockFailed answers errPkt, the error of locking the records of t a
// transaction incremented before it reads them (foldOwn). A deadlock (two
// such transactions, each holding a shared lock the other needs) makes
// increments of t inside transactions run on the base row from now on
// (noteReadAfterIncrement), and the transaction runs again, its increments
// then holding the base rows (nothing of its own is left in slots): nil
// when that succeeded. Any other error is the client's.
func (s *Session) ownLockFailed(t *rewrite.Table, errPkt []byte) ([]byte, error) {
	if isDeadlock(errPkt) {
		s.env.noteReadAfterIncrement(t, s.log)
		if again, err := s.replayTxn(); again || err != nil {
			return nil, err
		}
	}
	return errPkt, nil
}

// noteReadAfterIncrement records that transactions that read counters of t
// after incrementing them deadlocked: two transactions that increment a
// record and then read it each hold a shared lock and wait for the other's
// exclusive one, where directly the second increment would have waited for
// the first transaction. From then on, increments of t inside transactions
// run on the base row under its exclusive lock (execOnBase), so that
// pattern waits instead of deadlocking.
func (e *Env) noteReadAfterIncrement(t *rewrite.Table, log *slog.Logger) {
	e.lockedMu.Lock()
	defer e.lockedMu.Unlock()
	if e.locked[ruleName(t)] {
		return
	}
	if e.locked == nil {
		e.locked = map[string]bool{}
	}
	e.locked[ruleName(t)] = true
	log.Warn("transactions that read counters they incremented deadlocked: increments of this table inside transactions now lock the record", "rule", ruleName(t))
}

// saveWarnings keeps the server's SHOW WARNINGS for the client's statement
// that just ran, before a statement of the proxy's own (the COMMIT or
// ROLLBACK of the transaction it wrapped the statement in) clears them:
// the client's next command, if it is SHOW WARNINGS, gets them (see
// answerSavedWarnings).
func (s *Session) saveWarnings() error {
	if err := s.send(queryPacket("SHOW WARNINGS")); err != nil {
		return err
	}
	buf := &wire.Buffer{}
	res, err := s.rd.Read(wire.Results, buf)
	if err != nil {
		return err
	}
	if !res.Failed() {
		s.warnings = buf
		// Its status is the session's now (after an ERR, which carries
		// none, the last status the proxy saw may be stale: a failed
		// statement with autocommit off opened a transaction).
		s.noteStatus(res)
	}
	return nil
}

// answerSavedWarnings answers the client's SHOW WARNINGS with the
// warnings saved for its previous statement, and reports whether it did.
// Any other command forgets them, but for those that leave the server's
// diagnostics as they are (keepsDiagnostics).
func (s *Session) answerSavedWarnings(payload []byte) (bool, error) {
	if keepsDiagnostics(payload[0]) {
		return false, nil
	}
	saved := s.warnings
	s.keptWarnings = nil
	if saved != nil && payload[0] == mysql.COM_QUERY && s.keptWarningsReach(payload[1:]) {
		return false, nil // a query of several statements: execPlan answers it
	}
	if saved == nil || payload[0] != mysql.COM_QUERY || !isShowWarnings(payload[1:]) {
		s.warnings = nil
		if saved != nil && payload[0] == mysql.COM_QUERY && s.dial.IsMariaDB() &&
			(tableless(payload[1:]) || rewrite.LeavesDiagnostics(string(payload[1:]), s.rewriteSession())) {
			// MariaDB resets its diagnostics only for a statement that
			// uses tables or raises a condition: they stay the client's
			// if this one raises none (handleQuery).
			s.keptWarnings = saved
		}
		return false, nil
	}
	// SHOW WARNINGS leaves the diagnostics as they are: a second one
	// shows them again.
	seq := s.respSeq
	status := func(uint16) uint16 { return s.status &^ mysql.SERVER_MORE_RESULTS_EXISTS }
	return true, s.writeHeld(saved, &seq, status)
}

// tableless reports whether sql is one statement that certainly uses no
// table and runs no stored routine: SAVEPOINT, RELEASE SAVEPOINT, BEGIN,
// START TRANSACTION, COMMIT, ROLLBACK [TO …], USE, and SET or DO with no
// parenthesis, quote or SELECT (no subquery, function or string).
func tableless(sql []byte) bool {
	if bytes.ContainsAny(sql, "();'\"`#/-") {
		return false
	}
	f := bytes.Fields(sql)
	if len(f) == 0 {
		return false
	}
	switch strings.ToUpper(string(f[0])) {
	case "SAVEPOINT", "RELEASE", "BEGIN", "START", "COMMIT", "ROLLBACK", "USE":
		return true
	case "SET", "DO":
		for _, w := range f {
			if equalFold(w, "select") || equalFold(w, "from") {
				return false
			}
		}
		return true
	}
	return false
}

// keepsDiagnostics reports whether the command cmd leaves the server's
// warnings of the statement before it for SHOW WARNINGS: those that get no
// response (a driver closes its prepared statement between the execution
// and the client's SHOW WARNINGS).
func keepsDiagnostics(cmd byte) bool {
	return cmd == mysql.COM_STMT_CLOSE || cmd == mysql.COM_STMT_SEND_LONG_DATA
}

// keptWarningsReach reports whether a SHOW WARNINGS in sql, a query of
// several statements, shows the warnings of the client's previous
// statement: it comes first, or, on MariaDB, only statements that leave
// the diagnostics come before it (rewrite.LeavesDiagnostics; the proxy
// keeps checking that each raised none as they run).
func (s *Session) keptWarningsReach(sql []byte) bool {
	if startsWithShowWarnings(sql) {
		return true
	}
	if !s.dial.IsMariaDB() || bytes.IndexByte(sql, ';') < 0 || !bytes.Contains(bytes.ToLower(sql), []byte("warnings")) {
		return false
	}
	rest, sess := string(sql), s.rewriteSession()
	for {
		first, after, ok := rewrite.SplitFirst(rest, sess)
		if !ok {
			// The last statement, after at least one.
			return len(rest) < len(sql) && isShowWarnings([]byte(rest))
		}
		if isShowWarnings([]byte(first)) {
			return true
		}
		if !rewrite.LeavesDiagnostics(first, sess) {
			return false
		}
		rest = after
	}
}

// startsWithShowWarnings reports whether sql is SHOW WARNINGS followed by
// other statements (a multi-statement query).
func startsWithShowWarnings(sql []byte) bool {
	if t := bytes.TrimLeft(sql, " \t\r\n"); len(t) < 4 || !equalFold(t[:4], "show") {
		return false // every query comes here: no scan for the others
	}
	i := bytes.IndexByte(sql, ';')
	return i > 0 && isShowWarnings(sql[:i]) && len(bytes.TrimSpace(sql[i+1:])) > 0
}

// isShowWarnings reports whether sql is exactly SHOW WARNINGS (any case
// and spacing, an optional semicolon).
func isShowWarnings(sql []byte) bool {
	f := bytes.Fields(bytes.TrimRight(bytes.TrimSpace(sql), ";"))
	return len(f) == 2 && equalFold(f[0], "show") && equalFold(f[1], "warnings")
}

// lockErrorAsUpdate makes the diagnostics of a lock error (1205, 1213)
// that increment inc's slotted statement raised in place of the client's
// UPDATE p what the client's statement would have left: MariaDB lists such
// an error twice in SHOW WARNINGS after an UPDATE that reads its rows by
// an index (a key, a range of it), once after one that scans every row
// (EXPLAIN says which, for records a condition or a UNIQUE key finds);
// the INSERT … SELECT the proxy ran lists it once or twice by its own
// access. MySQL's need nothing.
func (s *Session) lockErrorAsUpdate(code uint16, p rewrite.Plan, inc *rewrite.Increment, ex *execution) error {
	if !s.dial.IsMariaDB() {
		return nil
	}
	return s.lockErrorRows(code, func() int {
		if len(inc.Keys) > 0 || ex != nil {
			return 2 // by key (a prepared statement's text cannot be explained)
		}
		// MariaDB's EXPLAIN: id, select_type, table, type, …
		r, err := s.query("EXPLAIN " + p.Original)
		if err != nil || r.Failed() || len(r.Rows) != 1 {
			return 2
		}
		vals, err := wire.TextRow(r.Rows[0])
		if err != nil || len(vals) < 4 {
			return 2
		}
		if t := strings.ToUpper(string(vals[3])); t == "ALL" || t == "INDEX" {
			return 1 // every row scanned
		}
		return 2
	})
}

// lockErrorRows saves SHOW WARNINGS (see saveWarnings) after a lock error
// (1205, 1213) of a statement of the proxy's own, listing the error n()
// times (n is asked once they are saved), as the client's statement would
// have: the servers list a lock error once or twice depending on the
// statement (MySQL twice after a SELECT … FOR UPDATE, once after an UPDATE
// of every row). The "Sort aborted" error (1028) a sorted statement of the
// proxy's adds is dropped (see rewrite.Increment.Sorted). Diagnostics
// with anything else than the error are kept as they are.
func (s *Session) lockErrorRows(code uint16, n func() int) error {
	if code != mysql.ER_LOCK_WAIT_TIMEOUT && code != mysql.ER_LOCK_DEADLOCK {
		return nil
	}
	if err := s.saveWarnings(); err != nil || s.warnings == nil {
		return err
	}
	b := s.warnings
	for i := 0; i < len(b.Roles); i++ {
		if b.Roles[i] != wire.RoleRow {
			continue
		}
		if vals, err := wire.TextRow(b.Packets[i]); err == nil && len(vals) == 3 && string(vals[1]) == strconv.Itoa(errSortAborted) {
			b.Packets = slices.Delete(b.Packets, i, i+1)
			b.Roles = slices.Delete(b.Roles, i, i+1)
			i--
		}
	}
	first, rows := -1, 0
	for i, r := range b.Roles {
		if r != wire.RoleRow {
			continue
		}
		vals, err := wire.TextRow(b.Packets[i])
		if err != nil || len(vals) != 3 || string(vals[1]) != strconv.Itoa(int(code)) {
			return nil // not only the lock error
		}
		if first < 0 {
			first = i
		}
		rows++
	}
	if rows == 0 {
		return nil
	}
	want := n()
	if rows == want {
		return nil
	}
	row := b.Packets[first]
	b.Packets = slices.Delete(b.Packets, first, first+rows)
	b.Roles = slices.Delete(b.Roles, first, first+rows)
	for range want {
		b.Packets = slices.Insert(b.Packets, first, row)
		b.Roles = slices.Insert(b.Roles, first, wire.RoleRow)
	}
	return nil
}
