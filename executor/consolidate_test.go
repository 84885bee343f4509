package executor

import "testing"

// TestMaySetSession: statements that may set session variables (and so
// change what a read gives) are kept in the session's list; plain reads
// and writes, whose SET is a clause, and SET autocommit alone, are not.
func TestMaySetSession(t *testing.T) {
	for sql, want := range map[string]bool{
		"SET NAMES utf8mb4":                               true,
		"SET autocommit = 0":                              false,
		"set @@session.autocommit=1;":                     false,
		"SET autocommit = 0, sql_select_limit = 1":        true,
		"set time_zone = '+00:00'":                        true,
		"SET SESSION sql_select_limit = 1":                true,
		"CALL refresh()":                                  true,
		"SELECT @x := 1":                                  true,
		"UPDATE repos SET downloads = 1 WHERE id = 1":     false,
		"INSERT INTO repos SET id = 9":                    false,
		"SELECT downloads FROM repos WHERE id = 1":        false,
		"UPDATE repos SET downloads = 1; SET @a = 1":      true,
		"DELETE FROM repos WHERE id = 1":                  false,
		"(SELECT name FROM repos WHERE name = 'settled')": false,
	} {
		if got := maySetSession([]byte(sql)) && !setsAutocommit.MatchString(sql); got != want {
			t.Errorf("maySetSession(%q) = %v, want %v", sql, got, want)
		}
	}
}
