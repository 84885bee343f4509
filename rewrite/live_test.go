package rewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// liveSchema creates testCatalog's tables in the databases app and other
// (the golden cases' default databases).
var liveSchema = []string{
	"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL DEFAULT '', owner_id INT NOT NULL DEFAULT 0, downloads INT NOT NULL DEFAULT 0, stars INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NULL, seen_at TIMESTAMP NULL)",
	"CREATE TABLE pages (page_id BIGINT NOT NULL PRIMARY KEY, views INT NOT NULL DEFAULT 0)",
	"CREATE TABLE likes (id BIGINT NOT NULL PRIMARY KEY, n INT NOT NULL DEFAULT 0)",
	"CREATE TABLE users (id INT NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL DEFAULT '', downloads INT NOT NULL DEFAULT 0)",
	"CREATE TABLE queries (id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, q VARCHAR(50) NULL, store INT NOT NULL DEFAULT 0, hits INT NOT NULL DEFAULT 0, UNIQUE KEY (q, store))",
	"CREATE TABLE stock (id BIGINT NOT NULL PRIMARY KEY, qty DECIMAL(12,4) NULL)",
	"CREATE TABLE slotted_counters (record_type SMALLINT UNSIGNED NOT NULL, record_id BIGINT NOT NULL, slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot))",
	"CREATE TABLE members (channel VARCHAR(26) NOT NULL, user_id INT UNSIGNED NOT NULL, msgs BIGINT NULL, note VARCHAR(20) NULL, last_at BIGINT NULL, PRIMARY KEY (channel, user_id)) " +
		"DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
	"CREATE TABLE slotted_counters_keyed (record_type SMALLINT UNSIGNED NOT NULL, record_id VARBINARY(3000) NOT NULL, slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL, " +
		"PRIMARY KEY (record_type, record_id, slot))",
}

// liveSeed resets the data before each case.
var liveSeed = []string{
	"DELETE FROM repos", "DELETE FROM pages", "DELETE FROM likes", "DELETE FROM users", "DELETE FROM slotted_counters",
	"DELETE FROM members", "DELETE FROM slotted_counters_keyed", "DELETE FROM stock",
	"INSERT INTO stock VALUES (1, 100.5000), (2, NULL)",
	// Slot rows of stock 1: -1.5 and 0.0001, in units of 0.0001.
	"INSERT INTO slotted_counters VALUES (10, 1, 0, -15000), (10, 1, 5, 1)",
	"INSERT INTO members VALUES ('a', 1, 10, NULL, 1718000000000), ('b', 2, 20, 'x', NULL), ('A-long-channel-name', 1, NULL, NULL, -1)",
	// Touch slots of last_at (BIGINT, times from 0 as v + 1): 'a',1 at
	// 1718000000500.
	"INSERT INTO slotted_counters_keyed VALUES (8, '61,1', 0, 3), (8, '62,2', 1, 4), (9, '61,1', 2, 1718000000501)",
	"INSERT INTO repos VALUES (1, 'a', 1, 10, 1, '2024-01-01 00:00:00', '2024-01-01 00:00:00'), (2, 'b', 1, 20, 2, NULL, NULL), " +
		"(3, 'c', 2, 0, 0, NULL, NULL), (7, 'x', 3, 5, 5, '2025-01-01 00:00:00.5', NULL), (99, 'y', 3, 1, 1, NULL, NULL), (8, 'z', 3, 0, 4000000000, NULL, NULL)",
	"INSERT INTO pages VALUES (1, 1), (3, 3)",
	"INSERT INTO likes VALUES (1, 10), (2, 20)",
	"INSERT INTO users VALUES (1, 'ann', 1), (2, 'bob', 2), (3, 'x', 3)",
	"INSERT INTO slotted_counters VALUES (1, 1, 0, 5), (2, 1, 1, 1), (1, 2, 3, 4), (3, 1, 0, 2)",
	// Touch slots: record 1 was touched at 2024-06-01 12:00 (updated_at,
	// DATETIME) and 2024-06-01 12:00 UTC (seen_at, TIMESTAMP).
	"INSERT INTO slotted_counters VALUES (4, 1, 3, TIMESTAMPDIFF(MICROSECOND, '0001-01-01 00:00:00', '2024-06-01 12:00:00') + 1), (5, 1, 3, 1717243200000000)",
}

