package rewrite

import "testing"

// TestStatementStarts: what the first words of a statement passed through
// tell the executor (EndsTableLocks, CommitsImplicitly).
func TestStatementStarts(t *testing.T) {
	for _, tc := range []struct {
		sql             string
		endsLocks, ends bool
	}{
		{"UNLOCK TABLES", true, false},
		{"  lock tables t write", true, true},
		{"LOCK TABLE t READ", true, true},
		{"/* app */ BEGIN", true, false},
		{"start transaction read only", true, false},
		{"START SLAVE", false, false},
		{"TRUNCATE TABLE t1", false, true},
		{"truncate t1", false, true},
		{"CREATE TABLE t (id INT)", false, true},
		{"create temporary table t (id INT)", false, false},
		{"DROP TEMPORARY TABLE t", false, false},
		{"DROP TABLE t", false, true},
		{"ALTER TABLE t ADD c INT", false, true},
		{"RENAME TABLE a TO b", false, true},
		{"GRANT SELECT ON *.* TO u", false, true},
		{"(SELECT 1)", false, false},
		{"UPDATE t SET c = c + 1", false, false},
		{"", false, false},
		{"/* unterminated", false, false},
	} {
		if got := EndsTableLocks([]byte(tc.sql)); got != tc.endsLocks {
			t.Errorf("EndsTableLocks(%q) = %v, want %v", tc.sql, got, tc.endsLocks)
		}
		if got := CommitsImplicitly([]byte(tc.sql)); got != tc.ends {
			t.Errorf("CommitsImplicitly(%q) = %v, want %v", tc.sql, got, tc.ends)
		}
	}
}
