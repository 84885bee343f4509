package rewrite

import (
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// UpsertIncrement is an INSERT of one row … ON DUPLICATE KEY UPDATE whose
// update only increments counters (c = c + n, c = c + VALUES(c)), of a
// ruled table whose rows it can conflict with on the key alone.
//
// When the row's record exists, Increment adds the deltas to its slots,
// as the UPDATE of that record would (the upsert then answers as one that
// updated the row: 2 affected rows, InsertID); when it does not (Increment
// matched no row), the statement runs as written and inserts it (a row
// inserted meanwhile by another client is then updated on its base row:
// an increment, exact whatever its slots hold). Where Increment cannot be
// slotted (a delta beyond the slot's share of the range, a NULL counter)
// Fallback, the guarded upsert, runs instead.
type UpsertIncrement struct {
	Increment *Increment
	Fallback  Plan
	// InsertID is the insert id of the answer of an upsert that updated
	// the row: its key when the key is AUTO_INCREMENT, else 0.
	InsertID uint64
	// Generated is set when the row leaves out t's AUTO_INCREMENT key and
	// names its record by a UNIQUE key: what the upsert does before it
	// finds the duplicate that Increment does not.
	Generated *GeneratedKey
}

// GeneratedKey is what an upsert that leaves out the table's
// AUTO_INCREMENT key does besides its increments when the row it
// duplicates exists: it takes a value of the AUTO_INCREMENT counter (which
// the server never gives back) and answers with the existing row's key as
// the insert id. In autocommit, in a transaction of the proxy's:
// Increment (which locks the row in share mode; a delta beyond its slot's
// share fails before any value is taken), BurnSQL, IDSQL, COMMIT. In a
// client's transaction the upsert is not slotted (see the executor's
// execGeneratedUpsert).
type GeneratedKey struct {
	// BurnSQL is an INSERT IGNORE of the upsert's row: with the row the
	// increment locked it meets the duplicate, taking one AUTO_INCREMENT
	// value as the upsert does, and inserts nothing (with a 1062
	// warning).
	BurnSQL string
	// IDSQL reads the key of the row the UNIQUE key's values name: after
	// BurnSQL, the record's key for the answer's insert id (a read of the
	// table, which clears the INSERT IGNORE's warning on MariaDB as on
	// MySQL).
	IDSQL string
	// ExistsSQL selects the row as a SlotReader reads rows (see
	// Table.ExistsSQL): in a client's transaction the proxy asks, on a
	// connection of its own, whether the row exists.
	ExistsSQL string
}

// Kind is KindIncrement.
func (*UpsertIncrement) Kind() Kind { return KindIncrement }

func (o *UpsertIncrement) mapSQL(f func(string) (string, error)) (Op, error) {
	c := *o
	inc, err := o.Increment.mapSQL(f)
	if err != nil {
		return nil, err
	}
	c.Increment = inc.(*Increment)
	if err := c.Fallback.mapSQL(f); err != nil {
		return nil, err
	}
	if o.Generated != nil {
		g := *o.Generated
		if g.IDSQL, err = f(g.IDSQL); err != nil {
			return nil, err
		}
		if g.BurnSQL, err = f(g.BurnSQL); err != nil {
			return nil, err
		}
		if g.ExistsSQL, err = f(g.ExistsSQL); err != nil {
			return nil, err
		}
		c.Generated = &g
	}
	return &c, nil
}

// upsertIncrement returns the plan of s, an upsert of t through ref planned
// as fallback, as an UpsertIncrement, or false when it is not one (see
// UpsertIncrement): one row of VALUES, sent as text, naming the key (an
// integer, or every column of a Keyed table's key) or, leaving out an
// AUTO_INCREMENT key, every column of a UNIQUE key (see GeneratedKey),
// every column it names
// an integer column with an integer literal in the column's range or a
// CHAR or VARCHAR column with a short ASCII string (so that the row the
// server builds before it finds the duplicate raises nothing), every
// column that must be named named, no INSERT trigger, no other UNIQUE key
// it can conflict on, and an update of counters only, each by an integer
// literal or VALUES() of one. Several rows: see upsertRows.
func (r *Rewriter) upsertIncrement(s *ast.InsertStmt, t *Table, ref *tableRef, w *reads, fallback Plan) (Plan, bool) {
	if len(s.Lists) > 1 {
		return r.upsertRows(s, t, w, fallback)
	}
	if s.IsReplace || s.IgnoreErr || s.Select != nil || s.Setlist || len(s.Lists) != 1 || len(s.OnDuplicate) == 0 ||
		len(s.Columns) == 0 || len(s.PartitionNames) > 0 || len(w.params) > 0 || t.Shadow || t.RolledUp || t.Inserted.Trigger ||
		fallback.Kind() != KindGuarded {
		return Plan{}, false
	}
	row := s.Lists[0]
	if len(row) != len(s.Columns) {
		return Plan{}, false
	}
	values := map[string]string{} // lower-case column → integer literal ("" for a string)
	for i, c := range s.Columns {
		name := strings.ToLower(c.Name.O)
		if _, twice := values[name]; twice {
			return Plan{}, false
		}
		if n, ok := t.Inserted.StrLens[name]; ok {
			if !shortASCII(unparen(row[i]), n) {
				return Plan{}, false
			}
			values[name] = ""
			continue
		}
		rg, ok := t.Inserted.IntRanges[name]
		v := intLiteral(unparen(row[i]))
		if !ok || v == "" || !inRange(v, rg) {
			return Plan{}, false
		}
		values[name] = v
	}
	// The record: the row with the key the VALUES row names (or, the key
	// left to AUTO_INCREMENT, the values of the UNIQUE key generatedBy).
	key, match := "", ""
	var generatedBy []string
	if t.Keyed() {
		var conds []string
		for _, kc := range t.KeyColumns {
			i := slices.IndexFunc(s.Columns, func(c *ast.ColumnName) bool { return strings.EqualFold(c.Name.O, kc.Name) })
			if i < 0 {
				return Plan{}, false
			}
			conds = append(conds, quoteIdent(kc.Name)+" = "+r.restore(unparen(row[i]), w.sess))
		}
		match = strings.Join(conds, " AND ")
	} else if _, named := values[strings.ToLower(t.Key)]; !named && t.Inserted.KeyAutoIncrement {
		// The key left to AUTO_INCREMENT (a value above every key in the
		// table): the row can conflict on a UNIQUE key only, the one
		// whose every column it names.
		for _, uk := range t.UniqueKeys {
			if len(uk) > 0 && !slices.ContainsFunc(uk, func(c string) bool { _, named := values[strings.ToLower(c)]; return !named }) {
				generatedBy = uk
				break
			}
		}
		if generatedBy == nil {
			return Plan{}, false
		}
		var conds []string
		for _, c := range generatedBy {
			i := slices.IndexFunc(s.Columns, func(n *ast.ColumnName) bool { return strings.EqualFold(n.Name.O, c) })
			conds = append(conds, quoteIdent(c)+" = "+r.restore(unparen(row[i]), w.sess))
		}
		match = strings.Join(conds, " AND ")
	} else {
		if key = values[strings.ToLower(t.Key)]; key == "" {
			return Plan{}, false
		}
		match = quoteIdent(t.Key) + " = " + key
	}
	for _, c := range t.Inserted.Required {
		if _, named := values[strings.ToLower(c)]; !named {
			return Plan{}, false
		}
	}
unique:
	for _, uk := range t.UniqueKeys {
		if t.coversKey(uk) || generatedBy != nil && slices.Equal(uk, generatedBy) {
			continue // a row it meets there has its key, or is the record: the same row
		}
		for _, c := range uk {
			_, named := values[strings.ToLower(c)]
			if !named && slices.ContainsFunc(t.NullDefault, func(n string) bool { return strings.EqualFold(n, c) }) {
				continue unique // NULL there: it conflicts with no row
			}
		}
		return Plan{}, false
	}
	var sets, probes []string
	assigned := map[string]bool{}
	valuesCalls := 0
	for _, a := range s.OnDuplicate {
		c := t.counter(a.Column.Name.O)
		if c == nil || c.Touch || assigned[strings.ToLower(c.Name)] || (a.Column.Table.O != "" && a.Column.Table.L != ref.match) {
			return Plan{}, false
		}
		assigned[strings.ToLower(c.Name)] = true
		delta, minus, self := w.selfIncrement(a, ref)
		if self == nil || w.sess.rowAlias.ambiguous(self) {
			return Plan{}, false
		}
		d := intLiteral(delta)
		switch v := delta.(type) {
		case *ast.ValuesExpr:
			if v.Column != nil {
				d = values[strings.ToLower(v.Column.Name.Name.O)]
				valuesCalls++
			}
		case *ast.ColumnNameExpr:
			if col := w.sess.rowAlias.column(v, s.Columns); col != "" {
				d = values[col]
			}
		}
		if d == "" {
			return Plan{}, false
		}
		op := "+"
		if minus {
			op = "-"
		}
		col := quoteIdent(c.Name)
		sets = append(sets, fmt.Sprintf("%s = %s %s (%s)", col, col, op, d))
		probes = append(probes, fmt.Sprintf("%s = %s %s NULL", col, col, op))
	}
	update := fmt.Sprintf("UPDATE %s SET %s WHERE %s", t.Qualified(), strings.Join(sets, ", "), match)
	plans, err := r.rewriteUTF8(update, w.sess)
	if err != nil || len(plans) != 1 {
		return Plan{}, false
	}
	inc, ok := plans[0].Op.(*Increment)
	if !ok || inc.Zero || len(inc.Keys) != 1 && !((t.Keyed() || generatedBy != nil) && len(inc.Keys) == 0) {
		return Plan{}, false
	}
	// The privileges the upsert needs (INSERT of its columns, UPDATE and
	// SELECT of its counters), checked by a statement that writes nothing.
	cols := make([]string, len(s.Columns))
	nulls := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		cols[i], nulls[i] = quoteIdent(c.Name.O), "NULL"
	}
	probed := *inc
	probed.ProbeSQL = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM DUAL WHERE FALSE ON DUPLICATE KEY UPDATE %s",
		t.Qualified(), strings.Join(cols, ", "), strings.Join(nulls, ", "), strings.Join(probes, ", "))
	probed.PrivKey = probed.ProbeSQL
	// MySQL warns (1287) once for each VALUES() an upsert calls, when it
	// parses it: the slotted statement calls it as often, to no effect
	// (the count it inserts is never NULL), so that it warns the same.
	probed.SQL += strings.Repeat(" + 0 * (VALUES(`count`) IS NULL)", valuesCalls)
	op := &UpsertIncrement{Increment: &probed, Fallback: fallback}
	if t.Inserted.KeyAutoIncrement {
		if n, ok := new(big.Int).SetString(key, 10); ok && n.Sign() > 0 && n.IsUint64() {
			op.InsertID = n.Uint64()
		}
	}
	if generatedBy != nil {
		if valuesCalls > 0 && r.opts.Dialect.UpsertRowAlias() {
			// MySQL's warnings for VALUES(), which the slotted statement
			// repeats, would not outlive the COMMIT after it (nor the
			// INSERT IGNORE's).
			return Plan{}, false
		}
		vals := make([]string, len(row))
		for i, e := range row {
			vals[i] = r.restore(e, w.sess)
		}
		op.Generated = &GeneratedKey{
			IDSQL:     fmt.Sprintf("SELECT %s FROM %s WHERE %s", quoteIdent(t.Key), t.Qualified(), match),
			ExistsSQL: fmt.Sprintf("SELECT 0, %s, 0, 0 FROM %s WHERE %s", quoteIdent(t.Key), t.Qualified(), match),
			BurnSQL:   fmt.Sprintf("INSERT IGNORE INTO %s (%s) VALUES (%s)", t.Qualified(), strings.Join(cols, ", "), strings.Join(vals, ", ")),
		}
	}
	return Plan{Op: op, Table: t, Reason: "the row's record, when it exists, is incremented in a slot; else the row is inserted as written"}, true
}

