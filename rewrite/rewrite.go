package rewrite

import (
	"cmp"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/mysql"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions for the parser

	"github.com/slotproxy/slotproxy/internal/dialect"
)

// SlottedSQL selects those of keys (decimal integers) whose records have
// slot rows with counts (zero rows, which folds leave, change no total).
func (t *Table) SlottedSQL(keys []string) string {
	return fmt.Sprintf("SELECT DISTINCT `record_id` FROM %s WHERE `record_type` IN (%s) AND `record_id` IN (%s) AND `count` <> 0",
		t.QualifiedSlots(), t.recordTypes(), strings.Join(keys, ", "))
}

// FoldSQL returns the statements that fold the slots of the given keys
// (decimal integers) into their base rows and zero them. Run them in one
// transaction after the keys were locked.
//
// Slot rows are zeroed, never deleted: a transaction whose snapshot is
// older than the fold still sees their old counts, and when it later
// writes the record's row (which makes the row its own, current version,
// folded counts included) it must be able to make those slot rows its own
// too (refresh), which it cannot do to a row that is gone. Roll-up deletes
// zero rows once no transaction can still see them otherwise.
//
// refresh is for a fold inside a REPEATABLE READ or SERIALIZABLE
// transaction that may have read before (its snapshot may predate other
// folds): the fold then also makes every locked base row and every slot
// row of those records the transaction's own version (see refreshSQL), so
// its reads of them see the current total once, as the write that follows
// would directly.
func (t *Table) FoldSQL(keys []string, refresh bool) []string {
	in := strings.Join(keys, ", ")
	id := t.RecordID("`_t`")
	var set strings.Builder
	for i, c := range t.Counters {
		if i > 0 {
			set.WriteString(", ")
		}
		col := quoteIdent(c.Name)
		if t.Keyed() {
			col = "`_t`." + col
		}
		sp := spAlias(i)
		if c.Touch {
			fmt.Fprintf(&set, "%s = (SELECT %s FROM %s AS %s WHERE %s.`record_type` = %d AND %s.`record_id` = %s)",
				col, c.TouchLatest("`_t`."+quoteIdent(c.Name), "MAX("+sp+".`count`)"), t.QualifiedSlots(), sp, sp, c.RecordType, sp, id)
			continue
		}
		fmt.Fprintf(&set, "%s = %s + %s", col, col, c.ValueSQL(fmt.Sprintf("COALESCE((SELECT SUM(%s.`count`) FROM %s AS %s WHERE %s.`record_type` = %d AND %s.`record_id` = %s), 0)",
			sp, t.QualifiedSlots(), sp, sp, c.RecordType, sp, id)))
	}
	// Only rows with non-zero slot rows are written, and only those slot
	// rows zeroed: an UPDATE of the other rows would change nothing but
	// still fire the table's UPDATE triggers. (An alias of its own: LOCK
	// TABLES locks each alias once per statement.)
	sp := spAlias(len(t.Counters))
	exists := fmt.Sprintf("EXISTS (SELECT 1 FROM %s AS %s WHERE %s.`record_type` IN (%s) AND %s.`record_id` = %s AND %s.`count` <> 0)",
		t.QualifiedSlots(), sp, sp, t.recordTypes(), sp, id, sp)
	update := fmt.Sprintf("UPDATE %s AS `_t` SET %s WHERE `_t`.%s IN (%s) AND %s", t.Qualified(), set.String(), quoteIdent(t.Key), in, exists)
	if t.Keyed() {
		// By key (see keysJoin): a WHERE clause of every key's columns
		// could scan the table, locking rows the client never named.
		update = fmt.Sprintf("UPDATE %s SET %s WHERE %s", t.keysJoin(keys, "`_t`"), set.String(), exists)
	}
	stmts := []string{update}
	if refresh {
		stmts = append(stmts, t.refreshSQL(keys)...)
	}
	return append(stmts,
		fmt.Sprintf("UPDATE %s SET `count` = 0 WHERE `record_type` IN (%s) AND `record_id` IN (%s) AND `count` <> 0", t.QualifiedSlots(), t.recordTypes(), in))
}

// refreshSQL makes the rows of the keys in (a list of decimal integers)
// and their slot rows the running transaction's own versions without
// changing them, so that its consistent reads see both as they are now:
//
//   - the base rows are written twice with each counter c mapped to
//     lo + hi − c, where [lo, hi] is the column's range: a mapping that
//     is its own inverse, stays in range, and changes every value but the
//     middle of a range with an even lo + hi (integer types have an odd
//     one); NULL stays NULL. Counters whose range a CHECK constraint or a
//     side effect keeps on the base row (BaseOnly), whose range is not
//     known, touch columns and counters in a UNIQUE key are left alone;
//   - slot rows that are zero now are set to 1, then (by FoldSQL's last
//     statement) all of them to 0: a zero slot row the transaction still
//     sees with its count from before another fold becomes its own zero.
//
// Without a counter to map, there is nothing to refresh: a base row the
// transaction does not write stays its snapshot's, and so must its slots.
func (t *Table) refreshSQL(keys []string) []string {
	flips := t.refreshFlips(keys)
	if flips == nil {
		return nil
	}
	return append(flips,
		fmt.Sprintf("UPDATE %s SET `count` = 1 WHERE `record_type` IN (%s) AND `record_id` IN (%s) AND `count` = 0", t.QualifiedSlots(), t.recordTypes(), strings.Join(keys, ", ")))
}

// refreshFlips returns refreshSQL's two writes of the base rows of keys
// (decimal integers), by key (see keysTable), or nil when no counter can
// be mapped.
func (t *Table) refreshFlips(keys []string) []string {
	var set []string
	for _, c := range t.Counters {
		if c.Touch || len(c.BaseOnly) > 0 || t.inUniqueKey(c.Name) || c.Min == "" || c.Max == "" {
			continue // (a catalog without ranges: the column's is not known)
		}
		a, _ := new(big.Int).SetString(c.Min, 10)
		b, _ := new(big.Int).SetString(c.Max, 10)
		if a == nil || b == nil {
			continue
		}
		col := "`_t`." + quoteIdent(c.Name)
		// (Of a DECIMAL counter, Min and Max are in its units.)
		set = append(set, fmt.Sprintf("%s = %s - %s", col, c.ValueSQL(new(big.Int).Add(a, b).String()), col))
	}
	if len(set) == 0 {
		return nil
	}
	flip := fmt.Sprintf("UPDATE %s SET %s", t.keysJoin(keys, "`_t`"), strings.Join(set, ", "))
	return []string{flip, flip}
}

