// Package history checks histories of concurrent counter operations run
// through slotproxy, in the manner of Jepsen's checkers: workers run random
// transactions through two proxies on one database while roll-ups fold
// slots, every operation is recorded with the time it was invoked and the
// time it completed and its outcome, and the history is then checked
// against what some serial order of the committed operations allows.
//
// TestHistory is the short run of the normal suite; TestHistoryLong, with
// HISTORY_DURATION set (make history), is the long one.
package history

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }

const schema = "history"

// Keys 1 to addKeys only ever change by increments (of which a locked
// read-modify-write, SET n = <value read> + d, is one): their totals are
// sums. Keys resetKeys are also deleted and re-inserted at 0 (in one
// transaction), which must not let them inherit counts from before.
const (
	addKeys   = 4
	resetKeys = 2
)

// kind is what an operation did.
type kind uint8

const (
	opAdd   kind = iota // committed increments of Key by Delta
	opRead              // a read of Key that returned Value
	opReset             // Key deleted and re-inserted at 0
)

// op is one recorded operation: invoked at Start, completed at End.
type op struct {
	Kind       kind
	Key        int
	Delta      int64 // opAdd
	Value      int64 // opRead
	Start, End time.Time
	// Info: the outcome is unknown (the connection broke mid-commit): the
	// operation may or may not have taken effect.
	Info bool
	// Exact: the read must see every committed increment (a locking read,
	// or the transaction's own increments included): it is checked against
	// the commit order, not only against the time window.
	Exact bool
	Desc  string
}

// recorder collects the history; safe for concurrent use.
type recorder struct {
	mu  sync.Mutex
	ops []op
}

func (r *recorder) add(o op) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// TestHistory: 8 workers for 10 seconds, two proxies, roll-up running.
func TestHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server; skipped with -short")
	}
	runHistory(t, 10*time.Second, 8, int64(time.Now().UnixNano()))
}

// TestHistoryLong is make history: HISTORY_DURATION (e.g. 30m),
// HISTORY_SEED (default: the time), HISTORY_WORKERS (default 8).
func TestHistoryLong(t *testing.T) {
	ds := os.Getenv("HISTORY_DURATION")
	if ds == "" {
		t.Skip("the long history run: make history (HISTORY_DURATION=30m)")
	}
	d, err := time.ParseDuration(ds)
	if err != nil {
		t.Fatalf("HISTORY_DURATION: %v", err)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("HISTORY_SEED"); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("HISTORY_SEED: %v", err)
		}
	}
	workers := 8
	if s := os.Getenv("HISTORY_WORKERS"); s != "" {
		if workers, err = strconv.Atoi(s); err != nil {
			t.Fatalf("HISTORY_WORKERS: %v", err)
		}
	}
	runHistory(t, d, workers, seed)
}

