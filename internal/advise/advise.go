// Package advise finds hot counter columns in a live MySQL or MariaDB
// database and writes candidate slotproxy rule files for them.
//
// It reads the server's own evidence, never the application's traffic:
//
//   - statement digests from performance_schema.events_statements_summary_by_digest
//     (MySQL 8, and MariaDB with performance_schema=ON): how often each
//     statement shape ran, its lock time and its total latency;
//   - on MariaDB, the live server-side prepared statements in
//     performance_schema.prepared_statements_instances, because MariaDB
//     leaves prepared executions (COM_STMT_EXECUTE) out of the digests;
//   - the lock waits going on, sampled for Options.Watch: MariaDB's
//     information_schema.INNODB_LOCK_WAITS with INNODB_TRX and INNODB_LOCKS,
//     MySQL 8's performance_schema.data_lock_waits with data_locks; the
//     blockers' last writes come from events_statements_history when that
//     consumer is on.
//
// A source that does not exist or cannot be read is skipped with a note.
//
// Each statement text is parsed with the TiDB parser; those that are an
// UPDATE of one table assigning `c = c + ?`, `c = ? + c` or `c = c - ?` and
// filtered by `col = ?` alone are grouped by table. Texts that do not parse
// (digests truncated with "...", lists written "(...)") are skipped. Each
// table is then checked against information_schema as slotproxy checks a
// rule: the WHERE column must be the table's single-column integer primary
// key and the counters integer columns. A table that passes gets a rule
// file, <Out>/<schema>.<table>.yaml, with the evidence as YAML comments and
// a body that rules.Parse accepts; one that fails is reported as unsuitable
// with the reason.
package advise

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/dialect"
)

// Defaults for Options.
const (
	// DefaultOut is the directory candidate rule files are written to.
	DefaultOut = "rules.candidates"
	// DefaultInterval is the time between two lock-wait samples. It is
	// also the shortest used on MariaDB, which refreshes its
	// information_schema InnoDB lock tables at most every 100ms: sampling
	// faster would count the same snapshot twice.
	DefaultInterval = 100 * time.Millisecond
	// DefaultSlots is the slot count suggested without evidence of
	// concurrency (rules.DefaultSlots).
	DefaultSlots = 100
	// MaxSuggestedSlots caps the suggested slot count: more slots spread
	// writes further but make reads and roll-ups sum more rows.
	MaxSuggestedSlots = 1024
	// slotsPerWriter is how many slots to suggest per concurrent writer of
	// one row: with k writers choosing among n slots at random, a writer
	// collides with another about (k-1)/n of the time.
	slotsPerWriter = 8
)

// Options configure Run.
type Options struct {
	// DSN is the server to read, in go-sql-driver form, such as
	// "root:pass@tcp(127.0.0.1:3306)/". The account needs SELECT on
	// performance_schema and PROCESS (for the InnoDB lock tables).
	DSN string
	// Out is the directory for the rule files; DefaultOut if empty.
	Out string
	// MinCalls is the number of increments (digest calls plus prepared
	// executions) a table needs to be considered, unless lock waits on it
	// were seen. 0 considers every table.
	MinCalls int64
	// Force overwrites existing rule files; without it they are left alone.
	Force bool
	// Watch is how long to sample lock waits; 0 takes a single sample.
	Watch time.Duration
	// Interval is the time between lock-wait samples; DefaultInterval if 0
	// (and at least DefaultInterval on MariaDB).
	Interval time.Duration
	// Now returns the time for the file headers; time.Now if nil.
	Now func() time.Time
}

// Report is what Run found.
type Report struct {
	// Version is the server's version string; Flavor its kind.
	Version string
	Flavor  Flavor
	// Addr is the server's address from the DSN.
	Addr string
	// Uptime is the server's uptime: the period the digests cover, unless
	// they were truncated since.
	Uptime time.Duration
	// Sources lists every evidence source and whether it could be read.
	Sources []Source
	// Samples is the number of lock-wait samples taken, over Watched.
	// Interval is the time between two samples.
	Samples  int
	Watched  time.Duration
	Interval time.Duration
	// TotalLockTime and TotalLatency are summed over every digest (and,
	// on MariaDB, every live prepared statement), for the shares.
	TotalLockTime, TotalLatency time.Duration
	// Candidates are the tables that got (or already had) a rule file,
	// hottest first; Unsuitable those that cannot have a rule, with
	// Candidate.Reason; Ignored those below MinCalls without lock waits.
	Candidates, Unsuitable, Ignored []*Candidate
	// Unparsed counts UPDATE texts the parser rejected (truncated digests,
	// "(...)" lists); Unqualified counts increments whose schema was
	// unknown (no default database).
	Unparsed, Unqualified int
}

