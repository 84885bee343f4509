package rewrite

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// This file plans writes to ruled tables: slotted increments, and guarded
// writes that need exact base values.

// singleTable returns the ruled table an UPDATE or DELETE writes when it
// names exactly one table, with its scope entry.
func (w *reads) singleTable(refs *ast.TableRefsClause) (*Table, *scope) {
	sc := w.scopeOf(refs)
	if len(sc.refs) != 1 || sc.refs[0].table == nil {
		return nil, sc
	}
	return sc.refs[0].table, sc
}

// selfIncrement reports whether a adds to or subtracts from counter c its
// own value: `c = c ± delta`, `c = delta + c`, with the counter also
// written `COALESCE(c, 0)` or `IFNULL(c, 0)` (ORMs guarding against NULL),
// parenthesised or table-qualified anywhere; delta reads no counter. It
// returns the delta, whether it is subtracted, and the RHS reference of c.
// (A NULL base value never takes the slotted path: see slottedIncrement.)
func (w *reads) selfIncrement(a *ast.Assignment, ref *tableRef) (delta ast.ExprNode, minus bool, self *ast.ColumnNameExpr) {
	expr := unparen(a.Expr)
	if inner := nonNegativeClamp(expr, ref.table.counter(a.Column.Name.O)); inner != nil {
		expr = inner
	}
	b, ok := expr.(*ast.BinaryOperationExpr)
	if !ok || (b.Op != opcode.Plus && b.Op != opcode.Minus) {
		return nil, false, nil
	}
	isSelf := func(e ast.ExprNode) *ast.ColumnNameExpr {
		e = unparen(e)
		if f, ok := e.(*ast.FuncCallExpr); ok && (f.FnName.L == "coalesce" || f.FnName.L == "ifnull") && len(f.Args) == 2 && isZero(unparen(f.Args[1])) {
			e = unparen(f.Args[0])
		}
		c, ok := e.(*ast.ColumnNameExpr)
		if !ok || !strings.EqualFold(c.Name.Name.O, a.Column.Name.O) {
			return nil
		}
		if c.Name.Table.O != "" && c.Name.Table.L != ref.match {
			return nil
		}
		return c
	}
	if c := isSelf(b.L); c != nil {
		delta, minus, self = unparen(b.R), b.Op == opcode.Minus, c
	} else if c := isSelf(b.R); c != nil && b.Op == opcode.Plus {
		delta, self = unparen(b.L), c
	} else {
		return nil, false, nil
	}
	if w.readsCounter(delta) {
		return nil, false, nil
	}
	if n, ok := quotedInt(delta); ok {
		// c + '101' (PHP quoting its parameters): the server adds the
		// number, exactly within ±2^53, where slotted totals stay.
		delta = ast.NewValueExpr(n, "", "")
	}
	return delta, minus, self
}

// quotedInt returns the integer a string literal holds when it is exactly
// one canonical decimal integer ('101', '-3', not '007', ' 1' or '1e3').
func quotedInt(e ast.ExprNode) (int64, bool) {
	v, ok := e.(*driver.ValueExpr)
	if !ok || v.Kind() != driver.KindString {
		return 0, false
	}
	s := v.GetString()
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 18 || digits[0] == '0' && (len(digits) > 1 || s[0] == '-') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(digits[i]-'0')
	}
	if s[0] == '-' {
		n = -n
	}
	return n, true
}

// nonNegativeClamp returns the increment x + n of GREATEST(x + n, 0) or
// GREATEST(0, x + n), n a positive integer literal, when ctr cannot be
// negative (its range starts at 0 or above): there x + n ≥ 0 always, NULL
// stays NULL, and the clamp is the increment (MediaWiki's site statistics).
// It returns nil for anything else.
func nonNegativeClamp(e ast.ExprNode, ctr *Counter) ast.ExprNode {
	f, ok := e.(*ast.FuncCallExpr)
	if !ok || f.FnName.L != "greatest" || len(f.Args) != 2 || ctr == nil || ctr.Touch || ctr.Min == "" || strings.HasPrefix(ctr.Min, "-") {
		return nil
	}
	inner, zero := unparen(f.Args[0]), unparen(f.Args[1])
	if isZero(inner) {
		inner, zero = zero, inner
	}
	if !isZero(zero) {
		return nil
	}
	b, ok := inner.(*ast.BinaryOperationExpr)
	if !ok || b.Op != opcode.Plus {
		return nil
	}
	for _, n := range []ast.ExprNode{unparen(b.L), unparen(b.R)} {
		if v, ok := n.(*driver.ValueExpr); ok && (v.Kind() == driver.KindInt64 && v.GetInt64() > 0 || v.Kind() == driver.KindUint64) {
			return inner
		}
	}
	return nil
}

// unchangedAssignment returns, for an assignment of an integer column of
// t's other columns (not a key, counter or touch column; not generated;
// no CHECK constraint but constant bounds) to an integer literal or NULL,
// the condition on the base row (of ref) under which it changes nothing:
// the column already holds that value (phpBB's topic_bumped = 0 with every
// reply). A value out of the column's range is never held, so the
// condition does not depend on the literal's value (a template's). It
// returns "" for anything else.
func (w *reads) unchangedAssignment(a *ast.Assignment, ref *tableRef, t *Table) string {
	if _, ok := t.Inserted.IntRanges[strings.ToLower(a.Column.Name.O)]; !ok || a.Column.Schema.O != "" {
		return ""
	}
	v := unparen(a.Expr)
	null := false
	if x, ok := v.(*driver.ValueExpr); ok && x.Kind() == driver.KindNull {
		null = true
	}
	if !null && intLiteral(v) == "" {
		return ""
	}
	return ref.qual + "." + quoteIdent(a.Column.Name.O) + " <=> (" + w.r.restore(v, w.sess) + ")"
}

// greatestOfSelf returns, for an integer touch column assigned
// GREATEST(v, itself) or GREATEST(itself, v) (Mattermost's LastPostAt), v
// and the column's reference: the later of its time and v is what a touch
// slot keeps, so the assignment is a time like any other, except that
// GREATEST is NULL when the column is (see slottedIncrement). Anything else
// is returned as it is, with a nil reference.
func greatestOfSelf(a *ast.Assignment, ref *tableRef, ctr *Counter) (ast.ExprNode, *ast.ColumnNameExpr) {
	f, ok := unparen(a.Expr).(*ast.FuncCallExpr)
	if !ok || !ctr.Integer || f.FnName.L != "greatest" || len(f.Args) != 2 {
		return a.Expr, nil
	}
	for i, arg := range f.Args {
		c, ok := unparen(arg).(*ast.ColumnNameExpr)
		if ok && strings.EqualFold(c.Name.Name.O, a.Column.Name.O) && (c.Name.Table.O == "" || c.Name.Table.L == ref.match) && c.Name.Schema.O == "" {
			return f.Args[1-i], c
		}
	}
	return a.Expr, nil
}

// nullTestsOnly reports whether where reads counters of ref's table only in
// top-level conjuncts "c IS NULL" or "c IS NOT NULL" of counters that are
// not touch columns: a total is NULL exactly when its base value is, so the
// slotted increment (which evaluates the WHERE clause on the base row) keeps
// them exact.
func (w *reads) nullTestsOnly(where ast.ExprNode, ref *tableRef) bool {
	var walk func(e ast.ExprNode) bool
	walk = func(e ast.ExprNode) bool {
		e = unparen(e)
		if b, ok := e.(*ast.BinaryOperationExpr); ok && b.Op == opcode.LogicAnd {
			return walk(b.L) && walk(b.R)
		}
		if n, ok := e.(*ast.IsNullExpr); ok {
			if c, ok := unparen(n.Expr).(*ast.ColumnNameExpr); ok && (c.Name.Table.O == "" || c.Name.Table.L == ref.match) {
				if ctr := ref.table.counter(c.Name.Name.O); ctr != nil && !ctr.Touch {
					return true
				}
			}
		}
		return !w.readsCounter(e)
	}
	return walk(where)
}

// impliedConds are the comparisons of counters in an increment's WHERE
// clause that the slotted increment makes true (see impliedComparisons).
type impliedConds struct {
	// ok: every counter the WHERE clause reads is read in a null test or
	// in one of spans.
	ok bool
	// compares: some conjunct compares a counter with an integer literal
	// (implied or not): the plan depends on the literals' values.
	compares bool
	// spans are the implied comparisons' texts, [start, end) in the
	// statement, in order.
	spans [][2]int
}

// without returns the WHERE clause sql[ws:we] with the implied comparisons
// replaced by TRUE, or false when one is not inside it.
func (c impliedConds) without(sql string, ws, we int) (string, bool) {
	if we <= ws {
		return "", false
	}
	var b strings.Builder
	pos := ws
	for _, sp := range c.spans {
		if sp[0] < pos || sp[1] > we {
			return "", false
		}
		b.WriteString(sql[pos:sp[0]])
		b.WriteString("TRUE")
		pos = sp[1]
	}
	b.WriteString(sql[pos:we])
	return b.String(), true
}

