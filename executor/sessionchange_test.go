package executor

import (
	"strings"
	"testing"
)

func TestSessionMayChange(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		{"USE app", true},
		{"use`app`", true},
		{"/* x */ USE app", true},
		{"SET SESSION sql_mode = 'ANSI_QUOTES'", true},
		{"SET @@SESSION.SQL_MODE = ''", true},
		{"SET NAMES gbk", true},
		{"set names 'utf8mb4'", true},
		{"SET CHARACTER SET gbk", true},
		{"SET character_set_client = sjis", true},
		{"SET CHARSET latin1", true},
		{"PREPARE s FROM @q", true},
		{"EXECUTE s", true},
		{"SELECT 1; USE other", true},
		{"SELECT c FROM items WHERE id = ?", false},
		{"SELECT used, user_names, reuse FROM t", false},
		{"UPDATE repos SET downloads = downloads + 1 WHERE id = 1", false},
		{"SELECT namesake FROM executives", false},
	} {
		if got := sessionMayChange([]byte(tc.sql)); got != tc.want {
			t.Errorf("sessionMayChange(%q) = %v, want %v", tc.sql, got, tc.want)
		}
	}
}

// BenchmarkSessionMayChange: the scan every query through a rewriting
// proxy gets while the session state is known.
func BenchmarkSessionMayChange(b *testing.B) {
	for _, tc := range []struct{ name, sql string }{
		{"point-select", "SELECT c FROM items WHERE id = ?"},
		{"1KiB", "SELECT c FROM items WHERE id IN (" + strings.Repeat("12345, ", 150) + "1)"},
	} {
		sql := []byte(tc.sql)
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				sessionMayChange(sql)
			}
		})
	}
}

func TestMentionsWeakIsolation(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", true},
		{"set session transaction isolation level read uncommitted", true},
		{"SET @@SESSION.tx_isolation = 'READ-COMMITTED'", true},
		{"SET transaction_isolation = 'READ-UNCOMMITTED'", true},
		{"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ", false},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", false},
		{"SELECT committed FROM orders", false},
	} {
		if got := mentionsWeakIsolation([]byte(tc.sql)); got != tc.want {
			t.Errorf("mentionsWeakIsolation(%q) = %v, want %v", tc.sql, got, tc.want)
		}
		if !sessionMayChange([]byte(tc.sql)) && strings.Contains(strings.ToLower(tc.sql), "isolation") {
			t.Errorf("sessionMayChange(%q) = false: the session's level must be read again", tc.sql)
		}
	}
}
