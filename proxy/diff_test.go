package proxy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// The differential harness runs the same statements, on the same data,
// against a plain table directly and against a ruled table through the
// proxy, and compares everything a client can observe: result values,
// column names, affected rows, insert ids, warning counts, transaction
// status and errors.

const (
	plainSchema = "diff_plain"
	ruledSchema = "diff_ruled"
)

var diffDDL = []string{
	"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL DEFAULT '', owner_id INT NOT NULL DEFAULT 0, downloads INT NOT NULL DEFAULT 0, stars INT UNSIGNED NOT NULL DEFAULT 0, big BIGINT UNSIGNED NOT NULL DEFAULT 0)",
	"CREATE TABLE users (id INT NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL, downloads INT NOT NULL DEFAULT 0)",
	"INSERT INTO repos VALUES (1, 'alpha', 1, 10, 1, 18446744073709551000), (2, 'beta', 1, 20, 2, 0), (3, 'gamma', 2, 0, 0, 5), (4, 'delta', 3, 5, 7, 1)",
	"INSERT INTO users VALUES (1, 'ann', 100), (2, 'bob', 200), (3, 'cid', 300)",
	"CREATE VIEW repo_counts AS SELECT id, name, downloads FROM repos",
	"CREATE VIEW top_repos AS SELECT r.id, r.downloads AS d FROM repo_counts r WHERE r.downloads > 5",
}

// diffViews are the views of diffDDL, as the catalog would read them.
var diffViews = map[string]string{
	ruledSchema + ".repo_counts": "SELECT id, name, downloads FROM " + ruledSchema + ".repos",
	ruledSchema + ".top_repos":   "SELECT r.id, r.downloads AS d FROM " + ruledSchema + ".repo_counts r WHERE r.downloads > 5",
}

// diffCatalog describes diff_ruled.repos for the rewriter.
func diffCatalog() *rewrite.Catalog {
	cat := rewrite.NewCatalog([]*rewrite.Table{{
		Schema: ruledSchema, Name: "repos", Key: "id",
		Columns:    []string{"id", "name", "owner_id", "downloads", "stars", "big"},
		Counters:   []rewrite.Counter{{Name: "downloads", RecordType: 1}, {Name: "stars", RecordType: 2}, {Name: "big", RecordType: 3, Unsigned: true}},
		SlotsTable: "slotted_counters", Slots: 8,
	}}, map[string][]string{
		ruledSchema + ".users":       {"id", "name", "downloads"},
		ruledSchema + ".repo_counts": {"id", "name", "downloads"},
		ruledSchema + ".top_repos":   {"id", "d"},
	})
	cat.AddViews(diffViews)
	return cat
}

