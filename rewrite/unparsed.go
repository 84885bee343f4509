package rewrite

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Statements the parser does not take. A statement that names no ruled
// table passes through whatever it is; one that names a ruled table and
// does not parse is planned here when a clause the parser does not know can
// be cut out and put back (SELECT … INTO @v, INTO DUMPFILE; MySQL's INSERT
// … AS alias; MariaDB's EXECUTE IMMEDIATE 'text'), and is otherwise an
// UnparsedError: the executor asks the server whether the statement is
// valid at all (its error is the client's answer), and refuses it if it is.

// UnparsedError is the error of Rewrite for a statement that does not
// parse and names a ruled table or a slot table: it may read or write
// counters, so it must not pass through unchanged.
type UnparsedError struct {
	// Table is a ruled table the statement names (the slot table's owner
	// when it names only a slot table).
	Table *Table
	// Multi: the text holds more than one statement.
	Multi bool
	// Err is the parser's complaint.
	Err error
	// Fallback, when set, runs the statement exactly once the server has
	// accepted it: a data statement (SELECT, UPDATE, HANDLER, SET
	// STATEMENT … FOR …) that names ruled tables but no slot table, as a
	// guarded write that folds every slotted record of those tables first
	// (so base values are totals while it runs), then runs the text as
	// written. Nil: the statement is refused.
	Fallback *Plan
}

func (e *UnparsedError) Error() string {
	return fmt.Sprintf("rewrite: statement naming %s.%s does not parse: %v", e.Table.Schema, e.Table.Name, e.Err)
}

func (e *UnparsedError) Unwrap() error { return e.Err }

// Reason is the refusal's reason, for the client.
func (e *UnparsedError) Reason() string {
	return "the statement names the ruled table but slotproxy cannot parse it, so it cannot tell which counters it reads or writes"
}

// cutKind is what a cut-out clause is.
type cutKind uint8

const (
	cutInto     cutKind = iota // SELECT … INTO @v, … / INTO DUMPFILE 'f'
	cutRowAlias                // INSERT … VALUES (…) AS alias [(columns)]
)

// cut is a clause taken out of a statement for the parser: marker stands
// in for text.
type cut struct {
	kind   cutKind
	marker string
	text   string
	// alias is the row alias a cutRowAlias clause names.
	alias *rowAlias
}

// rowAlias is INSERT … VALUES (…) AS name [(columns)]: the new row's name
// and, when given, its columns' names (in the order of the INSERT's).
type rowAlias struct {
	name    string
	columns []string
}

// ambiguous reports whether c, a column of the table, is named without
// its table where the alias has a column of that name too (every column
// of the table when the alias lists none): the server refuses it (1052).
func (a *rowAlias) ambiguous(c *ast.ColumnNameExpr) bool {
	if a == nil || c.Name.Table.O != "" {
		return false
	}
	return a.columns == nil || slices.ContainsFunc(a.columns, func(n string) bool { return strings.EqualFold(n, c.Name.Name.O) })
}

// column returns the INSERT column (lower case) that c names through the
// alias, "name.column" (the alias exactly as written, as the server
// compares table aliases by default), or "" for anything else (unqualified
// names stay with the guarded write, where the server resolves them).
func (a *rowAlias) column(c *ast.ColumnNameExpr, insertColumns []*ast.ColumnName) string {
	if a == nil || c.Name.Schema.O != "" || c.Name.Table.O != a.name {
		return ""
	}
	name := c.Name.Name.L
	if a.columns == nil {
		return name
	}
	for i, n := range a.columns {
		if strings.EqualFold(n, name) && i < len(insertColumns) {
			return insertColumns[i].Name.L
		}
	}
	return ""
}

