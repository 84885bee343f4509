// Package executor runs the plans of the rewriter on a client's own backend
// connection, so that the client sees exactly the response its original
// statement would have produced: slotted increments answer like the UPDATE,
// guarded writes fold slots first, rewritten reads return the true totals.
//
// The proxy package frames and relays; it hands the executor only the
// commands that may need rewriting (Intercepts), one at a time, on the
// session's goroutine, and reports the outcome of every other response
// (Observe) so the executor always knows the transaction state. A Session
// is not safe for concurrent use; an Env is shared by all sessions and is.
package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// Statement paths: how a statement was handled (a metrics label).
const (
	PathPassThrough    = "pass_through"
	PathRewrittenRead  = "rewritten_read"
	PathRewrittenWrite = "rewritten_write"
	PathGuarded        = "guarded_write"
	PathParseFailure   = "parse_failure"
	PathShadow         = "shadow"
	PathRefused        = "refused"
	PathRolledUpRead   = "rolled_up_read"
)

// Recorder receives the executor's measurements. Implementations must be
// safe for concurrent use.
type Recorder interface {
	Statement(path, rule string)
	RewriteTook(seconds float64)
	BackendError(code uint16)
	Retry()
	// Queued records a statement that waited for its turn at the Gate;
	// overflowed: it ran without one, no turn having been given back for
	// the gate's wait.
	Queued(overflowed bool)
	// Coalesced records a batch of n autocommit increments of one record
	// sent as one (see coalesce.go).
	Coalesced(n int)
	// Consolidated records n identical reads answered by one query (see
	// consolidate.go).
	Consolidated(n int)
}

type nopRecorder struct{}

func (nopRecorder) Statement(string, string) {}
func (nopRecorder) RewriteTook(float64)      {}
func (nopRecorder) BackendError(uint16)      {}
func (nopRecorder) Retry()                   {}
func (nopRecorder) Queued(bool)              {}
func (nopRecorder) Coalesced(int)            {}
func (nopRecorder) Consolidated(int)         {}

// Stats are counters since start, shared by all sessions.
type Stats struct {
	RewrittenReads  atomic.Uint64
	RewrittenWrites atomic.Uint64
	GuardedWrites   atomic.Uint64
	ParseFailures   atomic.Uint64
	Shadowed        atomic.Uint64
	Retries         atomic.Uint64
	Refused         atomic.Uint64
	// Coalesced counts the increments sent in batches of two or more
	// (coalesce.go), and Batches those batches.
	Coalesced, Batches atomic.Uint64
	// ConsolidatedReads counts the reads answered by a query shared with
	// others (consolidate.go).
	ConsolidatedReads atomic.Uint64
}

// Env is what every session shares. Set its fields before the first
// session; afterwards it is safe for concurrent use.
type Env struct {
	// Metrics receives measurements; nil records nothing.
	Metrics Recorder
	// MaxRetries bounds how often a rewritten statement the proxy runs in
	// autocommit is retried after a deadlock (1213) or lock wait timeout
	// (1205); 0 disables retries.
	MaxRetries int
	// Gate queues rewritten statements of sessions that hold nothing; nil
	// lets them all run at once.
	Gate *Gate
	// OnDDL, when set, is called by the session after DDL on a ruled table
	// succeeded and the client has its response, before the session reads
	// its next command; it returns once the catalog is reloaded.
	OnDDL func()
	// GuardWindow, when set, is called between a guard and the statement
	// it guards at READ COMMITTED in a client's transaction (tests only: it
	// lets a test make a row appear in that window). Set it before serving.
	GuardWindow func()
	// SlotReader reads committed slot rows for folds inside clients'
	// REPEATABLE READ transactions (see foldKeys); nil makes those folds
	// lock the records' slot rows by range, gaps included.
	SlotReader SlotReader
	// MaxGuardKeys bounds the keys a guard keeps in memory; a write of
	// more rows folds every slotted record of its table instead (see
	// foldAllSlotted). Zero means 100,000.
	MaxGuardKeys int
	// Coalesce sends concurrent autocommit increments of one record as one
	// increment by their sum (see coalesce.go).
	Coalesce bool
	// Consolidate lets identical concurrent autocommit reads of counters
	// share one query (see consolidate.go).
	Consolidate bool

	Stats Stats

	coalesce    coalescer
	consolidate lanes[*reader]

	meta  metaCache
	slots slotUse
	// locked are the ruled tables whose counters transactions read after
	// incrementing them (see noteReadAfterIncrement); guarded by lockedMu.
	lockedMu     sync.RWMutex
	locked       map[string]bool // by rule name
	shadowLogged atomic.Int64    // unix nanoseconds of the last shadow log line at info
}

