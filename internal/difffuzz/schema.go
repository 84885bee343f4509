// Package difffuzz is a differential fuzzer for slotproxy: SQLancer's idea
// applied to a proxy, where the oracle is the same server without the
// proxy.
//
// From a seed it generates a schema of counter tables and a sequence of
// statements over a few connections. Each step runs twice, on a twin
// connection pair: through an in-process proxy on the ruled schema
// (<prefix>_ruled, with a rule per table) and directly on the plain schema
// (<prefix>_plain, the same tables without rules). Everything a client sees
// must be equal: errors, affected rows, insert ids, warnings, transaction
// status, column definitions, values, and whether the step blocked. At the
// end the tables' contents are compared, before and after a roll-up. A
// difference is shrunk (delta debugging over the steps) into a reproducer.
//
// The package holds no test server of its own: Env names one (see the
// package's TestDiffFuzz, which uses internal/testdb).
package difffuzz

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
)

// intType is an integer column type, or DECIMAL(10,2) (a counter whose
// slots count cents; its generated values and deltas are whole numbers,
// with a fraction in some increments).
type intType struct {
	Name     string // TINYINT, SMALLINT, MEDIUMINT, INT, BIGINT or DECIMAL
	Unsigned bool
}

// Decimal reports whether the type is DECIMAL(10,2).
func (t intType) Decimal() bool { return t.Name == "DECIMAL" }

