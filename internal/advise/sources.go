package advise

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slotproxy/slotproxy/internal/dialect"
)

// Flavor is the kind of server, from SELECT VERSION() (see dialect.Parse).
type Flavor = dialect.Flavor

// The flavours Report.Flavor may name.
const (
	MariaDB = dialect.MariaDB
	MySQL   = dialect.MySQL
)

// Source names, as used in Report.Sources and the rule file comments.
const (
	SourceDigests   = "performance_schema.events_statements_summary_by_digest"
	SourcePrepared  = "performance_schema.prepared_statements_instances"
	SourceLockWaits = "information_schema.INNODB_LOCK_WAITS"         // MariaDB
	SourceDataLocks = "performance_schema.data_lock_waits"           // MySQL 8
	SourceHistory   = "performance_schema.events_statements_history" // blockers' last writes
	// SourceWaiting marks a Statement seen only as a lock waiter's query.
	SourceWaiting = "lock waits"
)

// Source is one place the advisor looked for evidence.
type Source struct {
	// Name is one of the Source constants.
	Name string
	// Used reports whether the source could be read.
	Used bool
	// Note says why it was not used, or qualifies what it gave.
	Note string
}

// server is what the advisor learnt about the backend.
type server struct {
	version string
	flavor  Flavor
	dialect dialect.Dialect
	uptime  time.Duration
	// pfs: performance_schema is compiled in and ON.
	pfs bool
	// tables holds "schema.table" (lower case) of the system tables that
	// exist among those the advisor reads.
	tables map[string]bool
}

// systemTables are the tables the advisor may read, as schema.table.
var systemTables = []string{
	"performance_schema.events_statements_summary_by_digest",
	"performance_schema.prepared_statements_instances",
	"performance_schema.setup_consumers",
	"performance_schema.threads",
	"performance_schema.events_statements_history",
	"performance_schema.events_statements_current",
	"performance_schema.data_lock_waits",
	"performance_schema.data_locks",
	"information_schema.innodb_trx",
	"information_schema.innodb_lock_waits",
	"information_schema.innodb_locks",
}

func (s *server) has(table string) bool { return s.tables[strings.ToLower(table)] }

// DetectDialect returns the server's dialect, from SELECT VERSION().
func DetectDialect(ctx context.Context, db *sql.DB) (dialect.Dialect, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return dialect.Dialect{}, fmt.Errorf("SELECT VERSION(): %w", err)
	}
	return dialect.Parse(version), nil
}

// inspect detects the dialect and which system tables exist.
func inspect(ctx context.Context, db *sql.DB) (*server, error) {
	d, err := DetectDialect(ctx, db)
	if err != nil {
		return nil, err
	}
	flavor := d.Flavor
	if flavor == dialect.Unknown {
		flavor = MySQL // what a server that does not say MariaDB most likely is
	}
	s := &server{version: d.Version, flavor: flavor, dialect: d, tables: map[string]bool{}}
	var conds []string
	var args []any
	for _, t := range systemTables {
		schema, name, _ := strings.Cut(t, ".")
		// LOWER(): MySQL 8+ lists information_schema's own tables in
		// upper case (INNODB_TRX) and compares TABLE_NAME case-sensitively.
		conds = append(conds, "(LOWER(TABLE_SCHEMA) = ? AND LOWER(TABLE_NAME) = ?)")
		args = append(args, schema, name)
	}
	rows, err := db.QueryContext(ctx, "SELECT LOWER(TABLE_SCHEMA), LOWER(TABLE_NAME) FROM information_schema.TABLES WHERE "+
		strings.Join(conds, " OR "), args...)
	if err != nil {
		return nil, fmt.Errorf("list system tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			return nil, fmt.Errorf("list system tables: %w", err)
		}
		s.tables[schema+"."+name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list system tables: %w", err)
	}
	// @@performance_schema is 0 when the schema exists but is switched off
	// (its tables are then empty); the variable is missing when it is not
	// compiled in.
	var on sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.performance_schema").Scan(&on); err == nil {
		s.pfs = on.Valid && on.Int64 != 0
	}
	var name, value string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &value); err == nil {
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			s.uptime = time.Duration(n) * time.Second
		}
	}
	return s, nil
}

// consumerEnabled reports whether the performance_schema consumer name is
// enabled (false if that cannot be read).
func consumerEnabled(ctx context.Context, db *sql.DB, name string) bool {
	var enabled string
	err := db.QueryRowContext(ctx, "SELECT ENABLED FROM performance_schema.setup_consumers WHERE NAME = ?", name).Scan(&enabled)
	return err == nil && strings.EqualFold(enabled, "YES")
}