// Candidate is one table with counter increments.
type Candidate struct {
	// Schema and Table name the table, spelt as information_schema does
	// once validated.
	Schema, Table string
	// Key is the primary key column (the WHERE column), Counters the
	// incremented integer columns.
	Key      string
	Counters []string
	// Touch are the DATETIME or TIMESTAMP columns the increments assign a
	// time (updated_at): the rule's touch columns.
	Touch []string
	// Calls, LockTime, Latency and RowsAffected are summed over the
	// increment statements (digests and, on MariaDB, prepared statements).
	Calls             int64
	LockTime, Latency time.Duration
	RowsAffected      int64
	// LockShare and LatencyShare are LockTime and Latency as a fraction of
	// the totals over all digests.
	LockShare, LatencyShare float64
	// Statements are the evidence, most calls first.
	Statements []*Statement
	// Waits summarises the lock waits seen on the table.
	Waits WaitStats
	// Slots is the suggested slot count; SlotsWhy explains it in a
	// sentence.
	Slots    int
	SlotsWhy string
	// Reason says why the table is unsuitable (or ignored).
	Reason string
	// Notes qualify the candidate (dropped counters, statements slotproxy
	// will not rewrite).
	Notes []string
	// File is the rule file's path; Written reports whether Run wrote it
	// (false when it existed and Force was not set).
	File    string
	Written bool
}

// Name returns schema.table.
func (c *Candidate) Name() string { return c.Schema + "." + c.Table }

// Statement is one increment statement shape seen on a table.
type Statement struct {
	// Source is where it came from: SourceDigests, SourcePrepared, or
	// SourceWaiting for a statement seen only as a lock waiter's query.
	Source string
	// Schema is the default database it ran in (digests), if any.
	Schema string
	// Text is the digest text, or the statement text.
	Text string
	// Calls, LockTime, Latency and RowsAffected are its totals (zero for a
	// statement seen only in lock waits).
	Calls             int64
	LockTime, Latency time.Duration
	RowsAffected      int64
	// Shape is the parsed increment.
	Shape *Shape
}

// WaitStats summarises lock waits on one table over the samples.
type WaitStats struct {
	// Samples is how many samples had a transaction waiting on the table.
	Samples int
	// Waits is the number of waiting transactions summed over samples.
	Waits int
	// MaxWaiters is the most transactions seen waiting for one row at once.
	MaxWaiters int
	// Rows are the locked rows (index and key data), most waits first.
	Rows []RowWaits
	// Waiting, Blocking and BlockingLastWrites are distinct example texts:
	// what waiters ran, what blockers ran, and blockers' last writes.
	Waiting, Blocking, BlockingLastWrites []string
}

// RowWaits counts the waits on one row.
type RowWaits struct {
	Index, Key string
	Waits      int
	MaxWaiters int
}

