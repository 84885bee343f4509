package proxy_test

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// Touch columns (a rule's touch: list) are written with the increments
// that assign them a time, in the same slotted upsert, and read as the
// latest of the base value and the slots. Through the proxy, every
// statement below must answer exactly as on a plain table: values, column
// types, affected rows, warnings and errors, across time zones, fraction
// rounding (MySQL rounds, MariaDB truncates), roll-ups and guarded writes.

const (
	touchPlain = "touch_plain"
	touchRuled = "touch_ruled"
)

var touchDDL = []string{
	"CREATE TABLE posts (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT '', views INT NOT NULL DEFAULT 0, likes INT NOT NULL DEFAULT 0, score INT NULL, " +
		"updated_at DATETIME NULL, edited_at DATETIME(6) NULL, seen_at TIMESTAMP(3) NULL)",
	"INSERT INTO posts (id, name, score, updated_at, edited_at, seen_at) VALUES (1, 'a', NULL, '2024-01-01 00:00:00', NULL, '2024-01-01 00:00:00'), " +
		"(2, 'b', 5, NULL, NULL, NULL), (3, 'c', NULL, '2020-01-01 00:00:00', '2020-01-01 00:00:00.5', '2020-01-01 00:00:00.25')",
}

const touchRule = "table: " + touchRuled + ".posts\nkey: id\ncounters: [views, likes, score]\ntouch: [updated_at, edited_at, seen_at]\nslots: 4\n"

