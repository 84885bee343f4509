// Package rewrite turns SQL that touches configured counters into SQL that
// uses slotted counters, and leaves every other statement alone. It is pure:
// SQL text in, plans out, no networking. A Rewriter is safe for concurrent use.
package rewrite

import (
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Table is what the rewriter knows about one ruled table.
type Table struct {
	Schema, Name string
	// Key is the primary key when it is one integer column; "" when
	// KeyColumns name the records instead.
	Key string
	// KeyColumns are the columns of any other primary key (several
	// columns, or strings), in key order: records are named by an
	// encoding of their values (see recordkey.go).
	KeyColumns []KeyColumn
	// Columns lists every column in table order (for SELECT * expansion).
	Columns []string
	// Counters are the ruled counter columns.
	Counters []Counter
	// SlotsTable is the slot table's name; it lives in Schema.
	SlotsTable string
	// Slots is how many slot rows one record's increments spread over.
	Slots int
	// Shadow: statements pass through unchanged; the plan says what would
	// have been done.
	Shadow bool
	// RolledUp: plain reads (a SELECT that locks nothing) see the base
	// column only, which the roll-up keeps at most MaxStaleness behind the
	// total (rules.ReadsRolledUp). Writes, guards, locking reads and the
	// transaction's reads of its own increments stay exact.
	RolledUp     bool
	MaxStaleness time.Duration
	// UniqueKeys are the table's UNIQUE keys other than the primary key,
	// each a list of columns in key order: an upsert or REPLACE conflicts
	// with the rows that match any of them. An empty list stands for a
	// key whose values cannot be matched (a column prefix, an
	// expression): such upserts fold every record of the table first.
	UniqueKeys [][]string
	// Inserted is what an INSERT of a row checks before it finds the row
	// it duplicates: an upsert whose row exists is slotted only when these
	// checks pass on the row it names (see Inserted).
	Inserted Inserted
	// NullDefault are the columns an INSERT that leaves them out sets to
	// NULL (nullable, no other default, not generated, and the table has
	// no INSERT trigger): a unique key with one of them conflicts with no
	// row for such an INSERT.
	NullDefault []string
}

// Inserted describes what the server checks of a row an INSERT names
// before it looks for a duplicate: the columns the INSERT must name
// (Required: NOT NULL, no default, not generated or AUTO_INCREMENT), the
// values integer columns take (IntRanges, by lower-case name: the type's
// range narrowed by CHECK bounds; a column a CHECK constraint reads
// otherwise is not there), and whether an INSERT trigger fires (Trigger).
// KeyAutoIncrement: the key is AUTO_INCREMENT (an upsert that updates a
// row then answers with its key as the insert id).
type Inserted struct {
	Required  []string
	IntRanges map[string][2]string
	// StrLens are the lengths of CHAR and VARCHAR columns (by lower-case
	// name), in characters: an ASCII string literal no longer fits in any
	// character set and any sql_mode.
	StrLens          map[string]int
	Trigger          bool
	KeyAutoIncrement bool
}

// Counter is one ruled counter column.
type Counter struct {
	Name       string
	RecordType int
	// Unsigned: the column is BIGINT UNSIGNED, so totals (and an integer
	// touch column's times) are cast to UNSIGNED. Every other integer
	// column's totals fit in SIGNED (BIGINT), which is also the type
	// drivers scan those columns into.
	Unsigned bool
	// Min and Max are the lowest and highest value the column accepts
	// (its type's range, narrowed by CHECK constraints), as decimal
	// literals; empty means BIGINT's range. Of a DECIMAL counter, in its
	// units (see Precision).
	Min, Max string
	// BoundMin and BoundMax are the bounds the rule declares (see
	// rules.Rule.Bounds), within [Min, Max]; "" where it declares none.
	// Slotted increments keep the total within them as within the range
	// (see keptBounds), so that a comparison they imply holds whenever
	// one succeeds. An increment on the base row may take the base value
	// beyond them (they are no constraint); a slotted increment then
	// fails (its share is NULL while the base value is outside the
	// bounds) and runs on the base row too. Without that test a base
	// value below the lower bound passed the lower test of an increment
	// (its share of the room below rounds to 0), and `c > 0` was taken for
	// implied where the total was 0 (the fuzzer's
	// mysql-1795864487908586870).
	BoundMin, BoundMax string
	// Precision, when not 0: the counter is a DECIMAL(Precision, Scale)
	// column (Precision at most 18). Its slots count units of
	// 10^-Scale (a delta of 1.5 to a DECIMAL(12,4) is 15000 units), so
	// that every sum of slots is exact and fits the slot's BIGINT; a
	// delta that is not a whole number of units (1.23456 there, which the
	// column would round) runs on the base row. Reads and folds turn
	// units back into the column's value (ValueSQL).
	Precision, Scale int
	// BaseOnly says why the counter's increments run on the base row (its
	// slots folded first) and are never slotted: a CHECK constraint that
	// reads the column in a way that is not a constant bound (c <
	// other_column, an OR), where only the base row can tell whether a
	// total meets it; or, after a reload, a side effect of the table that
	// slotted increments would go around (see catalog.LoadDegrading).
	BaseOnly []string

	// Touch: not a counter but a touch column (rules.Rule.Touch), a
	// DATETIME or TIMESTAMP column that increments assign a time, such as
	// updated_at. Its slots keep the greatest time assigned to them,
	// encoded as an integer (see touch.go), and it reads as the greatest
	// of its base value and its slots. A write that assigns it anything
	// but alongside an increment is a guarded write, like an absolute
	// write of a counter.
	Touch bool
	// Timestamp: the touch column is a TIMESTAMP (its values are instants,
	// read in the session's time zone), else a DATETIME.
	Timestamp bool
	// Integer: the touch column is of an integer type (a Unix time, as
	// phpBB's topic_last_view_time), its slots holding times Min to Max
	// (the column's range; of a BIGINT, 0 to 2^63 - 2); increments assign
	// it integers, or GREATEST(v, itself).
	Integer bool
	// FSP is the touch column's fractional seconds precision, 0 to 6.
	FSP int
}

// Decimal reports whether c is a DECIMAL counter (see Precision).
func (c *Counter) Decimal() bool { return c.Precision > 0 }

// unitsSQL returns the SQL for the value v (SQL) in c's slot units.
func (c *Counter) unitsSQL(v string) string {
	if c.Scale == 0 {
		return v
	}
	return "(" + v + ") * 1" + strings.Repeat("0", c.Scale)
}

// ValueSQL returns the SQL for the value of u (SQL) slot units of c: exact
// DECIMAL arithmetic for a DECIMAL counter, u itself for an integer one.
func (c *Counter) ValueSQL(u string) string {
	if c.Scale == 0 {
		return u
	}
	return "(" + u + ") * 0." + strings.Repeat("0", c.Scale-1) + "1"
}

// totalType is the type a read casts a total to: the column's own for a
// DECIMAL counter, else SIGNED or UNSIGNED (BIGINT).
func (c *Counter) totalType() string {
	switch {
	case c.Decimal():
		return "DECIMAL(" + strconv.Itoa(c.Precision) + "," + strconv.Itoa(c.Scale) + ")"
	case c.Unsigned:
		return "UNSIGNED"
	}
	return "SIGNED"
}

// bounds returns the counter's range as decimal literals.
func (c *Counter) bounds() (lo, hi string) {
	lo, hi = c.Min, c.Max
	if lo == "" {
		lo = "-9223372036854775808"
	}
	if hi == "" {
		hi = "9223372036854775807"
	}
	return lo, hi
}

// keptBounds returns the range every successful slotted increment keeps
// the counter's total in: its range, narrowed by the rule's bounds.
func (c *Counter) keptBounds() (lo, hi string) {
	lo, hi = c.bounds()
	if c.BoundMin != "" {
		lo = c.BoundMin
	}
	if c.BoundMax != "" {
		hi = c.BoundMax
	}
	return lo, hi
}

// Range returns the counter's range (see Min and Max).
func (c *Counter) Range() (lo, hi *big.Int) {
	l, h := c.bounds()
	lo, _ = new(big.Int).SetString(l, 10)
	hi, _ = new(big.Int).SetString(h, 10)
	return lo, hi
}

// Slot shares: slot i of a record may hold at most a share of the room
// the base value leaves in the counter's range, the room times
// ShareScale / ((i + ShareScale) × (i + ShareScale + 1)), rounded toward
// zero. Those weights sum to 1 over every slot number there is (they
// telescope: ShareScale × Σ 1/(i+K) − 1/(i+K+1) = 1), so no set of slot
// rows can take the total out of range, whatever number of slots each
// proxy's rules (or a rule before a reload) gave the record. Slot 0 has
// 1/17 of the room, slot 7 1/34.5, slot 99 1/834: a SMALLINT counter
// leaves every slot of a rule of up to a few hundred slots a share.
const ShareScale = 16

// shareDivisor is (slot + ShareScale) × (slot + ShareScale + 1).
func shareDivisor(slot int) *big.Int {
	return new(big.Int).Mul(big.NewInt(int64(slot)+ShareScale), big.NewInt(int64(slot)+ShareScale+1))
}

// Narrow reports whether c's range is too narrow for any slot's share of
// it to take a non-zero delta (a range of fewer than 18 values, such as a
// CHECK (c BETWEEN 0 AND 10)): slot 0's share of it is below 1 (see
// Rewriter.slottedIncrement).
func (c *Counter) Narrow() bool {
	if c.Touch {
		return false
	}
	l, h := c.keptBounds()
	lo, ok1 := new(big.Int).SetString(l, 10)
	hi, ok2 := new(big.Int).SetString(h, 10)
	if !ok1 || !ok2 {
		return false
	}
	room := new(big.Int).Mul(new(big.Int).Sub(hi, lo), big.NewInt(ShareScale))
	return room.Cmp(shareDivisor(0)) < 0
}

// shareBounds returns the range that slotted increments keep the total in:
// the counter's range (narrowed by the rule's bounds) within ±2^53. A delta the server evaluates as a
// DOUBLE (a DOUBLE or string parameter: c + ? is then computed in
// floating point) gives the exact sum there, as the slotted increment
// does; beyond it the statement runs on the base row, rounded as the
// server rounds it.
func (c *Counter) shareBounds() (lo, hi string) {
	lo, hi = c.keptBounds()
	exact := big.NewInt(1 << 53)
	if v, ok := new(big.Int).SetString(lo, 10); ok && v.CmpAbs(exact) > 0 && v.Sign() < 0 {
		lo = "-" + exact.String()
	}
	if v, ok := new(big.Int).SetString(hi, 10); ok && v.Cmp(exact) > 0 {
		hi = exact.String()
	}
	return lo, hi
}

// shareSQL returns the SQL of the least and the greatest value the slot
// row of slot (an expression of the slot number) may hold over the base
// value base (a DECIMAL(21,0) expression): minus and plus the slot's share
// of the room the base value leaves below and above shareBounds (see
// ShareScale).
func (c *Counter) shareSQL(base, slot string) (lo, hi string) {
	min, max := c.shareBounds()
	scale := itoa(ShareScale)
	div := "((" + slot + " + " + scale + ") * (" + slot + " + " + itoa(ShareScale+1) + "))"
	return "-(((" + base + " - (" + min + ")) * " + scale + ") DIV " + div + ")", "((((" + max + ") - " + base + ") * " + scale + ") DIV " + div + ")"
}

// ExistsSQL selects, for a SlotReader, one row shaped as a slot row when
// t has a row with key, none otherwise.
func (t *Table) ExistsSQL(key string) string {
	return fmt.Sprintf("SELECT 0, %s, 0, 0 FROM %s WHERE %s", t.RecordID(""), t.Qualified(), t.keyCond("", key))
}

// BoundsViolationsSQL returns a query of how many slot rows of c, a
// counter of t (not Keyed) with bounds the rule declares, a slotted
// increment under those bounds could not have left: a slot row of a
// record whose base value is outside the bounds, or beyond its slot's
// share of the room the base value leaves within them (each slotted
// increment needs the base value within the bounds and leaves its slot
// row within its share, and the base value changes only with a fold,
// which empties the slots). Slot rows written before the rule declared
// the bounds (or by a proxy whose rule does not) may be such rows; while
// any is left, the bounds do not hold the total (see Counter.BoundMin).
func (t *Table) BoundsViolationsSQL(c *Counter) string {
	kl, kh := c.keptBounds()
	base := "CAST(`_t`." + quoteIdent(c.Name) + " AS DECIMAL(21,0))"
	lo, hi := c.shareSQL(base, "`_c`.`slot`")
	return fmt.Sprintf("SELECT COUNT(*) FROM %s AS `_c` JOIN %s AS `_t` ON `_t`.%s = `_c`.`record_id` "+
		"WHERE `_c`.`record_type` = %d AND `_c`.`count` <> 0 AND NOT (%s BETWEEN %s AND %s AND `_c`.`count` BETWEEN %s AND %s)",
		t.QualifiedSlots(), t.Qualified(), quoteIdent(t.Key), c.RecordType, base, kl, kh, lo, hi)
}

func (t *Table) counter(col string) *Counter {
	for i := range t.Counters {
		if strings.EqualFold(t.Counters[i].Name, col) {
			return &t.Counters[i]
		}
	}
	return nil
}

func (t *Table) hasColumn(col string) bool {
	for _, c := range t.Columns {
		if strings.EqualFold(c, col) {
			return true
		}
	}
	return t.isKey(col) || t.counter(col) != nil
}

// QualifiedSlots is the slot table's name, quoted and schema-qualified.
func (t *Table) QualifiedSlots() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.SlotsTable) }

