package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/rewrite"
)

// This file connects the rewriter to a session: it intercepts the commands
// that carry SQL (COM_QUERY, COM_STMT_PREPARE) and executions of rewritten
// prepared statements, and runs each plan so the client sees exactly the
// response the original statement would have produced.

// foldBatch bounds how many keys one fold statement names.
const foldBatch = 500

// rewriteState is the command pump's rewriting state for one session.
type rewriteState struct {
	infoKnown   bool // db and sql_mode below are current
	db          string
	ansiQuotes  bool
	noBackslash bool
	charset     string               // character_set_client
	stmts       map[uint32]*stmtInfo // rewritten prepared statements by backend id
	internal    map[string]uint32    // statements the proxy prepared for itself
	txnKnown    []knownKey           // keys found inside the open transaction
	sawRollback bool
	// COM_SET_OPTION turned multi-statements on or off after the handshake.
	multiOn, multiOff bool
}

type knownKey struct{ table, key string }

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

// incPatch turns an upsert's OK into the OK the UPDATE would have sent.
type incPatch struct {
	matched, changed uint64
}

func (p *incPatch) apply(s *session, raw []byte) []byte {
	ok, err := parseOK(raw)
	if err != nil {
		return raw
	}
	ok.affected = p.changed
	if s.caps&mysql.CLIENT_FOUND_ROWS != 0 {
		ok.affected = p.matched
	}
	ok.insertID = 0
	info := updateInfo(p.matched, p.changed, ok.warnings)
	return ok.build(s.caps, &info)
}

// noteStatus records the server status flags of a completed response.
func (s *session) noteStatus(st uint16) { s.lastStatus.Store(uint32(st)) }

func (s *session) inTransaction() bool {
	return uint16(s.lastStatus.Load())&mysql.SERVER_STATUS_IN_TRANS != 0
}

func (s *session) autocommit() bool {
	return uint16(s.lastStatus.Load())&mysql.SERVER_STATUS_AUTOCOMMIT != 0
}

// resetRewriteState forgets per-connection state after COM_CHANGE_USER or
// COM_RESET_CONNECTION (the server dropped statements and variables).
func (s *session) resetRewriteState() {
	s.rw = rewriteState{}
}

// settleTransaction promotes keys found inside a transaction to the shared
// cache once it committed, and drops them when it rolled back.
func (s *session) settleTransaction() {
	if len(s.rw.txnKnown) == 0 || s.inTransaction() {
		return
	}
	if !s.rw.sawRollback && !s.rolledBack.Load() {
		for _, k := range s.rw.txnKnown {
			s.srv.exists.add(k.table, k.key)
		}
	}
	s.rw.txnKnown = s.rw.txnKnown[:0]
	s.rw.sawRollback = false
	s.rolledBack.Store(false)
}

// handleCommand runs one client command when a rewriter is configured.
// payload is the whole command (one packet). It always consumes the
// command: by forwarding it as is, or by executing its rewrite.
func (s *session) handleCommand(rw *rewrite.Rewriter, payload []byte) error {
	s.settleTransaction()
	var err error
	switch payload[0] {
	case mysql.COM_QUERY:
		err = s.handleQuery(rw, payload)
	case mysql.COM_STMT_PREPARE:
		err = s.handlePrepare(rw, payload)
	case mysql.COM_STMT_EXECUTE:
		err = s.handleExecute(payload)
	default:
		err = s.handleOther(payload)
	}
	if rerr := s.release(); err == nil {
		err = rerr
	}
	return err
}

// forwardCommand sends payload on the normal path: the response pump
// relays the response (the backend is handed back first if held).
func (s *session) forwardCommand(payload []byte, e expect) error {
	if err := s.release(); err != nil {
		return err
	}
	if packets := len(payload)/maxPacketPayload + 1; packets != int(s.respSeq) {
		e.seqShift = s.respSeq - byte(packets)
	}
	s.pending.Add(1)
	s.expects <- e
	_, err := s.back.writePacket(payload, 0)
	return err
}

