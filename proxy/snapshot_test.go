package proxy_test

import "testing"

// TestWriteAfterFoldInSnapshot: a REPEATABLE READ transaction reads (its
// snapshot), then a fold moves a record's slot counts into its base row
// (roll-up, or another client's write the proxy folds first), then the
// transaction writes that record's row and reads it. Directly its write
// makes the row its own, current version. Through the proxy its base row
// was then current while its snapshot still showed the slot rows the fold
// emptied: it counted the folded increments twice until it committed (the
// differential fuzzer's finding, MySQL seed 1795624469396178549, is the
// first case).
func TestWriteAfterFoldInSnapshot(t *testing.T) {
	const plain, ruled = "snapfold_plain", "snapfold_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id BIGINT NOT NULL PRIMARY KEY, c1 INT UNSIGNED DEFAULT NULL, c2 MEDIUMINT UNSIGNED NULL, c3 INT NULL, " +
			"c4 BIGINT NOT NULL DEFAULT 0, c5 DECIMAL(10,0) NULL, name VARCHAR(20) NULL, CONSTRAINT chk_t1_c1 CHECK (c1 >= 0 AND c1 <= 1000))",
		"INSERT INTO t1 (id, c1, c2, c3, c4, c5, name) VALUES (1, 2, 17, -2147483647, 5, 0, 'n1'), (2, 2, 3, -2147483645, -9223372036854775808, 7, 'n2'), " +
			"(3, 998, 12, 10, 9223372036854775800, NULL, 'n3'), (4, NULL, NULL, 1, 0, -3, 'n4')",
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1, c2, c4]\nslots: 4\n")
	corpus := []step{
		// A prepared write of another column, autocommit and in a
		// transaction (the fuzzer's MariaDB seed 1795629084866569986: it
		// was sent as text, placeholders and all).
		prep("UPDATE t1 SET c3 = c3 + ? WHERE id = ?", 8388607, 1),
		text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 1"),
		text("BEGIN"),
		text("SELECT c2 FROM t1 WHERE id = 1"),
		text(touchRollup),
		prep("UPDATE t1 SET c3 = c3 - ? WHERE id = ?", 8388607, 1),
		prep("SELECT c2, c3 FROM t1 WHERE id = ?", 1),
		text("COMMIT"),

		// The fuzzer's case: roll-up, then a write of another column.
		text("UPDATE `t1` SET c2 = IFNULL(c2, 0) + 2 WHERE `t1`.`id` = 3"),
		text("BEGIN"),
		text("SELECT SUM(c1), MAX(c1), MIN(c1), COUNT(c1), COUNT(*) FROM t1"),
		text(touchRollup),
		text("UPDATE t1 SET c3 = c3 + 1 WHERE id = 3"),
		text("SELECT id, c2 FROM t1 WHERE c2 BETWEEN 0 AND 100 ORDER BY id"),
		text("SELECT * FROM t1 ORDER BY id"),
		text("COMMIT"),
		text("SELECT * FROM t1 ORDER BY id"),

		// Roll-up, then the transaction increments the record and reads
		// it (the proxy folds its own increment first).
		text("UPDATE t1 SET c4 = c4 + 5, c5 = c5 + 2 WHERE id = 1"),
		text("BEGIN"),
		prep("SELECT * FROM t1 WHERE id = ?", 1),
		text(touchRollup),
		prep("UPDATE t1 SET c4 = c4 + ? WHERE id = ?", 1, 1),
		prep("SELECT c4, c5 FROM t1 WHERE id = ?", 1),
		text("COMMIT"),

		// Roll-up, then an absolute write the proxy folds first.
		text("UPDATE t1 SET c1 = c1 + 3, c4 = c4 + 9 WHERE id = 2"),
		text("BEGIN"),
		text("SELECT COUNT(*) FROM t1"),
		text(touchRollup),
		text("UPDATE t1 SET c1 = c1 * 2 WHERE id = 2"),
		text("SELECT c1, c4 FROM t1 WHERE id = 2"),
		text("COMMIT"),

		// Another client's write folds the record (no roll-up): its fold
		// must not delete slot rows this transaction's snapshot still sees.
		on(1, text("UPDATE t1 SET c4 = c4 + 7, c2 = c2 + 1 WHERE id = 1")),
		text("BEGIN"),
		text("SELECT id, c4 FROM t1 ORDER BY id"),
		on(1, text("UPDATE t1 SET c1 = c1 - 1 * 1 WHERE id = 1")),
		text("UPDATE t1 SET name = 'x1' WHERE id = 1"),
		text("SELECT * FROM t1 WHERE id = 1"),
		text("COMMIT"),

		// An upsert that writes only other columns, prepared.
		text("UPDATE t1 SET c2 = c2 + 4 WHERE id = 3"),
		text("BEGIN"),
		text("SELECT name FROM t1 WHERE id = 1"),
		text(touchRollup),
		prep("INSERT INTO t1 (id, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE name = VALUES(name)", 3, "y3"),
		text("SELECT c2, c5, name FROM t1 WHERE id = 3"),
		text("ROLLBACK"),
		text("SELECT * FROM t1 ORDER BY id"),

		// A write of several rows by a condition on another column, and a
		// record whose counters are NULL or zero.
		text("UPDATE t1 SET c4 = c4 + 1 WHERE id IN (1, 2, 3, 4)"),
		text("UPDATE t1 SET c5 = c5 + 1 WHERE id = 2"),
		text("BEGIN"),
		text("SELECT SUM(c4) FROM t1"),
		text(touchRollup),
		on(1, text("UPDATE t1 SET c4 = c4 + 2 WHERE id IN (1, 4)")),
		text("UPDATE t1 SET name = CONCAT(name, '!') WHERE c3 < 100"),
		text("SELECT id, c1, c2, c4, c5, name FROM t1 ORDER BY id"),
		text("COMMIT"),
		text(touchRollup),
		text("SELECT * FROM t1 ORDER BY id"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
}

// TestReinsertAfterFoldAtReadCommitted: the differential fuzzer's finding
// (MariaDB seed 1795629836499580118) once folds zeroed slot rows instead
// of deleting them: a record deleted after an increment keeps zero slot
// rows, and an upsert that inserts the key again in a READ COMMITTED
// transaction took them for slot rows that appeared while it ran, undid
// itself and tried again until it gave up (1205).
func TestReinsertAfterFoldAtReadCommitted(t *testing.T) {
	const plain, ruled = "reinsert_plain", "reinsert_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, c1 BIGINT UNSIGNED NULL, c2 MEDIUMINT UNSIGNED NOT NULL DEFAULT 0, CONSTRAINT chk_t1_c2 CHECK (c2 >= 0 AND c2 <= 1000))",
		"INSERT INTO t1 (id, c1, c2) VALUES (1, 5, 14), (2, 15, 1000), (5, 0, 0)",
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1, c2]\nslots: 14\n")
	corpus := []step{
		text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
		text("UPDATE t1 SET c1 = c1 + 1 WHERE id IN (5, 8)"),
		text("DELETE FROM t1 WHERE id = 5"),
		text("BEGIN"),
		text("INSERT INTO t1 (id, c1) VALUES (5, 15) ON DUPLICATE KEY UPDATE c1 = c1 + 1"),
		text("INSERT INTO t1 (id, c1) VALUES (5, 15) ON DUPLICATE KEY UPDATE c1 = c1 + 1"),
		text("SELECT * FROM t1 ORDER BY id"),
		text("COMMIT"),
		text("SELECT * FROM t1 ORDER BY id"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
}
