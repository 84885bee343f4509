package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestUnplannableStatementsFailClosed: a statement that names a ruled
// table and cannot be planned exactly never passes through. One the
// parser does not take gets the server's own error when the server
// rejects it too (the client sees exactly the direct error), and is
// refused (1235, naming the rule) when the server would run it; SQL-level
// PREPARE of a counter write and a view over counters are refused, since
// their later executions or reads would not see the slots. Nothing of a
// refused statement runs, and the connection serves on.
func TestUnplannableStatementsFailClosed(t *testing.T) {
	p := startRuledProxy(t)
	ctx := context.Background()
	proxied := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	proxied.SetMaxOpenConns(1)
	direct := openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, plainSchema, ""))
	direct.SetMaxOpenConns(1)
	mustExec(t, proxied, "UPDATE repos SET downloads = downloads + 5 WHERE id = 1")
	mustExec(t, direct, "UPDATE repos SET downloads = downloads + 5 WHERE id = 1")
	code := func(err error) (uint16, string) {
		var me *mysql.MySQLError
		if errors.As(err, &me) {
			return me.Number, me.Message
		}
		return 0, ""
	}
	mariadb := !testdb.Shared().IsMySQL()

	// Rejected by the server as well: the same error, through the proxy.
	for _, q := range []string{
		"SELECT downloads FROM repos WHERE",
		"UPDATE repos SET downloads = downloads + WHERE id = 1",
		"HANDLER repos READ nonsense",
	} {
		_, derr := direct.ExecContext(ctx, q)
		_, perr := proxied.ExecContext(ctx, q)
		dc, dm := code(derr)
		pc, pm := code(perr)
		if dc == 0 || dc != pc || strings.ReplaceAll(dm, plainSchema, ruledSchema) != pm {
			t.Errorf("%q: direct %v, through the proxy %v", q, derr, perr)
		}
	}

	// Accepted by the server, and exact: data statements the parser does
	// not take run as written once every slotted record of the ruled
	// tables they name is folded (base values are totals); a write
	// prepared with SQL folds the records it may write at each EXECUTE,
	// then runs on the base rows.
	exact := []string{
		"PREPARE w FROM 'UPDATE repos SET downloads = downloads + 1 WHERE id = 1'",
		"EXECUTE w",
		"EXECUTE w",
		"DEALLOCATE PREPARE w",
		"UPDATE repos SET downloads = downloads + 2 WHERE id = 1",
		"PREPARE w FROM 'UPDATE repos SET downloads = 100 WHERE id = 1'",
		"EXECUTE w",
		"DEALLOCATE PREPARE w",
	}
	if mariadb {
		// MariaDB's HANDLER reads rows as stored, SET STATEMENT … FOR
		// and EXECUTE IMMEDIATE … USING are MariaDB's; MySQL has none of
		// them (its own syntax error is the answer, above).
		exact = append(exact, "HANDLER repos OPEN", "HANDLER repos READ `PRIMARY` FIRST", "HANDLER repos CLOSE",
			"EXECUTE IMMEDIATE 'UPDATE repos SET downloads = ? WHERE id = 2' USING 100",
			"SET STATEMENT max_statement_time = 10 FOR UPDATE repos SET downloads = downloads * 2 WHERE id = 1",
			"UPDATE repos SET downloads = downloads + 1 WHERE id = 3 /*M! OR id = 1 */")
	}
	for _, q := range exact {
		want := renderQuery(direct, q)
		if got := renderQuery(proxied, q); got != want {
			t.Errorf("%q: through the proxy %s, direct %s", q, got, want)
		}
		if got, want := queryString(t, proxied, "SELECT GROUP_CONCAT(id, '=', downloads ORDER BY id) FROM repos"),
			queryString(t, direct, "SELECT GROUP_CONCAT(id, '=', downloads ORDER BY id) FROM repos"); got != want {
			t.Fatalf("after %q: totals through the proxy %s, direct %s", q, got, want)
		}
	}

	// Views are created as written (reads through them inline them: see
	// TestReloadSIGHUP and TestDifferential).
	mustExec(t, proxied, "CREATE VIEW names AS SELECT id, name FROM repos")
	mustExec(t, proxied, "DROP VIEW names")
}

// renderQuery runs q on db and renders its rows or its error.
func renderQuery(db *sql.DB, q string) string {
	rows, err := db.Query(q)
	if err != nil {
		return "error: " + err.Error()
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "error: " + err.Error()
		}
		for _, v := range vals {
			b.WriteString(string(v) + ",")
		}
		b.WriteString(";")
	}
	if err := rows.Err(); err != nil {
		return "error: " + err.Error()
	}
	return b.String()
}
