package advise

import (
	"errors"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions for the parser
)

// Shape is a counter increment found in a statement's text: an UPDATE of
// one table that assigns at least one `c = c + ?`, `c = ? + c` or
// `c = c - ?`, filtered by `col = ?` alone.
type Shape struct {
	// Schema is the table's schema as the statement names it; empty when
	// the statement leaves it to the session's default database.
	Schema string
	// Table is the table's name.
	Table string
	// Key is the column of the WHERE equality, as the statement spells it.
	Key string
	// Counters are the incremented columns, in statement order.
	Counters []string
	// Others are the columns the statement assigns other than by
	// incrementing them. slotproxy's fast path needs none.
	Others []string
	// Unsupported lists what keeps slotproxy from rewriting the statement
	// even with a rule (IGNORE, ORDER BY), for the evidence.
	Unsupported []string
}

// errNotIncrement is returned by ParseShape for a statement that parses
// but is not a counter increment.
var errNotIncrement = errors.New("not a counter increment by one column")

// shapeParser parses statement texts. The TiDB parser is not safe for
// concurrent use, so neither is a shapeParser.
type shapeParser struct {
	p *parser.Parser
}

func newShapeParser() *shapeParser { return &shapeParser{p: parser.New()} }

// ParseShape parses text, a statement digest (literals as '?', possibly
// backquoted, possibly truncated) or a statement as sent, and returns its
// increment shape. A text that does not parse returns the parser's error;
// one that is not an increment returns an error as well.
func ParseShape(text string) (*Shape, error) {
	return newShapeParser().parse(text)
}

// parse implements ParseShape.
func (sp *shapeParser) parse(text string) (*Shape, error) {
	if !looksLikeUpdate(text) {
		return nil, errNotIncrement
	}
	stmt, err := sp.p.ParseOneStmt(text, "", "")
	if err != nil {
		return nil, err
	}
	u, ok := stmt.(*ast.UpdateStmt)
	if !ok || u.MultipleTable || u.TableRefs == nil || u.TableRefs.TableRefs == nil || u.TableRefs.TableRefs.Right != nil {
		return nil, errNotIncrement
	}
	src, ok := u.TableRefs.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return nil, errNotIncrement
	}
	tn, ok := src.Source.(*ast.TableName)
	if !ok {
		return nil, errNotIncrement
	}
	s := &Shape{Schema: tn.Schema.O, Table: tn.Name.O}
	// A column may be qualified by the alias, or by the table name when
	// there is none.
	qualifier := tn.Name.L
	if src.AsName.L != "" {
		qualifier = src.AsName.L
	}
	ours := func(c *ast.ColumnName) bool {
		if c.Table.L == "" {
			return true
		}
		if c.Table.L != qualifier {
			return false
		}
		return c.Schema.L == "" || c.Schema.L == tn.Schema.L
	}

	key := keyColumn(u.Where, ours)
	if key == "" {
		return nil, errNotIncrement
	}
	s.Key = key
	for _, a := range u.List {
		if !ours(a.Column) {
			return nil, errNotIncrement
		}
		name := a.Column.Name.O
		if isSelfIncrement(a, ours) {
			if !containsFold(s.Counters, name) {
				s.Counters = append(s.Counters, name)
			}
		} else if !containsFold(s.Others, name) {
			s.Others = append(s.Others, name)
		}
	}
	if len(s.Counters) == 0 {
		return nil, errNotIncrement
	}
	// A counter both incremented and assigned otherwise is not a clean
	// increment either.
	s.Counters = slices.DeleteFunc(s.Counters, func(c string) bool { return containsFold(s.Others, c) })
	if len(s.Counters) == 0 {
		return nil, errNotIncrement
	}
	if u.IgnoreErr {
		s.Unsupported = append(s.Unsupported, "UPDATE IGNORE")
	}
	if u.Order != nil {
		s.Unsupported = append(s.Unsupported, "ORDER BY")
	}
	return s, nil
}

// looksLikeUpdate is a cheap filter before parsing: text starts with
// UPDATE, after blanks and comments.
func looksLikeUpdate(text string) bool {
	for {
		text = strings.TrimLeft(text, " \t\r\n(")
		if strings.HasPrefix(text, "/*") {
			end := strings.Index(text, "*/")
			if end < 0 {
				return false
			}
			text = text[end+2:]
			continue
		}
		break
	}
	return len(text) >= 6 && strings.EqualFold(text[:6], "update")
}

// keyColumn returns the column of a WHERE that is exactly `col = v` (either
// order, in any parentheses), where v is a placeholder or a literal.
func keyColumn(where ast.ExprNode, ours func(*ast.ColumnName) bool) string {
	where = unparen(where)
	b, ok := where.(*ast.BinaryOperationExpr)
	if !ok || b.Op != opcode.EQ {
		return ""
	}
	col := func(e ast.ExprNode) string {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		if !ok || !ours(c.Name) {
			return ""
		}
		return c.Name.Name.O
	}
	switch {
	case isValue(b.R) && col(b.L) != "":
		return col(b.L)
	case isValue(b.L) && col(b.R) != "":
		return col(b.R)
	}
	return ""
}

// isSelfIncrement reports whether a is `c = c + d`, `c = d + c` or
// `c = c - d` with d a placeholder or an integer literal (possibly
// negated): the increments slotproxy rewrites.
func isSelfIncrement(a *ast.Assignment, ours func(*ast.ColumnName) bool) bool {
	b, ok := unparen(a.Expr).(*ast.BinaryOperationExpr)
	if !ok || (b.Op != opcode.Plus && b.Op != opcode.Minus) {
		return false
	}
	self := func(e ast.ExprNode) bool {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		return ok && ours(c.Name) && strings.EqualFold(c.Name.Name.O, a.Column.Name.O)
	}
	switch {
	case self(b.L) && isDelta(b.R):
		return true
	case b.Op == opcode.Plus && self(b.R) && isDelta(b.L):
		return true
	}
	return false
}

// isDelta accepts a placeholder, an integer literal or a negated one.
func isDelta(e ast.ExprNode) bool {
	switch x := unparen(e).(type) {
	case *driver.ParamMarkerExpr:
		return true
	case *driver.ValueExpr:
		k := x.Kind()
		return k == driver.KindInt64 || k == driver.KindUint64
	case *ast.UnaryOperationExpr:
		return (x.Op == opcode.Minus || x.Op == opcode.Plus) && isDelta(x.V)
	}
	return false
}

// isValue accepts a placeholder or any literal: the value side of the key
// equality. Digests turn every literal into '?', so the key's type is
// checked against the schema rather than here.
func isValue(e ast.ExprNode) bool {
	switch x := unparen(e).(type) {
	case *driver.ParamMarkerExpr, *driver.ValueExpr:
		return true
	case *ast.UnaryOperationExpr:
		return x.Op == opcode.Minus && isValue(x.V)
	}
	return false
}

func unparen(e ast.ExprNode) ast.ExprNode {
	for {
		p, ok := e.(*ast.ParenthesesExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}