// inUniqueKey reports whether col is part of one of the table's UNIQUE
// keys other than the primary key (or the table has one it cannot name).
func (t *Table) inUniqueKey(col string) bool {
	for _, uk := range t.UniqueKeys {
		if len(uk) == 0 {
			return true
		}
		for _, c := range uk {
			if strings.EqualFold(c, col) {
				return true
			}
		}
	}
	return false
}

// LockSQL locks the base rows of the given keys (decimal integers), for a
// fold after it, and selects the keys that have one. It reads them by key
// (see keysTable): a server that scanned a small table instead would lock
// every row, where the client's own statement locks the rows of its keys
// only.
func (t *Table) LockSQL(keys []string) string {
	return fmt.Sprintf("SELECT %s FROM %s FOR UPDATE", t.RecordID(t.Qualified()), t.keysJoin(keys, ""))
}

// ShareLockSQL is LockSQL locking in share mode.
func (t *Table) ShareLockSQL(keys []string) string {
	return fmt.Sprintf("SELECT %s FROM %s LOCK IN SHARE MODE", t.RecordID(t.Qualified()), t.keysJoin(keys, ""))
}

// WideLockSQL locks the slot rows of every record of the table, and the
// gaps between them (no slot row of it can be added or changed until the
// transaction ends), and selects their keys, for a fold after it.
func (t *Table) WideLockSQL() string { return wideGuard(t, "FOR UPDATE").KeysSQL }

// ClearSQL deletes every slot of the table (after TRUNCATE).
func (t *Table) ClearSQL() string {
	return fmt.Sprintf("DELETE FROM %s WHERE `record_type` IN (%s)", t.QualifiedSlots(), t.recordTypes())
}

// Session is the client session state a rewrite depends on.
type Session struct {
	// DB is the current default database.
	DB string
	// ANSIQuotes and NoBackslashEscapes mirror the session's sql_mode.
	ANSIQuotes, NoBackslashEscapes bool
	// Charset is the session's character_set_client (lower case); empty
	// when unknown, and then statements that are not UTF-8 and contain a
	// backslash or backquote are not rewritten.
	Charset string
	// TempTables are the session's temporary tables named like a ruled
	// table ("schema.table", lower case; see TempTables): they shadow it.
	TempTables []string
	// SlotFor, when set, picks the slot of an increment of t instead of
	// Options.Slot (the executor's: one that no other open transaction of
	// the process holds, when there is one).
	SlotFor func(t *Table) int
	// rowAlias is the row alias cut out of the statement planned (see
	// unparsed), which its ON DUPLICATE KEY UPDATE may name.
	rowAlias *rowAlias
	// slotColumn plans every slotted upsert with its slot written once,
	// in a derived table (see slottedIncrement), so that SlotParam can
	// make it a parameter.
	slotColumn bool
}

// shadowed reports whether the session's temporary table hides the ruled
// table schema.name.
func (s Session) shadowed(schema, name string) bool {
	return len(s.TempTables) > 0 && slices.Contains(s.TempTables, strings.ToLower(schema+"."+name))
}

// Options tune generated SQL for the backend.
type Options struct {
	// Dialect is the backend's: it decides whether INSERT, REPLACE and
	// DELETE … RETURNING (MariaDB) are planned. The slotted upsert has one
	// form for every server (INSERT … SELECT, whose ON DUPLICATE KEY UPDATE
	// names the SELECT's columns: no VALUES(), which MySQL 8.0.20+
	// deprecates with warning 1287).
	Dialect dialect.Dialect
	// Slot picks a slot in [0, n); nil means uniformly at random.
	Slot func(n int) int
}

// Rewriter rewrites statements against one Catalog. Safe for concurrent use.
type Rewriter struct {
	cat       *Catalog
	opts      Options
	parsers   sync.Pool
	templates templateCache
}

// New returns a Rewriter for cat.
func New(cat *Catalog, opts Options) *Rewriter {
	if opts.Slot == nil {
		opts.Slot = rand.IntN
	}
	return &Rewriter{cat: cat, opts: opts, parsers: sync.Pool{New: func() any {
		p := parser.New()
		p.EnableWindowFunc(true)
		return p
	}}}
}

// slotFor is the slot picker for sess's increments.
func (r *Rewriter) slotFor(sess Session) func(*Table) int {
	if sess.SlotFor != nil {
		return sess.SlotFor
	}
	return func(t *Table) int { return r.opts.Slot(t.Slots) }
}

// Catalog returns the rewriter's catalog.
func (r *Rewriter) Catalog() *Catalog { return r.cat }

// Rewrite plans every statement in sql (one, or several for a
// multi-statement query). It returns nil, nil without parsing when sql names
// no ruled table, and nil and the parser's error when sql does not parse
// (an *UnparsedError when it names a ruled table: it must not pass through);
// both mean "send it unchanged".
func (r *Rewriter) Rewrite(sql string, sess Session) ([]Plan, error) {
	if !r.cat.Mentions(sql) {
		return nil, nil
	}
	sql, tc, err := toUTF8(sql, sess.Charset)
	if err != nil {
		return nil, err
	}
	plans, err := r.rewriteUTF8(sql, sess)
	if err != nil {
		return nil, err
	}
	return tc.plans(plans)
}

