package rewrite

import (
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Reads through views of ruled tables. The proxy rewrites reads of ruled
// tables; a view's body is stored on the server, where the proxy cannot
// rewrite it. So a SELECT that names such a view in a FROM clause is
// planned with the view's definition put in its place, as a derived table
// of the view's name: the counters it reads become totals like any other.
// Writes through such views are refused (writesView).

// inlinable reports whether the definition def of a view whose columns are
// cols can stand in for the view as a derived table: a single SELECT whose
// result columns carry the view's column names, in order (a view created
// with its own column list, CREATE VIEW v (a, b) AS …, names them
// differently, and a derived table cannot rename its columns on every
// server).
func inlinable(st ast.StmtNode, cols []string) bool {
	sel, ok := st.(*ast.SelectStmt)
	if !ok || sel.Fields == nil || len(sel.Fields.Fields) != len(cols) || len(cols) == 0 {
		return false
	}
	for i, f := range sel.Fields.Fields {
		name := f.AsName.O
		if name == "" {
			c, ok := f.Expr.(*ast.ColumnNameExpr)
			if !ok || f.WildCard != nil {
				return false
			}
			name = c.Name.Name.O
		}
		if !strings.EqualFold(name, cols[i]) {
			return false
		}
	}
	return true
}

// viewRefs counts the table references of st to views of ruled tables that
// can be inlined.
func (r *Rewriter) viewRefs(st ast.StmtNode, sess Session) int {
	if len(r.cat.viewDefs) == 0 {
		return 0
	}
	var names tableNames
	st.Accept(&names)
	n := 0
	for _, tn := range names.found {
		if sess.shadowed(schemaOr(tn.Schema.O, sess.DB), tn.Name.O) {
			continue
		}
		if r.cat.viewDef(schemaOr(tn.Schema.O, sess.DB), tn.Name.O) != "" {
			n++
		}
	}
	return n
}

// inlineViews returns text (one SELECT) with each of its want references
// to views of ruled tables replaced by the view's definition as a derived
// table named like the view, or false when the references cannot all be
// located exactly in the text.
func (r *Rewriter) inlineViews(text string, sess Session, want int) (string, []string, bool) {
	toks, ok := lex(text, sess)
	if !ok {
		return "", nil, false
	}
	var views []string
	// The clause each parenthesis depth is in: a comma continues a FROM
	// list only there.
	clause := map[int]string{}
	type span struct {
		start, end int
		repl       string
	}
	var spans []span
	for i, t := range toks {
		if t.kind == tokWord {
			switch w := strings.ToUpper(t.text(text)); w {
			case "SELECT", "FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "ON", "USING", "WINDOW", "INTO", "UNION", "EXCEPT", "INTERSECT", "FOR", "LOCK":
				clause[t.depth] = w
			}
		}
		if t.kind == tokPunct && text[t.start] == '(' {
			clause[t.depth+1] = ""
		}
		name := t.ident(text)
		if name == "" || (i+1 < len(toks) && toks[i+1].kind == tokPunct && text[toks[i+1].start] == '.') {
			continue
		}
		schema, start, prev := sess.DB, t.start, i-1
		if i >= 2 && toks[i-1].kind == tokPunct && text[toks[i-1].start] == '.' {
			if schema = toks[i-2].ident(text); schema == "" {
				continue
			}
			start, prev = toks[i-2].start, i-3
		}
		def := r.cat.viewDef(schema, name)
		if def == "" || prev < 0 || sess.shadowed(schema, name) {
			continue
		}
		p := toks[prev]
		switch {
		case p.is(text, "FROM"), p.is(text, "JOIN"), p.is(text, "STRAIGHT_JOIN"):
		case p.kind == tokPunct && text[p.start] == ',' && clause[p.depth] == "FROM":
		default:
			continue
		}
		repl := "(" + def + ")"
		if !aliased(text, toks, i+1) {
			repl += " AS " + quoteIdent(name)
		}
		spans = append(spans, span{start, t.end, repl})
		if v := quoteIdent(schema) + "." + quoteIdent(name); !slices.Contains(views, v) {
			views = append(views, v)
		}
	}
	if len(spans) != want {
		return "", nil, false
	}
	var b strings.Builder
	pos := 0
	for _, s := range spans {
		b.WriteString(text[pos:s.start])
		b.WriteString(s.repl)
		pos = s.end
	}
	b.WriteString(text[pos:])
	return b.String(), views, true
}

// aliased reports whether the table name before toks[i] is followed by an
// alias (AS name, or a name that is not a keyword that may follow a table
// reference).
func aliased(text string, toks []token, i int) bool {
	if i >= len(toks) {
		return false
	}
	t := toks[i]
	switch t.kind {
	case tokIdent:
		return true
	case tokWord:
		switch strings.ToUpper(t.text(text)) {
		case "AS":
			return true
		case "WHERE", "SET", "JOIN", "INNER", "LEFT", "RIGHT", "CROSS", "NATURAL", "STRAIGHT_JOIN", "FULL", "ON", "USING",
			"GROUP", "HAVING", "ORDER", "LIMIT", "UNION", "EXCEPT", "INTERSECT", "FOR", "LOCK", "WINDOW", "INTO",
			"PARTITION", "USE", "FORCE", "IGNORE", "TABLESAMPLE", "RETURNING":
			return false
		}
		return true
	}
	return false
}

// inlinedRead plans a SELECT (sql[start:end]) that reads views of ruled
// tables with their definitions inlined; false when it cannot (the
// statement is then planned as written: the views read base values).
func (r *Rewriter) inlinedRead(st ast.StmtNode, sql string, start, end int, sess Session, slot func(int) int) (Plan, bool) {
	n := r.viewRefs(st, sess)
	if n == 0 {
		return Plan{}, false
	}
	text := sql[start:end]
	inlined, views, ok := r.inlineViews(text, sess, n)
	if !ok {
		return Plan{}, false
	}
	plans, err := r.rewrite(inlined, sess, slot)
	if err != nil || len(plans) != 1 {
		return Plan{}, false
	}
	p := plans[0]
	if p.Kind() == KindOriginal {
		return Plan{}, false // no counter read through the views: as written
	}
	p.Original, p.Views = text, views
	return p, true
}

// ViewsProbeSQL returns a statement that opens the views p reads in their
// place (Plan.Views) and reads no row, or "" when there are none.
func ViewsProbeSQL(p Plan) string {
	if len(p.Views) == 0 {
		return ""
	}
	return "SELECT 1 FROM " + strings.Join(p.Views, ", ") + " LIMIT 0"
}

// updateThroughView plans an UPDATE of one plain view of a ruled table
// (Catalog.plainView) as the same UPDATE of the table, aliased like the
// view: UPDATE v SET c = c + 1 WHERE id = 1 is slotted like any increment.
// It declines (false) when the statement is not such an UPDATE, or names a
// column the view does not have (the statement is then refused).
func (r *Rewriter) updateThroughView(s *ast.UpdateStmt, sql string, start, end int, sess Session, slot func(int) int) (Plan, bool) {
	if s.TableRefs == nil || s.TableRefs.TableRefs == nil || s.TableRefs.TableRefs.Right != nil || len(r.cat.viewBase) == 0 {
		return Plan{}, false
	}
	ts, ok := s.TableRefs.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return Plan{}, false
	}
	tn, ok := ts.Source.(*ast.TableName)
	if !ok {
		return Plan{}, false
	}
	schema := schemaOr(tn.Schema.O, sess.DB)
	key := strings.ToLower(schema + "." + tn.Name.O)
	t := r.cat.viewBase[key]
	if t == nil || sess.shadowed(schema, tn.Name.O) {
		return Plan{}, false
	}
	// Every column the statement names must be one of the view's (the
	// table has more): a column of a subquery's own table counts against
	// it too, and then the statement is refused.
	cols := r.cat.others[key]
	match := tn.Name.L
	if ts.AsName.L != "" {
		match = ts.AsName.L
	}
	var names columnNames
	s.Accept(&names)
	for _, a := range s.List {
		names.found = append(names.found, a.Column) // SET targets are not expressions
	}
	for _, c := range names.found {
		if c.Table.O != "" && (c.Table.L != match || (c.Schema.O != "" && !strings.EqualFold(c.Schema.O, schema))) {
			return Plan{}, false
		}
		if !slices.ContainsFunc(cols, func(v string) bool { return strings.EqualFold(v, c.Name.O) }) {
			return Plan{}, false
		}
	}
	text := sql[start:end]
	toks, ok := lex(text, sess)
	if !ok {
		return Plan{}, false
	}
	// UPDATE [LOW_PRIORITY] [IGNORE] [schema.]view
	i := 1
	for i < len(toks) && (toks[i].is(text, "LOW_PRIORITY") || toks[i].is(text, "IGNORE")) {
		i++
	}
	first := i
	if i+2 < len(toks) && toks[i+1].kind == tokPunct && text[toks[i+1].start] == '.' {
		i += 2
	}
	if i >= len(toks) || !toks[0].is(text, "UPDATE") || !strings.EqualFold(toks[i].ident(text), tn.Name.O) {
		return Plan{}, false
	}
	repl := t.Qualified()
	if !aliased(text, toks, i+1) {
		repl += " AS " + quoteIdent(tn.Name.O)
	}
	plans, err := r.rewrite(text[:toks[first].start]+repl+text[toks[i].end:], sess, slot)
	if err != nil || len(plans) != 1 || plans[0].Kind() == KindRefused {
		return Plan{}, false
	}
	return plans[0], true
}

// columnNames collects the column names of a statement.
type columnNames struct{ found []*ast.ColumnName }

func (c *columnNames) Enter(n ast.Node) (ast.Node, bool) {
	if cn, ok := n.(*ast.ColumnNameExpr); ok {
		c.found = append(c.found, cn.Name)
	}
	return n, false
}

func (c *columnNames) Leave(n ast.Node) (ast.Node, bool) { return n, true }