// unparsed plans sql, which the parser rejected with parseErr: by cutting
// out clauses it does not know, by planning the text of EXECUTE IMMEDIATE,
// or not at all (an *UnparsedError when sql names a ruled table, else
// parseErr: it passes through).
func (r *Rewriter) unparsed(sql string, sess Session, slot func(int) int, parseErr error) ([]Plan, error) {
	toks, ok := lex(sql, sess)
	if !ok {
		return nil, parseErr
	}
	if plans, ok := r.executeImmediate(sql, toks, sess, slot); ok {
		return plans, nil
	}
	if !multiStatement(sql, toks) {
		// LOCK TABLES with aliases.
		if lp, ok := r.lockTables(sql, toks, sess); ok {
			lp.Original = sql
			return []Plan{lp}, nil
		}
	}
	t := r.cat.ruledNamed(sql, toks, sess)
	if t == nil && len(toks) > 2 && toks[0].is(sql, "EXECUTE") && toks[1].is(sql, "IMMEDIATE") && toks[2].kind == tokString {
		// The statement's text is a literal: what it names counts.
		if inner, ok := unquote(toks[2].text(sql), !sess.NoBackslashEscapes); ok {
			if itoks, ok := lex(inner, sess); ok {
				t = r.cat.ruledNamed(inner, itoks, sess)
			}
		}
	}
	if t == nil {
		return nil, parseErr
	}
	fail := &UnparsedError{Table: t, Multi: multiStatement(sql, toks), Err: parseErr}
	fail.Fallback = r.foldFirst(sql, toks, sess, fail.Multi)
	text, cuts := cutClauses(sql, toks)
	if len(cuts) == 0 {
		return nil, fail
	}
	for _, c := range cuts {
		if c.alias != nil && !multiStatement(sql, toks) {
			sess.rowAlias = c.alias
		}
	}
	plans, err := r.rewrite(text, sess, slot)
	if err != nil {
		return nil, fail
	}
	for i := range plans {
		restoreCuts(&plans[i], cuts, r.opts.Dialect.RowAlias())
	}
	return plans, nil
}

// foldFirst is the fallback plan of a statement that does not parse (see
// UnparsedError.Fallback), or nil.
func (r *Rewriter) foldFirst(sql string, toks []token, sess Session, multi bool) *Plan {
	if multi || len(toks) == 0 {
		return nil
	}
	switch strings.ToUpper(toks[0].text(sql)) {
	case "SELECT", "WITH", "(", "UPDATE", "DELETE", "INSERT", "REPLACE", "SET", "HANDLER", "EXECUTE", "VALUES", "TABLE":
	default:
		return nil
	}
	if len(toks) > 2 && toks[0].is(sql, "EXECUTE") && toks[1].is(sql, "IMMEDIATE") && toks[2].kind == tokString {
		// The tables are those its text names.
		inner, ok := unquote(toks[2].text(sql), !sess.NoBackslashEscapes)
		if !ok {
			return nil
		}
		itoks, ok := lex(inner, sess)
		if !ok || multiStatement(inner, itoks) {
			return nil
		}
		p := r.foldFirst(inner, itoks, sess, false)
		if p != nil {
			p.Op.(*Guarded).SQL, p.Original = sql, sql
		}
		return p
	}
	var tables []*Table
	for i, t := range toks {
		name := t.ident(sql)
		if name == "" {
			continue
		}
		schema := sess.DB
		if i >= 2 && toks[i-1].kind == tokPunct && sql[toks[i-1].start] == '.' {
			if s := toks[i-2].ident(sql); s != "" {
				schema = s
			}
		}
		if r.cat.slotTable(schema, name) != nil {
			return nil
		}
		if rt := r.cat.lookup(schema, name); rt != nil && !rt.Shadow && !sess.shadowed(schema, name) && !slices.Contains(tables, rt) {
			tables = append(tables, rt)
		}
	}
	if len(tables) == 0 {
		return nil
	}
	op := &Guarded{SQL: sql}
	for _, t := range tables {
		op.Guards = append(op.Guards, wideGuard(t, "FOR UPDATE"))
	}
	return &Plan{Op: op, Table: tables[0], Original: sql,
		Reason: "not parsed: every slotted record of the ruled tables it names is folded first, then it runs as written"}
}

