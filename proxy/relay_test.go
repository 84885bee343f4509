package proxy_test

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

func TestAuthPassThrough(t *testing.T) {
	p := startProxy(t, nil)
	pUser, pPass, _ := pluginAccount()
	for _, tc := range []struct{ user, pass, want string }{
		{testdb.User, testdb.Password, testdb.User + "@%"},
		{pUser, pPass, pUser + "@%"},
		{testdb.DriverUser, testdb.DriverPassword, testdb.DriverUser + "@%"},
	} {
		t.Run(tc.user, func(t *testing.T) {
			db := openDSN(t, p.dsn(tc.user, tc.pass, testdb.DBName, ""))
			if got := queryString(t, db, "SELECT CURRENT_USER()"); got != tc.want {
				t.Fatalf("CURRENT_USER() = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		db := openDSN(t, p.dsn(testdb.User, "not-the-password", testdb.DBName, ""))
		err := db.Ping()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1045 {
			t.Fatalf("Ping with a wrong password: %v, want error 1045", err)
		}
	})
	t.Run("unknown database", func(t *testing.T) {
		db := openDSN(t, p.dsn(testdb.User, testdb.Password, "no_such_db", ""))
		err := db.Ping()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1049 {
			t.Fatalf("Ping with an unknown database: %v, want error 1049", err)
		}
	})
	if strings.Contains(p.logs.String(), testdb.Password) {
		t.Fatal("the proxy logged a password")
	}
}

// TestResultShapes compares result sets through the proxy with the same
// statements run directly: values and column metadata must be identical.
func TestResultShapes(t *testing.T) {
	p := startProxy(t, nil)
	direct := directDB(t, "multiStatements=true")
	mustExec(t, direct, `CREATE TABLE IF NOT EXISTS shapes (
		id INT PRIMARY KEY, n BIGINT, d DECIMAL(10,2), s VARCHAR(50), b BLOB, f DOUBLE, dt DATETIME(3), j JSON, nul INT NULL)`)
	mustExec(t, direct, `REPLACE INTO shapes VALUES
		(1, 9223372036854775807, 12.34, 'héllo', x'00ff10', 1.5, '2024-01-02 03:04:05.678', '{"a":1}', NULL),
		(2, -1, -0.01, '', '', 0, '1970-01-01 00:00:01', '[]', 7)`)
	mustExec(t, direct, `DROP PROCEDURE IF EXISTS two_results`)
	mustExec(t, direct, `CREATE PROCEDURE two_results() BEGIN SELECT 1 AS a; SELECT 'x' AS b, 2 AS c; END`)
	queries := []string{
		"SELECT * FROM shapes ORDER BY id",
		"SELECT id, n * 2 AS doubled, CONCAT(s, '!') AS s2 FROM shapes WHERE id = 1",
		"SELECT * FROM shapes WHERE id = 99",
		"SELECT 1; SELECT 2 AS two; SELECT * FROM shapes ORDER BY id",
		"CALL two_results()",
		"SHOW COLUMNS FROM shapes",
		"SELECT REPEAT('x', 70000) AS big",
		"DO 1",
	}
	for _, params := range []string{"multiStatements=true", "multiStatements=true&interpolateParams=true"} {
		viaProxy := p.open(t, params)
		for _, q := range queries {
			want := dumpQuery(t, direct, q)
			got := dumpQuery(t, viaProxy, q)
			if got != want {
				t.Errorf("%s (%s):\nproxy:  %s\ndirect: %s", q, params, got, want)
			}
		}
		// Prepared statements (binary protocol), parameters of several types.
		for _, args := range [][]any{{1}, {int64(2)}, {"1"}, {99}} {
			q := "SELECT * FROM shapes WHERE id = ?"
			if got, want := dumpQuery(t, viaProxy, q, args...), dumpQuery(t, direct, q, args...); got != want {
				t.Errorf("%s %v:\nproxy:  %s\ndirect: %s", q, args, got, want)
			}
		}
	}
}

// dumpQuery renders every result set of a query, column names and types
// included, for comparisons.
func dumpQuery(t testing.TB, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		return "error: " + err.Error()
	}
	defer rows.Close()
	var out strings.Builder
	for set := 0; ; set++ {
		cols, err := rows.ColumnTypes()
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		fmt.Fprintf(&out, "[set %d:", set)
		for _, c := range cols {
			n, _ := c.Nullable()
			fmt.Fprintf(&out, " %s %s %v", c.Name(), c.DatabaseTypeName(), n)
		}
		out.WriteString("]")
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			out.WriteString(" (")
			for i, v := range vals {
				if i > 0 {
					out.WriteString(",")
				}
				if v == nil {
					out.WriteString("NULL")
				} else {
					out.WriteString(hex.EncodeToString(v))
				}
			}
			out.WriteString(")")
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(&out, " error: %v", err)
	}
	return out.String()
}

func TestErrorsAndAffectedRows(t *testing.T) {
	p := startProxy(t, nil)
	db := p.open(t, "")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS affected (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
	mustExec(t, db, "DELETE FROM affected")
	res := mustExec(t, db, "INSERT INTO affected (v) VALUES (1), (2), (3)")
	if n, _ := res.RowsAffected(); n != 3 {
		t.Fatalf("affected rows = %d, want 3", n)
	}
	id, _ := res.LastInsertId()
	res = mustExec(t, db, "UPDATE affected SET v = v WHERE id = ?", id)
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("UPDATE that changes nothing: affected rows = %d, want 0", n)
	}
	found := p.open(t, "clientFoundRows=true")
	res = mustExec(t, found, "UPDATE affected SET v = v WHERE id = ?", id)
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("CLIENT_FOUND_ROWS: affected rows = %d, want 1", n)
	}
	_, err := db.Exec("INSERT INTO affected (id, v) VALUES (?, 0)", id)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 || me.SQLState != [5]byte{'2', '3', '0', '0', '0'} {
		t.Fatalf("duplicate key: %v, want error 1062 (23000)", err)
	}
	_, err = db.Exec("SELEKT 1")
	if !errors.As(err, &me) || me.Number != 1064 {
		t.Fatalf("syntax error: %v, want 1064", err)
	}
	// Warnings count is relayed: SHOW WARNINGS sees what the statement left.
	conn, err := db.Conn(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "SELECT CAST('abc' AS SIGNED)")
	if got := queryString(t, conn, "SELECT @@warning_count"); got != "1" {
		t.Fatalf("@@warning_count = %s, want 1", got)
	}
}

// TestSessionState checks that one client connection is one backend
// connection: transactions, variables, temporary tables, LAST_INSERT_ID and
// named locks behave as they do directly.
func TestSessionState(t *testing.T) {
	p := startProxy(t, nil)
	db := p.open(t, "")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS sess (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
	ctx := ctxT(t)
	c1, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	mustExec(t, c1, "SET @x = 42, SESSION sql_mode = 'ANSI_QUOTES'")
	if got := queryString(t, c1, "SELECT @x"); got != "42" {
		t.Fatalf("@x = %q", got)
	}
	if got := queryString(t, c2, "SELECT @x"); got != "" {
		t.Fatalf("@x leaked to another connection: %q", got)
	}
	mustExec(t, c1, "CREATE TEMPORARY TABLE tmp_one (a INT)")
	mustExec(t, c1, "INSERT INTO tmp_one VALUES (1)")
	if _, err := c2.ExecContext(ctx, "SELECT * FROM tmp_one"); err == nil {
		t.Fatal("temporary table visible from another connection")
	}
	mustExec(t, c1, "INSERT INTO sess (v) VALUES (1)")
	id1 := queryString(t, c1, "SELECT LAST_INSERT_ID()")
	mustExec(t, c2, "INSERT INTO sess (v) VALUES (2)")
	if got := queryString(t, c1, "SELECT LAST_INSERT_ID()"); got != id1 {
		t.Fatalf("LAST_INSERT_ID changed by another connection: %s -> %s", id1, got)
	}
	if got := queryString(t, c1, "SELECT GET_LOCK('slotproxy_test_lock', 0)"); got != "1" {
		t.Fatalf("GET_LOCK = %s", got)
	}
	if got := queryString(t, c2, "SELECT GET_LOCK('slotproxy_test_lock', 0)"); got != "0" {
		t.Fatalf("GET_LOCK on another connection = %s, want 0 (held)", got)
	}
	mustExec(t, c1, "DO RELEASE_LOCK('slotproxy_test_lock')")

	// Transactions: c2 does not see c1's uncommitted row; rollback discards.
	mustExec(t, c1, "BEGIN")
	mustExec(t, c1, "INSERT INTO sess (id, v) VALUES (1000, 1)")
	if got := queryString(t, c2, "SELECT COUNT(*) FROM sess WHERE id = 1000"); got != "0" {
		t.Fatal("uncommitted row visible to another connection")
	}
	mustExec(t, c1, "ROLLBACK")
	if got := queryString(t, c1, "SELECT COUNT(*) FROM sess WHERE id = 1000"); got != "0" {
		t.Fatal("rolled back row still there")
	}
}

func TestPreparedStatements(t *testing.T) {
	p := startProxy(t, nil)
	db := p.open(t, "")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS prep (id INT PRIMARY KEY, name VARCHAR(20), data BLOB)")
	mustExec(t, db, "DELETE FROM prep")
	ins, err := db.Prepare("INSERT INTO prep VALUES (?, ?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := ins.Exec(i, fmt.Sprintf("n%d", i), bytes.Repeat([]byte{byte(i)}, i*100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ins.Close(); err != nil {
		t.Fatal(err)
	}
	sel, err := db.Prepare("SELECT name, LENGTH(data) FROM prep WHERE id >= ? ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	for range 3 {
		rows, err := sel.Query(40)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var name string
			var l int
			if err := rows.Scan(&name, &l); err != nil {
				t.Fatal(err)
			}
			if name != fmt.Sprintf("n%d", 40+n) || l != (40+n)*100 {
				t.Fatalf("row %d: %s %d", n, name, l)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != 10 {
			t.Fatalf("%d rows, want 10", n)
		}
	}
	// A statement that fails to prepare reports the server's error.
	_, err = db.Prepare("SELECT nope FROM prep WHERE id = ?")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1054 {
		t.Fatalf("prepare of a bad statement: %v, want 1054", err)
	}
}

func TestLoadDataLocalInfile(t *testing.T) {
	p := startProxy(t, nil)
	db := p.open(t, "allowAllFiles=false")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS infile_rows (id INT PRIMARY KEY, v VARCHAR(100))")
	mustExec(t, db, "DELETE FROM infile_rows")
	var data strings.Builder
	for i := range 20000 { // several packets' worth
		fmt.Fprintf(&data, "%d,value-%d\n", i, i)
	}
	mysql.RegisterReaderHandler("proxytest", func() io.Reader { return strings.NewReader(data.String()) })
	defer mysql.DeregisterReaderHandler("proxytest")
	res := mustExec(t, db, "LOAD DATA LOCAL INFILE 'Reader::proxytest' INTO TABLE infile_rows FIELDS TERMINATED BY ','")
	if n, _ := res.RowsAffected(); n != 20000 {
		t.Fatalf("LOAD DATA affected %d rows, want 20000", n)
	}
	if got := queryString(t, db, "SELECT v FROM infile_rows WHERE id = 19999"); got != "value-19999" {
		t.Fatalf("last row = %q", got)
	}
	// The connection is still in step afterwards.
	if got := queryString(t, db, "SELECT COUNT(*) FROM infile_rows"); got != "20000" {
		t.Fatalf("count = %s", got)
	}
}

// TestLargePayloads sends and receives values around the 16 MiB packet
// boundary and checks them byte for byte.
func TestLargePayloads(t *testing.T) {
	p := startProxy(t, nil)
	db := p.open(t, "maxAllowedPacket=0")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS big (id INT PRIMARY KEY, b LONGBLOB)")
	const max = gomysql.MaxPayloadLen
	for i, size := range []int{max - 30, max, max + 1, 2*max + 5} {
		payload := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		payload[size/2] = byte(i)
		sum := sha256.Sum256(payload)
		mustExec(t, db, "REPLACE INTO big VALUES (?, ?)", i, payload)
		// Via a text-protocol query of roughly the same size as well.
		if got := queryString(t, db, "SELECT SHA2(b, 256) FROM big WHERE id = ?", i); got != hex.EncodeToString(sum[:]) {
			t.Fatalf("size %d: stored value differs", size)
		}
		var back []byte
		if err := db.QueryRow("SELECT b FROM big WHERE id = ?", i).Scan(&back); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(back, payload) {
			t.Fatalf("size %d: value read back differs (len %d)", size, len(back))
		}
	}
	mustExec(t, db, "DELETE FROM big")
}
