package proxy_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/slotproxy/slotproxy/proxy"
)

// TestRowConditions: issue 22's increments whose WHERE clause names no key
// (F: OpenCart's statistics row found by an unindexed, non-unique `code`)
// and a CASE of deltas by another column (G: Magento's stock correction,
// one CASE decrementing several rows), in the survey's own schemas, with
// the server as the oracle: slotted where the condition converts nothing
// and every matched row takes a branch, on the base rows (exactly)
// otherwise.
func TestRowConditions(t *testing.T) {
	const plain, ruled = "rowcond_plain", "rowcond_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE oc_statistics (statistics_id INT NOT NULL AUTO_INCREMENT, code VARCHAR(64) NOT NULL, value DECIMAL(15,4) NOT NULL, PRIMARY KEY (statistics_id)) ENGINE=InnoDB",
		"INSERT INTO oc_statistics (statistics_id, code, value) VALUES (1, 'order_sale', 1000.2500), (2, 'order_processing', 0), (3, 'order_complete', 5), (4, 'order_sale', 7)",
		"CREATE TABLE cataloginventory_stock_item (item_id INT UNSIGNED NOT NULL AUTO_INCREMENT, product_id INT UNSIGNED NOT NULL DEFAULT 0, stock_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, " +
			"qty DECIMAL(12,4) DEFAULT NULL, website_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (item_id), " +
			"UNIQUE KEY CATALOGINVENTORY_STOCK_ITEM_PRODUCT_ID_STOCK_ID (product_id, stock_id), KEY CATALOGINVENTORY_STOCK_ITEM_WEBSITE_ID (website_id)) ENGINE=InnoDB",
		"INSERT INTO cataloginventory_stock_item (item_id, product_id, stock_id, qty, website_id) VALUES " +
			"(1, 14, 1, 100, 0), (2, 27, 1, 3.5, 0), (3, 14, 2, 50, 1), (4, 31, 1, 9, 0), (5, 27, 2, NULL, 0), (6, 14, 3, 1, 0)",
	}, "table: "+ruled+".oc_statistics\nkey: statistics_id\ncounters: [value]\nslots: 4\n---\n"+
		"table: "+ruled+".cataloginventory_stock_item\nkey: item_id\ncounters: [qty]\nslots: 4\n")
	const magento = "UPDATE `cataloginventory_stock_item` SET `qty` = CASE product_id WHEN 14 THEN qty-2 WHEN 27 THEN qty-1 ELSE qty END WHERE (product_id IN (14, 27)) AND (website_id = 0)"
	corpus := []step{
		// Slotted: the rows the condition finds (two 'order_sale' rows),
		// by integer and decimal deltas.
		text("UPDATE `oc_statistics` SET `value` = (`value` + 129) WHERE `code` = 'order_sale'"),
		text("UPDATE `oc_statistics` SET `value` = (`value` + 129.99) WHERE `code` = 'order_sale'"),
		text("UPDATE oc_statistics SET value = value - 0.0001 WHERE code <> 'order_sale' AND NOT (code = 'order_complete' OR statistics_id > 3)"),
		text("UPDATE oc_statistics SET value = value + 1 WHERE code = 'no_such_code'"),
		text("UPDATE oc_statistics SET value = value + 1 WHERE code IN ('order_complete', 'order_processing') AND statistics_id BETWEEN 2 AND 3"),
		text("SELECT * FROM oc_statistics ORDER BY statistics_id"),
		// OpenCart's own, a quoted delta: DECIMAL plus a string is DOUBLE
		// arithmetic, whose rounding (and Note 1265) depends on the total:
		// on the base rows.
		text("UPDATE `oc_statistics` SET `value` = (`value` + '129.99') WHERE `code` = 'order_sale'"),
		text("UPDATE `oc_statistics` SET `value` = (`value` + '0.2') WHERE `code` = 'order_sale'"),
		text("SHOW WARNINGS"),
		// Conditions that convert a value (a number compared with a
		// VARCHAR column: a warning per row, an error in strict mode):
		// on the base rows, as directly.
		text("UPDATE oc_statistics SET value = value + 1 WHERE code = 0"),
		text("SHOW WARNINGS"),
		text("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'"),
		text("UPDATE oc_statistics SET value = value + 1 WHERE code = 0"),
		// Beyond the column's range on one of the rows: the server's error.
		text("UPDATE oc_statistics SET value = value + 99999999999 WHERE code = 'order_sale'"),
		text("SELECT * FROM oc_statistics ORDER BY statistics_id"),
		// Magento's CASE: rows 1, 2 and 6 (row 5's NULL stays NULL, row
		// 3 is another website's).
		text(magento),
		text(magento),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		// Below 0 is fine for a signed DECIMAL; a CASE whose ELSE a
		// matched row takes (product 31), on the base rows.
		text("UPDATE cataloginventory_stock_item SET qty = CASE product_id WHEN 14 THEN qty-200 WHEN 27 THEN qty+1 ELSE qty END WHERE product_id IN (14, 27) AND website_id = 0"),
		text("UPDATE cataloginventory_stock_item SET qty = CASE product_id WHEN 14 THEN qty-1 ELSE qty END WHERE product_id IN (14, 31)"),
		text("UPDATE cataloginventory_stock_item SET qty = CASE product_id WHEN 31 THEN qty-1 END WHERE product_id = 31"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		// In a transaction, read back, rolled back; then committed.
		text("BEGIN"),
		text(magento),
		text("UPDATE oc_statistics SET value = value + 2 WHERE code = 'order_sale'"),
		text("SELECT qty FROM cataloginventory_stock_item WHERE product_id = 14 ORDER BY item_id"),
		text("SELECT SUM(value) FROM oc_statistics"),
		text("ROLLBACK"),
		text("BEGIN"),
		text(magento),
		text("UPDATE oc_statistics SET value = value + 2 WHERE code = 'order_sale'"),
		text("COMMIT"),
		text(touchRollup),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text("SELECT * FROM oc_statistics ORDER BY statistics_id"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	// Slotted: the four increments of oc_statistics by condition that
	// match rows (the one that matches none runs as written), the strict
	// one beyond the range first, Magento's four and the one with qty-200,
	// and the one in the committed transaction and the rolled back one.
	if st.RewrittenWrites < 11 {
		t.Errorf("%d increments slotted, want at least 11", st.RewrittenWrites)
	}
}

// TestRowConditionsConcurrent: transactions incrementing OpenCart's
// statistics rows by their code (an unindexed column: the UPDATE's scan
// reads, and directly locks, every row) in either order, through the
// proxy: none fails and no count is lost.
func TestRowConditionsConcurrent(t *testing.T) {
	const plain, ruled = "rowcondc_plain", "rowcondc_ruled"
	loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE oc_statistics (statistics_id INT NOT NULL AUTO_INCREMENT, code VARCHAR(64) NOT NULL, value DECIMAL(15,4) NOT NULL, PRIMARY KEY (statistics_id)) ENGINE=InnoDB",
		"INSERT INTO oc_statistics (code, value) VALUES ('order_sale', 0), ('order_processing', 0), ('order_complete', 0)",
	}, "table: "+ruled+".oc_statistics\nkey: statistics_id\ncounters: [value]\nslots: 16\n")
	cat := loadCatalog(t, "table: "+ruled+".oc_statistics\nkey: statistics_id\ncounters: [value]\nslots: 16\n")
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	db := p.open(t, "")
	db.SetMaxOpenConns(8)
	const clients, txns = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, clients*txns)
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes := []string{"order_sale", "order_processing"}
			if w%2 == 1 {
				codes[0], codes[1] = codes[1], codes[0]
			}
			for range txns {
				tx, err := db.BeginTx(ctxT(t), nil)
				if err != nil {
					errs <- err
					return
				}
				for _, code := range codes {
					if _, err := tx.Exec(fmt.Sprintf("UPDATE %s.oc_statistics SET value = value + 1.25 WHERE code = '%s'", ruled, code)); err != nil {
						errs <- err
						_ = tx.Rollback()
						break
					}
				}
				if err := tx.Commit(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("transaction failed: %v", err)
	}
	want := fmt.Sprintf("%.4f", float64(clients*txns)*1.25)
	for _, code := range []string{"order_sale", "order_processing"} {
		if got := queryString(t, db, "SELECT value FROM "+ruled+".oc_statistics WHERE code = '"+code+"'"); got != want {
			t.Errorf("%s: %s, want %s", code, got, want)
		}
	}
	if s := p.srv.Stats(); s.RewrittenWrites < clients*txns*2 {
		t.Errorf("%d increments slotted, want %d", s.RewrittenWrites, clients*txns*2)
	}
}

