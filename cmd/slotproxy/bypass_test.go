package main

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// slotproxyTables lists the tables of schema that are slotproxy's: the
// slot table, a renamed one, the registry.
func slotproxyTables(t *testing.T, schema string) []string {
	t.Helper()
	db, err := sql.Open("mysql", testdb.Shared().RootDSN("", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND (table_name LIKE 'slotted_counters%' OR table_name = 'slotproxy_record_types') ORDER BY 1", schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// baseTotal is downloads of repos 1 and 2 (the base columns alone).
func baseTotal(t *testing.T, schema string) int64 {
	t.Helper()
	db, err := sql.Open("mysql", testdb.Shared().RootDSN(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow("SELECT SUM(downloads) FROM repos WHERE id IN (1, 2)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUninstall: without --yes uninstall only says what it would do; with
// it, slot rows of a counter no rule names stop it after the rename and
// before anything is dropped (the counts stay, in the renamed table), and a
// second run takes up where the first stopped: it folds, drops the slot
// table and the registry, and every total is in the base columns.
func TestUninstall(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	migrateSchema(t, path)
	direct, err := sql.Open("mysql", testdb.Shared().RootDSN(schema, "multiStatements=true"))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := direct.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Slot rows as increments through a proxy leave them: 5 + 2 for
	// repos 1, 4 for repos 2, and 9 stars for repos 1.
	exec(`INSERT INTO slotted_counters (record_type, record_id, slot, count)
		SELECT r.record_type, v.id, v.slot, v.n FROM slotproxy_record_types r
		JOIN (SELECT 'downloads' AS c, 1 AS id, 3 AS slot, 5 AS n UNION ALL SELECT 'downloads', 1, 7, 2
		      UNION ALL SELECT 'downloads', 2, 1, 4 UNION ALL SELECT 'stars', 1, 2, 9) v ON v.c = r.column_name`)
	// And a counter whose rule is gone: its slot row holds 7.
	exec("INSERT INTO slotproxy_record_types (table_name, column_name) VALUES ('repos', 'legacy')")
	exec("INSERT INTO slotted_counters (record_type, record_id, slot, count) SELECT record_type, 1, 1, 7 FROM slotproxy_record_types WHERE column_name = 'legacy'")

	stdout, stderr, code := runCLI(t, "uninstall", "--config", path)
	if code != 0 || stderr != "" || !strings.Contains(stdout, "slot table slotted_counters with 5 slot rows, 5 holding counts to fold") ||
		!strings.Contains(stdout, "nothing done: run again with --yes") {
		t.Fatalf("uninstall without --yes: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := slotproxyTables(t, schema); strings.Join(got, ",") != "slotproxy_record_types,slotted_counters" {
		t.Fatalf("tables after uninstall without --yes: %v", got)
	}

	stdout, stderr, code = runCLI(t, "uninstall", "--config", path, "--yes")
	if code != 1 || !strings.Contains(stderr, "still holds counts after the fold (record type 3 (repos.legacy): 1 rows)") || !strings.Contains(stderr, "nothing was dropped") {
		t.Fatalf("uninstall with an unknown counter's slot rows: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := slotproxyTables(t, schema); strings.Join(got, ",") != "slotproxy_record_types,slotted_counters_uninstalling" {
		t.Fatalf("tables after the stopped uninstall: %v", got)
	}
	// The operator deals with the legacy counter (here: its count is
	// dropped on purpose) and runs uninstall again.
	exec("DELETE FROM slotted_counters_uninstalling WHERE record_type = 3")
	stdout, stderr, code = runCLI(t, "uninstall", "--config", path, "--yes")
	if code != 0 || !strings.Contains(stdout, "renamed by an interrupted uninstall") || !strings.Contains(stdout, "done: no slot table is left") {
		t.Fatalf("uninstall taken up again: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := slotproxyTables(t, schema); len(got) != 0 {
		t.Fatalf("tables left after uninstall: %v", got)
	}
	var d1, d2, s1 int64
	if err := direct.QueryRow("SELECT (SELECT downloads FROM repos WHERE id = 1), (SELECT downloads FROM repos WHERE id = 2), (SELECT stars FROM repos WHERE id = 1)").Scan(&d1, &d2, &s1); err != nil {
		t.Fatal(err)
	}
	if d1 != 7 || d2 != 4 || s1 != 9 {
		t.Fatalf("after uninstall: downloads %d and %d, stars %d; want 7, 4 and 9", d1, d2, s1)
	}
	// Nothing left to do: a third run says so.
	stdout, _, code = runCLI(t, "uninstall", "--config", path, "--yes")
	if code != 0 || !strings.Contains(stdout, "no slot table, no registry: nothing to do") {
		t.Fatalf("uninstall with nothing left: exit %d\n%s", code, stdout)
	}
}

// counting is a load of increments of repos 1 and 2 on db, counting the
// acknowledged ones, the refused ones (error 1146: the slot table is gone;
// the statement did not run) and those whose outcome is unknown.
type counting struct {
	acked, refused, unknown atomic.Int64
	otherErr                atomic.Value // the last error that was not 1146
	stop                    chan struct{}
	wg                      sync.WaitGroup
}

func startCounting(db *sql.DB, workers int) *counting {
	l := &counting{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				_, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = ?", 1+(w+i)%2)
				var me *mysql.MySQLError
				switch {
				case err == nil:
					l.acked.Add(1)
				case errors.As(err, &me) && me.Number == 1146:
					l.refused.Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					l.unknown.Add(1)
					l.otherErr.Store(err.Error())
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *counting) finish() {
	close(l.stop)
	l.wg.Wait()
}

// TestBypassRunbook follows docs/operations.md's "Taking slotproxy out of
// the path" under load: increments through a proxy with rules (roll-up off,
// so slot rows hold part of every total), then the application's DSN
// pointed at the database while some clients still go through the proxy,
// and slotproxy uninstall run meanwhile. Every acknowledged increment is
// counted, the totals before and after equal, clients still on the proxy
// get error 1146 (and nothing else) once uninstall has renamed the slot
// table, and no slot table or registry is left.
func TestBypassRunbook(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	appendConfig(t, path, "rollup:\n  enabled: false\n")
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, "msg=listening")
	viaProxy := openProxy(t, testdb.Shared(), listen, schema)
	directDB, err := sql.Open("mysql", testdb.Shared().DSN(testdb.User, testdb.Password, schema, "timeout=5s"))
	if err != nil {
		t.Fatal(err)
	}
	defer directDB.Close()
	start := baseTotal(t, schema)

	// 1. In production: increments through the proxy.
	before := startCounting(viaProxy, 8)
	time.Sleep(1500 * time.Millisecond)
	before.finish()
	if n := before.unknown.Load() + before.refused.Load(); n != 0 {
		t.Fatalf("%d increments through the proxy failed before the bypass: %v", n, before.otherErr.Load())
	}
	totalBefore := total(t, testdb.Shared(), schema)
	if totalBefore != start+before.acked.Load() {
		t.Fatalf("before the bypass: total %d, want %d + %d acknowledged", totalBefore, start, before.acked.Load())
	}
	if base := baseTotal(t, schema); base == totalBefore {
		t.Fatalf("no slot rows hold part of the total before the bypass: the test would not test the fold")
	}

	// 2. The DSN points at the database: new clients go there directly,
	// stragglers still go through the proxy. 3. uninstall meanwhile.
	directLoad := startCounting(directDB, 4)
	stragglers := startCounting(viaProxy, 4)
	time.Sleep(300 * time.Millisecond)
	stdout, stderr, code := runCLI(t, "uninstall", "--config", path, "--yes")
	if code != 0 {
		t.Fatalf("uninstall under load: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	time.Sleep(500 * time.Millisecond) // the stragglers see the proxy without its slot table
	directLoad.finish()
	stragglers.finish()
	t.Logf("uninstall under load:\n%s", stdout)
	t.Logf("directly: %d acknowledged; through the proxy during the bypass: %d acknowledged, %d refused with 1146, %d unknown (%v)",
		directLoad.acked.Load(), stragglers.acked.Load(), stragglers.refused.Load(), stragglers.unknown.Load(), stragglers.otherErr.Load())

	// What the application sees: directly, nothing but successes; through
	// the proxy, error 1146 once the slot table is renamed.
	if n := directLoad.unknown.Load() + directLoad.refused.Load(); n != 0 {
		t.Errorf("%d direct increments failed during the bypass: %v", n, directLoad.otherErr.Load())
	}
	if stragglers.refused.Load() == 0 {
		t.Errorf("no client through the proxy saw error 1146 after uninstall renamed the slot table")
	}
	if n := stragglers.unknown.Load(); n != 0 {
		t.Errorf("%d increments through the proxy failed with other errors than 1146: %v", n, stragglers.otherErr.Load())
	}
	// No slotproxy table left; every increment is in the base columns.
	if got := slotproxyTables(t, schema); len(got) != 0 {
		t.Errorf("tables left after uninstall: %v", got)
	}
	want := totalBefore + directLoad.acked.Load() + stragglers.acked.Load()
	if got := baseTotal(t, schema); got != want {
		t.Errorf("after the bypass: total %d, want %d (%d before, %d direct and %d proxied increments acknowledged)",
			got, want, totalBefore, directLoad.acked.Load(), stragglers.acked.Load())
	}
	// 4. The proxy goes away.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("serve still running 15 s after SIGTERM")
	}
}

// TestUninstallKeyed: a rule whose table's key is several columns has its
// slot rows in the keyed slot table, which migrate creates and uninstall
// renames, folds and drops with the slot table; the base columns then hold
// every total.
func TestUninstallKeyed(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	if err := testdb.Shared().Exec(
		"CREATE TABLE "+schema+".members (channel VARCHAR(26) NOT NULL, user_id INT NOT NULL, msgs BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (channel, user_id)) DEFAULT CHARSET=utf8mb4",
		"INSERT INTO "+schema+".members VALUES ('town', 1, 10), ('town', 2, 0), ('Ünï', 1, 5)",
	); err != nil {
		t.Fatal(err)
	}
	rule := fmt.Sprintf("table: %s.members\nkey: [user_id, channel]\ncounters: [msgs]\n", schema)
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "rules", "members.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	migrateSchema(t, path)
	if got := slotproxyTables(t, schema); strings.Join(got, ",") != "slotproxy_record_types,slotted_counters,slotted_counters_keyed" {
		t.Fatalf("tables after migrate: %v", got)
	}
	direct, err := sql.Open("mysql", testdb.Shared().RootDSN(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	// Slot rows as increments through a proxy leave them: 3 + 4 for
	// ('town', 1), 6 for ('Ünï', 1); the record ids are the server's.
	if _, err := direct.Exec(`INSERT INTO slotted_counters_keyed (record_type, record_id, slot, count)
		SELECT r.record_type, CONCAT_WS(',', HEX(m.channel), m.user_id), v.slot, v.n FROM slotproxy_record_types r, members m
		JOIN (SELECT 'town' AS ch, 1 AS u, 0 AS slot, 3 AS n UNION ALL SELECT 'town', 1, 5, 4 UNION ALL SELECT 'Ünï', 1, 2, 6) v
		ON v.ch = m.channel AND v.u = m.user_id WHERE r.table_name = 'members'`); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "uninstall", "--config", path, "--yes")
	if code != 0 || !strings.Contains(stdout, "keyed slot table slotted_counters_keyed") || !strings.Contains(stdout, "done: no slot table is left") {
		t.Fatalf("uninstall: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := slotproxyTables(t, schema); len(got) != 0 {
		t.Fatalf("tables left after uninstall: %v", got)
	}
	var a, b, c int64
	if err := direct.QueryRow("SELECT (SELECT msgs FROM members WHERE channel = 'town' AND user_id = 1), (SELECT msgs FROM members WHERE channel = 'town' AND user_id = 2), "+
		"(SELECT msgs FROM members WHERE channel = 'Ünï')").Scan(&a, &b, &c); err != nil {
		t.Fatal(err)
	}
	if a != 17 || b != 0 || c != 11 {
		t.Fatalf("after uninstall: msgs %d, %d and %d; want 17, 0 and 11", a, b, c)
	}
}
