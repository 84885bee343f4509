package rewrite

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// This file finds every read of a counter column in a statement and turns
// it into base + SUM(slots), computed in the same statement.

// tableRef is one table source visible in a query block.
type tableRef struct {
	table   *Table   // the ruled table, or nil
	columns []string // known columns of an unruled table (nil: unknown)
	match   string   // lower-case name qualifiers use: the alias, else the table name
	schema  string   // lower-case schema, when known
	qual    string   // quoted text that qualifies its columns in generated SQL
	from    string   // the table source as generated SQL names it in a FROM clause (name, partitions, alias)
	derived bool
}

type scope struct {
	refs    []tableRef
	aliases map[string]bool // select-list aliases (lower case), for ORDER BY / GROUP BY / HAVING
}

// reads walks a statement collecting edits.
type reads struct {
	r       *Rewriter
	sql     string
	sess    Session
	scopes  []*scope
	edits   []edit
	skip    map[*ast.ColumnNameExpr]bool // reads to leave alone (self-increments kept on the base column)
	inOrder bool                         // visiting ORDER BY / GROUP BY / HAVING: select aliases shadow columns
	found   int                          // counter reads rewritten
	tables  map[*Table]bool              // ruled tables seen anywhere
	failed  string                       // why the statement cannot be rewritten safely
	params  map[*driver.ParamMarkerExpr]int
	slot    func(n int) int // picks the slot of an increment
	ctes    []string        // names of the common table expressions in scope (lower case)
	sps     int             // slot-table aliases used (spAlias)
	// rolledOK: the statement is a plain read (a SELECT that locks
	// nothing), so counters of RolledUp tables read their base column;
	// rolled lists those tables.
	rolledOK bool
	rolled   []*Table
	// target is the table source a single-table UPDATE or DELETE writes:
	// reads of its counters are marked (edit.target).
	target *tableRef
}

// rolledUp reports whether counters of t read as their base column here,
// and notes t.
func (w *reads) rolledUp(t *Table) bool {
	if !w.rolledOK || !t.RolledUp || t.Shadow {
		return false
	}
	if !slices.Contains(w.rolled, t) {
		w.rolled = append(w.rolled, t)
	}
	return true
}

func (w *reads) push(s *scope) { w.scopes = append(w.scopes, s) }
func (w *reads) pop()          { w.scopes = w.scopes[:len(w.scopes)-1] }

// scopeOf builds the scope for a FROM clause (or UPDATE/DELETE table list).
func (w *reads) scopeOf(refs *ast.TableRefsClause) *scope {
	s := &scope{}
	if refs != nil {
		w.collect(refs.TableRefs, s)
	}
	return s
}

func (w *reads) collect(n ast.ResultSetNode, s *scope) {
	switch x := n.(type) {
	case *ast.Join:
		if x.Left != nil {
			w.collect(x.Left, s)
		}
		if x.Right != nil {
			w.collect(x.Right, s)
		}
		if x.NaturalJoin || len(x.Using) > 0 {
			for _, ref := range s.refs {
				if ref.table != nil {
					w.failed = "NATURAL JOIN or USING with a ruled table"
				}
			}
		}
	case *ast.TableSource:
		switch src := x.Source.(type) {
		case *ast.TableName:
			schema := src.Schema.O
			if schema == "" {
				schema = w.sess.DB
			}
			if src.Schema.O == "" && slices.Contains(w.ctes, src.Name.L) {
				// A common table expression, even one named like a ruled
				// table: its own query block, already walked.
				alias := src.Name
				if x.AsName.O != "" {
					alias = x.AsName
				}
				s.refs = append(s.refs, tableRef{match: alias.L, qual: quoteIdent(alias.O), derived: true})
				return
			}
			if t := w.r.cat.slotTable(schema, src.Name.O); t != nil {
				// Its counts are already in every read of the counters: a
				// dump through the proxy would count them twice.
				w.tables[t] = true
				w.failed = fmt.Sprintf("%s.%s is slotproxy's own table, not readable or writable through the proxy "+
					"(reads of the counters already include the slots; to dump through the proxy, pass --ignore-table=%s.%s "+
					"--ignore-table=%s.%s, or read the server directly)", schema, src.Name.O, schema, t.SlotsTable, schema, RecordTypesTable)
			}
			ref := tableRef{schema: strings.ToLower(schema), match: src.Name.L}
			if src.Schema.O != "" {
				ref.qual = quoteIdent(src.Schema.O) + "." + quoteIdent(src.Name.O)
			} else {
				ref.qual = quoteIdent(src.Name.O)
			}
			ref.from = ref.qual
			if len(src.PartitionNames) > 0 {
				parts := make([]string, len(src.PartitionNames))
				for i, pn := range src.PartitionNames {
					parts[i] = quoteIdent(pn.O)
				}
				ref.from += " PARTITION (" + strings.Join(parts, ", ") + ")"
			}
			if x.AsName.O != "" {
				ref.match = x.AsName.L
				ref.qual = quoteIdent(x.AsName.O)
				ref.from += " AS " + ref.qual
			}
			if t := w.r.cat.lookup(schema, src.Name.O); t != nil && !w.sess.shadowed(schema, src.Name.O) {
				ref.table = t
				w.tables[t] = true
			} else {
				ref.columns = w.r.cat.others[ref.schema+"."+src.Name.L]
			}
			s.refs = append(s.refs, ref)
		default:
			// Derived table or set operation: its own query block.
			w.visit(x.Source)
			s.refs = append(s.refs, tableRef{match: x.AsName.L, qual: quoteIdent(x.AsName.O), derived: true})
		}
	}
}