// TestGoldenLive executes every SQL form of the golden files of the server
// this test run uses (SLOTPROXY_TEST_SERVER) on a live server of that kind:
// rewritten reads, upserts and existence checks, guards, folds and the
// statements run after TRUNCATE. Each must succeed without a warning (on
// MySQL: no 1052 "ambiguous", no 1287 "VALUES() is deprecated"), or fail
// exactly as the client's own statement fails on the same server, or, for a
// case marked "fails_on=SERVER:CODE", fail with that known error. The
// rewriter is given the live server's own dialect, and its plans must be the
// golden file's: so the golden SQL is SQL this test has executed.
func TestGoldenLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server; skipped with -short")
	}
	s, err := testdb.Start(testdb.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("%v\n(run scripts/deps.sh to install the servers)", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	server := string(s.Flavor)
	found := false
	for _, g := range goldenServers {
		if g.name == server {
			found = true
			if g.dialect.UpsertRowAlias() != s.Dialect().UpsertRowAlias() || g.dialect.Flavor != s.Dialect().Flavor {
				t.Fatalf("the %s golden files are written for %v, but the live server is %v", server, g.dialect, s.Dialect())
			}
		}
	}
	if !found {
		t.Fatalf("no golden files for %s", server)
	}
	for _, db := range []string{"app", "other"} {
		if err := s.Exec(append([]string{"CREATE DATABASE " + db, "USE " + db}, liveSchema...)...); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.Connect(s.Addr, s.RootUser, s.RootPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defaultMode := scalar(t, c, "SELECT @@SESSION.sql_mode")
	// Statements that name files (INTO OUTFILE, LOAD DATA) name them
	// '@TMPDIR@/name': they run with a file of their own in the server's
	// private temporary directory, so that a file written by one run, or by
	// the rewritten statement before the client's, does not decide how the
	// next one ends.
	serverTmp := strings.TrimRight(scalar(t, c, "SELECT @@tmpdir"), "/")
	files := 0
	live := func(q string) string {
		parts := strings.Split(q, "'@TMPDIR@/")
		for i := 1; i < len(parts); i++ {
			files++
			parts[i] = fmt.Sprintf("'%s/golden-%d-%s", serverTmp, files, parts[i])
		}
		return strings.Join(parts, "")
	}

	r := New(testCatalog(), Options{Dialect: s.Dialect(), Slot: func(int) int { return 42 }})
	sqlFiles, _ := filepath.Glob("testdata/*.sql")
	executed := 0
	for _, f := range sqlFiles {
		var out strings.Builder
		for _, gc := range readCases(t, f) {
			sess := gc.session()
			plans, perr := r.Rewrite(gc.sql, sess)
			out.WriteString("-- case: " + gc.name + "\n" + gc.sql + "\n=>\n" + Explain(plans, perr) + "\n\n")

			mode := defaultMode
			if sess.ANSIQuotes {
				mode += ",ANSI_QUOTES"
			}
			if sess.NoBackslashEscapes {
				mode += ",NO_BACKSLASH_ESCAPES"
			}
			for _, p := range plans {
				stmts := liveStatements(p)
				if len(stmts) == 0 {
					continue
				}
				for _, q := range append([]string{"USE app", "SET SESSION sql_mode = '" + defaultMode + "'"}, liveSeed...) {
					mustExecute(t, c, q)
				}
				mustExecute(t, c, "USE "+sess.DB)
				mustExecute(t, c, "SET SESSION sql_mode = '"+mode+"'")
				mustExecute(t, c, "BEGIN")
				known := gc.failsOn(server)
				failed := ""
				for _, q := range stmts {
					executed++
					if msg := execLive(c, live(q)); msg != "" {
						failed = msg
						if known != 0 && msg == fmt.Sprintf("ERR %d", known) {
							break // the limitation the case names
						}
						// The client's own statement must fail the same way.
						if orig := execLive(c, live(p.Original)); orig != msg {
							t.Errorf("%s: case %q: %s\n  %s\n(the client's statement %q gives %q)", f, gc.name, msg, q, p.Original, orig)
						}
						break
					}
				}
				if known != 0 && failed == "" {
					t.Errorf("%s: case %q is marked fails_on=%s:%d but works now: remove the mark and the README's limitation", f, gc.name, server, known)
				}
				mustExecute(t, c, "ROLLBACK")
			}
		}
		golden := goldenFile(f, server)
		want, err := readFileString(golden)
		if err != nil {
			t.Errorf("%v (run go test ./rewrite -update)", err)
		} else if got := out.String(); got != want {
			t.Errorf("with the live %s server's dialect (%v) the plans differ from %s:\n%s", server, s.Dialect(), golden, firstDiff(got, want))
		}
	}
	t.Logf("%s %s: executed %d golden statements", server, s.Version, executed)
	if executed < 50 {
		t.Fatalf("only %d statements executed", executed)
	}
}

// liveStatements are the SQL texts of p that slotproxy generates or sends,
// in the order the proxy runs them. Original statements sent unchanged are
// the client's, and shadow plans send only those.
func liveStatements(p Plan) []string {
	if p.Shadow {
		return nil
	}
	var out []string
	folds := func(g *Guard, refresh bool) {
		t := g.Table
		keys := liveKeys(t)
		if g.ScanSQL != "" {
			out = append(out, g.ScanSQL, t.SlottedRowsSQL("", FoldBatch, false), t.SlottedRowsSQL(keys[0], FoldBatch, true))
		}
		out = append(out, t.FoldSQL(keys, refresh)...)
		out = append(out, t.SlotRowsSQL(keys))
		rows := liveSlotRows(t)
		out = append(out, t.LockSlotRowsSQL(rows)...)
		out = append(out, t.FoldRowsSQL(keys, rows, refresh)...)
	}
	switch op := p.Op.(type) {
	case *Read:
		out = append(out, op.SQL)
	case *LockingRead:
		for _, g := range op.Guards {
			out = append(out, g.KeysSQL)
			folds(g, false)
		}
		out = append(out, op.SQL)
	case *Increment:
		out = append(out, op.ProbeSQL, op.SQL, op.Guard.KeysSQL, op.Guard.Table.LockSQL(liveKeys(op.Guard.Table)), op.Guard.Table.ShareLockSQL(liveKeys(op.Guard.Table)))
		if op.Sorted != "" {
			out = append(out, op.Sorted)
		}
		if read, ok := op.Guard.ReadKeysSQL(); ok && op.ByKeys != "" {
			t := op.Guard.Table
			out = append(out, read, t.Narrowed(op.ByKeys, liveKeys(t), false), t.Narrowed(op.ByKeys, nil, false))
		}
		folds(op.Guard, false)
	case *UpsertIncrement:
		if g := op.Generated; g != nil {
			out = append(out, g.BurnSQL, g.IDSQL, g.ExistsSQL)
		}
		out = append(out, op.Increment.ProbeSQL, op.Increment.SQL)
		if op.Increment.Sorted != "" {
			out = append(out, op.Increment.Sorted)
		}
		fb := op.Fallback
		fb.Original = p.Original
		out = append(out, liveStatements(fb)...)
	case *UpsertRows:
		for i, row := range op.Rows {
			out = append(out, row.Increment.ProbeSQL, row.Increment.SQL, op.RowSQL[i])
		}
		if op.WarnSQL != "" {
			out = append(out, op.WarnSQL)
		}
		fb := op.Fallback
		fb.Original = p.Original
		out = append(out, liveStatements(fb)...)
	case *Guarded:
		for _, g := range op.Guards {
			if g.Fallback != nil {
				out = append(out, g.ProbeSQL, g.Fallback.KeysSQL)
			}
			out = append(out, g.KeysSQL, g.Table.LockSQL(liveKeys(g.Table)))
			// Both folds: in a transaction's snapshot (refresh) and not.
			folds(g, true)
			folds(g, false)
		}
		if !Has[*Reload](p) {
			// DDL (ALTER TABLE) is the client's own statement, and no
			// ROLLBACK undoes it.
			out = append(out, op.SQL)
			if op.Unguarded != "" {
				out = append(out, op.Unguarded)
			}
		}
	case *WriteOthers:
		out = append(out, op.Guard.KeysSQL)
		folds(op.Guard, true)
	}
	for _, e := range p.Then {
		if c, ok := e.(*ClearSlots); ok {
			out = append(out, c.SQL)
		}
	}
	return out
}

// liveKeys are the keys of t's records that liveSeed gives slot rows: 1
// and 2, or the members ('a', 1) and ('b', 2).
func liveKeys(t *Table) []string {
	if t.Keyed() {
		return []string{"'61,1'", "'62,2'"}
	}
	return []string{"1", "2"}
}

// liveSlotRows are the slot rows of t's records (liveKeys) that liveSeed
// inserts (with their counts).
func liveSlotRows(t *Table) []SlotRow {
	seeded := []SlotRow{{1, "1", 0, "5"}, {2, "1", 1, "1"}, {1, "2", 3, "4"}, {3, "1", 0, "2"}, {4, "1", 3, "63853185600000001"}, {5, "1", 3, "1717243200000000"},
		{8, "'61,1'", 0, "3"}, {8, "'62,2'", 1, "4"}}
	var rows []SlotRow
	for _, r := range seeded {
		for _, c := range t.Counters {
			if c.RecordType == r.RecordType {
				rows = append(rows, r)
			}
		}
	}
	return rows
}

// execLive runs q (prepared with every parameter 1 when it has
// placeholders) and returns "" when it succeeded without warnings, else the
// error or the warnings.
func execLive(c *client.Conn, q string) string {
	var err error
	if strings.Contains(q, "?") {
		var st *client.Stmt
		if st, err = c.Prepare(q); err == nil {
			if w := warnings(c); w != "" {
				_ = st.Close()
				return "prepare: " + w
			}
			args := make([]any, st.ParamNum())
			for i := range args {
				args[i] = 1
			}
			_, err = st.Execute(args...)
			_ = st.Close()
		}
	} else {
		_, err = c.Execute(q)
	}
	if err != nil {
		if me, ok := err.(*mysql.MyError); ok {
			return fmt.Sprintf("ERR %d", me.Code)
		}
		return "error: " + err.Error()
	}
	return warnings(c)
}

// warnings returns SHOW WARNINGS, "" when there are none.
func warnings(c *client.Conn) string {
	r, err := c.Execute("SHOW WARNINGS")
	if err != nil {
		return "SHOW WARNINGS: " + err.Error()
	}
	var ws []string
	for i := range r.Values {
		level, _ := r.GetString(i, 0)
		code, _ := r.GetInt(i, 1)
		msg, _ := r.GetString(i, 2)
		ws = append(ws, fmt.Sprintf("%s %d %s", level, code, msg))
	}
	return strings.Join(ws, "; ")
}

func mustExecute(t *testing.T, c *client.Conn, q string) {
	t.Helper()
	if _, err := c.Execute(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func scalar(t *testing.T, c *client.Conn, q string) string {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	v, err := r.GetString(0, 0)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func readFileString(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}
