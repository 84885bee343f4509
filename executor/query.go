package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// rewriteState is the executor's rewriting state for one session.
type rewriteState struct {
	infoKnown bool // db, sql_mode, charset and isolation below are current
	db        string
	// isolation is the session's transaction isolation level as the
	// server spells it (REPEATABLE-READ, READ-COMMITTED, …).
	isolation string
	// weakAt is the number of the command that mentioned a weaker
	// isolation level (see mentionsWeakIsolation), 0 if none: a one-shot
	// SET TRANSACTION may be in force until the transaction after it ends.
	weakAt      uint64
	weakTx      bool // a transaction began after weakAt
	ansiQuotes  bool
	noBackslash bool
	// strict: sql_mode is strict (STRICT_TRANS_TABLES or
	// STRICT_ALL_TABLES): a value out of a column's range is an error.
	strict bool
	// noUnsignedSub: sql_mode has NO_UNSIGNED_SUBTRACTION (an UNSIGNED
	// column minus a number below 0 is a negative SIGNED value, clamped
	// when stored outside the strict modes, not error 1690).
	noUnsignedSub bool
	charset       string               // character_set_client
	stmts         map[uint32]*stmtInfo // rewritten prepared statements by backend id
	internal      internalStmts        // statements the proxy prepared for itself
	// temp are the session's temporary tables named like ruled tables
	// (rewrite.Session.TempTables).
	temp []string
	// sqlStmts are the writes of ruled tables prepared with SQL's PREPARE,
	// by name (lower case): their EXECUTEs are guarded (sqlPrepared).
	sqlStmts map[string]*rewrite.Plan
	// privOK: when the privileges of each statement shape were last checked.
	privOK map[string]time.Time
	// COM_SET_OPTION turned multi-statements on or off after the handshake.
	multiOn, multiOff bool
	// locked are the ruled tables the session holds LOCK TABLES locks on
	// (true: WRITE), by rule name, from a LOCK TABLES that succeeded until
	// a statement that releases them (rewrite.EndsTableLocks).
	locked map[string]bool
	// sets are the statements that may have set session variables, in
	// order (noteSessionSets); unshared: too many to keep, the session
	// shares no read.
	sets     string
	unshared bool
}

// tablesLocked reports whether the session holds LOCK TABLES locks on
// ruled tables: then the proxy opens no transaction of its own (BEGIN
// would release them).
func (s *Session) tablesLocked() bool { return len(s.rw.locked) > 0 }

// settleTransaction forgets the records the transaction incremented once
// it ended.
func (s *Session) settleTransaction() {
	if !s.inTransaction() {
		s.endTransaction()
	}
	if s.rw.weakAt != 0 && s.rw.weakAt < s.commands {
		switch {
		case s.inTransaction():
			s.rw.weakTx = true
		case s.rw.weakTx:
			// A transaction begun after the command that mentioned the
			// level has ended: a one-shot level is used up.
			s.rw.weakAt, s.rw.weakTx = 0, false
		}
	}
}

func (s *Session) handleOther(payload []byte) error {
	if s.dial.AnswersShortNoReplyCommand(payload[0], len(payload)) {
		_, err := s.forward(payload, wire.One, nil) // MySQL says the command is malformed
		return err
	}
	switch payload[0] {
	case mysql.COM_STMT_CLOSE:
		if len(payload) >= 5 {
			id := binary.LittleEndian.Uint32(payload[1:])
			if st := s.rw.stmts[id]; st != nil && st.slotted {
				s.closeStmt(st.slotStmt)
			}
			delete(s.rw.stmts, id)
		}
		_, err := s.link.Backend.WritePacket(payload, 0)
		return err
	case mysql.COM_STMT_SEND_LONG_DATA:
		if len(payload) >= 7 {
			if st := s.rw.stmts[binary.LittleEndian.Uint32(payload[1:])]; st != nil {
				if i := int(binary.LittleEndian.Uint16(payload[5:])); i < st.params {
					st.keepLongData(i, payload[7:])
				}
			}
		}
		_, err := s.link.Backend.WritePacket(payload, 0)
		return err
	case mysql.COM_STMT_RESET:
		if len(payload) >= 5 {
			if st := s.rw.stmts[binary.LittleEndian.Uint32(payload[1:])]; st != nil {
				st.resetLongData()
			}
		}
	case mysql.COM_INIT_DB:
		s.rw.infoKnown = false
	case mysql.COM_RESET_CONNECTION:
		s.rw = rewriteState{}
		s.untold = nil
	case mysql.COM_SET_OPTION:
		if len(payload) >= 3 {
			s.rw.multiOff = binary.LittleEndian.Uint16(payload[1:]) == 1 // MYSQL_OPTION_MULTI_STATEMENTS_OFF
			s.rw.multiOn = !s.rw.multiOff
		}
	}
	_, err := s.forward(payload, wire.KindOf(payload[0]), nil)
	return err
}

