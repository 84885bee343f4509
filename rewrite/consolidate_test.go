package rewrite

import "testing"

// TestConsolidatable: reads whose rows are the same for every session of
// an account at one moment may be shared; variables, functions whose
// value is the caller's or the call's, locking and INTO clauses, and
// several statements may not.
func TestConsolidatable(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT downloads FROM repos WHERE id = 3":                                  true,
		"select r.id, r.downloads from repos r where r.id in (1, 2) order by r.id":  true,
		"SELECT SUM(downloads), COUNT(*), MAX(stars) FROM repos WHERE owner_id = 1": true,
		"SELECT COALESCE(downloads, 0) + CAST('1' AS SIGNED) FROM repos":            true,
		"SELECT id FROM repos WHERE downloads > (SELECT AVG(downloads) FROM repos)": true,
		"SELECT downloads FROM repos WHERE id = 3;":                                 true,
		"SELECT downloads, RAND() FROM repos":                                       false,
		"SELECT downloads, UUID() FROM repos":                                       false,
		"SELECT downloads, CONNECTION_ID() FROM repos":                              false,
		"SELECT downloads, LAST_INSERT_ID() FROM repos":                             false,
		"SELECT downloads, my_func(id) FROM repos":                                  false,
		"SELECT downloads FROM repos WHERE id = @id":                                false,
		"SELECT @@session.sql_mode, downloads FROM repos":                           false,
		"SELECT downloads FROM repos WHERE id = 3 FOR UPDATE":                       false,
		"SELECT downloads FROM repos WHERE id = 3 LOCK IN SHARE MODE":               false,
		"SELECT downloads INTO @d FROM repos WHERE id = 3":                          false,
		"SELECT SQL_CALC_FOUND_ROWS downloads FROM repos LIMIT 1":                   false,
		"SELECT downloads FROM repos; SELECT 1":                                     false,
		"SELECT NEXT VALUE FOR s":                                                   false,
		"UPDATE repos SET downloads = 1":                                            false,
		"SELECT 'unterminated":                                                      false,
	} {
		if got := Consolidatable(sql, Session{}); got != want {
			t.Errorf("Consolidatable(%q) = %v, want %v", sql, got, want)
		}
	}
}
