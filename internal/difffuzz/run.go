package difffuzz

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// slotsTable is the slot table's name in the ruled schema.
const slotsTable = "slotted_counters"

// Env is the server the fuzzer runs against and how it runs.
type Env struct {
	// Addr is the server's HOST:PORT; Version its version string.
	Addr, Version string
	// RootUser and RootPassword: the admin account (schemas, migrate,
	// catalog loads, roll-up).
	RootUser, RootPassword string
	// User and Password: the account the step connections use.
	User, Password string
	// Prefix names the schemas: Prefix_plain and Prefix_ruled.
	Prefix string
	// StepTimeout: a step that has not answered by then is blocked.
	StepTimeout time.Duration
	// LockWaitTimeout is innodb_lock_wait_timeout (seconds) of every step
	// connection, so that blocked steps end.
	LockWaitTimeout int
	// HangTimeout: a step that has not answered by then is hung (a
	// difference when the other side answered).
	HangTimeout time.Duration
	// Logger receives the proxy's logs; nil discards them.
	Logger *slog.Logger
}

func (e *Env) plain() string { return e.Prefix + "_plain" }
func (e *Env) ruled() string { return e.Prefix + "_ruled" }

// Refusal is a step the proxy refused by design (error 1235, "slotproxy:").
type Refusal struct {
	Reason string
	Step   Step
}

// Difference is what one side saw and the other did not.
type Difference struct {
	// Step is the index of the step in the sequence, -1 for the checks at
	// the end of the sequence.
	Step int
	// Stmt is the step's SQL, or the check's description.
	Stmt   string
	Kind   string
	Direct string
	Proxy  string
}

// Same reports whether d and o are the same kind of difference on the same
// statement (what shrinking keeps).
func (d *Difference) Same(o *Difference) bool {
	return d != nil && o != nil && d.Kind == o.Kind && d.Stmt == o.Stmt
}

// Outcome is what running a sequence found.
type Outcome struct {
	// Executed counts the steps run on both sides; Refused those the
	// proxy refused (run on neither).
	Executed int
	Refused  []Refusal
	// Documented are the documented differences seen (limits.md,
	// "Inherent to the pattern"), which are not failures; Stopped says
	// why the sequence ended early after one of them changed the state.
	Documented []string
	Stopped    string
	// Diff is the first difference, nil when none.
	Diff *Difference
}

// run is one sequence in flight.
type run struct {
	env  *Env
	seq  *Sequence
	out  *Outcome
	srv  *proxy.Server
	addr string

	admin  *client.Conn // roll-up and checks
	twins  []*twin
	roller rollup.Roller

	// documentedWait is the step a documented wait is pending for (the
	// direct side blocked, the proxy's increment did not), -1 if none.
	documentedWait int
	// bothWait is a multi-statement step holding an increment that is
	// blocked on both sides, -1 if none: its increment may have run
	// through the proxy, where directly it waits (limits.md's documented
	// wait), and a later statement of it then waits on both sides.
	bothWait int
	// bothWaitWhy is the documented reason bothWait stands for.
	bothWaitWhy string
	stop        bool
	// victim: a deadlock ended a step on one side only while another
	// connection's step was in flight (see documentedLock).
	victim bool
	// lastTruncate is the index of the last TRUNCATE step started, -1 if
	// none (see betweenAttempts).
	lastTruncate int
}

// twin is one connection pair: the proxied side (index 0) and the direct
// side (index 1), and the step in flight on them.
type twin struct {
	conns   [2]*client.Conn
	pending [2]chan obs
	got     [2]*obs
	// started is when each side's step in flight was sent.
	started [2]time.Time
	step    int // the step in flight, -1 if none
	// txn are the steps of the transaction open through the proxy on this
	// connection, as its responses' status shows (nil outside one).
	txn []Step
	// serializable: the connection set SERIALIZABLE at some point.
	serializable bool
	// failedInc: an increment failed in the open transaction (it may keep
	// the shared lock its slotted attempt took).
	failedInc bool
	// failedDup: a statement failed on a duplicate key (1062) in the open
	// transaction: an INSERT naming its AUTO_INCREMENT key may have raised
	// the table's persisted counter (see autoIncrementReopened).
	failedDup bool
	// failedPartWay: a write failed in the open transaction at one of its
	// rows (partWayError): its guard locked the rows after that one too.
	failedPartWay bool
	// autocommitOff: the connection set autocommit = 0 last (a failed
	// statement then leaves the transaction it began open, with its
	// locks, though its ERR carries no status to say so).
	autocommitOff bool
	// readUncommitted: the connection set READ UNCOMMITTED last.
	readUncommitted bool
	// weak: the connection set READ COMMITTED or READ UNCOMMITTED at some
	// point.
	weak bool
	// levelWeak: the session's level is READ COMMITTED or READ
	// UNCOMMITTED (the last it set); txnWeak: it was when the open
	// transaction began (a SET SESSION TRANSACTION ISOLATION LEVEL inside
	// a transaction applies to the next one).
	levelWeak, txnWeak bool
	// lastTxn are the steps of the last transaction that ended on this
	// connection (see documentedLock).
	lastTxn []Step
	// snapshot: the open transaction has made a consistent read (its
	// REPEATABLE READ snapshot exists); othersWrote are the tables other
	// connections wrote since; staleRow: the transaction then incremented
	// one of them (see staleOtherColumns).
	snapshot    bool
	othersWrote map[string]bool
	staleRow    bool
	// foldedFresh: the transaction then ran a guarded write that scans
	// (its WHERE is more than the key), or a locking read, of one of those
	// tables (see foldedOthers).
	foldedFresh bool
}

// foldedOthers reports whether a values difference on t is the one
// limits.md documents as "Rows a guarded write scanned": a REPEATABLE READ
// transaction read (its snapshot), another connection then wrote a table,
// and the transaction ran an UPDATE or DELETE of that table whose WHERE
// clause is more than its key, or a locking read of it. Its guard folded the records it scanned,
// which made their rows the transaction's own versions, with what the
// other connection committed, where directly the rows the statement did
// not change stay as its snapshot had them.
func (t *twin) foldedOthers() bool {
	return t.foldedFresh && !t.txnWeak && !t.serializable
}