// shortASCII reports whether e is a string literal of printable ASCII
// characters, at most n of them: a value any CHAR or VARCHAR(n) column
// takes as it is, whatever its character set and the sql_mode.
func shortASCII(e ast.ExprNode, n int) bool {
	v, ok := e.(*driver.ValueExpr)
	if !ok || v.Kind() != driver.KindString {
		return false
	}
	str := v.GetString()
	if len(str) > n {
		return false
	}
	for i := 0; i < len(str); i++ {
		if str[i] < 0x20 || str[i] > 0x7e {
			return false
		}
	}
	return true
}

// inRange reports whether the integer literal v is within rg.
func inRange(v string, rg [2]string) bool {
	n, ok1 := new(big.Int).SetString(v, 10)
	lo, ok2 := new(big.Int).SetString(rg[0], 10)
	hi, ok3 := new(big.Int).SetString(rg[1], 10)
	return ok1 && ok2 && ok3 && n.Cmp(lo) >= 0 && n.Cmp(hi) <= 0
}

// UpsertRows is an INSERT of several rows … ON DUPLICATE KEY UPDATE (a
// flush of counts, as a page-views plugin writes one row per period)
// whose every row, alone, is an UpsertIncrement (Rows, in order). In
// autocommit, the rows run one by one in one transaction of the proxy's:
// each row's record's increments in a slot when the record exists, the
// row's own upsert (RowSQL) as written when it does not; the answer is the
// statement's (1 affected row per row inserted, 2 per row updated, and the
// server's info string for them). Where a row cannot be slotted (beyond
// its slot's share of the range, a NULL counter) or a statement fails, the
// transaction is rolled back and Fallback, the guarded upsert of all the
// rows, runs instead: the server then gives its own result and errors. In
// a client's transaction, and prepared, Fallback runs.
type UpsertRows struct {
	Rows     []*UpsertIncrement
	RowSQL   []string
	Fallback Plan
	// WarnSQL, when set, writes nothing and warns as the client's
	// statement does when the server parses it (MySQL: once for each
	// VALUES(), which the rows' statements replace by their values); it
	// runs after the rows, and its warnings are the statement's.
	WarnSQL string
}