// digestRow is one row of events_statements_summary_by_digest, or one live
// prepared statement from prepared_statements_instances.
type digestRow struct {
	schema   string // SCHEMA_NAME; empty when NULL
	text     string
	calls    uint64
	lockPS   uint64 // picoseconds
	waitPS   uint64 // picoseconds
	affected uint64
}

// readDigests reads the whole digest summary table.
func readDigests(ctx context.Context, db *sql.DB) ([]digestRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT COALESCE(SCHEMA_NAME, ''), DIGEST_TEXT, COUNT_STAR, SUM_LOCK_TIME, SUM_TIMER_WAIT, SUM_ROWS_AFFECTED
FROM performance_schema.events_statements_summary_by_digest WHERE DIGEST_TEXT IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []digestRow
	for rows.Next() {
		var d digestRow
		if err := rows.Scan(&d.schema, &d.text, &d.calls, &d.lockPS, &d.waitPS, &d.affected); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// readPrepared reads the live server-side prepared statements that have
// run, summed by text and the owning connection's current database
// (the table has no schema column of its own).
func readPrepared(ctx context.Context, db *sql.DB, withThreads bool) ([]digestRow, error) {
	schema := "''"
	join := ""
	if withThreads {
		schema = "COALESCE(t.PROCESSLIST_DB, '')"
		join = " LEFT JOIN performance_schema.threads t ON t.THREAD_ID = p.OWNER_THREAD_ID"
	}
	rows, err := db.QueryContext(ctx, `SELECT `+schema+`, p.SQL_TEXT, SUM(p.COUNT_EXECUTE), SUM(p.SUM_LOCK_TIME), SUM(p.SUM_TIMER_EXECUTE), SUM(p.SUM_ROWS_AFFECTED)
FROM performance_schema.prepared_statements_instances p`+join+`
WHERE p.SQL_TEXT IS NOT NULL AND p.COUNT_EXECUTE > 0 GROUP BY 1, 2`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []digestRow
	for rows.Next() {
		var d digestRow
		var calls, lock, wait, affected sql.Null[uint64]
		if err := rows.Scan(&d.schema, &d.text, &calls, &lock, &wait, &affected); err != nil {
			return nil, err
		}
		d.calls, d.lockPS, d.waitPS, d.affected = calls.V, lock.V, wait.V, affected.V
		out = append(out, d)
	}
	return out, rows.Err()
}

// LockWait is one transaction waiting for a row lock held (or also
// requested earlier) by another, as seen in one sample.
type LockWait struct {
	// Schema and Table name the locked table; Index the locked index
	// (PRIMARY for a primary key row); Key is the lock's data, the key
	// value(s) of the locked record as the server prints them. Empty when
	// the server does not say (MariaDB without INNODB_LOCKS).
	Schema, Table, Index, Key string
	// WaitingTrx and BlockingTrx are the InnoDB transaction ids.
	WaitingTrx, BlockingTrx string
	// WaitingThread and BlockingThread are the connection ids
	// (trx_mysql_thread_id, PROCESSLIST_ID), 0 if unknown.
	WaitingThread, BlockingThread int64
	// WaitingQuery and BlockingQuery are the statements the transactions
	// are running (trx_query); the blocker is often between statements
	// (empty) or running something else than the write that took the lock.
	WaitingQuery, BlockingQuery string
	// BlockingLastWrite is the blocker's most recent UPDATE, INSERT,
	// DELETE or REPLACE from events_statements_history, when that is
	// available and BlockingQuery is not itself a write.
	BlockingLastWrite string
}

// Sampler reads the lock waits going on at one instant: on MariaDB from
// information_schema.INNODB_LOCK_WAITS with INNODB_TRX (and INNODB_LOCKS
// for the locked table and row), on MySQL 8 from
// performance_schema.data_lock_waits with data_locks and INNODB_TRX.
type Sampler struct {
	db    *sql.DB
	query string
	// lockTable: the first column is INNODB_LOCKS.lock_table, "`schema`.`table`",
	// and the second is empty.
	lockTable bool
	history   bool
	// Source is the table lock waits are read from.
	Source string
}

// NewSampler returns a Sampler for the server behind db, or an error that
// says why lock waits cannot be read there.
func NewSampler(ctx context.Context, db *sql.DB) (*Sampler, error) {
	srv, err := inspect(ctx, db)
	if err != nil {
		return nil, err
	}
	s, _, err := newSampler(ctx, db, srv)
	return s, err
}

// newSampler picks the lock-wait query for srv. The note qualifies a
// working sampler (e.g. no row details).
func newSampler(ctx context.Context, db *sql.DB, srv *server) (*Sampler, string, error) {
	s := &Sampler{db: db}
	var note string
	switch srv.dialect.LockWaits() {
	case dialect.DataLockWaits:
		if !srv.has("performance_schema.data_lock_waits") || !srv.has("performance_schema.data_locks") {
			return nil, "", fmt.Errorf("%s has no performance_schema.data_lock_waits and data_locks (performance_schema not compiled in?)", srv.dialect)
		}
		if !srv.pfs {
			return nil, "", fmt.Errorf("performance_schema is OFF")
		}
		s.Source = SourceDataLocks
		current := srv.has("performance_schema.events_statements_current") && srv.has("performance_schema.threads") &&
			consumerEnabled(ctx, db, "events_statements_current")
		trx := srv.has("information_schema.innodb_trx")
		s.query = mysqlLockWaitsSQL(current, trx)
		switch {
		case current:
		case trx:
			note = "the events_statements_current consumer is off: statement texts from INNODB_TRX, which lags up to 0.1s"
		default:
			note = "no events_statements_current consumer and no information_schema.INNODB_TRX, so no statement texts"
		}
	default:
		if !srv.has("information_schema.innodb_lock_waits") || !srv.has("information_schema.innodb_trx") {
			return nil, "", fmt.Errorf("%s has no information_schema.INNODB_LOCK_WAITS and INNODB_TRX (InnoDB not loaded?)", srv.dialect)
		}
		s.Source = SourceLockWaits
		s.lockTable = true
		locks := srv.has("information_schema.innodb_locks")
		s.query = mariadbLockWaitsSQL(locks)
		if !locks {
			note = "no information_schema.INNODB_LOCKS, so the locked table is taken from the waiting statement"
		}
	}
	if _, err := s.Sample(ctx); err != nil {
		return nil, "", err
	}
	if srv.pfs && srv.has("performance_schema.events_statements_history") && srv.has("performance_schema.threads") {
		s.history = consumerEnabled(ctx, db, "events_statements_history")
	}
	return s, note, nil
}

// mariadbLockWaitsSQL reads INNODB_LOCK_WAITS; locks: INNODB_LOCKS exists.
func mariadbLockWaitsSQL(locks bool) string {
	cols, join := "'', '', '', ''", ""
	if locks {
		cols = "COALESCE(l.lock_table, ''), '', COALESCE(l.lock_index, ''), COALESCE(l.lock_data, '')"
		join = "\nLEFT JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id"
	}
	return `SELECT ` + cols + `, CAST(w.requesting_trx_id AS CHAR), CAST(w.blocking_trx_id AS CHAR),
  COALESCE(rt.trx_mysql_thread_id, 0), COALESCE(rt.trx_query, ''), COALESCE(bt.trx_mysql_thread_id, 0), COALESCE(bt.trx_query, '')
FROM information_schema.INNODB_LOCK_WAITS w
LEFT JOIN information_schema.INNODB_TRX rt ON rt.trx_id = w.requesting_trx_id
LEFT JOIN information_schema.INNODB_TRX bt ON bt.trx_id = w.blocking_trx_id` + join
}

// mysqlLockWaitsSQL reads data_lock_waits. The statements and connection
// ids come from performance_schema (current: the events_statements_current
// consumer is on), which is live, else from INNODB_TRX (trx: it exists),
// a cache InnoDB refreshes at most every 0.1s, so that short transactions
// waiting now are often not in it yet.
func mysqlLockWaitsSQL(current, trx bool) string {
	cols, join := "0, '', 0, ''", ""
	switch {
	case current:
		// A statement that has ended (END_EVENT_ID set) is the thread's
		// last one: the transaction is between statements.
		cols = "COALESCE(rt.PROCESSLIST_ID, 0), COALESCE(rs.SQL_TEXT, ''), COALESCE(bt.PROCESSLIST_ID, 0), COALESCE(bs.SQL_TEXT, '')"
		join = `
LEFT JOIN performance_schema.threads rt ON rt.THREAD_ID = w.REQUESTING_THREAD_ID
LEFT JOIN performance_schema.events_statements_current rs ON rs.THREAD_ID = w.REQUESTING_THREAD_ID AND rs.NESTING_EVENT_LEVEL = 0 AND rs.END_EVENT_ID IS NULL
LEFT JOIN performance_schema.threads bt ON bt.THREAD_ID = w.BLOCKING_THREAD_ID
LEFT JOIN performance_schema.events_statements_current bs ON bs.THREAD_ID = w.BLOCKING_THREAD_ID AND bs.NESTING_EVENT_LEVEL = 0 AND bs.END_EVENT_ID IS NULL`
	case trx:
		cols = "COALESCE(rt.trx_mysql_thread_id, 0), COALESCE(rt.trx_query, ''), COALESCE(bt.trx_mysql_thread_id, 0), COALESCE(bt.trx_query, '')"
		join = `
LEFT JOIN information_schema.INNODB_TRX rt ON rt.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID
LEFT JOIN information_schema.INNODB_TRX bt ON bt.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID`
	}
	return `SELECT COALESCE(rl.OBJECT_SCHEMA, ''), COALESCE(rl.OBJECT_NAME, ''), COALESCE(rl.INDEX_NAME, ''), COALESCE(rl.LOCK_DATA, ''),
  CAST(w.REQUESTING_ENGINE_TRANSACTION_ID AS CHAR), CAST(w.BLOCKING_ENGINE_TRANSACTION_ID AS CHAR), ` + cols + `
FROM performance_schema.data_lock_waits w
JOIN performance_schema.data_locks rl ON rl.ENGINE = w.ENGINE AND rl.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID` + join
}

// Sample returns the lock waits going on now, one per waiting transaction
// and blocker (MariaDB lists a waiter once for every conflicting lock ahead
// of it in the queue, including those of other waiters).
func (s *Sampler) Sample(ctx context.Context) ([]LockWait, error) {
	rows, err := s.db.QueryContext(ctx, s.query)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Source, err)
	}
	defer rows.Close()
	var out []LockWait
	for rows.Next() {
		var w LockWait
		if err := rows.Scan(&w.Schema, &w.Table, &w.Index, &w.Key, &w.WaitingTrx, &w.BlockingTrx,
			&w.WaitingThread, &w.WaitingQuery, &w.BlockingThread, &w.BlockingQuery); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Source, err)
		}
		if s.lockTable {
			w.Schema, w.Table = splitLockTable(w.Schema)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Source, err)
	}
	if s.history {
		s.addLastWrites(ctx, out)
	}
	return out, nil
}