// keyOnlyWhere matches a WHERE clause that names rows by key alone.
var keyOnlyWhere = regexp.MustCompile(`(?i)\bWHERE\s+(\w+\.)?id\s*(=\s*(\?|-?\d+)|IN\s*\([^)]*\))\s*$`)

// keyWhere matches a WHERE clause of the key alone, = or IN, of numbers
// or strings.
var keyWhere = regexp.MustCompile(`(?i)\bWHERE\s+(\w+\.)?id\s*(=\s*(\?|-?\d+|'[^']*')|IN\s*\([^)]*\))\s*$`)

// foldsUnknownRecords reports whether txn, a transaction's steps, has an
// increment whose records a condition found (no key named), then a write
// (or an increment) of the table in a statement after it: consistency.md's
// fold of every slotted record of the table by range, gaps included, for
// the transaction's records it does not know, which makes other
// transactions' first increments wait.
func foldsUnknownRecords(txn []Step) bool {
	seen := false
	for _, st := range txn {
		parts := []string{st.SQL}
		if st.Multi {
			parts = strings.Split(st.SQL, ";")
		}
		for _, part := range parts {
			part = strings.TrimSpace(part)
			upper := strings.ToUpper(part)
			write := strings.HasPrefix(upper, "UPDATE") || strings.HasPrefix(upper, "DELETE") || strings.HasPrefix(upper, "REPLACE") || strings.HasPrefix(upper, "INSERT")
			if seen && write {
				return true
			}
			if strings.HasPrefix(upper, "UPDATE") && isIncrement(Step{SQL: part}) && !keyWhere.MatchString(part) {
				seen = true
			}
		}
	}
	return false
}

// keyAndIndexedCondition reports whether st is an UPDATE or DELETE whose
// WHERE clause names the key and a condition on name (the generator's
// column with a UNIQUE index), in any statement of a multi-statement
// query.
func keyAndIndexedCondition(st Step) bool {
	for _, part := range strings.Split(st.SQL, ";") {
		upper := strings.ToUpper(strings.TrimSpace(part))
		if (strings.HasPrefix(upper, "UPDATE") || strings.HasPrefix(upper, "DELETE")) && strings.Contains(upper, " WHERE ID ") &&
			strings.Contains(upper, " AND NAME ") {
			return true
		}
	}
	return false
}

// scanningWrite reports whether st is an UPDATE or DELETE whose WHERE
// clause is more than its key (or that has none).
func scanningWrite(st Step) bool {
	upper := strings.ToUpper(strings.TrimSpace(st.SQL))
	if !strings.HasPrefix(upper, "UPDATE") && !strings.HasPrefix(upper, "DELETE") {
		return false
	}
	return !keyOnlyWhere.MatchString(strings.TrimSpace(st.SQL))
}

// staleOtherColumns reports whether a values difference on t is the one
// limits.md documents as "Other columns after an increment in a
// transaction that has read": a REPEATABLE READ transaction read (its
// snapshot), another connection then wrote a table, and the transaction
// incremented that table's counters. Directly the UPDATE made the row the
// transaction's own version, with what the other connection committed; a
// slotted increment does not write the row, which keeps reading as the
// snapshot had it.
func (t *twin) staleOtherColumns() bool {
	return t.staleRow && !t.weak && !t.serializable
}

// plainSelect reports whether st is one SELECT, as text or prepared: the
// proxy refreshes the records a transaction incremented before such a
// read (of counters or not), so that their other columns read as the
// transaction's own versions, as directly; reads inside writes and
// multi-statement queries it does not (limits.md).
func plainSelect(st Step) bool {
	return !st.Multi && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(st.SQL)), "SELECT")
}

// rangeError reports whether o ended in an out-of-range error (1264,
// 1690) or a CHECK constraint's (3819, MariaDB's 4025).
func rangeError(o obs) bool {
	if len(o.results) == 0 {
		return false
	}
	last := o.results[len(o.results)-1]
	return last.isErr && (last.code == 1264 || last.code == 1690 || last.code == 3819 || last.code == 4025)
}

// lockErrorRow is how an observation renders SHOW WARNINGS's row of a lock
// error (1205 or 1213).
var lockErrorRow = regexp.MustCompile(`(\("Error",(?:1205|1213),"[^"]*"\))+`)

// onceLockError is an observation's rendering with each run of a lock
// error's SHOW WARNINGS rows reduced to one.
func onceLockError(s string) string {
	return lockErrorRow.ReplaceAllStringFunc(s, func(m string) string { return m[:strings.Index(m, ")")+1] })
}

// noteWrite notes, on every other connection whose transaction has a
// snapshot, that t's step st wrote the tables it names.
func (r *run) noteWrite(t *twin, st Step, o obs) {
	upper := strings.ToUpper(strings.TrimSpace(st.SQL))
	if strings.HasPrefix(upper, "SELECT") || len(o.results) == 0 || o.results[len(o.results)-1].isErr {
		return
	}
	for _, other := range r.twins {
		if other == t || !other.snapshot {
			continue
		}
		for _, tb := range r.seq.Schema.Tables {
			if mentions(st.SQL, tb.Name) {
				if other.othersWrote == nil {
					other.othersWrote = map[string]bool{}
				}
				other.othersWrote[tb.Name] = true
			}
		}
	}
}