var intTypeBits = map[string]uint{"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}

var intTypeNames = []string{"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT"}

// SQL is the type as written in CREATE TABLE.
func (t intType) SQL() string {
	if t.Decimal() {
		return "DECIMAL(10,2)"
	}
	if t.Unsigned {
		return t.Name + " UNSIGNED"
	}
	return t.Name
}

// Range is the type's smallest and largest value (of DECIMAL(10,2), the
// whole numbers it takes).
func (t intType) Range() (lo, hi *big.Int) {
	if t.Decimal() {
		return big.NewInt(-99999999), big.NewInt(99999999)
	}
	bits := intTypeBits[t.Name]
	one := big.NewInt(1)
	if t.Unsigned {
		hi = new(big.Int).Sub(new(big.Int).Lsh(one, bits), one)
		return big.NewInt(0), hi
	}
	hi = new(big.Int).Sub(new(big.Int).Lsh(one, bits-1), one)
	lo = new(big.Int).Neg(new(big.Int).Lsh(one, bits-1))
	return lo, hi
}

// nullKind is how a counter column treats NULL.
type nullKind int

const (
	notNullDefault0 nullKind = iota // NOT NULL DEFAULT 0
	nullable                        // NULL
	defaultNull                     // DEFAULT NULL
)

// Column is a counter column of a generated table.
type Column struct {
	Name string
	Type intType
	Null nullKind
	// CheckLo and CheckHi, when non-nil, are the bounds of the table's
	// CHECK constraint on the column (within the type's range).
	CheckLo, CheckHi *big.Int
	// BoundLo and BoundHi, when either is non-nil, are bounds the table's
	// rule declares for the column (bounds:), within what it accepts: no
	// constraint, a range slotted increments keep the total in.
	BoundLo, BoundHi *big.Int
}

// Nullable reports whether the column accepts NULL.
func (c *Column) Nullable() bool { return c.Null != notNullDefault0 }

// Bounds is the range of values the column accepts: its type's range,
// narrowed by its CHECK constraint.
func (c *Column) Bounds() (lo, hi *big.Int) {
	lo, hi = c.Type.Range()
	if c.CheckLo != nil {
		lo, hi = c.CheckLo, c.CheckHi
	}
	return lo, hi
}

func (c *Column) ddl() string {
	s := c.Name + " " + c.Type.SQL()
	switch c.Null {
	case notNullDefault0:
		s += " NOT NULL DEFAULT 0"
	case nullable:
		s += " NULL"
	case defaultNull:
		s += " DEFAULT NULL"
	}
	return s
}

// Table is a generated table: key id, counters, maybe a name column, a
// unique key on it and a view.
type Table struct {
	Name     string
	KeyType  string // BIGINT, INT, or VARCHAR(20) (a string key: records named by an encoding of it)
	Counters []*Column
	// Ruled are the counters the table's rule names (at least one).
	Ruled      []string
	Slots      int
	HasName    bool
	UniqueName bool
	// AutoInc: the key is AUTO_INCREMENT (an integer key with a unique
	// name), so upserts may leave it out and name the row by its name.
	AutoInc bool
	HasView bool
	// Rows are the seed rows: the key, then one literal per counter, then
	// the name when HasName.
	Rows [][]string
}

// StringKey reports whether the table's key is a string column.
func (t *Table) StringKey() bool { return strings.HasPrefix(t.KeyType, "VARCHAR") }

// KeyLiteral is key k as the table's statements name it: a decimal
// integer, or a quoted one for a string key.
func (t *Table) KeyLiteral(k int64) string {
	if t.StringKey() {
		return fmt.Sprintf("'%d'", k)
	}
	return fmt.Sprint(k)
}

// KeyArg is key k as a prepared statement's parameter.
func (t *Table) KeyArg(k int64) any {
	if t.StringKey() {
		return fmt.Sprint(k)
	}
	return k
}

// View is the name of the table's plain view.
func (t *Table) View() string { return "v_" + t.Name }

// Schema is a generated set of tables, or one read from a reproducer
// (ParseReproducer): its statements and rule files as written there, and
// its tables by name only.
type Schema struct {
	Tables []*Table
	// rawDDL and rawRules, when set, are the reproducer's (its rules
	// naming the ruled schema as reproducerRuled).
	rawDDL, rawRules []string
}

// GenSchema generates a schema from r: 1 to 3 tables.
func GenSchema(r *rand.Rand) *Schema {
	s := &Schema{}
	n := 1 + r.IntN(3)
	for i := range n {
		s.Tables = append(s.Tables, genTable(r, fmt.Sprintf("t%d", i+1)))
	}
	return s
}

func genTable(r *rand.Rand, name string) *Table {
	t := &Table{Name: name, KeyType: pick(r, []string{"BIGINT", "INT", "BIGINT", "VARCHAR(20)"}), Slots: 4 + r.IntN(13)}
	nc := 1 + r.IntN(3)
	for i := range nc {
		c := &Column{
			Name: fmt.Sprintf("c%d", i+1),
			Type: intType{Name: pick(r, intTypeNames), Unsigned: r.IntN(2) == 0},
			Null: nullKind(pickWeighted(r, []int{6, 2, 2})),
		}
		if r.IntN(6) == 0 {
			c.Type = intType{Name: "DECIMAL"}
		}
		if r.IntN(5) == 0 {
			lo, hi := c.Type.Range()
			// Bounds inside the type's range, near zero, as applications
			// write them.
			clo := maxBig(lo, big.NewInt(int64(pick(r, []int{0, 0, -10, -1000}))))
			chi := minBig(hi, big.NewInt(int64(pick(r, []int{100, 1000, 100000}))))
			c.CheckLo, c.CheckHi = clo, chi
		}
		t.Counters = append(t.Counters, c)
	}
	for _, c := range t.Counters {
		if r.IntN(5) != 0 {
			t.Ruled = append(t.Ruled, c.Name)
		}
	}
	if len(t.Ruled) == 0 {
		t.Ruled = []string{t.Counters[0].Name}
	}
	t.HasName = r.IntN(2) == 0
	t.UniqueName = t.HasName && r.IntN(2) == 0
	t.AutoInc = t.UniqueName && !t.StringKey() && r.IntN(3) == 0
	t.HasView = r.IntN(3) == 0
	if !t.StringKey() {
		for _, c := range t.Counters {
			if c.Type.Decimal() || !slices.Contains(t.Ruled, c.Name) || r.IntN(4) != 0 {
				continue
			}
			// Bounds as the conditions of inc-cond imply them (c < 100,
			// c <= 1000000, c >= 2, c > 0), within what the column holds.
			lo, hi := c.Bounds()
			if r.IntN(3) != 0 {
				c.BoundHi = minBig(hi, big.NewInt(int64(pick(r, []int{100, 1000000}))))
			}
			if c.BoundHi == nil || r.IntN(2) == 0 {
				c.BoundLo = maxBig(lo, big.NewInt(int64(pick(r, []int{0, 2}))))
			}
			if c.BoundLo != nil && c.BoundHi != nil && c.BoundLo.Cmp(c.BoundHi) > 0 {
				c.BoundLo = nil
			}
		}
	}
	nrows := 2 + r.IntN(5)
	for i := range nrows {
		row := []string{t.KeyLiteral(int64(i + 1))}
		for _, c := range t.Counters {
			row = append(row, seedValue(r, c))
		}
		if t.HasName {
			row = append(row, fmt.Sprintf("'n%d'", i+1))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// seedValue is a literal the column accepts: zero, small, or within a few
// units of either end of its range, or NULL.
func seedValue(r *rand.Rand, c *Column) string {
	if c.Nullable() && r.IntN(6) == 0 {
		return "NULL"
	}
	lo, hi := c.Bounds()
	return nearValue(r, lo, hi).String()
}

// nearValue is a value in [lo, hi]: small, or a few units from an end.
func nearValue(r *rand.Rand, lo, hi *big.Int) *big.Int {
	var v *big.Int
	switch r.IntN(4) {
	case 0:
		v = new(big.Int).Add(lo, big.NewInt(int64(r.IntN(4))))
	case 1:
		v = new(big.Int).Sub(hi, big.NewInt(int64(r.IntN(4))))
	default:
		v = big.NewInt(int64(r.IntN(20)))
	}
	return maxBig(lo, minBig(hi, v))
}

// DDL is the statements that create the schema's tables, seed rows and
// views in the current database.
func (s *Schema) DDL() []string {
	if s.rawDDL != nil {
		return s.rawDDL
	}
	var out []string
	for _, t := range s.Tables {
		cols := []string{"id " + t.KeyType + " NOT NULL PRIMARY KEY"}
		if t.AutoInc {
			cols[0] = "id " + t.KeyType + " NOT NULL AUTO_INCREMENT PRIMARY KEY"
		}
		for _, c := range t.Counters {
			cols = append(cols, c.ddl())
		}
		if t.HasName {
			cols = append(cols, "name VARCHAR(20) NULL")
		}
		if t.UniqueName {
			cols = append(cols, "UNIQUE KEY uk_"+t.Name+"_name (name)")
		}
		for _, c := range t.Counters {
			if c.CheckLo != nil {
				cols = append(cols, fmt.Sprintf("CONSTRAINT chk_%s_%s CHECK (%s >= %s AND %s <= %s)", t.Name, c.Name, c.Name, c.CheckLo, c.Name, c.CheckHi))
			}
		}
		out = append(out, fmt.Sprintf("CREATE TABLE %s (%s)", t.Name, strings.Join(cols, ", ")))
		var rows []string
		for _, row := range t.Rows {
			rows = append(rows, "("+strings.Join(row, ", ")+")")
		}
		out = append(out, fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", t.Name, strings.Join(t.columnNames(), ", "), strings.Join(rows, ", ")))
		if t.HasView {
			out = append(out, fmt.Sprintf("CREATE VIEW %s AS SELECT id, %s FROM %s", t.View(), t.Counters[0].Name, t.Name))
		}
	}
	return out
}

// columnNames are the table's columns in CREATE TABLE order.
func (t *Table) columnNames() []string {
	names := []string{"id"}
	for _, c := range t.Counters {
		names = append(names, c.Name)
	}
	if t.HasName {
		names = append(names, "name")
	}
	return names
}

// Rules is the text of each table's rule file for the ruled schema.
func (s *Schema) Rules(ruledSchema string) []string {
	if s.rawRules != nil {
		out := make([]string, len(s.rawRules))
		for i, r := range s.rawRules {
			out[i] = strings.ReplaceAll(r, reproducerRuled, ruledSchema)
		}
		return out
	}
	var out []string
	for _, t := range s.Tables {
		rule := fmt.Sprintf("table: %s.%s\nkey: id\ncounters: [%s]\nslots: %d\n", ruledSchema, t.Name, strings.Join(t.Ruled, ", "), t.Slots)
		var bounds []string
		for _, c := range t.Counters {
			var b []string
			if c.BoundLo != nil {
				b = append(b, "min: "+c.BoundLo.String())
			}
			if c.BoundHi != nil {
				b = append(b, "max: "+c.BoundHi.String())
			}
			if len(b) > 0 {
				bounds = append(bounds, fmt.Sprintf("  %s: {%s}\n", c.Name, strings.Join(b, ", ")))
			}
		}
		if len(bounds) > 0 {
			rule += "bounds:\n" + strings.Join(bounds, "")
		}
		out = append(out, rule)
	}
	return out
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// pickWeighted returns an index of weights, each with probability
// proportional to its weight.
func pickWeighted(r *rand.Rand, weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := r.IntN(total)
	for i, w := range weights {
		if n < w {
			return i
		}
		n -= w
	}
	return len(weights) - 1
}

func maxBig(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func minBig(a, b *big.Int) *big.Int {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}