// TestGuardedInOrderUnderLockTables: a guarded UPDATE of several keys (a
// DECIMAL counter with a CHECK, which slots cannot keep) under LOCK TABLES
// in autocommit, where no transaction is open: it runs once, its rows
// counted once, as directly (a trial of it row by row under a savepoint
// could not be undone there).
func TestGuardedInOrderUnderLockTables(t *testing.T) {
	const plain, ruled = "inorder_lock_plain", "inorder_lock_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t (id INT NOT NULL PRIMARY KEY, d DECIMAL(10,2) NOT NULL DEFAULT 0, CONSTRAINT chk_d CHECK (d >= 0 AND d <= 100))",
		"INSERT INTO t VALUES (1, 1), (2, 2), (3, 99.5)",
	}, "table: "+ruled+".t\nkey: id\ncounters: [d]\nslots: 4\n")
	runDifferential(t, cat, plain, ruled, []step{
		text("LOCK TABLES t WRITE"),
		text("UPDATE t SET d = d + 1 WHERE id IN (1, 2)"),
		text("UPDATE t SET d = d + 1 WHERE id IN (2, 3)"),
		text("UNLOCK TABLES"),
		text("SELECT * FROM t ORDER BY id"),
		text("UPDATE t SET d = d + 1 WHERE id IN (1, 2)"),
		text("UPDATE t SET d = d + 1 WHERE id IN (1, 3)"),
		text("SELECT * FROM t ORDER BY id"),
	})
}