// SchemaChanged forgets what the executor learned of the schema (column
// definitions of statements); call it when the catalog is reloaded.
func (e *Env) SchemaChanged() { e.meta.forget() }

// SetSlotPartition sets the part of every rule's slots that increments
// pick from from now on (see SlotPartition); p must be Valid.
func (e *Env) SetSlotPartition(p SlotPartition) { e.slots.part.Store(&p) }

// SlotPartition returns the part of the slots increments pick from.
func (e *Env) SlotPartition() SlotPartition {
	if p := e.slots.part.Load(); p != nil {
		return *p
	}
	return SlotPartition{}
}

// NewEnv returns an Env with its shared caches.
func NewEnv() *Env { return &Env{} }

// lockedCounters reports whether increments of t's counters inside
// transactions run on the base row (see noteReadAfterIncrement).
func (e *Env) lockedCounters(t *rewrite.Table) bool {
	e.lockedMu.RLock()
	defer e.lockedMu.RUnlock()
	return e.locked[ruleName(t)]
}

// LockedTables lists the ruled tables whose increments inside transactions
// run on the base row.
func (e *Env) LockedTables() []string {
	e.lockedMu.RLock()
	defer e.lockedMu.RUnlock()
	var out []string
	for t := range e.locked {
		out = append(out, t)
	}
	return out
}
func (e *Env) metrics() Recorder {
	if e.Metrics == nil {
		return nopRecorder{}
	}
	return e.Metrics
}

// metrics is the session's Recorder: the Env's, noting each statement's
// path for LastPath.
func (s *Session) metrics() Recorder { return sessionRecorder{s} }

// LastPath is the path (Path*) of the last statement the session handled
// (the last one of a multi-statement query), or "" when the last command
// ran no statement through Handle.
func (s *Session) LastPath() string { return s.lastPath }

// sessionRecorder is the Env's Recorder, seen from one session.
type sessionRecorder struct{ s *Session }

func (r sessionRecorder) Statement(path, rule string) {
	r.s.lastPath = path
	r.s.env.metrics().Statement(path, rule)
}
func (r sessionRecorder) RewriteTook(seconds float64) { r.s.env.metrics().RewriteTook(seconds) }
func (r sessionRecorder) BackendError(code uint16)    { r.s.env.metrics().BackendError(code) }
func (r sessionRecorder) Retry()                      { r.s.env.metrics().Retry() }
func (r sessionRecorder) Queued(overflowed bool)      { r.s.env.metrics().Queued(overflowed) }
func (r sessionRecorder) Coalesced(n int)             { r.s.env.metrics().Coalesced(n) }
func (r sessionRecorder) Consolidated(n int)          { r.s.env.metrics().Consolidated(n) }

// Link is a session's two connections, owned by the session's goroutine
// and used by the executor only inside Handle.
type Link struct {
	Client, Backend *wire.Conn
	// Caps are the capabilities negotiated with the client (and, minus
	// CLIENT_SSL, with the backend).
	Caps uint32
	// Account names the client's account, user@host as the client logged
	// in (its host its address): sessions of one account may share reads
	// (Env.Consolidate). Empty: they share none.
	Account string
}