func (s *session) handleOther(payload []byte) error {
	switch payload[0] {
	case mysql.COM_STMT_CLOSE:
		if len(payload) >= 5 {
			delete(s.rw.stmts, binary.LittleEndian.Uint32(payload[1:]))
		}
		_, err := s.back.writePacket(payload, 0)
		return err
	case mysql.COM_STMT_SEND_LONG_DATA:
		if len(payload) >= 7 {
			if st := s.rw.stmts[binary.LittleEndian.Uint32(payload[1:])]; st != nil {
				if i := int(binary.LittleEndian.Uint16(payload[5:])); i < st.params {
					st.keepLongData(i, payload[7:])
				}
			}
		}
		_, err := s.back.writePacket(payload, 0)
		return err
	case mysql.COM_STMT_RESET:
		if len(payload) >= 5 {
			if st := s.rw.stmts[binary.LittleEndian.Uint32(payload[1:])]; st != nil {
				st.resetLongData()
			}
		}
	case mysql.COM_INIT_DB:
		s.rw.infoKnown = false
	case mysql.COM_SET_OPTION:
		if len(payload) >= 3 {
			s.rw.multiOff = binary.LittleEndian.Uint16(payload[1:]) == 1 // MYSQL_OPTION_MULTI_STATEMENTS_OFF
			s.rw.multiOn = !s.rw.multiOff
		}
	}
	kind, _ := responseKind(payload[0])
	return s.forwardCommand(payload, expect{kind: kind})
}

// sessionMayChange reports whether a query can change the default
// database, sql_mode or client character set, which the rewriter depends
// on. It is deliberately conservative (a change can hide behind comments, in
// a multi-statement query, or in dynamic SQL): any mention of sql_mode, a
// character set (NAMES, CHARSET, CHARACTER), the word USE, or
// PREPARE/EXECUTE makes the proxy read the session state again before the
// next ruled statement.
func sessionMayChange(sql []byte) bool {
	// One pass over the words (runs of identifier bytes): the per-query
	// cost is a few nanoseconds per byte.
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
				return true
			}
		}
		if len(w) >= 7 && (containsFold(w, "sql_mode") || containsFold(w, "charset") || containsFold(w, "character")) {
			return true
		}
	}
	return false
}

