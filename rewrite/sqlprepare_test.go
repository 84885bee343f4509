package rewrite

import "testing"

// TestLeavesDiagnostics: only a SELECT that certainly reads no table (no
// FROM, subquery, INTO, or call of a function that could be a stored one)
// leaves MariaDB's diagnostics as they were.
func TestLeavesDiagnostics(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT ROW_COUNT()":                       true,
		"select row_count() AS n, ROW_COUNT() + 1": true,
		"SELECT LAST_INSERT_ID(), @@warning_count": true,
		"SELECT 1 + 1;":                            true,
		"SELECT 1/0":                               true, // raises its own condition: the executor checks
		"SELECT c FROM t":                          false,
		"SELECT (SELECT 1)":                        false,
		"SELECT my_func()":                         false,
		"SELECT `row_count`()":                     false,
		"SELECT 1 INTO @x":                         false,
		"SHOW WARNINGS":                            false,
		"SELECT 1; SELECT 2":                       false,
		"DO 1":                                     false,
	} {
		if got := LeavesDiagnostics(sql, Session{}); got != want {
			t.Errorf("LeavesDiagnostics(%q) = %v, want %v", sql, got, want)
		}
	}
}
