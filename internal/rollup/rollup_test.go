package rollup_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/rewrite"
)

func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }

const schema = "rollup_test"

func catalog() *rewrite.Catalog {
	return rewrite.NewCatalog([]*rewrite.Table{{
		Schema: schema, Name: "repos", Key: "id",
		Columns:    []string{"id", "downloads", "stars"},
		Counters:   []rewrite.Counter{{Name: "downloads", RecordType: 1}, {Name: "stars", RecordType: 2}},
		SlotsTable: "slotted_counters", Slots: 16,
	}}, nil)
}

func setup(t *testing.T) {
	t.Helper()
	if err := testdb.Shared().Exec(
		"DROP DATABASE IF EXISTS "+schema, "CREATE DATABASE "+schema, "USE "+schema,
		"CREATE TABLE repos (id BIGINT PRIMARY KEY, downloads INT NOT NULL DEFAULT 0, stars INT UNSIGNED NOT NULL DEFAULT 0)",
		`CREATE TABLE slotted_counters (record_type SMALLINT UNSIGNED NOT NULL, record_id BIGINT NOT NULL,
			slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot))`,
		"INSERT INTO repos VALUES (1, 10, 1), (2, 20, 2), (3, 0, 0)",
		// Record 1: three slots of downloads, one of stars; record 2: two
		// slots; record 99 has no base row (orphans).
		"INSERT INTO slotted_counters VALUES (1, 1, 0, 5), (1, 1, 3, 7), (1, 1, 9, -2), (2, 1, 1, 4), (1, 2, 5, 1), (1, 2, 6, 1), (1, 99, 0, 50)",
	); err != nil {
		t.Fatal(err)
	}
}