// Qualified is the table's name, quoted and schema-qualified.
func (t *Table) Qualified() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.Name) }

func (t *Table) recordTypes() string {
	var b strings.Builder
	for i, c := range t.Counters {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(itoa(c.RecordType))
	}
	return b.String()
}

// Catalog is the set of ruled tables plus the column lists of other tables
// in the same schemas (to resolve unqualified column names). It is
// immutable; build a new one to change it.
type Catalog struct {
	// FoldCase: the server compares table names case-insensitively
	// (lower_case_table_names = 1 or 2). Set it before first use.
	FoldCase bool
	// BoundsNotInForce says, one line per counter, which bounds of the
	// rules the catalog did not put in force, and why (see
	// Counter.BoundMin): for the proxy to log and check to report.
	BoundsNotInForce []string

	tables map[string]*Table   // "schema.table", lower case
	slots  map[string]*Table   // "schema.table" of slot tables and registries, lower case: a table ruled there
	others map[string][]string // columns of unruled tables, lower case keys
	names  []string            // distinct lower-case ruled table names, for the pre-filter
	first  [256]bool           // first bytes (both cases) of names
	// views are the views that read a ruled table, directly or through
	// other views, by "schema.view" (lower case): the ruled table.
	views map[string]*Table
	// viewDefs are the definitions of the views of ruled tables that can be
	// inlined into reads (see inlinable), by the same keys.
	viewDefs map[string]string
	// viewBase are the plain views of a ruled table (some of its columns,
	// under their own names, and nothing else: see plainView), by the same
	// keys: an UPDATE through one is planned as an UPDATE of the table.
	viewBase map[string]*Table
}