// sessionMayChange reports whether a query can change the default
// database, sql_mode or client character set, which the rewriter depends
// on. It is deliberately conservative (a change can hide behind comments, in
// a multi-statement query, or in dynamic SQL): any mention of sql_mode, a
// character set (NAMES, CHARSET, CHARACTER), the word USE, or
// PREPARE/EXECUTE makes the proxy read the session state again before the
// next ruled statement.
func sessionMayChange(sql []byte) bool {
	changes, _, _ := scanSessionWords(sql)
	return changes
}

// mentionsWeakIsolation reports whether a query may set a transaction
// isolation level weaker than REPEATABLE READ (SET [SESSION] TRANSACTION
// ISOLATION LEVEL READ COMMITTED, SET tx_isolation = 'READ-UNCOMMITTED',
// …): it names isolation and committed or uncommitted. Conservative, like
// sessionMayChange.
func mentionsWeakIsolation(sql []byte) bool {
	_, _, weak := scanSessionWords(sql)
	return weak
}

// scanSessionWords is sessionMayChange and mentionsWeakIsolation in one
// pass over the words (runs of identifier bytes), with whether the query
// names an isolation level's variable or clause at all (isolation): the
// per-query cost is a few nanoseconds per byte.
func scanSessionWords(sql []byte) (changes, isolation, weak bool) {
	committed := false
	for i := 0; i < len(sql); {
		if !isWordByte(sql[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(sql) && isWordByte(sql[j]) {
			j++
		}
		w := sql[i:j]
		i = j
		switch len(w) {
		case 3, 5, 7:
			if equalFold(w, "use") || equalFold(w, "names") || equalFold(w, "execute") || equalFold(w, "prepare") {
				changes = true
			}
		}
		if len(w) < 7 {
			continue
		}
		if containsFold(w, "sql_mode") || containsFold(w, "charset") || containsFold(w, "character") {
			changes = true
		}
		if containsFold(w, "isolation") {
			changes, isolation = true, true
		}
		if containsFold(w, "committed") {
			committed = true
		}
	}
	return changes, isolation, isolation && committed
}

// isolation is the isolation level of the session's open transaction, or
// else the session's (as the server spells it, read with the session
// information): a transaction keeps the level it began with when a
// statement in it sets the session's (txnState.isolation).
func (s *Session) isolation() string {
	if s.txn.isolation != "" && s.inTransaction() {
		return s.txn.isolation
	}
	return s.rw.isolation
}

// weakIsolation reports whether the session's transaction may run at READ
// COMMITTED or READ UNCOMMITTED, where InnoDB takes no gap locks: a guard
// then cannot keep rows it did not lock from appearing before its
// statement runs. The level is the session's (read with the session
// information); a statement that mentioned a weaker level counts until
// the transaction after it ended, since a one-shot SET TRANSACTION does
// not show in the session's variable.
func (s *Session) weakIsolation() (bool, error) {
	if err := s.ensureSessionInfo(); err != nil {
		return false, err
	}
	if s.rw.weakAt != 0 {
		return true, nil
	}
	return strings.HasPrefix(s.isolation(), "READ"), nil
}

// equalFold reports whether w is the ASCII lower-case word lower, ignoring
// case.
func equalFold(w []byte, lower string) bool {
	return len(w) == len(lower) && containsFold(w, lower)
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// privilegesMayChange reports whether a query may change the session's
// privileges (GRANT, REVOKE, roles, accounts, FLUSH PRIVILEGES), which the
// increments' privilege checks depend on. Conservative, like
// sessionMayChange.
func privilegesMayChange(sql []byte) bool {
	for i := 0; i < len(sql); {
		if !isWordByte(sql[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(sql) && isWordByte(sql[j]) {
			j++
		}
		w := sql[i:j]
		i = j
		switch len(w) {
		case 4, 5, 6, 10:
			if equalFold(w, "role") || equalFold(w, "grant") || equalFold(w, "revoke") || equalFold(w, "privileges") || equalFold(w, "user") {
				return true
			}
		}
	}
	return false
}

// containsFold is a case-insensitive substring test for an ASCII lower-case
// needle.
func containsFold(s []byte, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		match := true
		for j := 0; j < len(lower); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lower[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// errSessionInfo: the session's database, sql_mode and character set could
// not be read.
var errSessionInfo = errors.New("cannot read the session's database, sql_mode and character set")

// ensureSessionInfo learns the session's default database, sql_mode and
// client character set (lazily: once, and again after a statement that may
// change them).
func (s *Session) ensureSessionInfo() error {
	if s.rw.infoKnown {
		return nil
	}
	r, err := s.query("SELECT DATABASE(), @@SESSION.sql_mode, @@SESSION.character_set_client, @@SESSION." + s.dial.IsolationVariable())
	if err != nil {
		return err
	}
	if r.Failed() || len(r.Rows) != 1 {
		return errSessionInfo
	}
	vals, err := wire.TextRow(r.Rows[0])
	if err != nil || len(vals) != 4 {
		return errSessionInfo
	}
	s.rw.isolation = strings.ToUpper(string(vals[3]))
	mode := strings.ToUpper(string(vals[1]))
	s.rw.db = string(vals[0])
	s.rw.charset = strings.ToLower(string(vals[2]))
	s.rw.ansiQuotes = strings.Contains(mode, "ANSI_QUOTES")
	s.rw.noBackslash = strings.Contains(mode, "NO_BACKSLASH_ESCAPES")
	s.rw.strict = strings.Contains(mode, "STRICT_TRANS_TABLES") || strings.Contains(mode, "STRICT_ALL_TABLES")
	s.rw.noUnsignedSub = strings.Contains(mode, "NO_UNSIGNED_SUBTRACTION")
	s.rw.infoKnown = true
	return nil
}

// readsOwn reports whether a plan of plans reads other columns of ruled
// tables whose records the open transaction incremented (AsWritten.Reads):
// it is run as planned, which refreshes them first.
func (s *Session) readsOwn(plans []rewrite.Plan) bool {
	if len(s.txn.own) == 0 {
		return false
	}
	for _, p := range plans {
		if aw, ok := p.Op.(*rewrite.AsWritten); ok {
			for _, t := range aw.Reads {
				if len(s.txn.own[ruleName(t)]) > 0 {
					return true
				}
			}
		}
	}
	return false
}

func (s *Session) rewriteSession() rewrite.Session {
	return rewrite.Session{DB: s.rw.db, ANSIQuotes: s.rw.ansiQuotes, NoBackslashEscapes: s.rw.noBackslash, Charset: s.rw.charset,
		TempTables: s.rw.temp, SlotFor: s.slotFor}
}

// plan rewrites sql when it names a ruled table. It returns nil plans for
// statements to send unchanged.
func (s *Session) plan(rw *rewrite.Rewriter, sql []byte) ([]rewrite.Plan, error) {
	plans, err := s.planAll(rw, sql)
	if err != nil || plans == nil {
		return nil, err
	}
	if !rewrite.Changed(plans) && (s.warnings == nil || len(plans) < 2 || !s.keptWarningsReach(sql)) && !s.readsOwn(plans) &&
		(len(plans) < 2 || !s.rowCountWrong(plans[0].Original)) {
		return nil, nil
	}
	// (A SHOW WARNINGS first, for warnings the proxy kept, or a first
	// statement reading ROW_COUNT() where the server's is not the
	// client's: the statements run one by one, that one answered by the
	// proxy.)
	return plans, nil
}

// planAll is plan returning the plans of a statement that names a ruled
// table also when they send it unchanged.
func (s *Session) planAll(rw *rewrite.Rewriter, sql []byte) ([]rewrite.Plan, error) {
	if len(sql) == 0 || !rw.Catalog().Mentions(unsafe.String(&sql[0], len(sql))) {
		return nil, nil
	}
	if err := s.ensureSessionInfo(); err != nil {
		return nil, err
	}
	start := time.Now()
	plans, err := rw.Rewrite(string(sql), s.rewriteSession())
	s.metrics().RewriteTook(time.Since(start).Seconds())
	if err != nil {
		s.env.Stats.ParseFailures.Add(1)
		s.metrics().Statement(PathParseFailure, "")
		if ue := (*rewrite.UnparsedError)(nil); errors.As(err, &ue) && !ue.Table.Shadow {
			return nil, err // it names a ruled table: see checkUnparsed
		}
		s.log.Debug("statement does not parse; passing it through", "err", err)
		return nil, nil
	}
	return plans, nil
}

func (s *Session) handleQuery(rw *rewrite.Rewriter, payload []byte) error {
	sql := payload[1:]
	if privilegesMayChange(sql) {
		s.rw.privOK = nil
	}
	s.noteSessionSets(sql)
	changes, isolation, weak := scanSessionWords(sql)
	if weak && s.inTransaction() && !bytes.Contains(bytes.TrimRight(sql, "; \t\r\n"), []byte{';'}) {
		// One statement in an open transaction: it cannot change that
		// transaction's level (a one-shot SET TRANSACTION there fails with
		// 1568), and a session level it sets shows in the session's
		// information for the next one.
		weak = false
	}
	if isolation && s.inTransaction() && s.txn.isolation == "" {
		// It may set the session's level inside a transaction, which
		// keeps its own: the proxy keeps it too (see isolation).
		if err := s.ensureSessionInfo(); err != nil {
			return err
		}
		s.txn.isolation = s.rw.isolation
	}
	defer func() {
		// After the statement ran: plan may just have learned the state
		// that the statement changes.
		if changes {
			s.rw.infoKnown = false
		}
		if weak {
			s.rw.weakAt, s.rw.weakTx = s.commands, false
		}
	}()
	if len(s.rw.sqlStmts) > 0 && maybeSQLPrepared(sql) {
		if done, err := s.sqlPrepared(rw, sql, payload); done || err != nil {
			return err
		}
	}
	if startsWithShowWarnings(sql) && s.multiStatements() {
		// Statements of the proxy's own (reading the session's state to
		// plan the query) would clear the server's diagnostics before the
		// query's SHOW WARNINGS: they are kept first.
		if s.warnings == nil {
			if err := s.saveWarnings(); err != nil {
				return err
			}
		}
		if s.warnings != nil && !rw.Catalog().Mentions(string(sql)) {
			return s.showWarningsFirst(sql)
		}
	} else if s.warnings != nil && s.multiStatements() && s.keptWarningsReach(sql) && !rw.Catalog().Mentions(string(sql)) {
		return s.showWarningsFirst(sql)
	}
	if s.tablesLocked() && rewrite.EndsTableLocks(sql) {
		s.rw.locked = nil
	}
	plans, err := s.plan(rw, sql)
	if ue := (*rewrite.UnparsedError)(nil); errors.As(err, &ue) {
		return s.checkUnparsed(sql, ue, false)
	}
	if errors.Is(err, errSessionInfo) {
		seq := s.respSeq
		return s.writeErr(wire.Errorf(mysql.ER_UNKNOWN_ERROR, "HY000", "%v", err).Packet(), &seq)
	}
	if err != nil {
		return err
	}
	if plans == nil {
		s.warnings = nil // the server's own diagnostics are the statement's
		s.metrics().Statement(PathPassThrough, "")
		kept, warned := s.keptWarnings, false
		s.keptWarnings = nil
		var observe func(*wire.OK)
		if kept != nil {
			observe = func(ok *wire.OK) { warned = warned || ok.Warnings > 0 }
		}
		var res wire.Result
		if sub, first, ok := s.rowCountForBytes(sql); ok {
			// ROW_COUNT() of a statement the proxy answered itself (or
			// after statements of its own): the count the client was
			// given, under the column definitions of the first statement
			// as written (the only result set patched).
			orig, err := s.originalColumns(rewrite.Plan{Original: first})
			if err != nil {
				return err
			}
			res, err = s.forwardPatched(queryPacket(sub), wire.Results, observe, newColumnPatch(orig, false))
		} else {
			res, err = s.forward(payload, wire.Results, observe)
		}
		if err == nil && !res.Failed() {
			s.noteBegin(sql)
			if kept != nil && !warned {
				// A statement that leaves the diagnostics as they were
				// (see answerSavedWarnings): still the saved ones.
				s.warnings = kept
			}
		}
		return err
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("rewrite", "sql", string(sql), "plans", len(plans), "kind", plans[0].Kind().String())
	}
	s.stmtsInCommand = len(plans)
	seq := s.respSeq
	for _, p := range plans {
		if _, refused := p.Op.(*rewrite.Refused); refused && !p.Shadow {
			// Nothing of the query runs: its statements are refused as a
			// whole (no partial effects to reason about).
			return s.refuse(p.Table, p.Reason, &seq)
		}
	}
	if s.enterGate(plans...) {
		defer s.env.Gate.leave()
	}
	if rewrite.SessionCut(plans) >= 0 {
		if !s.multiStatements() {
			s.metrics().Statement(PathPassThrough, "")
			_, err := s.forward(payload, wire.Results, nil)
			return err
		}
		return s.execCut(rw, plans, &seq)
	}
	if len(plans) == 1 && s.warnings == nil {
		// One statement, relayed as usual (a SHOW WARNINGS in it would be
		// answered with the warnings the proxy keeps).
		p := plans[0]
		if p.Shadow {
			s.countShadow(p)
			_, err := s.forward(payload, wire.Results, nil)
			return err
		}
		if errPkt, err := s.openViews(p); err != nil || errPkt != nil {
			if err != nil {
				return err
			}
			if lockErr(errPkt) {
				return s.writeErr(errPkt, &seq)
			}
			s.metrics().Statement(PathPassThrough, "")
			_, err := s.forward(payload, wire.Results, nil)
			return err
		}
		switch op := p.Op.(type) {
		case *rewrite.Read:
			reads, totals := op.Reads, true
			if op.SQL == p.Original {
				// Counters read rolled up only: the statement as written,
				// once the transaction's own increments of them are
				// folded.
				reads, totals = op.RolledUp, false
				s.metrics().Statement(PathRolledUpRead, "")
			} else {
				s.env.Stats.RewrittenReads.Add(1)
				s.metrics().Statement(PathRewrittenRead, "")
			}
			if errPkt, err := s.foldOwn(reads, totals); err != nil || errPkt != nil {
				if err != nil {
					return err
				}
				return s.writeErr(errPkt, &seq)
			}
			if op.SQL == p.Original {
				_, err := s.forward(payload, wire.Results, nil)
				return err
			}
			orig, err := s.originalColumns(p)
			if err != nil {
				return err
			}
			if key := s.consolidateKey(p, op); key != "" {
				done, leave, err := s.consolidated(op.SQL, orig, key)
				defer leave()
				if done || err != nil {
					return err
				}
			}
			_, err = s.forwardPatched(queryPacket(op.SQL), wire.Results, nil, newColumnPatch(orig, false))
			return err
		case *rewrite.LockingRead:
			if err := s.ensureSessionInfo(); err != nil {
				return err
			}
			var cp *columnPatch
			if !s.lockedReadAsWritten(p.Original) {
				orig, err := s.originalColumns(p)
				if err != nil {
					return err
				}
				cp = newColumnPatch(orig, false)
			}
			_, err := s.execLockedRead(op, p.Original, nil, &seq, false, cp)
			return err
		}
	}
	// Several statements in one query need multi-statement support, which
	// the proxy honours as the server would: without it, the server gets the
	// text as it is and reports the error.
	if len(plans) > 1 && !s.multiStatements() {
		s.warnings = nil // the server's error is the client's diagnostics
		s.metrics().Statement(PathPassThrough, "")
		_, err := s.forward(payload, wire.Results, nil)
		return err
	}
	for i, p := range plans {
		more := i < len(plans)-1
		s.stmtIndex = i
		failed, err := s.runPlan(p, nil, &seq, more)
		if err != nil {
			return err
		}
		if failed {
			break // like the server: an error ends a multi-statement query
		}
	}
	return nil
}

// execCut runs a multi-statement query in which a statement changes the
// session state the rewrite depends on (USE, SET NAMES, SET sql_mode): the
// statements up to that one run as planned, then the rest of the query is
// planned again in the new state.
func (s *Session) execCut(rw *rewrite.Rewriter, plans []rewrite.Plan, seq *byte) error {
	for {
		cut := rewrite.SessionCut(plans)
		run := plans
		if cut >= 0 {
			run = plans[:cut+1]
		}
		for i, p := range run {
			failed, err := s.runPlan(p, nil, seq, cut >= 0 || i < len(run)-1)
			if err != nil || failed {
				return err // an error ends a multi-statement query
			}
			s.stmtIndex++
		}
		if cut < 0 {
			return nil
		}
		s.rw.infoKnown = false
		// Statement texts tile the query, separators included.
		var rest strings.Builder
		for _, p := range plans[cut+1:] {
			rest.WriteString(p.Original)
		}
		next, err := s.plan(rw, []byte(rest.String()))
		if err != nil {
			return err
		}
		if next == nil {
			_, err := s.relayAs(queryPacket(rest.String()), seq, false)
			return err
		}
		plans = next
	}
}

// multiStatements reports whether the client may send several statements
// in one query.
func (s *Session) multiStatements() bool {
	switch {
	case s.rw.multiOn:
		return true
	case s.rw.multiOff:
		return false
	}
	return s.link.Caps&mysql.CLIENT_MULTI_STATEMENTS != 0
}

// countShadow counts and logs a statement a shadow-mode rule would have
// rewritten.
func (s *Session) countShadow(p rewrite.Plan) {
	n := s.env.Stats.Shadowed.Add(1)
	s.metrics().Statement(PathShadow, ruleName(p.Table))
	// At most one line a second at info (with the running count); every
	// statement at debug.
	now := time.Now().UnixNano()
	if last := s.env.shadowLogged.Load(); now-last >= int64(time.Second) && s.env.shadowLogged.CompareAndSwap(last, now) {
		s.log.Info("shadow: would rewrite", "rule", ruleName(p.Table), "as", p.Kind().String(), "shadowed_so_far", n)
	} else {
		s.log.Debug("shadow: would rewrite", "rule", ruleName(p.Table), "as", p.Kind().String())
	}
}

// checkUnparsed answers a statement that names a ruled table but that the
// rewriter cannot parse (so it cannot tell which counters it reads or
// writes): when the server rejects the statement too, the client gets the
// server's own error (asked by preparing it, which runs nothing);
// otherwise it runs its fallback (see rewrite.UnparsedError.Fallback),
// or is refused when it has none or is being prepared (prepare). A text of
// several statements is refused without asking (the server prepares one
// statement at a time).
func (s *Session) checkUnparsed(sql []byte, ue *rewrite.UnparsedError, prepare bool) error {
	seq := s.respSeq
	if !ue.Multi {
		id, _, errPkt, err := s.prepare(sql, false)
		if err != nil {
			return err
		}
		if errPkt == nil {
			// COM_STMT_CLOSE has no response.
			if _, err := s.link.Backend.WritePacket(binary.LittleEndian.AppendUint32([]byte{mysql.COM_STMT_CLOSE}, id), 0); err != nil {
				return err
			}
		} else if len(errPkt) >= 3 && binary.LittleEndian.Uint16(errPkt[1:3]) != mysql.ER_UNSUPPORTED_PS {
			s.metrics().Statement(PathPassThrough, ruleName(ue.Table))
			return s.writeErr(errPkt, &seq)
		}
	}
	if ue.Fallback != nil && !prepare {
		s.log.Debug("statement names a ruled table and does not parse; folded first, then run as written", "err", ue.Err)
		_, err := s.runPlan(*ue.Fallback, nil, &seq, false)
		return err
	}
	s.log.Debug("statement names a ruled table and does not parse; refused", "err", ue.Err)
	return s.refuse(ue.Table, ue.Reason(), &seq)
}