func runHistory(t *testing.T, d time.Duration, workers int, seed int64) {
	t.Logf("history: %s, %d workers, seed %d (HISTORY_SEED=%d reproduces the schedule of choices)", d, workers, seed, seed)
	s := testdb.Shared()
	var rows []string
	for k := 1; k <= addKeys+resetKeys; k++ {
		rows = append(rows, fmt.Sprintf("(%d, 0)", k))
	}
	if err := s.Exec("DROP DATABASE IF EXISTS "+schema, "CREATE DATABASE "+schema, "USE "+schema,
		"CREATE TABLE accts (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO accts VALUES "+strings.Join(rows, ", ")); err != nil {
		t.Fatal(err)
	}
	admin, err := client.Connect(s.Addr, s.RootUser, s.RootPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	r, err := rules.Parse("accts.yaml", []byte("table: "+schema+".accts\nkey: id\ncounters: [n]\nslots: 8\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.NewSet(r)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := catalog.Migrate(ctx, admin, set, "slotted_counters", io.Discard); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(ctx, admin, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	// Two proxies on the same database, as two serve processes would be.
	var addrs []string
	for range 2 {
		addrs = append(addrs, startProxy(t, s.Addr, catalog.NewRewriter(cat, s.Version)))
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Roll-ups run all along, as serve's do (two, one per proxy).
	var rollErrs atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Connect(s.Addr, s.RootUser, s.RootPassword, "")
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var roller rollup.Roller
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := roller.Once(ctx, c, cat, rollup.Options{Batch: 100, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
					rollErrs.Add(1)
				}
			}
		}()
	}

	rec := &recorder{}
	var ops, failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/%s?interpolateParams=false", testdb.User, testdb.Password, addrs[w%2], schema))
			if err != nil {
				t.Error(err)
				return
			}
			defer db.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := step(ctx, db, rng, rec); err != nil {
					if !retryable(err) {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					failed.Add(1)
				}
				ops.Add(1)
			}
		}()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()

	// Quiescence: every committed increment is in base + slots. The final
	// values are read through a proxy (exact) and, after a complete
	// roll-up, from the base rows directly: both must agree.
	final := map[int]int64{}
	proxied, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/%s", testdb.User, testdb.Password, addrs[0], schema))
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	for k := 1; k <= addKeys+resetKeys; k++ {
		var v int64
		if err := proxied.QueryRow("SELECT n FROM accts WHERE id = ?", k).Scan(&v); err != nil {
			t.Fatal(err)
		}
		final[k] = v
	}
	if _, err := rollup.All(ctx, admin, cat, rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= addKeys+resetKeys; k++ {
		res, err := admin.Execute(fmt.Sprintf("SELECT n FROM %s.accts WHERE id = %d", schema, k))
		if err != nil {
			t.Fatal(err)
		}
		v, _ := res.GetInt(0, 0)
		if v != final[k] {
			t.Errorf("key %d: %d through the proxy, %d in the base row after a full roll-up", k, final[k], v)
		}
	}
	anomalies := check(rec.ops, final)
	t.Logf("history: %d operations (%d failed and retried by the application: deadlocks, lock waits), %d recorded, %d roll-up passes failed; final %v",
		ops.Load(), failed.Load(), len(rec.ops), rollErrs.Load(), final)
	for _, a := range anomalies {
		t.Error(a)
	}
	if len(anomalies) == 0 {
		t.Logf("history: no anomaly")
	}
}

// step runs one random operation and records it.
func step(ctx context.Context, db *sql.DB, rng *rand.Rand, rec *recorder) error {
	key := 1 + rng.IntN(addKeys)
	delta := []int64{1, 1, 2, 3, -1}[rng.IntN(5)]
	switch n := rng.IntN(100); {
	case n < 35: // an autocommit increment
		start := time.Now()
		res, err := db.ExecContext(ctx, "UPDATE accts SET n = n + ? WHERE id = ?", delta, key)
		end := time.Now()
		if err != nil {
			return infoOr(err, rec, op{Kind: opAdd, Key: key, Delta: delta, Start: start, End: end, Info: true, Desc: "autocommit increment"})
		}
		if a, _ := res.RowsAffected(); a != 1 {
			return fmt.Errorf("increment of key %d: %d rows affected, want 1", key, a)
		}
		rec.add(op{Kind: opAdd, Key: key, Delta: delta, Start: start, End: end, Desc: "autocommit increment"})
	case n < 55: // a plain read
		start := time.Now()
		var v int64
		if err := db.QueryRowContext(ctx, "SELECT n FROM accts WHERE id = ?", key).Scan(&v); err != nil {
			return err
		}
		rec.add(op{Kind: opRead, Key: key, Value: v, Start: start, End: time.Now(), Desc: "plain read"})
	case n < 70: // a transaction: increments, a read of its own key, commit or rollback
		return txn(ctx, db, rng, rec, key, delta)
	case n < 80: // a locking read, then an absolute write from it
		return readModifyWrite(ctx, db, rng, rec, key)
	case n < 90: // reset keys: increments
		k := addKeys + 1 + rng.IntN(resetKeys)
		start := time.Now()
		res, err := db.ExecContext(ctx, "UPDATE accts SET n = n + 1 WHERE id = ?", k)
		end := time.Now()
		if err != nil {
			return infoOr(err, rec, op{Kind: opAdd, Key: k, Delta: 1, Start: start, End: end, Info: true, Desc: "increment of a reset key"})
		}
		if a, _ := res.RowsAffected(); a == 1 {
			rec.add(op{Kind: opAdd, Key: k, Delta: 1, Start: start, End: end, Desc: "increment of a reset key"})
		} // 0 rows: the key was deleted at that moment; nothing counted
	case n < 95: // reset keys: delete and re-insert at 0
		k := addKeys + 1 + rng.IntN(resetKeys)
		start := time.Now()
		tx, err := db.BeginTx(ctx, txOptions(rng))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM accts WHERE id = ?", k); err != nil {
			tx.Rollback()
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO accts (id, n) VALUES (?, 0)", k); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return infoOr(err, rec, op{Kind: opReset, Key: k, Start: start, End: time.Now(), Info: true, Desc: "delete and re-insert"})
		}
		rec.add(op{Kind: opReset, Key: k, Start: start, End: time.Now(), Desc: "delete and re-insert"})
	default: // reset keys: a plain read
		k := addKeys + 1 + rng.IntN(resetKeys)
		start := time.Now()
		var v int64
		if err := db.QueryRowContext(ctx, "SELECT n FROM accts WHERE id = ?", k).Scan(&v); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil // between the delete and the insert of a reset (never committed that way: not possible), or never
			}
			return err
		}
		rec.add(op{Kind: opRead, Key: k, Value: v, Start: start, End: time.Now(), Desc: "plain read of a reset key"})
	}
	return nil
}