// rewriteUTF8 is Rewrite for a statement the rewriter can lex byte by byte.
func (r *Rewriter) rewriteUTF8(sql string, sess Session) ([]Plan, error) {
	if hasMariaDBExecutableComment(sql) {
		// The parser reads /*M! … */ as a comment; the server runs it.
		err := fmt.Errorf("rewrite: MariaDB executable comment (/*M! … */) is not understood")
		if toks, ok := lex(sql, sess); ok {
			if t := r.cat.ruledNamed(sql, toks, sess); t != nil {
				multi := multiStatement(sql, toks)
				return nil, &UnparsedError{Table: t, Multi: multi, Err: err, Fallback: r.foldFirst(sql, toks, sess, multi)}
			}
		}
		return nil, err
	}
	var keyBuf [512]byte
	var spanBuf [16][2]int
	key, spans, ok := templateKey(sql, sess, keyBuf[:0], spanBuf[:0])
	if ok {
		if t := r.templates.get(key); t != nil {
			if t.plans == nil {
				return r.rewrite(sql, sess, nil)
			}
			return t.instantiate(sql, spans, r.slotFor(sess)), nil
		}
		var b strings.Builder
		pos := 0
		for i, s := range spans {
			b.WriteString(sql[pos:s[0]])
			b.WriteString(sentinel(i))
			pos = s[1]
		}
		b.WriteString(sql[pos:])
		slot, _ := strconv.Atoi(slotSentinel)
		if plans, err := r.rewrite(b.String(), sess, func(int) int { return slot }); err == nil {
			if slices.ContainsFunc(plans, func(p Plan) bool { return p.valueDependent }) {
				// Planned from its own values every time (a template
				// with no plans says so).
				r.templates.put(key, &template{})
				return r.rewrite(sql, sess, nil)
			}
			t := &template{plans: plans, lits: len(spans)}
			r.templates.put(key, t)
			return t.instantiate(sql, spans, r.slotFor(sess)), nil
		}
	}
	return r.rewrite(sql, sess, nil)
}

// rewrite parses and plans sql; slot picks slots for increments.
//
// slot picks an increment's slot from the table's number of slots (a
// template's sentinel); nil picks the session's slot of the table
// (Session.SlotFor, else Options.Slot), as a template's instantiation does.
func (r *Rewriter) rewrite(sql string, sess Session, slot func(int) int) ([]Plan, error) {
	// The AST shares memory with the parser: keep the parser until the
	// plans are built.
	p := r.parsers.Get().(*parser.Parser)
	defer r.parsers.Put(p)
	p.SetSQLMode(sessionMode(sess))
	stmts, _, err := p.Parse(sql, "", "")
	if err != nil {
		if plans, ok := r.withReturning(p, sql, err, sess, slot); ok {
			return plans, nil
		}
		return r.unparsed(sql, sess, slot, err)
	}
	plans := make([]Plan, 0, len(stmts))
	pos := 0
	for _, st := range stmts {
		// Statement texts tile the input; expression offsets are absolute.
		text := st.Text()
		start := strings.Index(sql[pos:], text)
		var end int
		switch {
		case start >= 0:
			start += pos
			end = start + len(text)
		case len(stmts) == 1:
			// The parser converted the text (a statement that is not
			// UTF-8): the statement is the whole input.
			start, end, text = 0, len(sql), sql
		case SessionCut(append(plans, Plan{})) >= 0:
			// A statement before this one changes the session (SET NAMES
			// gbk): the rest is read in the new state, where it may well
			// be found. It is one plan, planned again once the statements
			// before it have run (see SessionCut).
			rest := sql[pos:]
			return append(plans, Plan{Op: &AsWritten{}, Original: rest,
				Reason: "read once the statements before it have changed the session"}), nil
		default:
			return nil, fmt.Errorf("rewrite: cannot locate statement text")
		}
		pos = end
		plan := r.plan(st, sql, start, end, sess, slot)
		if plan.Op == nil {
			plan.Op = &AsWritten{} // (a statement that names no ruled table)
		}
		plan.Original = text
		switch up := plan.Op.(type) {
		case *UpsertIncrement:
			up.Fallback.Original = text
		case *UpsertRows:
			up.Fallback.Original = text
		}
		if sel, ok := st.(*ast.SelectStmt); ok && sel.Fields != nil && len(sel.Fields.Fields) > 0 {
			last := sel.Fields.Fields[len(sel.Fields.Fields)-1]
			if fe := last.Offset + len(last.Text()); fe > start && fe <= end && sql[last.Offset:fe] == last.Text() {
				key := sql[start:fe] + "\x00" + maskInts(maskSentinels(sql[fe:end]), sess)
				switch op := plan.Op.(type) {
				case *Read:
					op.MetaKey = key
				case *LockingRead:
					op.MetaKey = key
				}
			}
		}
		if o, ok := plan.Op.(*WriteOthers); ok && o.SQL == "" {
			o.SQL = text
		}
		plan.ChangesSession = changesSession(st)
		plans = append(plans, plan)
	}
	return plans, nil
}

// withReturning plans a statement with a RETURNING clause (MariaDB 10.5+:
// INSERT, REPLACE and DELETE … RETURNING), which the parser does not know:
// parseErr is its complaint about sql. When the dialect has RETURNING and
// the clause is found (see returningClause), the statement is planned
// without it and the clause is put back on the plan's statement. A guarded
// write folds the slots first, so the clause returns exact counters. ok is
// false when this does not apply: the statement passes through as one that
// does not parse.
func (r *Rewriter) withReturning(p *parser.Parser, sql string, parseErr error, sess Session, slot func(int) int) (plans []Plan, ok bool) {
	if !r.opts.Dialect.Returning() {
		return nil, false
	}
	cut, ok := returningClause(p, sql, parseErr)
	if !ok {
		return nil, false
	}
	prefix := sql[:cut]
	plans, err := r.rewrite(prefix, sess, slot)
	if err != nil || len(plans) != 1 {
		return nil, false
	}
	pl := &plans[0]
	end := strings.LastIndex(prefix, pl.Original)
	if end < 0 {
		return nil, false
	}
	end += len(pl.Original)
	rest := sql[end:] // the blanks before RETURNING, the clause, what follows
	add := func(s *string) {
		if *s != "" {
			*s += rest
		}
	}
	switch op := pl.Op.(type) {
	case *AsWritten, *Refused:
	case *Read:
		add(&op.SQL)
	case *WriteOthers:
		add(&op.SQL)
	case *Guarded:
		add(&op.SQL)
		add(&op.Unguarded)
		add(&op.Restrict)
	default:
		return nil, false
	}
	pl.Original += rest
	return plans, true
}