// AddViews records the views of ruled schemas, defs mapping "schema.view"
// to the view's definition as the server stores it: a statement that
// writes through a view that reads a ruled table is refused (the proxy
// plans writes of tables, not of views). A definition that does not parse
// counts as reading every table it names. Call it before the catalog is
// used; it is not safe concurrently with rewriting.
func (c *Catalog) AddViews(defs map[string]string) {
	type view struct {
		reads []string // "schema.table" lower case
	}
	all := map[string]*view{}
	p := parser.New()
	c.viewDefs = map[string]string{}
	c.viewBase = map[string]*Table{}
	inline := map[string]string{}
	for k, def := range defs {
		k = strings.ToLower(k)
		schema, _, _ := strings.Cut(k, ".")
		v := &view{}
		all[k] = v
		if st, err := p.ParseOneStmt(def, "", ""); err == nil {
			if inlinable(st, c.others[k]) {
				inline[k] = def
			}
			if t := c.plainView(st, schema); t != nil {
				c.viewBase[k] = t
			}
			var names tableNames
			st.Accept(&names)
			for _, tn := range names.found {
				v.reads = append(v.reads, strings.ToLower(schemaOr(tn.Schema.O, schema)+"."+tn.Name.O))
			}
			continue
		}
		// Unparsed: any ruled or view name it contains, in its schema.
		low := strings.ToLower(def)
		for name := range c.tables {
			if _, n, _ := strings.Cut(name, "."); strings.Contains(low, n) {
				v.reads = append(v.reads, name)
			}
		}
		for name := range defs {
			if _, n, _ := strings.Cut(strings.ToLower(name), "."); strings.Contains(low, n) {
				v.reads = append(v.reads, strings.ToLower(name))
			}
		}
	}
	c.views = map[string]*Table{}
	for changed := true; changed; {
		changed = false
		for k, v := range all {
			if c.views[k] != nil {
				continue
			}
			for _, r := range v.reads {
				t := c.tables[r]
				if t == nil {
					t = c.views[r]
				}
				if t != nil && r != k {
					c.views[k] = t
					changed = true
					break
				}
			}
		}
	}
	for k := range c.views {
		_, n, _ := strings.Cut(k, ".")
		c.addName(n)
		if def, ok := inline[k]; ok {
			c.viewDefs[k] = def
		}
	}
	sort.Strings(c.names)
}