// valuesCall matches a VALUES() call as restore writes it.
var valuesCall = regexp.MustCompile("(?i)VALUES\\(`((?:[^`]|``)+)`\\)")

// valuesCounter counts the VALUES() calls of an expression.
type valuesCounter struct{ n int }

func (v *valuesCounter) Enter(n ast.Node) (ast.Node, bool) {
	if _, ok := n.(*ast.ValuesExpr); ok {
		v.n++
	}
	return n, false
}

func (v *valuesCounter) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// Kind is KindIncrement.
func (*UpsertRows) Kind() Kind { return KindIncrement }

func (o *UpsertRows) mapSQL(f func(string) (string, error)) (Op, error) {
	c := *o
	c.Rows = make([]*UpsertIncrement, len(o.Rows))
	for i, row := range o.Rows {
		m, err := row.mapSQL(f)
		if err != nil {
			return nil, err
		}
		c.Rows[i] = m.(*UpsertIncrement)
	}
	if c.WarnSQL != "" {
		var err error
		if c.WarnSQL, err = f(c.WarnSQL); err != nil {
			return nil, err
		}
	}
	c.RowSQL = slices.Clone(o.RowSQL)
	for i := range c.RowSQL {
		var err error
		if c.RowSQL[i], err = f(c.RowSQL[i]); err != nil {
			return nil, err
		}
	}
	if err := c.Fallback.mapSQL(f); err != nil {
		return nil, err
	}
	return &c, nil
}

