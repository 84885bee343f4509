package catalog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"go.uber.org/goleak"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testcerts"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// caFile and untrustedCAFile are PEM files of the CA that signed the
// test MariaDB's TLS certificate and of an unrelated CA.
var caFile, untrustedCAFile string

func TestMain(m *testing.M) {
	certs, err := testcerts.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "slotproxy-catalog-certs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	ca, cert, key, err := certs.WriteFiles(dir)
	if err == nil {
		caFile, untrustedCAFile = ca, filepath.Join(dir, "untrusted-ca.pem")
		err = os.WriteFile(untrustedCAFile, certs.UntrustedCA.CertPEM, 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	code := testdb.Run(m, testdb.Options{ExtraArgs: []string{
		"--ssl-ca=" + ca, "--ssl-cert=" + cert, "--ssl-key=" + key,
	}}, testdb.Setup)
	os.RemoveAll(dir)
	os.Exit(code)
}

// adminConfig is a configuration that reaches the shared MariaDB as root.
func adminConfig() *config.Config {
	db := testdb.Shared()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:1"
	cfg.Backend.Address = db.Addr
	cfg.Admin = config.Admin{User: db.RootUser, Password: db.RootPassword}
	return cfg
}

// connect opens an admin connection, closed when the test ends.
func connect(t *testing.T) *client.Conn {
	t.Helper()
	conn, err := catalog.Connect(t.Context(), adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

var nonWord = regexp.MustCompile(`\W+`)

// newSchema creates a fresh schema for the test, runs stmts in it and
// returns its name.
func newSchema(t *testing.T, stmts ...string) string {
	t.Helper()
	name := "cat_" + strings.ToLower(nonWord.ReplaceAllString(t.Name(), "_"))
	if len(name) > 64 {
		name = name[:64]
	}
	all := []string{"DROP DATABASE IF EXISTS `" + name + "`", "CREATE DATABASE `" + name + "`", "USE `" + name + "`"}
	if err := testdb.Shared().Exec(append(all, stmts...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testdb.Shared().Exec("DROP DATABASE IF EXISTS `" + name + "`") })
	return name
}

// ruleSet parses rule files, given as name → content with SCHEMA standing
// for schema.
func ruleSet(t *testing.T, schema string, files ...string) *rules.Set {
	t.Helper()
	var rs []*rules.Rule
	for i := 0; i+1 < len(files); i += 2 {
		r, err := rules.Parse(files[i], []byte(strings.ReplaceAll(files[i+1], "SCHEMA", schema)))
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

const reposTable = `CREATE TABLE repos (
  id BIGINT NOT NULL PRIMARY KEY,
  name VARCHAR(100) NOT NULL DEFAULT '',
  Downloads BIGINT NOT NULL DEFAULT 0,
  stars BIGINT UNSIGNED NOT NULL DEFAULT 0
)`

const reposRule = "# repos\ntable: SCHEMA.repos\nkey: id\ncounters: [downloads, stars]\n"

// migrate runs Migrate and returns what it printed.
func migrate(t *testing.T, conn *client.Conn, set *rules.Set) string {
	t.Helper()
	var out bytes.Buffer
	if err := catalog.Migrate(t.Context(), conn, set, config.DefaultSlotsTable, &out); err != nil {
		t.Fatalf("Migrate: %v\noutput:\n%s", err, out.String())
	}
	return out.String()
}

func TestMigrateIdempotent(t *testing.T) {
	s := newSchema(t, reposTable)
	conn := connect(t)
	set := ruleSet(t, s, "rules/repos.yaml", reposRule)

	first := migrate(t, conn, set)
	want := strings.Join(catalog.DDL(s, "slotted_counters"), ";\n\n") + ";\n\n" +
		"-- record type 1: " + s + ".repos.downloads\n" +
		"-- record type 2: " + s + ".repos.stars\n"
	if first != want {
		t.Errorf("first Migrate printed:\n%s\nwant:\n%s", first, want)
	}
	for _, ddl := range []string{
		"CREATE TABLE IF NOT EXISTS `" + s + "`.`slotted_counters` (",
		"CREATE TABLE IF NOT EXISTS `" + s + "`.`slotproxy_record_types` (",
		"PRIMARY KEY (`record_type`, `record_id`, `slot`)",
		"UNIQUE KEY `table_column` (`table_name`, `column_name`)",
	} {
		if !strings.Contains(first, ddl) {
			t.Errorf("Migrate output lacks %q", ddl)
		}
	}
	if second := migrate(t, conn, set); second != first {
		t.Errorf("second Migrate printed:\n%s\nwant the same as the first:\n%s", second, first)
	}
	if _, err := catalog.Load(t.Context(), conn, set, "slotted_counters"); err != nil {
		t.Errorf("Load after Migrate: %v", err)
	}
	// The slot table works as the rewriter expects.
	if err := testdb.Shared().Exec("INSERT INTO `" + s + "`.slotted_counters (record_type, slot, count, record_id) VALUES (1, 42, 5, 7) " +
		"ON DUPLICATE KEY UPDATE count = count + VALUES(count)"); err != nil {
		t.Error(err)
	}
}

func TestMigrateCustomSlotsTable(t *testing.T) {
	s := newSchema(t, reposTable)
	conn := connect(t)
	set := ruleSet(t, s, "rules/repos.yaml", reposRule)
	var out bytes.Buffer
	if err := catalog.Migrate(t.Context(), conn, set, "my slots", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "CREATE TABLE IF NOT EXISTS `"+s+"`.`my slots` (") {
		t.Errorf("Migrate output lacks the custom slot table:\n%s", out.String())
	}
	cat, err := catalog.Load(t.Context(), conn, set, "my slots")
	if err != nil {
		t.Fatal(err)
	}
	if got := cat.Tables()[0].SlotsTable; got != "my slots" {
		t.Errorf("SlotsTable = %q", got)
	}
	// With the default name the slot table is missing.
	if _, err := catalog.Load(t.Context(), conn, set, "slotted_counters"); err == nil || !strings.Contains(err.Error(), "run slotproxy migrate") {
		t.Errorf("Load with another slot table name = %v, want a missing slot table", err)
	}
}

func TestLoad(t *testing.T) {
	s := newSchema(t, reposTable,
		"CREATE TABLE Pages (page_id INT UNSIGNED NOT NULL, views MEDIUMINT NOT NULL, title TEXT, PRIMARY KEY (page_id))",
		"CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(10), downloads INT)",
		"CREATE TABLE tags (a INT, b INT, PRIMARY KEY (a, b))",
		"CREATE VIEW popular AS SELECT id, downloads FROM users",
		"CREATE VIEW repo_names AS SELECT id, name FROM repos",
		"CREATE VIEW named AS SELECT n.id, n.name FROM repo_names n WHERE n.id > 0",
		"CREATE VIEW repo_counts AS SELECT id, downloads FROM repos",
		"CREATE VIEW renamed (a, b) AS SELECT id, downloads FROM repos",
	)
	conn := connect(t)
	set := ruleSet(t, s,
		"rules/repos.yaml", reposRule,
		"rules/pages.yaml", "table: SCHEMA.pages\nkey: PAGE_ID\ncounters: [Views]\nslots: 16\nmode: shadow\n")
	migrate(t, conn, set)

	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	got := cat.Tables()
	want := []*rewrite.Table{{
		Schema: s, Name: "Pages", Key: "page_id",
		Columns:    []string{"page_id", "views", "title"},
		Counters:   []rewrite.Counter{{Name: "views", RecordType: 1, Min: "-8388608", Max: "8388607"}},
		SlotsTable: "slotted_counters", Slots: 16, Shadow: true,
		NullDefault: []string{"title"},
		Inserted: rewrite.Inserted{Required: []string{"page_id", "views"},
			IntRanges: map[string][2]string{"page_id": {"0", "4294967295"}, "views": {"-8388608", "8388607"}}},
	}, {
		Schema: s, Name: "repos", Key: "id",
		Columns: []string{"id", "name", "Downloads", "stars"},
		Counters: []rewrite.Counter{{Name: "Downloads", RecordType: 2, Min: "-9223372036854775808", Max: "9223372036854775807"},
			{Name: "stars", RecordType: 3, Unsigned: true, Min: "0", Max: "18446744073709551615"}},
		SlotsTable: "slotted_counters", Slots: 100,
		Inserted: rewrite.Inserted{Required: []string{"id"}, IntRanges: map[string][2]string{"id": {"-9223372036854775808", "9223372036854775807"},
			"downloads": {"-9223372036854775808", "9223372036854775807"}, "stars": {"0", "18446744073709551615"}},
			StrLens: map[string]int{"name": 100}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load tables:\n got %s\nwant %s", dump(got), dump(want))
	}

	rw := catalog.NewRewriter(cat, testdb.Shared().Version)
	sess := rewrite.Session{DB: s}
	for _, tc := range []struct{ sql, want string }{
		{"UPDATE repos SET downloads = downloads + 1 WHERE id = 1",
			"INSERT INTO `" + s + "`.`slotted_counters` (`record_type`, `slot`, `count`, `record_id`) SELECT 2, "},
		// users is known to have a downloads column too, so the reference
		// is ambiguous and left to the server.
		{"SELECT downloads FROM repos, users", "pass-through: "},
		// So is the view.
		{"SELECT (SELECT downloads FROM popular LIMIT 1) FROM repos", "pass-through: "},
		{"SELECT 1", "pass-through: "},
		// Writes through views that read a ruled table (directly, or
		// through another view) are refused; other views' are not.
		{"UPDATE repo_names SET name = 'x' WHERE id = 1", "pass-through: "},
		{"UPDATE repo_names SET id = 9 WHERE id = 1", "guard: SELECT `repo_names`.`id`, ISNULL(`repo_names`.`id`) + ISNULL(`repo_names`.`name`) + ISNULL(`repo_names`.`Downloads`) + ISNULL(`repo_names`.`stars`) FROM `" + s + "`.`repos` AS `repo_names` WHERE (id = 1) FOR UPDATE"},
		{"DELETE FROM named WHERE id = 1", "refused: rule " + s + ".repos: it writes through view " + s + ".named"},
		{"INSERT INTO repo_names (id, name) VALUES (5, 'x')", "refused: "},
		{"UPDATE popular SET downloads = 5 WHERE id = 1", "pass-through: "},
		{"SELECT name FROM repo_names WHERE id = 1", "pass-through: "},
		// Reads through a view of counters get the view's definition (as
		// the server stores it) inlined, its counters read as totals.
		{"SELECT downloads FROM repo_counts WHERE id = 1", "SELECT downloads FROM (select "},
		// An UPDATE through a plain view is an UPDATE of the table: this
		// increment is slotted; one that names a column the view does not
		// have is refused.
		{"UPDATE repo_counts SET downloads = downloads + 1 WHERE id = 1", "INSERT INTO `" + s + "`.`slotted_counters`"},
		{"UPDATE repo_counts SET stars = 0 WHERE id = 1", "refused: rule " + s + ".repos: it writes through view"},
	} {
		if got := rewrite.Explain(rw.Rewrite(tc.sql, sess)); !strings.HasPrefix(got, tc.want) {
			t.Errorf("explain %q:\n%s\nwant it to start with %q", tc.sql, got, tc.want)
		}
	}
	if got := rewrite.Explain(rw.Rewrite("SELECT downloads FROM repo_counts WHERE id = 1", sess)); !strings.Contains(got, "slotted_counters") {
		t.Errorf("a read through a view of counters should read the slots:\n%s", got)
	}
	// A view with a column list of its own: MariaDB stores the names as
	// the definition's aliases (inlined), MySQL does not (read as written).
	if got := rewrite.Explain(rw.Rewrite("SELECT b FROM renamed WHERE a = 1", sess)); !strings.HasPrefix(got, "pass-through: ") &&
		!strings.Contains(got, "AS `b` from") {
		t.Errorf("a view with a column list was inlined under other names:\n%s", got)
	}
	// The increment writes the record type the registry gave downloads.
	if got := rewrite.Explain(rw.Rewrite("UPDATE repos SET downloads = downloads + 1 WHERE id = 1", sess)); !strings.Contains(got, "`record_id`) SELECT 2, ") {
		t.Errorf("the upsert should write record type 2, got:\n%s", got)
	}
}

func dump(ts []*rewrite.Table) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "\n  %+v", *t)
	}
	return b.String()
}

// recordTypes returns "table.column" → record type for the catalog's
// counters.
func recordTypes(cat *rewrite.Catalog) map[string]int {
	out := map[string]int{}
	for _, t := range cat.Tables() {
		for _, c := range t.Counters {
			out[t.Name+"."+c.Name] = c.RecordType
		}
	}
	return out
}

// TestLoadNullDefaults: the columns an INSERT that leaves them out sets to
// NULL, on which an upsert's or REPLACE's guard need not look for a
// conflicting row. A string default 'NULL' is not one (MariaDB shows it
// quoted, MySQL as the bare word), nor a NOT NULL or generated column, nor
// any column of a table an INSERT trigger could fill.
func TestLoadNullDefaults(t *testing.T) {
	s := newSchema(t,
		"CREATE TABLE a (id INT PRIMARY KEY, n VARCHAR(20) NULL, m VARCHAR(20) DEFAULT NULL, q VARCHAR(20) NULL DEFAULT 'NULL', "+
			"x VARCHAR(20) DEFAULT 'x', z INT NOT NULL, g BIGINT AS (id * 2), c INT NOT NULL DEFAULT 0, UNIQUE KEY (n), UNIQUE KEY (q))",
		"CREATE TABLE b (id INT PRIMARY KEY, n VARCHAR(20) NULL, c INT NOT NULL DEFAULT 0, UNIQUE KEY (n))",
		"CREATE TRIGGER b_name BEFORE INSERT ON b FOR EACH ROW SET NEW.n = COALESCE(NEW.n, 'named')",
	)
	conn := connect(t)
	set := ruleSet(t, s,
		"rules/a.yaml", "table: SCHEMA.a\nkey: id\ncounters: [c]\n",
		"rules/b.yaml", "table: SCHEMA.b\nkey: id\ncounters: [c]\n")
	migrate(t, conn, set)
	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, tb := range cat.Tables() {
		got[tb.Name] = tb.NullDefault
	}
	if want := []string{"n", "m"}; !reflect.DeepEqual(got["a"], want) {
		t.Errorf("a: NullDefault %q, want %q", got["a"], want)
	}
	if got["b"] != nil {
		t.Errorf("b (an INSERT trigger): NullDefault %q, want none", got["b"])
	}
	for _, tb := range cat.Tables() {
		in := tb.Inserted
		switch tb.Name {
		case "a":
			// id and z must be named; n and x are strings of 20; c has its range.
			if !reflect.DeepEqual(in.Required, []string{"id", "z"}) || in.StrLens["n"] != 20 || in.StrLens["x"] != 20 || in.Trigger ||
				in.IntRanges["c"] != [2]string{"-2147483648", "2147483647"} || in.KeyAutoIncrement {
				t.Errorf("a: Inserted %+v", in)
			}
			if _, ok := in.IntRanges["g"]; ok {
				t.Errorf("a: generated column g in IntRanges %v", in.IntRanges)
			}
		case "b":
			if !in.Trigger {
				t.Errorf("b: Inserted %+v, want its INSERT trigger", in)
			}
		}
	}
}

func TestRecordTypesStable(t *testing.T) {
	s := newSchema(t, reposTable, "CREATE TABLE pages (id INT PRIMARY KEY, views INT, likes INT)")
	conn := connect(t)
	// Registered by Migrate in rule order: pages before repos.
	set := ruleSet(t, s, "rules/repos.yaml", "table: SCHEMA.repos\nkey: id\ncounters: [stars]\n",
		"rules/pages.yaml", "table: SCHEMA.pages\nkey: id\ncounters: [views]\n")
	migrate(t, conn, set)
	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"pages.views": 1, "repos.stars": 2}
	if got := recordTypes(cat); !reflect.DeepEqual(got, want) {
		t.Fatalf("record types after migrate = %v, want %v", got, want)
	}

	// A second Load, on a new connection (a restart), sees the same.
	cat, err = catalog.Load(t.Context(), connect(t), set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	if got := recordTypes(cat); !reflect.DeepEqual(got, want) {
		t.Errorf("record types on the second Load = %v, want %v", got, want)
	}

	// New counters, written in another case and order: Load registers the
	// new ones without a migrate, in rule order ("REPOS" sorts before
	// "pages"), and leaves the old ones alone.
	set = ruleSet(t, s, "rules/repos.yaml", "table: SCHEMA.REPOS\nkey: ID\ncounters: [DOWNLOADS, Stars]\n",
		"rules/pages.yaml", "table: SCHEMA.pages\nkey: id\ncounters: [likes, views]\n")
	cat, err = catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]int{"pages.views": 1, "repos.stars": 2, "repos.Downloads": 3, "pages.likes": 4}
	if got := recordTypes(cat); !reflect.DeepEqual(got, want) {
		t.Errorf("record types after adding counters = %v, want %v", got, want)
	}
	// Names are registered in lower case.
	var out bytes.Buffer
	if err := catalog.Migrate(t.Context(), conn, set, "slotted_counters", &out); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"-- record type 3: " + s + ".REPOS.DOWNLOADS", "-- record type 2: " + s + ".REPOS.Stars", "-- record type 4: " + s + ".pages.likes"} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("Migrate output lacks %q:\n%s", line, out.String())
		}
	}
	res, err := conn.Execute("SELECT GROUP_CONCAT(record_type, ':', table_name, '.', column_name ORDER BY record_type) FROM `" + s + "`.slotproxy_record_types")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if got, _ := res.GetString(0, 0); got != "1:pages.views,2:repos.stars,3:repos.downloads,4:pages.likes" {
		t.Errorf("registry holds %s", got)
	}
}

// TestRecordTypesConcurrent loads from several connections at once, as
// several proxies starting together do: they must agree.
func TestRecordTypesConcurrent(t *testing.T) {
	s := newSchema(t, reposTable)
	conn := connect(t)
	set := ruleSet(t, s, "rules/repos.yaml", reposRule)
	// Create the tables only; Load registers.
	for _, ddl := range catalog.DDL(s, "slotted_counters") {
		if err := testdb.Shared().Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	const n = 8
	results := make([]map[string]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := catalog.Connect(context.Background(), adminConfig())
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			cat, err := catalog.Load(context.Background(), c, set, "slotted_counters")
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = recordTypes(cat)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Load %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(results[i], results[0]) {
			t.Errorf("Load %d saw %v, Load 0 saw %v", i, results[i], results[0])
		}
	}
	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	if got := recordTypes(cat); !reflect.DeepEqual(got, results[0]) {
		t.Errorf("later Load = %v, want %v", got, results[0])
	}
}

// TestRecordTypesRetried: a registration that loses a deadlock (on a
// cluster, a certification failure: the same 1213) against another
// registrar is retried, and agrees with what the other one registered.
// Here the other registrar is a transaction that holds one of the pairs,
// then asks for the other, which the registration holds: InnoDB ends the
// lighter transaction, the registration's.
func TestRecordTypesRetried(t *testing.T) {
	s := newSchema(t, reposTable, "CREATE TABLE ballast (id INT PRIMARY KEY)")
	set := ruleSet(t, s, "rules/repos.yaml", reposRule)
	for _, ddl := range catalog.DDL(s, "slotted_counters") {
		if err := testdb.Shared().Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	other := connect(t)
	registry := "`" + s + "`." + catalog.RecordTypesTable
	for _, q := range []string{"BEGIN",
		"INSERT INTO `" + s + "`.ballast SELECT seq FROM (WITH RECURSIVE r (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM r WHERE seq < 500) SELECT seq FROM r) AS x",
		"INSERT INTO " + registry + " (table_name, column_name) VALUES ('repos', 'stars')"} {
		if _, err := other.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		types map[string]int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, err := catalog.Connect(context.Background(), adminConfig())
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		cat, err := catalog.Load(context.Background(), c, set, "slotted_counters")
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{types: recordTypes(cat)}
	}()
	// The registration inserts (repos, downloads), then waits for (repos,
	// stars); the other transaction now asks for (repos, downloads).
	waitForLockWait(t, other)
	if _, err := other.Execute("INSERT INTO " + registry + " (table_name, column_name) VALUES ('repos', 'downloads')"); err != nil {
		t.Fatalf("the other registrar lost the deadlock: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the retry waits for the other registrar again
	if _, err := other.Execute("COMMIT"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Load after a deadlock in registration: %v", r.err)
	}
	// The other registrar's numbers: stars 1, and downloads after the
	// AUTO_INCREMENT values the lost attempt burnt.
	res, err := other.Execute("SELECT record_type FROM " + registry + " WHERE table_name = 'repos' AND column_name = 'downloads'")
	if err != nil {
		t.Fatal(err)
	}
	downloads, _ := res.GetInt(0, 0)
	want := map[string]int{"repos.stars": 1, "repos.Downloads": int(downloads)}
	if !reflect.DeepEqual(r.types, want) {
		t.Errorf("record types = %v, want the other registrar's %v", r.types, want)
	}
}

// waitForLockWait waits until a transaction other than conn's waits for a
// row lock. (The server refreshes innodb_trx only when it was last read
// more than 0.1 s before: polled faster, it never changes.)
func waitForLockWait(t *testing.T, conn *client.Conn) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(150 * time.Millisecond) {
		res, err := conn.Execute("SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id <> CONNECTION_ID()")
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.GetInt(0, 0); n > 0 {
			return
		}
	}
	t.Fatal("no transaction waits for a lock")
}

func TestLoadErrors(t *testing.T) {
	s := newSchema(t, reposTable,
		"CREATE TABLE composite (a INT, b INT, c INT, PRIMARY KEY (a, b))",
		"CREATE TABLE prefixpk (id VARCHAR(200), c INT, PRIMARY KEY (id(10)))",
		"CREATE TABLE widepk (a VARCHAR(380), b VARCHAR(380), c INT, PRIMARY KEY (a, b)) DEFAULT CHARSET=utf8mb4",
		"CREATE TABLE nopk (id INT, c INT)",
		"CREATE TABLE decpk (id DECIMAL(10,0) PRIMARY KEY, c INT, wide DECIMAL(20,2) NOT NULL DEFAULT 0)",
		"CREATE VIEW v AS SELECT id, downloads FROM repos",
	)
	conn := connect(t)
	set := ruleSet(t, s,
		"rules/a_unknown.yaml", "# no such table\ntable: SCHEMA.nope\nkey: id\ncounters: [c]\n",
		"rules/b_composite.yaml", "table: SCHEMA.composite\n\nkey: a\ncounters: [c]\n",
		"rules/c_prefixpk.yaml", "table: SCHEMA.prefixpk\nkey: id\ncounters: [c]\n",
		"rules/c_widepk.yaml", "table: SCHEMA.widepk\nkey: [b, a]\ncounters: [c]\n",
		"rules/d_nopk.yaml", "table: SCHEMA.nopk\nkey: id\ncounters: [c]\n",
		"rules/e_repos.yaml", "table: SCHEMA.repos\nkey: id\ncounters:\n  - downloads\n  - name\n  - missing\n",
		"rules/f_decpk.yaml", "table: SCHEMA.decpk\nkey: id\ncounters: [c, wide]\n",
		"rules/g_view.yaml", "table: SCHEMA.v\nkey: id\ncounters: [downloads]\n",
	)
	migrate(t, conn, set)
	_, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err == nil {
		t.Fatal("Load succeeded")
	}
	want := []string{
		"rules/a_unknown.yaml:2: table: SCHEMA.nope does not exist (or the admin user has no privileges on it)",
		"rules/b_composite.yaml:3: key: a is not the primary key of SCHEMA.composite (PRIMARY KEY is (a, b))",
		"rules/c_prefixpk.yaml:2: key: SCHEMA.prefixpk's primary key (id) indexes a prefix of a column; slotproxy needs a key of whole columns",
		"rules/c_widepk.yaml:2: key: SCHEMA.widepk's primary key (a, b) may take 6081 bytes in a record id; slotproxy's keyed slot table takes 3000 at most",
		"rules/d_nopk.yaml:2: key: SCHEMA.nopk has no primary key; the key must be its primary key",
		"rules/e_repos.yaml:5: counters: SCHEMA.repos.name is varchar(100), not an integer column",
		"rules/e_repos.yaml:6: counters: SCHEMA.repos has no column missing",
		"rules/f_decpk.yaml:2: key: SCHEMA.decpk.id is decimal(10,0); a key column must be an integer, CHAR, VARCHAR, BINARY or VARBINARY column",
		"rules/f_decpk.yaml:3: counters: SCHEMA.decpk.wide is decimal(20,2): a DECIMAL counter may have at most 18 digits (its slots count units of its last digit in a BIGINT)",
		"rules/g_view.yaml:1: table: SCHEMA.v is a view, not a base table",
	}
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "SCHEMA", s)
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("Load errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(rules.Errors(err)); n != len(want) {
		t.Errorf("rules.Errors found %d errors, want %d", n, len(want))
	}
}

func TestLoadKeyNotPrimary(t *testing.T) {
	s := newSchema(t, "CREATE TABLE t (id INT PRIMARY KEY, other INT UNIQUE, c INT)")
	conn := connect(t)
	set := ruleSet(t, s, "t.yaml", "table: SCHEMA.t\nkey: other\ncounters: [c]\n")
	migrate(t, conn, set)
	_, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if want := "t.yaml:2: key: other is not the primary key of " + s + ".t (PRIMARY KEY is (id))"; err == nil || err.Error() != want {
		t.Errorf("Load = %v, want %s", err, want)
	}
}

func TestLoadMissingSlotTables(t *testing.T) {
	s := newSchema(t, reposTable)
	conn := connect(t)
	set := ruleSet(t, s, "rules/repos.yaml", reposRule)
	_, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	want := "rules/repos.yaml:2: table: schema " + s + " has no slot table slotted_counters and no record-type registry slotproxy_record_types; run slotproxy migrate to create them"
	if err == nil || err.Error() != want {
		t.Fatalf("Load before migrate = %v\nwant %s", err, want)
	}

	// Only the slot table missing.
	migrate(t, conn, set)
	if err := testdb.Shared().Exec("DROP TABLE `" + s + "`.slotted_counters"); err != nil {
		t.Fatal(err)
	}
	_, err = catalog.Load(t.Context(), conn, set, "slotted_counters")
	want = "rules/repos.yaml:2: table: schema " + s + " has no slot table slotted_counters; run slotproxy migrate to create it"
	if err == nil || err.Error() != want {
		t.Errorf("Load without the slot table = %v\nwant %s", err, want)
	}

	// A table of that name that is not a slot table.
	if err := testdb.Shared().Exec("CREATE TABLE `" + s + "`.slotted_counters (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	_, err = catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err == nil || !strings.Contains(err.Error(), "rules/repos.yaml:2: table: "+s+".slotted_counters is not a slot table") {
		t.Errorf("Load with a foreign slotted_counters = %v", err)
	}
}

func TestLoadMissingSchema(t *testing.T) {
	conn := connect(t)
	set := ruleSet(t, "no_such_schema", "rules/repos.yaml", reposRule, "rules/pages.yaml", "table: SCHEMA.pages\nkey: id\ncounters: [views]\n")
	_, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	want := []string{
		"rules/pages.yaml:1: table: schema no_such_schema does not exist (or the admin user has no privileges on it)",
		"rules/pages.yaml:1: table: no_such_schema.pages does not exist",
		"rules/repos.yaml:2: table: no_such_schema.repos does not exist",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("Load = %v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

func TestLoadRuleOnSlotTable(t *testing.T) {
	s := newSchema(t, reposTable)
	conn := connect(t)
	migrate(t, conn, ruleSet(t, s, "rules/repos.yaml", reposRule))
	set := ruleSet(t, s, "rules/repos.yaml", reposRule, "rules/slots.yaml", "table: SCHEMA.slotted_counters\nkey: record_id\ncounters: [count]\n")
	_, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if want := "rules/slots.yaml:1: table: " + s + ".slotted_counters is slotproxy's own table; it cannot have rules"; err == nil || err.Error() != want {
		t.Errorf("Load = %v\nwant %s", err, want)
	}
}

func TestLoadNoRules(t *testing.T) {
	cat, err := catalog.Load(t.Context(), connect(t), nil, "slotted_counters")
	if err != nil || len(cat.Tables()) != 0 {
		t.Errorf("Load of no rules = %v, %v; want an empty catalog", cat, err)
	}
}

func TestConnectErrors(t *testing.T) {
	t.Setenv(config.AdminPasswordEnv, "")
	db := testdb.Shared()
	for _, tc := range []struct {
		name   string
		mutate func(*config.Config)
		want   []string
	}{
		{"no admin", func(c *config.Config) { c.Admin = config.Admin{} },
			[]string{"backend " + db.Addr + ": no admin account configured: set admin.user"}},
		{"wrong password", func(c *config.Config) { c.Admin.Password = "wrong" },
			[]string{"connecting to backend " + db.Addr + ` as admin user "root": `, "Access denied"}},
		{"empty password", func(c *config.Config) { c.Admin.Password = "" },
			[]string{"connecting to backend " + db.Addr, "(admin.password is empty and SLOTPROXY_ADMIN_PASSWORD is not set)"}},
		{"nothing listening", func(c *config.Config) { c.Backend.Address = "127.0.0.1:1" },
			[]string{"connecting to backend 127.0.0.1:1 ", "connection refused"}},
		{"TLS with an untrusted CA", func(c *config.Config) {
			c.Backend.TLS = config.BackendTLS{Mode: config.TLSVerifyIdentity, CA: untrustedCAFile}
		}, []string{"connecting to backend " + db.Addr, "certificate signed by unknown authority"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := adminConfig()
			tc.mutate(cfg)
			conn, err := catalog.Connect(t.Context(), cfg)
			if err == nil {
				conn.Close()
				t.Fatal("Connect succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Connect error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestConnectTLS(t *testing.T) {
	for _, mode := range []config.TLSMode{config.TLSRequired, config.TLSVerifyCA, config.TLSVerifyIdentity} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := adminConfig()
			cfg.Backend.TLS.Mode = mode
			if mode != config.TLSRequired {
				cfg.Backend.TLS.CA = caFile
			}
			conn, err := catalog.Connect(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			res, err := conn.Execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			if cipher, _ := res.GetString(0, 1); cipher == "" {
				t.Errorf("the admin connection is not encrypted")
			}
		})
	}
}

func TestConnectTimeout(t *testing.T) {
	// A listener that accepts and never greets.
	ln := newSilentListener(t)
	cfg := adminConfig()
	cfg.Backend.Address = ln
	cfg.Timeouts.Connect, cfg.Timeouts.Handshake = time.Second, 200*time.Millisecond
	start := time.Now()
	_, err := catalog.Connect(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), "timed out or cancelled") {
		t.Errorf("Connect to a silent server = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Connect took %v", d)
	}
}

func TestExecCancel(t *testing.T) {
	conn := connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	// Migrate is the only exported way to run statements; block it on a
	// table lock held by another connection. The lock is on the record-type
	// registry, which Migrate writes to even when everything exists (MySQL
	// does not wait for a lock on a table that CREATE TABLE IF NOT EXISTS
	// finds there; MariaDB does).
	s := newSchema(t, reposTable)
	rules := ruleSet(t, s, "r.yaml", reposRule)
	if err := catalog.Migrate(t.Context(), conn, rules, "slotted_counters", &out); err != nil {
		t.Fatal(err)
	}
	locker, err := catalog.Connect(t.Context(), adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.Execute("LOCK TABLES `" + s + "`." + catalog.RecordTypesTable + " WRITE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Execute("SET SESSION lock_wait_timeout = 30"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = catalog.Migrate(ctx, conn, rules, "slotted_counters", &out)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Migrate blocked by a lock, with a 200ms context = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Migrate took %v to give up", d)
	}
}

// TestNewRewriterDialect: the rewriter takes the backend's dialect from
// its version string (the table of versions is dialect's test): RETURNING
// is planned on MariaDB only (elsewhere such a statement does not parse and
// passes through), and the upsert has one form everywhere, without the
// VALUES() function MySQL 8.0.20+ deprecates.
func TestNewRewriterDialect(t *testing.T) {
	cat := rewrite.NewCatalog([]*rewrite.Table{{Schema: "app", Name: "repos", Key: "id", Columns: []string{"id", "n"},
		Counters: []rewrite.Counter{{Name: "n", RecordType: 1}}, SlotsTable: "slotted_counters", Slots: 10}}, nil)
	for _, tc := range []struct {
		version   string
		returning bool
	}{
		{"8.0.36", false},
		{"9.7.4-2", false},
		{"10.11.14-MariaDB-0+deb12u2", true},
		{"8.0.19", false},
	} {
		rw := catalog.NewRewriter(cat, tc.version)
		got := rewrite.Explain(rw.Rewrite("UPDATE app.repos SET n = n + 1 WHERE id = 1", rewrite.Session{}))
		if !strings.HasPrefix(got, "INSERT INTO `app`.`slotted_counters` (`record_type`, `slot`, `count`, `record_id`) SELECT ") || strings.Contains(got, "VALUES(") {
			t.Errorf("%s: upsert\n%s\nwant INSERT … SELECT without VALUES()", tc.version, got)
		}
		got = rewrite.Explain(rw.Rewrite("DELETE FROM app.repos WHERE id = 1 RETURNING n", rewrite.Session{}))
		// Without RETURNING the server rejects the statement, and the
		// client gets its error (the rewriter leaves it to the server).
		if planned := !strings.HasPrefix(got, "pass-through") && !strings.HasPrefix(got, "the server's own error"); planned != tc.returning {
			t.Errorf("%s: DELETE … RETURNING planned = %v, want %v:\n%s", tc.version, planned, tc.returning, got)
		}
	}
}

func TestReloader(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cat := rewrite.NewCatalog(nil, nil)
	var (
		loads   atomic.Int32
		applied atomic.Int32
		release = make(chan struct{})
		started = make(chan struct{}, 10)
		fail    atomic.Bool
	)
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	ctx, cancel := context.WithCancel(context.Background())
	r := catalog.NewReloader(ctx, func(context.Context) (*rewrite.Rewriter, error) {
		loads.Add(1)
		started <- struct{}{}
		<-release
		if fail.Load() {
			return nil, errors.New("boom")
		}
		return rewrite.New(cat, rewrite.Options{}), nil
	}, func(*rewrite.Rewriter) { applied.Add(1) }, logger)

	// One trigger runs; three more during it coalesce into one more load,
	// and each returns only once that load, which started after it, ended.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.Trigger() }()
	<-started
	var returned atomic.Int32
	var during sync.WaitGroup
	for range 3 {
		during.Add(1)
		go func() { defer during.Done(); r.Trigger(); returned.Add(1) }()
	}
	time.Sleep(50 * time.Millisecond) // the three are waiting
	release <- struct{}{}
	<-started
	if n := returned.Load(); n != 0 {
		t.Errorf("%d triggers returned before a load that started after them ended", n)
	}
	release <- struct{}{}
	wg.Wait()
	during.Wait()
	if loads.Load() != 2 || applied.Load() != 2 {
		t.Errorf("loads = %d, applied = %d; want 2 and 2", loads.Load(), applied.Load())
	}

	// A failed load keeps the old rewriter and is logged.
	fail.Store(true)
	go func() { <-started; release <- struct{}{} }()
	r.Trigger()
	if applied.Load() != 2 {
		t.Errorf("a failed load was applied")
	}
	logMu.Lock()
	if !strings.Contains(logs.String(), "keeping the previous one") || !strings.Contains(logs.String(), "err=boom") {
		t.Errorf("logs:\n%s", logs.String())
	}
	logMu.Unlock()

	// After ctx ends, nothing is loaded.
	cancel()
	r.Trigger()
	if loads.Load() != 3 {
		t.Errorf("loads = %d after cancel, want 3", loads.Load())
	}
}

// newSilentListener returns the address of a listener that accepts
// connections and never says anything.
func newSilentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestLoadTouch: touch columns must be DATETIME or TIMESTAMP columns of
// the table, or integer columns (Unix times); they get record types like
// counters, and the rewriter learns their type and precision, or range (of
// a BIGINT, the times from 0 a slot holds).
func TestLoadTouch(t *testing.T) {
	s := newSchema(t, "CREATE TABLE posts (id BIGINT PRIMARY KEY, name VARCHAR(20), views INT NOT NULL DEFAULT 0, "+
		"updated_at DATETIME(3) NULL, seen_at TIMESTAMP NULL, day DATE NULL, unix_at INT UNSIGNED NOT NULL DEFAULT 0, big_at BIGINT NULL, ubig_at BIGINT UNSIGNED NULL, tiny_at TINYINT NULL)")
	conn := connect(t)
	set := ruleSet(t, s, "rules/posts.yaml", "table: SCHEMA.posts\nkey: id\ncounters: [views]\ntouch: [updated_at, seen_at, unix_at, big_at, ubig_at, tiny_at]\n")
	var out strings.Builder
	if err := catalog.Migrate(t.Context(), conn, set, "slotted_counters", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-- record type 1: " + s + ".posts.views", "-- record type 2: " + s + ".posts.updated_at", "-- record type 3: " + s + ".posts.seen_at"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("migrate printed:\n%s\nwant a line %q", out.String(), want)
		}
	}
	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", cat.Tables()[0].Counters)
	want := "[{Name:views RecordType:1 Unsigned:false Min:-2147483648 Max:2147483647 BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:false Timestamp:false Integer:false FSP:0} " +
		"{Name:updated_at RecordType:2 Unsigned:false Min: Max: BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:true Timestamp:false Integer:false FSP:3} " +
		"{Name:seen_at RecordType:3 Unsigned:false Min: Max: BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:true Timestamp:true Integer:false FSP:0} " +
		"{Name:unix_at RecordType:4 Unsigned:false Min:0 Max:4294967295 BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:true Timestamp:false Integer:true FSP:0} " +
		"{Name:big_at RecordType:5 Unsigned:false Min:0 Max:9223372036854775806 BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:true Timestamp:false Integer:true FSP:0} " +
		"{Name:ubig_at RecordType:6 Unsigned:true Min:0 Max:9223372036854775806 BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:true Timestamp:false Integer:true FSP:0} " +
		"{Name:tiny_at RecordType:7 Unsigned:false Min:-128 Max:127 BoundMin: BoundMax: Precision:0 Scale:0 BaseOnly:[] Touch:true Timestamp:false Integer:true FSP:0}]"
	if got != want {
		t.Errorf("counters:\n%s\nwant\n%s", got, want)
	}

	bad := ruleSet(t, s, "rules/posts.yaml", "table: SCHEMA.posts\nkey: id\ncounters: [views]\ntouch:\n  - name\n  - day\n  - missing\n")
	_, err = catalog.Load(t.Context(), conn, bad, "slotted_counters")
	wantErr := []string{
		"rules/posts.yaml:5: touch: SCHEMA.posts.name is varchar(20); a touch column must be DATETIME, TIMESTAMP or an integer type (a Unix time)",
		"rules/posts.yaml:6: touch: SCHEMA.posts.day is date; a touch column must be DATETIME, TIMESTAMP or an integer type (a Unix time)",
		"rules/posts.yaml:7: touch: SCHEMA.posts has no column missing",
	}
	for i := range wantErr {
		wantErr[i] = strings.ReplaceAll(wantErr[i], "SCHEMA", s)
	}
	if err == nil || err.Error() != strings.Join(wantErr, "\n") {
		t.Errorf("Load = %v\nwant\n%s", err, strings.Join(wantErr, "\n"))
	}
}

// TestRegistryNameAgrees: the rewriter refuses statements that name the
// registry through the proxy by the same name migrate creates it under.
func TestRegistryNameAgrees(t *testing.T) {
	if catalog.RecordTypesTable != rewrite.RecordTypesTable {
		t.Fatalf("catalog creates %q, the rewriter guards %q", catalog.RecordTypesTable, rewrite.RecordTypesTable)
	}
}

// TestLoadSideEffects: a ruled table whose rows the server changes on an
// UPDATE (triggers, ON UPDATE CURRENT_TIMESTAMP, generated columns of a
// counter) or behind the proxy's back (cascading foreign keys) is refused
// with the reason and a fix, since a slotted increment does not update the
// row; in shadow mode, where statements run as written, it is accepted.
func TestLoadSideEffects(t *testing.T) {
	s := newSchema(t,
		"CREATE TABLE trig (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0, log INT NOT NULL DEFAULT 0)",
		"CREATE TRIGGER trig_bump AFTER UPDATE ON trig FOR EACH ROW SET @bumped = 1",
		"CREATE TRIGGER trig_ins BEFORE INSERT ON trig FOR EACH ROW SET @inserted = 1",
		"CREATE TABLE stamped (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0, changed TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)",
		"CREATE TABLE gen (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0, m INT NOT NULL DEFAULT 0, twice INT AS (n * 2) STORED, other INT AS (m + 1) VIRTUAL)",
		"CREATE TABLE parent (id BIGINT PRIMARY KEY)",
		"CREATE TABLE child (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0, parent_id BIGINT, CONSTRAINT child_parent FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE)",
		"CREATE TABLE safe_child (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0, parent_id BIGINT, FOREIGN KEY (parent_id) REFERENCES parent (id))",
		"CREATE TABLE shadowed (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0, changed TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)",
		"CREATE TABLE isam (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0) ENGINE=MyISAM",
		"CREATE TABLE mem (id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 0) ENGINE=MEMORY",
	)
	conn := connect(t)
	set := ruleSet(t, s,
		"rules/a_trig.yaml", "table: SCHEMA.trig\nkey: id\ncounters: [n]\n",
		"rules/b_stamped.yaml", "table: SCHEMA.stamped\nkey: id\ncounters: [n]\n",
		"rules/c_gen.yaml", "table: SCHEMA.gen\nkey: id\ncounters:\n  - n\n  - m\n",
		"rules/d_child.yaml", "table: SCHEMA.child\nkey: id\ncounters: [n]\n",
		"rules/e_safe.yaml", "table: SCHEMA.safe_child\nkey: id\ncounters: [n]\n",
		"rules/f_shadowed.yaml", "table: SCHEMA.shadowed\nkey: id\ncounters: [n]\nmode: shadow\n",
		"rules/g_isam.yaml", "table: SCHEMA.isam\nkey: id\ncounters: [n]\n",
		"rules/h_mem.yaml", "table: SCHEMA.mem\nkey: id\ncounters: [n]\n",
	)
	migrate(t, conn, set)
	_, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err == nil {
		t.Fatal("Load succeeded")
	}
	want := []string{
		"rules/a_trig.yaml:1: table: SCHEMA.trig has the UPDATE trigger trig_bump, which fires on every increment directly but would fire only on roll-up through slotproxy; drop the trigger (or move its work into the application), or use mode: shadow",
		"rules/b_stamped.yaml:1: table: SCHEMA.stamped.changed is set ON UPDATE CURRENT_TIMESTAMP, which every increment moves directly but a slotted increment (which does not update the row) would not; drop ON UPDATE from the column (ORMs that set it themselves keep working, see touch:), or use mode: shadow",
		"rules/c_gen.yaml:4: counters: SCHEMA.gen.twice is generated from the counter n and would read the base value only (the slots are not in the row); drop the generated column or compute it in the query, or use mode: shadow",
		"rules/c_gen.yaml:5: counters: SCHEMA.gen.other is generated from the counter m and would read the base value only (the slots are not in the row); drop the generated column or compute it in the query, or use mode: shadow",
		"rules/d_child.yaml:1: table: SCHEMA.child has the foreign key child_parent (ON DELETE CASCADE), which changes or deletes its rows behind slotproxy's back (their slot rows would stay); make it RESTRICT, or use mode: shadow",
		"rules/g_isam.yaml:1: table: SCHEMA.isam uses the MyISAM storage engine, which keeps an increment whose transaction rolls back and mixes with the slot table's InnoDB in one statement (MySQL warns 6414); a slotted increment would be rolled back with its transaction; ALTER TABLE SCHEMA.isam ENGINE=InnoDB, or use mode: shadow",
		"rules/h_mem.yaml:1: table: SCHEMA.mem uses the MEMORY storage engine, which keeps an increment whose transaction rolls back and mixes with the slot table's InnoDB in one statement (MySQL warns 6414); a slotted increment would be rolled back with its transaction; ALTER TABLE SCHEMA.mem ENGINE=InnoDB, or use mode: shadow",
	}
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "SCHEMA", s)
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("Load errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoadKeyed: a rule whose table's primary key is not one integer column
// (several columns, or a string) names its records by an encoding of the
// key, in the keyed slot table migrate creates beside the slot table.
func TestLoadKeyed(t *testing.T) {
	s := newSchema(t,
		"CREATE TABLE members (channel VARCHAR(26) NOT NULL, user_id INT UNSIGNED NOT NULL, n BIGINT, PRIMARY KEY (channel, user_id)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
		"CREATE TABLE config (name CHAR(20) CHARACTER SET latin1 NOT NULL PRIMARY KEY, v INT NOT NULL)",
		"CREATE TABLE blobs (h VARBINARY(32) NOT NULL PRIMARY KEY, v INT NOT NULL)",
	)
	conn := connect(t)
	set := ruleSet(t, s,
		"rules/members.yaml", "table: SCHEMA.members\nkey: [user_id, channel]\ncounters: [n]\n",
		"rules/config.yaml", "table: SCHEMA.config\nkey: name\ncounters: [v]\n",
		"rules/blobs.yaml", "table: SCHEMA.blobs\nkey: [h]\ncounters: [v]\n",
	)
	var out strings.Builder
	if err := catalog.Migrate(t.Context(), conn, set, "slotted_counters", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "CREATE TABLE IF NOT EXISTS `"+s+"`.`slotted_counters_keyed` (") {
		t.Errorf("Migrate did not create the keyed slot table:\n%s", out.String())
	}
	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]rewrite.KeyColumn{
		"members": {{Name: "channel", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"}, {Name: "user_id", Integer: true, Unsigned: true}},
		"config":  {{Name: "name", Char: true, Charset: "latin1", Collation: "latin1_swedish_ci"}},
		"blobs":   {{Name: "h"}},
	}
	for name, cols := range want {
		var tb *rewrite.Table
		for _, x := range cat.Tables() {
			if x.Name == name {
				tb = x
			}
		}
		if tb == nil {
			t.Fatalf("no table %s", name)
		}
		if !tb.Keyed() || tb.Key != "" || !reflect.DeepEqual(tb.KeyColumns, cols) || tb.SlotsTable != "slotted_counters_keyed" {
			t.Errorf("%s: Keyed %v, Key %q, KeyColumns %+v, SlotsTable %s; want KeyColumns %+v in slotted_counters_keyed",
				name, tb.Keyed(), tb.Key, tb.KeyColumns, tb.SlotsTable, cols)
		}
	}

	// A table of that name that is not a keyed slot table.
	if err := testdb.Shared().Exec("DROP TABLE `"+s+"`.slotted_counters_keyed",
		"CREATE TABLE `"+s+"`.slotted_counters_keyed (record_type SMALLINT UNSIGNED, record_id BIGINT, slot SMALLINT UNSIGNED, count BIGINT, PRIMARY KEY (record_type, record_id, slot))"); err != nil {
		t.Fatal(err)
	}
	_, err = catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err == nil || !strings.Contains(err.Error(), "rules/blobs.yaml:2: key: "+s+".slotted_counters_keyed is not a keyed slot table") {
		t.Errorf("Load with a foreign slotted_counters_keyed = %v", err)
	}
	// None.
	if err := testdb.Shared().Exec("DROP TABLE `" + s + "`.slotted_counters_keyed"); err != nil {
		t.Fatal(err)
	}
	_, err = catalog.Load(t.Context(), conn, set, "slotted_counters")
	if want := "rules/blobs.yaml:2: key: schema " + s + " has no keyed slot table slotted_counters_keyed (for tables whose key is not one integer column); run slotproxy migrate to create it"; err == nil || err.Error() != want {
		t.Errorf("Load without the keyed slot table = %v\nwant %s", err, want)
	}
}

// TestLoadDecimal: a DECIMAL counter of at most 18 digits gets its
// precision and scale, and its range in units of its last digit; one that
// a CHECK constraint reads runs on the base row (BaseOnly).
func TestLoadDecimal(t *testing.T) {
	s := newSchema(t, "CREATE TABLE stock (id BIGINT PRIMARY KEY, qty DECIMAL(12,4) NULL, whole DECIMAL(5,0) UNSIGNED NOT NULL DEFAULT 0, "+
		"cents DECIMAL(18,2) NOT NULL DEFAULT 0, CONSTRAINT cents_cap CHECK (cents < 1000))")
	conn := connect(t)
	set := ruleSet(t, s, "rules/stock.yaml", "table: SCHEMA.stock\nkey: id\ncounters: [qty, whole, cents]\n")
	migrate(t, conn, set)
	cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cat.Tables()[0].Counters {
		got = append(got, fmt.Sprintf("%s %d,%d [%s, %s] %v", c.Name, c.Precision, c.Scale, c.Min, c.Max, c.BaseOnly))
	}
	want := []string{
		"qty 12,4 [-999999999999, 999999999999] []",
		"whole 5,0 [0, 99999] []",
		"cents 18,2 [-999999999999999999, 999999999999999999] [CHECK constraint cents_cap may read cents, a DECIMAL counter (only integer counters' CHECK bounds are kept by slots)]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counters:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoadBounds: a rule's bounds (bounds: {c: {max: n}}) are checked
// against the column (beyond what it holds, of a table keyed by a string,
// of a DECIMAL column: refused with file and line), and put in force only
// while every slot row of the counter is one a slotted increment under
// them could leave: slot rows written without them leave the counter
// without bounds, with a note, until a reload after a fold.
func TestLoadBounds(t *testing.T) {
	s := newSchema(t, reposTable,
		"CREATE TABLE users (id INT PRIMARY KEY, attempts TINYINT NOT NULL DEFAULT 0, posts INT UNSIGNED NOT NULL DEFAULT 0, qty DECIMAL(10,2) NOT NULL DEFAULT 0)",
		"CREATE TABLE named (name VARCHAR(20) PRIMARY KEY, hits INT NOT NULL DEFAULT 0)",
		"INSERT INTO users (id) VALUES (1), (2)",
	)
	conn := connect(t)
	bad := ruleSet(t, s,
		"rules/a.yaml", "table: SCHEMA.users\nkey: id\ncounters: [attempts, posts, qty]\nbounds:\n  attempts: {max: 200}\n  posts: {min: -1}\n  qty: {max: 5}\n",
		"rules/b.yaml", "table: SCHEMA.named\nkey: name\ncounters: [hits]\nbounds:\n  hits: {max: 5}\n",
	)
	migrate(t, conn, bad)
	_, err := catalog.Load(t.Context(), conn, bad, "slotted_counters")
	want := []string{
		"rules/a.yaml:5: bounds: 200 of SCHEMA.users.attempts is beyond the values the column holds (-128 to 127, CHECK constraints included)",
		"rules/a.yaml:6: bounds: -1 of SCHEMA.users.posts is beyond the values the column holds (0 to 4294967295, CHECK constraints included)",
		"rules/a.yaml:7: bounds: SCHEMA.users.qty is decimal(10,2); bounds are for integer counters",
		"rules/b.yaml:5: bounds: SCHEMA.named is not keyed by one integer column; bounds are for tables that are",
	}
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "SCHEMA", s)
	}
	if err == nil {
		t.Fatal("Load succeeded")
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("Load errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	set := ruleSet(t, s, "rules/a.yaml", "table: SCHEMA.users\nkey: id\ncounters: [attempts, posts]\nbounds:\n  attempts: {max: 100}\n")
	load := func() (*rewrite.Counter, []string) {
		t.Helper()
		cat, err := catalog.Load(t.Context(), conn, set, "slotted_counters")
		if err != nil {
			t.Fatal(err)
		}
		notes := cat.BoundsNotInForce
		for _, tb := range cat.Tables() {
			if tb.Name == "users" {
				return &tb.Counters[0], notes
			}
		}
		t.Fatal("users not ruled")
		return nil, nil
	}
	c, notes := load()
	if c.BoundMax != "100" || c.BoundMin != "" || len(notes) != 0 {
		t.Fatalf("no slot rows: bounds %q..%q, notes %q; want ..100 in force", c.BoundMin, c.BoundMax, notes)
	}
	// Slot rows an increment under max 100 may leave: slot 0 holds at
	// most 100 × 16 / (16 × 17) = 5 over a base of 0.
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Execute(strings.ReplaceAll(q, "SCHEMA", s)); err != nil {
			t.Fatal(err)
		}
	}
	exec(fmt.Sprintf("INSERT INTO SCHEMA.slotted_counters (record_type, record_id, slot, count) VALUES (%d, 1, 0, 5), (%d, 2, 3, 4)", c.RecordType, c.RecordType))
	if c, notes = load(); c.BoundMax != "100" || len(notes) != 0 {
		t.Fatalf("slot rows within the shares: bounds ..%q, notes %q; want ..100 in force", c.BoundMax, notes)
	}
	// One beyond slot 0's share, as an increment without the bounds
	// writes: not in force.
	exec(fmt.Sprintf("UPDATE SCHEMA.slotted_counters SET count = 6 WHERE record_type = %d AND record_id = 1", c.RecordType))
	c, notes = load()
	if c.BoundMax != "" || len(notes) != 1 || !strings.Contains(notes[0], "bounds of `"+s+"`.`users`.attempts not in force: 1 of its slot rows") {
		t.Fatalf("a slot row beyond its share: bounds ..%q, notes %q; want none in force and a note", c.BoundMax, notes)
	}
	// Folded (and a base value beyond the bounds with no slot rows is no
	// obstacle: a slotted increment that would leave it there fails).
	exec(fmt.Sprintf("DELETE FROM SCHEMA.slotted_counters WHERE record_type = %d AND record_id = 1", c.RecordType))
	exec("UPDATE SCHEMA.users SET attempts = 120 WHERE id = 1")
	if c, notes = load(); c.BoundMax != "100" || len(notes) != 0 {
		t.Fatalf("after the fold: bounds ..%q, notes %q; want ..100 in force", c.BoundMax, notes)
	}
	// A base value beyond the bounds under a slot row of +4, which no
	// slotted increment under them leaves there: not in force.
	exec("UPDATE SCHEMA.users SET attempts = 101 WHERE id = 2")
	if c, notes = load(); c.BoundMax != "" || len(notes) != 1 {
		t.Fatalf("a base value beyond the bounds under slot rows: bounds ..%q, notes %q; want none in force and a note", c.BoundMax, notes)
	}
}
