package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestCheck runs check against good and broken schemas and rules.
func TestCheck(t *testing.T) {
	schema, path := schemaConfig(t, "127.0.0.1:1")
	dir := filepath.Dir(path)
	ruleFile := filepath.Join(dir, "rules", "repos.yaml")
	db := testdb.Shared()
	writeRule := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "rules", name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// registry returns the number of registered record types in schema.
	registry := func() int {
		t.Helper()
		var n int
		conn, err := sql.Open("mysql", db.RootDSN(schema, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.QueryRow("SELECT COUNT(*) FROM slotproxy_record_types").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// starsType returns a root connection to schema and the record type
	// of repos.stars.
	starsType := func(t *testing.T) (*sql.DB, int) {
		t.Helper()
		conn, err := sql.Open("mysql", db.RootDSN(schema, ""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		var rt int
		if err := conn.QueryRow("SELECT record_type FROM slotproxy_record_types WHERE table_name = 'repos' AND column_name = 'stars'").Scan(&rt); err != nil {
			t.Fatal(err)
		}
		return conn, rt
	}
	check := func(t *testing.T, code int, stdout string) {
		t.Helper()
		out, stderr, got := runCLI(t, "check", "--config", path)
		if got != code || out != stdout {
			t.Errorf("check: exit status %d, stdout:\n%s\nwant %d and:\n%s", got, out, code, stdout)
		}
		wantErr := ""
		if n := strings.Count(stdout, "\n"); code == 1 && n == 1 {
			wantErr = "slotproxy: check: 1 problem found\n"
		} else if code == 1 {
			wantErr = fmt.Sprintf("slotproxy: check: %d problems found\n", n)
		}
		if stderr != wantErr {
			t.Errorf("check: stderr %q, want %q", stderr, wantErr)
		}
	}

	t.Run("before migrate", func(t *testing.T) {
		check(t, 1, ruleFile+":2: table: schema "+schema+" has no slot table slotted_counters and no record-type registry slotproxy_record_types; run slotproxy migrate to create them\n")
	})

	// migrate with downloads only, then add stars: check notes that stars
	// has no record type yet, and registers nothing.
	writeRule("repos.yaml", fmt.Sprintf("# the repos table\ntable: %s.repos\nkey: id\ncounters: [downloads]\n", schema))
	migrateSchema(t, path)
	writeRule("repos.yaml", fmt.Sprintf("# the repos table\ntable: %s.repos\nkey: id\ncounters: [downloads, stars]\n", schema))

	t.Run("good", func(t *testing.T) {
		types := registry()
		check(t, 0, "note: 1 counters have no record type yet ("+schema+".repos.stars); serve registers them when it starts, or run slotproxy migrate\n"+
			"ok: 1 rules, 2 counters\n")
		if n := registry(); n != types {
			t.Errorf("check registered record types: %d before, %d after", types, n)
		}
		migrateSchema(t, path)
		check(t, 0, "ok: 1 rules, 2 counters\n")
	})

	// A total outside the column's range, as versions that gave every
	// counter BIGINT's range could leave: named, with the repair.
	t.Run("unfoldable record", func(t *testing.T) {
		conn, rt := starsType(t)
		if _, err := conn.Exec("INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES (?, 2, 0, -3), (?, 2, 1, 1)", rt, rt); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec("DELETE FROM slotted_counters WHERE record_type = ?", rt)
		q := "`" + schema + "`"
		check(t, 1, fmt.Sprintf("%s.repos.stars: record id = 2 totals -2 (base 0, slots -2), outside the column's range [0, 4294967295]: "+
			"roll-up cannot fold it. Repair: set the value you want through the proxy (UPDATE %s.`repos` SET `stars` = VALUE WHERE `id` = 2 folds the slots and sets it), "+
			"or drop its slot rows: DELETE FROM %s.`slotted_counters` WHERE record_type = %d AND record_id = 2\n", schema, q, q, rt))
	})

	// A counter whose CHECK leaves it 11 values: no slot can take a share
	// of its range, which check says (its increments run on the base
	// row). A SMALLINT counter's slots can.
	t.Run("narrow counter", func(t *testing.T) {
		if err := db.Exec("CREATE TABLE " + schema + ".votes (id INT NOT NULL PRIMARY KEY, ups SMALLINT UNSIGNED NOT NULL DEFAULT 0, downs INT NOT NULL DEFAULT 0, " +
			"stars TINYINT NOT NULL DEFAULT 0, CONSTRAINT stars_range CHECK (stars BETWEEN 0 AND 10))"); err != nil {
			t.Fatal(err)
		}
		defer db.Exec("DROP TABLE " + schema + ".votes")
		writeRule("votes.yaml", fmt.Sprintf("table: %s.votes\nkey: id\ncounters: [ups, downs, stars]\n", schema))
		defer os.Remove(filepath.Join(dir, "rules", "votes.yaml"))
		migrateSchema(t, path)
		check(t, 0, "note: "+schema+".votes.stars: its range, 0 to 10, spans fewer than 18 values: no slot can take a share of it, so its increments run on the base row (as directly, with no contention removed); widen the column or its CHECK constraint to slot them\n"+
			"ok: 2 rules, 5 counters\n")
	})

	// Bounds of a counter whose slot rows hold more than a bounded slot
	// would (written before the rule declared them): not in force, which
	// check says, with the repair.
	t.Run("bounds not in force", func(t *testing.T) {
		conn, rt := starsType(t)
		if _, err := conn.Exec("INSERT INTO repos (id) VALUES (7)"); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec("DELETE FROM repos WHERE id = 7")
		// Slot 0's share of a max of 100 over a base of 0 is 5.
		if _, err := conn.Exec("INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES (?, 7, 0, 6)", rt); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec("DELETE FROM slotted_counters WHERE record_type = ?", rt)
		writeRule("repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\nbounds:\n  stars: {max: 100}\n", schema))
		defer writeRule("repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\n", schema))
		check(t, 0, "note: bounds of `"+schema+"`.`repos`.stars not in force: 1 of its slot rows hold more than its bounds allow (written without them); "+
			"fold the table (slotproxy rollup --once --all) once every proxy has the rule, then reload\n"+
			"ok: 1 rules, 2 counters\n")
		if _, err := conn.Exec("UPDATE slotted_counters SET count = 5 WHERE record_type = ?", rt); err != nil {
			t.Fatal(err)
		}
		check(t, 0, "ok: 1 rules, 2 counters\n")
	})

	t.Run("varchar counter and missing table", func(t *testing.T) {
		writeRule("repos.yaml", fmt.Sprintf("# the repos table\ntable: %s.repos\nkey: id\ncounters:\n  - downloads\n  - name\n", schema))
		writeRule("users.yaml", fmt.Sprintf("table: %s.users\nkey: id\ncounters: [logins]\n", schema))
		defer os.Remove(filepath.Join(dir, "rules", "users.yaml"))
		defer writeRule("repos.yaml", fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\n", schema))
		check(t, 1,
			ruleFile+":6: counters: "+schema+".repos.name is varchar(100), not an integer column; a counter must be an integer column or a DECIMAL of at most 18 digits: change the column's type or remove it from counters\n"+
				filepath.Join(dir, "rules", "users.yaml")+":1: table: "+schema+".users does not exist (or the admin user has no privileges on it); correct table: in the rule, create the table, or grant the admin user access to it\n")
	})

	t.Run("composite key", func(t *testing.T) {
		if err := db.Exec("CREATE TABLE " + schema + ".pairs (a INT NOT NULL, b INT NOT NULL, hits BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (a, b))"); err != nil {
			t.Fatal(err)
		}
		writeRule("pairs.yaml", fmt.Sprintf("table: %s.pairs\nkey: a\ncounters: [hits]\n", schema))
		defer os.Remove(filepath.Join(dir, "rules", "pairs.yaml"))
		check(t, 1, filepath.Join(dir, "rules", "pairs.yaml")+":2: key: a is not the primary key of "+schema+".pairs (PRIMARY KEY is (a, b)); "+
			"set key: to the table's primary key column, or the list of its columns (key: [a, b])\n")
	})

	t.Run("missing slot table", func(t *testing.T) {
		if err := db.Exec("DROP TABLE " + schema + ".slotted_counters"); err != nil {
			t.Fatal(err)
		}
		defer migrateSchema(t, path)
		check(t, 1, ruleFile+":1: table: schema "+schema+" has no slot table slotted_counters; run slotproxy migrate to create it\n")
	})

	t.Run("rule file errors", func(t *testing.T) {
		writeRule("bad.yaml", "table: "+schema+".repos\nkey: []\nslots: 0\n")
		defer os.Remove(filepath.Join(dir, "rules", "bad.yaml"))
		bad := filepath.Join(dir, "rules", "bad.yaml")
		check(t, 1, bad+":1: missing required key \"counters\"\n"+
			bad+":2: key: empty list; want the primary key's columns\n"+
			bad+":3: slots: 0 is out of range; want 1 to 65535\n")
	})

	t.Run("configuration errors", func(t *testing.T) {
		bad := writeFile(t, "bad.yaml", "# x\nbackend: 127.0.0.1:3306\nretries: many\n")
		out, stderr, code := runCLI(t, "check", "--config", bad)
		if code != 1 || out != bad+":3: retries: want a whole number, got \"many\"\n" || stderr != "slotproxy: check: 1 problem found\n" {
			t.Errorf("check of a bad configuration: exit status %d, stdout %q, stderr %q", code, out, stderr)
		}
		noRules := writeFile(t, "norules.yaml", "backend: 127.0.0.1:3306\n")
		if out, stderr, code := runCLI(t, "check", "--config", noRules); code != 0 || out != "ok: 0 rules, 0 counters\n" || stderr != "" {
			t.Errorf("check without rules: exit status %d, stdout %q, stderr %q", code, out, stderr)
		}
	})

	t.Run("backend down", func(t *testing.T) {
		out, _, code := runCLI(t, "check", "--config", path, "--backend", "127.0.0.1:1")
		if want := path + `: connecting to backend 127.0.0.1:1 as admin user "root": `; code != 1 || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 {
			t.Errorf("check with the backend down: exit status %d, stdout %q, want one line starting with %q", code, out, want)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"check"}, "slotproxy: check: --config is required\n"},
			{[]string{"check", "--config", path, "now"}, `slotproxy: check: unexpected argument "now"` + "\n"},
			{[]string{"check", "--config", path, "--backend", "db"}, `slotproxy: check: --backend: "db": missing port in address (want HOST:PORT)` + "\n"},
		} {
			out, stderr, code := runCLI(t, tc.args...)
			if code != 2 || stderr != tc.want || out != "" {
				t.Errorf("slotproxy %q: exit status %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, stderr, tc.want)
			}
		}
	})
}

func TestHint(t *testing.T) {
	for msg, want := range map[string]string{
		"key: app.t has no primary key; the key must be its primary key":                                          "",
		"key: app.t's primary key (id) indexes a prefix of a column; slotproxy needs a key of whole columns":      "; change the table's primary key or remove the rule",
		"table: schema app has no slot table slotted_counters; run slotproxy migrate to create it":                "",
		"key: app.t changed while being read; try again":                                                          "",
		"key: uid is not the primary key of app.t (PRIMARY KEY is (id))":                                          "; set key: to the table's primary key column, or the list of its columns (key: [a, b])",
		"table: app.v is a view, not a base table":                                                                "; rules apply to base tables only: name the underlying table",
		"table: schema nope does not exist (or the admin user has no privileges on it)":                           "; create the schema, correct table: in the rule, or grant the admin user access to it",
		"counters: app.t has no column hits":                                                                      "; correct the column's name in counters or add the column",
		"table: app.slotproxy_record_types is slotproxy's own table; it cannot have rules":                        "; remove this rule",
		"table: app.slotproxy_record_types is not slotproxy's record-type registry (want columns record_type, …)": "; rename that table, then run slotproxy migrate",
		"something new": "",
	} {
		if got := hint(msg); got != want {
			t.Errorf("hint(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestServeBoundsNotInForce: serve logs, at start and at each reload, the
// bounds of a rule it does not put in force because a slot row holds more
// than a slot under them may (written before the rule declared them), and
// puts them in force at the reload after the row is within them.
func TestServeBoundsNotInForce(t *testing.T) {
	schema, path := schemaConfig(t, freeAddr(t))
	migrateSchema(t, path)
	conn, err := sql.Open("mysql", testdb.Shared().RootDSN(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var rt int
	if err := conn.QueryRow("SELECT record_type FROM slotproxy_record_types WHERE table_name = 'repos' AND column_name = 'stars'").Scan(&rt); err != nil {
		t.Fatal(err)
	}
	// Slot 0's share of a max of 100 over a base of 0 is 5.
	if _, err := conn.Exec("INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES (?, 1, 0, 6)", rt); err != nil {
		t.Fatal(err)
	}
	rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\nbounds:\n  stars: {max: 100}\n", schema)
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "rules", "repos.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "serve", "--config", path)
	const warn = `msg="a rule's bounds are not in force"`
	if line := p.waitFor(t, warn); !strings.Contains(line, "repos`.stars not in force: 1 of its slot rows") {
		t.Errorf("at start: %s", line)
	}
	p.waitFor(t, "msg=listening")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, warn) // the reload says it again
	p.waitFor(t, `msg="reloaded rules"`)
	if _, err := conn.Exec("UPDATE slotted_counters SET count = 5 WHERE record_type = ?", rt); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, `msg="reloaded rules"`)
	if n := strings.Count(p.stderr(), warn); n != 2 {
		t.Errorf("%d warnings about bounds not in force, want 2 (at start and the first reload):\n%s", n, p.stderr())
	}
}