// txn increments key (and maybe another) in a transaction, reads key back
// (it must see its own increments and every increment committed before it:
// the read is recorded as exact), and commits or rolls back.
func txn(ctx context.Context, db *sql.DB, rng *rand.Rand, rec *recorder, key int, delta int64) error {
	start := time.Now()
	tx, err := db.BeginTx(ctx, txOptions(rng))
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE accts SET n = n + ? WHERE id = ?", delta, key); err != nil {
		tx.Rollback()
		return err
	}
	other, otherDelta := 0, int64(0)
	if rng.IntN(2) == 0 {
		other, otherDelta = 1+rng.IntN(addKeys), int64(1+rng.IntN(3))
		if _, err := tx.ExecContext(ctx, "UPDATE accts SET n = n + ? WHERE id = ?", otherDelta, other); err != nil {
			tx.Rollback()
			return err
		}
	}
	readStart := time.Now()
	var v int64
	if err := tx.QueryRowContext(ctx, "SELECT n FROM accts WHERE id = ?", key).Scan(&v); err != nil {
		tx.Rollback()
		return err
	}
	if rng.IntN(4) == 0 {
		if err := tx.Rollback(); err != nil {
			return err
		}
		return nil // nothing happened; the read saw uncommitted own increments, not recorded
	}
	if err := tx.Commit(); err != nil {
		return infoOr(err, rec, op{Kind: opAdd, Key: key, Delta: delta, Start: start, End: time.Now(), Info: true, Desc: "increment in a transaction"})
	}
	end := time.Now()
	rec.add(op{Kind: opAdd, Key: key, Delta: delta, Start: start, End: end, Desc: "increment in a transaction"})
	if other != 0 {
		rec.add(op{Kind: opAdd, Key: other, Delta: otherDelta, Start: start, End: end, Desc: "second increment in a transaction"})
	}
	// The read ran inside the transaction, after its own increment: what
	// it saw is the total at a point where the transaction's increments
	// were in (its commit is the serialization point of the read).
	own := delta
	if other == key {
		own += otherDelta
	}
	rec.add(op{Kind: opRead, Key: key, Value: v, Start: readStart, End: end, Exact: true, Desc: fmt.Sprintf("read after its own increment (+%d)", own)})
	return nil
}

// readModifyWrite reads key FOR UPDATE and writes the value read + d: with
// the row locked, that is an increment by d; a lost update shows as a
// total short of the sum.
func readModifyWrite(ctx context.Context, db *sql.DB, rng *rand.Rand, rec *recorder, key int) error {
	start := time.Now()
	tx, err := db.BeginTx(ctx, txOptions(rng))
	if err != nil {
		return err
	}
	lock := []string{"FOR UPDATE", "LOCK IN SHARE MODE"}[rng.IntN(2)]
	var v int64
	if err := tx.QueryRowContext(ctx, "SELECT n FROM accts WHERE id = ? "+lock, key).Scan(&v); err != nil {
		tx.Rollback()
		return err
	}
	d := int64(10)
	// By key, or by a condition the proxy cannot read as one (at READ
	// COMMITTED it narrows that write to the keys its guard locked).
	write := []string{"UPDATE accts SET n = ? WHERE id = ?", "UPDATE accts SET n = ? WHERE id BETWEEN ? AND ?"}[rng.IntN(2)]
	args := []any{v + d, key}
	if strings.Contains(write, "BETWEEN") {
		args = append(args, key)
	}
	if _, err := tx.ExecContext(ctx, write, args...); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return infoOr(err, rec, op{Kind: opAdd, Key: key, Delta: d, Start: start, End: time.Now(), Info: true, Desc: "read-modify-write"})
	}
	end := time.Now()
	rec.add(op{Kind: opAdd, Key: key, Delta: d, Start: start, End: end, Desc: "read " + lock + " then write the value + 10"})
	rec.add(op{Kind: opRead, Key: key, Value: v + d, Start: start, End: end, Exact: true, Desc: "the value it wrote (read " + lock + " + 10)"})
	return nil
}