// returningClause returns where a RETURNING clause starts in sql, given
// the parser's complaint parseErr about sql: the parser stopped at a
// RETURNING keyword (so not inside a string or comment), and what follows
// it is one select list and nothing else (no statement after it).
func returningClause(p *parser.Parser, sql string, parseErr error) (cut int, ok bool) {
	msg := parseErr.Error()
	i := strings.Index(msg, ` near "`)
	if i < 0 || !strings.HasSuffix(msg, `" `) {
		return 0, false
	}
	near := msg[i+len(` near "`) : len(msg)-len(`" `)]
	const kw = "RETURNING"
	if !strings.HasSuffix(sql, near) || len(near) <= len(kw) || !strings.EqualFold(near[:len(kw)], kw) || isIdentByte(near[len(kw)]) {
		return 0, false
	}
	if sel, _, err := p.Parse("SELECT "+near[len(kw):], "", ""); err != nil || len(sel) != 1 {
		return 0, false
	}
	return len(sql) - len(near), true
}

// changesSession reports whether st may change the session state a rewrite
// depends on (Session).
func changesSession(st ast.StmtNode) bool {
	switch s := st.(type) {
	case *ast.UseStmt, *ast.ExecuteStmt:
		return true
	case *ast.SetStmt:
		for _, v := range s.Variables {
			switch strings.ToLower(v.Name) {
			case strings.ToLower(ast.SetNames), strings.ToLower(ast.SetCharset), "sql_mode", "character_set_client":
				return true
			}
		}
	}
	return false
}

func hasMariaDBExecutableComment(sql string) bool {
	for i := strings.Index(sql, "/*"); i >= 0 && i+3 < len(sql); {
		if (sql[i+2] == 'M' || sql[i+2] == 'm') && sql[i+3] == '!' {
			return true
		}
		j := strings.Index(sql[i+2:], "/*")
		if j < 0 {
			return false
		}
		i += 2 + j
	}
	return false
}

// sessionMode is the parser's sql_mode for a session.
func sessionMode(sess Session) mysql.SQLMode {
	var mode mysql.SQLMode
	if sess.ANSIQuotes {
		mode |= mysql.ModeANSIQuotes
	}
	if sess.NoBackslashEscapes {
		mode |= mysql.ModeNoBackslashEscapes
	}
	return mode
}