// visit walks any subtree with this collector.
func (w *reads) visit(n ast.Node) {
	if n != nil {
		n.Accept(w)
	}
}

// Enter implements ast.Visitor. Query blocks are walked by hand so scopes
// and clause context are known.
func (w *reads) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.SelectStmt:
		w.selectStmt(x)
		return n, true
	case *ast.ColumnNameExpr:
		w.column(x)
		return n, true
	case *ast.ValuesExpr:
		return n, true // VALUES(col) in ON DUPLICATE KEY UPDATE names the new value, not a read
	case *ast.IsNullExpr:
		// A total is NULL exactly when its base value is: a null test of
		// a counter reads the base column, as written, which the server
		// also decides as it does directly (c IS NULL of a NOT NULL column
		// is an impossible WHERE that reads no table, and so takes no
		// snapshot).
		if c, ok := unparen(x.Expr).(*ast.ColumnNameExpr); ok && !w.skip[c] {
			if ref := w.resolve(c.Name); ref != nil && ref.table != nil {
				if ctr := ref.table.counter(c.Name.Name.O); ctr != nil && !ctr.Touch {
					if w.skip == nil {
						w.skip = map[*ast.ColumnNameExpr]bool{}
					}
					w.skip[c] = true
					w.tables[ref.table] = true
					return n, true
				}
			}
		}
	case *ast.SetOprStmt:
		if x.With != nil {
			k := w.with(x.With)
			if x.SelectList != nil {
				w.visit(x.SelectList)
			}
			if x.OrderBy != nil {
				w.visit(x.OrderBy)
			}
			if x.Limit != nil {
				w.visit(x.Limit)
			}
			w.ctes = w.ctes[:k]
			return n, true
		}
	}
	return n, false
}

// Leave implements ast.Visitor.
func (w *reads) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// with walks the common table expressions of a WITH clause and puts their
// names in scope; the caller restores w.ctes to n when the statement ends.
// A CTE's body sees the CTEs before it (and itself, when recursive); a
// name it does not define is a table, ruled or not.
func (w *reads) with(c *ast.WithClause) (n int) {
	n = len(w.ctes)
	if c == nil {
		return n
	}
	for _, cte := range c.CTEs {
		if c.IsRecursive || cte.IsRecursive {
			w.ctes = append(w.ctes, cte.Name.L)
			w.visit(cte.Query)
			continue
		}
		w.visit(cte.Query)
		w.ctes = append(w.ctes, cte.Name.L)
	}
	return n
}

