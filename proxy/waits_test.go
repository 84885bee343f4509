package proxy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestFoldsLockOnlyTheirRecords: a write the proxy folds first (a guarded
// write, an increment read back in its transaction) must not make
// increments of other records wait, where directly the statements touch
// different rows. A fold used to lock the records' slot rows by range,
// and InnoDB's next-key locks then covered the gaps where neighbouring
// records' (and other tables' counters') first slot rows go: their
// increments waited for the transaction to end, and failed with 1205 (the
// differential fuzzer's finding with interleaved transactions, both
// servers). Every connection has a lock wait timeout of 1 s, so a wait
// the server would not have shows as a 1205 that the direct side does not
// give.
func TestFoldsLockOnlyTheirRecords(t *testing.T) {
	const plain, ruled = "foldwait_plain", "foldwait_ruled"
	var rows string
	for i := 1; i <= 40; i++ {
		if i > 1 {
			rows += ", "
		}
		rows += fmt.Sprintf("(%d, %d, %d, 'n%d')", i*10, i, i, i)
	}
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, c1 INT NOT NULL DEFAULT 0, c2 INT UNSIGNED NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t1 (id, c1, c2, name) VALUES " + rows,
		"CREATE TABLE t2 (id BIGINT NOT NULL PRIMARY KEY, c1 BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO t2 (id, c1) VALUES (10, 1), (20, 2), (30, 3)",
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1, c2]\nslots: 4\n---\ntable: "+ruled+".t2\nkey: id\ncounters: [c1]\nslots: 4\n")
	short := "SET SESSION innodb_lock_wait_timeout = 1"
	corpus := []step{
		on(0, text(short)), on(1, text(short)),
		// Slot rows for some records.
		text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 50"),
		text("UPDATE t1 SET c1 = c1 + 2, c2 = c2 + 2 WHERE id = 200"),
		text("UPDATE t2 SET c1 = c1 + 1 WHERE id = 20"),

		// A guarded write first in a transaction; neighbours on both
		// sides (no slot rows yet), another counter, another table.
		text("BEGIN"),
		text("UPDATE t1 SET c1 = 0 WHERE id = 50"),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 60")),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 40")),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 50")), // the record itself: waits, as directly
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 70")),
		on(1, text("UPDATE t2 SET c1 = c1 + 1 WHERE id = 10")),
		on(1, prep("UPDATE t1 SET c1 = c1 + ? WHERE id = ?", 1, 80)),
		text("COMMIT"),
		text("SELECT id, c1, c2 FROM t1 ORDER BY id"),

		// After a read (a snapshot older than the fold).
		text("BEGIN"),
		text("SELECT SUM(c1), SUM(c2) FROM t1"),
		on(1, text("UPDATE t1 SET c1 = c1 + 5 WHERE id = 200")),
		text("DELETE FROM t1 WHERE id = 200"),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 210")),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 190")),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id IN (90, 100, 110)")),
		text("SELECT id, c1 FROM t1 WHERE id BETWEEN 180 AND 220 ORDER BY id"),
		text("ROLLBACK"),

		// With autocommit off, and a record without slot rows.
		text("SET autocommit = 0"),
		text("UPDATE t1 SET c1 = c1 * 2 WHERE id = 120"),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 130")),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 110")),
		text("UPDATE t1 SET c2 = 3 WHERE id = 200"),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 230")),
		text("COMMIT"),
		text("SET autocommit = 1"),

		// A transaction reads its own increment (the proxy folds it).
		text("BEGIN"),
		text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 300"),
		text("SELECT c1 FROM t1 WHERE id = 300"),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 310")),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 290")),
		text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 300"),
		text("SELECT c1 FROM t1 WHERE id = 300"),
		text("COMMIT"),

		// The same at READ COMMITTED.
		text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
		text("BEGIN"),
		text("UPDATE t1 SET c1 = -1 WHERE id = 310"),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 320")),
		on(1, text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 280")),
		text("COMMIT"),
		text("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"),

		// Writes and locking reads of every row of t2 (no condition, or
		// one on counters only) lock t2's rows and gaps, as their scans
		// do directly, and no slot row of t1: t1's record types come
		// before t2's, and a lock of t2's slot rows by range took the gap
		// before t2's first slot row, where new slot rows of t1's last
		// record go (the fuzzer's finding: each check below increments a
		// t1 record above every other with slot rows).
		text("INSERT INTO t1 (id) VALUES (410), (420), (430)"),
		text("BEGIN"),
		text("DELETE FROM t2 WHERE c1 = 99"),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 400")),
		on(1, text("UPDATE t2 SET c1 = c1 + 1 WHERE id = 10")), // waits, as directly
		text("ROLLBACK"),
		text("BEGIN"),
		text("UPDATE t2 SET c1 = 7"),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 410")),
		on(1, text("INSERT INTO t2 (id) VALUES (40)")), // waits, as directly
		text("ROLLBACK"),
		text("BEGIN"),
		text("SELECT * FROM t2 FOR UPDATE"),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 420")),
		text("ROLLBACK"),
		text("BEGIN"),
		text("SELECT id FROM t2 WHERE c1 > 1 LOCK IN SHARE MODE"),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 430")),
		text("ROLLBACK"),

		// An increment of several records that leaves a counter's range
		// on one of them fails there, having locked the records before it
		// in key order and not the ones after, as the server's UPDATE
		// does (strict mode): the proxy runs it on the base rows, locking
		// them one by one and stopping at the first that fails.
		text("UPDATE t1 SET c2 = 4294967290 WHERE id = 20"),
		text("BEGIN"),
		text("UPDATE t1 SET c2 = c2 + 10 WHERE id IN (30, 10, 20)"),
		on(1, text("UPDATE t1 SET c2 = c2 + 1 WHERE id = 30")),
		on(1, text("UPDATE t1 SET name = 'locked' WHERE id = 30")),
		on(1, text("UPDATE t1 SET name = 'locked' WHERE id = 10")), // waits, as directly
		text("SELECT id, c2 FROM t1 WHERE id IN (10, 20, 30) ORDER BY id"),
		text("ROLLBACK"),

		// An increment that waits for a lock the client's own UPDATE
		// would wait for gets the same error and diagnostics (MariaDB
		// lists an UPDATE's lock wait timeout twice, the proxy's upsert's
		// once) after one lock wait.
		on(1, text("BEGIN")),
		on(1, text("UPDATE t1 SET name = 'locked' WHERE id = 10")),
		text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 10"),
		text("SHOW WARNINGS"),
		prep("UPDATE t1 SET c2 = c2 + ? WHERE id = ?", 2, 10),
		text("SHOW WARNINGS"),
		on(1, text("ROLLBACK")),

		text(touchRollup),
		text("SELECT * FROM t1 ORDER BY id"),
		text("SELECT * FROM t2 ORDER BY id"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
}

// TestGuardBeyondKeyLimit: a guarded write of more rows than the proxy
// keeps keys of (executor.Env.MaxGuardKeys, 3 here; 100,000 by default)
// folds every slotted record of its table instead of keeping the keys of
// the rows it locked: memory stays bounded for a DELETE of millions of
// rows, and the totals are exact, in autocommit and in a transaction.
func TestGuardBeyondKeyLimit(t *testing.T) {
	const plain, ruled = "keylimit_plain", "keylimit_ruled"
	var rows []string
	for i := 1; i <= 12; i++ {
		rows = append(rows, fmt.Sprintf("(%d, %d, 'n%d')", i, i*10, i%3))
	}
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, c1 INT NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t1 (id, c1, name) VALUES " + strings.Join(rows, ", "),
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1]\nslots: 4\n")
	var corpus []step
	incs := func() {
		for _, id := range []int{1, 3, 5, 7, 9, 11} {
			corpus = append(corpus, text(fmt.Sprintf("UPDATE t1 SET c1 = c1 + %d WHERE id = %d", id, id)))
		}
	}
	incs()
	corpus = append(corpus,
		text("UPDATE t1 SET name = 'z', c1 = c1 * 2 WHERE name <> 'x'"),
		text("SELECT * FROM t1 ORDER BY id"),
	)
	incs()
	corpus = append(corpus,
		text("BEGIN"),
		text("UPDATE t1 SET c1 = c1 + 1 WHERE id = 1"),
		text("DELETE FROM t1 WHERE name = 'z' AND id > 6"),
		text("SELECT * FROM t1 ORDER BY id"),
		text("COMMIT"),
	)
	incs()
	corpus = append(corpus,
		text("DELETE FROM t1"),
		text("SELECT * FROM t1 ORDER BY id"),
		text("INSERT INTO t1 (id, c1) VALUES (1, 1), (3, 3), (5, 5)"),
		text("SELECT * FROM t1 ORDER BY id"),
	)
	runDifferentialWith(t, cat, plain, ruled, corpus, func(s *proxy.Server) { proxy.SetMaxGuardKeys(s, 3) })
}

