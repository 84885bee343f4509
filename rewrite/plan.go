package rewrite

import (
	"slices"
	"strings"
)

// A Plan is the rewrite of one statement: the operation that runs it (Op,
// one of the types below, each with exactly what it needs) and what the
// session learns once it succeeded (Then).
type Plan struct {
	Op Op
	// Original is the statement's own text.
	Original string
	// Table is the ruled table the statement writes, or whose rule a
	// refusal or a shadow plan names; nil for none.
	Table *Table
	// Reason explains the plan to people (explain), and is a refusal's
	// reason; empty when there is nothing to explain.
	Reason string
	// Shadow: Table's rule is in shadow mode. The statement runs as
	// written; Op is what would have run.
	Shadow bool
	// ChangesSession: the statement may change the default database,
	// sql_mode or client character set, so statements after it in the
	// same query must be planned again once it has run (SessionCut).
	ChangesSession bool
	// Then are what the session does or learns once the statement
	// succeeded and the client has its response, in order.
	Then []Effect
	// Views are the views (schema-qualified, quoted) whose definitions the
	// plan reads in their place (see inlinedRead): the statement itself
	// opens none of them, so in a transaction the executor opens them
	// first (ViewsProbeSQL), which takes the metadata locks the client's
	// statement takes directly and keeps them until the transaction ends.
	Views []string
	// valueDependent: the plan depends on the values of integer literals
	// beyond what a template keeps (a comparison of a counter with a
	// literal, see impliedComparisons): the statement is not templated.
	valueDependent bool
}

// Kind names an operation's kind (explain, logs).
type Kind uint8

const (
	// KindOriginal: the client's statement is sent as written.
	KindOriginal Kind = iota
	// KindRead: counter reads rewritten.
	KindRead
	// KindIncrement: a counter increment turned into a slotted upsert.
	KindIncrement
	// KindGuarded: the records a write may touch are folded first.
	KindGuarded
	// KindRefused: nothing runs; the client gets an error naming the
	// rule and the reason (fail closed: an error is better than a wrong
	// total).
	KindRefused
)

func (k Kind) String() string {
	return [...]string{"original", "read", "increment", "guarded", "refused"}[k]
}

// Kind is the kind of p's operation.
func (p Plan) Kind() Kind {
	if p.Op == nil {
		return KindOriginal
	}
	return p.Op.Kind()
}

// An Op is how a statement runs: *AsWritten, *Read, *LockingRead,
// *WriteOthers, *Increment, *UpsertIncrement, *UpsertRows, *Guarded, *LockTables or
// *Refused.
type Op interface {
	Kind() Kind
	// mapSQL returns a copy of the operation with f's image of each of
	// its SQL texts (see Plan.mapSQL).
	mapSQL(f func(string) (string, error)) (Op, error)
}

// AsWritten sends the client's statement as written.
type AsWritten struct {
	// Reads, for a read that names ruled tables and reads none of their
	// counters: those tables. A transaction that incremented records of
	// them after its snapshot was taken has them refreshed first (a
	// client's UPDATE would have made the rows its own versions, of every
	// column: see the executor's foldOwn).
	Reads []*Table
}

// Read sends the statement with its counter reads rewritten to totals
// (SQL), or as written when every counter it reads is read rolled up.
type Read struct {
	SQL string
	// Reads are the ruled tables whose counters it reads: the records the
	// session's transaction incremented of them are folded before it
	// runs, so that it reads them as its own exclusive lock would.
	Reads []*Table
	// RolledUp are the tables whose counters it reads as their base
	// column (Table.RolledUp). A plan whose SQL is its Original reads no
	// counter of another table.
	RolledUp []*Table
	// MetaKey, for a SELECT, identifies the result's column definitions:
	// statements with the same MetaKey (in the same database) return
	// columns of the same types, lengths and names. It is the text of the
	// select list exactly, then the rest of the statement with its integer
	// literals masked (they cannot change a column's definition there).
	// Empty: no key (use the Original).
	MetaKey string
}