// view returns the ruled table the view schema.name reads, or nil when it
// is not a view of a ruled table.
func (c *Catalog) view(schema, name string) *Table {
	if len(c.views) == 0 {
		return nil
	}
	return c.views[strings.ToLower(schema)+"."+strings.ToLower(name)]
}

// plainView returns the ruled table a view's definition st selects from
// when the view is plain: columns of that one table under their own names,
// with no WHERE, grouping, DISTINCT, ORDER BY or LIMIT. Writes through such
// a view are writes of those columns of the table.
func (c *Catalog) plainView(st ast.StmtNode, schema string) *Table {
	sel, ok := st.(*ast.SelectStmt)
	if !ok || sel.From == nil || sel.Where != nil || sel.GroupBy != nil || sel.Having != nil || sel.Distinct ||
		sel.OrderBy != nil || sel.Limit != nil || sel.Fields == nil || sel.With != nil {
		return nil
	}
	j := sel.From.TableRefs
	if j == nil || j.Right != nil {
		return nil
	}
	ts, ok := j.Left.(*ast.TableSource)
	if !ok {
		return nil
	}
	tn, ok := ts.Source.(*ast.TableName)
	if !ok {
		return nil
	}
	t := c.lookup(schemaOr(tn.Schema.O, schema), tn.Name.O)
	if t == nil {
		return nil
	}
	for _, f := range sel.Fields.Fields {
		col, ok := f.Expr.(*ast.ColumnNameExpr)
		if !ok || f.WildCard != nil || (f.AsName.O != "" && !strings.EqualFold(f.AsName.O, col.Name.Name.O)) {
			return nil
		}
	}
	return t
}