// Run reads the evidence on the server opts.DSN names, writes a rule file
// for every suitable table (never over an existing one unless opts.Force)
// and prints a summary to stdout. The report is returned with the error of
// a failed write, if any.
func Run(ctx context.Context, opts Options, stdout io.Writer) (*Report, error) {
	if opts.DSN == "" {
		return nil, errors.New("advise: no DSN")
	}
	cfg, err := mysql.ParseDSN(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("advise: DSN: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("advise: DSN: %w", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("advise: connect to %s: %w", cfg.Addr, err)
	}
	rep, err := Analyze(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	rep.Addr = cfg.Addr
	werr := WriteFiles(rep, opts)
	PrintSummary(stdout, rep)
	return rep, werr
}

// Analyze gathers the evidence on db and judges every table with counter
// increments. It writes nothing; Run does that with WriteFiles.
func Analyze(ctx context.Context, db *sql.DB, opts Options) (*Report, error) {
	srv, err := inspect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("advise: %w", err)
	}
	rep := &Report{Version: srv.version, Flavor: srv.flavor, Uptime: srv.uptime}
	a := &analysis{rep: rep, sp: newShapeParser(), groups: map[tableKey]*Candidate{}}

	// Lock waits first: they take Watch, and the digests read afterwards
	// then cover the same period.
	sampler, note, err := newSampler(ctx, db, srv)
	if err != nil {
		rep.Sources = append(rep.Sources, Source{Name: lockWaitSourceName(srv), Note: err.Error()})
	} else {
		rep.Sources = append(rep.Sources, Source{Name: sampler.Source, Used: true, Note: note})
		switch {
		case sampler.history:
			rep.Sources = append(rep.Sources, Source{Name: SourceHistory, Used: true, Note: "for the blockers' last writes"})
		case srv.pfs && srv.has(SourceHistory):
			n := "the events_statements_history consumer is off"
			if srv.flavor == MariaDB {
				n = "empty unless the events_statements_history and events_statements_current consumers are both on"
			}
			rep.Sources = append(rep.Sources, Source{Name: SourceHistory, Note: n})
		}
		if err := a.sampleLockWaits(ctx, sampler, opts); err != nil {
			return nil, err
		}
	}

	digestSrc := Source{Name: SourceDigests}
	switch {
	case !srv.has(SourceDigests):
		digestSrc.Note = "not available (no performance_schema)"
	case !srv.pfs:
		digestSrc.Note = "performance_schema is OFF; start the server with performance_schema=ON"
	default:
		rows, err := readDigests(ctx, db)
		if err != nil {
			digestSrc.Note = err.Error()
			break
		}
		digestSrc.Used = true
		if !consumerEnabled(ctx, db, "statements_digest") {
			digestSrc.Note = "the statements_digest consumer is off; the digests may be stale"
		}
		for _, d := range rows {
			rep.TotalLockTime += ps(d.lockPS)
			rep.TotalLatency += ps(d.waitPS)
			a.addStatement(SourceDigests, d)
		}
	}
	rep.Sources = append(rep.Sources, digestSrc)

	if srv.flavor == MariaDB {
		prepSrc := Source{Name: SourcePrepared}
		switch {
		case !srv.has(SourcePrepared) || !srv.pfs:
			prepSrc.Note = "not available"
		default:
			rows, err := readPrepared(ctx, db, srv.has("performance_schema.threads"))
			if err != nil {
				prepSrc.Note = err.Error()
				break
			}
			prepSrc.Used = true
			prepSrc.Note = "live prepared statements only; MariaDB leaves prepared executions out of the digests"
			for _, d := range rows {
				rep.TotalLockTime += ps(d.lockPS)
				rep.TotalLatency += ps(d.waitPS)
				a.addStatement(SourcePrepared, d)
			}
		}
		rep.Sources = append(rep.Sources, prepSrc)
	}

	if !slices.ContainsFunc(rep.Sources, func(s Source) bool { return s.Used }) {
		var why []string
		for _, s := range rep.Sources {
			why = append(why, s.Name+": "+s.Note)
		}
		return nil, fmt.Errorf("advise: no evidence source could be read (%s)", strings.Join(why, "; "))
	}

	a.attachWaits()
	if err := a.judge(ctx, db, opts); err != nil {
		return nil, err
	}
	return rep, nil
}

func lockWaitSourceName(srv *server) string {
	if srv.dialect.LockWaits() == dialect.DataLockWaits {
		return SourceDataLocks
	}
	return SourceLockWaits
}

// ps converts picoseconds, performance_schema's timer unit, to a Duration.
func ps(v uint64) time.Duration { return time.Duration(v / 1000) }

// clamp converts a BIGINT UNSIGNED counter to int64.
func clamp(v uint64) int64 { return int64(min(v, math.MaxInt64)) }

// tableKey identifies a table as the evidence names it.
type tableKey struct{ schema, table string }

// analysis accumulates evidence into per-table candidates.
type analysis struct {
	rep    *Report
	sp     *shapeParser
	groups map[tableKey]*Candidate
	order  []tableKey
	// samples are the lock waits seen, one slice per sample.
	samples [][]LockWait
}

// group returns the candidate for schema.table, creating it.
func (a *analysis) group(schema, table string) *Candidate {
	k := tableKey{schema, table}
	c := a.groups[k]
	if c == nil {
		c = &Candidate{Schema: schema, Table: table}
		a.groups[k] = c
		a.order = append(a.order, k)
	}
	return c
}

// addStatement adds a digest or prepared statement row if it is an
// increment.
func (a *analysis) addStatement(source string, d digestRow) {
	if !looksLikeUpdate(d.text) {
		return
	}
	sh, err := a.sp.parse(d.text)
	if err != nil {
		if !errors.Is(err, errNotIncrement) {
			a.rep.Unparsed++
		}
		return
	}
	schema := sh.Schema
	if schema == "" {
		schema = d.schema
	}
	if schema == "" {
		a.rep.Unqualified++
		return
	}
	c := a.group(schema, sh.Table)
	c.Statements = append(c.Statements, &Statement{
		Source: source, Schema: d.schema, Text: d.text, Shape: sh,
		Calls: clamp(d.calls), LockTime: ps(d.lockPS), Latency: ps(d.waitPS), RowsAffected: clamp(d.affected),
	})
	c.Calls += clamp(d.calls)
	c.LockTime += ps(d.lockPS)
	c.Latency += ps(d.waitPS)
	c.RowsAffected += clamp(d.affected)
}

// sampleLockWaits samples lock waits every opts.Interval for opts.Watch.
func (a *analysis) sampleLockWaits(ctx context.Context, s *Sampler, opts Options) error {
	interval := cmp.Or(opts.Interval, DefaultInterval)
	if s.Source == SourceLockWaits {
		interval = max(interval, DefaultInterval)
	}
	start := time.Now()
	deadline := start.Add(opts.Watch)
	a.rep.Interval = interval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		waits, err := s.Sample(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("advise: %w", err)
		}
		a.samples = append(a.samples, waits)
		a.rep.Samples++
		if !time.Now().Add(interval).Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	a.rep.Watched = time.Since(start)
	return nil
}

// attachWaits folds the lock-wait samples into the candidates, creating a
// candidate for a table whose waiting statements are increments that no
// digest showed (MariaDB's prepared executions, for one).
func (a *analysis) attachWaits() {
	type rowKey struct {
		t          tableKey
		index, key string
	}
	type rowAcc struct {
		waits, max int
	}
	rows := map[rowKey]*rowAcc{}
	var rowOrder []rowKey
	for _, sample := range a.samples {
		// Distinct waiting transactions per row and per table.
		perRow := map[rowKey]map[string]bool{}
		perTable := map[tableKey]map[string]bool{}
		// Transactions that are waiting themselves: a blocker not among
		// them holds the lock.
		waiting := map[string]bool{}
		for _, w := range sample {
			waiting[w.WaitingTrx] = true
		}
		for _, w := range sample {
			schema, table := w.Schema, w.Table
			var sh *Shape
			if w.WaitingQuery != "" {
				sh, _ = a.sp.parse(w.WaitingQuery)
			}
			if table == "" { // no INNODB_LOCKS: go by the waiting statement
				if sh == nil || sh.Schema == "" {
					continue
				}
				schema, table = sh.Schema, sh.Table
			}
			tk := tableKey{schema, table}
			c := a.groups[tk]
			if c == nil {
				if sh == nil || !strings.EqualFold(sh.Table, table) {
					continue // waits on a table without increments
				}
				c = a.group(schema, table)
			}
			if sh != nil && strings.EqualFold(sh.Table, table) && !hasText(c.Statements, w.WaitingQuery) &&
				len(c.Statements) < maxExamples &&
				!slices.ContainsFunc(c.Statements, func(s *Statement) bool { return s.Source != SourceWaiting }) {
				c.Statements = append(c.Statements, &Statement{Source: SourceWaiting, Text: w.WaitingQuery, Shape: sh})
			}
			rk := rowKey{tk, w.Index, w.Key}
			if perRow[rk] == nil {
				perRow[rk] = map[string]bool{}
			}
			perRow[rk][w.WaitingTrx] = true
			if perTable[tk] == nil {
				perTable[tk] = map[string]bool{}
			}
			perTable[tk][w.WaitingTrx] = true
			ws := &c.Waits
			ws.Waiting = addExample(ws.Waiting, w.WaitingQuery)
			if !waiting[w.BlockingTrx] {
				ws.Blocking = addExample(ws.Blocking, cmp.Or(w.BlockingQuery, "(between statements)"))
				ws.BlockingLastWrites = addExample(ws.BlockingLastWrites, w.BlockingLastWrite)
			}
		}
		for tk, trx := range perTable {
			ws := &a.groups[tk].Waits
			ws.Samples++
			ws.Waits += len(trx)
		}
		for rk, trx := range perRow {
			acc := rows[rk]
			if acc == nil {
				acc = &rowAcc{}
				rows[rk] = acc
				rowOrder = append(rowOrder, rk)
			}
			acc.waits += len(trx)
			acc.max = max(acc.max, len(trx))
			ws := &a.groups[rk.t].Waits
			ws.MaxWaiters = max(ws.MaxWaiters, len(trx))
		}
	}
	for _, rk := range rowOrder {
		acc := rows[rk]
		ws := &a.groups[rk.t].Waits
		ws.Rows = append(ws.Rows, RowWaits{Index: rk.index, Key: rk.key, Waits: acc.waits, MaxWaiters: acc.max})
	}
	for _, c := range a.groups {
		slices.SortStableFunc(c.Waits.Rows, func(x, y RowWaits) int { return cmp.Compare(y.Waits, x.Waits) })
	}
}

func hasText(list []*Statement, text string) bool {
	return slices.ContainsFunc(list, func(s *Statement) bool { return s.Text == text })
}

// maxExamples bounds the example texts kept per kind.
const maxExamples = 3

func addExample(list []string, text string) []string {
	text = strings.TrimSpace(text)
	if text == "" || len(list) >= maxExamples || slices.Contains(list, text) {
		return list
	}
	return append(list, text)
}

// judge filters by MinCalls, validates every remaining candidate against
// information_schema and suggests slot counts.
func (a *analysis) judge(ctx context.Context, db *sql.DB, opts Options) error {
	rep := a.rep
	for _, k := range a.order {
		c := a.groups[k]
		slices.SortStableFunc(c.Statements, func(x, y *Statement) int { return cmp.Compare(y.Calls, x.Calls) })
		if c.Calls < opts.MinCalls && c.Waits.Waits == 0 {
			c.Reason = fmt.Sprintf("%d calls, fewer than %d, and no lock waits seen", c.Calls, opts.MinCalls)
			rep.Ignored = append(rep.Ignored, c)
			continue
		}
		if err := validate(ctx, db, c); err != nil {
			return err
		}
		if rep.TotalLockTime > 0 {
			c.LockShare = float64(c.LockTime) / float64(rep.TotalLockTime)
		}
		if rep.TotalLatency > 0 {
			c.LatencyShare = float64(c.Latency) / float64(rep.TotalLatency)
		}
		if c.Reason != "" {
			rep.Unsuitable = append(rep.Unsuitable, c)
			continue
		}
		suggestSlots(c)
		rep.Candidates = append(rep.Candidates, c)
	}
	hotter := func(x, y *Candidate) int {
		return cmp.Or(cmp.Compare(y.Latency, x.Latency), cmp.Compare(y.Waits.Waits, x.Waits.Waits),
			cmp.Compare(y.Calls, x.Calls), cmp.Compare(x.Name(), y.Name()))
	}
	slices.SortStableFunc(rep.Candidates, hotter)
	slices.SortStableFunc(rep.Unsuitable, hotter)
	slices.SortStableFunc(rep.Ignored, hotter)
	return nil
}

// suggestSlots sets c.Slots from the concurrency seen on its hottest row:
// slotsPerWriter per concurrent writer (waiters plus the holder), rounded
// up to a multiple of 10, at least DefaultSlots, at most MaxSuggestedSlots.
func suggestSlots(c *Candidate) {
	c.Slots = DefaultSlots
	if c.Waits.MaxWaiters == 0 {
		c.SlotsWhy = "The default: no lock waits were seen, so there is no evidence for more."
		return
	}
	writers := c.Waits.MaxWaiters + 1
	n := (slotsPerWriter*writers + 9) / 10 * 10
	c.Slots = min(max(n, DefaultSlots), MaxSuggestedSlots)
	c.SlotsWhy = fmt.Sprintf("Up to %d transactions were seen writing one row at once (%d waiting, 1 holding): "+
		"%d slots per writer, rounded up to a multiple of 10, kept within %d..%d.",
		writers, c.Waits.MaxWaiters, slotsPerWriter, DefaultSlots, MaxSuggestedSlots)
}