// LockingRead is a locking read of counters (FOR UPDATE, FOR SHARE, LOCK
// IN SHARE MODE): its Guards lock and fold the records it may read first,
// so it reads their latest totals and increments of them wait, as on the
// base rows.
type LockingRead struct {
	SQL     string
	Guards  []*Guard
	Reads   []*Table
	MetaKey string
}

// WriteOthers is a write of a ruled table's rows that assigns no counter
// (an UPDATE of other columns, an upsert that updates only them): it runs
// as a read (SQL: its counter reads rewritten, or as written). Inside a
// REPEATABLE READ transaction that may have read before, the executor runs
// it as a guarded write with Guard, folding and refreshing the records it
// may touch first (Table.FoldRowsSQL): the write makes each row the
// transaction's own, current version, and the slot rows its snapshot sees
// must then be current too.
type WriteOthers struct {
	// SQL is the statement to send (the Original when it reads no
	// counter).
	SQL   string
	Reads []*Table
	Guard *Guard
}

// Increment is a slotted increment (see Rewriter.slottedIncrement): SQL
// adds the deltas to a slot row of each record the WHERE clause selects.
// It keeps the original statement's placeholders in their order.
type Increment struct {
	SQL string
	// Slot is the slot SQL writes (-1 when none was picked): a prepared
	// execution that cannot pick its own slot writes this one.
	Slot int
	// Keys are the keys of the records the increment may write: the WHERE
	// clause's `key = v` or `key IN (v, …)`; empty when a UNIQUE key's
	// values name them (known only once it ran).
	Keys []KeyValue
	// Zero: every delta is a literal 0, so the UPDATE would change no row.
	Zero bool
	// DeltaParams are the placeholder indexes of the deltas (-1 for a
	// literal), so a prepared execution can tell a zero increment.
	DeltaParams []int
	// DeltaZero tells, for each delta, whether it is a literal 0.
	DeltaZero []bool
	// Deltas are the counters' deltas, in SET order (touch columns not
	// included).
	Deltas []Delta
	// TouchParams are the placeholder indexes of the times assigned to
	// touch columns (-1 for a literal or a function): the executor runs
	// the statement as written unless each is a time in the strict form
	// (ValidTime) or a DATETIME or TIMESTAMP parameter.
	TouchParams []int
	// TouchInts tells, for each of TouchParams, whether its column is an
	// integer touch column (the parameter must then be an integer).
	TouchInts []bool
	// RecordTypes are the record types of the counters and touch columns
	// it writes: one slot row each per record.
	RecordTypes []int
	// Counters is how many counters and touch columns one record's
	// increment writes: the slot rows SQL inserts or updates per record.
	Counters int
	// ProbeSQL is the client's statement made to touch no row, with its
	// placeholders NULL: it checks the client's privileges for the
	// statement (the slotted write needs other ones).
	ProbeSQL string
	// PrivKey names the privileges ProbeSQL checks: the probe's text with
	// its integer literals masked.
	PrivKey string
	// batch, when concurrent increments of the same shape can be sent as
	// one whose delta is their sum (one record named by a literal key, one
	// counter, no touch column, an integer literal delta, no bound read
	// from the WHERE clause), is SQL with its slot and its delta each
	// written once, which CoalesceKey masks and WithDelta replaces; ""
	// otherwise. batchMap, when set, is what mapSQL would have made of it
	// (a template's literals and slot): applied only when it is asked for
	// (batchSQL), since most increments never coalesce and substituting
	// 2 KB of text costs about 3 µs per statement.
	batch    string
	batchMap func(string) (string, error)
	// Sorted, when SQL may write several slot rows (several records, or
	// several counters and touch columns of one), is SQL made to test
	// every slot row (its share of the range, a NULL base value, other
	// columns that must already hold their values) before it inserts any,
	// at the cost of a sort; "" otherwise. SQL that fails on a later row
	// has inserted the rows before it, and InnoDB turns the locks of the
	// rows the failed statement removes into a gap lock on the slot table's
	// next row (at REPEATABLE READ and SERIALIZABLE), held to the end of
	// the transaction: inserts of new slot rows into that gap, of any
	// table's counters, wait for it. The executor runs Sorted in clients'
	// transactions (and prepares it), SQL in autocommit.
	Sorted string
	// Restrict is the client's statement with its WHERE clause also
	// requiring the key to be among RestrictKeys (see Guarded.Restrict):
	// on the base rows, the statement tried on one row at a time.
	Restrict string
	// ByKeys, for an increment whose records a condition on the row finds
	// (no key named) in a table keyed by an integer, is SQL whose records
	// are also required to be among RestrictKeys, read by the primary key;
	// empty otherwise. At READ COMMITTED and READ UNCOMMITTED the executor
	// reads the keys of the rows the condition matches without locking
	// them (Guard.ReadKeysSQL) and runs ByKeys with them: the rows it locks
	// are those the UPDATE would, which skips a row another transaction
	// holds when the row's committed version does not match
	// (semi-consistent read), where SQL's locking read of every row scanned
	// would wait for it. (At READ UNCOMMITTED the read sees another
	// transaction's uncommitted change of a base row: docs/limits.md.)
	ByKeys string
	// Guard locks and folds the records, for running the client's
	// statement on the base rows instead (a delta beyond the slot's share
	// of the range, a key or delta the server converts, a table locked
	// WRITE, or increments read back in transactions).
	Guard *Guard
}

