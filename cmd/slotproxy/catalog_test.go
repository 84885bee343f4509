package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// The example configuration testdata/config-rules.yaml and its rules, which
// the tests run against the throwaway MariaDB with the account it names.
const (
	exampleConfig   = "../../testdata/config-rules.yaml"
	exampleUser     = "slotproxy"
	examplePassword = "slotproxy-admin-pass"
)

// setupDB creates the standard test accounts, the schema the example rules
// expect (app.repos, as in testdata/rules/repos.yaml) and the example's
// admin account, with only the privileges config.yaml documents.
func setupDB(db *testdb.Server) error {
	if err := testdb.Setup(db); err != nil {
		return err
	}
	return db.Exec(
		"CREATE DATABASE IF NOT EXISTS app",
		"CREATE TABLE IF NOT EXISTS app.repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL DEFAULT '', downloads BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
		"DROP USER IF EXISTS "+exampleUser+"@'%'",
		"CREATE USER "+exampleUser+"@'%' IDENTIFIED BY '"+examplePassword+"'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON app.* TO "+exampleUser+"@'%'",
	)
}

// exampleEnv passes the example admin password the way the example
// configuration expects it.
var exampleEnv = []string{"SLOTPROXY_ADMIN_PASSWORD=" + examplePassword}

// schemaConfig creates a fresh schema with a ruled table repos, writes a
// rule file for it and a configuration (admin: root, password in the
// file; metrics on a free port, see metricsAddr) into a temporary
// directory, and returns the schema's name and the configuration's path.
func schemaConfig(t *testing.T, listen string) (schema, path string) {
	t.Helper()
	db := testdb.Shared()
	schema = "cli_" + strings.ToLower(nonWord(t.Name()))
	if err := db.Exec(
		"DROP DATABASE IF EXISTS "+schema,
		"CREATE DATABASE "+schema,
		"CREATE TABLE "+schema+".repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL DEFAULT '', downloads BIGINT NOT NULL DEFAULT 0, stars INT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO "+schema+".repos (id, name) VALUES (1, 'one'), (2, 'two')",
	); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP DATABASE IF EXISTS " + schema) })
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rules"), 0o755); err != nil {
		t.Fatal(err)
	}
	rule := fmt.Sprintf("# the repos table\ntable: %s.repos\nkey: id\ncounters: [downloads, stars]\n", schema)
	if err := os.WriteFile(filepath.Join(dir, "rules", "repos.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("listen: %s\nbackend: %s\nrules: rules\nadmin:\n  user: %s\n  password: %s\nmetrics:\n  listen: %s\n",
		listen, db.Addr, db.RootUser, db.RootPassword, freeAddr(t))
	path = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return schema, path
}