// Session is one client connection's rewriting state.
type Session struct {
	env  *Env
	link Link
	log  *slog.Logger
	rd   wire.Reader
	dial dialect.Dialect

	status uint16 // server status after the last response
	// untold is the ERR of a command of the proxy's own that ended the
	// client's transaction without the client knowing, until it is told
	// (untold.go); sentInTxn and sentEnds describe the command sent last
	// (noteSent).
	untold              []byte
	sentInTxn, sentEnds bool
	// wrapping: the open transaction is the proxy's own around an
	// autocommit statement (it has read nothing: see snapshotFolds).
	wrapping bool
	rw       rewriteState
	respSeq  byte // sequence id the current command's response starts with

	// warnings is the SHOW WARNINGS response saved for the client's last
	// statement (see saveWarnings), or nil.
	warnings *wire.Buffer
	// rowCount is what ROW_COUNT() gives after the client's last
	// statement, from the answer the client got (noteAnswer): its OK's
	// affected rows, -1 after rows or an error. rowCountExact: the server's
	// value is that, as long as the proxy sent no statement since
	// (statements counts those sent, rowCountAt as of the answer); a
	// statement the proxy answered itself (a slotted increment's upsert)
	// leaves the server's value another. See rowCountFor.
	rowCount      int64
	rowCountExact bool
	rowCountAt    uint64
	statements    uint64
	// triedWarnings are the rows of SHOW WARNINGS after each trial of the
	// guarded statement running now on one of its rows (tryRestricted), in
	// the order tried: directly the statement raised them before it met
	// the lock that stopped it (failOwn puts them first).
	triedWarnings [][]byte
	// keptWarnings are the saved warnings during a statement that may leave
	// them the client's (see answerSavedWarnings), else nil.
	keptWarnings *wire.Buffer
	// lastWarnings is the warning count of the last response relayed to
	// the client (Observe).
	lastWarnings uint16
	// commands counts the commands Handle and Relayed saw; steps counts
	// those that run statements (stepCommand).
	commands, steps uint64
	// txn is the open transaction's state, reset in one place
	// (settleTransaction) when it ends.
	txn txnState
	// stmtsInCommand is how many statements the command being handled
	// has (0 when it is relayed as it is), and stmtIndex the position of
	// the one running (0 for the first, and for a single one).
	stmtsInCommand, stmtIndex int
	// planDepth counts the plans being run (execPlan runs a fallback's
	// inside its own); openAtStart is whether a transaction was open when
	// the outermost began: a refusal after the proxy's own statements
	// opened one (autocommit off) rolls it back (see refuse).
	planDepth   int
	openAtStart bool
	// lastPath is the path of the last statement handled (LastPath).
	lastPath string
	// wait is the running statement's lock-wait budget (lockwait.go).
	wait lockWait
}

// NewSession starts the executor's view of a session whose authentication
// ended with server status status.
func NewSession(env *Env, link Link, log *slog.Logger, status uint16, serverVersion string) *Session {
	return &Session{
		env:    env,
		link:   link,
		log:    log,
		rd:     wire.Reader{Src: link.Backend, DeprecateEOF: link.Caps&mysql.CLIENT_DEPRECATE_EOF != 0},
		dial:   dialect.Parse(serverVersion),
		status: status,
	}
}

// Intercepts reports whether the proxy hands command cmd to Handle while a
// rewriter is configured: the commands that carry SQL, executions of
// prepared statements, and those that change state the executor keeps.
func Intercepts(cmd byte) bool {
	switch cmd {
	case mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_STMT_EXECUTE, mysql.COM_STMT_CLOSE,
		mysql.COM_STMT_SEND_LONG_DATA, mysql.COM_STMT_RESET, mysql.COM_INIT_DB,
		mysql.COM_RESET_CONNECTION, mysql.COM_SET_OPTION:
		return true
	}
	return false
}