// Guarded is a write that needs exact base values: the records it may
// touch are locked and their slots folded into their base rows first
// (Guards, the first one's table being the one it writes), then SQL runs,
// in one transaction (the client's, or the proxy's own around an
// autocommit statement).
type Guarded struct {
	// SQL is the statement to run once the guards folded: it reads the
	// written rows' counters as the client wrote it (their base columns
	// are their totals then), other tables' counters as totals.
	SQL string
	// Unguarded is the statement with the written rows' counters read as
	// totals, for running it when its guard has not folded every row it
	// may touch (a DELETE at READ COMMITTED that cannot be narrowed: see
	// Delete); empty when it is SQL.
	Unguarded string
	// Restrict is the statement with its WHERE clause also requiring the
	// key to be among RestrictKeys, for which the executor substitutes
	// the keys its first guard locked (NULL for none): under READ
	// COMMITTED the statement then touches only rows whose slots were
	// folded, as if it had run when the guard did. Empty when the
	// statement has no WHERE clause of a single table.
	Restrict string
	Guards   []*Guard
	// Local: the statement is a LOAD DATA LOCAL: its response, in which
	// the client sends its file, is relayed as it comes, and it runs once
	// (the file cannot be sent again).
	Local bool
	// SingleTable: the client's statement is an UPDATE or DELETE of one
	// table that reads its rows by a condition on them: MariaDB lists its
	// lock errors twice in SHOW WARNINGS then (once after a scan of every
	// row, the statements of a Wide guard).
	SingleTable bool
	// FoldAfter: the guards fold their records after the statement ran,
	// not before (the refresh of a write that reads and writes no counter,
	// see WriteOthers): the statement locks, waits and fails as directly,
	// where a guard run first would lock rows that a statement failing
	// part way never reaches.
	FoldAfter bool
	// Delete: a DELETE (no RETURNING). At READ COMMITTED in a
	// transaction, one that cannot be narrowed to the keys its guard
	// locked runs as usual (as Unguarded): rows it finds only as it runs
	// can leave slot rows behind, which never change a total (no base row
	// reads them) and which roll-up deletes.
	Delete bool
}

// LockTables is a LOCK TABLES that names ruled tables: SQL also locks
// their slot tables; once it succeeded the session holds Locks until
// UNLOCK TABLES, BEGIN or another LOCK TABLES (see EndsTableLocks).
type LockTables struct {
	SQL   string
	Locks []TableLock
}

// Refused: nothing runs; the client gets an error naming the plan's Table
// and Reason.
type Refused struct{}

func (*AsWritten) Kind() Kind   { return KindOriginal }
func (*Read) Kind() Kind        { return KindRead }
func (*LockingRead) Kind() Kind { return KindRead }
func (o *WriteOthers) Kind() Kind {
	if len(o.Reads) == 0 {
		return KindOriginal
	}
	return KindRead
}
func (*Increment) Kind() Kind  { return KindIncrement }
func (*Guarded) Kind() Kind    { return KindGuarded }
func (*LockTables) Kind() Kind { return KindOriginal }
func (*Refused) Kind() Kind    { return KindRefused }

