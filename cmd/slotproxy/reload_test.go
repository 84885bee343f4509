package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestReloadSIGHUP reloads the rules of a running serve with SIGHUP while a
// client stays connected: a new counter takes effect for new statements,
// a statement prepared before keeps its plan, broken rules and a broken
// configuration are refused with FILE:LINE in the log and the previous rules
// stay, the reloads after DDL use the reloaded rules, and keys that need a
// restart are named.
func TestReloadSIGHUP(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	dir := filepath.Dir(path)
	ruleFile := filepath.Join(dir, "rules", "repos.yaml")
	writeRule := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "rules", name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// To start with, stars is not a counter. No roll-up, so slot rows stay
	// where the increments put them.
	writeRule("repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads]\n", schema))
	appendConfig(t, path, "rollup:\n  enabled: false\n")
	migrateSchema(t, path)

	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, "msg=listening")
	hup := func() {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	ctx := context.Background()
	db := openProxy(t, testdb.Shared(), listen, schema)
	conn, err := db.Conn(ctx) // one client connection throughout
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var connID int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&connID); err != nil {
		t.Fatal(err)
	}
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, query, args...); err != nil {
			t.Fatalf("%s: %v\nstderr:\n%s", query, err, p.stderr())
		}
	}
	direct, err := sql.Open("mysql", testdb.Shared().RootDSN(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	// state returns the base column stars of repos 1 and the sum of its
	// slot rows, read directly.
	state := func() (base, slots int64) {
		t.Helper()
		if err := direct.QueryRow("SELECT stars FROM repos WHERE id = 1").Scan(&base); err != nil {
			t.Fatal(err)
		}
		if err := direct.QueryRow("SELECT COALESCE(SUM(s.count), 0) FROM slotted_counters s JOIN slotproxy_record_types r USING (record_type) " +
			"WHERE r.column_name = 'stars' AND s.record_id = 1").Scan(&slots); err != nil {
			t.Fatal(err)
		}
		return base, slots
	}
	wantState := func(when string, base, slots int64) {
		t.Helper()
		if b, s := state(); b != base || s != slots {
			t.Errorf("%s: stars base %d, slots %d; want %d and %d", when, b, s, base, slots)
		}
	}

	// Prepared before the reload: stars increments pass through, downloads
	// increments are rewritten.
	before, err := conn.PrepareContext(ctx, "UPDATE repos SET stars = stars + ? WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	downloads, err := conn.PrepareContext(ctx, "UPDATE repos SET downloads = downloads + ? WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer downloads.Close()
	if _, err := before.ExecContext(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	wantState("before the reload", 1, 0)

	// Add stars as a counter and reload.
	writeRule("repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\n", schema))
	hup()
	line := p.waitFor(t, `msg="reloaded rules"`)
	for _, want := range []string{"rules=1", "counters=2", "tables=1"} {
		if !strings.Contains(line, want) {
			t.Errorf("reload line lacks %s: %s", want, line)
		}
	}
	// The same connection carries on; new statements use the new rule.
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil || id != connID {
		t.Fatalf("after the reload: connection id %d, %v; want the same connection %d", id, err, connID)
	}
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1") // text protocol
	wantState("after the reload, text protocol", 1, 1)
	after, err := conn.PrepareContext(ctx, "UPDATE repos SET stars = stars + ? WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, err := after.ExecContext(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	wantState("after the reload, prepared after it", 1, 2)
	// The statement prepared before the reload is planned again: the
	// catalog moved and its plan changed (an increment now), so this
	// execution folds the record and runs on the base row.
	if _, err := before.ExecContext(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	wantState("after the reload, prepared before it", 4, 0)
	var stars int64
	if err := conn.QueryRowContext(ctx, "SELECT stars FROM repos WHERE id = 1").Scan(&stars); err != nil || stars != 4 {
		t.Errorf("stars through the proxy = %d, %v; want 4", stars, err)
	}

	// Broken rules are refused with their FILE:LINE, at level ERROR, and
	// the previous rules stay.
	for _, tc := range []struct {
		name, file, content string
		want                string // in the error line
	}{
		{"rule file that does not parse", "broken.yaml", "table: " + schema + ".repos\nkey: id\ncounters: [downloads\n",
			filepath.Join(dir, "rules", "broken.yaml") + ":3: "},
		{"rule that does not match the schema", "repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars,\n  name]\n", schema),
			ruleFile + ":4: counters: " + schema + ".repos.name is varchar(100), not an integer column"},
		{"counter with a typo: check's hint too", "repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, starz]\n", schema),
			ruleFile + ":3: counters: " + schema + ".repos has no column starz; correct the column's name in counters or add the column"},
		{"second rule for the same table", "again.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads]\n", schema),
			ruleFile + ":1: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, _ := os.ReadFile(filepath.Join(dir, "rules", tc.file))
			writeRule(tc.file, tc.content)
			defer func() {
				if old == nil {
					os.Remove(filepath.Join(dir, "rules", tc.file))
				} else {
					writeRule(tc.file, string(old))
				}
			}()
			hup()
			line := p.waitFor(t, "reload failed")
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "keeping the previous rules") || !strings.Contains(line, tc.want) {
				t.Errorf("reload failure logged as:\n%s\nwant level=ERROR, keeping the previous rules, and %q", line, tc.want)
			}
			b, s := state()
			exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
			wantState("after a failed reload", b, s+1)
		})
	}

	// A configuration that does not load is refused with its FILE:LINE.
	cfgText := readFile(t, path)
	if err := os.WriteFile(path, []byte(cfgText+"retries: many\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup()
	line = p.waitFor(t, "reload failed")
	if want := path + ":" + fmt.Sprint(strings.Count(cfgText, "\n")+1) + ": retries: want a whole number"; !strings.Contains(line, want) ||
		!strings.Contains(line, "level=ERROR") {
		t.Errorf("failed configuration reload logged as:\n%s\nwant %q", line, want)
	}

	// Keys that need a restart are named; the rules still reload.
	other := freeAddr(t)
	if err := os.WriteFile(path, []byte(strings.Replace(cfgText, "listen: "+listen, "listen: "+other, 1)+"retries: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup()
	line = p.waitFor(t, "take effect only when serve restarts")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, `keys="listen, retries"`) {
		t.Errorf("restart warning: %s", line)
	}
	p.waitFor(t, `msg="reloaded rules"`)
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1") // still on the old address

	// DDL reloads the catalog with the reloaded rules: stars stays a
	// counter.
	exec("ALTER TABLE repos ADD COLUMN note VARCHAR(10)")
	p.waitFor(t, `msg="reloaded the catalog after DDL"`)
	b, s := state()
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
	wantState("after DDL", b, s+1)

	// A view created on a connection is read through by that connection's
	// very next statements, with no wait in between (the exactness
	// issue's case 5: 3 directly, the base value 1 when the reload came
	// after the next statement).
	exec("UPDATE repos SET stars = stars + 2 WHERE id = 1")
	exec("CREATE OR REPLACE VIEW v_repos AS SELECT id, stars FROM repos")
	exec("UPDATE v_repos SET stars = stars + 1")
	var viaView int64
	if err := conn.QueryRowContext(ctx, "SELECT stars FROM v_repos WHERE id = ?", 1).Scan(&viaView); err != nil {
		t.Fatal(err)
	}
	if b, s := state(); viaView != b+s {
		t.Errorf("stars through a view created on the same connection: %d, want the total %d (base %d + slots %d)", viaView, b+s, b, s)
	}
	exec("DROP VIEW v_repos")

	// The exactness issue's case 6. A column computed from a counter,
	// added through the proxy, computes from the total: the table's slots
	// are folded before the ALTER, and its increments then run on the
	// base row, where the server computes it.
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
	if _, s := state(); s == 0 {
		t.Fatal("the increment before the ALTER left no slot")
	}
	exec("ALTER TABLE repos ADD COLUMN stars2 BIGINT AS (stars * 2)")
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
	var total, doubled int64
	if err := conn.QueryRowContext(ctx, "SELECT stars, stars2 FROM repos WHERE id = 1").Scan(&total, &doubled); err != nil {
		t.Fatal(err)
	}
	if b, s := state(); doubled != 2*total || s != 0 || total != b {
		t.Errorf("after a generated column of stars: stars %d, stars2 %d (want %d), base %d, slots %d (want 0)", total, doubled, 2*total, b, s)
	}
	p.waitFor(t, "a ruled table's schema changed")
	exec("ALTER TABLE repos DROP COLUMN stars2")
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
	if _, s := state(); s == 0 {
		t.Error("once the generated column is gone, increments are not slotted again")
	}
	// An UPDATE trigger created directly, then SIGHUP: the reload does not
	// fail and keep slotting (the trigger would never fire); increments
	// run on the base row, and the trigger fires for each.
	for _, q := range []string{
		"CREATE TABLE star_log (id BIGINT NOT NULL)",
		"CREATE TRIGGER repos_star_log AFTER UPDATE ON repos FOR EACH ROW INSERT INTO star_log VALUES (NEW.id)",
	} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	hup()
	p.waitFor(t, `msg="reloaded rules"`)
	fired := func() (n int) {
		t.Helper()
		if err := direct.QueryRow("SELECT COUNT(*) FROM star_log").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The record has slots from before the trigger: folding them is an
	// UPDATE of its row, and fires the trigger too (docs/limits.md).
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
	if n := fired(); n != 2 {
		t.Errorf("the UPDATE trigger fired %d times for the fold and the increment, want 2", n)
	}
	exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
	exec("UPDATE repos SET stars = stars + 2 WHERE id = 2")
	if n := fired(); n != 4 {
		t.Errorf("the UPDATE trigger fired %d times after two more increments, want 4 (once each)", n)
	}
	if _, s := state(); s != 0 {
		t.Errorf("increments left %d in slots while the table has an UPDATE trigger", s)
	}
	for _, q := range []string{"DROP TRIGGER repos_star_log", "DROP TABLE star_log"} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	hup()
	p.waitFor(t, `msg="reloaded rules"`)

	// A view of the ruled table created through the proxy reloads the
	// catalog too, which then refuses the writes through it it cannot plan
	// as writes of the table (a row deleted through a view would leave
	// its slots behind).
	exec("CREATE VIEW repo_names AS SELECT id, name FROM repos")
	p.waitFor(t, `msg="reloaded the catalog after DDL"`)
	var me *mysql.MySQLError
	if _, err := db.Exec("DELETE FROM repo_names WHERE id = 1"); !errors.As(err, &me) || me.Number != 1235 ||
		!strings.Contains(me.Message, "writes through view "+schema+".repo_names") {
		t.Errorf("delete through a view of the ruled table: %v, want refusal 1235", err)
	}
	exec("DROP VIEW repo_names")
	p.waitFor(t, `msg="reloaded the catalog after DDL"`)

	// A view of counters, created through the proxy (as written: its
	// stored body reads the base column) or directly on the server and
	// seen at the next reload: reads through it return totals.
	viewRead := func(view string) {
		t.Helper()
		exec("UPDATE repos SET stars = stars + 1 WHERE id = 1")
		var viaView int64
		if err := db.QueryRow("SELECT stars FROM " + view + " WHERE id = 1").Scan(&viaView); err != nil {
			t.Fatal(err)
		}
		if b, s := state(); s == 0 || viaView != b+s {
			t.Errorf("stars through %s: %d, want base %d + slots %d", view, viaView, b, s)
		}
	}
	exec("CREATE VIEW repo_stars AS SELECT id, stars FROM repos")
	p.waitFor(t, `msg="reloaded the catalog after DDL"`)
	viewRead("repo_stars")
	exec("DROP VIEW repo_stars")
	p.waitFor(t, `msg="reloaded the catalog after DDL"`)
	if _, err := direct.Exec("CREATE VIEW repo_stars2 AS SELECT id, stars FROM repos"); err != nil {
		t.Fatal(err)
	}
	hup()
	p.waitFor(t, `msg="reloaded rules"`)
	viewRead("repo_stars2")
	if _, err := direct.Exec("DROP VIEW repo_stars2"); err != nil {
		t.Fatal(err)
	}

	// A rule that drops downloads: the statement prepared at the start is
	// planned again at its next execution and writes the base column, as
	// new statements do (it once went on writing slot rows that nothing
	// folded any more).
	downloadsState := func() (base, slots int64) {
		t.Helper()
		if err := direct.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&base); err != nil {
			t.Fatal(err)
		}
		if err := direct.QueryRow("SELECT COALESCE(SUM(s.count), 0) FROM slotted_counters s JOIN slotproxy_record_types r USING (record_type) " +
			"WHERE r.column_name = 'downloads' AND s.record_id = 1").Scan(&slots); err != nil {
			t.Fatal(err)
		}
		return base, slots
	}
	writeRule("repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [stars]\n", schema))
	hup()
	if line := p.waitFor(t, `msg="reloaded rules"`); !strings.Contains(line, "counters=1") {
		t.Errorf("reload line: %s", line)
	}
	b, s = downloadsState()
	if _, err := downloads.ExecContext(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	if b2, s2 := downloadsState(); b2 != b+2 || s2 != s {
		t.Errorf("downloads after the rule dropped it: base %d→%d, slots %d→%d; want base +2 and slots unchanged (the statement prepared before and a new one both write the base column)", b, b2, s, s2)
	}

	before.Close()
	after.Close()
	downloads.Close()
	conn.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v\nstderr:\n%s", err, p.stderr())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve still running 15s after SIGTERM")
	}
}