// TestRetryKeepsLockWaitBudget: an autocommit statement that waits for a
// row another transaction holds fails after innodb_lock_wait_timeout
// directly. Through the proxy the same wait can end in a deadlock instead
// (the holder's increment holds the row in share mode, and the holder then
// asks for it exclusively), and the proxy runs the statement again: that
// retry used to wait a whole timeout again and succeed once the holder
// committed, long after the statement would have failed directly — an
// increment the client would not have made (the differential fuzzer's
// finding, MariaDB seed 1795875190962004974). The retry now waits only what
// is left of the statement's timeout, rounded to the variable's second.
func TestRetryKeepsLockWaitBudget(t *testing.T) {
	const plain, ruled = "budget_plain", "budget_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, c1 SMALLINT NOT NULL DEFAULT 0, c2 SMALLINT NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t1 (id, c1, c2) VALUES (1, 9, 5), (2, 7, 18)",
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1, c2]\nslots: 8\n")
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	connect := func(addr, db string) *client.Conn {
		c, err := client.Connect(addr, testdb.User, testdb.Password, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Execute("SET SESSION innodb_lock_wait_timeout = 2"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	type outcome struct {
		waited      string // the waiting statement's response
		took        time.Duration
		warnings    string // its SHOW WARNINGS
		timeout, c2 string // the session's timeout after it, the total
	}
	run := func(addr, db string) outcome {
		holder, waiter := connect(addr, db), connect(addr, db)
		exec := func(c *client.Conn, sql string) {
			t.Helper()
			if _, err := c.Execute(sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		exec(holder, "BEGIN")
		exec(holder, "UPDATE t1 SET c1 = c1 + 1 WHERE id = 2")
		start := time.Now()
		done := make(chan outcome, 1)
		go func() {
			// A condition on the counter: the proxy locks the row and
			// folds its slots first.
			r, err := waiter.Execute("UPDATE t1 SET c2 = c2 + 1 WHERE id = 2 AND 0 < c2")
			o := outcome{waited: renderTyped(r, err), took: time.Since(start)}
			o.warnings = renderTyped(waiter.Execute("SHOW WARNINGS"))
			o.timeout = renderTyped(waiter.Execute("SELECT @@SESSION.innodb_lock_wait_timeout"))
			done <- o
		}()
		time.Sleep(1600 * time.Millisecond)
		exec(holder, "UPDATE t1 SET name = 'x' WHERE id = 2") // the row, exclusively
		time.Sleep(time.Until(start.Add(3 * time.Second)))
		exec(holder, "COMMIT")
		o := <-done
		o.c2 = renderTyped(holder.Execute("SELECT c1, c2 FROM t1 WHERE id = 2"))
		return o
	}
	direct := run(testdb.Shared().Addr, plain)
	proxied := run(p.addr, ruled)
	if !strings.Contains(direct.waited, "1205") {
		t.Fatalf("directly the waiting statement answered %s, want 1205 (the scenario assumes it)", direct.waited)
	}
	for _, c := range []struct{ what, direct, proxy string }{
		{"the waiting statement", direct.waited, proxied.waited},
		{"its SHOW WARNINGS", direct.warnings, proxied.warnings},
		{"the session's innodb_lock_wait_timeout after it", direct.timeout, proxied.timeout},
		{"the totals", direct.c2, proxied.c2},
	} {
		if c.direct != c.proxy {
			t.Errorf("%s:\n proxy:  %s\n direct: %s", c.what, c.proxy, c.direct)
		}
	}
	if d := proxied.took - direct.took; d < -600*time.Millisecond || d > 600*time.Millisecond {
		t.Errorf("the waiting statement failed after %v through the proxy, %v directly", proxied.took, direct.took)
	}
}

// TestFailedSlottedAttemptLeavesNoLocks: in a client's transaction, a
// slotted increment that writes several slot rows (records a condition
// finds, an IN list, several counters of one record, other columns that
// must already hold their values) and cannot take one of them (a NULL
// counter, a delta beyond the slot's share, a column that does not hold
// its value) runs on the base rows instead. Its slotted attempt must not
// have inserted the slot rows before the failing one: InnoDB (MySQL,
// REPEATABLE READ) hands the locks of the rows the failed statement
// removed to the next row of the slot table as a gap lock, held to the
// transaction's end, and every insert of a new slot row into that gap (of
// any table's counters: here the end of the table) waited for it: another
// connection's increment failed with 1205 where directly it runs at once
// (the fuzzer's finding mysql-1795885610416115061). Every connection has a
// lock wait timeout of 1 s.
func TestFailedSlottedAttemptLeavesNoLocks(t *testing.T) {
	const plain, ruled = "attemptlock_plain", "attemptlock_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t2 (id BIGINT NOT NULL PRIMARY KEY, c1 SMALLINT NULL, c2 SMALLINT DEFAULT NULL, c3 BIGINT UNSIGNED NULL, name VARCHAR(20) NULL)",
		"INSERT INTO t2 (id, c1, c2, c3, name) VALUES (1, 3, 32765, 5, 'a'), (2, 2, -7, 13, 'a'), (3, -997, 17, 15, 'b'), (4, -997, NULL, NULL, 'a'), (5, NULL, 10, 1, 'a'), (6, 1, 1, 1, 'a')",
		"CREATE TABLE t3 (id INT NOT NULL PRIMARY KEY, c1 SMALLINT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO t3 (id, c1) VALUES (1, 5), (2, 2), (3, 7), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)",
	}, "table: "+ruled+".t2\nkey: id\ncounters: [c1, c2, c3]\nslots: 8\n---\ntable: "+ruled+".t3\nkey: id\ncounters: [c1]\nslots: 4\n")
	short := "SET SESSION innodb_lock_wait_timeout = 1"
	// attempt runs inc in a transaction on connection 0, then an
	// increment of a new t3 record on connection 1 (a new slot row at the
	// end of the slot table), then of a t2 record with no slot row yet.
	attempt := func(inc step, t3, t2 int) []step {
		return []step{
			text("BEGIN"),
			inc,
			on(1, text(fmt.Sprintf("UPDATE t3 SET c1 = c1 + 3 WHERE id = %d", t3))),
			on(1, text(fmt.Sprintf("UPDATE t2 SET c1 = c1 + 1 WHERE id = %d", t2))),
			text("SELECT id, c1, c2, c3 FROM t2 ORDER BY id"),
			text("COMMIT"),
		}
	}
	corpus := []step{on(0, text(short)), on(1, text(short))}
	// The records a condition finds, one of them NULL (the finding).
	corpus = append(corpus, attempt(text("UPDATE t2 SET c3 = c3 + 2 WHERE id <> 2 OR id < 5"), 1, 6)...)
	// An IN list, a NULL on the second record.
	corpus = append(corpus, attempt(text("UPDATE t2 SET c3 = c3 + 1 WHERE id IN (1, 4)"), 2, 6)...)
	// Several counters of one record, the second NULL.
	corpus = append(corpus, attempt(text("UPDATE t2 SET c1 = c1 + 1, c2 = c2 + 1 WHERE id = 4"), 3, 6)...)
	// A delta beyond the slot's share on the second record (c2 = 32765
	// on record 1, 17 on 3: the base rows take it, in range on 3, out of
	// range on 1: the server's own error).
	corpus = append(corpus, attempt(text("UPDATE t2 SET c2 = c2 + 5 WHERE id IN (3, 1)"), 4, 6)...)
	// Another column that must already hold its value, on the second
	// record not.
	corpus = append(corpus, attempt(text("UPDATE t2 SET c1 = c1 + 1, name = 'a' WHERE id IN (2, 3)"), 5, 6)...)
	// Prepared, the records a condition finds.
	corpus = append(corpus, attempt(prep("UPDATE t2 SET c3 = c3 + ? WHERE id <> ?", 1, 2), 6, 6)...)
	// The same in autocommit, and at SERIALIZABLE.
	corpus = append(corpus,
		text("UPDATE t2 SET c3 = c3 + 2 WHERE id <> 2 OR id < 5"),
		on(1, text("UPDATE t3 SET c1 = c1 + 3 WHERE id = 7")),
		text("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"))
	corpus = append(corpus, attempt(text("UPDATE t2 SET c3 = c3 + 2 WHERE id >= 3"), 8, 6)...)
	corpus = append(corpus,
		text("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
		text(touchRollup),
		text("SELECT * FROM t2 ORDER BY id"),
		text("SELECT * FROM t3 ORDER BY id"))
	runDifferential(t, cat, plain, ruled, corpus)
}

// TestSortedIncrementLockDiagnostics: a slotted increment of several slot
// rows in a client's transaction (sorted: see TestFailedSlottedAttemptLeavesNoLocks)
// that waits for a row another transaction holds fails with the error and
// the SHOW WARNINGS the client's UPDATE gives: not the "Sort aborted"
// (1028) its sort adds on MariaDB, and the lock error listed as often as
// MariaDB lists it for the UPDATE (twice when it reads its rows by a key or
// a range of it, once when it scans every row) (the fuzzer's finding
// mariadb-1795891898957702556). Lock wait timeout 1 s.
func TestSortedIncrementLockDiagnostics(t *testing.T) {
	const plain, ruled = "sortdiag_plain", "sortdiag_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t (id INT NOT NULL PRIMARY KEY, c1 INT NOT NULL DEFAULT 0, c2 INT NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t (id, c1, c2, name) VALUES (1, 0, 0, 'a'), (2, 0, 0, 'b'), (3, 0, 0, NULL)",
	}, "table: "+ruled+".t\nkey: id\ncounters: [c1, c2]\nslots: 4\n")
	short := "SET SESSION innodb_lock_wait_timeout = 1"
	corpus := []step{on(0, text(short)), on(1, text(short)),
		on(1, text("BEGIN")),
		on(1, text("INSERT INTO t (id, name) VALUES (4, NULL)")),
		on(1, text("UPDATE t SET c1 = 5 WHERE id = 2")),
	}
	for _, inc := range []string{
		"UPDATE t SET c1 = c1 + 1 WHERE name IS NULL",         // a scan, meets row 4
		"UPDATE t SET c1 = c1 + 1 WHERE id IN (1, 2)",         // by key, meets row 2
		"UPDATE t SET c1 = c1 + 1, c2 = c2 + 1 WHERE id = 2",  // one record, two counters
		"UPDATE t SET c1 = c1 + 1 WHERE id > 1",               // a range
		"UPDATE t SET c1 = c1 + 1 WHERE name = 'b' OR id = 9", // a condition
	} {
		corpus = append(corpus, text("BEGIN"), text(inc), text("SHOW WARNINGS"), text("ROLLBACK"))
	}
	corpus = append(corpus, on(1, text("ROLLBACK")), text("SELECT * FROM t ORDER BY id"))
	runDifferential(t, cat, plain, ruled, corpus)
}