// plan decides one statement. sql[start:end] is its text.
func (r *Rewriter) plan(st ast.StmtNode, sql string, start, end int, sess Session, slot func(int) int) Plan {
	w := &reads{r: r, sql: sql, sess: sess, tables: map[*Table]bool{}, params: numberParams(st), slot: slot}
	if up, ok := st.(*ast.UpdateStmt); ok {
		if vp, ok := r.updateThroughView(up, sql, start, end, sess, slot); ok {
			return vp
		}
	}
	if t, view := r.writesView(st, sess); t != nil {
		return Plan{Op: &Refused{}, Table: t, Reason: "it writes through view " + view + ", which reads ruled table " + t.Qualified() +
			": the proxy plans writes of the table, not of views over it (write " + t.Qualified() + " itself)"}
	}
	var p Plan
	switch s := st.(type) {
	case *ast.UpdateStmt:
		p = r.update(s, w, start, end)
	case *ast.DeleteStmt:
		p = r.delete(s, w, start, end)
	case *ast.InsertStmt:
		p = r.insert(s, w, start, end)
	case *ast.CreateTableStmt:
		if s.TemporaryKeyword != ast.TemporaryNone {
			schema := schemaOr(s.Table.Schema.O, sess.DB)
			if t := r.cat.lookup(schema, s.Table.Name.O); t != nil {
				p = Plan{Op: &AsWritten{}, Then: []Effect{&TempTables{Names: []string{strings.ToLower(schema + "." + s.Table.Name.O)}, Create: true}},
					Reason: "a temporary table named like " + t.Qualified() + ": it hides the ruled table until dropped"}
				if s.Select != nil {
					w.visit(s.Select)
					if rp := w.readPlan(start, end); rp.Kind() != KindOriginal {
						rp.Then = p.Then
						p = rp
					}
				}
				return p
			}
		}
		w.visit(st)
		p = w.readPlan(start, end)
	case *ast.TruncateTableStmt:
		if sess.shadowed(schemaOr(s.Table.Schema.O, sess.DB), s.Table.Name.O) {
			return Plan{Op: &AsWritten{}, Reason: "TRUNCATE of a temporary table"}
		}
		if t := r.cat.lookup(schemaOr(s.Table.Schema.O, sess.DB), s.Table.Name.O); t != nil {
			p = Plan{Op: &AsWritten{}, Table: t, Then: []Effect{&ClearSlots{Table: t, SQL: t.ClearSQL()}}, Reason: "TRUNCATE: slots cleared after it"}
		}
		return r.shadow(p)
	case *ast.AlterTableStmt:
		p := r.ddl(sess, s.Table)
		if p.Table != nil && !p.Table.Shadow {
			// It may add a column computed from a counter, which the
			// server computes from the row: the table's slots are folded
			// into its rows first, so that it computes from the totals.
			p.Op = &Guarded{SQL: sql[start:end], Guards: []*Guard{wideGuard(p.Table, "FOR UPDATE")}}
			p.Reason = "ALTER TABLE of a ruled table: every slotted record is folded first, and the catalog is reloaded after it"
		}
		return r.shadow(p)
	case *ast.CreateIndexStmt:
		return r.ddl(sess, s.Table)
	case *ast.DropIndexStmt:
		return r.ddl(sess, s.Table)
	case *ast.DropTableStmt:
		// DROP TABLE drops a temporary table of the name first, if the
		// session has one.
		var temp []string
		for _, tn := range s.Tables {
			if schema := schemaOr(tn.Schema.O, sess.DB); sess.shadowed(schema, tn.Name.O) {
				temp = append(temp, strings.ToLower(schema+"."+tn.Name.O))
			}
		}
		if s.TemporaryKeyword != ast.TemporaryNone || temp != nil {
			p := Plan{Op: &AsWritten{}, Reason: "DROP of a temporary table"}
			if temp != nil {
				p.Then = []Effect{&TempTables{Names: temp}}
			}
			return p
		}
		if s.IsView {
			for _, tn := range s.Tables {
				if t := r.cat.view(schemaOr(tn.Schema.O, sess.DB), tn.Name.O); t != nil {
					return Plan{Op: &AsWritten{}, Table: t, Then: []Effect{&Reload{}}, Reason: "DROP VIEW of a view of a ruled table: the catalog is reloaded after it"}
				}
			}
			return Plan{Op: &AsWritten{}}
		}
		// Dropping a ruled table drops its counters: its slot rows go
		// with it, or a table re-created under the name (a dump being
		// restored) would inherit them.
		var dropped []*Table
		for _, tn := range s.Tables {
			if t := r.cat.lookup(schemaOr(tn.Schema.O, sess.DB), tn.Name.O); t != nil {
				dropped = append(dropped, t)
			}
		}
		switch len(dropped) {
		case 0:
			return r.ddl(sess, s.Tables...)
		case 1:
			t := dropped[0]
			return Plan{Op: &AsWritten{}, Table: t, Then: []Effect{&ClearSlots{Table: t, SQL: t.ClearSQL()}, &Reload{}},
				Reason: "DROP TABLE of a ruled table: its slots cleared after it"}
		default:
			return Plan{Op: &Refused{}, Table: dropped[0], Reason: "DROP TABLE of several ruled tables in one statement (drop them one at a time, so that each one's slots are cleared with it)"}
		}
	case *ast.RenameTableStmt:
		var names []*ast.TableName
		for _, tt := range s.TableToTables {
			names = append(names, tt.OldTable, tt.NewTable)
		}
		return r.ddl(sess, names...)
	case *ast.SelectStmt:
		if ip, ok := r.inlinedRead(st, sql, start, end, sess, slot); ok {
			return r.shadow(ip)
		}
		if s.Kind == ast.SelectStmtKindTable {
			if !r.opts.Dialect.TableStatement() {
				return Plan{Op: &AsWritten{}, Reason: "no TABLE statement on this server: it rejects it"}
			}
			if tp, ok := r.tableStmt(sql[start:end], sess, slot); ok {
				return tp
			}
		}
		w.rolledOK = s.LockInfo == nil || s.LockInfo.LockType == ast.SelectLockNone
		w.visit(st)
		p = w.readPlan(start, end)
		if _, ok := p.Op.(*Read); ok && s.LockInfo != nil && s.LockInfo.LockType != ast.SelectLockNone {
			w.lockedRead(&p, s)
		}
		w.notedReads(&p)
	case *ast.SetOprStmt:
		if ip, ok := r.inlinedRead(st, sql, start, end, sess, slot); ok {
			return r.shadow(ip)
		}
		w.rolledOK = !lockingSetOpr(s)
		w.visit(st)
		p = w.readPlan(start, end)
		w.notedReads(&p)
	case *ast.LoadDataStmt:
		t := r.cat.lookup(schemaOr(s.Table.Schema.O, sess.DB), s.Table.Name.O)
		if t == nil || sess.shadowed(t.Schema, t.Name) || s.OnDuplicate != ast.OnDuplicateKeyHandlingReplace {
			// New rows only: no slot row is theirs.
			return Plan{Op: &AsWritten{}}
		}
		// The rows it replaces are known only once it runs: every slotted
		// record is folded first. (LOCAL: the client sends its file in the
		// middle of the statement's response, inside the transaction that
		// folded the table.)
		p := w.wideGuarded([]*Table{t}, start, end)
		if g, ok := p.Op.(*Guarded); ok && s.FileLocRef == ast.FileLocClient {
			g.Local = true
		}
		return r.shadow(p)
	case *ast.CreateViewStmt:
		// The body is stored as written: reads through the view inline it
		// (inlinedRead), so its counters are read as totals then.
		w.visit(s.Select)
		switch rp := w.readPlan(start, end); {
		case rp.Kind() == KindRefused:
			return rp
		case rp.Kind() == KindRead && len(s.Cols) > 0 && !r.opts.Dialect.IsMariaDB():
			return Plan{Op: &Refused{}, Table: rp.Op.(*Read).Reads[0], Reason: "a view over counters with a column list of its own: " +
				"the server stores its definition without those names, so reads through it could not be planned with totals " +
				"(name the columns with AS in its SELECT instead)"}
		}
		var names tableNames
		s.Select.Accept(&names)
		for _, tn := range names.found {
			schema := schemaOr(tn.Schema.O, sess.DB)
			t := r.cat.lookup(schema, tn.Name.O)
			if t == nil {
				t = r.cat.view(schema, tn.Name.O)
			}
			if t != nil {
				// The catalog learns the view: reads through it are
				// planned with its definition, writes refused.
				return Plan{Op: &AsWritten{}, Table: t, Then: []Effect{&Reload{}}, Reason: "a view of a ruled table, created as written: the catalog is reloaded after it"}
			}
		}
		return Plan{Op: &AsWritten{}}
	case *ast.PrepareStmt:
		return r.prepareStmt(s, sess, slot)
	case *ast.LockTablesStmt:
		text := sql[start:end]
		if toks, ok := lex(text, sess); ok {
			if lp, ok := r.lockTables(text, toks, sess); ok {
				return lp
			}
		}
		return Plan{Op: &AsWritten{}}
	case *ast.ExplainStmt, *ast.ShowStmt:
		return Plan{Op: &AsWritten{}, Reason: "EXPLAIN/SHOW pass through"}
	default:
		// Other statements (CREATE TABLE … SELECT, SET @x = (SELECT …), DO …)
		// still get their counter reads rewritten.
		w.visit(st)
		p = w.readPlan(start, end)
	}
	return r.shadow(p)
}

// lockingSetOpr reports whether a UNION/INTERSECT/EXCEPT locks rows in any
// of its SELECTs.
func lockingSetOpr(s *ast.SetOprStmt) bool {
	locking := false
	var visit func(n ast.Node)
	visit = func(n ast.Node) {
		switch x := n.(type) {
		case *ast.SelectStmt:
			if x.LockInfo != nil && x.LockInfo.LockType != ast.SelectLockNone {
				locking = true
			}
		case *ast.SetOprStmt:
			if x.SelectList != nil {
				for _, sel := range x.SelectList.Selects {
					visit(sel)
				}
			}
		}
	}
	visit(s)
	return locking
}

