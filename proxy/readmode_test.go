package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestRolledUpReads: with reads: rolled_up, a plain read of a counter is
// the statement as written (the base value, which the roll-up brings up to
// date), while everything that must be exact stays exact: increments
// still count, a locking read and a read of the transaction's own
// increment see the total, and a read after a roll-up pass sees every
// increment.
func TestRolledUpReads(t *testing.T) {
	const schema = "rolled_ruled"
	ddl := []string{
		"CREATE TABLE posts (id BIGINT NOT NULL PRIMARY KEY, title VARCHAR(20) NOT NULL DEFAULT '', views INT NOT NULL DEFAULT 0)",
		"INSERT INTO posts (id, title, views) VALUES (1, 'a', 100), (2, 'b', 200)",
	}
	cat := loadedSetup(t, "rolled_plain", schema, ddl,
		"table: "+schema+".posts\nkey: id\ncounters: [views]\nslots: 4\nreads: rolled_up\nmax_staleness: 2s\n")
	tbl := cat.Tables()[0]
	if !tbl.RolledUp || tbl.MaxStaleness.String() != "2s" {
		t.Fatalf("catalog: rolled up %v, max staleness %v", tbl.RolledUp, tbl.MaxStaleness)
	}
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, schema, ""))
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	for range 5 {
		mustExec(t, db, "UPDATE posts SET views = views + 1 WHERE id = 1")
	}
	// Plain reads: the rolled-up base value.
	if got := queryString(t, db, "SELECT views FROM posts WHERE id = 1"); got != "100" {
		t.Fatalf("plain read before roll-up = %s, want the base value 100", got)
	}
	if got := queryString(t, db, "SELECT SUM(views) FROM posts"); got != "300" {
		t.Fatalf("plain aggregate before roll-up = %s, want 300", got)
	}
	// A locking read is exact.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, tx, "SELECT views FROM posts WHERE id = 1 FOR UPDATE"); got != "105" {
		t.Fatalf("locking read = %s, want 105", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// The locking read folded record 1; record 2's increments in a
	// transaction are read back exactly by that transaction.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "UPDATE posts SET views = views + 7 WHERE id = 2")
	if got := queryString(t, tx, "SELECT views FROM posts WHERE id = 2"); got != "207" {
		t.Fatalf("read of the transaction's own increment = %s, want 207", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "UPDATE posts SET views = views + 3 WHERE id = 2")
	if got := queryString(t, db, "SELECT views FROM posts WHERE id = 2"); got != "207" {
		t.Fatalf("plain read of record 2 = %s, want 207 (the newest increment still in its slot)", got)
	}
	// After a roll-up pass, plain reads see every increment.
	if _, err := rollup.All(ctx, touchAdmin(t), cat, rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, db, "SELECT GROUP_CONCAT(id, '=', views ORDER BY id) FROM posts"); got != "1=105,2=210" {
		t.Fatalf("plain read after roll-up = %s, want 1=105,2=210", got)
	}
	st := p.srv.Stats()
	if st.RewrittenWrites != 7 {
		t.Fatalf("%d increments slotted, want 7", st.RewrittenWrites)
	}
}

// TestPreparedIncrementSlotPerExecution: a prepared increment executed
// many times on one connection spreads over the record's slots (each
// execution picks its own), instead of keeping the slot its preparation
// was planned with, whether its delta is a parameter, a literal (whose
// upsert writes it and the slot as literals, the proxy's own preparation
// the slot once, as a parameter) or it has no parameter at all; the total
// stays exact, and closing the statement closes the proxy's own
// preparation too.
func TestPreparedIncrementSlotPerExecution(t *testing.T) {
	const schema = "prepslot_ruled"
	ddl := []string{
		"CREATE TABLE posts (id BIGINT NOT NULL PRIMARY KEY, views INT NOT NULL DEFAULT 0)",
		"INSERT INTO posts (id) VALUES (1), (2), (3)",
	}
	cat := loadedSetup(t, "prepslot_plain", schema, ddl, "table: "+schema+".posts\nkey: id\ncounters: [views]\nslots: 16\n")
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, schema, ""))
	db.SetMaxOpenConns(1)
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	ctx := context.Background()
	prepared := func() int {
		t.Helper()
		var name string
		var n int
		if err := root.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := prepared()
	const runs = 200
	for _, c := range []struct {
		id   int
		sql  string
		args func(i int) []any
		by   func(i int) int
	}{
		{1, "UPDATE posts SET views = views + ? WHERE id = ?", func(i int) []any { return []any{1 + i%3, 1} }, func(i int) int { return 1 + i%3 }},
		{2, "UPDATE posts SET views = views + 2 WHERE id = ?", func(int) []any { return []any{2} }, func(int) int { return 2 }},
		{3, "UPDATE posts SET views = views - 1 WHERE id = 3", func(int) []any { return nil }, func(int) int { return -1 }},
	} {
		stmt, err := db.PrepareContext(ctx, c.sql)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for i := range runs {
			if _, err := stmt.ExecContext(ctx, c.args(i)...); err != nil {
				t.Fatalf("%s: %v", c.sql, err)
			}
			want += c.by(i)
		}
		var slots int
		if err := root.QueryRowContext(ctx, "SELECT COUNT(DISTINCT slot) FROM "+schema+".slotted_counters WHERE record_id = ?", c.id).Scan(&slots); err != nil {
			t.Fatal(err)
		}
		if slots < 8 {
			t.Fatalf("%s: %d executions used %d of 16 slots, want them spread", c.sql, runs, slots)
		}
		if got := queryString(t, db, fmt.Sprintf("SELECT views FROM posts WHERE id = %d", c.id)); got != strconv.Itoa(want) {
			t.Fatalf("%s: total %s, want %d", c.sql, got, want)
		}
		if err := stmt.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// COM_STMT_CLOSE has no response: a round trip makes sure the server
	// has seen it.
	queryString(t, db, "SELECT 1")
	if after := prepared(); after > before {
		t.Fatalf("prepared statements on the server: %d before, %d after closing (the proxy's own preparation left open)", before, after)
	}
}
