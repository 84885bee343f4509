package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestExactUnderLoadWithRollup: 32 clients increment a few hot keys through
// the proxy — text and prepared statements, autocommit and explicit
// transactions, some rolled back — while readers check that no total ever
// goes down and a roll-up runs every 100 ms. The final total equals the
// committed increments exactly, and a final roll-up leaves no slot row.
func TestExactUnderLoadWithRollup(t *testing.T) {
	p := startRuledProxy(t)
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	keys := []int{1, 2, 3}
	sum := func() int64 {
		var v int64
		if err := db.QueryRow("SELECT SUM(downloads) FROM repos WHERE id IN (1, 2, 3)").Scan(&v); err != nil {
			t.Error(err)
		}
		return v
	}
	base := sum()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := func(context.Context) (*client.Conn, error) {
		s := testdb.Shared()
		return client.Connect(s.Addr, s.RootUser, s.RootPassword, ruledSchema)
	}
	var passes, folds atomic.Int64
	var maxHold atomic.Int64
	rollupDone := make(chan struct{})
	go func() {
		defer close(rollupDone)
		rollup.Loop(ctx, admin, diffCatalog, 100*time.Millisecond, rollup.Options{Batch: 100}, func(st rollup.Stats, err error) {
			if err != nil && ctx.Err() == nil {
				t.Errorf("roll-up: %v", err)
			}
			passes.Add(1)
			folds.Add(int64(st.Folds))
			if int64(st.MaxLockHold) > maxHold.Load() {
				maxHold.Store(int64(st.MaxLockHold))
			}
		})
	}()

	var committed, deadlocks atomic.Int64
	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			last := int64(-1)
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				v := sum()
				if v < last {
					t.Errorf("total went down: %d after %d", v, last)
					return
				}
				last = v
			}
		}()
	}

	deadline := time.Now().Add(3 * time.Second)
	var writers sync.WaitGroup
	for w := range 32 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				key := keys[(w+i)%len(keys)]
				delta, err := increment(db, w, i, key)
				var me *mysql.MySQLError
				if errors.As(err, &me) && me.Number == 1213 {
					// Concurrent inserts of the same new slot row inside
					// transactions can deadlock; the transaction rolled
					// back and an application retries it.
					deadlocks.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				committed.Add(delta)
			}
		}()
	}
	writers.Wait()
	close(stopReaders)
	readers.Wait()
	cancel()
	<-rollupDone

	if t.Failed() {
		var a, b, st string
		_ = directDB(t, "").QueryRow("SHOW ENGINE INNODB STATUS").Scan(&a, &b, &st)
		if i := strings.Index(st, "LATEST DETECTED DEADLOCK"); i >= 0 {
			t.Logf("%s", st[i:min(len(st), i+4000)])
		}
	}
	if got, want := sum(), base+committed.Load(); got != want {
		t.Fatalf("total %d, want %d (base %d + committed %d)", got, want, base, committed.Load())
	}
	c, err := admin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := rollup.All(context.Background(), c, diffCatalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := directDB(t, "").QueryRow("SELECT COUNT(*) FROM " + ruledSchema + ".slotted_counters").Scan(&left); err != nil {
		t.Fatal(err)
	}
	var baseAfter int64
	if err := directDB(t, "").QueryRow("SELECT SUM(downloads) FROM " + ruledSchema + ".repos WHERE id IN (1, 2, 3)").Scan(&baseAfter); err != nil {
		t.Fatal(err)
	}
	if left != 0 || baseAfter != base+committed.Load() {
		t.Fatalf("after the final roll-up: %d slot rows left, base column total %d, want 0 and %d", left, baseAfter, base+committed.Load())
	}
	t.Logf("committed %d in increments (%d transactions deadlocked and rolled back); %d roll-up passes folded %d records; longest base-row lock %v; proxy stats %+v",
		committed.Load(), deadlocks.Load(), passes.Load(), folds.Load(), time.Duration(maxHold.Load()), p.srv.Stats())
}

// increment does the i-th operation of writer w and returns what it
// committed.
func increment(db *sql.DB, w, i, key int) (int64, error) {
	switch i % 5 {
	case 0:
		_, err := db.Exec(fmt.Sprintf("UPDATE repos SET downloads = downloads + 1 WHERE id = %d", key))
		return 1, err
	case 1:
		_, err := db.Exec("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 2, key)
		return 2, err
	default:
		tx, err := db.Begin()
		if err != nil {
			return 0, err
		}
		if _, err := tx.Exec("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 3, key); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		var v int64
		if err := tx.QueryRow("SELECT downloads FROM repos WHERE id = ?", key).Scan(&v); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		if (w+i)%4 == 0 {
			return 0, tx.Rollback()
		}
		return 3, tx.Commit()
	}
}