// viewDef returns the definition of the view schema.name of a ruled table
// when reads can inline it, or "".
func (c *Catalog) viewDef(schema, name string) string {
	if len(c.viewDefs) == 0 {
		return ""
	}
	return c.viewDefs[strings.ToLower(schema)+"."+strings.ToLower(name)]
}

// tableNames collects the table names of a statement.
type tableNames struct{ found []*ast.TableName }

func (c *tableNames) Enter(n ast.Node) (ast.Node, bool) {
	if tn, ok := n.(*ast.TableName); ok {
		c.found = append(c.found, tn)
	}
	return n, false
}

func (c *tableNames) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// addName adds a lower-case name to the pre-filter's names (not sorted).
func (c *Catalog) addName(n string) {
	n = strings.ToLower(n)
	if n == "" || slices.Contains(c.names, n) {
		return
	}
	c.names = append(c.names, n)
	c.first[n[0]] = true
	c.first[strings.ToUpper(n[:1])[0]] = true
}

// NewCatalog builds a catalog. others maps "schema.table" (any case) to the
// columns of tables that are not ruled; it may be nil.
func NewCatalog(tables []*Table, others map[string][]string) *Catalog {
	c := &Catalog{tables: map[string]*Table{}, slots: map[string]*Table{}, others: map[string][]string{}}
	name := c.addName
	for _, t := range tables {
		c.tables[strings.ToLower(t.Schema+"."+t.Name)] = t
		name(t.Name)
		// The slot table and the registry are named too: statements that
		// read or write them through the proxy are refused (see
		// isSlotTable).
		for _, n := range []string{t.SlotsTable, RecordTypesTable} {
			if k := strings.ToLower(t.Schema + "." + n); n != "" && (c.slots[k] == nil || c.slots[k].Shadow) {
				c.slots[k] = t // an active table, if the schema has one
				name(n)
			}
		}
	}
	sort.Strings(c.names)
	for k, v := range others {
		c.others[strings.ToLower(k)] = v
	}
	return c
}