// TestReloadWithoutConfig: serve on flags alone has nothing to reload and
// says so.
func TestReloadWithoutConfig(t *testing.T) {
	backend := newFakeBackend(t)
	p := startServe(t, "serve", "--listen", freeAddr(t), "--backend", backend.addr, "--metrics", "")
	p.waitFor(t, "msg=listening")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "started without --config; nothing to reload")
}

// TestRestartKeys changes every leaf field of the configuration in turn:
// each must be either applied by a reload or reported by
// restartKeys, so a key added later cannot be silently ignored by reloads.
func TestRestartKeys(t *testing.T) {
	live := map[string]bool{"SlotsTable": true, "Admin.User": true, "Admin.Password": true, "SlotPartition.Count": true, "SlotPartition.Index": true}
	var walk func(v reflect.Value, name string)
	var fields []string
	walk = func(v reflect.Value, name string) {
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				n := v.Type().Field(i).Name
				if name != "" {
					n = name + "." + n
				}
				walk(v.Field(i), n)
			}
			return
		}
		fields = append(fields, name)
	}
	walk(reflect.ValueOf(*config.Default()), "")
	for _, f := range fields {
		cur, next := config.Default(), config.Default()
		v := reflect.ValueOf(next).Elem().FieldByName(strings.Split(f, ".")[0])
		for _, part := range strings.Split(f, ".")[1:] {
			v = v.FieldByName(part)
		}
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint16:
			v.SetUint(v.Uint() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		default:
			t.Fatalf("config field %s of kind %s: teach this test to change it", f, v.Kind())
		}
		keys := restartKeys(cur, next)
		switch {
		case live[f] && len(keys) > 0:
			t.Errorf("changing %s (applied by reloads) is reported as needing a restart: %v", f, keys)
		case !live[f] && len(keys) != 1:
			t.Errorf("changing %s: restartKeys = %v, want one key", f, keys)
		}
	}
}

// TestProxyConfigLimits: the file's limits reach the proxy with their
// meaning kept: max_concurrent_rewrites 0 turns the gate off (the proxy's
// own 0 would mean its default), and retries 0 turns retries off.
func TestProxyConfigLimits(t *testing.T) {
	for _, tc := range []struct {
		rewrites, wantRewrites int
		retries, wantRetries   int
	}{
		{64, 64, 3, 3},
		{0, -1, 0, -1},
		{5, 5, 7, 7},
	} {
		cfg := config.Default()
		cfg.Backend.Address = "127.0.0.1:3306"
		cfg.Limits.MaxConcurrentRewrites, cfg.Limits.QueueWait, cfg.Retries = tc.rewrites, 3*time.Second, tc.retries
		pc, err := proxyConfig(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if pc.MaxConcurrentRewrites != tc.wantRewrites || pc.QueueWait != 3*time.Second || pc.MaxRetries != tc.wantRetries {
			t.Errorf("max_concurrent_rewrites %d, retries %d: proxy got %d, %s, %d; want %d, 3s, %d",
				tc.rewrites, tc.retries, pc.MaxConcurrentRewrites, pc.QueueWait, pc.MaxRetries, tc.wantRewrites, tc.wantRetries)
		}
	}
}