// restoreCuts puts the clauses cut out of a statement back into its plan,
// or refuses the plan when it cannot keep them exactly. rowAlias reports
// whether the server knows row aliases.
//
// An upsert increment keeps a row alias: slotted, it runs no INSERT (its
// deltas are literals or VALUES(), never the alias), and its Fallback and
// Original, which do, get the clause back. Where the server has no row
// aliases it runs as its guarded write (which fails as directly).
func restoreCuts(p *Plan, cuts []cut, rowAlias bool) {
	if up, ok := p.Op.(*UpsertIncrement); ok && len(cuts) > 0 {
		fb := up.Fallback
		fb.Original = p.Original
		restoreCuts(&fb, cuts, rowAlias)
		keep := rowAlias && fb.Kind() == KindGuarded
		for _, c := range cuts {
			keep = keep && c.kind == cutRowAlias
		}
		if !keep {
			*p = fb
			return
		}
		c := *up
		c.Fallback = fb
		p.Op = &c
		for _, c := range cuts {
			p.Original = strings.Replace(p.Original, c.marker, c.text, 1)
		}
		return
	}
	for _, c := range cuts {
		if !strings.Contains(p.Original, c.marker) {
			continue
		}
		p.Original = strings.Replace(p.Original, c.marker, c.text, 1)
		var main *string // the operation's statement (none: the Original)
		allowed := false
		switch op := p.Op.(type) {
		case *Refused:
			continue
		case *AsWritten:
			allowed = true
		case *Read:
			main, allowed = &op.SQL, c.kind == cutInto
		case *LockingRead:
			main, allowed = &op.SQL, c.kind == cutInto
		case *WriteOthers:
			main, allowed = &op.SQL, c.kind == cutRowAlias && len(op.Reads) == 0
		case *Guarded:
			main, allowed = &op.SQL, c.kind == cutRowAlias && op.Unguarded == "" && op.Restrict == ""
		}
		what := "SELECT … INTO"
		if c.kind == cutRowAlias {
			what = "INSERT … AS alias"
		}
		if main != nil && c.kind == cutInto {
			// A read rewrite names a rewritten field after the field's
			// text, which the parser ends after the marker: the name goes
			// before the clause.
			if i := strings.Index(*main, c.marker+" AS `"); i >= 0 {
				rest := (*main)[i+len(c.marker):]
				if n := identEnd(rest, len(" AS "), false); n > 0 {
					*main = strings.TrimRight((*main)[:i], " ") + rest[:n] + " " + c.marker + rest[n:]
				}
			}
		}
		if !allowed || main != nil && strings.Count(*main, c.marker) != 1 {
			t := p.Table
			if r, ok := p.Op.(*Read); t == nil && ok && len(r.Reads) > 0 {
				t = r.Reads[0]
			}
			*p = Plan{Op: &Refused{}, Table: t, Original: p.Original,
				Reason: fmt.Sprintf("%s planned as %s cannot keep the clause %q (send it without the clause)", what, p.Kind(), c.text)}
			return
		}
		if main != nil {
			*main = strings.Replace(*main, c.marker, c.text, 1)
		}
	}
}

// cutClauses returns sql with the clauses the parser does not know
// replaced by comments, and the clauses.
func cutClauses(sql string, toks []token) (string, []cut) {
	type span struct {
		start, end int
		kind       cutKind
		alias      *rowAlias
	}
	var spans []span
	find := func(st []token) {
		if len(st) == 0 {
			return
		}
		switch first := st[0]; {
		case first.is(sql, "SELECT") || first.is(sql, "WITH") || (first.kind == tokPunct && sql[first.start] == '('):
			for i := 0; i+1 < len(st); i++ {
				t, n := st[i], st[i+1]
				if t.depth != 0 || !t.is(sql, "INTO") {
					continue
				}
				switch {
				case n.kind == tokVar:
					j := i + 1
					for j+2 < len(st) && st[j+1].kind == tokPunct && sql[st[j+1].start] == ',' && st[j+2].kind == tokVar {
						j += 2
					}
					spans = append(spans, span{t.start, st[j].end, cutInto, nil})
				case n.is(sql, "DUMPFILE") && i+2 < len(st) && st[i+2].kind == tokString:
					spans = append(spans, span{t.start, st[i+2].end, cutInto, nil})
				}
			}
		case first.is(sql, "INSERT") || first.is(sql, "REPLACE"):
			values := false
			for i := 0; i+1 < len(st); i++ {
				t := st[i]
				if t.depth != 0 {
					continue
				}
				switch {
				case !values && (t.is(sql, "SELECT") || t.is(sql, "TABLE") || t.is(sql, "WITH")):
					return // INSERT … SELECT has no row alias
				case t.is(sql, "VALUES") || t.is(sql, "VALUE") || t.is(sql, "SET"):
					values = true
				case values && t.is(sql, "AS") && st[i+1].ident(sql) != "":
					end := st[i+1].end
					alias := &rowAlias{name: st[i+1].ident(sql)}
					if i+2 < len(st) && st[i+2].kind == tokPunct && sql[st[i+2].start] == '(' {
						alias.columns = []string{}
						for j := i + 3; j < len(st); j++ {
							if st[j].depth == 0 && st[j].kind == tokPunct && sql[st[j].start] == ')' {
								end = st[j].end
								break
							}
							if n := st[j].ident(sql); n != "" {
								alias.columns = append(alias.columns, n)
							} else if st[j].kind != tokPunct || sql[st[j].start] != ',' {
								alias = nil // not a list of names: not used
								break
							}
						}
					}
					spans = append(spans, span{t.start, end, cutRowAlias, alias})
					return
				}
			}
		}
	}
	from := 0
	for i := 0; i <= len(toks); i++ {
		if i == len(toks) || (toks[i].depth == 0 && toks[i].kind == tokPunct && sql[toks[i].start] == ';') {
			find(toks[from:i])
			from = i + 1
		}
	}
	if len(spans) == 0 {
		return sql, nil
	}
	var b strings.Builder
	var cuts []cut
	pos := 0
	for i, s := range spans {
		c := cut{kind: s.kind, marker: "/*slotproxy:cut:" + strconv.Itoa(i) + "*/", text: sql[s.start:s.end], alias: s.alias}
		cuts = append(cuts, c)
		b.WriteString(sql[pos:s.start])
		b.WriteString(c.marker)
		pos = s.end
	}
	b.WriteString(sql[pos:])
	return b.String(), cuts
}

