package proxy_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// TestStatementOverLimit: with limits.max_statement_bytes lowered, a larger
// statement that names no ruled table passes through unchanged (spooled,
// not held in memory), one that names a ruled table is refused with an
// error saying why, and the connection serves on in both cases.
func TestStatementOverLimit(t *testing.T) {
	setupDiffSchemas(t)
	p := startProxy(t, func(c *proxy.Config) {
		c.Rewriter = rewrite.New(diffCatalog(), rewrite.Options{})
		c.MaxStatementBytes = 1 << 20
	})
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, "maxAllowedPacket=0"))
	db.SetMaxOpenConns(1)
	big := strings.Repeat("x", 3<<20)
	var n int
	if err := db.QueryRow("SELECT LENGTH('" + big + "') + COUNT(*) FROM users").Scan(&n); err != nil || n != len(big)+3 {
		t.Fatalf("a large statement on unruled tables: %d, %v", n, err)
	}
	_, err := db.Exec("UPDATE repos SET downloads = 0, name = LEFT('" + big + "', 5) WHERE id = 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != gomysql.ER_NOT_SUPPORTED_YET || !strings.Contains(me.Message, "max_statement_bytes") {
		t.Fatalf("a large statement on a ruled table: %v, want error %d naming limits.max_statement_bytes", err, gomysql.ER_NOT_SUPPORTED_YET)
	}
	if got := queryString(t, db, "SELECT downloads FROM repos WHERE id = 1"); got != "10" {
		t.Fatalf("the refused statement changed the counter: %s", got)
	}
	if p.srv.Stats().Refused != 1 {
		t.Fatalf("refused %d statements, want 1", p.srv.Stats().Refused)
	}
}

// TestInternalStatementsBounded: the statements the proxy prepares for its
// own use on a connection (existence checks, guards, statements run as
// written) stay a small fixed number however many distinct statements the
// client prepares, so they cannot use up max_prepared_stmt_count.
func TestInternalStatementsBounded(t *testing.T) {
	p := startRuledProxy(t)
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	db.SetMaxOpenConns(1)
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	count := func() int {
		var name string
		var n int
		if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	for i := range 50 {
		// Distinct statements, each closed after use; each needs an
		// existence check (key 1000+i has no row) or a guard.
		q := fmt.Sprintf("UPDATE repos SET downloads = downloads + ? WHERE id = ? /* %d */", i)
		if i%2 == 1 {
			q = fmt.Sprintf("UPDATE repos SET downloads = ? WHERE id = ? /* %d */", i)
		}
		stmt, err := db.Prepare(q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stmt.Exec(1, 1000+i); err != nil {
			t.Fatal(err)
		}
		_ = stmt.Close()
	}
	// COM_STMT_CLOSE has no response: a query after it makes sure the
	// server has seen the last one.
	_ = queryString(t, db, "SELECT 1")
	if grown := count() - before; grown > 8 {
		t.Fatalf("%d prepared statements left on the server by one connection, want at most 8", grown)
	}
}

// TestConnectionStorm: 2,000 clients connecting at once (a pool warming
// up) all get in, with the default limits: handshakes beyond the cap wait
// their turn instead of being refused.
func TestConnectionStorm(t *testing.T) {
	const clients = 2000
	root := openDSN(t, testdb.Shared().RootDSN("", ""))
	var orig int
	if err := root.QueryRow("SELECT @@GLOBAL.max_connections").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	mustExec(t, root, "SET GLOBAL max_connections = 5000")
	t.Cleanup(func() { mustExec(t, root, fmt.Sprintf("SET GLOBAL max_connections = %d", orig)) })
	p := startProxy(t, nil)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	conns := make(chan *wireConn, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := loginWire(p.addr, testdb.DBName, true, 30*time.Second)
			if err != nil {
				errs <- err
				return
			}
			conns <- w
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	close(conns)
	for w := range conns {
		_ = w.Close()
	}
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d clients could not log in; first: %s", len(failed), clients, failed[0])
	}
	t.Logf("%d clients logged in at once in %v (%.0f logins/s)", clients, took.Round(time.Millisecond), clients/took.Seconds())
}