// mentions reports whether sql names table (as a word, or as the suffix of
// a view's name: v_t1 reads and writes t1).
func mentions(sql, table string) bool {
	for i := 0; ; {
		j := strings.Index(sql[i:], table)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(table)
		if end == len(sql) || !isWordByte(sql[end]) {
			return true
		}
		i = end
	}
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// follow notes step st's proxy-side observation o in the connection's
// transaction state.
func (t *twin) follow(st Step, o obs) {
	if st.Class == Isolation || strings.Contains(strings.ToUpper(st.SQL), "ISOLATION LEVEL") {
		upper := strings.ToUpper(st.SQL)
		t.serializable = t.serializable || strings.Contains(upper, "SERIALIZABLE")
		t.readUncommitted = strings.Contains(upper, "READ UNCOMMITTED")
		t.weak = t.weak || strings.Contains(upper, "READ UNCOMMITTED") || strings.Contains(upper, "READ COMMITTED")
		if strings.Contains(upper, "SESSION") {
			t.levelWeak = strings.Contains(upper, "READ UNCOMMITTED") || strings.Contains(upper, "READ COMMITTED")
		}
	}
	switch strings.ToUpper(strings.TrimSpace(st.SQL)) {
	case "SET AUTOCOMMIT = 0":
		t.autocommitOff = true
	case "SET AUTOCOMMIT = 1":
		t.autocommitOff = false
	}
	if len(o.results) == 0 {
		return
	}
	last := o.results[len(o.results)-1]
	if len(t.txn) > 0 {
		t.lastTxn = t.txn
	}
	upper := strings.ToUpper(strings.TrimSpace(st.SQL))
	if last.inTrans && !last.isErr {
		if strings.HasPrefix(upper, "SELECT") && !strings.Contains(upper, " FOR UPDATE") && !st.readsInShareMode() || strings.Contains(upper, "WITH CONSISTENT SNAPSHOT") {
			t.snapshot = true
		}
		for tb := range t.othersWrote {
			if incrementStep(st) {
				t.staleRow = t.staleRow || mentions(st.SQL, tb)
			}
			if scanningWrite(st) || lockingRead(st) {
				t.foldedFresh = t.foldedFresh || mentions(st.SQL, tb)
			}
		}
	}
	if !last.isErr && !last.inTrans {
		// (An ERR carries no status: a failed statement leaves the
		// transaction open, but for a deadlock, below.)
		t.snapshot, t.othersWrote, t.staleRow, t.foldedFresh = false, nil, false, false
	}
	switch {
	case last.isErr && last.code == 1213:
		t.txn, t.failedInc, t.failedPartWay, t.failedDup = nil, false, false, false // the server rolled the transaction back
		t.snapshot, t.othersWrote, t.staleRow, t.foldedFresh = false, nil, false, false
	case last.isErr:
		if len(t.txn) > 0 || t.autocommitOff {
			t.txn = append(t.txn, st) // a failed statement keeps its locks
			t.failedInc = t.failedInc || isIncrement(st)
			t.failedPartWay = t.failedPartWay || partWayError(last.code)
			t.failedDup = t.failedDup || last.code == 1062
		}
	case last.inTrans:
		if len(t.txn) == 0 {
			t.txnWeak = t.levelWeak
		}
		t.txn = append(t.txn, st)
	default:
		t.txn, t.failedInc, t.failedPartWay, t.failedDup = nil, false, false, false
	}
}

// partWayInFlight reports whether o's step in flight, not compared yet,
// failed through the proxy at one of its rows (partWayError) in an open
// transaction: what failedPartWay says once it is compared.
func (o *twin) partWayInFlight() bool {
	p := o.got[proxySide]
	if o.step < 0 || p == nil || len(p.results) == 0 || len(o.txn) == 0 && !o.autocommitOff {
		return false
	}
	last := p.results[len(p.results)-1]
	return last.isErr && partWayError(last.code)
}

// autoIncrementReopened reports whether p and d differ only in a higher
// insert id through the proxy for st, an upsert, in a transaction in which
// an insert failed on a duplicate key, or while another connection's
// insert waits (insertWaiting) (limits.md, "AUTO_INCREMENT after a failed
// insert"): MySQL raises a table's persisted AUTO_INCREMENT counter for an
// explicit key even when the insert fails or waits for a lock, and starts
// from it again once another connection opens the table, which the
// proxy's check of whether the upsert's row exists does (directly nobody
// else opened it; checked directly with three connections: 5 without the
// third one's read, 6 with it).
func (t *twin) autoIncrementReopened(st Step, p, d obs, insertWaiting bool) bool {
	if !t.failedDup && !insertWaiting || len(t.txn) == 0 && !t.autocommitOff || len(p.results) != 1 || len(d.results) != 1 {
		return false
	}
	up := strings.ToUpper(st.SQL)
	if !strings.HasPrefix(strings.TrimSpace(up), "INSERT") || !strings.Contains(up, "ON DUPLICATE KEY UPDATE") {
		return false
	}
	pr, dr := p.results[0], d.results[0]
	if pr.isErr || dr.isErr || pr.insertID <= dr.insertID {
		return false
	}
	pr.insertID = dr.insertID
	return pr == dr
}

// partWayError reports whether code is an error an UPDATE raises at one of
// its rows: beyond a column's range, a CHECK constraint, a value that does
// not convert in a strict sql_mode.
func partWayError(code uint16) bool {
	switch code {
	case 1264, 1690, 3819, 4025, 1292, 1366: // 1292, 1366: a value strict mode does not convert
		return true
	}
	return false
}

// isIncrement reports whether st may be an increment (a reproducer's steps
// have no class: the SQL of an UPDATE that adds or subtracts).
func isIncrement(st Step) bool {
	upper := strings.ToUpper(st.SQL)
	return st.Class.IsIncrement() || strings.Contains(upper, "UPDATE") && strings.ContainsAny(upper, "+-")
}

// conditionalWrite reports whether st is an UPDATE or DELETE whose WHERE
// clause has conditions beside its key's (a guarded write of rows its
// guard locks by key, matched or not).
func conditionalWrite(st Step) bool {
	upper := strings.ToUpper(strings.TrimSpace(st.SQL))
	return (strings.HasPrefix(upper, "UPDATE") || strings.HasPrefix(upper, "DELETE")) && strings.Contains(upper, " WHERE ") && strings.Contains(upper, " AND ")
}

// inserts reports whether st inserts rows (INSERT, REPLACE, an upsert),
// in any statement of a multi-statement query.
func (st Step) inserts() bool {
	parts := []string{st.SQL}
	if st.Multi {
		// The generator joins a multi-statement query's statements with
		// "; " and puts no semicolon in a literal.
		parts = strings.Split(st.SQL, ";")
	}
	for _, part := range parts {
		upper := strings.ToUpper(strings.TrimSpace(part))
		if strings.HasPrefix(upper, "INSERT") || strings.HasPrefix(upper, "REPLACE") {
			return true
		}
	}
	return false
}

// readsInShareMode reports whether st is a locking read in share mode.
func (st Step) readsInShareMode() bool {
	upper := strings.ToUpper(st.SQL)
	return strings.HasPrefix(strings.TrimSpace(upper), "SELECT") && (strings.Contains(upper, "LOCK IN SHARE MODE") || strings.Contains(upper, "FOR SHARE"))
}

// lockingRead reports whether st is a locking read (FOR UPDATE, FOR
// SHARE, LOCK IN SHARE MODE), which folds the records it reads.
func lockingRead(st Step) bool {
	return st.readsInShareMode() || strings.HasPrefix(strings.TrimSpace(strings.ToUpper(st.SQL)), "SELECT") && strings.Contains(strings.ToUpper(st.SQL), " FOR UPDATE")
}

// incrementStep reports whether st increments counters: an increment
// class or an upsert, or (for a step read from a reproducer, which has no
// class) a statement that looks like one (isIncrement).
func incrementStep(st Step) bool {
	if st.Class == "" || st.Multi {
		// A reproducer's step, or a multi-statement query, which may hold
		// an increment: as a reproducer replays it.
		return st.Class.IsIncrement() || st.Class == Upsert || isIncrement(st)
	}
	return st.Class.IsIncrement() || st.Class == Upsert
}

const (
	proxySide  = 0
	directSide = 1
)

// Run runs seq from scratch: fresh schemas, a proxy, its connections.
// The error is for the harness (a server that cannot be reached, DDL that
// fails); differences are in the outcome.
func Run(ctx context.Context, env *Env, seq *Sequence) (*Outcome, error) {
	r := &run{env: env, seq: seq, out: &Outcome{}, documentedWait: -1, bothWait: -1, lastTruncate: -1}
	admin, err := client.Connect(env.Addr, env.RootUser, env.RootPassword, "")
	if err != nil {
		return nil, fmt.Errorf("admin connection: %w", err)
	}
	defer admin.Close()
	r.admin = admin
	cat, set, err := r.setup(ctx)
	if err != nil {
		return nil, err
	}
	stopProxy, err := r.startProxy(ctx, cat, set)
	if err != nil {
		return nil, err
	}
	defer stopProxy()
	defer r.closeTwins()
	for range seq.Conns {
		t, err := r.connect()
		if err != nil {
			return nil, err
		}
		r.twins = append(r.twins, t)
	}
	for i, st := range seq.Steps {
		if r.stop || r.out.Diff != nil {
			break
		}
		if err := r.step(ctx, i, st); err != nil {
			return nil, fmt.Errorf("step %d %s: %w", i+1, st, err)
		}
	}
	for _, t := range r.twins {
		r.settle(t)
	}
	if r.out.Diff != nil {
		return r.out, nil
	}
	return r.out, r.finish(ctx)
}

// setup creates both schemas and migrates the ruled one.
func (r *run) setup(ctx context.Context) (*rewrite.Catalog, *rules.Set, error) {
	for _, db := range []string{r.env.plain(), r.env.ruled()} {
		stmts := append([]string{"DROP DATABASE IF EXISTS " + db, "CREATE DATABASE " + db, "USE " + db}, r.seq.Schema.DDL()...)
		for _, s := range stmts {
			if _, err := r.admin.Execute(s); err != nil {
				return nil, nil, fmt.Errorf("setup %s: %s: %w", db, s, err)
			}
		}
	}
	var rs []*rules.Rule
	for i, text := range r.seq.Schema.Rules(r.env.ruled()) {
		rule, err := rules.Parse(fmt.Sprintf("rule%d.yaml", i+1), []byte(text))
		if err != nil {
			return nil, nil, fmt.Errorf("rule %q: %w", text, err)
		}
		rs = append(rs, rule)
	}
	set, err := rules.NewSet(rs...)
	if err != nil {
		return nil, nil, fmt.Errorf("rules: %w", err)
	}
	if err := catalog.Migrate(ctx, r.admin, set, slotsTable, io.Discard); err != nil {
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	cat, err := catalog.Load(ctx, r.admin, set, slotsTable)
	if err != nil {
		return nil, nil, fmt.Errorf("load catalog: %w", err)
	}
	return cat, set, nil
}

// startProxy starts a proxy with cat on a loopback port, reloading its
// catalog after DDL as slotproxy serve does.
func (r *run) startProxy(ctx context.Context, cat *rewrite.Catalog, set *rules.Set) (stop func(), err error) {
	logger := r.env.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	loader, err := client.Connect(r.env.Addr, r.env.RootUser, r.env.RootPassword, "")
	if err != nil {
		return nil, fmt.Errorf("loader connection: %w", err)
	}
	var loaderMu sync.Mutex
	load := func(ctx context.Context) (*rewrite.Rewriter, error) {
		loaderMu.Lock()
		defer loaderMu.Unlock()
		c, err := catalog.Load(ctx, loader, set, slotsTable)
		if err != nil {
			return nil, err
		}
		return catalog.NewRewriter(c, r.env.Version), nil
	}
	rctx, cancel := context.WithCancel(ctx)
	var reloader *catalog.Reloader
	srv, err := proxy.NewServer(proxy.Config{
		Backend:  r.env.Addr,
		Rewriter: catalog.NewRewriter(cat, r.env.Version),
		Logger:   logger,
		OnDDL:    func() { reloader.Trigger() },
		Coalesce: true, Consolidate: true, // as serve does by default
	})
	if err != nil {
		cancel()
		loader.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	reader := catalog.NewSlotReader(func(ctx context.Context) (*client.Conn, error) {
		return client.ConnectWithContext(ctx, r.env.Addr, r.env.RootUser, r.env.RootPassword, "", time.Minute)
	}, 2)
	srv.SetSlotReader(reader)
	reloader = catalog.NewReloader(rctx, load, srv.SetRewriter, logger)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		loader.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	r.srv, r.addr = srv, ln.Addr().String()
	return func() {
		cancel()
		_ = srv.Close()
		<-done
		reader.Close()
		loaderMu.Lock()
		loader.Close()
		loaderMu.Unlock()
	}, nil
}

// connect opens a connection pair with multi-statements and a short lock
// wait.
func (r *run) connect() (*twin, error) {
	t := &twin{step: -1}
	multi := func(c *client.Conn) error { return c.SetCapability(mysql.CLIENT_MULTI_STATEMENTS) }
	for side, at := range [2][2]string{{r.addr, r.env.ruled()}, {r.env.Addr, r.env.plain()}} {
		c, err := client.Connect(at[0], r.env.User, r.env.Password, at[1], multi)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("connect to %s: %w", at[0], err)
		}
		t.conns[side] = c
		// Row locks and metadata locks (TRUNCATE, DDL) alike.
		q := fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d, SESSION lock_wait_timeout = %d", r.env.LockWaitTimeout, r.env.LockWaitTimeout)
		if _, err := c.Execute(q); err != nil {
			t.close()
			return nil, fmt.Errorf("lock wait timeout: %w", err)
		}
	}
	return t, nil
}

func (t *twin) close() {
	for _, c := range t.conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

func (r *run) closeTwins() {
	for _, t := range r.twins {
		t.close()
	}
	// Pending goroutines end once their connections are closed.
	for _, t := range r.twins {
		for side := range t.pending {
			if t.pending[side] != nil {
				<-t.pending[side]
			}
		}
	}
}

// step runs step i: first through the proxy, then (unless refused)
// directly, each waiting up to StepTimeout.
func (r *run) step(ctx context.Context, i int, st Step) error {
	if st.Class == Rollup {
		s, err := r.roller.Once(ctx, r.admin, r.srv.Rewriter().Catalog(), rollup.Options{})
		if err != nil || s.Unfoldable > 0 {
			r.out.Diff = &Difference{Step: i, Stmt: st.SQL, Kind: KindRollup, Proxy: fmt.Sprintf("roll-up: %+v, %v", s, err)}
		}
		return nil
	}
	t := r.twins[st.Conn]
	r.settle(t)
	if r.stop || r.out.Diff != nil {
		return nil
	}
	// A step another connection has in flight, that the last step may
	// have unblocked (a COMMIT), gets a moment to end on each side first:
	// what this step sees must not depend on how fast each side finishes
	// the work it was let go on (the proxy may have more statements to
	// run after the lock it waited for).
	for _, o := range r.twins {
		if o == t || o.step < 0 {
			continue
		}
		r.passTimeouts(o)
		for side := range o.pending {
			if o.pending[side] != nil {
				r.wait(o, side, refusalWindow)
			}
		}
	}
	t.step = i
	if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(st.SQL)), "TRUNCATE") {
		r.lastTruncate = i
	}
	r.start(t, proxySide, st)
	// The direct side starts once the proxy has answered, or after a
	// moment (a refusal comes at once): a step that blocks on both sides
	// then waits from nearly the same time on each, so the lock wait
	// timeouts of the two end together.
	r.wait(t, proxySide, refusalWindow)
	if p := t.got[proxySide]; p != nil {
		if reason := p.refusal(); reason != "" {
			r.out.Refused = append(r.out.Refused, Refusal{Reason: reason, Step: st})
			t.got[proxySide], t.step = nil, -1
			return nil
		}
		if p.refusedLater() {
			// Part of the query ran through the proxy: the two sides can
			// no longer be compared.
			r.out.Refused = append(r.out.Refused, Refusal{Reason: "multi-statement query refused after its first statement", Step: st})
			r.stopBecause("a multi-statement query was refused in part")
			t.got[proxySide], t.step = nil, -1
			return nil
		}
	}
	r.start(t, directSide, st)
	// Both sides get the same time from here: a step that blocks on both
	// is collected after one step timeout, well within the lock wait
	// timeout, and the step that unblocks it runs on both sides in time.
	deadline := time.Now().Add(r.env.StepTimeout)
	if t.pending[proxySide] != nil {
		r.wait(t, proxySide, time.Until(deadline))
	}
	r.wait(t, directSide, time.Until(deadline))
	r.out.Executed++
	if t.got[proxySide] != nil && t.got[directSide] != nil {
		r.compare(t)
	} else if t.got[proxySide] == nil && t.got[directSide] == nil && st.Multi && incrementStep(st) && r.bothWait < 0 {
		r.bothWait, r.bothWaitWhy = i, bothWaited
		for _, o := range r.twins {
			if o != t && o.failedPartWay {
				// Its statements may wait for the rows a failed write's
				// guard locked (and directly never reached) instead.
				r.bothWaitWhy = partWayWaited
			}
		}
	} else if t.got[proxySide] != nil && incrementStep(st) && r.documentedWait < 0 {
		// The direct increment (or upsert increment) waits for a row lock
		// that the proxy's slotted increment does not take: by design
		// (limits.md, "Waits and deadlocks"). Its result is compared when
		// it comes.
		r.documentedWait = i
		r.out.Documented = append(r.out.Documented, "an increment blocked directly, not through the proxy")
	} else if t.got[directSide] != nil && t.got[proxySide] == nil {
		// Blocked through the proxy only: when limits.md documents the
		// wait, the sequence stops now, since what runs while it waits
		// (a read missing the row it would have written) differs because
		// of it; else its result is compared when it comes.
		if why := r.documentedLock(t, st, obs{blocked: true}, *t.got[directSide]); why != "" {
			r.out.Documented = append(r.out.Documented, why)
			r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		}
	}
	return nil
}

// passTimeouts waits for o's step in flight to end on both sides when it
// has waited for a lock so long that its lock wait timeout may be near on
// either side: the direct side starts up to refusalWindow after the
// proxy's, so a COMMIT sent now could free the row for one side only,
// after the other's wait already ended in 1205 (the seed
// 1795917433563037363 read 20 through the proxy, 18 directly, so). A step
// still waiting when both lock wait timeouts have passed (the proxy's
// retries, a second lock) is left waiting.
func (r *run) passTimeouts(o *twin) {
	if r.env.LockWaitTimeout <= 0 {
		return
	}
	timeout := time.Duration(r.env.LockWaitTimeout) * time.Second
	var first, last time.Time
	for side := range o.pending {
		if o.pending[side] == nil {
			continue
		}
		if first.IsZero() || o.started[side].Before(first) {
			first = o.started[side]
		}
		if o.started[side].After(last) {
			last = o.started[side]
		}
	}
	if first.IsZero() || time.Since(first) < timeout-timeoutMargin {
		return
	}
	end := last.Add(timeout + timeoutMargin)
	for side := range o.pending {
		if o.pending[side] != nil {
			r.wait(o, side, time.Until(end))
		}
	}
}

// timeoutMargin is how near a lock wait timeout a step must be, on either
// side, for the next step to wait for it to pass (see passTimeouts): more
// than refusalWindow and the time a step takes to run on both sides.
const timeoutMargin = 700 * time.Millisecond

// refusalWindow is how long a step runs through the proxy alone before it
// runs directly too (see step).
const refusalWindow = 100 * time.Millisecond

// start runs st on one side of t in a goroutine.
func (r *run) start(t *twin, side int, st Step) {
	ch := make(chan obs, 1)
	t.pending[side], t.got[side], t.started[side] = ch, nil, time.Now()
	c := t.conns[side]
	go func() { ch <- execute(c, st) }()
}

// wait waits up to d for the pending step of one side; a step that takes
// longer is marked blocked and collected later.
func (r *run) wait(t *twin, side int, d time.Duration) bool {
	select {
	case o := <-t.pending[side]:
		// Answered already (a timer of no time left must not win).
		t.pending[side], t.got[side] = nil, &o
		return true
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case o := <-t.pending[side]:
		t.pending[side], t.got[side] = nil, &o
		return true
	case <-timer.C:
		return false
	}
}

// settle collects the step in flight on t (waiting up to HangTimeout for
// each side) and compares it.
func (r *run) settle(t *twin) {
	if t.step < 0 {
		return
	}
	for side := range t.pending {
		if t.pending[side] == nil {
			continue
		}
		if !r.wait(t, side, r.env.HangTimeout) {
			states := [2]string{"(not waited for)", "(not waited for)"}
			states[side] = fmt.Sprintf("no answer within %v", r.env.HangTimeout)
			r.setDiff(t.step, KindHung, states[directSide], states[proxySide])
			r.stopBecause("a step hung")
			return
		}
		t.got[side].blocked = true
	}
	r.compare(t)
}

// bothWaited is the documented difference of a multi-statement query
// holding an increment blocked on both sides (run.bothWait): limits.md's
// increment that waits directly and not through the proxy, which the
// fuzzer cannot see when a later statement of the query waits on both.
const bothWaited = "a multi-statement query with an increment, blocked on both sides: its increment may not have waited through the proxy"

// partWayWaited is the documented wait for the rows a write that failed
// part way keeps locked in its open transaction (its guard locked them all
// first; directly the rows after the failing one are never reached).
const partWayWaited = "a wait for a row (or gap) after the one a write failed on in an open transaction, which its guard locked"

// compare compares the collected results of t's step.
func (r *run) compare(t *twin) {
	i := t.step
	p, d := *t.got[proxySide], *t.got[directSide]
	t.got, t.step = [2]*obs{}, -1
	rename := func(s string) string { return strings.ReplaceAll(s, r.env.plain(), r.env.ruled()) }
	if r.stop {
		return
	}
	kind := kindOf(p, d, rename)
	st := r.seq.Steps[i]
	defer r.noteWrite(t, st, p)
	defer t.follow(st, p)
	if i == r.documentedWait {
		r.documentedWait = -1
		d.blocked, p.blocked = false, false
		if kindOf(p, d, rename) != "" {
			r.stopBecause(fmt.Sprintf("step %d, an increment that waited directly and not through the proxy, then answered differently (documented)", i+1))
		}
		return
	}
	if i == r.bothWait {
		r.bothWait = -1
		if kind != "" {
			r.out.Documented = append(r.out.Documented, r.bothWaitWhy)
			r.stopBecause(fmt.Sprintf("step %d, a multi-statement query with an increment that waited on both sides, answered differently (documented)", i+1))
		}
		return
	}
	if kind == "" {
		return
	}
	if r.bothWait >= 0 {
		r.out.Documented = append(r.out.Documented, r.bothWaitWhy)
		r.stopBecause(fmt.Sprintf("step %d differed while step %d, a multi-statement query with an increment, waited on both sides (documented)", i+1, r.bothWait+1))
		return
	}
	if r.documentedWait >= 0 {
		r.stopBecause(fmt.Sprintf("step %d differed while step %d waited directly and not through the proxy (documented)", i+1, r.documentedWait+1))
		return
	}
	insertWaiting := false
	for _, o := range r.twins {
		insertWaiting = insertWaiting || o != t && o.step >= 0 && r.seq.Steps[o.step].inserts()
	}
	if kind == KindAffected && t.autoIncrementReopened(st, p, d, insertWaiting) {
		why := "an upsert's AUTO_INCREMENT value after an insert of an explicit key failed on a duplicate in the transaction or waits on another connection (MySQL restarts from its persisted counter once another connection opens the table)"
		r.out.Documented = append(r.out.Documented, why)
		r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		return
	}
	if kind == KindValues && t.readUncommitted {
		for _, o := range r.twins {
			if o != t && len(o.txn) > 0 {
				why := "a READ UNCOMMITTED read of another transaction's uncommitted work"
				r.out.Documented = append(r.out.Documented, why)
				r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
				return
			}
		}
	}
	if why := r.documentedLock(t, st, p, d); why != "" {
		r.out.Documented = append(r.out.Documented, why)
		r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		return
	}
	if kind == KindValues && onceLockError(p.String()) == onceLockError(rename(d.String())) {
		// limits.md: MariaDB lists a lock error once or twice in SHOW
		// WARNINGS depending on the access path its optimizer chose.
		why := "a lock error listed once or twice in SHOW WARNINGS (MariaDB's count depends on the access path)"
		r.out.Documented = append(r.out.Documented, why)
		return
	}
	if (kind == KindError && rangeError(d) || kind == KindAffected) && incrementStep(st) && r.lastTruncate > i {
		// limits.md: an autocommit increment whose slot cannot take its
		// delta runs again on the base row, in a transaction of its own;
		// a TRUNCATE that waited for the table can run in between (the
		// increment then finds no row, where directly it failed with the
		// range error or wrote the row).
		why := "a TRUNCATE that ran between an increment's slotted attempt and its run on the base row"
		r.out.Documented = append(r.out.Documented, why)
		r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		return
	}
	if kind == KindValues && t.foldedOthers() {
		why := "rows a guarded write scanned (or a locking read read) in a REPEATABLE READ transaction, read as the transaction's own versions after its guard folded them"
		r.out.Documented = append(r.out.Documented, why)
		r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		return
	}
	if kind == KindValues && t.staleOtherColumns() && !plainSelect(st) {
		why := "a row's other columns after a slotted increment in a REPEATABLE READ transaction whose snapshot predates another connection's write"
		r.out.Documented = append(r.out.Documented, why)
		r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		return
	}
	if n := len(p.results); n > 0 && p.results[n-1].isErr && p.results[n-1].code == 1412 && (len(d.results) < n || !d.results[n-1].isErr) {
		// MariaDB refuses the guard's read of a table another session
		// re-created (TRUNCATE) since the transaction's snapshot
		// (limits.md, "A write after another session's TRUNCATE").
		why := "a guarded write in a transaction older than a TRUNCATE of its table (1412)"
		r.out.Documented = append(r.out.Documented, why)
		r.stopBecause(fmt.Sprintf("step %d: %s (documented)", i+1, why))
		return
	}
	r.out.Diff = &Difference{Step: i, Stmt: st.SQL, Kind: kind, Direct: rename(d.String()), Proxy: p.String()}
}

// documentedLock names the documented difference in waits (limits.md,
// "Waits and deadlocks") that the proxy side's p, compared with the direct
// side's d, shows on connection t, or returns "": the proxy waited, or
// failed with a lock wait timeout or a deadlock, where directly the step
// did not, while a transaction open through the proxy holds what the
// documentation says locks more than directly. Values never qualify.
func (r *run) documentedLock(t *twin, step Step, p, d obs) string {
	// at is the index of the statement of a step (several for a
	// multi-statement query) that failed with code, len(results) if none.
	at := func(o obs, code uint16) int {
		for i, r := range o.results {
			if r.isErr && r.code == code {
				return i
			}
		}
		return len(o.results) + 1
	}
	lockErr := func(o obs, code uint16) bool { return at(o, code) < len(o.results) }
	// sooner: o failed with code at an earlier statement than other (or
	// other not at all).
	sooner := func(o, other obs, code uint16) bool { return lockErr(o, code) && at(o, code) < at(other, code) }
	waited := p.blocked && !d.blocked || sooner(p, d, 1205)
	deadlocked := sooner(p, d, 1213)
	// The other way round: directly the step waited or failed on a lock,
	// through the proxy it did not.
	spared := d.blocked && !p.blocked || sooner(d, p, 1205) || sooner(d, p, 1213)
	if !waited && !deadlocked && !spared {
		return ""
	}
	if waited && !d.blocked && len(d.results) == 1 && d.results[0].isErr && partWayError(d.results[0].code) &&
		strings.HasPrefix(strings.ToUpper(strings.TrimSpace(step.SQL)), "UPDATE") {
		// limits.md: a guarded write that fails on one of its rows locked
		// the rows after it first (beyond the rows an UPDATE by key list,
		// or in autocommit by a scan, tries one at a time), and waited for
		// one another transaction holds; directly the UPDATE failed at
		// that row at once.
		return "a write that fails part way directly, whose guard waited for a row after the one it fails on"
	}
	// A deadlock forms on both sides, but the server ends the transaction
	// it weighs least (rows locked and changed), which the proxy's own
	// statements change: it may end another one than directly (and an
	// autocommit statement the proxy ran in a transaction of its own is
	// then run again, and may wait for the one that directly was ended).
	const victim = "a deadlock the server ended on another transaction than directly (the proxy's statements weigh the transactions differently)"
	if r.victim {
		return victim
	}
	if lockErr(d, 1213) && !lockErr(p, 1213) && len(t.txn) == 0 {
		// A statement that began its transaction (in autocommit, say)
		// ended directly in a deadlock: the proxy, which cannot tell it
		// from one its own statements made, ran it again.
		return "a deadlock that ended a transaction's first statement directly, which the proxy ran again"
	}
	if lockErr(p, 1213) != lockErr(d, 1213) {
		for _, o := range r.twins {
			if o != t && (o.pending[proxySide] != nil || o.pending[directSide] != nil || o.step >= 0 && o.step != t.step) {
				r.victim = true
				return victim
			}
		}
	}
	if waited && step.readsInShareMode() {
		for _, o := range r.twins {
			if o != t && len(o.txn) > 0 {
				// limits.md: a locking read in share mode of counters
				// takes exclusive locks on the records it folds.
				return "a wait of a read in share mode, which locks the records it folds exclusively"
			}
		}
	}
	for _, o := range r.twins {
		// The transaction open on o, or else the last one it ended: a
		// step that waited may be compared only once the transaction it
		// waited for (or deadlocked with) committed.
		txn := o.txn
		if len(txn) == 0 {
			txn = o.lastTxn
		} else if o != t && o.step >= 0 {
			// Its step in flight too: a REPLACE whose guard locked the
			// gap and whose insert then waited, say.
			txn = append(slices.Clip(txn), r.seq.Steps[o.step])
		}
		if len(txn) == 0 {
			continue
		}
		if waited && o != t && (o.failedPartWay || o.partWayInFlight()) {
			// limits.md: a guarded write that fails on one of its rows
			// keeps the rows of the others locked (its guard locked them
			// all first), where directly the rows after the failing one
			// are never reached.
			return partWayWaited
		}
		if waited && o != t && o.failedInc {
			return "a wait for the shared lock a failed increment keeps in its open transaction"
		}
		if waited && o != t && slices.ContainsFunc(txn, keyAndIndexedCondition) {
			// limits.md: a guarded write or a slotted increment whose
			// WHERE clause names a key and another condition locks the
			// key's row, where the server may read the statement through
			// another index (a UNIQUE one on name) and never reach it.
			return "a wait for a key's row an open transaction's write or increment with another condition locked, which the server reads through another index"
		}
		if waited && o != t && incrementStep(step) && foldsUnknownRecords(txn) {
			return "a wait for the slot rows a transaction's fold locked by range: its increments' records, found by a condition, are not known there"
		}
		if waited && o != t && t.weak && incrementStep(step) && slices.ContainsFunc(txn, Step.inserts) {
			// limits.md: at READ COMMITTED an UPDATE skips a row another
			// transaction inserted and has not committed (semi-consistent
			// read); the slotted increment's locking read waits for it.
			return "a wait at READ COMMITTED for a row an open transaction inserted, which the UPDATE skips directly"
		}
		if waited && o != t && t.levelWeak && !t.autocommitOff && len(t.txn) == 0 && scanningWrite(step) && slices.ContainsFunc(txn, Step.inserts) {
			// consistency.md: in autocommit at READ COMMITTED the proxy
			// runs a guarded write and its fold at REPEATABLE READ, whose
			// locking reads wait for a row another transaction inserted;
			// directly the UPDATE's semi-consistent read skips it.
			return "a guarded write at READ COMMITTED in autocommit, run at REPEATABLE READ, waiting for a row an open transaction inserted"
		}
		if waited && o != t && t.weak && incrementStep(step) && slices.ContainsFunc(txn, lockingRead) {
			// limits.md: the same for a row the open transaction locked
			// (FOR UPDATE) that the increment's WHERE clause does not
			// match: directly the UPDATE reads its committed version
			// and skips it; the slotted increment's locking read of the
			// rows its scan reads (IN lists read as ranges) waits.
			return "a wait at READ COMMITTED for a row an open transaction locked, which the UPDATE skips directly"
		}
		if waited && o != t && slices.ContainsFunc(txn, Step.readsInShareMode) {
			// limits.md: a read in share mode of counters locks the
			// records it folds exclusively, and keeps them.
			return "a wait for a record an open transaction's read in share mode locked exclusively"
		}
		if waited && o != t && o.weak && slices.ContainsFunc(txn, conditionalWrite) {
			// limits.md: at READ COMMITTED or READ UNCOMMITTED a guarded
			// write keeps the rows its guard locked by key, where InnoDB
			// releases a row the statement read and did not write.
			return "a wait for a row a guarded write at READ COMMITTED or READ UNCOMMITTED locked by key and did not write"
		}
		if o.serializable && !spared {
			return "a wait or deadlock beside a SERIALIZABLE transaction, whose reads of counters lock slot rows"
		}
		for _, st := range txn {
			upper := strings.ToUpper(st.SQL)
			upsert := strings.Contains(upper, "ON DUPLICATE KEY UPDATE") || strings.Contains(upper, "REPLACE INTO")
			if waited && o != t && upsert {
				return "a wait for the gap an open transaction's upsert or REPLACE locked (its guard reads the key)"
			}
			increment := isIncrement(st)
			if deadlocked && (increment || upsert) {
				return "a deadlock from an increment's shared lock on its base row"
			}
			if spared && o != t && increment {
				return "a wait or deadlock directly for an increment's exclusive row lock, a shared one through the proxy"
			}
		}
	}
	return ""
}

func (r *run) setDiff(i int, kind, direct, proxy string) {
	if r.out.Diff == nil {
		r.out.Diff = &Difference{Step: i, Stmt: r.seq.Steps[i].SQL, Kind: kind, Direct: direct, Proxy: proxy}
	}
}

func (r *run) stopBecause(why string) {
	if !r.stop {
		r.stop, r.out.Stopped = true, why
	}
}

// finish ends every transaction and checks the end state: the tables'
// contents on both sides, no orphan slot rows, and the contents again
// after a roll-up.
func (r *run) finish(ctx context.Context) error {
	for _, t := range r.twins {
		for _, c := range t.conns {
			if _, err := c.Execute("ROLLBACK"); err != nil {
				return fmt.Errorf("final rollback: %w", err)
			}
		}
	}
	if err := r.checkOrphans(); err != nil || r.out.Diff != nil {
		return err
	}
	if r.stop {
		return nil
	}
	check, err := r.connect()
	if err != nil {
		return err
	}
	defer check.close()
	if err := r.compareTables(check, KindFinal, "final contents"); err != nil || r.out.Diff != nil {
		return err
	}
	s, err := r.roller.Once(ctx, r.admin, r.srv.Rewriter().Catalog(), rollup.Options{})
	if err != nil || s.Unfoldable > 0 {
		r.out.Diff = &Difference{Step: -1, Stmt: "final roll-up", Kind: KindRollup, Proxy: fmt.Sprintf("roll-up: %+v, %v", s, err)}
		return nil
	}
	return r.compareTables(check, KindRollup, "contents after a roll-up")
}

// compareTables compares SELECT * of every table on both sides of check.
func (r *run) compareTables(check *twin, kind, what string) error {
	for _, tb := range r.seq.Schema.Tables {
		q := fmt.Sprintf("SELECT * FROM %s ORDER BY id", tb.Name)
		var o [2]obs
		for side, c := range check.conns {
			o[side] = execute(c, Step{SQL: q})
			if len(o[side].results) > 0 && o[side].results[0].other != "" {
				return fmt.Errorf("%s: %s", q, o[side].results[0].other)
			}
		}
		rename := func(s string) string { return strings.ReplaceAll(s, r.env.plain(), r.env.ruled()) }
		if k := kindOf(o[proxySide], o[directSide], rename); k != "" {
			r.out.Diff = &Difference{Step: -1, Stmt: what + ": " + q, Kind: kind, Direct: rename(o[directSide].String()), Proxy: o[proxySide].String()}
			return nil
		}
	}
	return nil
}

// checkOrphans finds slot rows whose base row does not exist and that
// still count (rows roll-up zeroed add nothing to any total; a fold leaves
// them, and roll-up deletes them).
func (r *run) checkOrphans() error {
	cat := r.srv.Rewriter().Catalog()
	for _, tb := range cat.Tables() {
		var types []string
		for _, c := range tb.Counters {
			types = append(types, fmt.Sprint(c.RecordType))
		}
		q := fmt.Sprintf("SELECT s.record_type, s.record_id, s.slot, s.count FROM %[1]s.%[2]s s WHERE s.record_type IN (%[3]s) AND s.count <> 0 AND NOT EXISTS (SELECT 1 FROM %[1]s.%[4]s b WHERE %[5]s = s.record_id) ORDER BY 1, 2, 3",
			r.env.ruled(), tb.SlotsTable, strings.Join(types, ", "), tb.Name, tb.RecordID("b"))
		res, err := r.admin.Execute(q)
		if err != nil {
			return fmt.Errorf("orphan check: %w", err)
		}
		if len(res.Values) > 0 {
			o := obs{results: []result{observe(res, nil)}}
			r.out.Diff = &Difference{Step: -1, Stmt: "slot rows without a base row in " + tb.Name, Kind: KindOrphan, Proxy: o.String(), Direct: "(none: no slots)"}
			return nil
		}
	}
	return nil
}
