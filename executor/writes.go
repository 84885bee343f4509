package executor

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// foldBatch bounds how many keys one fold statement names.
const foldBatch = 500

// execution is a client's COM_STMT_EXECUTE of a rewritten statement.
type execution struct {
	payload []byte
	params  execParams
	stmtID  uint32
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
	if p.Shadow {
		s.countShadow(p)
	}
	switch {
	case p.Kind == rewrite.KindIncrement && !p.Shadow:
		return s.execIncrement(p, ex, seq, more)
	case p.Kind == rewrite.KindGuarded && !p.Shadow:
		return s.execGuarded(p, ex, seq, more)
	}
	sql := p.SQL
	switch {
	case p.Shadow:
		sql = p.Original
	case p.Kind == rewrite.KindRead:
		s.env.Stats.RewrittenReads.Add(1)
		s.env.metrics().Statement(PathRewrittenRead, "")
	default:
		s.env.metrics().Statement(PathPassThrough, ruleName(p.Table))
	}
	res, err := s.relayAs(queryPacket(sql), seq, more)
	if err != nil || res.Failed() {
		return res.Failed(), err
	}
	return false, s.afterSuccess(p)
}

// afterSuccess does a plan's follow-up once its statement succeeded.
func (s *Session) afterSuccess(p rewrite.Plan) error {
	if p.Table != nil && p.Invalidate {
		s.env.exists.forget(tableKey(p.Table))
	}
	if p.After != "" {
		r, err := s.query(p.After)
		if err != nil {
			return err
		}
		if r.Failed() {
			s.log.Warn("slot clean-up after the statement failed", "table", p.Table.Qualified(), "err", (&backendError{r.Err}).Error())
		}
	}
	if p.Reload {
		s.env.SchemaChanged()
	}
	if p.Reload && s.env.OnDDL != nil {
		go s.env.OnDDL()
	}
	return nil
}

// incArgs returns an increment's key and whether its deltas change the
// row, for a text statement (ex nil) or an execution. ok is false when the
// key or a delta is a parameter that is not a plain integer: the statement
// then runs as written.
func incArgs(inc *rewrite.Increment, ex *execution) (key string, changed, ok bool) {
	if ex == nil {
		return inc.KeyLiteral, !inc.Zero, true
	}
	key = inc.KeyLiteral
	if inc.KeyParam >= 0 {
		if key, ok = ex.params.intParam(inc.KeyParam); !ok {
			return "", false, false
		}
	}
	for j, i := range inc.DeltaParams {
		if i < 0 {
			changed = changed || j >= len(inc.DeltaZero) || !inc.DeltaZero[j]
			continue
		}
		v, ok := ex.params.intParam(i)
		if !ok {
			return "", false, false
		}
		changed = changed || v != "0"
	}
	return key, changed, true
}

// errLongData is the client's error when a parameter the proxy must pass on
// was sent as long data too long to keep.
func errLongData() []byte {
	return wire.Errorf(mysql.ER_UNKNOWN_ERROR, "HY000",
		"a parameter of a rewritten statement sent with COM_STMT_SEND_LONG_DATA is longer than %d bytes", maxKeptLongData).Packet()
}

// execAsWritten runs a prepared increment as the client wrote it: on the
// base row, with the server's own conversions, warnings and errors. It is
// the path for parameters the slotted upsert cannot take as they are.
func (s *Session) execAsWritten(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	s.env.metrics().Statement(PathPassThrough, ruleName(p.Table))
	id, err := s.internalStmt(p.Original)
	if err != nil {
		var be *backendError
		if errors.As(err, &be) {
			return true, s.writeErr(be.pkt, seq)
		}
		return false, err
	}
	idx := make([]int, ex.params.n)
	for i := range idx {
		idx[i] = i
	}
	if slices.Contains(ex.params.long, true) {
		// The client's statement holds that long data on the backend too:
		// drop it, as its execution would have.
		reset := binary.LittleEndian.AppendUint32([]byte{mysql.COM_STMT_RESET}, ex.stmtID)
		if err := s.send(reset); err != nil {
			return false, err
		}
		if _, err := s.read(wire.One); err != nil {
			return false, err
		}
	}
	pkt, err := ex.params.executePacket(id, idx)
	if err != nil {
		return true, s.writeErr(errLongData(), seq)
	}
	res, err := s.relayAs(pkt, seq, more)
	return res.Failed(), err
}

func (s *Session) execIncrement(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	inc := p.Increment
	key, changed, plain := incArgs(inc, ex)
	if !plain {
		return s.execAsWritten(p, ex, seq, more)
	}
	if !s.keyKnown(p.Table, key) {
		var r *wire.Response
		var err error
		if ex != nil && inc.KeyParam >= 0 {
			r, err = s.executeInternal(inc.CheckSQL, ex.params, []int{inc.KeyParam})
		} else {
			r, err = s.query(inc.CheckSQL)
		}
		if err != nil {
			var be *backendError
			if errors.As(err, &be) {
				return true, s.writeErr(be.pkt, seq)
			}
			return false, err
		}
		if r.Failed() {
			return true, s.writeErr(r.Err, seq)
		}
		if len(r.Rows) == 0 {
			// No base row: the UPDATE would have matched nothing, and no
			// slot may be created for a key without a row.
			return false, s.writeOK(wire.OK{Status: r.Status, Info: wire.UpdateInfo(0, 0, 0)}, seq, more)
		}
		s.rememberKey(p.Table, key, r.Status&mysql.SERVER_STATUS_IN_TRANS != 0)
	}
	s.env.Stats.RewrittenWrites.Add(1)
	s.env.metrics().Statement(PathRewrittenWrite, ruleName(p.Table))
	retryable := s.autocommitted()
	var r *wire.Response
	for attempt := 1; ; attempt++ {
		payload := queryPacket(p.SQL)
		if ex != nil {
			payload = ex.payload
		}
		if err := s.send(payload); err != nil {
			return false, err
		}
		var err error
		if r, err = s.read(wire.Results); err != nil {
			return false, err
		}
		if !r.Failed() {
			break
		}
		if retryable && s.retry(r.ErrCode, attempt) {
			continue
		}
		return true, s.writeErr(r.Err, seq)
	}
	if r.OK == nil {
		return false, errors.New("slotted increment returned rows")
	}
	ok := *r.OK
	s.incPatch(1, boolInt(changed))(&ok)
	return false, s.writeOK(ok, seq, more)
}

