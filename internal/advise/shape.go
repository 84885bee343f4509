package advise

import (
	"errors"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/mysql"
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
	// incrementing them. slotproxy's fast path needs none, except touch
	// columns (Times).
	Others []string
	// Times are those of Others assigned a time (a placeholder, a string
	// literal or a function of the current time, such as NOW()): touch
	// columns, if the schema says they are DATETIME or TIMESTAMP.
	Times []string
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
	p      *parser.Parser
	spaced *parser.Parser // with IGNORE_SPACE, made when first needed
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
		// Digests put a space between a function's name and its
		// parenthesis (NOW ( )), which the parser reads as a function
		// call only with IGNORE_SPACE.
		if sp.spaced == nil {
			sp.spaced = parser.New()
			sp.spaced.SetSQLMode(mysql.ModeIgnoreSpace)
		}
		var err2 error
		if stmt, err2 = sp.spaced.ParseOneStmt(text, "", ""); err2 != nil {
			return nil, err
		}
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
			if isTime(a.Expr) {
				s.Times = append(s.Times, name)
			}
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

// keyColumn returns the column of a WHERE that requires `col = v` (either
// order) or `col IN (v, …)`, where each v is a placeholder or a literal:
// the WHERE itself or one of its top-level AND operands (ORMs add
// conditions such as `deleted_at IS NULL`; slotproxy evaluates the whole
// WHERE in its upsert). The first such column wins.
func keyColumn(where ast.ExprNode, ours func(*ast.ColumnName) bool) string {
	where = unparen(where)
	col := func(e ast.ExprNode) string {
		c, ok := unparen(e).(*ast.ColumnNameExpr)
		if !ok || !ours(c.Name) {
			return ""
		}
		return c.Name.Name.O
	}
	switch b := where.(type) {
	case *ast.BinaryOperationExpr:
		switch {
		case b.Op == opcode.LogicAnd:
			if k := keyColumn(b.L, ours); k != "" {
				return k
			}
			return keyColumn(b.R, ours)
		case b.Op != opcode.EQ:
		case isValue(b.R) && col(b.L) != "":
			return col(b.L)
		case isValue(b.L) && col(b.R) != "":
			return col(b.R)
		}
	case *ast.PatternInExpr:
		if b.Not || b.Sel != nil || len(b.List) == 0 || col(b.Expr) == "" {
			return ""
		}
		for _, v := range b.List {
			if !isValue(v) {
				return ""
			}
		}
		return col(b.Expr)
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
		e = unparen(e)
		// COALESCE(c, 0) and IFNULL(c, 0): Rails' and others' guard
		// against NULL.
		if f, ok := e.(*ast.FuncCallExpr); ok && (f.FnName.L == "coalesce" || f.FnName.L == "ifnull") && len(f.Args) == 2 && isZeroOrParam(f.Args[1]) {
			e = unparen(f.Args[0])
		}
		c, ok := e.(*ast.ColumnNameExpr)
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

// isZeroOrParam accepts the literal 0, or a placeholder (a digest's
// literals are all placeholders).
func isZeroOrParam(e ast.ExprNode) bool {
	switch x := unparen(e).(type) {
	case *driver.ParamMarkerExpr:
		return true
	case *driver.ValueExpr:
		return (x.Kind() == driver.KindInt64 || x.Kind() == driver.KindUint64) && x.GetInt64() == 0
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

// isTime accepts what ORMs assign a touch column with an increment: a
// placeholder, a string literal, or a function of the current time.
func isTime(e ast.ExprNode) bool {
	switch x := unparen(e).(type) {
	case *driver.ParamMarkerExpr:
		return true
	case *driver.ValueExpr:
		return x.Kind() == driver.KindString
	case *ast.FuncCallExpr:
		switch x.FnName.L {
		case "now", "current_timestamp", "localtime", "localtimestamp", "utc_timestamp", "sysdate":
			return true
		}
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
