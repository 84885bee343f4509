package proxy_test

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

func startRuledProxy(t *testing.T) *testProxy {
	t.Helper()
	setupDiffSchemas(t)
	return startProxy(t, func(c *proxy.Config) {
		c.Rewriter = newRewriter(diffCatalog())
	})
}

// TestScanTypes: values read through the proxy scan into the same Go types
// as directly, over the text and the binary protocol.
func TestScanTypes(t *testing.T) {
	p := startRuledProxy(t)
	for _, params := range []string{"", "interpolateParams=true"} {
		direct := openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, plainSchema, params))
		proxied := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, params))
		for _, db := range []*sql.DB{direct, proxied} {
			mustExec(t, db, "UPDATE repos SET downloads = downloads + 1, stars = stars + 2, big = big + 3 WHERE id = ?", 1)
		}
		for _, q := range []string{
			"SELECT downloads, stars, big FROM repos WHERE id = ?",
			"SELECT * FROM repos WHERE id = ?",
			"SELECT SUM(downloads), MAX(stars) FROM repos WHERE id >= ?",
		} {
			scan := func(db *sql.DB) []any {
				rows, err := db.Query(q, 1)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				cols, _ := rows.Columns()
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if !rows.Next() {
					t.Fatalf("%s: no row", q)
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				return vals
			}
			want, got := scan(direct), scan(proxied)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (%s): proxy %#v, direct %#v", q, params, got, want)
			}
			for i := range want {
				if reflect.TypeOf(got[i]) != reflect.TypeOf(want[i]) {
					t.Errorf("%s (%s) column %d: proxy type %T, direct %T", q, params, i, got[i], want[i])
				}
			}
		}
	}
}

// TestPreparedReexecution: a prepared increment executed repeatedly, the
// later executions omitting the parameter types (new-params-bound = 0) as
// sysbench does.
func TestPreparedReexecution(t *testing.T) {
	p := startRuledProxy(t)
	r := dialRawDB(t, p.addr, ruledSchema)
	r.command(gomysql.COM_STMT_PREPARE, []byte("UPDATE repos SET downloads = downloads + ? WHERE id = ?")...)
	ok := r.expectOK("prepare")
	id := binary.LittleEndian.Uint32(ok[1:])
	for range binary.LittleEndian.Uint16(ok[7:]) {
		r.read()
	}
	for i := range 5 {
		exec := binary.LittleEndian.AppendUint32(nil, id)
		exec = append(exec, 0, 1, 0, 0, 0, 0 /* NULL bitmap */)
		if i == 0 {
			exec = append(exec, 1, gomysql.MYSQL_TYPE_LONGLONG, 0, gomysql.MYSQL_TYPE_LONGLONG, 0)
		} else {
			exec = append(exec, 0)
		}
		exec = binary.LittleEndian.AppendUint64(exec, 10)
		exec = binary.LittleEndian.AppendUint64(exec, 3)
		r.command(gomysql.COM_STMT_EXECUTE, exec...)
		res := r.expectOK(fmt.Sprintf("execute %d", i))
		if res[1] != 1 {
			t.Fatalf("execute %d: affected rows %d, want 1", i, res[1])
		}
	}
	if got := r.scalar("SELECT downloads FROM repos WHERE id = 3"); got != "50" {
		t.Fatalf("downloads = %s, want 50", got)
	}
}