// upsertRows returns the plan of s, an upsert of several rows into t
// planned as fallback, as an UpsertRows, or false when one of its rows
// alone is not an UpsertIncrement, t's key is AUTO_INCREMENT (the insert
// ids of such a statement are the server's to pick), or it has a row
// alias.
func (r *Rewriter) upsertRows(s *ast.InsertStmt, t *Table, w *reads, fallback Plan) (Plan, bool) {
	if s.IsReplace || s.IgnoreErr || s.Select != nil || s.Setlist || len(s.Columns) == 0 || len(s.OnDuplicate) == 0 || len(s.PartitionNames) > 0 ||
		len(w.params) > 0 || w.sess.rowAlias != nil || t.Inserted.KeyAutoIncrement || t.Shadow || t.RolledUp || fallback.Kind() != KindGuarded {
		return Plan{}, false
	}
	cols := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		cols[i] = quoteIdent(c.Name.O)
	}
	sets := make([]string, len(s.OnDuplicate))
	calls := 0 // VALUES() calls
	for i, a := range s.OnDuplicate {
		if a.Column.Table.O != "" || a.Column.Schema.O != "" {
			return Plan{}, false
		}
		sets[i] = quoteIdent(a.Column.Name.O) + " = " + r.restore(a.Expr, w.sess)
		var vc valuesCounter
		a.Expr.Accept(&vc)
		calls += vc.n
	}
	// On MySQL, which warns once for each VALUES() when it parses an
	// upsert, each row's statement names the row's values instead, and
	// one statement that writes nothing gives the client statement's
	// warnings (WarnSQL).
	subst := calls > 0 && r.opts.Dialect.UpsertRowAlias()
	if subst && len(valuesCall.FindAllStringIndex(strings.Join(sets, ", "), -1)) != calls {
		return Plan{}, false // (a VALUES( in a string, say)
	}
	op := &UpsertRows{Fallback: fallback}
	if subst {
		nulls := make([]string, len(cols))
		for i := range nulls {
			nulls[i] = "NULL"
		}
		op.WarnSQL = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM DUAL WHERE FALSE ON DUPLICATE KEY UPDATE %s",
			t.Qualified(), strings.Join(cols, ", "), strings.Join(nulls, ", "), strings.Join(sets, ", "))
	}
	for _, row := range s.Lists {
		if len(row) != len(cols) {
			return Plan{}, false
		}
		vals := make([]string, len(row))
		byName := map[string]string{}
		for i, v := range row {
			vals[i] = r.restore(v, w.sess)
			byName[strings.ToLower(s.Columns[i].Name.O)] = vals[i]
		}
		rowSets := strings.Join(sets, ", ")
		if subst {
			missing := false
			rowSets = valuesCall.ReplaceAllStringFunc(rowSets, func(call string) string {
				name := strings.ReplaceAll(valuesCall.FindStringSubmatch(call)[1], "``", "`")
				v, ok := byName[strings.ToLower(name)]
				if !ok {
					missing = true // VALUES() of a column the row leaves to its default
				}
				return "(" + v + ")"
			})
			if missing {
				return Plan{}, false
			}
		}
		q := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON DUPLICATE KEY UPDATE %s", t.Qualified(), strings.Join(cols, ", "), strings.Join(vals, ", "), rowSets)
		plans, err := r.rewriteUTF8(q, w.sess)
		if err != nil || len(plans) != 1 || plans[0].Table != t {
			return Plan{}, false
		}
		up, ok := plans[0].Op.(*UpsertIncrement)
		if !ok {
			return Plan{}, false
		}
		op.Rows = append(op.Rows, up)
		op.RowSQL = append(op.RowSQL, q)
	}
	return Plan{Op: op, Table: t, Reason: "in autocommit each row's record, when it exists, is incremented in a slot, and the other rows are inserted as written, in one transaction"}, true
}