// TestRowConditionsReadCommitted: at READ COMMITTED an UPDATE skips a row
// another transaction holds when the row's committed version does not
// match its WHERE clause (InnoDB's semi-consistent read): a row inserted
// and not committed, a row whose uncommitted change makes it match. It
// waits for a row that matches. An increment whose records a condition on
// the row finds must skip and wait alike: its slotted upsert's locking
// read of every row its scan reads waited for them all (the differential
// fuzzer's finding, MariaDB seed 1795882153172565012, documented until the
// proxy read the matching committed rows' keys first). Every connection
// has a lock wait timeout of 1 s: a wait shows as 1205 on its side.
func TestRowConditionsReadCommitted(t *testing.T) {
	const plain, ruled = "rowcond_rc_plain", "rowcond_rc_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t (id INT NOT NULL PRIMARY KEY, grp INT NOT NULL, name VARCHAR(20) NULL, c INT NOT NULL DEFAULT 0)",
		"INSERT INTO t (id, grp, name) VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 2, 'c'), (4, 1, 'd'), (6, 2, 'f')",
		"CREATE TABLE t2 (id INT NOT NULL PRIMARY KEY, grp INT NOT NULL, n INT NULL, s SMALLINT NOT NULL DEFAULT 0, pos POINT NULL)",
		"INSERT INTO t2 (id, grp, n, s) VALUES (1, 1, NULL, 0), (2, 1, 5, 0), (3, 2, 7, 0), (4, 1, 1, 32760), (6, 2, NULL, 0)",
		"CREATE TABLE t3 (id VARCHAR(10) NOT NULL PRIMARY KEY, grp INT NOT NULL, n INT NULL, pos POINT NULL, doc JSON NULL)", // the read of keys in order names every column
		"INSERT INTO t3 (id, grp, n, pos) VALUES ('a', 1, NULL, POINT(1, 2)), ('b', 1, 5, NULL), ('c', 2, 3, NULL)",
	}, "table: "+ruled+".t\nkey: id\ncounters: [c]\nslots: 4\n---\ntable: "+ruled+".t2\nkey: id\ncounters: [n, s]\nslots: 4\n---\ntable: "+ruled+".t3\nkey: id\ncounters: [n]\nslots: 4\n")
	short := "SET SESSION innodb_lock_wait_timeout = 1"
	corpus := []step{
		on(0, text(short)), on(1, text(short)),
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")),
		// A row inserted and not committed that matches: skipped.
		text("BEGIN"),
		text("INSERT INTO t (id, grp) VALUES (5, 1)"),
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1")),
		// A held row whose committed version does not match: skipped.
		text("UPDATE t SET grp = 1 WHERE id = 3"),
		on(1, text("UPDATE t SET c = c + 2 WHERE grp = 1")),
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1 OR name = 'f'")),
		// A held row that matches: waited for (1205), as directly.
		text("UPDATE t SET name = 'z' WHERE id = 1"),
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1")),
		on(1, text("SELECT id, c FROM t ORDER BY id")),
		// No committed row matches: nothing written.
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 7 OR id = 5")),
		// Inside a transaction at READ COMMITTED, then rolled back.
		on(1, text("BEGIN")),
		on(1, text("UPDATE t SET c = c + 5 WHERE grp = 1")),
		on(1, text("SELECT id, c FROM t ORDER BY id")),
		on(1, text("ROLLBACK")),
		text("COMMIT"),
		// The rows committed now match and are incremented.
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1")),
		on(1, text("SELECT id, grp, name, c FROM t ORDER BY id")),
		// At READ UNCOMMITTED (the increment reads and locks every row
		// its scan reads, as before) and REPEATABLE READ: no row held.
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")),
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1")),
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")),
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1")),
		text(touchRollup),
		text("SELECT id, c FROM t ORDER BY id"),

		// On the base rows (a NULL counter, a delta beyond the slot's
		// share), in autocommit: the same rows skipped, the same row
		// waited for, the same range error at the same row.
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")),
		text("BEGIN"),
		text("INSERT INTO t2 (id, grp) VALUES (5, 1)"),
		text("UPDATE t2 SET grp = 1 WHERE id = 3"),
		on(1, text("UPDATE t2 SET n = n + 1 WHERE grp = 1")),
		on(1, text("UPDATE t2 SET s = s + 10 WHERE grp = 1")),
		on(1, text("SHOW WARNINGS")),
		on(1, text("UPDATE t2 SET n = n + 1 WHERE grp = 7 OR id = 5")),
		text("UPDATE t2 SET s = 1 WHERE id = 2"),
		on(1, text("UPDATE t2 SET n = n + 1 WHERE grp = 1")),
		text("ROLLBACK"),
		on(1, text("UPDATE t2 SET n = n + 1, s = s + 1 WHERE grp = 1")),
		on(1, text("SELECT * FROM t2 ORDER BY id")),

		// At READ UNCOMMITTED, an open transaction holding rows the
		// condition does not match (rows it incremented, slotted, and a
		// row it inserted): skipped, slotted and on the base rows (a NULL
		// counter, a delta beyond the slot's share), as directly.
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")),
		text("BEGIN"),
		text("UPDATE t SET c = c + 1 WHERE id = 6"),
		text("UPDATE t2 SET s = s + 1 WHERE id = 6"),
		text("INSERT INTO t2 (id, grp) VALUES (8, 9)"),
		text("UPDATE t3 SET n = n + 1 WHERE id = 'c'"),
		on(1, text("UPDATE t SET c = c + 1 WHERE grp = 1")),
		on(1, text("UPDATE t2 SET n = n + 1 WHERE grp = 1")),
		on(1, text("UPDATE t2 SET s = s + 20000 WHERE grp = 1")),
		on(1, text("UPDATE t3 SET n = n + 1 WHERE grp = 1")), // a string key
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")),
		on(1, text("UPDATE t3 SET n = n + 2 WHERE grp = 1")),
		text("COMMIT"),
		on(1, text("SELECT id, c FROM t ORDER BY id")),
		on(1, text("SELECT * FROM t2 ORDER BY id")),
		on(1, text("SELECT id, grp, n, ST_AsText(pos) FROM t3 ORDER BY id")),
		// Prepared (the keys read in the binary protocol), on the base
		// rows, at READ UNCOMMITTED and REPEATABLE READ; a range error
		// part way.
		on(1, prep("UPDATE t2 SET n = n + ? WHERE grp = ?", 1, 1)),
		on(1, prep("UPDATE t3 SET n = n + ? WHERE grp = ?", 2, 1)),
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")),
		on(1, prep("UPDATE t3 SET n = n + ? WHERE grp = ?", 2, 1)),
		on(1, prep("UPDATE t2 SET s = s + ? WHERE grp = ? OR id = ?", 30000, 1, 4)),
		on(1, text("SELECT * FROM t2 ORDER BY id")),
		on(1, text("SELECT id, grp, n FROM t3 ORDER BY id")),
	}
	stats, _ := runDifferential(t, cat, plain, ruled, corpus)
	if stats.RewrittenWrites == 0 {
		t.Error("no increment was slotted")
	}
}