// executeImmediate plans MariaDB's EXECUTE IMMEDIATE 'text' (a literal,
// without USING): the text is planned as the statement it is, and a
// rewritten plan sends its rewrite directly (what EXECUTE IMMEDIATE would
// run). ok is false for any other form.
func (r *Rewriter) executeImmediate(sql string, toks []token, sess Session, slot func(int) int) (plans []Plan, ok bool) {
	n := len(toks)
	if n > 0 && toks[n-1].kind == tokPunct && sql[toks[n-1].start] == ';' {
		n--
	}
	if !r.opts.Dialect.ExecuteImmediate() || n != 3 || !toks[0].is(sql, "EXECUTE") || !toks[1].is(sql, "IMMEDIATE") || toks[2].kind != tokString {
		return nil, false
	}
	inner, ok := unquote(toks[2].text(sql), !sess.NoBackslashEscapes)
	if !ok {
		return nil, false
	}
	plans, err := r.rewrite(inner, sess, slot)
	if err != nil || len(plans) != 1 {
		return nil, false
	}
	p := plans[0]
	p.Original = sql
	switch op := p.Op.(type) {
	case *Read:
		op.MetaKey = ""
	case *LockingRead:
		op.MetaKey = ""
	case *WriteOthers:
		if len(op.Reads) == 0 {
			op.SQL = sql
		}
	}
	return []Plan{p}, true
}

// unquote returns the value of a string literal (quotes included).
func unquote(lit string, backslash bool) (string, bool) {
	if len(lit) < 2 || (lit[0] != '\'' && lit[0] != '"') || lit[len(lit)-1] != lit[0] {
		return "", false
	}
	q := lit[0]
	body := lit[1 : len(lit)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == q && i+1 < len(body) && body[i+1] == q:
			b.WriteByte(q)
			i++
		case c == '\\' && backslash && i+1 < len(body):
			i++
			switch e := body[i]; e {
			case '0':
				b.WriteByte(0)
			case 'b':
				b.WriteByte('\b')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'Z':
				b.WriteByte(26)
			case '%', '_':
				b.WriteByte('\\')
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// quoteString returns s as a string literal for a session (backslash:
// backslashes are escapes).
func quoteString(s string, backslash bool) string {
	if backslash {
		s = strings.ReplaceAll(s, `\`, `\\`)
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// multiStatement reports whether the tokens hold more than one statement.
func multiStatement(sql string, toks []token) bool {
	for i, t := range toks {
		if t.depth == 0 && t.kind == tokPunct && sql[t.start] == ';' && i+1 < len(toks) {
			return true
		}
	}
	return false
}