func (w *reads) selectStmt(s *ast.SelectStmt) {
	if s.With != nil {
		n := w.with(s.With)
		defer func() { w.ctes = w.ctes[:n] }()
	}
	if s.Kind == ast.SelectStmtKindTable && w.failed == "" && w.r.opts.Dialect.TableStatement() {
		for _, ref := range w.scopeOf(s.From).refs {
			if ref.table != nil {
				w.tables[ref.table] = true
				w.failed = "TABLE " + ref.table.Name + " inside another statement reads every counter of the ruled table as stored in its row (write SELECT * FROM " + ref.table.Name + " instead)"
			}
		}
	}
	if s.Kind == ast.SelectStmtKindValues || s.Kind == ast.SelectStmtKindTable {
		for _, l := range s.Lists {
			w.visit(l)
		}
		return
	}
	sc := w.scopeOf(s.From)
	w.push(sc)
	defer w.pop()
	// positions maps the counters that select fields read as bare columns
	// to the fields' positions (1-based), while no wildcard came before.
	var positions map[counterRef]int
	wildcardSeen := false
	if s.Fields != nil {
		for i, f := range s.Fields.Fields {
			if f.WildCard != nil {
				wildcardSeen = true
			} else if k, ok := w.counterColumn(f.Expr); ok && !wildcardSeen {
				if positions == nil {
					positions = map[counterRef]int{}
				}
				if _, dup := positions[k]; !dup {
					positions[k] = i + 1
				}
			}
			if f.AsName.O != "" {
				if sc.aliases == nil {
					sc.aliases = map[string]bool{}
				}
				sc.aliases[f.AsName.L] = true
			}
			if f.WildCard != nil {
				w.wildcard(f, sc)
				continue
			}
			before := len(w.edits)
			w.visit(f.Expr)
			if len(w.edits) > before && f.AsName.O == "" {
				// Keep the column name the client would have seen.
				name := f.Text()
				if c, ok := f.Expr.(*ast.ColumnNameExpr); ok {
					name = c.Name.Name.O
				}
				end := f.Offset + len(f.Text())
				if f.Text() == "" || end > len(w.sql) || w.sql[f.Offset:end] != f.Text() {
					w.failed = "cannot locate a select field in the statement text"
					continue
				}
				w.edits = append(w.edits, edit{start: end, end: end, text: " AS " + quoteIdent(name)})
			}
		}
	}
	if s.From != nil {
		w.visitJoinConditions(s.From.TableRefs)
	}
	w.visit(s.Where)
	w.inOrder = true
	if s.GroupBy != nil {
		w.byPositions(s.GroupBy.Items, positions)
		w.visit(s.GroupBy)
	}
	if s.Having != nil {
		w.visit(s.Having)
	}
	if s.OrderBy != nil {
		if s.GroupBy != nil {
			w.byPositions(s.OrderBy.Items, positions)
		}
		w.visit(s.OrderBy)
	}
	w.inOrder = false
	for i := range s.WindowSpecs {
		w.visit(&s.WindowSpecs[i])
	}
}

// counterRef is a counter of one table source of a query block.
type counterRef struct {
	ref *tableRef
	ctr *Counter
}

// counterColumn reports whether e is a bare column reference to a counter,
// and which.
func (w *reads) counterColumn(e ast.ExprNode) (counterRef, bool) {
	c, ok := e.(*ast.ColumnNameExpr)
	if !ok || w.skip[c] {
		return counterRef{}, false
	}
	ref := w.resolve(c.Name)
	if ref == nil || ref.table == nil {
		return counterRef{}, false
	}
	ctr := ref.table.counter(c.Name.Name.O)
	if ctr == nil {
		return counterRef{}, false
	}
	return counterRef{ref, ctr}, true
}

// byPositions rewrites GROUP BY (and a grouped query's ORDER BY) items that
// are a bare counter column also selected as a bare column into that select
// field's position. The counter's total is an expression with a subquery,
// which MySQL's ONLY_FULL_GROUP_BY (on by default) does not match against
// the same expression in the select list (error 1055); a position refers
// to the select field itself, on every server.
func (w *reads) byPositions(items []*ast.ByItem, positions map[counterRef]int) {
	if len(positions) == 0 {
		return
	}
	sc := w.scopes[len(w.scopes)-1]
	for _, it := range items {
		c, ok := it.Expr.(*ast.ColumnNameExpr)
		if !ok || (c.Name.Table.O == "" && sc.aliases[c.Name.Name.L]) {
			continue // not a column, or a select-list alias
		}
		k, ok := w.counterColumn(c)
		if !ok {
			continue
		}
		pos, ok := positions[k]
		if !ok {
			continue
		}
		start := c.OriginTextPosition()
		end := nameEnd(w.sql, start, w.sess.ANSIQuotes)
		if end < 0 {
			w.failed = "cannot locate a counter reference in the statement text"
			return
		}
		w.edits = append(w.edits, edit{start: start, end: end, text: itoa(pos)})
		if w.skip == nil {
			w.skip = map[*ast.ColumnNameExpr]bool{}
		}
		w.skip[c] = true
		w.found++
	}
}

// visitJoinConditions walks ON clauses (table sources were walked by collect).
func (w *reads) visitJoinConditions(n ast.ResultSetNode) {
	if j, ok := n.(*ast.Join); ok {
		if j.Left != nil {
			w.visitJoinConditions(j.Left)
		}
		if j.Right != nil {
			w.visitJoinConditions(j.Right)
		}
		if j.On != nil {
			w.visit(j.On.Expr)
		}
	}
}

// column rewrites one column reference if it reads a counter.
func (w *reads) column(c *ast.ColumnNameExpr) {
	if w.skip[c] {
		return
	}
	name := c.Name
	if name.Table.O == "" && w.inOrder && len(w.scopes) > 0 {
		if w.scopes[len(w.scopes)-1].aliases[name.Name.L] {
			return // refers to a select-list alias
		}
	}
	ref := w.resolve(name)
	if ref == nil || ref.table == nil {
		return
	}
	ctr := ref.table.counter(name.Name.O)
	if ctr == nil || w.rolledUp(ref.table) {
		return
	}
	start := c.OriginTextPosition()
	end := nameEnd(w.sql, start, w.sess.ANSIQuotes)
	if end < 0 {
		w.failed = "cannot locate a counter reference in the statement text"
		return
	}
	w.edits = append(w.edits, edit{start: start, end: end, text: w.total(w.sql[start:end], ref, ctr), target: ref == w.target && ref != nil})
	w.found++
}

