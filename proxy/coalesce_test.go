package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// hotIncrement is an autocommit increment of record id of repos by delta,
// as text.
func hotIncrement(col string, id, delta int) string {
	if delta < 0 {
		return fmt.Sprintf("UPDATE repos SET %s = %s - %d WHERE id = %d", col, col, -delta, id)
	}
	return fmt.Sprintf("UPDATE repos SET %s = %s + %d WHERE id = %d", col, col, delta, id)
}

// TestCoalescedIncrements: 24 clients send autocommit increments of one
// hot record (deltas 1, 2, 0, -1, 7), directly and through a proxy that
// coalesces them (coalesce: true). Each client gets what it gets directly:
// 1 affected row (0 for a delta of 0), and SHOW WARNINGS after it empty,
// although the statement before left a warning on its connection; the
// totals are exact on both sides; and increments were sent in batches.
func TestCoalescedIncrements(t *testing.T) {
	p := startRuledProxy(t)
	const clients, each, id = 24, 80, 3
	deltas := []int{1, 2, 0, -1, 7}
	type side struct {
		db    *sql.DB
		name  string
		total int64
	}
	sides := []*side{
		{db: openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, plainSchema, "")), name: "direct"},
		{db: openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, "")), name: "proxy"},
	}
	total := func(db *sql.DB) int64 {
		var v int64
		if err := db.QueryRow(fmt.Sprintf("SELECT downloads FROM repos WHERE id = %d", id)).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, sd := range sides {
		sd.db.SetMaxOpenConns(clients)
		sd.db.SetMaxIdleConns(clients)
		before := total(sd.db)
		var sum atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for w := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				conn, err := sd.db.Conn(ctx)
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close()
				for i := range each {
					delta := deltas[(w+i)%len(deltas)]
					warned := i%10 == 0
					if warned {
						// A warning on the connection: SHOW WARNINGS after
						// the increment must not show it.
						var v int64
						if err := conn.QueryRowContext(ctx, "SELECT CAST('7x' AS SIGNED)").Scan(&v); err != nil {
							errs <- err
							return
						}
					}
					res, err := conn.ExecContext(ctx, hotIncrement("downloads", id, delta))
					if err != nil {
						errs <- fmt.Errorf("%s: %w", hotIncrement("downloads", id, delta), err)
						return
					}
					n, _ := res.RowsAffected()
					if want := int64(min(1, abs(delta))); n != want {
						errs <- fmt.Errorf("%s: %d affected rows, want %d", hotIncrement("downloads", id, delta), n, want)
						return
					}
					sum.Add(int64(delta))
					if warned {
						rows, err := conn.QueryContext(ctx, "SHOW WARNINGS")
						if err != nil {
							errs <- err
							return
						}
						shown := rows.Next()
						rows.Close()
						if shown {
							errs <- fmt.Errorf("SHOW WARNINGS after %s shows a warning", hotIncrement("downloads", id, delta))
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", sd.name, err)
		}
		sd.total = total(sd.db)
		if sd.total != before+sum.Load() {
			t.Fatalf("%s: total %d, want %d (%d + %d)", sd.name, sd.total, before+sum.Load(), before, sum.Load())
		}
	}
	st := p.srv.Stats()
	if st.Batches == 0 {
		t.Fatalf("no increments were coalesced: %+v", st)
	}
	t.Logf("%d of %d increments sent in %d batches (%.1f per batch)", st.Coalesced, clients*each, st.Batches, float64(st.Coalesced)/float64(st.Batches))
}

// TestCoalescedIncrementsFail: concurrent decrements of an INT UNSIGNED
// counter at 0 fail directly, each with 1690; through the proxy (with the
// catalog read from the schema, the column's range in it) their batch
// fails its range check, and each runs alone and fails as directly.
func TestCoalescedIncrementsFail(t *testing.T) {
	db := testdb.Shared()
	const plain, ruled = "coalesce_plain", "coalesce_ruled"
	for _, schema := range []string{plain, ruled} {
		if err := db.Exec("DROP DATABASE IF EXISTS "+schema, "CREATE DATABASE "+schema,
			"CREATE TABLE "+schema+".repos (id INT NOT NULL PRIMARY KEY, stars INT UNSIGNED NOT NULL DEFAULT 0)",
			"INSERT INTO "+schema+".repos (id) VALUES (4)"); err != nil {
			t.Fatal(err)
		}
	}
	rule := "table: " + ruled + ".repos\nkey: id\ncounters: [stars]\nslots: 8\n"
	if err := catalog.Migrate(t.Context(), touchAdmin(t), ruleSet(t, rule), "slotted_counters", io.Discard); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(loadCatalog(t, rule)) })
	const clients, each, id = 16, 20, 4
	for _, conn := range []*sql.DB{
		openDSN(t, db.DSN(testdb.User, testdb.Password, plain, "")),
		openDSN(t, p.dsn(testdb.User, testdb.Password, ruled, "")),
	} {
		conn.SetMaxOpenConns(clients)
		var wg sync.WaitGroup
		errs := make(chan error, clients*each)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					_, err := conn.Exec(hotIncrement("stars", id, -1))
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number != 1690 {
						errs <- fmt.Errorf("got %v, want ERROR 1690", err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := queryString(t, conn, fmt.Sprintf("SELECT stars FROM repos WHERE id = %d", id)); got != "0" {
			t.Fatalf("stars = %s, want 0", got)
		}
	}
	t.Logf("stats: %+v", p.srv.Stats())
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
