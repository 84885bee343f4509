package catalog

import (
	"context"
	"fmt"
	"math/big"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// integerRanges are the lowest and highest values of MySQL's integer
// types, signed and unsigned, by DATA_TYPE.
var integerRanges = map[string][2][2]string{
	//            signed                                         unsigned
	"tinyint":   {{"-128", "127"}, {"0", "255"}},
	"smallint":  {{"-32768", "32767"}, {"0", "65535"}},
	"mediumint": {{"-8388608", "8388607"}, {"0", "16777215"}},
	"int":       {{"-2147483648", "2147483647"}, {"0", "4294967295"}},
	"bigint":    {{"-9223372036854775808", "9223372036854775807"}, {"0", "18446744073709551615"}},
}

// typeRange returns the range of values the integer column c accepts, as
// decimal literals.
func (c *column) typeRange() (lo, hi string) {
	r, ok := integerRanges[strings.ToLower(c.dataType)]
	if !ok {
		return "", ""
	}
	u := 0
	if c.unsigned() {
		u = 1
	}
	return r[u][0], r[u][1]
}

// counterRange is what the server enforces on the values of a counter
// column: its type's range narrowed by the CHECK constraints that bound it
// (lo, hi), or baseOnly when a CHECK constraint reads the column in a way
// that is not a constant bound (c < other_column, c % 2 = 0, an OR): then
// only the base row can decide whether a total is allowed.
type counterRange struct {
	lo, hi   *big.Int
	baseOnly []string // why: one reason per such constraint
}

// rangeOf returns the range of column c of t.
func rangeOf(t *table, c *column) counterRange {
	lo, hi := c.typeRange()
	r := counterRange{lo: mustInt(lo), hi: mustInt(hi)}
	for _, chk := range t.checks {
		expr, err := parseCheck(chk.clause)
		if err != nil {
			if mentions(chk.clause, c.name) {
				r.baseOnly = append(r.baseOnly, "CHECK constraint "+chk.name+" may read "+c.name+" and does not parse")
			}
			continue
		}
		if !readsColumn(expr, c.name) {
			continue
		}
		if !r.narrow(expr, c.name) {
			r.baseOnly = append(r.baseOnly, "CHECK constraint "+chk.name+" reads "+c.name+" in a way that is not a constant bound")
		}
	}
	return r
}

func mustInt(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic("catalog: bad integer literal " + s)
	}
	return v
}

// mentions reports, for a clause the parser did not take, whether it may
// name the column.
func mentions(clause, col string) bool {
	return strings.Contains(strings.ToLower(clause), strings.ToLower(col))
}

// parseCheck parses a CHECK constraint's clause as information_schema
// shows it.
func parseCheck(clause string) (ast.ExprNode, error) {
	stmts, _, err := parser.New().Parse("SELECT 1 FROM DUAL WHERE "+clause, "", "")
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 {
		return nil, fmt.Errorf("not one expression")
	}
	sel, ok := stmts[0].(*ast.SelectStmt)
	if !ok || sel.Where == nil {
		return nil, fmt.Errorf("not an expression")
	}
	return sel.Where, nil
}

// columnFinder collects whether an expression names a column.
type columnFinder struct {
	col   string
	found bool
}

func (f *columnFinder) Enter(n ast.Node) (ast.Node, bool) {
	if c, ok := n.(*ast.ColumnNameExpr); ok && strings.EqualFold(c.Name.Name.O, f.col) {
		f.found = true
	}
	return n, f.found
}

