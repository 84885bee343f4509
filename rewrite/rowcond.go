package rewrite

import (
	"math/big"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// Records found by a condition on their rows: an increment whose WHERE
// clause names no key (OpenCart's `WHERE code = 'order_sale'` on an
// unindexed column, Magento's `WHERE product_id IN (…) AND website_id =
// 0`) is slotted when the condition is one the slotted increment's locking
// read evaluates exactly as the UPDATE does (rowCondition). The read then
// finds the same rows, locks them in share mode where the UPDATE locks
// them exclusively (every row its scan reads, at REPEATABLE READ), and the
// records it matched are known only once it ran, as for a UNIQUE key's.

// colKind is the kind of value a column holds, for comparisons that
// convert nothing.
type colKind uint8

const (
	kindOther colKind = iota
	kindInt           // an integer column (Inserted.IntRanges)
	kindStr           // a CHAR or VARCHAR column (Inserted.StrLens)
)

// rowColumn returns the lower-case name and kind of e when it is a column
// of ref's table other than a counter or touch column.
func rowColumn(e ast.ExprNode, ref *tableRef) (string, colKind, bool) {
	c, ok := unparen(e).(*ast.ColumnNameExpr)
	if !ok || c.Name.Table.O != "" && c.Name.Table.L != ref.match || ref.table.counter(c.Name.Name.O) != nil {
		return "", kindOther, false
	}
	name := c.Name.Name.L
	if _, ok := ref.table.Inserted.IntRanges[name]; ok {
		return name, kindInt, true
	}
	if _, ok := ref.table.Inserted.StrLens[name]; ok {
		return name, kindStr, true
	}
	return name, kindOther, slices.ContainsFunc(ref.table.Columns, func(col string) bool { return strings.EqualFold(col, name) })
}

// literalOf reports whether e is a literal a column of kind k is compared
// with without a conversion that could warn: a number (possibly negated)
// for an integer column, an ASCII string for a CHAR or VARCHAR one.
func literalOf(e ast.ExprNode, k colKind) bool {
	e = unparen(e)
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus && k == kindInt {
		e = unparen(u.V)
	}
	v, ok := e.(*driver.ValueExpr)
	if !ok {
		return false
	}
	switch k {
	case kindInt:
		switch v.Kind() {
		case driver.KindInt64, driver.KindUint64, driver.KindMysqlDecimal:
			return true
		}
	case kindStr:
		if v.Kind() != driver.KindString {
			return false
		}
		s := v.GetString()
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return false
			}
		}
		return true
	}
	return false
}

// rowCondition reports whether where is a condition on ref's row that a
// SELECT of the row evaluates exactly as the UPDATE does: AND, OR, XOR and
// NOT of comparisons (=, <>, <, <=, >, >=, <=>) of the table's integer
// columns with number literals and of its CHAR and VARCHAR columns with
// ASCII string literals, IN lists and BETWEEN of such literals, and IS
// [NOT] NULL of those columns and of counters (a counter's total is NULL
// exactly when its base value is). No placeholder, function,
// subquery or other table: nothing in it converts a value (which warns,
// and in strict mode fails, once per evaluation), reads a counter's value
// or depends on when it runs.
func rowCondition(where ast.ExprNode, ref *tableRef) bool {
	var cond func(e ast.ExprNode) bool
	cond = func(e ast.ExprNode) bool {
		switch x := unparen(e).(type) {
		case *ast.BinaryOperationExpr:
			switch x.Op {
			case opcode.LogicAnd, opcode.LogicOr, opcode.LogicXor:
				return cond(x.L) && cond(x.R)
			case opcode.EQ, opcode.NE, opcode.LT, opcode.LE, opcode.GT, opcode.GE, opcode.NullEQ:
				if _, k, ok := rowColumn(x.L, ref); ok && literalOf(x.R, k) {
					return true
				}
				_, k, ok := rowColumn(x.R, ref)
				return ok && literalOf(x.L, k)
			}
		case *ast.UnaryOperationExpr:
			return (x.Op == opcode.Not || x.Op == opcode.Not2) && cond(x.V)
		case *ast.PatternInExpr:
			_, k, ok := rowColumn(x.Expr, ref)
			if !ok || x.Sel != nil || len(x.List) == 0 {
				return false
			}
			for _, v := range x.List {
				if !literalOf(v, k) {
					return false
				}
			}
			return true
		case *ast.BetweenExpr:
			_, k, ok := rowColumn(x.Expr, ref)
			return ok && literalOf(x.Left, k) && literalOf(x.Right, k)
		case *ast.IsNullExpr:
			c, ok := unparen(x.Expr).(*ast.ColumnNameExpr)
			if !ok || c.Name.Table.O != "" && c.Name.Table.L != ref.match {
				return false
			}
			if ctr := ref.table.counter(c.Name.Name.O); ctr != nil {
				return !ctr.Touch
			}
			// Not a column of another kind: a generated column (which
			// IntRanges and StrLens leave out) may compute its NULL from
			// a counter's value, which the base row alone does not hold.
			_, k, ok := rowColumn(c, ref)
			return ok && k != kindOther
		}
		return false
	}
	return cond(where)
}