// Delta is one counter's delta in an increment.
type Delta struct {
	// Column is the counter's.
	Column string
	// Literal is the delta as a decimal integer when it is an integer
	// literal, else "".
	Literal string
	// Param is its placeholder's index, or -1.
	Param int
	// Minus: it is subtracted (c = c - d).
	Minus bool
}

// ReadKeysSQL is KeysSQL without its locks: a read of the keys of the rows
// the statement matches now (at READ COMMITTED, their committed versions);
// false when KeysSQL does not end with FOR UPDATE.
func (g *Guard) ReadKeysSQL() (string, bool) {
	return strings.CutSuffix(g.KeysSQL, " FOR UPDATE")
}

// KeyValue is a key value in a statement: a literal (as SQL) or a
// placeholder.
type KeyValue struct {
	// Literal is the value as SQL when it is a literal.
	Literal string
	// Param is the placeholder's index, or -1.
	Param int
	// Parts, when set, make this a record's key of a Keyed table: one
	// value per key column, each a Literal (its part of the record id,
	// see Table.RecordID) or a Param (encoded as the execution gives it).
	// See guardRecordKeys.
	Parts []KeyValue
}

// Guard finds the records a write (or a locking read) may touch, so their
// slots can be folded into the base rows first.
type Guard struct {
	// Table is the ruled table whose records are folded.
	Table *Table
	// KeysSQL selects the keys, locking the base rows (FOR UPDATE).
	KeysSQL string
	// KeysParams are the original placeholder indexes KeysSQL uses, in order.
	KeysParams []int
	// OrderSQL, when set, reads without locks the keys of the rows KeysSQL
	// selects, in the order the statement's own scan reads them: its
	// select list also names every column of Table (the key first, then
	// the sum of ISNULL of each), as the statement reads whole rows, so the server
	// picks the statement's access path for it rather than an index that
	// covers the key alone (whose order may differ). Same parameters as
	// KeysSQL.
	OrderSQL string
	// Keys are the values of a `key = v` or `key IN (v, …)` condition the
	// statement's WHERE clause requires (nil when it requires none): the
	// statement touches no row with another key. The executor locks the
	// rows of these keys by key instead of running KeysSQL, as the
	// statement itself locks them (a server may scan a small table for
	// KeysSQL and lock every row).
	Keys []KeyValue
	// Wide: KeysSQL selects (and locks) the table's slotted records only,
	// not the rows the statement touches (no WHERE clause, or one that
	// reads counters only): the locked keys cannot narrow the statement.
	Wide bool
	// ScanSQL, set on a Wide guard of a single-table statement that reads
	// every row of Table (it has no condition on them the proxy can keep),
	// locks every base row and gap as that statement's scan does at
	// REPEATABLE READ or SERIALIZABLE, and returns one row. There the
	// executor runs it instead of KeysSQL, then folds the slotted records
	// (read by key): no increment can add a slot row to a locked record,
	// and no slot row of another table is locked (KeysSQL's range also
	// locks the gap before the table's first slot row, where another
	// table's slot rows go).
	ScanSQL string
	// ScanParams are the original placeholder indexes ScanSQL uses, in
	// order.
	ScanParams []int
	// ScanWhere: ScanSQL has the statement's WHERE clause, which the
	// server may find always false (EXPLAIN says "Impossible WHERE"):
	// then the statement writes and locks nothing, and neither does the
	// guard.
	ScanWhere bool
	// Fallback, when set, is the guard to run instead when ProbeSQL finds
	// no row: KeysSQL names rows that may not exist (an upsert's unique
	// key values), and a locking read of a row that does not exist locks
	// the gap where it would go, which the statement itself does not (two
	// such upserts of one new row would deadlock, where directly one waits
	// for the other). ProbeSQL is KeysSQL without its locks, with the same
	// parameters. In the client's transaction, where a probe would take
	// its snapshot early, the executor runs KeysSQL alone (see executor's
	// probeGuard).
	Fallback *Guard
	ProbeSQL string
}

