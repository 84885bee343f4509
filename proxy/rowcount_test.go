package proxy_test

import "testing"

// TestRowCount: ROW_COUNT() after a statement the proxy answers with
// statements of its own gives what it gives directly. A slotted increment
// whose slot row existed made the server's ROW_COUNT() 2 (the upsert's
// update) where the UPDATE's is 1, and a guarded write in autocommit 0
// (the COMMIT of the proxy's transaction around it) where directly it is
// the rows changed. Text and prepared, a failed increment (-1), a read
// (-1), in a transaction and after COMMIT (0), SET and INSERT reading it,
// a multi-statement query, SHOW WARNINGS between.
func TestRowCount(t *testing.T) {
	const plain, ruled = "rowcount_plain", "rowcount_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t (id INT NOT NULL PRIMARY KEY, c INT NOT NULL DEFAULT 0, d TINYINT UNSIGNED NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t (id, c, d, name) VALUES (1, 0, 0, 'a'), (2, 0, 250, 'b'), (3, 0, 0, 'c')",
		"CREATE TABLE log (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, n BIGINT NULL)",
	}, "table: "+ruled+".t\nkey: id\ncounters: [c, d]\nslots: 2\n")
	var corpus []step
	// Two slots: the third increment of a record meets an existing slot
	// row at the latest.
	for range 4 {
		corpus = append(corpus,
			text("UPDATE t SET c = c + 1 WHERE id = 1"),
			text("SELECT ROW_COUNT()"))
	}
	for range 3 {
		corpus = append(corpus,
			prep("UPDATE t SET c = c + ? WHERE id = ?", 2, 2),
			text("SELECT ROW_COUNT() AS n, ROW_COUNT() + 1"))
	}
	corpus = append(corpus,
		text("UPDATE t SET c = c + 1 WHERE id IN (1, 2, 3)"),
		text("SELECT ROW_COUNT()"),
		text("UPDATE t SET c = c + 1 WHERE id = 99"),
		text("select row_count()"),
		// Guarded writes in autocommit.
		text("UPDATE t SET c = 5 WHERE id IN (1, 2)"),
		text("SELECT ROW_COUNT()"),
		text("UPDATE t SET c = 5 WHERE id IN (1, 2)"),
		text("SELECT ROW_COUNT()"),
		text("DELETE FROM t WHERE id = 3"),
		text("SET @n = ROW_COUNT()"),
		text("SELECT @n"),
		// A range error, then a read.
		text("UPDATE t SET d = d + 10 WHERE id = 2"),
		text("SELECT ROW_COUNT()"),
		text("UPDATE t SET c = c + 1 WHERE id = 1"),
		text("SELECT c FROM t WHERE id = 1"),
		text("SELECT ROW_COUNT()"),
		// SHOW WARNINGS between.
		text("UPDATE t SET c = c + 1 WHERE id = 1"),
		text("SHOW WARNINGS"),
		text("SELECT ROW_COUNT()"),
		// INSERT reading it.
		text("UPDATE t SET c = c + 1 WHERE id IN (1, 2)"),
		text("INSERT INTO log (n) VALUES (ROW_COUNT())"),
		text("SELECT ROW_COUNT()"),
		text("SELECT n FROM log ORDER BY id"),
		// In a transaction, and after its COMMIT.
		text("BEGIN"),
		text("UPDATE t SET c = c + 1 WHERE id = 1"),
		text("UPDATE t SET c = c + 1 WHERE id = 1"),
		text("SELECT ROW_COUNT()"),
		text("UPDATE t SET c = c + 1, d = d + 1 WHERE id IN (1, 2)"),
		text("SELECT ROW_COUNT()"),
		text("COMMIT"),
		text("SELECT ROW_COUNT()"),
		// One query of several statements.
		multi("UPDATE t SET c = c + 1 WHERE id = 1; SELECT ROW_COUNT(); UPDATE t SET c = c + 1 WHERE id = 1; SELECT ROW_COUNT()"),
		multi("UPDATE t SET c = 7 WHERE id = 1; SELECT ROW_COUNT()"),
		text("SELECT * FROM t ORDER BY id"),
	)
	runDifferential(t, cat, plain, ruled, corpus)
}