// tableStmt plans TABLE t [ORDER BY …] [LIMIT …] (text) as the SELECT *
// FROM t it is, so that a ruled table's counters are read with their
// slots. ok is false when that changes nothing.
func (r *Rewriter) tableStmt(text string, sess Session, slot func(int) int) (Plan, bool) {
	toks, ok := lex(text, sess)
	if !ok || len(toks) == 0 || !toks[0].is(text, "TABLE") {
		return Plan{}, false
	}
	plans, err := r.rewrite(text[:toks[0].start]+"SELECT * FROM"+text[toks[0].end:], sess, slot)
	if err != nil || len(plans) != 1 || plans[0].Kind() == KindOriginal {
		return Plan{}, false
	}
	p := plans[0]
	switch op := p.Op.(type) {
	case *Read:
		op.MetaKey = ""
	case *LockingRead:
		op.MetaKey = ""
	}
	return p, true
}

// prepareStmt plans PREPARE name FROM 'text': a statement that reads
// counters is prepared rewritten; one that writes them is refused (its
// executions would run unplanned); PREPARE … FROM @var passes through.
func (r *Rewriter) prepareStmt(s *ast.PrepareStmt, sess Session, slot func(int) int) Plan {
	if s.SQLVar != nil {
		return Plan{Op: &AsWritten{}}
	}
	plans, err := r.rewrite(s.SQLText, sess, slot)
	var ue *UnparsedError
	name := strings.ToLower(s.Name)
	other := Plan{Op: &AsWritten{}, Then: []Effect{&SQLPrepare{Prepares{Name: name}}}}
	switch {
	case errors.As(err, &ue):
		return Plan{Op: &Refused{}, Table: ue.Table, Reason: "PREPARE … FROM a statement slotproxy cannot parse: " + ue.Reason()}
	case err != nil || len(plans) != 1 || !Changed(plans):
		return other
	}
	ip := plans[0]
	if ip.Shadow {
		return other
	}
	var write *Plan
	switch op := ip.Op.(type) {
	case *Increment:
		write = &Plan{Op: &Guarded{SQL: ip.Original, Guards: []*Guard{op.Guard}}, Table: ip.Table, Original: ip.Original}
	case *UpsertIncrement:
		if g, ok := op.Fallback.Op.(*Guarded); ok && len(g.Guards) == 1 {
			gg := *g
			gg.Restrict = ""
			write = &Plan{Op: &gg, Table: ip.Table, Original: ip.Original}
		}
	case *UpsertRows:
		if g, ok := op.Fallback.Op.(*Guarded); ok && len(g.Guards) == 1 {
			gg := *g
			gg.Restrict = ""
			write = &Plan{Op: &gg, Table: ip.Table, Original: ip.Original}
		}
	case *Guarded:
		if len(op.Guards) == 1 {
			g := *op
			g.Restrict = ""
			write = &Plan{Op: &g, Table: ip.Table, Original: ip.Original}
		}
	case *Read:
		return Plan{Op: &Read{Reads: op.Reads, SQL: "PREPARE " + quoteIdent(s.Name) + " FROM " + quoteString(op.SQL, !sess.NoBackslashEscapes)},
			Table: ip.Table}
	}
	if write != nil {
		// Its EXECUTEs fold the records it may write first, then run as
		// written: exact, as directly (an increment only not slotted).
		return Plan{Op: &AsWritten{}, Table: ip.Table, Then: []Effect{&SQLPrepare{Prepares{Name: name, Write: write}}},
			Reason: "PREPARE … FROM a write of counters: each EXECUTE folds the records it may write first, then runs it on the base rows (use the driver's prepared statements to have increments slotted)"}
	}
	t := ip.Table
	if r, ok := ip.Op.(*LockingRead); t == nil && ok && len(r.Reads) > 0 {
		t = r.Reads[0]
	}
	reason := fmt.Sprintf("PREPARE … FROM a statement planned as %s: its EXECUTEs would run it unplanned (use the driver's prepared statements, or send it as text)", ip.Kind())
	switch ip.Op.(type) {
	case *LockingRead:
		reason = "PREPARE … FROM a locking read of counters: its EXECUTEs would not fold the records they lock (use the driver's prepared statements, or send it as text)"
	case *Refused:
		reason = "PREPARE … FROM a statement that is refused: " + ip.Reason
	}
	return Plan{Op: &Refused{}, Table: t, Reason: reason}
}

// lockedRead makes the read plan p of the locking read s guarded: the
// records of each ruled table it reads counters of are locked (exclusive,
// whatever lock the read asks for: an increment takes a shared one) and
// folded before it runs.
func (w *reads) lockedRead(p *Plan, s *ast.SelectStmt) {
	lock := "FOR UPDATE"
	switch s.LockInfo.LockType {
	case ast.SelectLockForUpdateNoWait, ast.SelectLockForShareNoWait:
		lock = "FOR UPDATE NOWAIT"
	case ast.SelectLockForUpdateSkipLocked, ast.SelectLockForShareSkipLocked:
		lock = "FOR UPDATE SKIP LOCKED"
	}
	read := p.Op.(*Read)
	lr := &LockingRead{SQL: read.SQL, Reads: read.Reads, MetaKey: read.MetaKey}
	p.Op = lr
	sc := w.scopeOf(s.From)
	if len(sc.refs) == 1 && sc.refs[0].table != nil {
		w.push(sc)
		lr.Guards = []*Guard{w.guardFor(sc.refs[0].table, &sc.refs[0], s.Where, lock)}
		w.pop()
		return
	}
	for _, t := range lr.Reads {
		lr.Guards = append(lr.Guards, wideGuard(t, lock))
	}
}

