package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestClusterHandOuts: the transactions of a hand-out — BEGIN, an
// increment of a record, a read of that counter, COMMIT — through the proxy
// of one node of a multi-primary cluster (Galera on the MariaDB run, Group
// Replication on the MySQL run), while the record is written through the
// others. A node aborts a local transaction whose rows a write certified on
// another node needs (Galera's brute-force abort; Group Replication's
// applier rolls back what is in its way), also while the transaction waits
// for its client, and the session's next statement fails with a deadlock.
// Through the proxy no transaction may then commit without its increment
// (its read running outside any transaction and COMMIT committing nothing).
func TestClusterHandOuts(t *testing.T) {
	c := startCluster(t)
	nodes := clusterProxies(t, c, "downloads, stars", "downloads, stars", 48, "500ms")
	t.Run("abort while idle", func(t *testing.T) { abortWhileIdle(t, c, nodes) })
	t.Run("under load", func(t *testing.T) { handOutsUnderLoad(t, nodes) })
}

// abortWhileIdle: a transaction that incremented a record through node 0's
// proxy waits for its client while another node commits a write of that
// record (its base row and its slot rows, as a fold or a guarded write
// there writes them); node 0 aborts the waiting transaction where their
// locks meet. Directly the client's read of the counter then fails with a
// deadlock. Through the proxy the read may succeed (the proxy runs the
// transaction again when it was only its increments), or fail; either way
// the outcome is one a client can count by: every statement succeeded, the
// read saw the increment and the total has it, or a statement failed and
// the total has not. With a read the proxy has not seen before (it
// prepares it first to learn its columns), one it has, and a locking read.
func abortWhileIdle(t *testing.T, c *testdb.Cluster, nodes []*clusterNode) {
	open := func(i int) *sql.DB {
		db, err := sql.Open("mysql", c.Nodes[i].DSN(testdb.User, testdb.Password, clusterSchema, ""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	direct0, direct1 := open(0), open(1)
	ctx := context.Background()
	starsOf := func() int64 {
		var st int64
		if _, err := fmt.Sscanf(syncedTotals(t, nodes[0].db, "SELECT stars, 0, 0 FROM repos WHERE id = 1"), "%d:0:0", &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Slot rows of stars on every slot of proxy 0's part: the
	// transactions' increments through it update one of them.
	for range 200 {
		if _, err := nodes[0].db.Exec("UPDATE repos SET stars = stars + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
	}
	starsType := "(SELECT record_type FROM slotproxy_record_types WHERE column_name = 'stars')"
	n := 0
	// handOut runs the hand-out on db with another node's write of the
	// record between its increment and its read, checks that its outcome
	// is one a client can count by, and says what each statement answered.
	handOut := func(db *sql.DB, read string) string {
		n++
		before := starsOf()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var out []string
		failed := false
		note := func(what string, err error) {
			var me *mysql.MySQLError
			switch {
			case err == nil:
				out = append(out, what+" ok")
			case errors.As(err, &me):
				out = append(out, fmt.Sprintf("%s %d", what, me.Number))
				failed = true
			default:
				t.Fatalf("%s: %v", what, err)
			}
		}
		_, err = conn.ExecContext(ctx, "BEGIN")
		note("begin", err)
		_, err = conn.ExecContext(ctx, "UPDATE repos SET stars = stars + 1 WHERE id = 1")
		note("update", err)
		// The other node's write: the base row, and each slot row of
		// stars (+1, then -1), as a fold or a guarded write there
		// writes them.
		want := fmt.Sprintf("renamed %d", n)
		tx, err := direct1.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"UPDATE repos SET name = '" + want + "' WHERE id = 1",
			"UPDATE slotted_counters SET count = count + 1 WHERE record_id = 1 AND record_type = " + starsType,
			"UPDATE slotted_counters SET count = count - 1 WHERE record_id = 1 AND record_type = " + starsType,
		} {
			if _, err := tx.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// Node 0 has applied the write (and aborted what it met).
		for deadline := time.Now().Add(10 * time.Second); ; {
			var name string
			if err := direct0.QueryRow("SELECT name FROM repos WHERE id = 1").Scan(&name); err != nil {
				t.Fatal(err)
			}
			if name == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node 0 has not applied the write: name %q", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		var v int64
		err = conn.QueryRowContext(ctx, read).Scan(&v)
		note("read", err)
		if err == nil && v != before+1 {
			t.Errorf("%s read %d, want %d", read, v, before+1)
		}
		_, err = conn.ExecContext(ctx, "COMMIT")
		note("commit", err)
		after := starsOf()
		switch {
		case !failed && after != before+1:
			t.Errorf("%s: %s, but stars went from %d to %d", read, strings.Join(out, ", "), before, after)
		case failed && after != before:
			t.Errorf("%s: %s, but stars went from %d to %d", read, strings.Join(out, ", "), before, after)
		}
		return strings.Join(out, ", ")
	}
	for _, read := range []string{
		"SELECT stars FROM repos WHERE id = 1", // new to the proxy
		"SELECT stars FROM repos WHERE id = 1", // learned
		"SELECT stars FROM repos WHERE id = 1 FOR UPDATE",
	} {
		direct := handOut(direct0, read)
		proxied := handOut(nodes[0].db, read)
		t.Logf("%s: directly %s; through the proxy %s", read, direct, proxied)

	}
}

// handOutsUnderLoad: 8 clients run hand-outs through node 0's proxy while
// 16 run autocommit increments of the same record through the two others
// and every proxy's roll-up folds it, for 6 s. The total has every
// committed hand-out and increment (plus at most those whose connection
// broke), and no two committed hand-outs read the same value.
func handOutsUnderLoad(t *testing.T, nodes []*clusterNode) {
	var d0, st0 int64
	if _, err := fmt.Sscanf(syncedTotals(t, nodes[0].db, "SELECT downloads, stars, 0 FROM repos WHERE id = 1"), "%d:%d:0", &d0, &st0); err != nil {
		t.Fatal(err)
	}
	var (
		downloads, committed, failed, broken atomic.Int64
		wg                                   sync.WaitGroup
		stop                                 = make(chan struct{})
		errs                                 = make(chan error, 24)
		mu                                   sync.Mutex
		seen                                 = map[int64]int{}
	)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i < 8 {
					var v int64
					v, err = handOut(nodes[0].db)
					if err == nil {
						committed.Add(1)
						mu.Lock()
						seen[v]++
						mu.Unlock()
					}
				} else {
					_, err = nodes[1+i%2].db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
					if err == nil {
						downloads.Add(1)
					}
				}
				switch {
				case err == nil:
				case certificationFailure(err):
					failed.Add(1)
				case errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn):
					broken.Add(1)
				default:
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a client failed: %v", err)
	}
	t.Logf("%d hand-outs committed, %d autocommit increments, %d certification failures retried, %d broken connections",
		committed.Load(), downloads.Load(), failed.Load(), broken.Load())
	if committed.Load() == 0 {
		t.Fatal("no hand-out committed")
	}
	var d, st int64
	if _, err := fmt.Sscanf(syncedTotals(t, nodes[0].db, "SELECT downloads, stars, 0 FROM repos WHERE id = 1"), "%d:%d:0", &d, &st); err != nil {
		t.Fatal(err)
	}
	d, st = d-d0, st-st0
	if st < committed.Load() || st > committed.Load()+broken.Load() || d < downloads.Load() || d > downloads.Load()+broken.Load() {
		t.Fatalf("stars +%d, downloads +%d; want %d hand-outs and %d increments (plus at most %d of unknown outcome)", st, d, committed.Load(), downloads.Load(), broken.Load())
	}
	for v, n := range seen {
		if n > 1 {
			t.Errorf("%d committed hand-outs read stars = %d", n, v)
		}
	}
}

// handOut runs BEGIN, an increment of stars, a read of it, COMMIT, and
// returns the value read.
func handOut(db *sql.DB) (int64, error) {
	tx, err := db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.Exec("UPDATE repos SET stars = stars + 1 WHERE id = 1"); err != nil {
		return 0, err
	}
	var v int64
	if err := tx.QueryRow("SELECT stars FROM repos WHERE id = 1").Scan(&v); err != nil {
		return 0, err
	}
	return v, tx.Commit()
}