// txOptions picks a transaction's isolation level: REPEATABLE READ (the
// default) two times in three, READ COMMITTED otherwise (go-sql-driver
// sends a one-shot SET TRANSACTION ISOLATION LEVEL before BEGIN), where
// the proxy locks the rows of guarded writes by key.
func txOptions(rng *rand.Rand) *sql.TxOptions {
	if rng.IntN(3) == 0 {
		return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return nil
}

// infoOr records an operation whose outcome is unknown when err is a
// broken connection (returning nil), and returns err otherwise (a failed
// operation, which took no effect).
func infoOr(err error, rec *recorder, o op) error {
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) {
		rec.add(o)
		return nil
	}
	return err
}

// retryable: the server rolled the operation back (deadlock, lock wait
// timeout); an application retries it. It took no effect.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// check returns the anomalies of the history ops, given the final values.
//
// Keys that only change by increments: the final value must be the sum of
// the committed increments (the unknown ones either way); a plain read
// must lie between the increments certainly committed before it began and
// those that may have been (invoked before it ended); an exact read (its
// transaction's serialization point) must lie in the same window taken at
// its transaction's commit. Reset keys: the final value must be reachable
// from the increments that may follow the last reset.
func check(ops []op, final map[int]int64) []string {
	var anomalies []string
	byKey := map[int][]op{}
	for _, o := range ops {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	for k := 1; k <= addKeys; k++ {
		var adds []op
		var sum, lo, hi int64
		for _, o := range byKey[k] {
			if o.Kind != opAdd {
				continue
			}
			adds = append(adds, o)
			if o.Info {
				lo += min(0, o.Delta)
				hi += max(0, o.Delta)
			} else {
				sum += o.Delta
			}
		}
		if final[k] < sum+lo || final[k] > sum+hi {
			anomalies = append(anomalies, fmt.Sprintf("key %d: final total %d, but the committed increments sum to %d (%+d..%+d unknown): counts lost or invented", k, final[k], sum, lo, hi))
		}
		// For each read: the increments certainly before it (committed,
		// ended before it began) and those that may be (begun before it
		// ended). Prefix sums over the increments sorted by end and by
		// start make that O(log n) per read.
		byEnd := windows(adds, func(o op) time.Time { return o.End }, func(o op) bool { return !o.Info })
		byStart := windows(adds, func(o op) time.Time { return o.Start }, func(op) bool { return true })
		for _, r := range byKey[k] {
			if r.Kind != opRead {
				continue
			}
			c := byEnd.before(r.Start) // certain
			m := byStart.before(r.End) // possible, the certain ones included
			minus, plus := m.neg-c.neg, m.pos-c.pos
			if r.Value < c.sum+minus || r.Value > c.sum+plus {
				anomalies = append(anomalies, fmt.Sprintf("key %d: %s [%s, %s] returned %d; every serial order allows %d..%d",
					k, r.Desc, r.Start.Format("15:04:05.000000"), r.End.Format("15:04:05.000000"), r.Value, c.sum+minus, c.sum+plus))
			}
		}
	}
	for k := addKeys + 1; k <= addKeys+resetKeys; k++ {
		// The increments that may count: those not certainly before the
		// last reset that certainly happened.
		var lastReset, lastResetEnd time.Time // the latest start of a certain reset; the latest end of any reset
		for _, o := range byKey[k] {
			if o.Kind != opReset {
				continue
			}
			if !o.Info && o.Start.After(lastReset) {
				lastReset = o.Start
			}
			if o.End.After(lastResetEnd) {
				lastResetEnd = o.End
			}
		}
		var certain, plus int64
		for _, o := range byKey[k] {
			if o.Kind != opAdd {
				continue
			}
			switch {
			case o.End.Before(lastReset):
				// before the last reset: gone
			case !o.Info && !lastResetEnd.After(o.Start):
				certain += o.Delta // no reset may have come after it
			default:
				plus += o.Delta
			}
		}
		if final[k] < certain || final[k] > certain+plus {
			anomalies = append(anomalies, fmt.Sprintf("reset key %d: final total %d; after the last reset, %d increments count for certain and %d may: a re-inserted row inherited counts, or lost some", k, final[k], certain, plus))
		}
	}
	sort.Strings(anomalies)
	return anomalies
}

// sums are the sums of a set of increments: of their deltas, of the
// negative ones and of the positive ones.
type sums struct{ sum, neg, pos int64 }

// timeline holds increments sorted by one of their times, with prefix sums.
type timeline struct {
	at  []time.Time
	pre []sums // pre[i]: the first i increments
}

// windows sorts the increments that keep passes by the time at gives them.
func windows(adds []op, at func(op) time.Time, keep func(op) bool) timeline {
	var kept []op
	for _, o := range adds {
		if keep(o) {
			kept = append(kept, o)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return at(kept[i]).Before(at(kept[j])) })
	tl := timeline{at: make([]time.Time, len(kept)), pre: make([]sums, len(kept)+1)}
	for i, o := range kept {
		tl.at[i] = at(o)
		p := tl.pre[i]
		p.sum += o.Delta
		p.neg += min(0, o.Delta)
		p.pos += max(0, o.Delta)
		tl.pre[i+1] = p
	}
	return tl
}

// before returns the sums of the increments whose time is before t.
func (tl timeline) before(t time.Time) sums {
	return tl.pre[sort.Search(len(tl.at), func(i int) bool { return !tl.at[i].Before(t) })]
}

// startProxy serves backend through a slotproxy with rw on a free port.
func startProxy(t *testing.T, backend string, rw *rewrite.Rewriter) string {
	t.Helper()
	srv, err := proxy.NewServer(proxy.Config{Backend: backend, Rewriter: rw, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := testdb.Shared()
	reader := catalog.NewSlotReader(func(ctx context.Context) (*client.Conn, error) {
		return client.ConnectWithContext(ctx, s.Addr, s.RootUser, s.RootPassword, "", time.Minute)
	}, 2)
	t.Cleanup(reader.Close)
	srv.SetSlotReader(reader)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestCheckFindsAnomalies: the checker itself, on made-up histories: a lost
// increment, a read no serial order allows, and a re-inserted row that
// inherited counts are each reported; a clean history is not.
func TestCheckFindsAnomalies(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	clean := []op{
		{Kind: opAdd, Key: 1, Delta: 1, Start: at(0), End: at(10)},
		{Kind: opAdd, Key: 1, Delta: 2, Start: at(5), End: at(20)},
		{Kind: opRead, Key: 1, Value: 1, Start: at(12), End: at(15)}, // the +2 may not have committed yet
		{Kind: opRead, Key: 1, Value: 3, Start: at(21), End: at(22)},
		{Kind: opAdd, Key: 5, Delta: 1, Start: at(0), End: at(1)},
		{Kind: opReset, Key: 5, Start: at(2), End: at(3)},
		{Kind: opAdd, Key: 5, Delta: 1, Start: at(4), End: at(5)},
	}
	if a := check(clean, map[int]int64{1: 3, 2: 0, 3: 0, 4: 0, 5: 1, 6: 0}); len(a) != 0 {
		t.Fatalf("a clean history reported: %v", a)
	}
	for _, tc := range []struct {
		name  string
		ops   []op
		final map[int]int64
		want  string
	}{
		{"lost increment", clean, map[int]int64{1: 2, 5: 1}, "key 1: final total 2"},
		{"stale read", append(clean[:len(clean):len(clean)], op{Kind: opRead, Key: 1, Value: 1, Start: at(30), End: at(31), Desc: "plain read"}), map[int]int64{1: 3, 5: 1}, "returned 1; every serial order allows 3..3"},
		{"inherited count", clean, map[int]int64{1: 3, 5: 2}, "reset key 5: final total 2"},
	} {
		a := check(tc.ops, tc.final)
		if len(a) != 1 || !strings.Contains(a[0], tc.want) {
			t.Errorf("%s: anomalies %q, want one containing %q", tc.name, a, tc.want)
		}
	}
}