// ddl is the plan for DDL: sent unchanged, and the catalog reloaded after it
// when it names a ruled table.
// writesView returns the ruled table and the name of a view that reads
// it, when st writes through that view (UPDATE, DELETE, INSERT, REPLACE or
// LOAD DATA naming it as a table written). nil when it does not.
func (r *Rewriter) writesView(st ast.StmtNode, sess Session) (*Table, string) {
	if len(r.cat.views) == 0 {
		return nil, ""
	}
	var targets []*ast.TableName
	collect := func(n ast.Node) {
		if n == nil {
			return
		}
		var names tableNames
		n.Accept(&names)
		targets = append(targets, names.found...)
	}
	switch s := st.(type) {
	case *ast.UpdateStmt:
		collect(s.TableRefs) // a multi-table UPDATE may assign any of them
	case *ast.DeleteStmt:
		if s.IsMultiTable && s.Tables != nil {
			targets = append(targets, s.Tables.Tables...)
		} else {
			collect(s.TableRefs)
		}
	case *ast.InsertStmt:
		collect(s.Table)
	case *ast.LoadDataStmt:
		targets = append(targets, s.Table)
	}
	for _, tn := range targets {
		schema := schemaOr(tn.Schema.O, sess.DB)
		if sess.shadowed(schema, tn.Name.O) {
			continue
		}
		if t := r.cat.view(schema, tn.Name.O); t != nil && !t.Shadow {
			return t, schema + "." + tn.Name.O
		}
	}
	return nil, ""
}

func (r *Rewriter) ddl(sess Session, tables ...*ast.TableName) Plan {
	for _, tn := range tables {
		if t := r.cat.lookup(schemaOr(tn.Schema.O, sess.DB), tn.Name.O); t != nil {
			return Plan{Op: &AsWritten{}, Table: t, Then: []Effect{&Reload{}}, Reason: "DDL on a ruled table: columns reloaded after it"}
		}
	}
	return Plan{Op: &AsWritten{}}
}

// shadow turns a plan for a shadow-mode table into a pass-through that still
// says what would have been done.
func (r *Rewriter) shadow(p Plan) Plan {
	if p.Table != nil && p.Table.Shadow && p.Kind() != KindOriginal {
		p.Shadow = true
	}
	return p
}

// readPlan is the plan for a statement whose only change is its reads.
func (w *reads) readPlan(start, end int) Plan {
	if w.failed != "" {
		return w.refused(nil, w.failed)
	}
	if len(w.edits) == 0 && len(w.rolled) == 0 {
		return Plan{Op: &AsWritten{}}
	}
	op := &Read{SQL: apply(w.sql, start, end, w.edits), RolledUp: w.rolled}
	p := Plan{Op: op}
	if len(w.edits) == 0 {
		// Only rolled-up counters: the statement as written, unless the
		// transaction read its own increments (see Read.RolledUp).
		p.Reason = "counters read rolled up (reads: rolled_up)"
	}
	for t := range w.tables {
		op.Reads = append(op.Reads, t)
	}
	sort.Slice(op.Reads, func(i, j int) bool { return op.Reads[i].Qualified() < op.Reads[j].Qualified() })
	// A read passes through in shadow mode only when every ruled table it
	// names is in shadow mode: an active table's counters need their slots
	// (and totals of a shadow table are right either way).
	var shadow *Table
	for t := range w.tables {
		if !t.Shadow {
			return p
		}
		shadow = t
	}
	p.Table = shadow
	return p
}

// notedReads gives p, the plan of a SELECT, when it sends the statement as
// written, the ruled tables the statement names (AsWritten.Reads): only
// reads, not the writes that plan their reads with readPlan (an INSERT
// names its table, which it does not read).
func (w *reads) notedReads(p *Plan) {
	aw, ok := p.Op.(*AsWritten)
	if !ok || len(p.Then) > 0 {
		return
	}
	for t := range w.tables {
		if !t.Shadow {
			aw.Reads = append(aw.Reads, t)
		}
	}
	sort.Slice(aw.Reads, func(i, j int) bool { return aw.Reads[i].Qualified() < aw.Reads[j].Qualified() })
}

// refused is the plan for a statement that cannot be planned exactly: t is
// the ruled table it concerns (nil: the first one it names).
func (w *reads) refused(t *Table, reason string) Plan {
	if t == nil {
		for u := range w.tables {
			if t == nil || u.Qualified() < t.Qualified() {
				t = u
			}
		}
	}
	return Plan{Op: &Refused{}, Table: t, Reason: reason}
}

func schemaOr(schema, db string) string {
	if schema != "" {
		return schema
	}
	return db
}

// explainRolledUp says which tables' counters a read reads rolled up.
func explainRolledUp(b *strings.Builder, tables []*Table) {
	for _, t := range tables {
		fmt.Fprintf(b, "-- reads: rolled_up: the counters of %s read as their base values, at most %v behind (exact for the transaction's own increments)\n", t.Qualified(), t.MaxStaleness)
	}
}

// explainGuard shows a guard and the fold after it (refresh: inside a
// REPEATABLE READ transaction that may have read): the slot rows of the
// records it locked, read where every committed row is visible (outside
// the client's transaction when it may have read), then for a record
// <key> with one slot row per counter at slot 0, the locking of those rows
// and the fold.
func explainGuard(b *strings.Builder, g *Guard, refresh bool) {
	t := g.Table
	if g.ScanSQL != "" {
		fmt.Fprintf(b, "guard (REPEATABLE READ, SERIALIZABLE): %s\n", g.ScanSQL)
		fmt.Fprintf(b, "slotted records: %s\n", t.SlottedRowsSQL("", FoldBatch, false))
		fmt.Fprintf(b, "guard (READ COMMITTED): %s\n", g.KeysSQL)
	} else if g.Fallback != nil {
		fmt.Fprintf(b, "probe (autocommit): %s\n", g.ProbeSQL)
		fmt.Fprintf(b, "guard (a row found, or in a transaction): %s\n", g.KeysSQL)
		fmt.Fprintf(b, "guard (autocommit, no row found): %s\n", g.Fallback.KeysSQL)
	} else {
		fmt.Fprintf(b, "guard: %s\n", g.KeysSQL)
	}
	fmt.Fprintf(b, "slot rows: %s\n", t.SlotRowsSQL([]string{"<keys>"}))
	var rows []SlotRow
	for _, c := range t.Counters {
		rows = append(rows, SlotRow{RecordType: c.RecordType, Key: "<key>", Slot: 0, Count: "1"})
	}
	stmts := append(t.LockSlotRowsSQL(rows), t.FoldRowsSQL([]string{"<key>"}, rows, refresh)...)
	fmt.Fprintf(b, "fold: %s\n", strings.Join(stmts, ";\n      "))
}