// caseDelta is a counter's increment by a CASE on another column of the
// row (Magento's `qty = CASE product_id WHEN 14 THEN qty-2 WHEN 27 THEN
// qty-1 ELSE qty END`): SQL is the delta of each row, the CASE with every
// branch's delta in place of the branch (`CASE t.product_id WHEN 14 THEN
// -2 WHEN 27 THEN -1 END`), which the slotted increment's read evaluates
// on the row, choosing the branch the UPDATE chooses.
type caseDelta struct {
	SQL string
}

// caseIncrement recognises `c = CASE x WHEN v1 THEN c ± d1 … [ELSE c] END`
// for a counter c, x a column of ref's table compared with literals of its
// own kind (see literalOf), each d an integer literal that is not 0, when
// where requires x = v or x IN (v, …) with every value among the WHEN
// values: every row the statement matches then takes a branch, and changes
// (the ELSE, which changes nothing, or yields NULL, is never taken). It
// returns nil for anything else.
func (r *Rewriter) caseIncrement(a *ast.Assignment, ref *tableRef, where ast.ExprNode, sess Session) *caseDelta {
	ce, ok := unparen(a.Expr).(*ast.CaseExpr)
	ctr := ref.table.counter(a.Column.Name.O)
	if !ok || ce.Value == nil || len(ce.WhenClauses) == 0 || where == nil || ctr == nil || ctr.Touch {
		return nil
	}
	col, k, ok := rowColumn(ce.Value, ref)
	if !ok || k == kindOther {
		return nil
	}
	isSelf := func(e ast.ExprNode) bool {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		return ok && strings.EqualFold(c.Name.Name.O, ctr.Name) && (c.Name.Table.O == "" || c.Name.Table.L == ref.match)
	}
	if ce.ElseClause != nil && !isSelf(ce.ElseClause) {
		return nil
	}
	var sql strings.Builder
	sql.WriteString("CASE " + ref.qual + "." + quoteIdent(col))
	var whens []string
	for _, wc := range ce.WhenClauses {
		if !literalOf(wc.Expr, k) {
			return nil
		}
		b, ok := unparen(wc.Result).(*ast.BinaryOperationExpr)
		if !ok || b.Op != opcode.Plus && b.Op != opcode.Minus {
			return nil
		}
		var d ast.ExprNode
		switch {
		case isSelf(b.L):
			d = b.R
		case isSelf(b.R) && b.Op == opcode.Plus:
			d = b.L
		default:
			return nil
		}
		lit := intLiteral(unparen(d))
		n, ok := new(big.Int).SetString(lit, 10)
		if lit == "" || !ok || n.Sign() == 0 {
			return nil
		}
		if b.Op == opcode.Minus {
			n.Neg(n)
		}
		v := r.restore(unparen(wc.Expr), sess)
		whens = append(whens, v)
		sql.WriteString(" WHEN " + v + " THEN " + n.String())
	}
	sql.WriteString(" END")
	// Every value the WHERE clause allows x is a WHEN value.
	eq, in := namedByConjuncts(where, ref)
	values := in[col]
	if v, ok := eq[col]; ok {
		values = []ast.ExprNode{v}
	}
	if len(values) == 0 {
		return nil
	}
	for _, v := range values {
		if !literalOf(v, k) || !slices.Contains(whens, r.restore(unparen(v), sess)) {
			return nil
		}
	}
	return &caseDelta{SQL: sql.String()}
}