// impliedComparisons finds the top-level conjuncts of where that compare a
// counter of ref's table that the statement increments by an integer
// literal (deltaOf: the signed delta) with an integer literal (c > m,
// c >= m, c < m, c <= m, or m on the left) and that hold whenever the
// slotted increment succeeds. A slotted increment succeeds only when the
// total after it stays within the counter's range [Min, Max] (each slot
// within its share, see slottedIncrement), so the total before it was in
// [max(Min, Min - d), min(Max, Max - d)]: `c > 0` on an UNSIGNED counter
// decremented by 1 (or one whose CHECK keeps it ≥ 0) always holds there.
// The slotted increment runs with such comparisons replaced by TRUE (the
// base value alone would decide them wrongly); where it does not succeed
// the statement runs on the base row, folded first, where the server
// decides them on the total. Other reads of counters (and null tests,
// which nullTestsOnly allows) make ok false.
func (w *reads) impliedComparisons(where ast.ExprNode, ref *tableRef, deltaOf func(*Counter) (string, bool)) impliedConds {
	var out impliedConds
	var toks []token
	lexed := false
	counterOf := func(e ast.ExprNode) *Counter {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		if !ok || c.Name.Schema.O != "" || (c.Name.Table.O != "" && c.Name.Table.L != ref.match) {
			return nil
		}
		if ctr := ref.table.counter(c.Name.Name.O); ctr != nil && !ctr.Touch {
			return ctr
		}
		return nil
	}
	// end returns where the operand e (a column name or an integer
	// literal) ends in the statement, or -1.
	end := func(e ast.ExprNode) int {
		if u, ok := e.(*ast.UnaryOperationExpr); ok {
			e = unparen(u.V)
		}
		if !lexed {
			toks, lexed = nil, true
			if t, ok := lex(w.sql, w.sess); ok {
				toks = t
			}
		}
		pos := e.OriginTextPosition()
		for i, t := range toks {
			if t.start != pos {
				continue
			}
			if _, col := e.(*ast.ColumnNameExpr); !col {
				return t.end
			}
			for i+2 < len(toks) && toks[i+1].kind == tokPunct && w.sql[toks[i+1].start] == '.' && toks[i+1].start == t.end {
				i += 2
				t = toks[i]
			}
			return t.end
		}
		return -1
	}
	var walk func(e ast.ExprNode) bool
	walk = func(e ast.ExprNode) bool {
		e = unparen(e)
		b, ok := e.(*ast.BinaryOperationExpr)
		if !ok {
			return !w.readsCounter(e)
		}
		if b.Op == opcode.LogicAnd {
			return walk(b.L) && walk(b.R)
		}
		op := b.Op
		ctr, lit := counterOf(b.L), intLiteral(unparen(b.R))
		if ctr == nil {
			ctr, lit = counterOf(b.R), intLiteral(unparen(b.L))
			switch op { // m < c is c > m
			case opcode.LT:
				op = opcode.GT
			case opcode.LE:
				op = opcode.GE
			case opcode.GT:
				op = opcode.LT
			case opcode.GE:
				op = opcode.LE
			}
		}
		if ctr == nil || lit == "" || (op != opcode.LT && op != opcode.LE && op != opcode.GT && op != opcode.GE) {
			return !w.readsCounter(e)
		}
		out.compares = true
		d, ok := deltaOf(ctr)
		kl, kh := ctr.keptBounds()
		lo, ok1 := new(big.Int).SetString(kl, 10)
		hi, ok2 := new(big.Int).SetString(kh, 10)
		m, ok3 := new(big.Int).SetString(lit, 10)
		delta, ok4 := new(big.Int).SetString(d, 10)
		if !ok || !ok1 || !ok2 || !ok3 || !ok4 {
			return false
		}
		// The total before a successful increment is within [lo, hi].
		if delta.Sign() > 0 {
			hi.Sub(hi, delta)
		} else {
			lo.Sub(lo, delta)
		}
		holds := false
		switch op {
		case opcode.GE:
			holds = lo.Cmp(m) >= 0
		case opcode.GT:
			holds = lo.Cmp(m) > 0
		case opcode.LE:
			holds = hi.Cmp(m) <= 0
		case opcode.LT:
			holds = hi.Cmp(m) < 0
		}
		if !holds {
			return false
		}
		start := b.OriginTextPosition()
		last := b.R
		if e := end(unparen(last)); e > start {
			out.spans = append(out.spans, [2]int{start, e})
			return true
		}
		return false
	}
	// Null tests are allowed as nullTestsOnly allows them.
	var conj func(e ast.ExprNode) bool
	conj = func(e ast.ExprNode) bool {
		e = unparen(e)
		if b, ok := e.(*ast.BinaryOperationExpr); ok && b.Op == opcode.LogicAnd {
			return conj(b.L) && conj(b.R)
		}
		if w.nullTestsOnly(e, ref) {
			return true
		}
		return walk(e)
	}
	out.ok = conj(where)
	slices.SortFunc(out.spans, func(a, b [2]int) int { return a[0] - b[0] })
	return out
}

// negate returns the decimal integer s with its sign changed.
func negate(s string) string {
	switch {
	case strings.HasPrefix(s, "-"):
		return s[1:]
	case s == "0":
		return s
	}
	return "-" + s
}