// Observe records the outcome of a response the proxy relayed itself.
func (s *Session) Observe(res wire.Result) {
	s.lastWarnings = res.Warnings
	if res.RowCountKnown {
		s.noteAnswer(res.RowCount, true)
	}
	if res.Failed() {
		s.noteErr(res.ErrCode)
		return
	}
	s.noteStatus(res)
}

// Reset forgets the session's state after COM_CHANGE_USER (the server
// dropped its prepared statements and variables); status is the status of
// the authentication's OK.
func (s *Session) Reset(status uint16) {
	s.endTransaction() // the transaction, if any, was rolled back
	s.rw = rewriteState{}
	s.link.Account = ""    // another, maybe: the session shares no read
	s.noteAnswer(0, false) // a new session's ROW_COUNT()
	s.untold = nil
	if status != 0 {
		s.status = status
	}
}

// txnState is what the session knows of its open transaction: how it
// began, what it wrote through the proxy, what it holds. Records and slots
// are kept by rule name (schema.table), which outlives catalog reloads.
type txnState struct {
	// begin is the BEGIN or START TRANSACTION that opened it; beginAt and
	// beginStep are the session's commands and steps at it (txnFresh,
	// replayable).
	begin              []byte
	beginAt, beginStep uint64
	// replay is its increments since begin, for running it again after a
	// deadlock the proxy caused (replay.go).
	replay []replayed
	// own are the records it incremented in slots, by rule name and key
	// ("" for a key the proxy could not tell): reading one of their
	// counters takes their lock first (foldOwn).
	own map[string]map[string]bool
	// ownGuards are, by rule name, the guards of its increments whose
	// records the proxy could not tell (named by a UNIQUE key, or a key of
	// several columns or a string), each with the records it matched: they
	// find those records again when the transaction reads (foldOwn). A nil
	// guard (a prepared increment's) cannot be run again.
	ownGuards map[string][]ownGuard
	// isolation is its level, kept when a statement in it may have set the
	// session's level (the session variable then tells the next
	// transaction's, not this one's): see Session.isolation.
	isolation string
	// held are the slots its increments took (Env.slots), one per rule.
	held []heldSlot
	// ownRows are the slot rows its slotted increments wrote, by rule
	// name (see noteOwnRows).
	ownRows map[string][]ownSlot
}

// ownGuard is an increment's guard and the records the increment matched
// (see txnState.ownGuards).
type ownGuard struct {
	guard   *rewrite.Guard
	params  *execParams // a prepared increment's parameters (a copy)
	matched uint64
}

// execution is the execution o's parameters stand for (nil when it has
// none).
func (o ownGuard) execution() *execution {
	if o.params == nil {
		return nil
	}
	return &execution{params: *o.params}
}

// ErrAnswered marks a failure after the client already has its command's
// whole response (the backend broke while the proxy prepared its own
// statement for the client's, or cleared slots after a TRUNCATE): the
// session must end without another answer to that command.
var ErrAnswered = errors.New("the command was already answered")

// Handle runs one client command (its whole payload, sent by the client in
// packets packets) and writes the complete response to the client. It
// always consumes the command: by forwarding it as it is, by executing its
// rewrite, or by answering an error. An error return means the session
// must end (a backend failure is marked wire.ErrServer).
func (s *Session) Handle(rw *rewrite.Rewriter, payload []byte, packets byte) error {
	s.respSeq = packets
	s.link.Client.SeqShift = 0
	s.lastPath = ""
	s.commands++
	s.stmtsInCommand, s.stmtIndex = 0, 0
	if stepCommand(payload[0]) {
		s.steps++
	}
	s.settleTransaction()
	if s.untold != nil && endsUntold(payload) {
		s.untold = nil // the client ends the transaction itself
	}
	if done, err := s.answerSavedWarnings(payload); done || err != nil {
		return err
	}
	var err error
	switch payload[0] {
	case mysql.COM_QUERY:
		err = s.handleQuery(rw, payload)
	case mysql.COM_STMT_PREPARE:
		err = s.handlePrepare(rw, payload)
	case mysql.COM_STMT_EXECUTE:
		err = s.handleExecute(rw, payload)
	default:
		err = s.handleOther(payload)
	}
	if errors.Is(err, errUntold) {
		err = s.tellUntold()
	}
	s.link.Client.SeqShift = 0
	if !s.inTransaction() {
		s.endTransaction() // autocommit statements: theirs ended with them
	}
	return err
}

