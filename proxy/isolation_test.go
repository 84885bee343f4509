package proxy_test

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestReadCommittedGuardedWrites: at READ COMMITTED, InnoDB takes no gap
// locks, so a guard cannot keep rows it did not lock from appearing (with
// increments in their slots) before its statement writes them. Writes that
// name their rows by key are exact (the rows are locked by key; a key
// whose row appears in between makes the statement run again); other
// single-table writes with a WHERE clause run restricted to the keys their
// guard locked (as if they had run when the guard did); autocommit writes
// run in a REPEATABLE READ transaction of the proxy's own; the rest, inside
// a transaction, are refused before anything runs.
func TestReadCommittedGuardedWrites(t *testing.T) {
	setupDiffSchemas(t)
	var window atomic.Int32
	var inWindow atomic.Pointer[func()]
	p := startProxyFull(t, func(c *proxy.Config) { c.Rewriter = newRewriter(diffCatalog()) }, func(s *proxy.Server) {
		proxy.SetGuardWindow(s, func() {
			window.Add(1)
			if f := inWindow.Swap(nil); f != nil {
				(*f)()
			}
		})
	})
	connect := func(addr string) *client.Conn {
		c, err := client.Connect(addr, testdb.User, testdb.Password, ruledSchema)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b, direct := connect(p.addr), connect(p.addr), connect(testdb.Shared().Addr)
	exec := func(c *client.Conn, q string) *gomysql.Result {
		t.Helper()
		r, err := c.Execute(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return r
	}
	total := func(id int) int64 {
		t.Helper()
		r := exec(b, "SELECT downloads FROM repos WHERE id = "+itoa(id))
		v, _ := r.GetInt(0, 0)
		return v
	}
	refused := func(q string) {
		t.Helper()
		_, err := a.Execute(q)
		var me *gomysql.MyError
		if !asMyError(err, &me) || me.Code != 1235 || !strings.Contains(me.Message, "rule diff_ruled.repos") ||
			!strings.Contains(me.Message, "READ COMMITTED") || !strings.Contains(me.Message, "REPEATABLE READ") {
			t.Fatalf("%s: %v, want refusal 1235 naming the rule and the isolation level", q, err)
		}
	}

	exec(a, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
	exec(a, "UPDATE repos SET downloads = downloads + 3 WHERE id = 1") // slotted
	// Autocommit, rows known only as it runs: the proxy's own transaction
	// runs at REPEATABLE READ; the session's level stays.
	if r := exec(a, "UPDATE repos SET downloads = 50 WHERE name = 'alpha'"); r.AffectedRows != 1 {
		t.Fatalf("affected %d", r.AffectedRows)
	}
	if v := total(1); v != 50 {
		t.Fatalf("total %d, want 50", v)
	}
	if lvl := exec(a, "SELECT REPLACE(@@SESSION."+isolationVar(a)+", '-', ' ')"); !strings.HasPrefix(string(lvl.Values[0][0].AsString()), "READ COMMITTED") {
		t.Fatalf("session level after the write: %q", lvl.Values[0][0].AsString())
	}

	// In a transaction: refused, nothing run, no lock taken.
	exec(a, "BEGIN")
	exec(a, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	refused("UPDATE repos SET downloads = 5")
	// Its WHERE clause reads counters only: the guard locks the slotted
	// records, not the rows the statement writes (it once wrote only
	// those).
	refused("UPDATE repos SET downloads = 5 WHERE downloads > 3")
	refused("UPDATE repos r JOIN users u ON u.id = r.owner_id SET r.downloads = 0 WHERE u.name = 'ann'")
	// An upsert that can conflict on the key only locks its keys' rows,
	// like an UPDATE by key.
	if r := exec(a, "INSERT INTO repos (id, name) VALUES (1, 'alpha') ON DUPLICATE KEY UPDATE downloads = 0"); r.AffectedRows != 2 {
		t.Fatalf("upsert affected %d, want 2 (updated)", r.AffectedRows)
	}
	exec(direct, "SET SESSION innodb_lock_wait_timeout = 1")
	exec(direct, "UPDATE repos SET name = name WHERE id = 2") // not locked by the refusals
	// By key, or restricted to the keys the guard locked: exact.
	if r := exec(a, "UPDATE repos SET downloads = 5, stars = stars + 1 WHERE name = 'alpha'"); r.AffectedRows != 1 {
		t.Fatalf("affected %d", r.AffectedRows)
	}
	if v := total(1); v != 50 { // b does not see a's uncommitted write
		t.Fatalf("total %d seen by another session, want 50", v)
	}
	exec(a, "UPDATE repos SET downloads = 7 WHERE id = 1 AND name = 'alpha'")
	exec(a, "DELETE FROM repos WHERE name = 'nobody'")
	exec(a, "COMMIT")
	if v := total(1); v != 7 {
		t.Fatalf("total %d, want 7", v)
	}

	// A key without a row gets one, with an increment, between the lock
	// and the statement: the statement is undone and runs again over the
	// folded row, as if it had run after the increment (as directly).
	late := func() {
		exec(b, "INSERT INTO repos (id, name) VALUES (99, 'late')")
		exec(b, "UPDATE repos SET downloads = downloads + 5 WHERE id = 99")
	}
	inWindow.Store(&late)
	window.Store(0)
	exec(a, "BEGIN")
	if r := exec(a, "UPDATE repos SET downloads = 1 WHERE id IN (99, 1)"); r.AffectedRows != 2 {
		t.Fatalf("affected %d, want 2", r.AffectedRows)
	}
	exec(a, "COMMIT")
	if n := window.Load(); n != 2 {
		t.Fatalf("the statement ran %d times, want 2 (undone once)", n)
	}
	if v := total(99); v != 1 {
		t.Fatalf("total of the late row %d, want 1", v)
	}

	// A row matching the condition appears, with an increment, between the
	// guard and the statement: the statement, restricted to the rows the
	// guard locked, leaves it alone, as if it had run first (the increment
	// is kept).
	late = func() {
		exec(b, "INSERT INTO repos (id, name) VALUES (98, 'later')")
		exec(b, "UPDATE repos SET downloads = downloads + 5 WHERE id = 98")
	}
	inWindow.Store(&late)
	exec(a, "BEGIN")
	if r := exec(a, "UPDATE repos SET downloads = 0 WHERE name = 'later'"); r.AffectedRows != 0 {
		t.Fatalf("affected %d, want 0 (the row appeared after the guard)", r.AffectedRows)
	}
	exec(a, "COMMIT")
	if v := total(98); v != 5 {
		t.Fatalf("total of the row that appeared %d, want 5", v)
	}
	if r := exec(a, "UPDATE repos SET downloads = 0 WHERE name = 'later'"); r.AffectedRows != 1 {
		t.Fatalf("affected %d, want 1", r.AffectedRows)
	}
	if v := total(98); v != 0 {
		t.Fatalf("total %d after it was set to 0, want 0", v)
	}

	// The same for a DELETE: the row that appeared is left alone with its
	// increment, rather than deleted with its slot rows left behind for a
	// key inserted again to inherit.
	late = func() {
		exec(b, "INSERT INTO repos (id, name) VALUES (97, 'gone')")
		exec(b, "UPDATE repos SET downloads = downloads + 4 WHERE id = 97")
	}
	inWindow.Store(&late)
	exec(a, "BEGIN")
	if r := exec(a, "DELETE FROM repos WHERE name = 'gone'"); r.AffectedRows != 0 {
		t.Fatalf("DELETE affected %d, want 0 (the row appeared after the guard)", r.AffectedRows)
	}
	exec(a, "COMMIT")
	if v := total(97); v != 4 {
		t.Fatalf("total of the row that appeared during the DELETE %d, want 4", v)
	}
	exec(a, "DELETE FROM repos WHERE name = 'gone'")
	exec(a, "INSERT INTO repos (id, name) VALUES (97, 'again')")
	if v := total(97); v != 0 {
		t.Fatalf("a key deleted and inserted again has total %d, want 0", v)
	}

	// A one-shot SET TRANSACTION: its transaction is weak, the next is not.
	exec(a, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	exec(a, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
	exec(a, "BEGIN")
	_, err := a.Execute("UPDATE repos SET downloads = 2")
	var me *gomysql.MyError
	if !asMyError(err, &me) || me.Code != 1235 {
		t.Fatalf("one-shot READ COMMITTED: %v, want refusal", err)
	}
	exec(a, "COMMIT")
	exec(a, "BEGIN")
	exec(a, "UPDATE repos SET downloads = 2 WHERE name = 'beta'")
	exec(a, "COMMIT")
	if v := total(2); v != 2 {
		t.Fatalf("total %d, want 2", v)
	}
	var slots int64
	if r := exec(direct, "SELECT COUNT(*) FROM slotted_counters WHERE record_id IN (1, 2, 99) AND count <> 0"); true {
		slots, _ = r.GetInt(0, 0)
	}
	if slots != 0 {
		t.Fatalf("%d slot rows left for folded records", slots)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func asMyError(err error, me **gomysql.MyError) bool { return errors.As(err, me) }

// isolationVar is the session variable holding the isolation level on the
// server behind c.
func isolationVar(c *client.Conn) string {
	if strings.Contains(strings.ToLower(c.GetServerVersion()), "mariadb") {
		return "tx_isolation"
	}
	return "transaction_isolation"
}

// TestAutocommitWriteByKeyAtReadCommitted (fuzzer, MariaDB,
// mariadb-1795902123158267991): an autocommit absolute write or delete of
// one key at READ COMMITTED does not wait for a gap another transaction's
// scan locked at REPEATABLE READ (directly READ COMMITTED takes no gap
// locks); it waits for a row that transaction holds, as directly. The
// server as the oracle, on both servers.
func TestAutocommitWriteByKeyAtReadCommitted(t *testing.T) {
	const plain, ruled = "rckey_plain", "rckey_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t (id INT NOT NULL PRIMARY KEY, c INT NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t (id, c, name) VALUES (1, 10, 'a'), (2, 4, 'b'), (3, 9, 'c'), (4, 1, 'd'), (5, 7, 'e')",
	}, "table: "+ruled+".t\nkey: id\ncounters: [c]\nslots: 4\n")
	short := "SET SESSION innodb_lock_wait_timeout = 1"
	corpus := []step{
		on(0, text(short)), on(1, text(short)),
		text("UPDATE t SET c = c + 3 WHERE id IN (1, 3)"), // slotted
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")),
		text("BEGIN"),
		text("SELECT id, c FROM t ORDER BY id"), // a snapshot: rows deleted after it stay (delete-marked)
		on(2, text("DELETE FROM t WHERE id IN (2, 4)")),
		text("DELETE FROM t WHERE c = 100"), // scans every row and gap at REPEATABLE READ, deletes none
		// Keys with no row (rows deleted, kept for the snapshot, and
		// gaps) that it locked: no wait.
		on(1, text("UPDATE t SET c = 5 WHERE id = 2")),
		on(1, text("DELETE FROM t WHERE id = 4")),
		on(1, text("UPDATE t SET c = c + 1, name = 'x' WHERE id = 6")),
		// A row it holds: waited for (1205), as directly.
		on(1, text("UPDATE t SET c = 20 WHERE id = 3")),
		text("COMMIT"),
		on(1, text("UPDATE t SET c = 20 WHERE id = 3")),
		on(1, text("DELETE FROM t WHERE id = 1")),
		on(1, text("INSERT INTO t (id, c) VALUES (1, 2)")),
		on(1, text("UPDATE t SET c = c + 1 WHERE id = 1")),
		on(1, text("UPDATE t SET c = 4 WHERE id = 1")),
		text("SELECT id, c, name FROM t ORDER BY id"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
}

// TestSessionLevelSetInTransaction (fuzzer, MariaDB,
// mariadb-1795902123158268017): SET SESSION TRANSACTION ISOLATION LEVEL
// READ UNCOMMITTED inside a REPEATABLE READ transaction leaves that
// transaction's level as it is; a locking read of counters in it then
// takes no snapshot (its read runs as written), so the transaction's first
// plain read sees what was committed before it, as directly. The next
// transaction runs at READ UNCOMMITTED. The server as the oracle.
func TestSessionLevelSetInTransaction(t *testing.T) {
	const plain, ruled = "txlevel_plain", "txlevel_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t (id INT NOT NULL PRIMARY KEY, c INT NOT NULL DEFAULT 0)",
		"INSERT INTO t (id, c) VALUES (1, 10), (2, 4), (3, 9)",
	}, "table: "+ruled+".t\nkey: id\ncounters: [c]\nslots: 4\n")
	corpus := []step{
		text("UPDATE t SET c = c + 1 WHERE id = 1"), // slotted
		on(1, text("BEGIN")),
		on(1, text("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")),
		on(1, text("SELECT id, c FROM t WHERE id = 1 FOR UPDATE")),
		text("UPDATE t SET c = c + 3 WHERE id = 2"),
		on(1, text("SELECT SUM(c), MAX(c), COUNT(*) FROM t")),
		text("UPDATE t SET c = c + 5 WHERE id = 3"),
		on(1, text("SELECT SUM(c) FROM t")), // the snapshot: without id 3's +5
		on(1, text("COMMIT")),
		// The next transaction: READ UNCOMMITTED.
		on(1, text("BEGIN")),
		text("BEGIN"),
		text("UPDATE t SET c = c + 7 WHERE id = 3"),
		on(1, text("SELECT id, c FROM t ORDER BY id")),
		text("ROLLBACK"),
		on(1, text("SELECT id, c FROM t ORDER BY id")),
		on(1, text("COMMIT")),
	}
	runDifferential(t, cat, plain, ruled, corpus)
}

// TestRefusalOpensNoTransaction (fuzzer, MariaDB, CI's bounded run,
// mariadb-1795908515451203811): with autocommit off at READ COMMITTED, an
// upsert whose slotted attempt fails (a delta beyond the slot's share) and
// whose guarded form is refused leaves no transaction open: the refusal
// says nothing was run, and the transaction the proxy's attempt opened
// held nothing of the client's.
func TestRefusalOpensNoTransaction(t *testing.T) {
	const plain, ruled = "refusal_plain", "refusal_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id VARCHAR(20) NOT NULL PRIMARY KEY, c1 BIGINT UNSIGNED NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t1 (id, c1, name) VALUES ('1', 18446744073709551615, 'n1'), ('3', 18446744073709551612, 'n3')",
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1]\nslots: 6\n")
	p := startProxyFull(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) }, nil)
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, ruled)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", "SET autocommit = 0"} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(q, err)
		}
	}
	_, err = c.Execute("INSERT INTO t1 (id, c1, name) VALUES ('3', 4, 'n7') ON DUPLICATE KEY UPDATE c1 = c1 + 1")
	var me *gomysql.MyError
	if !asMyError(err, &me) || me.Code != 1235 {
		t.Fatalf("upsert: %v, want the refusal 1235", err)
	}
	r, err := c.Execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status&gomysql.SERVER_STATUS_IN_TRANS != 0 {
		t.Fatalf("a transaction is open after the refusal (status %#x)", r.Status)
	}
	r, err = c.Execute("SELECT c1 FROM t1 WHERE id = '3'")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.GetUint(0, 0); v != 18446744073709551612 {
		t.Fatalf("c1 %d, want 18446744073709551612", v)
	}
}