// Tables returns the ruled tables.
func (c *Catalog) Tables() []*Table {
	out := make([]*Table, 0, len(c.tables))
	for _, t := range c.tables {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Qualified() < out[j].Qualified() })
	return out
}

// lookup finds a ruled table. Names compare exactly, as the server does
// with lower_case_table_names=0 (Linux); with FoldCase set (the server
// folds names) they compare case-insensitively.
func (c *Catalog) lookup(schema, name string) *Table {
	if c.FoldCase {
		return c.tables[strings.ToLower(schema)+"."+strings.ToLower(name)]
	}
	t := c.tables[strings.ToLower(schema)+"."+strings.ToLower(name)]
	if t == nil || t.Schema != schema || t.Name != name {
		return nil
	}
	return t
}

// RecordTypesTable is the name of the record-type registry in every schema
// with rules (created by slotproxy migrate, see internal/catalog).
const RecordTypesTable = "slotproxy_record_types"

// isSlotTable reports whether schema.name is the slot table or the
// registry of a schema with rules, and returns a ruled table of it.
func (c *Catalog) isSlotTable(schema, name string) bool { return c.slotTable(schema, name) != nil }

func (c *Catalog) slotTable(schema, name string) *Table {
	if len(c.slots) == 0 {
		return nil
	}
	return c.slots[strings.ToLower(schema+"."+name)]
}

// Mentions reports whether sql contains the name of a ruled table anywhere
// (case-insensitively). It is the cheap pre-filter in front of the parser: a
// statement for which it is false is never parsed. It does not allocate.
func (c *Catalog) Mentions(sql string) bool {
	if len(c.names) == 0 {
		return false
	}
	for i := 0; i < len(sql); i++ {
		if !c.first[sql[i]] {
			continue
		}
		for _, n := range c.names {
			if len(sql)-i >= len(n) && equalFoldASCII(sql[i:i+len(n)], n) {
				return true
			}
		}
	}
	return false
}

// LongestName is the length of the longest ruled table name: a scan of a
// text in chunks must carry that many bytes less one from a chunk to the
// next so that Mentions sees every name whole.
func (c *Catalog) LongestName() int {
	n := 0
	for _, name := range c.names {
		n = max(n, len(name))
	}
	return n
}

// equalFoldASCII compares s with the lower-case string lower, folding ASCII
// letters only (identifiers outside ASCII compare exactly).
func equalFoldASCII(s, lower string) bool {
	for i := 0; i < len(lower); i++ {
		b := s[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != lower[i] {
			return false
		}
	}
	return true
}