// An Effect is what the session does or learns once a statement
// succeeded: *ClearSlots, *Reload, *TempTables or *SQLPrepare.
type Effect interface {
	mapSQL(f func(string) (string, error)) (Effect, error)
}

// ClearSlots deletes every slot row of Table (after TRUNCATE or DROP TABLE,
// which committed any open transaction), in a transaction of its own.
type ClearSlots struct {
	Table *Table
	SQL   string
}

// Reload: the statement was DDL of a ruled table or a view of one: the
// catalog is reloaded before the session's next statement.
type Reload struct{}

// TempTables: the statement created (Create) or dropped temporary tables
// named like ruled tables ("schema.table", lower case): while one exists,
// that name means it, not the ruled table (Session.TempTables).
type TempTables struct {
	Names  []string
	Create bool
}

// SQLPrepare: a PREPARE name FROM 'text' (see Prepares) succeeded.
type SQLPrepare struct{ Prepares Prepares }

func (e *ClearSlots) mapSQL(f func(string) (string, error)) (Effect, error) {
	c := *e
	var err error
	c.SQL, err = f(c.SQL)
	return &c, err
}
func (e *Reload) mapSQL(func(string) (string, error)) (Effect, error)     { return e, nil }
func (e *TempTables) mapSQL(func(string) (string, error)) (Effect, error) { return e, nil }
func (e *SQLPrepare) mapSQL(f func(string) (string, error)) (Effect, error) {
	c := *e
	if c.Prepares.Write != nil {
		w := *c.Prepares.Write
		if err := w.mapSQL(f); err != nil {
			return nil, err
		}
		c.Prepares.Write = &w
	}
	return &c, nil
}

// RestrictKeys marks where Guarded.Restrict takes the list of keys.
const RestrictKeys = "/*slotproxy:keys*/"

// Changed reports whether any plan differs from sending the text as is.
func Changed(plans []Plan) bool {
	for i, p := range plans {
		if !p.AsWritten() {
			return true
		}
		if p.ChangesSession && i < len(plans)-1 {
			return true // what follows must be planned again
		}
	}
	return false
}

// AsWritten reports whether p only sends the client's statement as
// written: nothing runs before or after it, and the session keeps nothing
// of it.
func (p Plan) AsWritten() bool {
	_, ok := p.Op.(*AsWritten)
	return ok && len(p.Then) == 0
}

// Has reports whether p has an effect of type E.
func Has[E Effect](p Plan) bool {
	return slices.ContainsFunc(p.Then, func(e Effect) bool { _, ok := e.(E); return ok })
}

// SessionCut returns the index of the first plan that changes the session
// and is followed by another, or -1: the plans after it were made for the
// session as it was before the query.
func SessionCut(plans []Plan) int {
	for i, p := range plans[:max(len(plans)-1, 0)] {
		if p.ChangesSession {
			return i
		}
	}
	return -1
}

// mapSQL replaces every SQL text of p by f's image of it: the original,
// the operation's statements, guards and key literals, the effects'. The
// operation and effects are copied first: plans of a template share them.
func (p *Plan) mapSQL(f func(string) (string, error)) error {
	var err error
	if p.Original, err = f(p.Original); err != nil {
		return err
	}
	if p.Op, err = p.Op.mapSQL(f); err != nil {
		return err
	}
	if p.Then != nil {
		then := make([]Effect, len(p.Then))
		for i, e := range p.Then {
			if then[i], err = e.mapSQL(f); err != nil {
				return err
			}
		}
		p.Then = then
	}
	return nil
}

// sqlMapper applies f to texts, keeping the first error.
type sqlMapper struct {
	f   func(string) (string, error)
	err error
}

func (m *sqlMapper) text(s *string) {
	if m.err == nil {
		*s, m.err = m.f(*s)
	}
}

func (m *sqlMapper) keys(kvs []KeyValue) []KeyValue {
	if kvs == nil {
		return nil
	}
	out := slices.Clone(kvs)
	for i := range out {
		m.text(&out[i].Literal)
		out[i].Parts = m.keys(out[i].Parts) // a template's integers are in them too
	}
	return out
}