func (s *Session) inTransaction() bool { return s.status&mysql.SERVER_STATUS_IN_TRANS != 0 }
func (s *Session) autocommit() bool    { return s.status&mysql.SERVER_STATUS_AUTOCOMMIT != 0 }

// autocommitted reports whether the next statement runs in a transaction of
// its own (autocommit on, no transaction open): only then may the proxy
// retry it after a deadlock or lock wait timeout, as nobody else's work is
// rolled back with it.
func (s *Session) autocommitted() bool { return s.autocommit() && !s.inTransaction() }

// txnFresh reports whether the statement about to run is the first of its
// transaction: autocommit is off and no transaction is open, or the
// previous command was the BEGIN or START TRANSACTION that opened it. A
// deadlock or lock wait timeout in it loses no earlier work of the
// client's, so the proxy may run it again (after that BEGIN: restartTxn).
func (s *Session) txnFresh() bool {
	if s.stmtIndex > 0 {
		// Statements of the same command ran before it in the
		// transaction (INSERT …; UPDATE … in one query): running the
		// transaction again from its BEGIN would lose them.
		return false
	}
	if !s.inTransaction() {
		return !s.autocommit()
	}
	return s.txn.begin != nil && s.txn.beginAt == s.commands-1
}

// restartTxn prepares another attempt of a statement that failed first in
// its transaction (txnFresh) or in a transaction of its own
// (autocommitted): the transaction that BEGIN opened is opened again. errPkt
// is the ERR of that BEGIN.
func (s *Session) restartTxn(autocommitted bool) (errPkt []byte, err error) {
	if autocommitted || s.txn.begin == nil || s.txn.beginAt != s.commands-1 {
		return nil, nil
	}
	r, err := s.query(string(s.txn.begin))
	if err != nil {
		return nil, err
	}
	if r.Failed() {
		return r.Err, nil
	}
	return nil, nil
}

// noteBegin remembers a statement that opened a transaction (see txnFresh).
func (s *Session) noteBegin(sql []byte) {
	if isBegin(sql) && s.inTransaction() {
		// BEGIN commits the transaction before it: what the session knew
		// of that one (its own increments, slots, replay) is over, though
		// the status said "in transaction" throughout.
		s.endTransaction()
		s.txn.begin = append(s.txn.begin[:0], sql...)
		s.txn.beginAt = s.commands
		s.txn.beginStep = s.steps
		s.txn.replay = nil
	}
}

// isBegin reports whether sql is exactly BEGIN, BEGIN WORK or START
// TRANSACTION (with any characteristics), without comments: statements the
// proxy may run again to open an equivalent transaction. (MariaDB's BEGIN
// NOT ATOMIC starts a compound statement, not a transaction.)
func isBegin(sql []byte) bool {
	t := bytes.TrimRight(bytes.TrimSpace(sql), "; \t\r\n")
	if len(t) > 200 || bytes.ContainsAny(t, "/#-'\"`") {
		return false
	}
	words := bytes.Fields(t)
	switch {
	case len(words) == 1:
		return equalFold(words[0], "begin")
	case len(words) == 2 && equalFold(words[0], "begin"):
		return equalFold(words[1], "work")
	}
	return len(words) >= 2 && equalFold(words[0], "start") && (equalFold(words[1], "transaction") || bytes.HasPrefix(bytes.ToLower(words[1]), []byte("transaction,")))
}