// Explain renders plans for people: the SQL that would be sent, or
// "pass-through: <reason>". It is what `slotproxy explain` prints.
func Explain(plans []Plan, err error) string {
	switch {
	case err != nil:
		var ue *UnparsedError
		if errors.As(err, &ue) {
			if ue.Fallback != nil {
				return "the server's own error if it rejects the statement, else:\n" + Explain([]Plan{*ue.Fallback}, nil)
			}
			return fmt.Sprintf("the server's own error if it rejects the statement, else refused: rule %s.%s: %s (parser: %v)", ue.Table.Schema, ue.Table.Name, ue.Reason(), ue.Err)
		}
		return "pass-through: does not parse: " + err.Error()
	case plans == nil:
		return "pass-through: names no ruled table"
	}
	var b strings.Builder
	for i, p := range plans {
		if i > 0 {
			b.WriteString("\n")
		}
		if len(plans) > 1 {
			fmt.Fprintf(&b, "-- statement %d\n", i+1)
		}
		if p.Shadow {
			fmt.Fprintf(&b, "pass-through: shadow mode; would run as %s:\n", p.Kind())
		}
		switch op := p.Op.(type) {
		case *AsWritten:
			if !p.Shadow {
				reason := p.Reason
				if reason == "" {
					reason = "reads and writes no counter"
				}
				fmt.Fprintf(&b, "pass-through: %s\n", reason)
			}
		case *LockTables:
			fmt.Fprintf(&b, "%s\n-- %s\n", op.SQL, p.Reason)
		case *Read:
			fmt.Fprintf(&b, "%s\n", op.SQL)
			explainRolledUp(&b, op.RolledUp)
		case *LockingRead:
			for _, g := range op.Guards {
				explainGuard(&b, g, false)
			}
			fmt.Fprintf(&b, "then: %s\n", op.SQL)
		case *WriteOthers:
			if len(op.Reads) == 0 {
				fmt.Fprintf(&b, "pass-through: %s\n", cmp.Or(p.Reason, "writes no counter"))
			} else {
				fmt.Fprintf(&b, "%s\n", op.SQL)
			}
			if op.Guard != nil && !p.Shadow {
				b.WriteString("-- in a REPEATABLE READ transaction that may have read, first:\n")
				explainGuard(&b, op.Guard, true)
			}
		case *Increment:
			fmt.Fprintf(&b, "%s\n", op.SQL)
			if op.Sorted != "" {
				fmt.Fprintf(&b, "in a client's transaction, each slot row tested before any is inserted: %s\n", op.Sorted)
			}
			fmt.Fprintf(&b, "privilege check: %s\n", op.ProbeSQL)
			if read, ok := op.Guard.ReadKeysSQL(); ok && op.ByKeys != "" {
				fmt.Fprintf(&b, "at READ COMMITTED, the keys of the rows that match first: %s\n", read)
				fmt.Fprintf(&b, "then those records: %s\n", op.ByKeys)
			}
		case *UpsertIncrement:
			fmt.Fprintf(&b, "-- %s\n", p.Reason)
			if g := op.Generated; g != nil {
				b.WriteString("-- the key left to AUTO_INCREMENT: in autocommit, in a transaction: the increment, one AUTO_INCREMENT value taken, the record's key (the insert id);\n")
				b.WriteString("-- in a client's transaction, a row that does not exist (asked on another connection) is inserted as written, else the guarded upsert runs\n")
				fmt.Fprintf(&b, "exists: %s\n", g.ExistsSQL)
			}
			fmt.Fprintf(&b, "%s\n", op.Increment.SQL)
			if op.Increment.Sorted != "" {
				fmt.Fprintf(&b, "in a client's transaction, each slot row tested before any is inserted: %s\n", op.Increment.Sorted)
			}
			if g := op.Generated; g != nil {
				fmt.Fprintf(&b, "%s\n%s\n", g.BurnSQL, g.IDSQL)
			}
			fmt.Fprintf(&b, "privilege check: %s\n", op.Increment.ProbeSQL)
			b.WriteString("-- no such record: the statement as written\n")
			if g, ok := op.Fallback.Op.(*Guarded); ok {
				b.WriteString("-- beyond the slot's share of the range, or a NULL counter:\n")
				for _, gd := range g.Guards {
					explainGuard(&b, gd, false)
				}
				fmt.Fprintf(&b, "then: %s\n", g.SQL)
			}
		case *UpsertRows:
			fmt.Fprintf(&b, "-- %s\n", p.Reason)
			for i, row := range op.Rows {
				fmt.Fprintf(&b, "row %d: %s\n", i+1, row.Increment.SQL)
				fmt.Fprintf(&b, "row %d, no such record: %s\n", i+1, op.RowSQL[i])
			}
			if len(op.Rows) > 0 {
				fmt.Fprintf(&b, "privilege check: %s\n", op.Rows[0].Increment.ProbeSQL)
			}
			if op.WarnSQL != "" {
				fmt.Fprintf(&b, "the statement's warnings: %s\n", op.WarnSQL)
			}
			if g, ok := op.Fallback.Op.(*Guarded); ok {
				b.WriteString("-- in a transaction, prepared, or where a row cannot be slotted:\n")
				for _, gd := range g.Guards {
					explainGuard(&b, gd, false)
				}
				fmt.Fprintf(&b, "then: %s\n", g.SQL)
			}
		case *Refused:
			fmt.Fprintf(&b, "refused: rule %s.%s: %s\n", p.Table.Schema, p.Table.Name, p.Reason)
		case *Guarded:
			if p.Reason != "" {
				fmt.Fprintf(&b, "-- %s\n", p.Reason)
			}
			for _, g := range op.Guards {
				explainGuard(&b, g, false)
			}
			fmt.Fprintf(&b, "then: %s\n", op.SQL)
		}
		for _, e := range p.Then {
			if c, ok := e.(*ClearSlots); ok {
				fmt.Fprintf(&b, "then: %s\n", c.SQL)
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