// touchSetup creates both schemas, migrates the ruled one and returns its
// catalog as slotproxy serve would load it.
func touchSetup(t *testing.T) *rewrite.Catalog {
	t.Helper()
	cat := loadedSetup(t, touchPlain, touchRuled, touchDDL, touchRule)
	var got []string
	for _, c := range cat.Tables()[0].Counters {
		got = append(got, fmt.Sprintf("%s touch=%v timestamp=%v fsp=%d", c.Name, c.Touch, c.Timestamp, c.FSP))
	}
	want := []string{"views touch=false timestamp=false fsp=0", "likes touch=false timestamp=false fsp=0", "score touch=false timestamp=false fsp=0",
		"updated_at touch=true timestamp=false fsp=0", "edited_at touch=true timestamp=false fsp=6", "seen_at touch=true timestamp=true fsp=3"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("catalog columns:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	return cat
}

// loadedSetup creates the schemas plain and ruled with the same tables
// (ddl), migrates ruled for rule (rule files' texts, separated by lines of
// ---) and returns its
// catalog as slotproxy serve loads it: a differential test's setup with
// the real catalog.
func loadedSetup(t testing.TB, plain, ruled string, ddl []string, rule string) *rewrite.Catalog {
	t.Helper()
	db := testdb.Shared()
	for _, schema := range []string{plain, ruled} {
		stmts := append([]string{"DROP DATABASE IF EXISTS " + schema, "CREATE DATABASE " + schema, "USE " + schema}, ddl...)
		if err := db.Exec(stmts...); err != nil {
			t.Fatal(err)
		}
	}
	admin := touchAdmin(t)
	if err := catalog.Migrate(t.Context(), admin, ruleSet(t, rule), "slotted_counters", io.Discard); err != nil {
		t.Fatal(err)
	}
	return loadCatalog(t, rule)
}

// ruleSet parses rule files' texts, separated by lines of ---.
func ruleSet(t testing.TB, rule string) *rules.Set {
	t.Helper()
	var rs []*rules.Rule
	for i, text := range strings.Split(rule, "\n---\n") {
		r, err := rules.Parse(fmt.Sprintf("rule%d.yaml", i+1), []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	set, err := rules.NewSet(rs...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// loadCatalog loads the catalog of rule (see ruleSet) as serve does, at
// start or at a reload: new tables each time.
func loadCatalog(t testing.TB, rule string) *rewrite.Catalog {
	t.Helper()
	cat, err := catalog.Load(t.Context(), touchAdmin(t), ruleSet(t, rule), "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// runDifferential runs corpus directly on plain and through a proxy with
// cat on ruled, comparing everything a client sees (renderTyped); a step
// touchRollup folds every slot as roll-up does. It returns the proxy's
// stats and the records roll-up folded.
func runDifferential(t *testing.T, cat *rewrite.Catalog, plain, ruled string, corpus []step) (proxy.StatsSnapshot, int) {
	t.Helper()
	return runDifferentialWith(t, cat, plain, ruled, corpus, nil)
}

// runDifferentialWith is runDifferential with before run on the proxy
// before it serves.
func runDifferentialWith(t *testing.T, cat *rewrite.Catalog, plain, ruled string, corpus []step, before func(*proxy.Server)) (proxy.StatsSnapshot, int) {
	t.Helper()
	p := startProxyFull(t, func(c *proxy.Config) {
		c.Rewriter = newRewriter(cat)
	}, before)
	connect := func(addr, db string) *client.Conn {
		c, err := client.Connect(addr, testdb.User, testdb.Password, db, func(c *client.Conn) error {
			return c.SetCapability(gomysql.CLIENT_MULTI_STATEMENTS)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var directs, proxieds []*client.Conn
	admin := touchAdmin(t)
	var roller rollup.Roller
	folded := 0
	for i, st := range corpus {
		if st.sql == touchRollup {
			s, err := roller.Once(t.Context(), admin, cat, rollup.Options{})
			if err != nil {
				t.Fatalf("step %d: roll-up: %v", i, err)
			}
			folded += s.Folds
			continue
		}
		for len(directs) <= st.conn {
			directs = append(directs, connect(testdb.Shared().Addr, plain))
			proxieds = append(proxieds, connect(p.addr, ruled))
		}
		direct, proxied := directs[st.conn], proxieds[st.conn]
		// Messages name the schema (1690's do): the plain one directly.
		var want, got string
		if st.multi {
			want = strings.ReplaceAll(runMultiTyped(direct, st.sql), plain, ruled)
			got = runMultiTyped(proxied, st.sql)
		} else {
			want = strings.ReplaceAll(renderTyped(direct.Execute(st.sql, st.args...)), plain, ruled)
			got = renderTyped(proxied.Execute(st.sql, st.args...))
		}
		if got != want {
			t.Errorf("step %d [c%d] %q %v:\n proxy:  %s\n direct: %s", i, st.conn, st.sql, st.args, got, want)
		}
	}
	return p.srv.Stats(), folded
}

func touchAdmin(t testing.TB) *client.Conn {
	t.Helper()
	db := testdb.Shared()
	c, err := client.Connect(db.Addr, db.RootUser, db.RootPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// touchRollup is a step that folds every slot of the ruled table into its
// base rows, as roll-up does between statements.
const touchRollup = "-- roll-up"

// touchCorpus assigns each touch column of each row times that only move
// forward, as applications do (see TestTouchGreatest for the other case).
var touchCorpus = []step{
	// NOW() is fixed by SET TIMESTAMP on both connections: 2024-06-01
	// 12:00:00.654321 UTC.
	text("SET time_zone = '+00:00'"),
	text("SET TIMESTAMP = 1717243200.654321"),
	// The current time, at every precision, for two rows at once.
	text("UPDATE posts SET likes = likes + 1, updated_at = NOW(), edited_at = NOW(6), seen_at = CURRENT_TIMESTAMP(3) WHERE id IN (1, 2)"),
	text("SELECT id, likes, updated_at, edited_at, seen_at FROM posts ORDER BY id"),
	// Laravel, Sequelize, Rails: a placeholder, a literal, fractions
	// (MySQL rounds them to the column's precision, MariaDB truncates).
	prep("update `posts` set `views` = `views` + 1, `posts`.`updated_at` = ? where `id` = ?", "2025-01-01 10:00:00", 1),
	text("UPDATE `posts` SET `views`=`views`+ 1,`likes`=`likes`+ 2,`updated_at`='2025-01-01 10:00:01' WHERE `id` = 1"),
	text("UPDATE `posts` SET `views` = COALESCE(`views`, 0) + 1, `edited_at` = '2025-01-01 10:00:01.123456' WHERE `posts`.`id` = 2"),
	text("UPDATE posts SET views = views + 1, updated_at = '2025-01-01 10:00:02.5', edited_at = '2025-01-01 10:00:02.1234567', seen_at = '2025-01-01 10:00:02.9996' WHERE id = 2"),
	text("SELECT * FROM posts ORDER BY id"),
	prep("SELECT id, views, updated_at, edited_at, seen_at FROM posts WHERE id = ?", 2),
	// A later time than the base value (row 3's times are in 2020).
	text("UPDATE posts SET views = views + 1, updated_at = '2026-01-01 00:00:00', seen_at = '2026-01-01 00:00:00' WHERE id = 3"),
	text("SELECT id, views, updated_at, seen_at FROM posts WHERE id = 3"),
	text(touchRollup),
	text("SELECT * FROM posts ORDER BY id"),
	// TIMESTAMP columns are instants: written in one zone, read in
	// another, folded, read again.
	text("SET time_zone = '+05:30'"),
	text("UPDATE posts SET views = views + 1, seen_at = '2025-06-01 12:00:00.125' WHERE id = 1"),
	text("SELECT id, seen_at FROM posts ORDER BY id"),
	text("SET time_zone = '-07:00'"),
	text("SELECT id, seen_at FROM posts ORDER BY id"),
	text(touchRollup),
	text("SELECT id, seen_at FROM posts ORDER BY id"),
	text("SET time_zone = '+00:00'"),
	// Reads of touch columns in conditions, order and aggregates.
	text("SELECT id FROM posts WHERE updated_at > '2025-01-01 10:00:00' ORDER BY updated_at DESC, id"),
	text("SELECT MAX(edited_at), MIN(seen_at), COUNT(updated_at) FROM posts"),
	// Not a time the slotted increment takes: the statement runs on the
	// base row after a fold, with the server's own error or warning.
	text("UPDATE posts SET views = views + 1, updated_at = '2024-02-30 10:00:00' WHERE id = 1"),
	text("UPDATE posts SET views = views + 1, updated_at = '2025-02-01' WHERE id = 1"),
	prep("UPDATE posts SET views = views + ?, updated_at = ? WHERE id = ?", 1, nil, 2),
	prep("UPDATE posts SET views = views + ?, updated_at = ? WHERE id = ?", 1, "not a time", 2),
	prep("UPDATE posts SET views = views + ?, updated_at = ? WHERE id = ?", 0, "2025-03-01 00:00:00", 2),
	text("UPDATE posts SET views = views + 1, seen_at = '2040-01-01 00:00:00' WHERE id = 1"),
	text("SELECT * FROM posts ORDER BY id"),
	// Non-strict: the server stores what it can and warns; a later time
	// then replaces the zero date.
	text("SET SESSION sql_mode = ''"),
	text("UPDATE posts SET views = views + 1, updated_at = '2024-02-30 10:00:00' WHERE id = 1"),
	text("SHOW WARNINGS"),
	text("SELECT * FROM posts ORDER BY id"),
	text("SET SESSION sql_mode = DEFAULT"),
	text("UPDATE posts SET views = views + 1, updated_at = '2025-07-01 00:00:00' WHERE id = 1"),
	text("SELECT id, updated_at FROM posts WHERE id = 1"),
	// Writes of a touch column alone, with an older time, after
	// increments: a guarded write folds first.
	text("UPDATE posts SET views = views + 1, updated_at = '2027-01-01 00:00:00' WHERE id = 2"),
	text("UPDATE posts SET updated_at = '2001-01-01 00:00:00' WHERE id = 2"),
	text("SELECT id, views, updated_at FROM posts WHERE id = 2"),
	text("UPDATE posts SET updated_at = NULL, edited_at = NULL WHERE id = 1"),
	text("UPDATE posts SET likes = likes + 1, edited_at = '2025-05-05 05:05:05' WHERE id = 1"),
	text("SELECT * FROM posts ORDER BY id"),
	// A NULL counter: c + 1 stays NULL, COALESCE(c, 0) + 1 sets it; both
	// run on the base row (with their touch columns), as written.
	text("UPDATE posts SET score = score + 1 WHERE id = 1"),
	prep("UPDATE posts SET score = score + ?, updated_at = ? WHERE id = ?", 1, "2025-08-01 00:00:00", 1),
	text("UPDATE posts SET score = COALESCE(score, 0) + 2 WHERE id = 3"),
	text("UPDATE posts SET score = IFNULL(score, 0) + 3, updated_at = '2026-02-01 00:00:00' WHERE id IN (1, 2, 3)"),
	text("SELECT id, score, updated_at FROM posts ORDER BY id"),
	text("UPDATE posts SET score = score + 1 WHERE id = 2"),
	text("SELECT id, score FROM posts ORDER BY id"),
	// Rows that do not exist and rows a condition excludes.
	text("UPDATE posts SET views = views + 1, updated_at = '2028-01-01 00:00:00' WHERE id = 99"),
	text("UPDATE posts SET views = views + 1, updated_at = '2028-01-01 00:00:00' WHERE id = 1 AND name = 'zzz'"),
	// Transactions: own times are visible, a rollback discards them.
	text("BEGIN"),
	text("UPDATE posts SET views = views + 1, updated_at = '2029-01-01 00:00:00' WHERE id = 1"),
	text("SELECT id, views, updated_at FROM posts WHERE id = 1"),
	text("ROLLBACK"),
	text("SELECT * FROM posts ORDER BY id"),
	text(touchRollup),
	text("SELECT * FROM posts ORDER BY id"),
	prep("SELECT * FROM posts WHERE id IN (?, ?, ?) ORDER BY id", 1, 2, 3),
}

func TestTouchDifferential(t *testing.T) {
	cat := touchSetup(t)
	stats, folded := runDifferential(t, cat, touchPlain, touchRuled, touchCorpus)
	t.Logf("%d statements; %d records folded by roll-up; proxy stats: %+v", len(touchCorpus), folded, stats)
	if stats.RewrittenWrites < 8 || stats.GuardedWrites == 0 || folded == 0 {
		t.Fatalf("the corpus did not take the slotted path, guards and roll-up: %+v, %d folds", stats, folded)
	}
}

// TestTouchGreatest: a touch column keeps the greatest time its
// increments assigned, not the last one (a documented difference: times
// written with increments are expected to move forward). A write of the
// column alone is exact, as a guarded write.
func TestTouchGreatest(t *testing.T) {
	cat := touchSetup(t)
	p := startProxy(t, func(c *proxy.Config) {
		c.Rewriter = newRewriter(cat)
	})
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, touchRuled)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func() string {
		r, err := c.Execute("SELECT views, updated_at FROM posts WHERE id = 2")
		if err != nil {
			t.Fatal(err)
		}
		v, _ := r.GetString(0, 0)
		u, _ := r.GetString(0, 1)
		return v + " " + u
	}
	for _, q := range []string{
		"UPDATE posts SET views = views + 1, updated_at = '2025-01-02 00:00:00' WHERE id = 2",
		"UPDATE posts SET views = views + 1, updated_at = '2025-01-01 00:00:00' WHERE id = 2",
	} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(); got != "2 2025-01-02 00:00:00" {
		t.Errorf("after a later then an earlier time: %q, want the later one", got)
	}
	if _, err := c.Execute("UPDATE posts SET updated_at = '2020-01-01 00:00:00' WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "2 2020-01-01 00:00:00" {
		t.Errorf("after a write of the column alone: %q, want it exactly", got)
	}
}

// runMultiTyped runs a multi-statement query and renders each result with
// renderTyped.
func runMultiTyped(c *client.Conn, sql string) string {
	var out []string
	_, err := c.ExecuteMultiple(sql, func(r *gomysql.Result, err error) {
		out = append(out, renderTyped(r, err))
	})
	if err != nil {
		out = append(out, renderTyped(nil, err))
	}
	return strings.Join(out, " | ")
}

// renderTyped is render with each column's type and decimals, which
// drivers use to decode values (a TIMESTAMP must stay a TIMESTAMP).
func renderTyped(r *gomysql.Result, err error) string {
	s := render(r, err)
	if err != nil || r == nil || r.Resultset == nil {
		return s
	}
	var b strings.Builder
	b.WriteString(s)
	b.WriteString(" types=")
	for _, f := range r.Fields {
		fmt.Fprintf(&b, "%d/%d/%d ", f.Type, f.Decimal, f.Flag&(gomysql.UNSIGNED_FLAG|gomysql.BINARY_FLAG))
	}
	return b.String()
}