// noteErr records a server error. A deadlock rolled the transaction
// back: the session is in none, though the error carries no status to say
// so.
func (s *Session) noteErr(code uint16) {
	s.metrics().BackendError(code)
	if code == mysql.ER_LOCK_DEADLOCK {
		s.status &^= mysql.SERVER_STATUS_IN_TRANS
	}
}

// noteStatus keeps the session's status from a response that carried one.
func (s *Session) noteStatus(res wire.Result) {
	if res.StatusKnown {
		s.status = res.Status
	}
}

// refuse answers a statement the proxy will not run with an error naming
// the rule and the reason.
func (s *Session) refuse(t *rewrite.Table, reason string, seq *byte) error {
	if s.planDepth > 0 && !s.openAtStart && s.inTransaction() && !s.autocommit() {
		// The proxy's own statements (a slotted attempt that failed)
		// opened the transaction, which holds nothing of the client's:
		// as nothing was run, none is open.
		if r, err := s.query("ROLLBACK"); err != nil {
			return err
		} else if r.Failed() {
			return s.writeErr(r.Err, seq)
		}
	}
	s.env.Stats.Refused.Add(1)
	s.metrics().Statement(PathRefused, ruleName(t))
	e := wire.Errorf(mysql.ER_NOT_SUPPORTED_YET, "42000", "rule %s: statement refused, nothing was run: %s", ruleName(t), reason)
	return s.writeErr(e.Packet(), seq)
}

// ruleName is the metrics label and error-message name of a ruled table.
func ruleName(t *rewrite.Table) string {
	if t == nil {
		return ""
	}
	return t.Schema + "." + t.Name
}

func (s *Session) String() string { return fmt.Sprintf("executor session (status %#x)", s.status) }

// NeedsPayload reports whether Handle needs the whole payload of a
// command the proxy would hand it, from the command's first bytes (head)
// and its first packet's length. It does not for executions of statements
// it did not rewrite and for long data too large to keep: the proxy relays
// those as they stream, and tells the executor with Relayed.
func (s *Session) NeedsPayload(head []byte, length int) bool {
	if len(head) == 0 || s.untold != nil {
		return true
	}
	switch head[0] {
	case mysql.COM_STMT_EXECUTE:
		return len(head) < 5 || s.rw.stmts[binary.LittleEndian.Uint32(head[1:])] != nil
	case mysql.COM_STMT_SEND_LONG_DATA:
		return length <= maxKeptLongData+7
	}
	return true
}

// Relayed records a command the proxy relayed without Handle (see
// NeedsPayload); head is its first bytes.
func (s *Session) Relayed(head []byte) {
	s.commands++
	if len(head) == 0 || stepCommand(head[0]) {
		s.steps++
	}
	if len(head) > 0 && head[0] == mysql.COM_QUERY {
		// A query too large to plan, relayed from a spool: it may have
		// changed the default database or sql_mode (a multi-statement
		// query), which the next planned statement reads again.
		s.rw.infoKnown = false
	}
	if len(head) > 0 && !keepsDiagnostics(head[0]) {
		s.warnings = nil
	}
	if len(head) >= 7 && head[0] == mysql.COM_STMT_SEND_LONG_DATA {
		if st := s.rw.stmts[binary.LittleEndian.Uint32(head[1:])]; st != nil {
			if i := int(binary.LittleEndian.Uint16(head[5:])); i < st.params {
				st.keepLongData(i, make([]byte, maxKeptLongData+1)) // too long to keep
			}
		}
	}
}

// Refuse answers a command the proxy cannot plan (its text is too large to
// read whole) with an error naming the reason; packets is how many packets
// the client sent it in.
func (s *Session) Refuse(packets byte, format string, args ...any) error {
	s.env.Stats.Refused.Add(1)
	s.metrics().Statement(PathRefused, "")
	seq := packets
	return s.writeErr(wire.Errorf(mysql.ER_NOT_SUPPORTED_YET, "42000", format, args...).Packet(), &seq)
}