// total is the SQL for a counter's true value: base column plus slots, cast
// back to an integer (a DECIMAL counter: to its own type) so clients scan
// the type they expect (for a touch column: the latest of base and slots,
// see touch.go).
func (w *reads) total(base string, ref *tableRef, ctr *Counter) string {
	if ctr.Touch {
		w.sps++
		return ctr.touchRead(base, ref.table.RecordID(ref.qual), ref.table.QualifiedSlots(), spAlias(w.sps-1))
	}
	sp := spAlias(w.sps)
	w.sps++
	return "CAST(" + base + " + " + ctr.ValueSQL("COALESCE((SELECT SUM("+sp+".`count`) FROM "+ref.table.QualifiedSlots()+
		" AS "+sp+" WHERE "+sp+".`record_type` = "+itoa(ctr.RecordType)+
		" AND "+sp+".`record_id` = "+ref.table.RecordID(ref.qual)+"), 0)") + " AS " + ctr.totalType() + ")"
}

// resolve finds the table source a column reference belongs to, innermost
// query block first.
func (w *reads) resolve(name *ast.ColumnName) *tableRef {
	for i := len(w.scopes) - 1; i >= 0; i-- {
		s := w.scopes[i]
		if name.Table.O != "" {
			for j := range s.refs {
				ref := &s.refs[j]
				if ref.match == name.Table.L && (name.Schema.O == "" || ref.schema == name.Schema.L) {
					return ref
				}
			}
			continue
		}
		var hit *tableRef
		unknown := false
		for j := range s.refs {
			ref := &s.refs[j]
			switch {
			case ref.table != nil && ref.table.hasColumn(name.Name.O):
			case ref.table == nil && !ref.derived && containsFold(ref.columns, name.Name.O):
			default:
				// A derived table, or a table whose columns are not in
				// the catalog, may have this column too.
				unknown = unknown || (ref.table == nil && (ref.derived || ref.columns == nil))
				continue
			}
			if hit != nil {
				return nil // ambiguous: the server reports it
			}
			hit = ref
		}
		if hit != nil {
			return hit
		}
		if unknown {
			// The name may belong to a table here whose columns we do not
			// know: do not guess an outer table (fail safe: no rewrite).
			return nil
		}
	}
	return nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// wildcard expands * or t.* when it covers a ruled table.
func (w *reads) wildcard(f *ast.SelectField, sc *scope) {
	wc := f.WildCard
	var refs []*tableRef
	for j := range sc.refs {
		ref := &sc.refs[j]
		if wc.Table.O == "" || (ref.match == wc.Table.L && (wc.Schema.O == "" || ref.schema == wc.Schema.L)) {
			refs = append(refs, ref)
		}
	}
	ruled := false
	for _, ref := range refs {
		ruled = ruled || (ref.table != nil && !w.rolledUp(ref.table))
	}
	if !ruled {
		return
	}
	end := nameEnd(w.sql, f.Offset, w.sess.ANSIQuotes)
	if end < 0 || w.sql[end-1] != '*' {
		w.failed = "cannot locate a wildcard in the statement text"
		return
	}
	var b strings.Builder
	for i, ref := range refs {
		if i > 0 {
			b.WriteString(", ")
		}
		if ref.table == nil {
			b.WriteString(ref.qual + ".*")
			continue
		}
		if w.rolledUp(ref.table) {
			b.WriteString(ref.qual + ".*")
			continue
		}
		if len(ref.table.Columns) == 0 {
			w.failed = "column list of " + ref.table.Qualified() + " unknown"
			return
		}
		for k, col := range ref.table.Columns {
			if k > 0 {
				b.WriteString(", ")
			}
			qc := ref.qual + "." + quoteIdent(col)
			if ctr := ref.table.counter(col); ctr != nil {
				b.WriteString(w.total(qc, ref, ctr) + " AS " + quoteIdent(col))
				w.found++
			} else {
				b.WriteString(qc)
			}
		}
	}
	w.edits = append(w.edits, edit{start: f.Offset, end: end, text: b.String()})
}

// spAlias is the alias of the i-th reference to a slot table in one
// statement (0: `_sp`, then `_sp2`, `_sp3`…): a session that holds LOCK
// TABLES locks may name a locked table only once per alias, so each
// reference has its own (LOCK TABLES locks lockedAliases of them).
func spAlias(i int) string {
	if i == 0 {
		return "`_sp`"
	}
	return "`_sp" + itoa(i+1) + "`"
}