func nonWord(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// wantMigrateOutput is what migrate prints for the rules of schemaConfig.
func wantMigrateOutput(schema string, counters ...string) string {
	out := "CREATE TABLE IF NOT EXISTS `" + schema + "`.`slotted_counters` (\n" +
		"  `record_type` SMALLINT UNSIGNED NOT NULL,\n" +
		"  `record_id`   BIGINT NOT NULL,\n" +
		"  `slot`        SMALLINT UNSIGNED NOT NULL,\n" +
		"  `count`       BIGINT NOT NULL,\n" +
		"  PRIMARY KEY (`record_type`, `record_id`, `slot`)\n" +
		") ENGINE=InnoDB;\n\n" +
		"CREATE TABLE IF NOT EXISTS `" + schema + "`.`slotproxy_record_types` (\n" +
		"  `record_type` SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,\n" +
		"  `table_name`  VARCHAR(64) NOT NULL,\n" +
		"  `column_name` VARCHAR(64) NOT NULL,\n" +
		"  `created_at`  TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
		"  UNIQUE KEY `table_column` (`table_name`, `column_name`)\n" +
		") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;\n\n"
	for i, c := range counters {
		out += fmt.Sprintf("-- record type %d: %s.repos.%s\n", i+1, schema, c)
	}
	return out
}

// TestMigrateExample runs migrate twice with the example configuration,
// whose admin password comes from the environment.
func TestMigrateExample(t *testing.T) {
	if err := testdb.Shared().Exec("DROP TABLE IF EXISTS app.slotted_counters", "DROP TABLE IF EXISTS app.slotproxy_record_types"); err != nil {
		t.Fatal(err)
	}
	want := wantMigrateOutput("app", "downloads")
	for i := range 2 {
		stdout, stderr, code := runCLIEnv(t, exampleEnv, "migrate", "--config", exampleConfig, "--backend", testdb.Shared().Addr)
		if code != 0 || stderr != "" {
			t.Fatalf("migrate %d: exit status %d, stderr %q", i+1, code, stderr)
		}
		if stdout != want {
			t.Errorf("migrate %d printed:\n%s\nwant:\n%s", i+1, stdout, want)
		}
	}

	// Without the password the example's account is refused, and the
	// error says why.
	_, stderr, code := runCLIEnv(t, []string{"SLOTPROXY_ADMIN_PASSWORD="}, "migrate", "--config", exampleConfig, "--backend", testdb.Shared().Addr)
	if code != 1 || strings.Count(stderr, "\n") != 1 ||
		!strings.HasPrefix(stderr, "slotproxy: connecting to backend "+testdb.Shared().Addr+` as admin user "slotproxy": `) ||
		!strings.HasSuffix(stderr, "(admin.password is empty and SLOTPROXY_ADMIN_PASSWORD is not set)\n") {
		t.Errorf("migrate without a password: exit status %d, stderr %q", code, stderr)
	}
}

func TestMigrateRoot(t *testing.T) {
	schema, path := schemaConfig(t, "127.0.0.1:1")
	stdout, stderr, code := runCLI(t, "migrate", "--config", path)
	if code != 0 || stderr != "" {
		t.Fatalf("migrate: exit status %d, stderr %q", code, stderr)
	}
	if want := wantMigrateOutput(schema, "downloads", "stars"); stdout != want {
		t.Errorf("migrate printed:\n%s\nwant:\n%s", stdout, want)
	}

	// A rule that does not match the schema: migrate still succeeds, and
	// warns that serve will not start.
	rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, name]\n", schema)
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "rules", "repos.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runCLI(t, "migrate", "--config", path)
	wantErr := "slotproxy: warning: migrated, but serve will refuse to start until the rules match the schema: " +
		filepath.Join(filepath.Dir(path), "rules", "repos.yaml") + ":3: counters: " + schema + ".repos.name is varchar(100), not an integer column\n"
	if code != 0 || stderr != wantErr {
		t.Errorf("migrate with a bad rule: exit status %d, stderr:\n%s\nwant 0 and:\n%s", code, stderr, wantErr)
	}
	if !strings.Contains(stdout, "-- record type 3: "+schema+".repos.name\n") {
		t.Errorf("migrate printed:\n%s", stdout)
	}
}

func TestExplain(t *testing.T) {
	if _, stderr, code := runCLIEnv(t, exampleEnv, "migrate", "--config", exampleConfig, "--backend", testdb.Shared().Addr); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	for _, tc := range []struct {
		args []string
		want string // prefix of stdout
	}{
		{[]string{"UPDATE repos SET downloads = downloads + 1 WHERE id = 1"},
			"INSERT INTO `app`.`slotted_counters` (`record_type`, `slot`, `count`, `record_id`) SELECT 1, "},
		{[]string{"--db", "app", "UPDATE repos SET downloads = downloads + 1 WHERE id = 1"},
			"INSERT INTO `app`.`slotted_counters` (`record_type`, `slot`, `count`, `record_id`) SELECT 1, "},
		{[]string{"SELECT 1"}, "pass-through: "},
		{[]string{"--db", "other", "UPDATE repos SET downloads = downloads + 1 WHERE id = 1"}, "pass-through: "},
		{[]string{"SELECT downloads FROM app.repos WHERE id = 1"}, "SELECT "},
	} {
		args := append([]string{"explain", "--config", exampleConfig, "--backend", testdb.Shared().Addr}, tc.args...)
		stdout, stderr, code := runCLIEnv(t, exampleEnv, args...)
		if code != 0 || stderr != "" {
			t.Errorf("explain %q: exit status %d, stderr %q", tc.args, code, stderr)
			continue
		}
		if !strings.HasPrefix(stdout, tc.want) || !strings.HasSuffix(stdout, "\n") {
			t.Errorf("explain %q printed:\n%s\nwant it to start with %q", tc.args, stdout, tc.want)
		}
		if strings.HasPrefix(tc.want, "INSERT") && !strings.Contains(stdout, "ON DUPLICATE KEY UPDATE") {
			t.Errorf("explain %q printed:\n%s\nwant an ON DUPLICATE KEY UPDATE", tc.args, stdout)
		}
	}
}