func (m *sqlMapper) guard(g *Guard) *Guard {
	if g == nil {
		return nil
	}
	c := *g
	m.text(&c.KeysSQL)
	m.text(&c.OrderSQL)
	m.text(&c.ScanSQL)
	m.text(&c.ProbeSQL)
	c.Keys = m.keys(c.Keys)
	c.Fallback = m.guard(c.Fallback)
	return &c
}

func (m *sqlMapper) guards(gs []*Guard) []*Guard {
	if gs == nil {
		return nil
	}
	out := make([]*Guard, len(gs))
	for i, g := range gs {
		out[i] = m.guard(g)
	}
	return out
}

func (o *AsWritten) mapSQL(func(string) (string, error)) (Op, error) { return o, nil }
func (o *Refused) mapSQL(func(string) (string, error)) (Op, error)   { return o, nil }

func (o *Read) mapSQL(f func(string) (string, error)) (Op, error) {
	c, m := *o, &sqlMapper{f: f}
	m.text(&c.SQL)
	m.text(&c.MetaKey)
	return &c, m.err
}

func (o *LockingRead) mapSQL(f func(string) (string, error)) (Op, error) {
	c, m := *o, &sqlMapper{f: f}
	m.text(&c.SQL)
	m.text(&c.MetaKey)
	c.Guards = m.guards(c.Guards)
	return &c, m.err
}

func (o *WriteOthers) mapSQL(f func(string) (string, error)) (Op, error) {
	c, m := *o, &sqlMapper{f: f}
	m.text(&c.SQL)
	c.Guard = m.guard(c.Guard)
	return &c, m.err
}

func (o *Increment) mapSQL(f func(string) (string, error)) (Op, error) {
	c, m := *o, &sqlMapper{f: f}
	m.text(&c.SQL)
	m.text(&c.Sorted)
	if c.batch != "" {
		prev := c.batchMap
		c.batchMap = func(s string) (string, error) {
			if prev != nil {
				var err error
				if s, err = prev(s); err != nil {
					return "", err
				}
			}
			return f(s)
		}
	}
	m.text(&c.ProbeSQL)
	m.text(&c.Restrict)
	m.text(&c.ByKeys)
	if c.Deltas != nil {
		c.Deltas = slices.Clone(c.Deltas)
		for i := range c.Deltas {
			m.text(&c.Deltas[i].Literal)
		}
	}
	c.Keys = m.keys(c.Keys)
	c.Guard = m.guard(c.Guard)
	return &c, m.err
}

func (o *Guarded) mapSQL(f func(string) (string, error)) (Op, error) {
	c, m := *o, &sqlMapper{f: f}
	m.text(&c.SQL)
	m.text(&c.Unguarded)
	m.text(&c.Restrict)
	c.Guards = m.guards(c.Guards)
	return &c, m.err
}

func (o *LockTables) mapSQL(f func(string) (string, error)) (Op, error) {
	c, m := *o, &sqlMapper{f: f}
	m.text(&c.SQL)
	return &c, m.err
}

// SQL is the statement p's operation sends in place of the client's: its
// rewrite, or the Original when it sends it as written ("" for a refusal).
func (p Plan) SQL() string {
	switch op := p.Op.(type) {
	case *Read:
		return op.SQL
	case *LockingRead:
		return op.SQL
	case *WriteOthers:
		return op.SQL
	case *Increment:
		return op.SQL
	case *UpsertIncrement:
		return op.Increment.SQL
	case *UpsertRows:
		return op.Fallback.SQL()
	case *Guarded:
		return op.SQL
	case *LockTables:
		return op.SQL
	case *Refused:
		return ""
	}
	return p.Original
}

// Guards are the guards p's operation runs before its statement, if any
// (an increment's is for running it on the base row).
func (p Plan) Guards() []*Guard {
	switch op := p.Op.(type) {
	case *LockingRead:
		return op.Guards
	case *Guarded:
		return op.Guards
	case *WriteOthers:
		return []*Guard{op.Guard}
	case *Increment:
		return []*Guard{op.Guard}
	case *UpsertIncrement:
		return op.Fallback.Guards()
	case *UpsertRows:
		return op.Fallback.Guards()
	}
	return nil
}