// equalFold reports whether w is the ASCII lower-case word lower, ignoring
// case.
func equalFold(w []byte, lower string) bool {
	return len(w) == len(lower) && containsFold(w, lower)
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isRollback(sql []byte) bool {
	t := bytes.TrimLeft(sql, " \t\r\n")
	return len(t) >= 8 && strings.EqualFold(string(t[:8]), "rollback")
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

// ensureSessionInfo learns the session's default database and sql_mode
// (lazily: once, and again after a statement that may change them).
func (s *session) ensureSessionInfo() error {
	if s.rw.infoKnown {
		return nil
	}
	r, err := s.query("SELECT DATABASE(), @@SESSION.sql_mode, @@SESSION.character_set_client")
	if err != nil {
		return err
	}
	if r.failed() || len(r.rows) != 1 {
		return errors.New("cannot read the session's database, sql_mode and character set")
	}
	vals, err := textValues(r.rows[0])
	if err != nil || len(vals) != 3 {
		return errors.New("cannot read the session's database, sql_mode and character set")
	}
	mode := strings.ToUpper(string(vals[1]))
	s.rw.db = string(vals[0])
	s.rw.charset = strings.ToLower(string(vals[2]))
	s.rw.ansiQuotes = strings.Contains(mode, "ANSI_QUOTES")
	s.rw.noBackslash = strings.Contains(mode, "NO_BACKSLASH_ESCAPES")
	s.rw.infoKnown = true
	return nil
}

func (s *session) rewriteSession() rewrite.Session {
	return rewrite.Session{DB: s.rw.db, ANSIQuotes: s.rw.ansiQuotes, NoBackslashEscapes: s.rw.noBackslash, Charset: s.rw.charset}
}

// plan rewrites sql when it names a ruled table. It returns nil plans for
// statements to send unchanged.
func (s *session) plan(rw *rewrite.Rewriter, sql []byte) ([]rewrite.Plan, error) {
	if len(sql) == 0 || !rw.Catalog().Mentions(unsafe.String(&sql[0], len(sql))) {
		return nil, nil
	}
	if err := s.ensureSessionInfo(); err != nil {
		return nil, err
	}
	start := time.Now()
	plans, err := rw.Rewrite(string(sql), s.rewriteSession())
	s.metrics().rewriteTook(time.Since(start))
	if err != nil {
		s.srv.stats.parseFailures.Add(1)
		s.metrics().statement(PathParseFailure, "")
		s.log.Debug("statement does not parse; passing it through", "err", err)
		return nil, nil
	}
	if !rewrite.Changed(plans) {
		return nil, nil
	}
	return plans, nil
}

func (s *session) handleQuery(rw *rewrite.Rewriter, payload []byte) error {
	sql := payload[1:]
	if isRollback(sql) {
		s.rw.sawRollback = true
	}
	defer func() {
		// Only worth a scan while the session state is known (plan may
		// just have learned it).
		if s.rw.infoKnown && sessionMayChange(sql) {
			s.rw.infoKnown = false
		}
	}()
	plans, err := s.plan(rw, sql)
	if err != nil {
		return err
	}
	if plans == nil {
		s.metrics().statement(PathPassThrough, "")
		return s.forwardCommand(payload, expect{kind: respResults})
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("rewrite", "sql", string(sql), "plans", len(plans), "kind", plans[0].Kind.String())
	}
	seq := s.respSeq
	if rewrite.SessionCut(plans) >= 0 {
		if !s.multiStatements() {
			s.metrics().statement(PathPassThrough, "")
			return s.forwardCommand(payload, expect{kind: respResults})
		}
		return s.execCut(rw, plans, &seq)
	}
	// Reads only: one rewritten query, relayed as usual.
	simple := true
	for _, p := range plans {
		if !p.Shadow && p.Kind != rewrite.KindRead && (p.Kind != rewrite.KindOriginal || p.After != "" || p.Invalidate || p.Reload) {
			simple = false
		}
	}
	if simple {
		var text strings.Builder
		for _, p := range plans {
			switch {
			case p.Shadow:
				s.countShadow(p)
				text.WriteString(p.Original)
			case p.Kind == rewrite.KindRead:
				s.srv.stats.rewrittenReads.Add(1)
				s.metrics().statement(PathRewrittenRead, "")
				text.WriteString(p.SQL)
			default:
				s.metrics().statement(PathPassThrough, "")
				text.WriteString(p.SQL)
			}
		}
		return s.forwardCommand(queryPacket(text.String()), expect{kind: respResults})
	}
	// Several statements in one query need multi-statement support, which
	// the proxy honours as the server would: without it, the server gets the
	// text as it is and reports the error.
	if len(plans) > 1 && !s.multiStatements() {
		s.metrics().statement(PathPassThrough, "")
		return s.forwardCommand(payload, expect{kind: respResults})
	}
	// A lone increment whose key is known to exist: one statement, relayed
	// by the response pump with the OK patched.
	// (Autocommit increments take the path below, which can retry them.)
	if len(plans) == 1 && plans[0].Kind == rewrite.KindIncrement && !s.held && !s.autocommitted() {
		p := plans[0]
		if s.keyKnown(p.Table, p.Increment.KeyLiteral) {
			s.srv.stats.rewrittenWrites.Add(1)
			s.metrics().statement(PathRewrittenWrite, ruleName(p.Table))
			return s.forwardCommand(queryPacket(p.SQL), expect{kind: respResults, patch: &incPatch{matched: 1, changed: boolInt(!p.Increment.Zero)}})
		}
	}
	for i, p := range plans {
		more := i < len(plans)-1
		failed, err := s.execPlan(p, nil, &seq, more)
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
func (s *session) execCut(rw *rewrite.Rewriter, plans []rewrite.Plan, seq *byte) error {
	for {
		cut := rewrite.SessionCut(plans)
		run := plans
		if cut >= 0 {
			run = plans[:cut+1]
		}
		for i, p := range run {
			failed, err := s.execPlan(p, nil, seq, cut >= 0 || i < len(run)-1)
			if err != nil || failed {
				return err // an error ends a multi-statement query
			}
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
			if err := s.backendCmd(queryPacket(rest.String())); err != nil {
				return err
			}
			_, err := s.relayHeld(seq, false)
			return err
		}
		plans = next
	}
}

// multiStatements reports whether the client may send several statements
// in one query.
func (s *session) multiStatements() bool {
	switch {
	case s.rw.multiOn:
		return true
	case s.rw.multiOff:
		return false
	}
	return s.caps&mysql.CLIENT_MULTI_STATEMENTS != 0
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func (s *session) tableKey(t *rewrite.Table) string { return t.Schema + "." + t.Name }

func (s *session) keyKnown(t *rewrite.Table, key string) bool {
	known := s.lookupKey(t, key)
	s.metrics().existsLookup(known)
	return known
}

func (s *session) lookupKey(t *rewrite.Table, key string) bool {
	if key == "" {
		return false
	}
	tk := s.tableKey(t)
	if s.srv.exists.has(tk, key) {
		s.srv.stats.existsHits.Add(1)
		return true
	}
	for _, k := range s.rw.txnKnown {
		if k.table == tk && k.key == key {
			return true
		}
	}
	return false
}

// ruleName is the metrics label of a ruled table.
func ruleName(t *rewrite.Table) string {
	if t == nil {
		return ""
	}
	return t.Schema + "." + t.Name
}

// countShadow counts and logs a statement a shadow-mode rule would have
// rewritten.
func (s *session) countShadow(p rewrite.Plan) {
	n := s.srv.stats.shadowed.Add(1)
	s.metrics().statement(PathShadow, ruleName(p.Table))
	// At most one line a second at info (with the running count); every
	// statement at debug.
	now := time.Now().UnixNano()
	if last := s.srv.shadowLogged.Load(); now-last >= int64(time.Second) && s.srv.shadowLogged.CompareAndSwap(last, now) {
		s.log.Info("shadow: would rewrite", "rule", ruleName(p.Table), "as", p.Kind.String(), "shadowed_so_far", n)
	} else {
		s.log.Debug("shadow: would rewrite", "rule", ruleName(p.Table), "as", p.Kind.String())
	}
}

// rememberKey records that the base row of key exists: in the shared cache
// when that is committed knowledge, else until the transaction ends.
func (s *session) rememberKey(t *rewrite.Table, key string, inTxn bool) {
	if key == "" {
		return
	}
	if inTxn {
		s.rw.txnKnown = append(s.rw.txnKnown, knownKey{s.tableKey(t), key})
		return
	}
	s.srv.exists.add(s.tableKey(t), key)
}

// execPlan runs one plan while holding the backend and writes the client's
// response, numbering packets from *seq. exec, when set, is the client's
// COM_STMT_EXECUTE for a prepared plan (with its decoded parameters in ep).
// It reports whether the client got an ERR.
func (s *session) execPlan(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
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
		s.srv.stats.rewrittenReads.Add(1)
		s.metrics().statement(PathRewrittenRead, "")
	default:
		s.metrics().statement(PathPassThrough, ruleName(p.Table))
	}
	if err := s.backendCmd(queryPacket(sql)); err != nil {
		return false, err
	}
	failed, err := s.relayHeld(seq, more)
	if err != nil || failed {
		return failed, err
	}
	return false, s.afterSuccess(p)
}

// afterSuccess does a plan's follow-up once its statement succeeded.
func (s *session) afterSuccess(p rewrite.Plan) error {
	if p.Table != nil && p.Invalidate {
		s.srv.exists.forget(s.tableKey(p.Table))
	}
	if p.After != "" {
		r, err := s.query(p.After)
		if err != nil {
			return err
		}
		if r.failed() {
			s.log.Warn("slot clean-up after the statement failed", "table", p.Table.Qualified(), "err", (&backendError{r.errPkt}).Error())
		}
	}
	if p.Reload && s.srv.cfg.OnDDL != nil {
		go s.srv.cfg.OnDDL()
	}
	return nil
}

// execution is a client's COM_STMT_EXECUTE of a rewritten statement.
type execution struct {
	payload []byte
	params  execParams
	stmtID  uint32
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

// execAsWritten runs a prepared increment as the client wrote it: on the
// base row, with the server's own conversions, warnings and errors. It is
// the path for parameters the slotted upsert cannot take as they are.
func (s *session) execAsWritten(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	s.metrics().statement(PathPassThrough, ruleName(p.Table))
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
		if err := s.backendCmd(reset); err != nil {
			return false, err
		}
		if _, err := s.readResponse(); err != nil {
			return false, err
		}
	}
	pkt, err := ex.params.executePacket(id, idx)
	if err != nil {
		return true, s.writeErr(errPacket(proxyError(mysql.ER_UNKNOWN_ERROR,
			"a parameter of a rewritten statement sent with COM_STMT_SEND_LONG_DATA is longer than %d bytes", maxKeptLongData)), seq)
	}
	if err := s.backendCmd(pkt); err != nil {
		return false, err
	}
	return s.relayHeld(seq, more)
}

// writeOK sends a synthesized OK packet to the client.
func (s *session) writeOK(ok okPacket, info *string, seq *byte, more bool) error {
	if more {
		ok.status |= mysql.SERVER_MORE_RESULTS_EXISTS
	}
	_, err := s.client.writePacket(ok.build(s.caps, info), *seq)
	*seq++
	return err
}

func (s *session) writeErr(pkt []byte, seq *byte) error {
	_, err := s.client.writePacket(pkt, *seq)
	*seq++
	return err
}

func (s *session) execIncrement(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	inc := p.Increment
	key, changed, plain := incArgs(inc, ex)
	if !plain {
		return s.execAsWritten(p, ex, seq, more)
	}
	if !s.keyKnown(p.Table, key) {
		var r *response
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
		if r.failed() {
			return true, s.writeErr(r.errPkt, seq)
		}
		s.log.Debug("existence check", "key", key, "rows", len(r.rows), "cols", len(r.cols))
		if len(r.rows) == 0 {
			// No base row: the UPDATE would have matched nothing, and no
			// slot may be created for a key without a row.
			info := updateInfo(0, 0, 0)
			return false, s.writeOK(okPacket{status: r.status}, &info, seq, more)
		}
		s.rememberKey(p.Table, key, r.status&mysql.SERVER_STATUS_IN_TRANS != 0)
	}
	s.srv.stats.rewrittenWrites.Add(1)
	s.metrics().statement(PathRewrittenWrite, ruleName(p.Table))
	retryable := s.autocommitted()
	var r *response
	for attempt := 1; ; attempt++ {
		var err error
		if ex != nil {
			err = s.backendCmd(ex.payload)
		} else {
			err = s.backendCmd(queryPacket(p.SQL))
		}
		if err != nil {
			return false, err
		}
		if r, err = s.readResponse(); err != nil {
			return false, err
		}
		if !r.failed() {
			break
		}
		if retryable && s.retry(r.errCode(), attempt) {
			continue
		}
		s.noteErr(r.errCode())
		return true, s.writeErr(r.errPkt, seq)
	}
	s.noteStatus(r.status)
	patch := incPatch{matched: 1, changed: boolInt(changed)}
	ok := *r.ok
	raw := patch.apply(s, ok.build(s.caps, nil))
	patched, _ := parseOK(raw)
	info := updateInfo(patch.matched, patch.changed, patched.warnings)
	return false, s.writeOK(patched, &info, seq, more)
}

// autocommitted reports whether the next statement runs in a transaction of
// its own (autocommit on, no transaction open): only then may the proxy
// retry it after a deadlock or lock wait timeout, as nobody else's work is
// rolled back with it.
func (s *session) autocommitted() bool { return s.autocommit() && !s.inTransaction() }

// retry decides whether to run a failed autocommit statement again, and
// waits a jittered backoff first.
func (s *session) retry(code uint16, attempt int) bool {
	if (code != 1213 && code != 1205) || attempt > s.srv.cfg.MaxRetries {
		return false
	}
	s.srv.stats.retries.Add(1)
	s.metrics().retry()
	backoff := time.Duration(attempt) * time.Millisecond
	time.Sleep(backoff + rand.N(backoff))
	return true
}

// noteErr records errors that roll the transaction back.
func (s *session) noteErr(code uint16) {
	if code == 1213 || code == 1205 {
		s.rolledBack.Store(true)
	}
}

// executeInternal runs sql, prepared for the proxy's own use, with the given
// parameters of the client's execution.
func (s *session) executeInternal(sql string, ep execParams, idx []int) (*response, error) {
	id, err := s.internalStmt(sql)
	if err != nil {
		return nil, err
	}
	pkt, err := ep.executePacket(id, idx)
	if err != nil {
		// A parameter the proxy needs was sent as long data too long to
		// keep: the client gets an error for this statement; the
		// connection stays.
		return nil, &backendError{pkt: errPacket(proxyError(mysql.ER_UNKNOWN_ERROR,
			"a key parameter of a rewritten statement sent with COM_STMT_SEND_LONG_DATA is longer than %d bytes", maxKeptLongData))}
	}
	if err := s.backendCmd(pkt); err != nil {
		return nil, err
	}
	return s.readResponse()
}

// execGuarded folds the slots of every record the write may touch into the
// base rows, then runs the write, all in one transaction (the client's, or
// one the proxy opens and commits around an autocommit statement).
func (s *session) execGuarded(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	s.srv.stats.guardedWrites.Add(1)
	s.metrics().statement(PathGuarded, ruleName(p.Table))
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
			if err := s.writeOK(*ok, nil, seq, more); err != nil {
				return false, err
			}
			return false, s.afterSuccess(p)
		}
		code := binary.LittleEndian.Uint16(errPkt[1:])
		if wrapped && s.retry(code, attempt) {
			continue
		}
		s.noteErr(code)
		return true, s.writeErr(errPkt, seq)
	}
}

// guardedOnce runs one attempt of a guarded write: the client's OK, or the
// ERR to report (the proxy's own transaction already rolled back).
func (s *session) guardedOnce(p rewrite.Plan, ex *execution, wrapped bool) (*okPacket, []byte, error) {
	fail := func(pkt []byte) (*okPacket, []byte, error) {
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
		if r.failed() {
			return nil, r.errPkt, nil
		}
	}
	var keysResp *response
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
	if keysResp.failed() {
		return fail(keysResp.errPkt)
	}
	keys := make([]string, 0, len(keysResp.rows))
	for _, row := range keysResp.rows {
		var k string
		var ok bool
		if binaryRows {
			k, ok = binaryInt(keysResp.cols[0], row)
		} else if vals, err := textValues(row); err == nil && len(vals) == 1 && vals[0] != nil {
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
			if r.failed() {
				return fail(r.errPkt)
			}
		}
	}
	if ex != nil {
		err = s.backendCmd(ex.payload)
	} else {
		err = s.backendCmd(queryPacket(p.SQL))
	}
	if err != nil {
		return nil, nil, err
	}
	main, err := s.readResponse()
	if err != nil {
		return nil, nil, err
	}
	if main.failed() {
		return fail(main.errPkt)
	}
	if main.ok == nil {
		return nil, nil, errors.New("guarded statement returned rows")
	}
	ok := *main.ok
	if wrapped {
		r, err := s.query("COMMIT")
		if err != nil {
			return nil, nil, err
		}
		if r.failed() {
			return nil, r.errPkt, nil
		}
		ok.status = r.status
	}
	s.noteStatus(ok.status)
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

func (s *session) handlePrepare(rw *rewrite.Rewriter, payload []byte) error {
	plans, err := s.plan(rw, payload[1:])
	if err != nil {
		return err
	}
	if len(plans) != 1 {
		return s.forwardCommand(payload, expect{kind: respPrepare})
	}
	p := plans[0]
	sql := p.SQL
	switch {
	case p.Shadow:
		// Prepared as the client wrote it; executions are counted.
		sql = p.Original
	case p.Kind == rewrite.KindOriginal && p.After == "" && !p.Invalidate && !p.Reload:
		return s.forwardCommand(payload, expect{kind: respPrepare})
	}
	// Rewritten statements are prepared while holding the backend, to learn
	// the statement id their executions will name.
	id, params, errPkt, err := s.prepareHeld([]byte(sql), true)
	if err != nil || errPkt != nil {
		return err
	}
	if s.rw.stmts == nil {
		s.rw.stmts = map[uint32]*stmtInfo{}
	}
	s.rw.stmts[id] = &stmtInfo{plan: p, params: params}
	return nil
}

func (s *session) handleExecute(payload []byte) error {
	var st *stmtInfo
	if len(payload) >= 5 && len(s.rw.stmts) > 0 {
		st = s.rw.stmts[binary.LittleEndian.Uint32(payload[1:])]
	}
	if st == nil {
		s.metrics().statement(PathPassThrough, "")
		return s.forwardCommand(payload, expect{kind: respResults})
	}
	p := st.plan
	switch {
	case p.Shadow:
		s.countShadow(p)
		return s.forwardCommand(payload, expect{kind: respResults})
	case p.Kind == rewrite.KindRead:
		s.srv.stats.rewrittenReads.Add(1)
		s.metrics().statement(PathRewrittenRead, "")
		return s.forwardCommand(payload, expect{kind: respResults})
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
	if p.Kind == rewrite.KindIncrement && !s.held && !s.autocommitted() {
		key, changed, ok := incArgs(p.Increment, ex)
		if ok && !slices.Contains(ep.long, true) && s.keyKnown(p.Table, key) {
			s.srv.stats.rewrittenWrites.Add(1)
			s.metrics().statement(PathRewrittenWrite, ruleName(p.Table))
			return s.forwardCommand(payload, expect{kind: respResults, patch: &incPatch{matched: 1, changed: boolInt(changed)}})
		}
	}
	seq := s.respSeq
	_, err = s.execPlan(p, ex, &seq, false)
	return err
}