func TestAdminCommandErrors(t *testing.T) {
	noRules := writeFile(t, "norules.yaml", "backend: 127.0.0.1:3306\n")
	_, withRules := schemaConfig(t, "127.0.0.1:1")
	badPass := strings.Replace(readFile(t, withRules), "password: "+testdb.Shared().RootPassword, "password: wrong", 1)
	badPassPath := filepath.Join(filepath.Dir(withRules), "badpass.yaml")
	if err := os.WriteFile(badPassPath, []byte(badPass), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // prefix of the stderr line
	}{
		{"migrate without config", []string{"migrate"}, 2, "slotproxy: migrate: --config is required"},
		{"explain without config", []string{"explain", "SELECT 1"}, 2, "slotproxy: explain: --config is required"},
		{"explain without SQL", []string{"explain", "--config", withRules}, 2, `slotproxy: explain: no SQL given (run "slotproxy help explain")`},
		{"explain with two arguments", []string{"explain", "--config", withRules, "SELECT", "1"}, 2,
			`slotproxy: explain: unexpected argument "1" (quote the SQL as one argument; flags go before it)`},
		{"migrate with an argument", []string{"migrate", "--config", withRules, "now"}, 2, `slotproxy: migrate: unexpected argument "now"`},
		{"migrate bad backend flag", []string{"migrate", "--config", withRules, "--backend", "db"}, 2,
			`slotproxy: migrate: --backend: "db": missing port in address (want HOST:PORT)`},
		{"migrate without rules", []string{"migrate", "--config", noRules}, 1,
			"slotproxy: " + noRules + ": rules: not set; migrate works on the rules in that directory"},
		{"explain without rules", []string{"explain", "--config", noRules, "SELECT 1"}, 1,
			"slotproxy: " + noRules + ": rules: not set; explain works on the rules in that directory"},
		{"migrate wrong password", []string{"migrate", "--config", badPassPath}, 1,
			"slotproxy: connecting to backend " + testdb.Shared().Addr + ` as admin user "root": ERROR 1045 (28000): Access denied`},
		{"migrate backend down", []string{"migrate", "--config", withRules, "--backend", "127.0.0.1:1"}, 1,
			`slotproxy: connecting to backend 127.0.0.1:1 as admin user "root": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			if !strings.HasPrefix(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr:\n got %q\nwant one line starting with %q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeRules checks that serve refuses to start before migrate, with a
// one-line error naming the rule and migrate, and starts after it,
// rewriting counter increments and reloading the schema after DDL.
func TestServeRules(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	rulePath := filepath.Join(filepath.Dir(path), "rules", "repos.yaml")

	_, stderr, code := runCLI(t, "serve", "--config", path)
	want := "slotproxy: " + rulePath + ":2: table: schema " + schema + " has no slot table slotted_counters and no record-type registry slotproxy_record_types; run slotproxy migrate to create them\n"
	if code != 1 || stderr != want {
		t.Fatalf("serve before migrate: exit status %d, stderr:\n%s\nwant 1 and:\n%s", code, stderr, want)
	}

	if _, stderr, code := runCLI(t, "migrate", "--config", path); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	p := startServe(t, "serve", "--config", path)
	line := p.waitFor(t, "msg=\"loaded rules\"")
	// The dialect is the backend's: the row alias on MySQL 8.0.20 and
	// later, VALUES() on MariaDB.
	d := testdb.Shared().Dialect()
	if !strings.Contains(line, "tables=1") || !strings.Contains(line, fmt.Sprintf("row_alias=%v", d.UpsertRowAlias())) ||
		!strings.Contains(line, fmt.Sprintf("dialect=%q", d.String())) {
		t.Errorf("loaded rules line: %s", line)
	}
	p.waitFor(t, "msg=listening")

	// Through the proxy, as an application would.
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = testdb.User, testdb.Password, "tcp", listen, schema
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	for range 3 {
		if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
			t.Fatalf("increment through the proxy: %v\nstderr:\n%s", err, p.stderr())
		}
	}
	var downloads, slotRows int
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&downloads); err != nil {
		t.Fatal(err)
	}
	if downloads != 3 {
		t.Errorf("downloads through the proxy = %d, want 3", downloads)
	}
	// Directly: the increments went to the slot table.
	direct, err := sql.Open("mysql", testdb.Shared().RootDSN(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := direct.QueryRow("SELECT COUNT(*) FROM slotted_counters").Scan(&slotRows); err != nil {
		t.Fatal(err)
	}
	if slotRows == 0 {
		t.Errorf("no slot rows after increments through the proxy")
	}

	// DDL on the ruled table through the proxy reloads the catalog.
	if _, err := db.Exec("ALTER TABLE repos ADD COLUMN note VARCHAR(10)"); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "msg=\"reloaded the catalog after DDL\"")
	// A change that breaks the rule: the reload fails, the old catalog stays.
	if _, err := db.Exec("ALTER TABLE repos MODIFY stars VARCHAR(10) NOT NULL DEFAULT '0'"); err != nil {
		t.Fatal(err)
	}
	line = p.waitFor(t, "keeping the previous one")
	if !strings.Contains(line, "not an integer column") {
		t.Errorf("failed reload logged as: %s", line)
	}
	if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
		t.Errorf("increment after a failed reload: %v", err)
	}

	db.Close()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("serve after SIGINT: %v\nstderr:\n%s", err, p.stderr())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still running 10s after SIGINT")
	}
}

// TestExplainDocs: the explain examples of docs/configuration.md are what
// explain prints (for the example rule, testdata/rules/repos.yaml, on the
// test run's server): the documentation cannot drift from the output. The
// slot number, chosen at random, is compared as N wherever it occurs.
func TestExplainDocs(t *testing.T) {
	if _, stderr, code := runCLIEnv(t, exampleEnv, "migrate", "--config", exampleConfig, "--backend", testdb.Shared().Addr); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	doc := readFile(t, filepath.Join("..", "..", "docs", "configuration.md"))
	start := strings.Index(doc, "The following output is real")
	if start < 0 {
		t.Fatal("docs/configuration.md: no explain examples")
	}
	block := doc[start:]
	block = block[strings.Index(block, "```\n")+4:]
	block = block[:strings.Index(block, "```")]
	slot := regexp.MustCompile("SELECT CAST\\([0-9]+ AS SIGNED\\) AS `_slotproxy_slot`")
	// An increment by a literal writes its slot as a literal: in its
	// SELECT list and in each share's divisor.
	inline := regexp.MustCompile("SELECT ([0-9]+), ([0-9]+), IF\\(")
	norm := func(s string) string {
		s = slot.ReplaceAllString(strings.TrimSpace(s), "SELECT CAST(N AS SIGNED) AS `_slotproxy_slot`")
		if m := inline.FindStringSubmatch(s); m != nil {
			s = strings.ReplaceAll(s, m[0], "SELECT "+m[1]+", N, IF(")
			s = strings.ReplaceAll(s, "(("+m[2]+" + 16) * ("+m[2]+" + 17))", "((N + 16) * (N + 17))")
		}
		return s
	}
	examples := 0
	for _, ex := range strings.Split(block, "$ slotproxy explain --config config.yaml ")[1:] {
		sql, want, _ := strings.Cut(ex, "\n")
		sql, err := strconv.Unquote(sql)
		if err != nil {
			t.Fatalf("docs/configuration.md: example %q: %v", ex, err)
		}
		examples++
		got, stderr, code := runCLIEnv(t, exampleEnv, "explain", "--config", exampleConfig, "--backend", testdb.Shared().Addr, sql)
		if code != 0 {
			t.Errorf("explain %q: exit %d: %s", sql, code, stderr)
			continue
		}
		if norm(got) != norm(want) {
			t.Errorf("docs/configuration.md shows for %q:\n%s\nexplain prints:\n%s", sql, strings.TrimSpace(want), strings.TrimSpace(got))
		}
	}
	if examples < 4 {
		t.Fatalf("docs/configuration.md: %d explain examples", examples)
	}
}