// unparen strips the parentheses around e.
func unparen(e ast.ExprNode) ast.ExprNode {
	for {
		p, ok := e.(*ast.ParenthesesExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

// readsCounter reports whether e reads any counter column.
func (w *reads) readsCounter(e ast.ExprNode) bool {
	probe := &reads{r: w.r, sql: w.sql, sess: w.sess, scopes: w.scopes, tables: map[*Table]bool{}, params: w.params, slot: w.slot, ctes: w.ctes}
	probe.visit(e)
	return probe.found > 0
}

func (r *Rewriter) update(s *ast.UpdateStmt, w *reads, start, end int) Plan {
	n := w.with(s.With)
	defer func() { w.ctes = w.ctes[:n] }()
	t, sc := w.singleTable(s.TableRefs)
	if t == nil {
		// A multi-table UPDATE: which rows it assigns a counter of is known
		// only once it runs, so the guard folds every slotted record of the
		// table first.
		var assigned []*Table
		for _, a := range s.List {
			for _, ref := range sc.refs {
				if ref.table != nil && (ref.table.counter(a.Column.Name.O) != nil || ref.table.isKey(a.Column.Name.O)) &&
					(a.Column.Table.O == "" || a.Column.Table.L == ref.match) && !slices.Contains(assigned, ref.table) {
					assigned = append(assigned, ref.table)
				}
			}
		}
		w.push(sc)
		for _, a := range s.List {
			w.visit(a.Expr)
		}
		w.visitJoinConditions(s.TableRefs.TableRefs)
		w.visit(s.Where)
		if s.Order != nil {
			w.visit(s.Order)
		}
		w.pop()
		if assigned == nil {
			return w.readPlan(start, end)
		}
		return w.wideGuarded(assigned, start, end)
	}
	ref := &sc.refs[0]
	w.target = ref
	w.push(sc)
	defer w.pop()

	// Classify assignments: increments of counters, times assigned to
	// touch columns (slotted with the increments), anything else.
	type inc struct {
		ctr   *Counter
		delta ast.ExprNode // the delta, or the time of a touch column
		minus bool
		// greatest: a touch column assigned GREATEST(v, itself) (see
		// greatestOfSelf).
		greatest bool
		// byRow: the delta is a CASE on another column of the row (see
		// caseIncrement); delta is nil.
		byRow *caseDelta
	}
	var incs []inc
	// keep: the conditions under which assignments of other columns
	// change nothing (see unchangedAssignment), keepCols their columns.
	var keep, keepCols []string
	touches := 0
	absolute, other := false, false
	caseOf := false // a counter is assigned a CASE
	var otherCol string
	w.skip = map[*ast.ColumnNameExpr]bool{}
	for _, a := range s.List {
		if a.Column.Table.O != "" && a.Column.Table.L != ref.match {
			continue
		}
		ctr := t.counter(a.Column.Name.O)
		if ctr == nil && t.isKey(a.Column.Name.O) {
			// A key change: the record's slots must not stay behind (or be
			// inherited by the new key), so they are folded first.
			absolute = true
			continue
		}
		if ctr == nil {
			if cond := w.unchangedAssignment(a, ref, t); cond != "" {
				keep = append(keep, cond)
				keepCols = append(keepCols, a.Column.Name.O)
				continue
			}
			if !other {
				otherCol = a.Column.Name.O
			}
			other = true
			continue
		}
		if ctr.Touch {
			v, self := greatestOfSelf(a, ref, ctr)
			if !touchValue(v, ctr) || w.readsCounter(v) {
				absolute = true
				continue
			}
			if self != nil {
				w.skip[self] = true
			}
			incs = append(incs, inc{ctr: ctr, delta: unparen(v), greatest: self != nil})
			touches++
			continue
		}
		delta, minus, self := w.selfIncrement(a, ref)
		if delta == nil {
			if _, ok := unparen(a.Expr).(*ast.CaseExpr); ok {
				// Whether every row takes a branch depends on the
				// literals' values (a template's are stand-ins).
				caseOf = true
			}
			if cd := r.caseIncrement(a, ref, s.Where, w.sess); cd != nil {
				incs = append(incs, inc{ctr: ctr, byRow: cd})
				continue
			}
			absolute = true
			continue
		}
		w.skip[self] = true
		incs = append(incs, inc{ctr: ctr, delta: delta, minus: minus})
	}
	counters := len(incs) - touches
	if len(keep) > 0 && counters == 0 {
		// No increment: a write of other columns, as written.
		other, otherCol = true, keepCols[0]
	}
	var implied impliedConds
	constExpr := false // a delta is an expression of integer literals
	if s.Where != nil && !absolute && !other && counters > 0 {
		implied = w.impliedComparisons(s.Where, ref, func(c *Counter) (string, bool) {
			for _, in := range incs {
				if in.ctr == c {
					if in.byRow != nil {
						return "", false
					}
					d := intLiteral(in.delta)
					if d == "" || c.Decimal() {
						// (A DECIMAL counter's range is in its units.)
						return "", false
					}
					if in.minus {
						d = negate(d)
					}
					return d, true
				}
			}
			return "", false
		})
	}

	// The hot path: increments only (and times of touch columns), of the
	// records a key equality in the WHERE clause names.
	why := ""
	var keys []ast.ExprNode
	oneRecord := false // named by a UNIQUE key's equalities: at most one record
	byPrimary := false // a keyed table's records named by its primary key
	byScan := false    // the records are the rows a condition on them finds
	switch {
	case absolute || counters == 0:
	case other:
		why = "it also assigns " + otherCol + ", which is not a counter (list it under touch: in the rule if increments assign it a time)"
	case s.IgnoreErr:
		why = "UPDATE IGNORE"
	case s.Order != nil:
		why = "ORDER BY"
	case !limitOK(s.Limit):
		why = "a LIMIT other than 1"
	case s.Where == nil:
		why = "no WHERE clause naming the record by its key"
	case !w.nullTestsOnly(s.Where, ref) && !implied.ok:
		why = "the WHERE clause reads a counter (other than c IS NULL, c IS NOT NULL, or a bound that every slotted increment keeps: the column's range, a CHECK constraint that declares the bound, or bounds: in the rule)"
	default:
		byUnique := false
		if keys = keyConjunct(s.Where, t, ref); keys == nil {
			byUnique, oneRecord, byPrimary = uniqueConjuncts(s.Where, t, ref)
			if !byUnique && (!rowCondition(s.Where, ref) || len(implied.spans) > 0) {
				why = "the WHERE clause does not require " + t.Key + " = value or " + t.Key + " IN (values), or a UNIQUE key's columns = values, and is not a condition on the row's other columns that converts nothing (column = literal of its type, IN, BETWEEN, IS NULL, AND, OR, NOT)"
				if t.Keyed() {
					why = "the WHERE clause does not name every column of the key " + t.KeyDescription() + ", or of a UNIQUE key, by column = value, and is not a condition on the row's other columns that converts nothing (column = literal of its type, IN, BETWEEN, IS NULL, AND, OR, NOT)"
				}
				break
			}
			if s.Limit != nil && !byUnique {
				// LIMIT n stops after n rows of the scan's order.
				why = "a LIMIT with a condition that names no key"
				break
			}
			if s.Limit != nil {
				// LIMIT n may stop before the last value of an IN list.
				why = "a LIMIT with a UNIQUE key's values"
				break
			}
			// The records are the rows the unique key (or the condition)
			// finds: their keys are known only once the statement ran.
			keys = []ast.ExprNode{}
			byScan = !byUnique
		}
		if s.Limit != nil && len(keys) > 1 {
			// LIMIT n may stop before the last key (a template's LIMIT is
			// any number: only one key makes any LIMIT ≥ 1 a no-op).
			why, keys = "a LIMIT with several keys", nil
			break
		}
		for _, in := range incs {
			if len(in.ctr.BaseOnly) > 0 {
				// A CASE of deltas too (the fuzzer's finding: a CHECK
				// constraint of a DECIMAL counter, mariadb-…410227).
				why, keys = strings.Join(in.ctr.BaseOnly, "; "), nil
				break
			}
			if in.byRow != nil {
				continue // integer literals that are not 0
			}
			if in.ctr.Decimal() && isDecimalLiteral(in.delta) && !wholeUnits(in.delta, in.ctr.Scale) {
				why, keys = "the delta of "+in.ctr.Name+" is finer than the column, which rounds it", nil
				break
			}
			_, isConst := constDelta(in.delta)
			if constExpression(in.delta) && intLiteral(in.delta) == "" && !in.ctr.Touch {
				// An expression of literals (not one literal, which a
				// template's stand-in replaces): planned from each
				// statement's values, see constDelta.
				constExpr = true
			}
			if !in.ctr.Touch && !isIntLiteralOrParam(in.delta) && !(in.ctr.Decimal() && isDecimalLiteral(in.delta)) && !isConst {
				why, keys = "the delta of "+in.ctr.Name+" is not an integer literal or a placeholder", nil
				if in.ctr.Decimal() {
					why = "the delta of " + in.ctr.Name + " is not a number literal or a placeholder"
					if v, ok := in.delta.(*driver.ValueExpr); ok && v.Kind() == driver.KindString {
						why = "the delta of " + in.ctr.Name + " is a string: the server adds it to the DECIMAL column in DOUBLE arithmetic, whose rounding (and Note 1265) depends on the total"
					}
				}
				break
			}
		}
		zero := true
		for _, in := range incs {
			zero = zero && (in.ctr.Touch || in.byRow == nil && isZero(in.delta))
		}
		if touches > 0 && zero {
			// Whether the time changes the row is known only on it.
			why, keys = "increments by 0 with a touch column", nil
		}
	}
	if keys != nil {
		ctrs := make([]*Counter, len(incs))
		values := make([]string, len(incs))
		greatest := make([]bool, len(incs))
		byRow := make([]bool, len(incs))
		inc := &Increment{Zero: true, Counters: len(incs)}
		for i, in := range incs {
			ctrs[i] = in.ctr
			inc.RecordTypes = append(inc.RecordTypes, in.ctr.RecordType)
			if in.byRow != nil {
				values[i], byRow[i] = in.byRow.SQL, true
				inc.Zero = false
				inc.DeltaParams = append(inc.DeltaParams, -1)
				inc.DeltaZero = append(inc.DeltaZero, false)
				inc.Deltas = append(inc.Deltas, Delta{Column: in.ctr.Name, Param: -1})
				continue
			}
			values[i] = r.restore(in.delta, w.sess)
			greatest[i] = in.greatest
			if in.ctr.Touch {
				inc.TouchParams = append(inc.TouchParams, w.paramIndex(in.delta))
				inc.TouchInts = append(inc.TouchInts, in.ctr.Integer)
				continue
			}
			if in.minus {
				values[i] = "-(" + values[i] + ")"
			}
			lit, zero := intLiteral(in.delta), isZero(in.delta)
			if v, ok := constDelta(in.delta); ok && lit == "" {
				lit, zero = v, v == "0"
			}
			inc.Zero = inc.Zero && zero
			inc.DeltaParams = append(inc.DeltaParams, w.paramIndex(in.delta))
			inc.DeltaZero = append(inc.DeltaZero, zero)
			inc.Deltas = append(inc.Deltas, Delta{Column: in.ctr.Name, Literal: lit, Param: w.paramIndex(in.delta), Minus: in.minus})
		}
		for _, k := range keys {
			kv := KeyValue{Param: w.paramIndex(k)}
			if kv.Param < 0 {
				kv.Literal = r.restore(k, w.sess)
			}
			inc.Keys = append(inc.Keys, kv)
		}
		ws := s.Where.OriginTextPosition()
		we := exprEnd(w.sql, w.sess, ws)
		if where, ok := implied.without(w.sql, ws, we); ok && we > ws {
			p := Plan{Op: inc, Table: t, valueDependent: implied.compares || constExpr || caseOf}
			if len(implied.spans) > 0 {
				p.Reason = "the WHERE clause's bound on a counter holds whenever the slotted increment keeps the counter within its range; it is checked that way"
			}
			inc.Slot = -1
			// One counter by an integer literal: its upsert writes the
			// delta and the slot as literals (see slottedIncrement), unless
			// the slot is to be a parameter (Session.slotColumn).
			inline := len(incs) == 1 && incs[0].byRow == nil && !incs[0].ctr.Touch && !incs[0].ctr.Decimal() &&
				intLiteral(incs[0].delta) != "" && !w.sess.slotColumn
			inc.SQL = r.slottedIncrement(t, ref, ctrs, values, greatest, byRow, keep, where, func(n int) int {
				if w.slot != nil {
					inc.Slot = w.slot(n)
				} else {
					inc.Slot = r.slotFor(w.sess)(t)
				}
				return inc.Slot
			}, false, inline)
			picked := inc.Slot
			if len(ctrs) > 1 || !(len(inc.Keys) == 1 || len(inc.Keys) == 0 && oneRecord) {
				// Several slot rows: in a client's transaction, each is
				// checked before any is inserted (see Increment.Sorted).
				inc.Sorted = r.slottedIncrement(t, ref, ctrs, values, greatest, byRow, keep, where, func(int) int { return picked }, true, inline)
			}
			if len(keep) > 0 {
				p.Reason = "the increments go to a slot while " + strings.Join(keepCols, ", ") + " already hold(s) the value(s) assigned; else it runs on the base row"
			}
			if len(ctrs) == 1 && !ctrs[0].Touch && !ctrs[0].Decimal() && len(inc.Deltas) == 1 && inc.Deltas[0].Literal != "" && len(keep) == 0 &&
				(len(inc.Keys) == 1 && inc.Keys[0].Param < 0 || len(inc.Keys) == 0 && oneRecord) &&
				!implied.compares && len(implied.spans) == 0 && len(w.params) == 0 {
				// Coalescable: the same upsert with its slot and its
				// delta written once each, which a batch replaces.
				inc.batch = r.slottedIncrement(t, ref, ctrs, values, greatest, byRow, keep, where, func(int) int { return picked }, false, false)
			}
			// The records by their key's index, as the UPDATE reads them:
			// a locking read of a few rows' table may otherwise scan it and
			// lock rows the UPDATE never touches.
			from := ref.from
			if byPrimary {
				from += " FORCE INDEX (PRIMARY)"
			}
			inc.ProbeSQL = w.probe(start, end, ws, we)
			inc.Restrict = w.restricted(s.Where, ref, t, start, end)
			if byScan && !t.Keyed() {
				// At READ COMMITTED the UPDATE skips a row another
				// transaction holds when the row's committed version does
				// not match (semi-consistent read); the upsert's locking
				// read would wait for it. The executor reads the keys of
				// the committed rows that match first, then increments
				// those by key (see Increment.ByKeys).
				key := t.RecordID(ref.qual)
				byKeys := *ref
				byKeys.from = ref.from + " FORCE INDEX (PRIMARY)"
				inc.ByKeys = r.slottedIncrement(t, &byKeys, ctrs, values, greatest, byRow, keep,
					parenthesize(where)+" AND "+key+" IN ("+RestrictKeys+")", func(int) int { return picked }, false, inline)
			}
			inc.PrivKey = maskInts(maskSentinels(inc.ProbeSQL), w.sess)
			order := orderSQL(t, ref, from, " WHERE "+parenthesize(where))
			inc.Guard = &Guard{
				Table: t,
				// Every column read, as the UPDATE reads whole rows: the
				// server then takes the UPDATE's access path (a covering
				// scan of the primary key would lock rows the UPDATE's
				// range never touches).
				KeysSQL:    cmp.Or(order, fmt.Sprintf("SELECT %s FROM %s WHERE %s", t.RecordID(ref.qual), from, parenthesize(where))) + " FOR UPDATE",
				OrderSQL:   order,
				KeysParams: w.paramsIn(s.Where),
				Keys:       slices.Clone(inc.Keys),
			}
			if byPrimary {
				inc.Guard.Keys = w.guardRecordKeys(s.Where, t, ref)
			}
			return p
		}
		why = "cannot locate the WHERE clause in the statement text"
	}
	if touches > 0 || counters > 0 {
		// An increment outside the slotted path runs on the base row,
		// where the server checks the column's range and constraints: on
		// the total only once the record's slots are folded into it. A
		// time assigned to a touch column there is an absolute write of
		// it: the slots may hold a later one.
		absolute = true
	}

	// Base path: rewrite reads (not the self-references of increments).
	for _, a := range s.List {
		w.visit(a.Expr)
	}
	w.visit(s.Where)
	if s.Order != nil {
		w.visit(s.Order)
	}
	if !absolute {
		p := w.readPlan(start, end)
		if other && p.Kind() != KindRefused {
			p = writeOthers(p, r.refreshGuard(t, func() *Guard { return r.guardWhere(t, ref, s.TableRefs, s.Where, w) }, w))
		}
		return p
	}
	if w.failed != "" {
		return w.refused(t, w.failed)
	}
	g := r.guardWhere(t, ref, s.TableRefs, s.Where, w)
	if w.failed != "" {
		return w.refused(t, w.failed)
	}
	p := Plan{
		Op: &Guarded{
			SQL:         apply(w.sql, start, end, foldedEdits(w.edits)),
			Guards:      []*Guard{g},
			Restrict:    w.restricted(s.Where, ref, t, start, end),
			SingleTable: !g.Wide,
		},
		Table:          t,
		valueDependent: implied.compares || constExpr || caseOf,
	}
	if why != "" {
		p.Reason = "increment not slotted (" + why + "): the records' slots are folded and it runs on the base row"
	}
	return p
}

// writeOthers makes p, the read plan of a write of a ruled table's other
// columns, a WriteOthers with the refresh guard g; p as it is when g is
// nil.
func writeOthers(p Plan, g *Guard) Plan {
	if g == nil {
		return p
	}
	switch op := p.Op.(type) {
	case *AsWritten:
		p.Op = &WriteOthers{Guard: g} // its SQL: the statement's text (see rewrite)
	case *Read:
		p.Op = &WriteOthers{SQL: op.SQL, Reads: op.Reads, Guard: g}
	}
	return p
}

// restricted returns the statement sql[start:end], with w's edits, whose
// WHERE clause where also requires the key to be in RestrictKeys (which
// the executor replaces with the keys its guard locked), or "" when there
// is no WHERE clause or it cannot be located.
func (w *reads) restricted(where ast.ExprNode, ref *tableRef, t *Table, start, end int) string {
	if where == nil {
		return ""
	}
	ws := where.OriginTextPosition()
	we := exprEnd(w.sql, w.sess, ws)
	if we < 0 {
		return ""
	}
	// The opening parenthesis goes first, before any edit at ws (apply's
	// sort is stable); the closing one after any edit that ends at we.
	edits := append([]edit{{start: ws, end: ws, text: "("}}, foldedEdits(w.edits)...)
	edits = append(edits, edit{start: we, end: we, text: ") AND " + t.RecordID(ref.qual) + " IN (" + RestrictKeys + ")"})
	return apply(w.sql, start, end, edits)
}

func (r *Rewriter) delete(s *ast.DeleteStmt, w *reads, start, end int) Plan {
	n := w.with(s.With)
	defer func() { w.ctes = w.ctes[:n] }()
	if s.IsMultiTable {
		sc := w.scopeOf(s.TableRefs)
		// The ruled table rows are deleted from, if any: its slotted
		// records are all folded first, so no deleted row leaves slots.
		var targets []*Table
		if s.Tables != nil {
			for _, tn := range s.Tables.Tables {
				for _, ref := range sc.refs {
					if ref.table == nil || (tn.Name.L != ref.match && !strings.EqualFold(tn.Name.O, ref.table.Name)) {
						continue
					}
					if !slices.Contains(targets, ref.table) {
						targets = append(targets, ref.table)
					}
				}
			}
		}
		w.push(sc)
		w.visitJoinConditions(s.TableRefs.TableRefs)
		w.visit(s.Where)
		w.pop()
		if targets == nil {
			return w.readPlan(start, end)
		}
		p := w.wideGuarded(targets, start, end)
		if g, ok := p.Op.(*Guarded); ok {
			g.Delete = true
		}
		return p
	}
	t, sc := w.singleTable(s.TableRefs)
	if t == nil {
		w.push(sc)
		w.visit(s.Where)
		if s.Order != nil {
			w.visit(s.Order)
		}
		w.pop()
		return w.readPlan(start, end)
	}
	w.push(sc)
	defer w.pop()
	w.target = &sc.refs[0]
	w.visit(s.Where)
	if s.Order != nil {
		w.visit(s.Order)
	}
	g := r.guardWhere(t, &sc.refs[0], s.TableRefs, s.Where, w)
	if w.failed != "" {
		return w.refused(t, w.failed)
	}
	op := &Guarded{
		SQL:         apply(w.sql, start, end, foldedEdits(w.edits)),
		Guards:      []*Guard{g},
		Delete:      true,
		Restrict:    w.restricted(s.Where, &sc.refs[0], t, start, end),
		SingleTable: !g.Wide,
	}
	if unguarded := apply(w.sql, start, end, w.edits); unguarded != op.SQL {
		op.Unguarded = unguarded
	}
	return Plan{Op: op, Table: t}
}

// wideGuarded is the plan for a write to ts (the ruled tables it writes)
// whose rows are known only once it runs: every slotted record of each is
// folded first. The guards lock all of their slot rows, and the gaps
// between them, so no increment of them can add a slot until the write
// commits.
func (w *reads) wideGuarded(ts []*Table, start, end int) Plan {
	if w.failed != "" {
		return w.refused(ts[0], w.failed)
	}
	op := &Guarded{SQL: apply(w.sql, start, end, w.edits)}
	for _, t := range ts {
		op.Guards = append(op.Guards, wideGuard(t, "FOR UPDATE"))
	}
	return Plan{Op: op, Table: ts[0],
		Reason: "every slotted record of the table is folded first (the rows written are known only once it runs)"}
}

// guardWhere selects, locking them, the keys of the rows of t a
// single-table UPDATE or DELETE (or a locking read) with WHERE clause where
// may touch, through its table source ref: the same table, the WHERE
// clause's top-level conjuncts that read no counter (the others become
// TRUE: a superset of the rows, read as they are now, not as a snapshot;
// folding more records than needed keeps totals), no ORDER BY or LIMIT.
func (r *Rewriter) guardWhere(t *Table, ref *tableRef, refs *ast.TableRefsClause, where ast.ExprNode, w *reads) *Guard {
	g := w.guardFor(t, ref, where, "FOR UPDATE")
	if where != nil && t.Keyed() {
		// By key, as for an increment (see guardRecordKeys): a locking
		// read of the WHERE clause may scan a table of a few rows.
		g.Keys = w.guardRecordKeys(where, t, ref)
	} else if where != nil {
		for _, k := range keyConjunct(where, t, ref) {
			kv := KeyValue{Param: w.paramIndex(k)}
			if kv.Param < 0 {
				kv.Literal = r.restore(k, w.sess)
			}
			g.Keys = append(g.Keys, kv)
		}
	}
	return g
}

// wideGuard locks the slot rows of every record of t, and the gaps between
// them, so that no slot row of t can be added or changed until the
// transaction ends, and selects their keys for folding.
//
// The record types are read by key (see keysTable): the servers scan a
// small slot table for record_type IN (…) and lock every row of it, other
// tables' counters' too.
func wideGuard(t *Table, lock string) *Guard {
	var types []string
	for _, c := range t.Counters {
		types = append(types, itoa(c.RecordType))
	}
	s := t.QualifiedSlots()
	return &Guard{Table: t, Wide: true, KeysSQL: fmt.Sprintf("SELECT DISTINCT %s.`record_id` FROM %s STRAIGHT_JOIN %s FORCE INDEX (PRIMARY) ON %s.`record_type` = `_k`.`k` %s",
		s, keysTable(types), s, s, lock)}
}

// scanGuard is the wide guard of a single-table statement that reads every
// row of t through ref, whose WHERE clause (where, its text cond, "" for
// none) has no condition on them the proxy can keep: see Guard.ScanSQL. A
// read that skips locked rows keeps the slot rows' lock (locking the
// slotted records by key would wait for them).
//
// ScanSQL reads the rows as the statement does, by its primary key, with
// its WHERE clause behind a condition no row meets (RAND() < 0, never
// folded, evaluated first): the clause is never evaluated on a row (on
// base values it could fail where the statement's totals do not), and
// one the server finds always false (MySQL folds c < 0 on an UNSIGNED
// column) leaves the scan out, as it leaves out the statement's.
func (w *reads) scanGuard(t *Table, ref *tableRef, where ast.ExprNode, lock string) *Guard {
	g := wideGuard(t, lock)
	if strings.Contains(lock, "SKIP LOCKED") {
		return g
	}
	q := fmt.Sprintf("SELECT COUNT(*) FROM %s FORCE INDEX (PRIMARY)", ref.from)
	if where != nil {
		ws := where.OriginTextPosition()
		we := exprEnd(w.sql, w.sess, ws)
		if we < 0 {
			return g
		}
		q += " WHERE RAND() < 0 AND " + parenthesize(w.sql[ws:we])
		g.ScanWhere = true
		var c paramCollector
		where.Accept(&c)
		sort.SliceStable(c.found, func(i, j int) bool { return c.found[i].Offset < c.found[j].Offset })
		for _, pm := range c.found {
			g.ScanParams = append(g.ScanParams, w.params[pm])
		}
	}
	g.ScanSQL = q + " " + lock
	return g
}

// orderSQL is a Guard's OrderSQL: the record ids of t's rows in from
// (ref's table, with any index hint) that cond (" WHERE …") matches, with
// every column of t read; "" when t's columns are not known.
func orderSQL(t *Table, ref *tableRef, from, cond string) string {
	if len(t.Columns) == 0 {
		return ""
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = "ISNULL(" + qualify(ref.qual, c) + ")" // of any type (COALESCE mixes types: MariaDB refuses POINT with INT)
	}
	return fmt.Sprintf("SELECT %s, %s FROM %s", t.RecordID(ref.qual), strings.Join(cols, " + "), from) + cond
}

func (w *reads) guardFor(t *Table, ref *tableRef, where ast.ExprNode, lock string) *Guard {
	if where == nil {
		// Every row: the statement itself locks the rows it reads; the
		// slotted ones are folded, and no slot row can appear meanwhile.
		return w.scanGuard(t, ref, nil, lock)
	}
	q := fmt.Sprintf("SELECT %s FROM %s", t.RecordID(ref.qual), ref.from)
	g := &Guard{Table: t}
	if where != nil {
		ws := where.OriginTextPosition()
		we := exprEnd(w.sql, w.sess, ws)
		if we < 0 {
			w.failed = "cannot locate the WHERE clause"
			return g
		}
		var edits []edit
		var dropped [][2]int
		cs := w.conjuncts(where, ws, we)
		for _, c := range cs {
			if w.readsCounter(c.node) {
				edits = append(edits, edit{start: c.start, end: c.end, text: "TRUE"})
				dropped = append(dropped, [2]int{c.start, c.end})
			}
		}
		if len(dropped) == len(cs) {
			return w.scanGuard(t, ref, where, lock) // no condition left on the rows
		}
		cond := " WHERE " + parenthesize(apply(w.sql, ws, we, edits))
		g.OrderSQL = orderSQL(t, ref, ref.from, cond)
		q += cond
		if g.OrderSQL != "" {
			q = g.OrderSQL // the statement's access path (see Increment's guard)
		}
		var c paramCollector
		where.Accept(&c)
		sort.SliceStable(c.found, func(i, j int) bool { return c.found[i].Offset < c.found[j].Offset })
	params:
		for _, pm := range c.found {
			for _, d := range dropped {
				if pm.Offset >= d[0] && pm.Offset < d[1] {
					continue params
				}
			}
			g.KeysParams = append(g.KeysParams, w.params[pm])
		}
	}
	g.KeysSQL = q + " " + lock
	return g
}

// conjunct is one top-level AND operand of a WHERE clause and its text
// span.
type conjunct struct {
	node       ast.ExprNode
	start, end int
}

// conjuncts splits e, whose text is sql[start:end], into its top-level AND
// operands. Where an operand's end cannot be found the rest stays one
// conjunct (reading a counter anywhere in it then drops all of it: safe).
func (w *reads) conjuncts(e ast.ExprNode, start, end int) []conjunct {
	b, ok := e.(*ast.BinaryOperationExpr)
	if !ok || b.Op != opcode.LogicAnd {
		return []conjunct{{e, start, end}}
	}
	rs := b.R.OriginTextPosition()
	if rs <= start || rs >= end {
		return []conjunct{{e, start, end}}
	}
	// The operator before the right operand: AND or &&.
	i := rs
	for i > start && isSpace(w.sql[i-1]) {
		i--
	}
	var le int
	switch {
	case i-start >= 3 && strings.EqualFold(w.sql[i-3:i], "AND") && (i-3 == start || !isIdentByte(w.sql[i-4])):
		le = i - 3
	case i-start >= 2 && w.sql[i-2:i] == "&&":
		le = i - 2
	default:
		return []conjunct{{e, start, end}}
	}
	for le > start && isSpace(w.sql[le-1]) {
		le--
	}
	return append(w.conjuncts(b.L, start, le), w.conjuncts(b.R, rs, end)...)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (r *Rewriter) insert(s *ast.InsertStmt, w *reads, start, end int) Plan {
	var t *Table
	var ref *tableRef
	sc := w.scopeOf(s.Table)
	if len(sc.refs) == 1 {
		t, ref = sc.refs[0].table, &sc.refs[0]
	}
	// Reads in VALUES subqueries and INSERT … SELECT.
	for _, row := range s.Lists {
		for _, e := range row {
			w.visit(e)
		}
	}
	if s.Select != nil {
		w.visit(s.Select)
	}
	if t == nil {
		return w.readPlan(start, end)
	}
	needsFold := s.IsReplace
	w.push(sc)
	w.skip = map[*ast.ColumnNameExpr]bool{}
	for _, a := range s.OnDuplicate {
		if c := t.counter(a.Column.Name.O); c == nil || c.Touch {
			if c != nil || w.readsCounter(a.Expr) || t.isKey(a.Column.Name.O) {
				needsFold = true // a touch column, a counter read, a key change
			}
			continue
		}
		// An increment too (c = c + 1): on the base row, where the server
		// checks the column's range, and only the total is in range or not:
		// the record's slots are folded first (its self-reference then
		// reads the total).
		if _, _, self := w.selfIncrement(a, ref); self != nil {
			w.skip[self] = true
		}
		needsFold = true
	}
	for _, a := range s.OnDuplicate {
		w.visit(a.Expr)
	}
	w.pop()
	if !needsFold {
		p := w.readPlan(start, end)
		if len(s.OnDuplicate) > 0 && p.Kind() != KindRefused {
			p = writeOthers(p, r.refreshGuard(t, func() *Guard {
				gp, ok := r.upsertGuarded(s, t, w, start, end).Op.(*Guarded)
				if !ok {
					return nil
				}
				return gp.Guards[0]
			}, w))
		}
		return p
	}
	if w.failed != "" {
		return w.refused(t, w.failed)
	}
	p := r.upsertGuarded(s, t, w, start, end)
	w.push(sc)
	defer w.pop()
	if up, ok := r.upsertIncrement(s, t, ref, w, p); ok {
		return up
	}
	return p
}

// refreshGuard returns the guard of a write of t's rows that does not
// assign a counter (a plan's Refresh), or nil when t is in shadow mode or
// build cannot make one (the write then runs as it did).
func (r *Rewriter) refreshGuard(t *Table, build func() *Guard, w *reads) *Guard {
	if t.Shadow {
		return nil
	}
	failed := w.failed
	g := build()
	if w.failed != failed || g == nil {
		w.failed = failed
		return nil
	}
	g.Table = t
	return g
}

// upsertGuarded is the guarded plan of an upsert or REPLACE s into t: its
// guard locks the rows it may replace or update.
func (r *Rewriter) upsertGuarded(s *ast.InsertStmt, t *Table, w *reads, start, end int) Plan {
	// The rows that may be replaced or updated are those whose key, or
	// the values of one of its other UNIQUE keys, are in the VALUES list.
	colIndex := func(name string) int {
		if len(s.Columns) == 0 && !s.Setlist {
			for i, c := range t.Columns {
				if strings.EqualFold(c, name) {
					return i
				}
			}
			return -1
		}
		for i, c := range s.Columns {
			if strings.EqualFold(c.Name.O, name) {
				return i
			}
		}
		return -1
	}
	keyCol := -1
	if !t.Keyed() {
		keyCol = colIndex(t.Key)
	}
	// A statement that leaves out an AUTO_INCREMENT key inserts each row
	// with a value the server generates, above every key in the table: it
	// can conflict on the table's other unique keys only (unless an
	// INSERT trigger sets the key).
	generatedKey := !t.Keyed() && keyCol < 0 && t.Inserted.KeyAutoIncrement && !t.Inserted.Trigger
	if s.Select != nil || keyCol < 0 && !generatedKey && !t.Keyed() || len(s.Lists) == 0 {
		// The rows it may replace or update are known only once it runs.
		return w.wideGuarded([]*Table{t}, start, end)
	}
	g := &Guard{}
	var keys []string
	for _, row := range s.Lists {
		if generatedKey || t.Keyed() {
			break // (a keyed table's key is looked up as a unique key, below)
		}
		if keyCol >= len(row) || !isIntLiteralOrParam(row[keyCol]) {
			return w.wideGuarded([]*Table{t}, start, end)
		}
		e := row[keyCol]
		keys = append(keys, r.restore(e, w.sess))
		if i := w.paramIndex(e); i >= 0 {
			g.KeysParams = append(g.KeysParams, i)
		}
	}
	// One locking read by equality on a unique index per row and key,
	// joined with UNION ALL: each reads its row by that index, locking it
	// alone (a WHERE of IN lists and ORs leaves the access path to the
	// optimizer, which may scan a small table and lock every row).
	lookup := func(cond string) string {
		return fmt.Sprintf("(SELECT %s FROM %s WHERE %s FOR UPDATE)", t.RecordID(""), t.Qualified(), cond)
	}
	var parts, probes []string
	for _, k := range keys {
		parts = append(parts, lookup(quoteIdent(t.Key)+" = "+k))
	}
	// A unique key with a column the statement leaves to a NULL default
	// conflicts with no row: NULLs are distinct in a unique key.
	var uniqueKeys [][]string
	if t.Keyed() {
		uniqueKeys = append(uniqueKeys, t.KeyNames())
	}
unique:
	for _, uk := range t.UniqueKeys {
		for _, c := range uk {
			if colIndex(c) < 0 && slices.ContainsFunc(t.NullDefault, func(n string) bool { return strings.EqualFold(n, c) }) {
				continue unique
			}
		}
		uniqueKeys = append(uniqueKeys, uk)
	}
	if len(uniqueKeys) == 0 && generatedKey {
		// It conflicts with no row: every row is inserted, as by a plain
		// INSERT.
		return w.readPlan(start, end)
	}
	if len(uniqueKeys) == 0 {
		// The key is the only one it can conflict on: at READ COMMITTED
		// the executor locks these keys' rows (Guard.Keys).
		for _, row := range s.Lists {
			e := row[keyCol]
			kv := KeyValue{Param: w.paramIndex(e)}
			if kv.Param < 0 {
				kv.Literal = r.restore(e, w.sess)
			}
			g.Keys = append(g.Keys, kv)
		}
	}
	for _, uk := range uniqueKeys {
		// (u1, u2) IN ((v11, v12), (v21, v22)): a row of any of those
		// values conflicts too. A column the statement leaves to its
		// default, or a value that is an expression, could conflict with
		// rows the proxy cannot name: every record is folded then.
		if len(uk) == 0 {
			return w.wideGuarded([]*Table{t}, start, end)
		}
		cols := make([]string, len(uk))
		idx := make([]int, len(uk))
		for j, c := range uk {
			cols[j] = quoteIdent(c)
			if idx[j] = colIndex(c); idx[j] < 0 {
				return w.wideGuarded([]*Table{t}, start, end)
			}
		}
		for _, row := range s.Lists {
			conds := make([]string, len(uk))
			for j, k := range idx {
				if k >= len(row) || !isLiteralOrParam(row[k]) {
					return w.wideGuarded([]*Table{t}, start, end)
				}
				conds[j] = cols[j] + " = " + r.restore(unparen(row[k]), w.sess)
				if p := w.paramIndex(unparen(row[k])); p >= 0 {
					g.KeysParams = append(g.KeysParams, p)
				}
			}
			parts = append(parts, lookup(strings.Join(conds, " AND ")))
			probes = append(probes, fmt.Sprintf("(SELECT %s FROM %s WHERE %s)", t.RecordID(""), t.Qualified(), strings.Join(conds, " AND ")))
		}
	}
	g.KeysSQL = strings.Join(parts, " UNION ALL ")
	g.Table = t
	if generatedKey {
		// Its rows are new ones unless they meet a unique key's values:
		// locked by those values when they exist, else as when the
		// rows it writes were unknown (see Guard.Fallback).
		wide, ok := w.wideGuarded([]*Table{t}, start, end).Op.(*Guarded)
		if !ok {
			return w.wideGuarded([]*Table{t}, start, end)
		}
		g.Fallback, g.ProbeSQL = wide.Guards[0], strings.Join(probes, " UNION ALL ")
	}
	return Plan{Op: &Guarded{SQL: apply(w.sql, start, end, w.edits), Guards: []*Guard{g}}, Table: t}
}

// slottedIncrement builds the slotted write for increments of ctrs by
// deltas of the record the client's WHERE clause (where, its text) selects
// through the table source ref. One INSERT … SELECT:
//
//   - reads the base row with the client's whole WHERE under a shared lock
//     (LOCK IN SHARE MODE): no row, no slot; and anything that needs the
//     record's exact value takes the row's exclusive lock first, so it
//     waits for this increment and the increments after it wait for it;
//
//   - adds each delta to one slot row, within the slot's share of the
//     counter's range (see ShareScale): at most (max − base) × 16 / d and
//     at least −(base − min) × 16 / d, d = (slot + 16) × (slot + 17), so
//     that no set of slot rows can take the total out of range. A delta
//     beyond that raises error 1690 from the expression errOutOfShare, and
//     the executor runs the client's statement on the base row instead
//     (where the server raises its own range error, if any). With inline
//     (one counter, an integer literal delta) the slot, the record type
//     and the delta are literals wherever the statement uses them; else
//     the slot is written once, in the derived table `_s`, so that a
//     prepared increment can take it as a parameter (see SlotParam), and
//     the record types and deltas in the derived table `_u`, so that each
//     placeholder occurs once. Derived tables cost the server: inline
//     takes a tenth off its CPU per slotted transaction (BENCHMARKS.md);
//
//   - writes the time assigned to each touch column (ctrs with Touch,
//     values their times) into a slot row of its own, which keeps the
//     later time (see touch.go). A touch column assigned GREATEST(v,
//     itself) (greatest[i]) stays NULL when it is: with a NULL base value
//     the upsert raises errOutOfShare, and the statement runs on the base
//     row (where the slots are folded first, so a later time they hold
//     counts).
//
//   - adds a DECIMAL counter's delta in its units (see Counter.Precision),
//     which must be a whole number of them;
//
//   - checks that the other columns the statement assigns already hold
//     their values (keep, conditions on the base row; see
//     unchangedAssignment): where one does not, the upsert raises
//     errOutOfShare and the statement runs on the base row.
//
// Sorted, the upsert evaluates every slot row's test (the share, the
// values kept, a NULL base value) before it inserts any: ORDER BY the test
// (0, or errOutOfShare), then the slot table's key. Without it the rows
// are inserted as the scan finds them, and a test that fails on a later
// row fails the statement after inserting earlier ones; InnoDB then hands
// their locks to the next row of the slot table as a gap lock, held to
// the end of a transaction at REPEATABLE READ and SERIALIZABLE (see
// Increment.Sorted). An existing slot row's count is tested only as the
// upsert meets it (ON DUPLICATE KEY UPDATE).
//
// Placeholders keep their original order: the deltas and times (in the
// derived table, in SET order), then those of the WHERE clause.
func (r *Rewriter) slottedIncrement(t *Table, ref *tableRef, ctrs []*Counter, values []string, greatest, byRow []bool, keep []string, where string, pick func(int) int, sorted, inline bool) string {
	slot := pick(t.Slots)
	var rows strings.Builder
	decimal := false
	// n is a slot row's delta: the derived table's, or a delta of each
	// row (byRow) where it has one; rt its record type, slotCol its slot.
	n, rt, slotCol := "`_u`.`_slotproxy_n`", "`_u`.`_slotproxy_rt`", "`_s`.`_slotproxy_slot`"
	if inline {
		n, rt, slotCol = "("+values[0]+")", strconv.Itoa(ctrs[0].RecordType), strconv.Itoa(slot)
	}
	var rowDeltas []string
	for i, c := range ctrs {
		v := values[i]
		if c.Touch {
			v = c.encodeTouch(v)
		} else if c.Decimal() {
			v = c.unitsSQL(v)
			decimal = true
		}
		if byRow[i] {
			rowDeltas = append(rowDeltas, fmt.Sprintf(" WHEN %d THEN %s", c.RecordType, v))
			v = "0"
		}
		if i == 0 {
			fmt.Fprintf(&rows, "SELECT %d AS `_slotproxy_rt`, %s AS `_slotproxy_n`", c.RecordType, v)
		} else {
			fmt.Fprintf(&rows, " UNION ALL SELECT %d, %s", c.RecordType, v)
		}
	}
	switch {
	case len(rowDeltas) == 1 && len(ctrs) == 1:
		n = values[0]
		if ctrs[0].Decimal() {
			n = ctrs[0].unitsSQL(n)
		}
	case len(rowDeltas) > 0:
		n = "CASE `_u`.`_slotproxy_rt`" + strings.Join(rowDeltas, "") + " ELSE " + n + " END"
	}
	key := t.RecordID(ref.qual)
	share := func(i int) (lo, hi string) {
		c := ctrs[i]
		if c.Touch {
			lo, hi = c.touchBounds()
			if greatest[i] {
				lo = "IF(" + ref.qual + "." + quoteIdent(c.Name) + " IS NULL, NULL, " + lo + ")"
			}
			return lo, hi
		}
		base := "CAST(" + c.unitsSQL(ref.qual+"."+quoteIdent(c.Name)) + " AS DECIMAL(21,0))"
		lo, hi = c.shareSQL(base, slotCol)
		if c.BoundMin != "" || c.BoundMax != "" {
			// The rule's bounds are no constraint: an increment on the
			// base row may take the base value beyond them, and there a
			// slot's share of the room on the far side rounds to 0 (an
			// increment of a base below the lower bound passes the lower
			// test): the slots keep the total within the bounds only
			// while the base value is (see Counter.BoundMin).
			kl, kh := c.keptBounds()
			in := base + " BETWEEN " + kl + " AND " + kh
			lo, hi = "IF("+in+", "+lo+", NULL)", "IF("+in+", "+hi+", NULL)"
		}
		return lo, hi
	}
	kept := ""
	if decimal {
		// A whole number of units, else the column would round it.
		keep = append(slices.Clip(keep), n+" = FLOOR("+n+")")
	}
	if len(keep) > 0 {
		kept = strings.Join(keep, " AND ") + " AND "
	}
	within := func(v string) string {
		if len(ctrs) == 1 {
			lo, hi := share(0)
			return kept + v + " BETWEEN " + lo + " AND " + hi
		}
		var lo, hi strings.Builder
		lo.WriteString("CASE `_u`.`_slotproxy_rt`")
		hi.WriteString("CASE `_u`.`_slotproxy_rt`")
		for i, c := range ctrs {
			l, h := share(i)
			fmt.Fprintf(&lo, " WHEN %d THEN %s", c.RecordType, l)
			fmt.Fprintf(&hi, " WHEN %d THEN %s", c.RecordType, h)
		}
		return kept + v + " BETWEEN " + lo.String() + " END AND " + hi.String() + " END"
	}
	errOutOfShare := "(18446744073709551615 + (" + key + " = " + key + "))"
	// A NULL base value stays NULL when incremented (c + 1), or becomes
	// the delta (COALESCE(c, 0) + 1): its range bounds are NULL, so the
	// upsert raises errOutOfShare and the executor runs the client's
	// statement on the base row. (A touch column may be NULL: the time
	// assigned replaces it.)
	cur := t.QualifiedSlots() + ".`count`"
	update := fmt.Sprintf("IF(%s, %s + %s, %s)", within(cur+" + "+n), cur, n, errOutOfShare)
	if touches := touchTypes(ctrs); touches != "" {
		// A touch slot keeps the later time.
		update = fmt.Sprintf("IF(`_u`.`_slotproxy_rt` IN (%s), GREATEST(%s, %s), %s)", touches, cur, n, update)
	}
	order := ""
	switch {
	case sorted && inline:
		// One record type (an integer in ORDER BY would name a column).
		order = fmt.Sprintf(" ORDER BY IF(%s, 0, %s), %s", within(n), errOutOfShare, key)
	case sorted:
		order = fmt.Sprintf(" ORDER BY IF(%s, 0, %s), %s, %s", within(n), errOutOfShare, rt, key)
	}
	from := fmt.Sprintf("(SELECT CAST(%d AS SIGNED) AS `_slotproxy_slot`) AS `_s`, (%s) AS `_u`, %s", slot, rows.String(), ref.from)
	if inline {
		from = ref.from
	}
	return fmt.Sprintf("INSERT INTO %s (`record_type`, `slot`, `count`, `record_id`) "+
		"SELECT %s, %s, IF(%s, %s, %s), %s FROM %s WHERE %s%s LOCK IN SHARE MODE "+
		"ON DUPLICATE KEY UPDATE `count` = %s",
		t.QualifiedSlots(), rt, slotCol, within(n), n, errOutOfShare, key, from, parenthesize(where), order, update)
}

// probe returns the client's statement sql[start:end] made to touch no row
// (its WHERE clause sql[ws:we] and FALSE) and with every placeholder NULL:
// running it makes the server check the client's privileges for exactly
// that statement, and nothing else.
func (w *reads) probe(start, end, ws, we int) string {
	var edits []edit
	var inner []edit
	for p, i := range w.params {
		_ = i
		off := p.Offset
		if off < start || off >= end {
			continue
		}
		e := edit{start: off, end: off + 1, text: "NULL"}
		if off >= ws && off < we {
			inner = append(inner, edit{start: off - ws, end: off - ws + 1, text: "NULL"})
		} else {
			edits = append(edits, e)
		}
	}
	where := apply(w.sql[ws:we], 0, we-ws, inner)
	edits = append(edits, edit{start: ws, end: we, text: parenthesize(where) + " AND FALSE"})
	return apply(w.sql, start, end, edits)
}

// keyConjunct returns the value sides of a `key = v` comparison (either
// order) or a `key IN (v, …)` list that where requires (where itself, or
// one of its top-level AND operands), each v a literal or a placeholder:
// the keys of the records an increment may write.
// namedByConjuncts walks where's top-level AND conjuncts and returns, by
// the lower-case name of a column of ref, the first value each col = v (v
// on either side) gives it and the first list each col IN (v, …) does,
// where v is a literal or a placeholder (and no NOT IN, no subquery).
func namedByConjuncts(where ast.ExprNode, ref *tableRef) (eq map[string]ast.ExprNode, in map[string][]ast.ExprNode) {
	eq, in = map[string]ast.ExprNode{}, map[string][]ast.ExprNode{}
	column := func(e ast.ExprNode) string {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		if !ok || c.Name.Table.O != "" && c.Name.Table.L != ref.match {
			return ""
		}
		return c.Name.Name.L
	}
	note := func(col string, v ast.ExprNode) {
		if _, seen := eq[col]; !seen {
			eq[col] = unparen(v)
		}
	}
	var walk func(e ast.ExprNode)
	walk = func(e ast.ExprNode) {
		switch x := unparen(e).(type) {
		case *ast.BinaryOperationExpr:
			switch {
			case x.Op == opcode.LogicAnd:
				walk(x.L)
				walk(x.R)
			case x.Op != opcode.EQ:
			case column(x.L) != "" && isLiteralOrParam(x.R):
				note(column(x.L), x.R)
			case column(x.R) != "" && isLiteralOrParam(x.L):
				note(column(x.R), x.L)
			}
		case *ast.PatternInExpr:
			col := column(x.Expr)
			if x.Not || x.Sel != nil || col == "" || len(x.List) == 0 || in[col] != nil {
				return
			}
			for _, v := range x.List {
				if !isLiteralOrParam(v) {
					return
				}
			}
			in[col] = x.List
		}
	}
	walk(where)
	return eq, in
}

// uniqueConjuncts reports whether where's top-level conjuncts name every
// column of one of t's UNIQUE keys (other than the primary key, unless t
// is Keyed) by equality with a literal or placeholder (col = v), or a
// single-column one by col IN (v, …): the rows it matches are at most one
// per value, found by that key's index (Django's .filter(token=…).update(),
// phpBB's word_text IN (…)). one: a key named by equalities alone, so that
// at most one row matches.
func uniqueConjuncts(where ast.ExprNode, t *Table, ref *tableRef) (ok, one, primary bool) {
	eqVals, inVals := namedByConjuncts(where, ref)
	eq := func(col string) bool { _, ok := eqVals[col]; return ok }
	in := func(col string) bool { _, ok := inVals[col]; return ok }
	keys := t.UniqueKeys
	if t.Keyed() {
		keys = append([][]string{t.KeyNames()}, keys...)
	}
	for i, uk := range keys {
		if len(uk) == 0 {
			continue
		}
		all, byEq := true, true
		for _, c := range uk {
			all = all && (eq(strings.ToLower(c)) || len(uk) == 1 && in(strings.ToLower(c)))
			byEq = byEq && eq(strings.ToLower(c))
		}
		if all {
			ok, one = true, one || byEq
			primary = primary || t.Keyed() && i == 0
		}
	}
	return ok, one, primary
}

func keyConjunct(where ast.ExprNode, t *Table, ref *tableRef) []ast.ExprNode {
	for {
		p, ok := where.(*ast.ParenthesesExpr)
		if !ok {
			break
		}
		where = p.Expr
	}
	if b, ok := where.(*ast.BinaryOperationExpr); ok && (b.Op == opcode.LogicAnd) {
		if k := keyConjunct(b.L, t, ref); k != nil {
			return k
		}
		return keyConjunct(b.R, t, ref)
	}
	isKey := func(e ast.ExprNode) bool {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		return ok && strings.EqualFold(c.Name.Name.O, t.Key) && (c.Name.Table.O == "" || c.Name.Table.L == ref.match)
	}
	switch x := where.(type) {
	case *ast.BinaryOperationExpr:
		if x.Op != opcode.EQ {
			return nil
		}
		switch {
		case isKey(x.L) && isLiteralOrParam(x.R):
			return []ast.ExprNode{unparen(x.R)}
		case isKey(x.R) && isLiteralOrParam(x.L):
			return []ast.ExprNode{unparen(x.L)}
		}
	case *ast.PatternInExpr:
		if x.Not || x.Sel != nil || !isKey(x.Expr) || len(x.List) == 0 {
			return nil
		}
		keys := make([]ast.ExprNode, len(x.List))
		for i, v := range x.List {
			if !isLiteralOrParam(v) {
				return nil
			}
			keys[i] = unparen(v)
		}
		return keys
	}
	return nil
}

// isLiteralOrParam accepts a placeholder, a number or string literal, or a
// negated number.
func isLiteralOrParam(e ast.ExprNode) bool {
	switch x := unparen(e).(type) {
	case *driver.ParamMarkerExpr:
		return true
	case *driver.ValueExpr:
		switch x.Kind() {
		case driver.KindInt64, driver.KindUint64, driver.KindString, driver.KindMysqlDecimal, driver.KindFloat64:
			return true
		}
	case *ast.UnaryOperationExpr:
		return x.Op == opcode.Minus && isLiteralOrParam(x.V)
	}
	return false
}

// keyEquality returns the value side of `key = v` (either order) when where
// is exactly that, with v an integer literal or a placeholder.
func keyEquality(where ast.ExprNode, t *Table, ref *tableRef) ast.ExprNode {
	for {
		p, ok := where.(*ast.ParenthesesExpr)
		if !ok {
			break
		}
		where = p.Expr
	}
	b, ok := where.(*ast.BinaryOperationExpr)
	if !ok || b.Op != opcode.EQ {
		return nil
	}
	isKey := func(e ast.ExprNode) bool {
		c, ok := e.(*ast.ColumnNameExpr)
		return ok && strings.EqualFold(c.Name.Name.O, t.Key) && (c.Name.Table.O == "" || c.Name.Table.L == ref.match)
	}
	switch {
	case isKey(b.L) && isIntLiteralOrParam(b.R):
		return b.R
	case isKey(b.R) && isIntLiteralOrParam(b.L):
		return b.L
	}
	return nil
}

func limitOK(l *ast.Limit) bool {
	if l == nil {
		return true
	}
	if l.Offset != nil {
		return false
	}
	v, ok := l.Count.(*driver.ValueExpr)
	return ok && v.GetInt64() >= 1
}

// isIntLiteralOrParam accepts a placeholder, an integer literal, or a
// negated integer literal.
func isIntLiteralOrParam(e ast.ExprNode) bool {
	switch x := e.(type) {
	case *driver.ParamMarkerExpr:
		return true
	case *driver.ValueExpr:
		k := x.Kind()
		return k == driver.KindInt64 || k == driver.KindUint64
	case *ast.UnaryOperationExpr:
		if x.Op == opcode.Minus {
			v, ok := x.V.(*driver.ValueExpr)
			return ok && (v.Kind() == driver.KindInt64 || v.Kind() == driver.KindUint64)
		}
	}
	return false
}

// intLiteral returns an integer literal (or its negation) as a decimal
// integer, or "" for anything else.
func intLiteral(e ast.ExprNode) string {
	neg := false
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus {
		e, neg = unparen(u.V), true
	}
	v, ok := e.(*driver.ValueExpr)
	if !ok {
		return ""
	}
	var s string
	switch v.Kind() {
	case driver.KindInt64:
		s = strconv.FormatInt(v.GetInt64(), 10)
	case driver.KindUint64:
		s = strconv.FormatUint(v.GetUint64(), 10)
	default:
		return ""
	}
	if neg {
		if strings.HasPrefix(s, "-") {
			return s[1:]
		}
		if s != "0" {
			s = "-" + s
		}
	}
	return s
}

func isZero(e ast.ExprNode) bool {
	v, ok := e.(*driver.ValueExpr)
	if ok && v.Kind() == driver.KindMysqlDecimal {
		return strings.Trim(v.GetMysqlDecimal().String(), "0.-") == ""
	}
	return ok && (v.Kind() == driver.KindInt64 || v.Kind() == driver.KindUint64) && v.GetInt64() == 0
}

// constDelta returns the value of e when it is an expression of integer
// literals by +, - and * (c + (2 * 3)), as a decimal literal: every literal
// and every intermediate value within ±2^53, so that the server's BIGINT
// arithmetic computes exactly this and overflows nowhere. The slotted
// increment sends the expression as written; the plan uses its value
// (zero or not, the sum of coalesced increments), so it is planned from
// each statement's own values, never from a template.
func constDelta(e ast.ExprNode) (string, bool) {
	limit := big.NewInt(1 << 53)
	var eval func(ast.ExprNode) (*big.Int, bool)
	eval = func(e ast.ExprNode) (*big.Int, bool) {
		var v *big.Int
		switch x := unparen(e).(type) {
		case *driver.ValueExpr:
			if x.Kind() != driver.KindInt64 {
				return nil, false
			}
			v = big.NewInt(x.GetInt64())
		case *ast.UnaryOperationExpr:
			if x.Op != opcode.Minus {
				return nil, false
			}
			a, ok := eval(x.V)
			if !ok {
				return nil, false
			}
			v = a.Neg(a)
		case *ast.BinaryOperationExpr:
			a, ok1 := eval(x.L)
			b, ok2 := eval(x.R)
			if !ok1 || !ok2 {
				return nil, false
			}
			switch x.Op {
			case opcode.Plus:
				v = a.Add(a, b)
			case opcode.Minus:
				v = a.Sub(a, b)
			case opcode.Mul:
				v = a.Mul(a, b)
			default:
				return nil, false
			}
		default:
			return nil, false
		}
		return v, v.CmpAbs(limit) <= 0
	}
	if _, ok := unparen(e).(*ast.BinaryOperationExpr); !ok {
		return "", false // a literal alone is intLiteral's
	}
	v, ok := eval(e)
	if !ok {
		return "", false
	}
	return v.String(), true
}

// constExpression reports whether e is an expression of integer literals
// by +, - and * (unary minus too), whatever their values (see constDelta).
func constExpression(e ast.ExprNode) bool {
	switch x := unparen(e).(type) {
	case *ast.UnaryOperationExpr:
		return x.Op == opcode.Minus && constExpression(x.V)
	case *ast.BinaryOperationExpr:
		return (x.Op == opcode.Plus || x.Op == opcode.Minus || x.Op == opcode.Mul) && constExpression(x.L) && constExpression(x.R)
	case *driver.ValueExpr:
		return x.Kind() == driver.KindInt64 || x.Kind() == driver.KindUint64
	}
	return false
}

// wholeUnits reports whether the decimal literal e (possibly negated) has
// at most scale digits after its point that are not trailing zeros.
func wholeUnits(e ast.ExprNode, scale int) bool {
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus {
		e = unparen(u.V)
	}
	v, ok := e.(*driver.ValueExpr)
	if !ok || v.Kind() != driver.KindMysqlDecimal {
		return false
	}
	_, frac, _ := strings.Cut(v.GetMysqlDecimal().String(), ".")
	return len(strings.TrimRight(frac, "0")) <= scale
}

// isDecimalLiteral reports whether e is a decimal literal (1.5), possibly
// negated: a delta a DECIMAL counter takes (see Counter.Precision).
func isDecimalLiteral(e ast.ExprNode) bool {
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus {
		e = unparen(u.V)
	}
	v, ok := e.(*driver.ValueExpr)
	return ok && v.Kind() == driver.KindMysqlDecimal
}

// paramIndex is the position of a placeholder among the statement's
// placeholders (in text order), or -1 for anything else.
func (w *reads) paramIndex(e ast.ExprNode) int {
	p, ok := e.(*driver.ParamMarkerExpr)
	if !ok {
		return -1
	}
	if i, ok := w.params[p]; ok {
		return i
	}
	return -1
}

// paramsIn lists the indexes of the placeholders inside e in text order.
func (w *reads) paramsIn(e ast.ExprNode) []int {
	var c paramCollector
	e.Accept(&c)
	out := make([]int, 0, len(c.found))
	for _, p := range c.found {
		out = append(out, w.params[p])
	}
	return out
}

// numberParams indexes a statement's placeholders by their text position
// (the parser leaves their Order at zero).
func numberParams(st ast.Node) map[*driver.ParamMarkerExpr]int {
	var c paramCollector
	st.Accept(&c)
	sort.SliceStable(c.found, func(i, j int) bool { return c.found[i].Offset < c.found[j].Offset })
	m := make(map[*driver.ParamMarkerExpr]int, len(c.found))
	for i, p := range c.found {
		m[p] = i
	}
	return m
}

type paramCollector struct{ found []*driver.ParamMarkerExpr }

func (c *paramCollector) Enter(n ast.Node) (ast.Node, bool) {
	if p, ok := n.(*driver.ParamMarkerExpr); ok {
		c.found = append(c.found, p)
	}
	return n, false
}
func (c *paramCollector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// restore prints a literal or placeholder with the parser's own quoting,
// honouring the session's NO_BACKSLASH_ESCAPES.
func (r *Rewriter) restore(e ast.ExprNode, sess Session) string {
	flags := format.DefaultRestoreFlags | format.RestoreStringWithoutDefaultCharset
	if !sess.NoBackslashEscapes {
		flags |= format.RestoreStringEscapeBackslash
	}
	var b strings.Builder
	if err := e.Restore(format.NewRestoreCtx(flags, &b)); err != nil {
		return "NULL"
	}
	return b.String()
}

// exprEnd finds where the expression starting at start ends: the end of the
// statement's WHERE clause text, i.e. before ORDER BY, LIMIT, FOR, or the
// statement's end. It scans tokens outside quotes and parentheses.
func exprEnd(sql string, sess Session, start int) int {
	depth := 0
	i := start
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '\'' || (c == '"' && !sess.ANSIQuotes):
			// Strings end as the server reads them: backslash escapes only
			// without NO_BACKSLASH_ESCAPES.
			end := stringEnd(sql, i, !sess.NoBackslashEscapes)
			if end < 0 {
				return -1
			}
			i = end
			continue
		case c == '`' || (c == '"' && sess.ANSIQuotes):
			end := identEnd(sql, i, sess.ANSIQuotes)
			if end < 0 {
				return -1
			}
			i = end
			continue
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return trimEnd(sql, start, i)
			}
			depth--
		case c == ';':
			if depth == 0 {
				return trimEnd(sql, start, i)
			}
		case depth == 0 && (c == 'O' || c == 'o' || c == 'L' || c == 'l' || c == 'F' || c == 'f') && (i == 0 || !isIdentByte(sql[i-1])):
			for _, kw := range []string{"ORDER", "LIMIT", "FOR", "LOCK", "RETURNING"} {
				if len(sql)-i > len(kw) && strings.EqualFold(sql[i:i+len(kw)], kw) && !isIdentByte(sql[i+len(kw)]) {
					return trimEnd(sql, start, i)
				}
			}
		}
		if j := skipSpace(sql, i); j > i {
			i = j
			continue
		}
		i++
	}
	return trimEnd(sql, start, len(sql))
}

func trimEnd(sql string, start, end int) int {
	for end > start && (sql[end-1] == ' ' || sql[end-1] == '\n' || sql[end-1] == '\t' || sql[end-1] == '\r') {
		end--
	}
	return end
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// parenthesize wraps a client's WHERE condition in parentheses; the closing
// one goes on a new line when the text may end in a # or -- comment, which
// would otherwise swallow it.
func parenthesize(cond string) string {
	if strings.Contains(cond, "#") || strings.Contains(cond, "--") {
		return "(" + cond + "\n)"
	}
	return "(" + cond + ")"
}

// Texts of slottedIncrement's statement around its slot (after slotAt)
// and its delta (between deltaAt and deltaEnd), which coalescing replaces.
const (
	slotAt   = " FROM (SELECT CAST("
	deltaAt  = " AS `_slotproxy_rt`, "
	deltaEnd = " AS `_slotproxy_n`"
)

// batchSQL returns the increment's batch statement (see Increment.batch)
// with the plan's literals and slot in place; "" when it has none.
func (o *Increment) batchSQL() string {
	if o.batch == "" || o.batchMap == nil {
		return o.batch
	}
	b, err := o.batchMap(o.batch)
	if err != nil {
		return ""
	}
	return b
}

// spans locates the slot and the delta in b, the batch statement of an
// increment: b[ds:de] is the delta, b[ss:se] the slot.
func (o *Increment) spans() (b string, ds, de, ss, se int, ok bool) {
	b = o.batchSQL()
	if b == "" {
		return "", 0, 0, 0, 0, false
	}
	ds = strings.Index(b, deltaAt)
	if ds < 0 || strings.Count(b, deltaAt) != 1 {
		return "", 0, 0, 0, 0, false
	}
	ds += len(deltaAt)
	de = strings.Index(b[ds:], deltaEnd)
	ss = strings.Index(b, slotAt)
	if de < 0 || ss < 0 {
		return "", 0, 0, 0, 0, false
	}
	de += ds
	ss += len(slotAt)
	se = ss
	for se < len(b) && b[se] >= '0' && b[se] <= '9' {
		se++
	}
	if se == ss || se > ds { // the slot comes first
		return "", 0, 0, 0, 0, false
	}
	return b, ds, de, ss, se, true
}

// CoalesceKey returns the batch statement of an increment (see
// Increment.batch) with its slot and its delta masked: increments with the
// same key (in sessions whose state gives them the same meaning) differ in
// nothing else, and their deltas can be sent as one (WithDelta). "" when o
// cannot be coalesced.
func (o *Increment) CoalesceKey() string {
	b, ds, de, ss, se, ok := o.spans()
	if !ok {
		return ""
	}
	return b[:ss] + "?" + b[se:ds] + "?" + b[de:]
}

// WithDelta returns the batch statement of an increment with delta (a
// decimal integer) in place of its own: the increment of the record by
// that amount, in the same slot, within the same share of the range.
func (o *Increment) WithDelta(delta string) (string, bool) {
	b, ds, de, _, _, ok := o.spans()
	if !ok {
		return "", false
	}
	return b[:ds] + "(" + delta + ")" + b[de:], true
}