// splitLockTable splits INNODB_LOCKS.lock_table, "`schema`.`table`" (with
// doubled backquotes inside names), into its names.
func splitLockTable(s string) (schema, table string) {
	name := func(s string) (string, string) {
		if !strings.HasPrefix(s, "`") {
			before, after, _ := strings.Cut(s, ".")
			return before, after
		}
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] == '`' {
				if i+1 < len(s) && s[i+1] == '`' {
					b.WriteByte('`')
					i++
					continue
				}
				return b.String(), strings.TrimPrefix(s[i+1:], ".")
			}
			b.WriteByte(s[i])
		}
		return b.String(), ""
	}
	schema, rest := name(s)
	table, _ = name(rest)
	return schema, table
}

// addLastWrites fills BlockingLastWrite of waits whose blocker is not
// running a write now, from the blockers' statement history.
func (s *Sampler) addLastWrites(ctx context.Context, waits []LockWait) {
	var ids []any
	for _, w := range waits {
		if w.BlockingThread != 0 && !isWrite(w.BlockingQuery) && !slices.Contains(ids, any(w.BlockingThread)) {
			ids = append(ids, w.BlockingThread)
		}
	}
	if len(ids) == 0 {
		return
	}
	rows, err := s.db.QueryContext(ctx, `SELECT t.PROCESSLIST_ID, h.SQL_TEXT FROM performance_schema.events_statements_history h
JOIN performance_schema.threads t ON t.THREAD_ID = h.THREAD_ID
WHERE t.PROCESSLIST_ID IN (?`+strings.Repeat(", ?", len(ids)-1)+`) AND h.SQL_TEXT IS NOT NULL
ORDER BY h.THREAD_ID, h.EVENT_ID`, ids...)
	if err != nil {
		return // optional evidence
	}
	defer rows.Close()
	last := map[int64]string{}
	for rows.Next() {
		var id int64
		var text string
		if rows.Scan(&id, &text) == nil && isWrite(text) {
			last[id] = text // rows are in event order, so the last one wins
		}
	}
	for i := range waits {
		if t, ok := last[waits[i].BlockingThread]; ok && !isWrite(waits[i].BlockingQuery) {
			waits[i].BlockingLastWrite = t
		}
	}
}

// isWrite reports whether text starts with UPDATE, INSERT, DELETE or
// REPLACE.
func isWrite(text string) bool {
	text = strings.TrimLeft(text, " \t\r\n(")
	for _, kw := range []string{"update", "insert", "delete", "replace"} {
		if len(text) >= len(kw) && strings.EqualFold(text[:len(kw)], kw) {
			return true
		}
	}
	return false
}