// retry decides whether to run a failed autocommit statement again, and
// waits a jittered backoff first.
func (s *Session) retry(code uint16, attempt int) bool {
	if (code != mysql.ER_LOCK_DEADLOCK && code != mysql.ER_LOCK_WAIT_TIMEOUT) || attempt > s.env.MaxRetries {
		return false
	}
	s.rolledBack = false // the failed statement was the whole transaction
	s.env.Stats.Retries.Add(1)
	s.env.metrics().Retry()
	backoff := time.Duration(attempt) * time.Millisecond
	time.Sleep(backoff + rand.N(backoff))
	return true
}

// execGuarded folds the slots of every record the write may touch into the
// base rows, then runs the write, all in one transaction (the client's, or
// one the proxy opens and commits around an autocommit statement).
func (s *Session) execGuarded(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	s.env.Stats.GuardedWrites.Add(1)
	s.env.metrics().Statement(PathGuarded, ruleName(p.Table))
	// An autocommit statement gets a transaction of its own around the
	// fold and the statement; inside the client's transaction (or with
	// autocommit off) everything runs in the client's transaction.
	wrapped := s.autocommitted()
	for attempt := 1; ; attempt++ {
		ok, errPkt, err := s.guardedOnce(p, ex, wrapped)
		if err != nil {
			return false, err
		}
		if errPkt == nil {
			if err := s.writeOK(*ok, seq, more); err != nil {
				return false, err
			}
			return false, s.afterSuccess(p)
		}
		code := wire.ErrCode(errPkt)
		if wrapped && s.retry(code, attempt) {
			continue
		}
		return true, s.writeErr(errPkt, seq)
	}
}

// guardedOnce runs one attempt of a guarded write: the client's OK, or the
// ERR to report (the proxy's own transaction already rolled back).
func (s *Session) guardedOnce(p rewrite.Plan, ex *execution, wrapped bool) (*wire.OK, []byte, error) {
	fail := func(pkt []byte) (*wire.OK, []byte, error) {
		if wrapped {
			if _, err := s.query("ROLLBACK"); err != nil {
				return nil, nil, err
			}
		}
		return nil, pkt, nil
	}
	if wrapped {
		r, err := s.query("BEGIN")
		if err != nil {
			return nil, nil, err
		}
		if r.Failed() {
			return nil, r.Err, nil
		}
	}
	var keysResp *wire.Response
	var err error
	binaryRows := false
	if ex != nil && len(p.Guard.KeysParams) > 0 {
		keysResp, err = s.executeInternal(p.Guard.KeysSQL, ex.params, p.Guard.KeysParams)
		binaryRows = true
	} else {
		keysResp, err = s.query(p.Guard.KeysSQL)
	}
	if err != nil {
		var be *backendError
		if errors.As(err, &be) {
			return fail(be.pkt)
		}
		return nil, nil, err
	}
	if keysResp.Failed() {
		return fail(keysResp.Err)
	}
	keys := make([]string, 0, len(keysResp.Rows))
	for _, row := range keysResp.Rows {
		var k string
		var ok bool
		if binaryRows {
			k, ok = binaryInt(keysResp.Columns[0], row)
		} else if vals, err := wire.TextRow(row); err == nil && len(vals) == 1 && vals[0] != nil {
			k, ok = string(vals[0]), isInteger(vals[0])
		}
		if !ok {
			return nil, nil, errors.New("guard: key is not an integer")
		}
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		batch := keys[:min(foldBatch, len(keys))]
		keys = keys[len(batch):]
		for _, q := range p.Table.FoldSQL(batch) {
			r, err := s.query(q)
			if err != nil {
				return nil, nil, err
			}
			if r.Failed() {
				return fail(r.Err)
			}
		}
	}
	payload := queryPacket(p.SQL)
	if ex != nil {
		payload = ex.payload
	}
	if err := s.send(payload); err != nil {
		return nil, nil, err
	}
	main, err := s.read(wire.Results)
	if err != nil {
		return nil, nil, err
	}
	if main.Failed() {
		return fail(main.Err)
	}
	if main.OK == nil {
		return nil, nil, errors.New("guarded statement returned rows")
	}
	ok := *main.OK
	if wrapped {
		r, err := s.query("COMMIT")
		if err != nil {
			return nil, nil, err
		}
		if r.Failed() {
			return nil, r.Err, nil
		}
		// The client's statement ran in autocommit: its OK says so, and
		// carries no state change of the proxy's COMMIT.
		ok.Status &^= mysql.SERVER_STATUS_IN_TRANS
		if r.OK != nil && ok.Status&mysql.SERVER_SESSION_STATE_CHANGED == 0 {
			ok.State = nil
		}
	}
	return &ok, nil, nil
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
