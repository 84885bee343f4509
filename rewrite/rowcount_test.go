package rewrite

import (
	"strings"
	"testing"
)

// TestWithRowCount: ROW_COUNT() calls of one statement become the value,
// in any case and spacing, in the first statement only; text in strings,
// comments, quoted names, and stored functions of a schema are left.
func TestWithRowCount(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT ROW_COUNT()":                             "SELECT CAST(2 AS SIGNED)",
		"select row_count ( ) + 1, ROW_COUNT();":         "select CAST(2 AS SIGNED) + 1, CAST(2 AS SIGNED);",
		"SET @n = ROW_COUNT()":                           "SET @n = CAST(2 AS SIGNED)",
		"INSERT INTO log (n) VALUES (ROW_COUNT())":       "INSERT INTO log (n) VALUES (CAST(2 AS SIGNED))",
		"SELECT 'ROW_COUNT()', `ROW_COUNT`, ROW_COUNT()": "SELECT 'ROW_COUNT()', `ROW_COUNT`, CAST(2 AS SIGNED)",
		"SELECT /* ROW_COUNT() */ 1":                     "",
		"SELECT db.ROW_COUNT()":                          "",
		"SELECT ROW_COUNT(); SELECT 1":                   "SELECT CAST(2 AS SIGNED); SELECT 1",
		"SELECT 1":                                       "",
		"SELECT ROW_COUNT":                               "",
		"SELECT 'unterminated ROW_COUNT()":               "",
	} {
		got, first, ok := WithRowCount(sql, 2, Session{})
		if ok != (want != "") || got != want {
			t.Errorf("WithRowCount(%q) = %q, %v; want %q", sql, got, ok, want)
		}
		if ok && first != strings.TrimSuffix(strings.SplitN(sql, ";", 2)[0], ";") {
			t.Errorf("WithRowCount(%q): first statement %q", sql, first)
		}
	}
}