func connect(t *testing.T) *client.Conn {
	t.Helper()
	s := testdb.Shared()
	c, err := client.Connect(s.Addr, s.RootUser, s.RootPassword, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func totals(t *testing.T, c *client.Conn) string {
	t.Helper()
	r, err := c.Execute(`SELECT id, downloads + COALESCE((SELECT SUM(count) FROM slotted_counters s WHERE s.record_type = 1 AND s.record_id = r.id), 0),
		stars + COALESCE((SELECT SUM(count) FROM slotted_counters s WHERE s.record_type = 2 AND s.record_id = r.id), 0) FROM repos r ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for i := range r.Values {
		a, _ := r.GetInt(i, 0)
		b, _ := r.GetInt(i, 1)
		d, _ := r.GetInt(i, 2)
		out += fmt.Sprintf("(%d %d %d)", a, b, d)
	}
	return out
}

func count(t *testing.T, c *client.Conn, q string) int64 {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := r.GetInt(0, 0)
	return n
}

func TestFoldKeepsTotals(t *testing.T) {
	setup(t)
	c := connect(t)
	before := totals(t, c)
	st, err := rollup.Once(context.Background(), c, catalog(), rollup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := totals(t, c); got != before {
		t.Fatalf("totals changed by the fold: %s -> %s", before, got)
	}
	// Active slot rows stay, zeroed, so hot records keep updating rows
	// rather than inserting; the orphan's rows are gone.
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters WHERE count <> 0 OR record_id = 99"); n != 0 {
		t.Fatalf("%d slot rows with counts (or of the deleted record) left", n)
	}
	if n := count(t, c, "SELECT downloads FROM repos WHERE id = 1"); n != 20 {
		t.Fatalf("base downloads of record 1 = %d, want 20", n)
	}
	if st.Folds != 3 || st.Orphans != 1 || st.SlotRows != 1 {
		t.Fatalf("stats %+v: want 3 folds, 1 orphan, 1 slot row deleted", st)
	}
	// Zero rows are deleted once a pass found the record idle and no
	// transaction that began before then is open.
	var r rollup.Roller
	if _, err := r.Once(context.Background(), c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters"); n == 0 {
		t.Fatal("zero slot rows deleted at the first pass that saw them idle")
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := r.Once(context.Background(), c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters"); n != 0 {
		t.Fatalf("%d idle slot rows left after a later pass", n)
	}
	if got := totals(t, c); got != before {
		t.Fatalf("totals changed: %s -> %s", before, got)
	}
	t.Logf("longest base-row lock held by a fold: %v", st.MaxLockHold)
}

// TestZeroRowsKeptForOlderSnapshots: a transaction whose snapshot still
// sees a record's slot counts (roll-up zeroed them after it began) keeps
// the zero rows from being deleted until it ends: should it write the
// record, it must be able to make them its own.
func TestZeroRowsKeptForOlderSnapshots(t *testing.T) {
	setup(t)
	c := connect(t)
	old := connect(t)
	if _, err := old.Execute("BEGIN"); err != nil {
		t.Fatal(err)
	}
	before := totals(t, old) // its snapshot
	var r rollup.Roller
	for range 2 { // zero the rows, then see them idle
		if _, err := r.Once(context.Background(), c, catalog(), rollup.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	rows := count(t, c, "SELECT COUNT(*) FROM slotted_counters")
	if rows == 0 {
		t.Fatal("no zero rows left after two passes")
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := r.Once(context.Background(), c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters"); n != rows {
		t.Fatalf("%d of %d zero slot rows left while an older transaction is open", n, rows)
	}
	if n := count(t, old, "SELECT COUNT(*) FROM slotted_counters WHERE count <> 0"); n == 0 {
		t.Fatal("the older transaction's snapshot shows no counts in slot rows")
	}
	if got := totals(t, old); got != before {
		t.Fatalf("the older snapshot's totals changed: %s -> %s", before, got)
	}
	if _, err := old.Execute("COMMIT"); err != nil {
		t.Fatal(err)
	}
	// The server refreshes information_schema.innodb_trx at most every
	// 0.1 s: the pass just before saw the transaction open.
	time.Sleep(200 * time.Millisecond)
	if _, err := r.Once(context.Background(), c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters"); n != 0 {
		t.Fatalf("%d zero slot rows left once the older transaction ended", n)
	}
}

// TestSkipsLockedSlots: slots locked by a transaction in flight (an
// increment not yet committed) are left for a later pass.
func TestSkipsLockedSlots(t *testing.T) {
	setup(t)
	c := connect(t)
	locker := connect(t)
	if _, err := locker.Execute("BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Execute("UPDATE slotted_counters SET count = count + 1 WHERE record_type = 1 AND record_id = 1"); err != nil {
		t.Fatal(err)
	}
	st, err := rollup.Once(context.Background(), c, catalog(), rollup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 1 {
		t.Fatalf("stats %+v: want record 1 skipped", st)
	}
	if _, err := locker.Execute("COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := rollup.All(context.Background(), c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT downloads FROM repos WHERE id = 1"); n != 23 {
		t.Fatalf("base downloads of record 1 = %d, want 23", n)
	}
}

// TestConcurrentRollups: two roll-ups at once (two proxies) never count a
// slot twice, while increments keep arriving.
func TestConcurrentRollups(t *testing.T) {
	setup(t)
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg, writersDone sync.WaitGroup
	stop := make(chan struct{})
	const writers, perWriter = 4, 500
	for w := range writers {
		writersDone.Add(1)
		go func() {
			defer writersDone.Done()
			wc := connect(t)
			for i := range perWriter {
				// An autocommit upsert that loses a deadlock to a fold
				// did nothing; the proxy retries it, and so does this
				// writer (MySQL picks the writer as the victim more often
				// than MariaDB does).
				for {
					_, err := wc.Execute(fmt.Sprintf(
						"INSERT INTO slotted_counters VALUES (1, 3, %d, 1) ON DUPLICATE KEY UPDATE count = count + 1", (w*perWriter+i)%16))
					if err == nil {
						break
					}
					if strings.Contains(err.Error(), "1213") {
						continue
					}
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := connect(t)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := rollup.Once(ctx, rc, catalog(), rollup.Options{Batch: 10}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writersDone.Wait()
	close(stop)
	wg.Wait()
	if _, err := rollup.All(ctx, c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT downloads FROM repos WHERE id = 3"); n != writers*perWriter {
		t.Fatalf("record 3 = %d after concurrent roll-ups, want %d", n, writers*perWriter)
	}
}

// TestRollerTakesTurns: with a batch of one record per pass, successive
// passes visit different records, so none is starved.
func TestRollerTakesTurns(t *testing.T) {
	setup(t)
	c := connect(t)
	var r rollup.Roller
	for range 4 { // four records with slots
		if _, err := r.Once(context.Background(), c, catalog(), rollup.Options{Batch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters WHERE count <> 0 AND record_id <> 99"); n != 0 {
		t.Fatalf("%d slot rows with counts left after four one-record passes", n)
	}
}

// TestAllIgnoresUnknownRecordTypes: slot rows of a record type no rule
// names neither block nor get folded by --all.
func TestAllIgnoresUnknownRecordTypes(t *testing.T) {
	setup(t)
	c := connect(t)
	if _, err := c.Execute("INSERT INTO slotted_counters VALUES (9, 1, 0, 5)"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rollup.All(ctx, c, catalog(), rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters"); n != 1 {
		t.Fatalf("%d slot rows left, want only the unknown record type's", n)
	}
}

// TestStatementBinlog: with statement-based binary logging the server
// refuses writes at READ COMMITTED (ERROR 1665); the roll-up then folds
// at REPEATABLE READ, and every pass succeeds with totals kept.
func TestStatementBinlog(t *testing.T) {
	s, err := testdb.Start(testdb.Options{Logf: t.Logf, ExtraArgs: []string{"--log-bin=binlog", "--server-id=1", "--binlog-format=STATEMENT"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := s.Exec(
		"CREATE DATABASE "+schema, "USE "+schema,
		"CREATE TABLE repos (id BIGINT PRIMARY KEY, downloads INT NOT NULL DEFAULT 0, stars INT UNSIGNED NOT NULL DEFAULT 0)",
		`CREATE TABLE slotted_counters (record_type SMALLINT UNSIGNED NOT NULL, record_id BIGINT NOT NULL,
			slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot))`,
		"INSERT INTO repos VALUES (1, 10, 1), (2, 20, 2)",
		"INSERT INTO slotted_counters VALUES (1, 1, 0, 5), (1, 1, 3, 7), (2, 1, 1, 4), (1, 2, 5, 1)",
	); err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(s.Addr, s.RootUser, s.RootPassword, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute("SELECT @@GLOBAL.log_bin, @@SESSION.binlog_format")
	if err != nil {
		t.Fatal(err)
	}
	if on, _ := r.GetInt(0, 0); on != 1 {
		t.Fatalf("binary log off on the test server")
	}
	if f, _ := r.GetString(0, 1); f != "STATEMENT" {
		t.Fatalf("binlog_format %q", f)
	}
	// What the roll-up avoids: a fold's write at READ COMMITTED fails.
	if _, err := c.Execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute("UPDATE repos SET downloads = downloads WHERE id = 1"); err == nil || !strings.Contains(err.Error(), "1665") {
		t.Fatalf("a write at READ COMMITTED with statement logging: %v, want ERROR 1665", err)
	}
	before := totals(t, c)
	for range 2 {
		if _, err := rollup.Once(context.Background(), c, catalog(), rollup.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := totals(t, c); got != before {
		t.Fatalf("totals changed by the fold: %s -> %s", before, got)
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters WHERE count <> 0"); n != 0 {
		t.Fatalf("%d slot rows not folded", n)
	}
}

// TestUnfoldableRecordSkipped: a record whose fold the server refuses
// (its total is beyond the column's range) is skipped and counted, and
// the pass folds every other record; it stays in its slots, total intact.
func TestUnfoldableRecordSkipped(t *testing.T) {
	setup(t)
	c := connect(t)
	// Record 2's downloads (INT) total 2147483647 + 5: it cannot be folded.
	if _, err := c.Execute("UPDATE repos SET downloads = 2147483647 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute("INSERT INTO slotted_counters VALUES (1, 2, 7, 3)"); err != nil {
		t.Fatal(err)
	}
	st, err := rollup.Once(context.Background(), c, catalog(), rollup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Unfoldable != 1 {
		t.Fatalf("stats %+v: want record 2 unfoldable", st)
	}
	if n := count(t, c, "SELECT downloads FROM repos WHERE id = 1"); n != 20 {
		t.Fatalf("record 1 after the pass: downloads %d, want 20 (folded)", n)
	}
	if n := count(t, c, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters WHERE record_type = 1 AND record_id = 2"); n != 5 {
		t.Fatalf("record 2's slots hold %d, want 5 (left as they were)", n)
	}
}

// TestWaitsForBusyRow: a record whose base row a young transaction holds
// in share mode (an increment in flight) is folded once that transaction
// commits: the pass waits for the row. While a transaction has been open
// for more than a second, the pass does not wait (increments queued
// behind the fold would wait for that transaction too): the record is
// skipped at once.
func TestWaitsForBusyRow(t *testing.T) {
	setup(t)
	c := connect(t)
	holder := connect(t)
	for _, q := range []string{"BEGIN", "SELECT id FROM repos WHERE id = 2 LOCK IN SHARE MODE"} {
		if _, err := holder.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		time.Sleep(300 * time.Millisecond)
		_, _ = holder.Execute("COMMIT")
	}()
	start := time.Now()
	st, err := rollup.Once(context.Background(), c, catalog(), rollup.Options{})
	<-committed // holder is used again below
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 0 || st.Folds != 3 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("stats %+v after %v: want every record folded, record 2 after waiting for its row", st, time.Since(start))
	}

	// An old transaction holds the row: no wait.
	setup(t)
	for _, q := range []string{"BEGIN", "SELECT id FROM repos WHERE id = 2 LOCK IN SHARE MODE"} {
		if _, err := holder.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2100 * time.Millisecond)
	start = time.Now()
	st, err = rollup.Once(context.Background(), c, catalog(), rollup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 1 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("stats %+v after %v: want record 2 skipped at once", st, time.Since(start))
	}
	if _, err := holder.Execute("COMMIT"); err != nil {
		t.Fatal(err)
	}
}

// TestFoldPartition: with a slot partition (3 parts, this proxy's is 0:
// slots 0, 3, 6, 9, …), a pass folds the proxy's part of each record, and
// the others' parts only when a previous pass saw them as they are now
// and at least Options.QuietAfter before (quiet: their proxies are gone,
// or write elsewhere); a part that changed meanwhile is left to its own
// proxy's roll-up. Totals never change.
func TestFoldPartition(t *testing.T) {
	setup(t)
	c := connect(t)
	part := rollup.Options{Partition: func() (int, int) { return 3, 0 }, QuietAfter: time.Millisecond}
	before := totals(t, c)
	slotsOf := func(q string) string {
		t.Helper()
		r, err := c.Execute("SELECT GROUP_CONCAT(CONCAT(record_type, '/', record_id, '/', slot, '=', count) ORDER BY record_type, record_id, slot) FROM slotted_counters WHERE count <> 0" + q)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.GetString(0, 0)
		return s
	}
	// Unchanged for less than QuietAfter: not another part's to fold yet.
	var early rollup.Roller
	slow := part
	slow.QuietAfter = time.Hour
	for range 2 {
		if _, err := early.Once(context.Background(), c, catalog(), slow); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := slotsOf(""), "1/2/5=1,2/1/1=4"; got != want {
		t.Fatalf("after two passes within QuietAfter, slot rows with counts: %s, want %s", got, want)
	}
	var r rollup.Roller
	if _, err := r.Once(context.Background(), c, catalog(), part); err != nil {
		t.Fatal(err)
	}
	// Slots 0, 3 and 9 of record 1's downloads and slot 6 of record 2's
	// are folded (and the orphan's rows deleted); the others' parts stay.
	if got, want := slotsOf(""), "1/2/5=1,2/1/1=4"; got != want {
		t.Fatalf("after the first pass, slot rows with counts: %s, want %s", got, want)
	}
	if got := totals(t, c); got != before {
		t.Fatalf("totals changed: %s -> %s", before, got)
	}
	// Record 2's other part changes (an increment through another
	// proxy): not quiet, left; record 1's stars part is as it was: folded.
	if err := testdb.Shared().Exec("UPDATE " + schema + ".slotted_counters SET count = count + 1 WHERE record_type = 1 AND record_id = 2 AND slot = 5"); err != nil {
		t.Fatal(err)
	}
	before = totals(t, c)
	if _, err := r.Once(context.Background(), c, catalog(), part); err != nil {
		t.Fatal(err)
	}
	if got, want := slotsOf(""), "1/2/5=2"; got != want {
		t.Fatalf("after the second pass, slot rows with counts: %s, want %s", got, want)
	}
	// Quiet since: folded by the third pass.
	if _, err := r.Once(context.Background(), c, catalog(), part); err != nil {
		t.Fatal(err)
	}
	if got := slotsOf(""); got != "" {
		t.Fatalf("after the third pass, slot rows with counts: %s", got)
	}
	if got := totals(t, c); got != before {
		t.Fatalf("totals changed: %s -> %s", before, got)
	}
}

// TestFoldKeyedRecords: records of a key of several columns (a string and
// an integer) have their slot rows in the keyed slot table, named by an
// encoding of the key; passes of one record each (Batch 1, so that each
// continues after the last record's key) fold them all, keep every total
// and delete an orphan's rows.
func TestFoldKeyedRecords(t *testing.T) {
	if err := testdb.Shared().Exec(
		"DROP DATABASE IF EXISTS "+schema, "CREATE DATABASE "+schema, "USE "+schema,
		"CREATE TABLE members (ch VARCHAR(20) NOT NULL, u INT NOT NULL, n BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (ch, u)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
		`CREATE TABLE slotted_counters_keyed (record_type SMALLINT UNSIGNED NOT NULL, record_id VARBINARY(3000) NOT NULL,
			slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot))`,
		"INSERT INTO members VALUES ('a', 1, 10), ('a', 2, 0), ('B', 1, 5), ('ü', -3, 0)",
		"INSERT INTO slotted_counters_keyed SELECT 3, CONCAT_WS(',', HEX(ch), u), 0, 7 FROM members",
		"INSERT INTO slotted_counters_keyed SELECT 3, CONCAT_WS(',', HEX(ch), u), 5, u FROM members",
		"INSERT INTO slotted_counters_keyed VALUES (3, '7A,1', 0, 99)", // no base row
	); err != nil {
		t.Fatal(err)
	}
	cat := rewrite.NewCatalog([]*rewrite.Table{{
		Schema: schema, Name: "members",
		KeyColumns: []rewrite.KeyColumn{{Name: "ch", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"}, {Name: "u", Integer: true}},
		Columns:    []string{"ch", "u", "n"},
		Counters:   []rewrite.Counter{{Name: "n", RecordType: 3}},
		SlotsTable: "slotted_counters_keyed", Slots: 16,
	}}, nil)
	c := connect(t)
	var r rollup.Roller
	folds, orphans := 0, 0
	for range 8 {
		st, err := r.Once(context.Background(), c, cat, rollup.Options{Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		folds, orphans = folds+st.Folds, orphans+st.Orphans
	}
	if n := count(t, c, "SELECT COUNT(*) FROM slotted_counters_keyed WHERE count <> 0"); n != 0 {
		t.Fatalf("%d keyed slot rows hold counts after the passes", n)
	}
	r2, err := c.Execute("SELECT GROUP_CONCAT(CONCAT(HEX(ch), u, '=', n) ORDER BY ch, u) FROM members")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := r2.GetString(0, 0)
	if want := "611=18,612=9,421=13,C3BC-3=4"; got != want || folds != 4 || orphans != 1 {
		t.Fatalf("after the passes: %s (%d folds, %d orphans); want %s, 4 folds and 1 orphan", got, folds, orphans, want)
	}
}
