package proxy_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestLoadDataLocalReplace: LOAD DATA LOCAL … REPLACE into a ruled table
// (was refused): the records it may replace are folded first, then the
// client sends its file in the middle of the statement's response, in the
// same transaction; directly and through the proxy, in autocommit and in a
// transaction kept and rolled back, the affected rows, the warnings and
// the totals are the same, and no replaced row leaves slots behind.
func TestLoadDataLocalReplace(t *testing.T) {
	const plain, ruled = "loadlocal_plain", "loadlocal_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, c1 INT NOT NULL DEFAULT 0, c2 TINYINT UNSIGNED NOT NULL DEFAULT 0, name VARCHAR(20) NULL)",
		"INSERT INTO t1 (id, c1, c2, name) VALUES (1, 10, 1, 'a'), (2, 20, 2, 'b'), (3, 30, 3, 'c'), (4, 40, 4, 'd')",
	}, "table: "+ruled+".t1\nkey: id\ncounters: [c1, c2]\nslots: 4\n")
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	mysql.RegisterReaderHandler("loadlocal", func() io.Reader {
		// Replaces 2 and 3 (3 with a value c2 truncates: a warning),
		// adds 5.
		return strings.NewReader("2,7,7,x\n3,8,300,y\n5,9,9,z\n")
	})
	defer mysql.DeregisterReaderHandler("loadlocal")
	open := func(dsn string) *sql.Conn {
		db := openDSN(t, dsn)
		c, err := db.Conn(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	direct := open(testdb.Shared().DSN(testdb.User, testdb.Password, plain, ""))
	proxied := open(p.dsn(testdb.User, testdb.Password, ruled, ""))
	step := func(q string) {
		t.Helper()
		run := func(c *sql.Conn) string {
			res, err := c.ExecContext(context.Background(), q)
			if err != nil {
				return "ERR " + err.Error()
			}
			n, _ := res.RowsAffected()
			return fmt.Sprintf("affected %d", n)
		}
		want, got := strings.ReplaceAll(run(direct), plain, ruled), run(proxied)
		if got != want {
			t.Errorf("%s:\n proxy:  %s\n direct: %s", q, got, want)
		}
	}
	read := func(q string) {
		t.Helper()
		if got, want := rowsText(t, proxied, q), rowsText(t, direct, q); got != want {
			t.Errorf("%s:\n proxy:  %s\n direct: %s", q, got, want)
		}
	}
	load := "LOAD DATA LOCAL INFILE 'Reader::loadlocal' REPLACE INTO TABLE t1 FIELDS TERMINATED BY ',' (id, c1, c2, name)"
	for _, c := range []*sql.Conn{direct, proxied} {
		mustExec(t, c, "SET SESSION sql_mode = ''") // c2 = 300 is truncated with a warning
	}
	incs := []string{
		"UPDATE t1 SET c1 = c1 + 5, c2 = c2 + 1 WHERE id = 2",
		"UPDATE t1 SET c1 = c1 + 6 WHERE id = 3",
		"UPDATE t1 SET c1 = c1 + 7 WHERE id = 4",
	}
	for _, q := range incs {
		step(q)
	}
	// In a transaction, rolled back: the rows and their slots are back.
	step("BEGIN")
	step(load)
	read("SHOW WARNINGS")
	read("SELECT * FROM t1 ORDER BY id")
	step("ROLLBACK")
	read("SELECT * FROM t1 ORDER BY id")
	// In autocommit.
	step(load)
	read("SHOW WARNINGS")
	read("SELECT * FROM t1 ORDER BY id")
	for _, q := range incs {
		step(q)
	}
	// In a transaction, committed.
	step("BEGIN")
	step(load)
	step("UPDATE t1 SET c1 = c1 + 1 WHERE id = 5")
	step("COMMIT")
	read("SELECT * FROM t1 ORDER BY id")
	if g := p.srv.Stats().GuardedWrites; g < 3 {
		t.Errorf("%d guarded writes, want the 3 loads at least", g)
	}
	admin := touchAdmin(t)
	r, err := admin.Execute("SELECT COUNT(*) FROM " + ruled + ".slotted_counters s WHERE s.count <> 0 AND s.record_id IN (2, 3)")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.GetInt(0, 0); n != 0 {
		t.Errorf("%d slot rows with counts left for the replaced rows 2 and 3", n)
	}
}

// rowsText renders every row of query's result.
func rowsText(t *testing.T, c *sql.Conn, query string) string {
	t.Helper()
	rows, err := c.QueryContext(context.Background(), query)
	if err != nil {
		return "ERR " + err.Error()
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		b.WriteString("(")
		for i, v := range vals {
			if i > 0 {
				b.WriteString(",")
			}
			if v.Valid {
				b.WriteString(v.String)
			} else {
				b.WriteString("NULL")
			}
		}
		b.WriteString(")")
	}
	return b.String()
}