func dialRawDB(t *testing.T, addr, db string) *rawConn {
	t.Helper()
	r := dialRaw(t, addr, true)
	if err := r.UseDB(db); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConcurrentIncrementsExact: many clients increment a few hot keys
// through the proxy with text and prepared statements, in autocommit and in
// transactions (some rolled back); the total equals the committed
// increments exactly.
func TestConcurrentIncrementsExact(t *testing.T) {
	p := startRuledProxy(t)
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	db.SetMaxOpenConns(32)
	var base int64
	if err := db.QueryRow("SELECT SUM(downloads) FROM repos WHERE id IN (1, 2)").Scan(&base); err != nil {
		t.Fatal(err)
	}
	var committed, deadlocks atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				key := 1 + (w+i)%2
				var err error
				switch i % 4 {
				case 0:
					_, err = db.Exec(fmt.Sprintf("UPDATE repos SET downloads = downloads + 1 WHERE id = %d", key))
					if err == nil {
						committed.Add(1)
					}
				case 1:
					_, err = db.Exec("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 2, key)
					if err == nil {
						committed.Add(2)
					}
				default:
					// Like an application: a transaction that deadlocks
					// (two transactions inserting the same new slot row,
					// see README "Limits") is rolled back and run again.
					for attempt := 0; ; attempt++ {
						var tx *sql.Tx
						if tx, err = db.Begin(); err != nil {
							break
						}
						_, err = tx.Exec("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 3, key)
						if err == nil {
							var v int64
							err = tx.QueryRow("SELECT downloads FROM repos WHERE id = ?", key).Scan(&v)
						}
						if err != nil {
							_ = tx.Rollback()
							var me *mysql.MySQLError
							if errors.As(err, &me) && me.Number == 1213 && attempt < 5 {
								deadlocks.Add(1)
								continue
							}
							break
						}
						if i%4 == 3 {
							err = tx.Rollback()
						} else if err = tx.Commit(); err == nil {
							committed.Add(3)
						}
						break
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total int64
	if err := db.QueryRow("SELECT SUM(downloads) FROM repos WHERE id IN (1, 2)").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != base+committed.Load() {
		t.Fatalf("total %d, want %d (base %d + committed %d)", total, base+committed.Load(), base, committed.Load())
	}
	// 480 transactions; deadlocks happen only while slot rows are new.
	if n := deadlocks.Load(); n > 48 {
		t.Errorf("%d of 480 transactions deadlocked", n)
	} else {
		t.Logf("%d of 480 transactions deadlocked and were retried", n)
	}
	if p.srv.Stats().RewrittenWrites == 0 {
		t.Fatal("no increment was slotted")
	}
	t.Logf("%d increments committed; stats %+v", committed.Load(), p.srv.Stats())
}

// TestRetryAutocommitIncrement: a rewritten increment that hits a lock wait
// timeout gets it after one lock wait, as directly, in autocommit and in a
// transaction alike (deadlocks of autocommit statements are retried: see
// TestHotRecordDeadlocks).
func TestRetryAutocommitIncrement(t *testing.T) {
	p := startRuledProxy(t)
	ctx := ctxT(t)
	proxied := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	conn, err := proxied.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "SET SESSION innodb_lock_wait_timeout = 1")
	mustExec(t, conn, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1") // learn that the row exists

	// Another session locks every slot of record 1 (and the gaps around them).
	locker, err := directDB(t, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	mustExec(t, locker, "BEGIN")
	mustExec(t, locker, "SELECT * FROM "+ruledSchema+".slotted_counters WHERE record_type = 1 AND record_id = 1 FOR UPDATE")

	// Inside a transaction: the timeout reaches the client unchanged.
	mustExec(t, conn, "BEGIN")
	_, err = conn.ExecContext(ctx, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("increment inside a transaction behind a lock: %v, want 1205", err)
	}
	mustExec(t, conn, "ROLLBACK")

	// In autocommit: the timeout reaches the client after one lock wait,
	// as directly (a retry would make it wait again: the lock is held by
	// a transaction that would hold the base row directly).
	before := p.srv.Stats().Retries
	start := time.Now()
	_, err = conn.ExecContext(ctx, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("autocommit increment behind a lock: %v, want 1205", err)
	}
	if took := time.Since(start); took > 1900*time.Millisecond {
		t.Errorf("the lock wait timeout took %v to reach the client (innodb_lock_wait_timeout = 1 s): retried", took)
	}
	if p.srv.Stats().Retries != before {
		t.Error("a lock wait timeout was retried")
	}
	mustExec(t, locker, "ROLLBACK")
	mustExec(t, conn, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	if got := queryString(t, conn, "SELECT downloads FROM repos WHERE id = 1"); got != "12" {
		t.Fatalf("downloads = %s, want 12 (10 + 2 increments)", got)
	}
}

// TestSessionDatabaseTracking: unqualified names resolve in the database the
// session is using now — after USE, COM_INIT_DB and COM_CHANGE_USER.
func TestSessionDatabaseTracking(t *testing.T) {
	p := startRuledProxy(t)
	r := dialRaw(t, p.addr, true) // default database: slotproxy_test
	before := p.srv.Stats().RewrittenWrites
	if _, err := r.Execute("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err == nil {
		t.Fatal("repos resolved outside its database")
	}
	if _, err := r.Execute("USE " + ruledSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Execute("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if p.srv.Stats().RewrittenWrites != before+1 {
		t.Fatal("increment after USE was not rewritten")
	}
	r.command(gomysql.COM_INIT_DB, []byte(testdb.DBName)...)
	r.expectOK("init db")
	if _, err := r.Execute("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err == nil {
		t.Fatal("repos resolved in the previous database after COM_INIT_DB")
	}
	if err := r.UseDB(ruledSchema); err != nil {
		t.Fatal(err)
	}
	if got := r.scalar("SELECT downloads FROM repos WHERE id = 1"); got != "11" {
		t.Fatalf("downloads = %s, want 11", got)
	}
}

// TestMultiStatementNeedsTheCapability: a multi-statement query with a
// rewritten increment fails, as it would directly, when the client did not
// ask for multi-statements; and works once COM_SET_OPTION turns them on.
func TestMultiStatementNeedsTheCapability(t *testing.T) {
	p := startRuledProxy(t)
	q := "UPDATE repos SET downloads = downloads + 1 WHERE id = 1; SELECT 1"
	r := dialRawDB(t, p.addr, ruledSchema) // go-mysql's client does not ask for multi-statements
	if _, err := r.Execute(q); err == nil {
		t.Fatal("a multi-statement query ran without CLIENT_MULTI_STATEMENTS")
	}
	direct := dialRawDB(t, testdb.Shared().Addr, plainSchema)
	if _, err := direct.Execute(q); err == nil {
		t.Fatal("the server accepted it directly: the test's premise is wrong")
	}
	r.command(gomysql.COM_SET_OPTION, 0, 0) // MYSQL_OPTION_MULTI_STATEMENTS_ON
	r.read()
	if _, err := r.ExecuteMultiple(q, func(*gomysql.Result, error) {}); err != nil {
		t.Fatalf("after COM_SET_OPTION: %v", err)
	}
	if got := r.scalar("SELECT downloads FROM repos WHERE id = 1"); got != "11" {
		t.Fatalf("downloads = %s, want 11", got)
	}
}

// TestShadowMode: a shadow rule passes statements through unchanged (no
// slot rows), counts them, and a prepared increment is counted per
// execution.
func TestShadowMode(t *testing.T) {
	setupDiffSchemas(t)
	cat := diffCatalog()
	cat.Tables()[0].Shadow = true
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	db := p.open(t, "")
	mustExec(t, db, "USE "+ruledSchema)
	db.SetMaxOpenConns(1)
	for range 3 {
		mustExec(t, db, "UPDATE "+ruledSchema+".repos SET downloads = downloads + 1 WHERE id = ?", 1)
	}
	mustExec(t, db, "UPDATE "+ruledSchema+".repos SET downloads = downloads + 1 WHERE id = 1")
	if got := queryString(t, db, "SELECT downloads FROM "+ruledSchema+".repos WHERE id = 1"); got != "14" {
		t.Fatalf("downloads = %s, want 14", got)
	}
	var slots string
	if err := directDB(t, "").QueryRow("SELECT COUNT(*) FROM " + ruledSchema + ".slotted_counters").Scan(&slots); err != nil || slots != "0" {
		t.Fatalf("shadow mode wrote %s slot rows (%v)", slots, err)
	}
	if st := p.srv.Stats(); st.Shadowed < 5 || st.RewrittenWrites != 0 {
		t.Fatalf("stats %+v: want every statement shadowed, none rewritten", st)
	}
	if !strings.Contains(p.logs.String(), "shadow: would rewrite") {
		t.Fatal("shadow mode logged nothing")
	}
}

// TestLoadDataIntoRuledTable: LOAD DATA LOCAL INFILE into a ruled table as
// the session's first statement (while the proxy learns the session's
// database) reads the client's file as usual.
func TestLoadDataIntoRuledTable(t *testing.T) {
	p := startRuledProxy(t)
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	db.SetMaxOpenConns(1)
	mysql.RegisterReaderHandler("ruled", func() io.Reader { return strings.NewReader("100,loaded\n101,loaded\n") })
	defer mysql.DeregisterReaderHandler("ruled")
	res := mustExec(t, db, "LOAD DATA LOCAL INFILE 'Reader::ruled' INTO TABLE repos FIELDS TERMINATED BY ',' (id, name)")
	if n, _ := res.RowsAffected(); n != 2 {
		t.Fatalf("loaded %d rows, want 2", n)
	}
	mustExec(t, db, "UPDATE repos SET downloads = downloads + 1 WHERE id = 100")
	if got := queryString(t, db, "SELECT downloads FROM repos WHERE id = 100"); got != "1" {
		t.Fatalf("downloads = %s", got)
	}
}