func setupDiffSchemas(t *testing.T) {
	t.Helper()
	db := testdb.Shared()
	for _, schema := range []string{plainSchema, ruledSchema} {
		stmts := []string{"DROP DATABASE IF EXISTS " + schema, "CREATE DATABASE " + schema, "USE " + schema}
		stmts = append(stmts, diffDDL...)
		if err := db.Exec(stmts...); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Exec("CREATE TABLE " + ruledSchema + `.slotted_counters (
		record_type SMALLINT UNSIGNED NOT NULL, record_id BIGINT NOT NULL, slot SMALLINT UNSIGNED NOT NULL,
		count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot)) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
}

// step is one statement; args non-nil means a prepared statement.
type step struct {
	sql   string
	args  []any
	multi bool // several statements in one COM_QUERY
	conn  int  // which client runs it (0, 1, …): a pair of connections each, direct and through the proxy
}

// on runs st on client c (see step.conn).
func on(c int, st step) step { st.conn = c; return st }

func text(sql string) step              { return step{sql: sql} }
func prep(sql string, args ...any) step { return step{sql: sql, args: append([]any{}, args...)} }
func multi(sql string) step             { return step{sql: sql, multi: true} }

// diffCorpus covers every write and read shape of the rewriting issue.
var diffCorpus = []step{
	// Increments: text and prepared, every spelling.
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("update REPOS set DOWNLOADS=downloads+5 where ID=2 LIMIT 1"),
	text("UPDATE /* c */ `repos` SET `downloads` = 3 + `downloads` WHERE (1 = id)"),
	text("UPDATE repos AS r SET r.downloads = r.downloads - 2 WHERE r.id = 1"),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 7, 1),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, 2),
	prep("UPDATE repos SET downloads = downloads - ? WHERE id = ?", 3, 2),
	prep("UPDATE repos SET downloads = downloads + ?, stars = stars + ? WHERE id = ?", 2, 3, 3),
	text("UPDATE repos SET downloads = downloads + 1, stars = stars + 1 WHERE id = 4"),
	text("UPDATE repos SET downloads = downloads + 0 WHERE id = 4"),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 0, 4),
	text("UPDATE repos SET big = big + 100 WHERE id = 1"),
	prep("UPDATE repos SET big = big + ? WHERE id = ?", 3, 3),
	text("SELECT big, big + 1 FROM repos ORDER BY id"),
	// No base row: 0 affected rows, and no slot is created.
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 999"),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, 998),
	text("SELECT COUNT(*) FROM repos WHERE id >= 998"),
	// Reads in every position.
	text("SELECT downloads FROM repos WHERE id = 1"),
	prep("SELECT downloads, stars FROM repos WHERE id = ?", 2),
	text("SELECT * FROM repos ORDER BY id"),
	prep("SELECT * FROM repos WHERE id = ?", 3),
	text("SELECT r.* FROM repos r WHERE r.downloads > 10 ORDER BY r.id"),
	text("SELECT id, downloads + stars AS total, downloads * 2 FROM repos ORDER BY total DESC, id"),
	text("SELECT owner_id, SUM(downloads), MAX(stars), COUNT(*) FROM repos GROUP BY owner_id HAVING SUM(downloads) > 0 ORDER BY owner_id"),
	text("SELECT downloads, COUNT(*) FROM repos GROUP BY downloads ORDER BY downloads"),
	text("SELECT u.name, r.downloads FROM users u JOIN repos r ON r.owner_id = u.id AND r.downloads >= 5 ORDER BY u.name, r.id"),
	text("SELECT u.downloads, r.downloads FROM users u JOIN repos r ON r.id = u.id ORDER BY u.id"),
	text("SELECT name FROM repos WHERE downloads > (SELECT AVG(downloads) FROM repos) ORDER BY name"),
	text("SELECT name, (SELECT MAX(downloads) FROM repos r2 WHERE r2.owner_id = r.owner_id) AS best FROM repos r ORDER BY id"),
	text("SELECT x.d FROM (SELECT downloads AS d FROM repos) AS x ORDER BY x.d"),
	text("SELECT downloads FROM repos WHERE id = 1 FOR UPDATE"),
	text("SELECT name AS downloads FROM repos ORDER BY downloads"),
	text("SELECT SUM(downloads) FROM repos"),
	prep("SELECT id FROM repos WHERE downloads BETWEEN ? AND ? ORDER BY id", 1, 30),
	text("SELECT downloads FROM repos WHERE id = 1 UNION ALL SELECT downloads FROM users WHERE id = 1"),
	// Writes reading counters.
	text("UPDATE users u SET u.downloads = (SELECT r.downloads FROM repos r WHERE r.id = u.id)"),
	text("SELECT * FROM users ORDER BY id"),
	text("INSERT INTO users (id, name, downloads) SELECT id + 10, name, downloads FROM repos WHERE id <= 2"),
	text("SELECT * FROM users ORDER BY id"),
	// Transactions: own uncommitted increments are visible; rollback discards.
	text("BEGIN"),
	text("UPDATE repos SET downloads = downloads + 100 WHERE id = 1"),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 50, 1),
	text("SELECT downloads FROM repos WHERE id = 1"),
	text("ROLLBACK"),
	text("SELECT downloads FROM repos WHERE id = 1"),
	text("START TRANSACTION"),
	text("INSERT INTO repos (id, name) VALUES (5, 'epsilon')"),
	text("UPDATE repos SET downloads = downloads + 4 WHERE id = 5"),
	text("SELECT downloads FROM repos WHERE id = 5"),
	text("COMMIT"),
	text("UPDATE repos SET downloads = downloads + 4 WHERE id = 5"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	// Absolute writes, other WHEREs, deletes, replace, upserts.
	text("UPDATE repos SET downloads = downloads + 1 WHERE name = 'alpha'"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id IN (1, 2)"),
	text("UPDATE repos SET downloads = downloads + 1, name = 'alpha2' WHERE id = 1"),
	text("UPDATE repos SET downloads = 0 WHERE id = 2"),
	prep("UPDATE repos SET downloads = ? WHERE id = ?", 40, 3),
	text("UPDATE repos SET stars = owner_id WHERE id = 4"),
	text("UPDATE repos SET downloads = downloads * 2 WHERE downloads > 5"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 2"),
	text("UPDATE repos SET downloads = 7 WHERE downloads = 1"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	text("DELETE FROM repos WHERE id = 5"),
	text("INSERT INTO repos (id, name) VALUES (5, 'again')"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 5"),
	text("SELECT id, downloads FROM repos WHERE id = 5"),
	prep("DELETE FROM repos WHERE id = ?", 5),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 5"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 4"),
	text("REPLACE INTO repos (id, name, owner_id, downloads, stars) VALUES (4, 'delta2', 3, 1, 1)"),
	text("SELECT * FROM repos WHERE id = 4"),
	text("UPDATE repos SET downloads = downloads + 3 WHERE id = 4"),
	text("INSERT INTO repos (id, name, downloads) VALUES (4, 'x', 9) ON DUPLICATE KEY UPDATE downloads = VALUES(downloads)"),
	text("SELECT * FROM repos WHERE id = 4"),
	text("UPDATE repos SET downloads = downloads + 3 WHERE id = 4"),
	text("INSERT INTO repos (id, name, downloads) VALUES (4, 'x', 9) ON DUPLICATE KEY UPDATE downloads = downloads + 1"),
	text("SELECT * FROM repos WHERE id = 4"),
	// Writes whose rows are known only once they run fold every slotted
	// record of the table first.
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 1"),
	text("UPDATE repos SET stars = stars + 2 WHERE id = 2"),
	text("UPDATE repos r JOIN users u ON u.id = r.owner_id SET r.downloads = 11 WHERE u.id = 1"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 4"),
	text("INSERT INTO repos (id, name) SELECT id, name FROM users WHERE id = 4 ON DUPLICATE KEY UPDATE downloads = 1"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 2"),
	prep("INSERT INTO repos (id, name) VALUES (? + 0, 'x') ON DUPLICATE KEY UPDATE downloads = 3", 2),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 4"),
	text("DELETE r FROM repos r JOIN users u ON u.id = r.id WHERE u.id = 4"),
	text("INSERT INTO repos (id, name) VALUES (4, 'back')"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 4"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	// Errors are the server's.
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 'x'"),
	text("UPDATE repos SET nope = nope + 1 WHERE id = 1"),
	text("SELECT nope FROM repos"),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", nil, 1),
	text("INSERT INTO repos (id) VALUES (1)"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	// Warnings and errors of a guarded write in a transaction of the
	// proxy's own are the client's to read after it ended.
	text("SET SESSION sql_mode = ''"),
	text("UPDATE repos SET downloads = 99999999999 WHERE id = 2"),
	text("SHOW WARNINGS"),
	text("UPDATE repos SET downloads = -99999999999 WHERE id = 2"),
	text("show  warnings;"),
	text("SET SESSION sql_mode = DEFAULT"),
	text("UPDATE repos SET downloads = 99999999999 WHERE id = 2"),
	text("SHOW WARNINGS"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	// Common table expressions named like the ruled table.
	text("WITH repos AS (SELECT id, downloads FROM repos) SELECT downloads FROM repos WHERE id = 1"),
	text("WITH r AS (SELECT id, downloads FROM repos), repos AS (SELECT id, downloads * 2 AS downloads FROM r) SELECT id, downloads FROM repos ORDER BY id"),
	// A temporary table hides the ruled one until it is dropped.
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("CREATE TEMPORARY TABLE repos (id BIGINT NOT NULL PRIMARY KEY, downloads INT NOT NULL DEFAULT 0)"),
	text("INSERT INTO repos VALUES (1, 5)"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 2, 1),
	text("SELECT * FROM repos"),
	text("TRUNCATE TABLE repos"),
	text("DROP TEMPORARY TABLE repos"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	text("CREATE TEMPORARY TABLE repos (id INT)"),
	text("DROP TABLE repos"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	// Statements the parser does not take, with their clauses put back:
	// the totals land in variables, files and row aliases as directly.
	text("SELECT downloads INTO @d FROM repos WHERE id = 1"),
	text("SELECT @d"),
	text("SELECT downloads, stars FROM repos WHERE id = 2 INTO @d, @s"),
	text("SELECT @d, @s"),
	text("SELECT downloads FROM repos WHERE id = 1 FOR UPDATE INTO @d"),
	text("SELECT @d"),
	text("TABLE repos ORDER BY id"),
	text("INSERT INTO repos (id, name, downloads) VALUES (7, 'alias', 3) AS new ON DUPLICATE KEY UPDATE downloads = new.downloads + 1"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 7"),
	text("INSERT INTO repos (id, name, downloads) VALUES (7, 'alias', 3) AS new (i, n, d) ON DUPLICATE KEY UPDATE downloads = downloads + d"),
	text("SELECT id, downloads FROM repos WHERE id = 7"),
	text("DELETE FROM repos WHERE id = 7"),
	text("EXECUTE IMMEDIATE 'UPDATE repos SET downloads = downloads + 1 WHERE id = 1'"),
	text("EXECUTE IMMEDIATE 'SELECT downloads FROM repos WHERE id = 1'"),
	text("SELECT downloads FROM repos WHERE"),
	text("SELECT downloads FROM repos WHERE id = 1 INTO @nope, @d"),
	text("PREPARE rd FROM 'SELECT downloads FROM repos WHERE id = ?'"),
	text("SET @k = 1"),
	text("EXECUTE rd USING @k"),
	text("DEALLOCATE PREPARE rd"),
	// LOCK TABLES: the slot table is locked with the ruled table; while
	// locked, increments run on the base row and nothing opens a
	// transaction (which would release the locks).
	text("LOCK TABLES repos WRITE"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("SELECT downloads FROM repos WHERE id = 1"),
	text("UPDATE repos SET downloads = 5 WHERE id = 2"),
	text("SELECT id, downloads FROM repos ORDER BY id FOR UPDATE"),
	text("SELECT name FROM users WHERE id = 1"),
	text("UNLOCK TABLES"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("LOCK TABLES repos READ"),
	text("SELECT downloads FROM repos WHERE id = 1"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("UPDATE repos SET downloads = 3 WHERE id = 1"),
	text("LOCK TABLES repos AS r READ, repos WRITE"),
	text("SELECT r.downloads FROM repos AS r WHERE r.id = 1"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 1"),
	text("BEGIN"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("COMMIT"),
	text("SELECT id, downloads FROM repos ORDER BY id"),
	// Multi-statement queries mixing rewrites.
	multi("UPDATE repos SET downloads = downloads + 1 WHERE id = 1; SELECT downloads FROM repos WHERE id = 1; UPDATE repos SET downloads = downloads + 1 WHERE id = 404"),
	multi("SELECT downloads FROM repos WHERE id = 2; SELECT name FROM users WHERE id = 1"),
	multi("UPDATE repos SET downloads = 1 WHERE id = 3; SELECT nope; SELECT 1"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	// Reads through views of the ruled table: the definitions inlined.
	text("UPDATE repos SET downloads = downloads + 1 WHERE id IN (1, 2)"),
	text("SELECT * FROM repo_counts ORDER BY id"),
	text("SELECT downloads FROM repo_counts WHERE id = 1"),
	prep("SELECT d FROM top_repos WHERE id = ?", 1),
	text("SELECT v.name, v.downloads, u.name FROM users u JOIN repo_counts AS v ON v.id = u.id ORDER BY u.id"),
	text("SELECT SUM(v.downloads) FROM repo_counts v, users WHERE users.id = v.id"),
	text("SELECT name FROM repo_counts WHERE id = 2"),
	text("SELECT id FROM top_repos UNION SELECT id FROM repo_counts WHERE downloads > 100 ORDER BY id"),
	// Writes through a plain view: planned as writes of the table.
	text("UPDATE repo_counts SET downloads = downloads + 1 WHERE id = 1"),
	prep("UPDATE repo_counts SET downloads = downloads + ? WHERE id = ?", 2, 2),
	text("UPDATE repo_counts AS v SET v.downloads = 9 WHERE v.name = 'gamma'"),
	text("SELECT * FROM repo_counts ORDER BY id"),
	// READ COMMITTED: autocommit guarded writes run in a REPEATABLE READ
	// transaction of the proxy's own; in a transaction, writes that name
	// their rows by key lock those rows (a missing key: undone and run
	// again if its row appears), deletes run as usual.
	text("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id IN (1, 2, 3, 4)"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("UPDATE repos SET downloads = 40 WHERE name = 'beta'"),
	text("BEGIN"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 2"),
	text("UPDATE repos SET downloads = 7, name = 'beta2' WHERE id = 2 AND name = 'beta'"),
	prep("UPDATE repos SET stars = ? WHERE id IN (?, ?)", 9, 1, 77),
	text("UPDATE repos SET downloads = 0 WHERE id = 99"),
	text("UPDATE repos SET stars = 3, downloads = downloads + 1 WHERE name LIKE 'b%'"),
	prep("UPDATE repos SET stars = ? WHERE owner_id = ? AND downloads >= ?", 4, 1, 0),
	text("UPDATE repos SET downloads = 1 WHERE name = 'nobody'"),
	text("DELETE FROM repos WHERE name = 'nobody'"),
	text("SELECT id, downloads, stars, name FROM repos ORDER BY id"),
	text("COMMIT"),
	text("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"),
	text("UPDATE repos SET downloads = 8 WHERE id = 2"),
	text("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
	text("BEGIN"),
	text("UPDATE repos SET downloads = 6 WHERE name = 'beta2'"),
	text("COMMIT"),
	text("SELECT id, downloads, stars, name FROM repos ORDER BY id"),
	text("TRUNCATE TABLE repos"),
	text("INSERT INTO repos (id, name) VALUES (1, 'fresh')"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"),
	text("SELECT * FROM repos"),
}

func TestDifferential(t *testing.T) {
	variants := []struct {
		name    string
		caps    uint32
		session string
	}{
		{name: "default"},
		{name: "CLIENT_FOUND_ROWS", caps: gomysql.CLIENT_FOUND_ROWS},
		{name: "ANSI_QUOTES and NO_BACKSLASH_ESCAPES", session: "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES,NO_BACKSLASH_ESCAPES')"},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			setupDiffSchemas(t)
			p := startProxy(t, func(c *proxy.Config) {
				c.Rewriter = newRewriter(diffCatalog())
			})
			connect := func(addr, db string) *client.Conn {
				c, err := client.Connect(addr, testdb.User, testdb.Password, db, func(c *client.Conn) error {
					if v.caps != 0 {
						if err := c.SetCapability(v.caps); err != nil {
							return err
						}
					}
					return c.SetCapability(gomysql.CLIENT_MULTI_STATEMENTS)
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				if v.session != "" {
					if _, err := c.Execute(v.session); err != nil {
						t.Fatal(err)
					}
				}
				return c
			}
			direct := connect(testdb.Shared().Addr, plainSchema)
			proxied := connect(p.addr, ruledSchema)
			for i, st := range diffCorpus {
				want := runStep(direct, st)
				got := runStep(proxied, st)
				if got != want {
					t.Errorf("step %d %q %v:\n proxy:  %s\n direct: %s", i, st.sql, st.args, got, want)
				}
			}
			stats := p.srv.Stats()
			t.Logf("%d statements; proxy stats: %+v", len(diffCorpus), stats)
			if stats.RewrittenWrites == 0 || stats.RewrittenReads == 0 || stats.GuardedWrites == 0 {
				t.Fatalf("the corpus did not exercise every rewrite path: %+v", stats)
			}
			// No slot rows for keys without a base row.
			r, err := direct.Execute("SELECT COUNT(*) FROM " + ruledSchema + ".slotted_counters s WHERE NOT EXISTS (SELECT 1 FROM " + ruledSchema + ".repos r WHERE r.id = s.record_id)")
			if err != nil {
				t.Fatal(err)
			}
			if orphans, _ := r.GetString(0, 0); orphans != "0" {
				t.Fatalf("%s slot rows without a base row", orphans)
			}
		})
	}
}

// returningCorpus covers MariaDB's RETURNING (10.5+) on a ruled table:
// the writes are guarded (the slots folded first), so the clause returns
// the totals, and a REPLACE does not leave the old slots counting. MySQL has
// no RETURNING: the same error both ways.
var returningCorpus = []step{
	text("UPDATE repos SET downloads = downloads + 3 WHERE id = 2"),
	text("DELETE FROM repos WHERE id = 2 RETURNING id, downloads, stars"),
	text("UPDATE repos SET downloads = downloads + 1 WHERE id = 2"),
	text("INSERT INTO repos (id, name) VALUES (2, 'beta') RETURNING id, downloads"),
	text("UPDATE repos SET downloads = downloads + 3, stars = stars + 1 WHERE id = 2"),
	text("REPLACE INTO repos (id, name, downloads) VALUES (2, 'beta2', 1) RETURNING id, downloads, stars"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 2"),
	prep("DELETE FROM repos WHERE id = ? RETURNING downloads", 2),
	prep("INSERT INTO repos (id, name) VALUES (?, 'beta') RETURNING downloads", 2),
	text("UPDATE repos SET downloads = downloads + 2 WHERE id = 2"),
	text("SELECT id, downloads, stars FROM repos ORDER BY id"),
}

// TestDifferentialReturning runs returningCorpus through the differential
// harness, on a fresh connection per step so that one failure does not
// hide the next.
func TestDifferentialReturning(t *testing.T) {
	setupDiffSchemas(t)
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(diffCatalog()) })
	connect := func(addr, db string) *client.Conn {
		c, err := client.Connect(addr, testdb.User, testdb.Password, db)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for i, st := range returningCorpus {
		direct, proxied := connect(testdb.Shared().Addr, plainSchema), connect(p.addr, ruledSchema)
		want := runStep(direct, st)
		got := runStep(proxied, st)
		_, _ = direct.Close(), proxied.Close()
		if got != want {
			t.Errorf("step %d %q %v:\n proxy:  %s\n direct: %s", i, st.sql, st.args, got, want)
		}
	}
	if testdb.Shared().Dialect().Returning() {
		t.Logf("the server has RETURNING: the corpus ran on the guarded path")
	}
}

// runStep executes a step and renders everything observable about it.
func runStep(c *client.Conn, st step) string {
	if st.multi {
		var out []string
		_, err := c.ExecuteMultiple(st.sql, func(r *gomysql.Result, err error) {
			out = append(out, render(r, err))
		})
		if err != nil {
			out = append(out, render(nil, err))
		}
		return strings.Join(out, " | ")
	}
	r, err := c.Execute(st.sql, st.args...)
	return render(r, err)
}

func render(r *gomysql.Result, err error) string {
	if err != nil {
		if me, ok := err.(*gomysql.MyError); ok {
			return fmt.Sprintf("ERR %d %s", me.Code, me.State)
		}
		return "error: " + err.Error()
	}
	if r == nil {
		return "nil"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "affected=%d insert_id=%d warnings=%d trans=%v",
		r.AffectedRows, r.InsertId, r.Warnings, r.Status&gomysql.SERVER_STATUS_IN_TRANS != 0)
	if r.Resultset != nil && len(r.Fields) > 0 {
		b.WriteString(" cols=[")
		for i, f := range r.Fields {
			if i > 0 {
				b.WriteString(",")
			}
			b.Write(f.Name)
		}
		b.WriteString("] rows=")
		for _, row := range r.Values {
			b.WriteString("(")
			for i, v := range row {
				if i > 0 {
					b.WriteString(",")
				}
				if v.Value() == nil {
					b.WriteString("NULL")
				} else if bs, ok := v.Value().([]byte); ok {
					fmt.Fprintf(&b, "%q", bs)
				} else {
					fmt.Fprintf(&b, "%v", v.Value())
				}
			}
			b.WriteString(")")
		}
	}
	return b.String()
}