func (f *columnFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func readsColumn(e ast.ExprNode, col string) bool {
	f := &columnFinder{col: col}
	e.Accept(f)
	return f.found
}

// narrow narrows r by the constraint e on column col: a conjunction (AND)
// of comparisons of col with integer constants (col >= 0, 5 > col, col
// BETWEEN 0 AND 100), and conjuncts that do not read col. It reports false
// when e reads col in any other way. A CHECK constraint is met when it is
// not false, so a NULL counter is allowed by any of these, as it is by the
// column's type.
func (r *counterRange) narrow(e ast.ExprNode, col string) bool {
	for {
		p, ok := e.(*ast.ParenthesesExpr)
		if !ok {
			break
		}
		e = p.Expr
	}
	if !readsColumn(e, col) {
		return true
	}
	isCol := func(e ast.ExprNode) bool {
		for {
			p, ok := e.(*ast.ParenthesesExpr)
			if !ok {
				break
			}
			e = p.Expr
		}
		c, ok := e.(*ast.ColumnNameExpr)
		return ok && strings.EqualFold(c.Name.Name.O, col)
	}
	switch x := e.(type) {
	case *ast.BinaryOperationExpr:
		switch x.Op {
		case opcode.LogicAnd:
			return r.narrow(x.L, col) && r.narrow(x.R, col)
		case opcode.GE, opcode.GT, opcode.LE, opcode.LT, opcode.EQ:
		default:
			return false
		}
		op := x.Op
		var v *big.Int
		switch {
		case isCol(x.L):
			v = constInt(x.R)
		case isCol(x.R):
			v = constInt(x.L)
			op = map[opcode.Op]opcode.Op{opcode.GE: opcode.LE, opcode.GT: opcode.LT, opcode.LE: opcode.GE, opcode.LT: opcode.GT, opcode.EQ: opcode.EQ}[op]
		}
		if v == nil {
			return false
		}
		switch op {
		case opcode.GE:
			r.atLeast(v)
		case opcode.GT:
			r.atLeast(new(big.Int).Add(v, big.NewInt(1)))
		case opcode.LE:
			r.atMost(v)
		case opcode.LT:
			r.atMost(new(big.Int).Sub(v, big.NewInt(1)))
		case opcode.EQ:
			r.atLeast(v)
			r.atMost(v)
		}
		return true
	case *ast.BetweenExpr:
		if x.Not || !isCol(x.Expr) {
			return false
		}
		lo, hi := constInt(x.Left), constInt(x.Right)
		if lo == nil || hi == nil {
			return false
		}
		r.atLeast(lo)
		r.atMost(hi)
		return true
	}
	return false
}

func (r *counterRange) atLeast(v *big.Int) {
	if v.Cmp(r.lo) > 0 {
		r.lo = v
	}
}

func (r *counterRange) atMost(v *big.Int) {
	if v.Cmp(r.hi) < 0 {
		r.hi = v
	}
}

// constInt returns the value of an integer literal, possibly negated, or
// nil.
func constInt(e ast.ExprNode) *big.Int {
	for {
		p, ok := e.(*ast.ParenthesesExpr)
		if !ok {
			break
		}
		e = p.Expr
	}
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus {
		if v := constInt(u.V); v != nil {
			return v.Neg(v)
		}
		return nil
	}
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Plus {
		return constInt(u.V)
	}
	v, ok := e.(*test_driver.ValueExpr)
	if !ok {
		return nil
	}
	switch x := v.GetValue().(type) {
	case int64:
		return big.NewInt(x)
	case uint64:
		return new(big.Int).SetUint64(x)
	}
	return nil
}

// check is one CHECK constraint of a table (MariaDB's column-level ones
// too).
type check struct {
	name, clause string
}

// readChecks adds the CHECK constraints of the tables of the schemas in
// (the query's placeholders, args) to tables. MariaDB names each
// constraint's table in information_schema.CHECK_CONSTRAINTS; MySQL has it
// in TABLE_CONSTRAINTS only.
func readChecks(ctx context.Context, conn *client.Conn, in string, args []any, tables map[[2]string]*table) error {
	rows, err := exec(ctx, conn, "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "+
		"WHERE CONSTRAINT_SCHEMA IN "+in+" ORDER BY CONSTRAINT_NAME", args...)
	if err != nil {
		rows, err = exec(ctx, conn, "SELECT c.CONSTRAINT_SCHEMA, t.TABLE_NAME, c.CONSTRAINT_NAME, c.CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS c "+
			"JOIN information_schema.TABLE_CONSTRAINTS t ON t.CONSTRAINT_SCHEMA = c.CONSTRAINT_SCHEMA AND t.CONSTRAINT_NAME = c.CONSTRAINT_NAME AND t.CONSTRAINT_TYPE = 'CHECK' AND t.ENFORCED = 'YES' "+
			"WHERE c.CONSTRAINT_SCHEMA IN "+in+" ORDER BY c.CONSTRAINT_NAME", args...)
		if err != nil {
			return fmt.Errorf("reading the schema's CHECK constraints: %w", err)
		}
	}
	for _, row := range rows {
		if t := tables[[2]string{row[0], row[1]}]; t != nil {
			t.checks = append(t.checks, check{name: row[2], clause: row[3]})
		}
	}
	return nil
}
