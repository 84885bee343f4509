package clients

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// The ORM tests: each real ORM (or driver API an ORM stands on) runs its
// own idiomatic counter increments from several concurrent workers through
// a proxy that rules repos.downloads and repos.stars, then reads the totals
// back through the ORM. Each test checks that
//
//   - every total the ORM read back is exact: the initial value plus the
//     increments the program made (which increments match a row follows
//     from the rows' tenant and soft-delete state, read from the server
//     before the run), and base plus slots on the server agrees;
//   - the increments were slotted: no UPDATE that assigns a counter of
//     repos reached the server, the base columns are unchanged and the
//     slot table holds the increments, and the proxy ran no guarded write;
//   - and it logs what the ORM sent (every statement naming repos, by
//     shape, with the exact first instance and, for prepared statements,
//     the parameters' wire types) and what became of each shape.
//
// Statements are captured by wire taps on both sides of the proxy (see
// wireTap): between the ORM and the proxy, and between the proxy and the
// server.

// ormSchemaDDL creates an ORM test's schema: repos with the counters,
// stargazers (a child table for ActiveRecord's counter cache) and the slot
// table.
var ormSchemaDDL = []string{
	"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL DEFAULT '', " +
		"downloads INT NOT NULL DEFAULT 0, stars INT NOT NULL DEFAULT 0, updated_at DATETIME NULL, " +
		"deleted_at DATETIME NULL, tenant_id INT NOT NULL DEFAULT 1) ENGINE=InnoDB",
	"CREATE TABLE stargazers (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, repo_id BIGINT NOT NULL, " +
		"created_at DATETIME NULL, updated_at DATETIME NULL) ENGINE=InnoDB",
	slotsDDL,
	// A hot row, a row of another tenant, and a soft-deleted row.
	"INSERT INTO repos (id, name, downloads, stars, tenant_id, deleted_at) VALUES " +
		"(1, 'hot', 100, 10, 1, NULL), (2, 'tenant-seven', 50, 5, 7, NULL), " +
		"(3, 'soft-deleted', 30, 3, 1, '2024-01-02 03:04:05')",
}

// ormCounters are the ruled counters of repos and their record types, and
// its touch column updated_at (the rule's touch: [updated_at]), which
// Rails' touch, Laravel's and Sequelize's increment() assign with the
// increment.
var ormCounters = []rewrite.Counter{{Name: "downloads", RecordType: 1}, {Name: "stars", RecordType: 2},
	{Name: "updated_at", RecordType: 3, Touch: true}}

// ormCatalog describes schema's tables to the rewriter.
func ormCatalog(schema string) *rewrite.Catalog {
	return rewrite.NewCatalog([]*rewrite.Table{{
		Schema: schema, Name: "repos", Key: "id",
		Columns:    []string{"id", "name", "downloads", "stars", "updated_at", "deleted_at", "tenant_id"},
		Counters:   ormCounters,
		SlotsTable: "slotted_counters", Slots: 8,
	}}, map[string][]string{
		schema + ".stargazers": {"id", "repo_id", "created_at", "updated_at"},
	})
}

// Workload of an ORM test: workers × iterations increments.
const (
	ormWorkers    = 4
	ormIterations = 50
)

// ormClient is one ORM's program in testdata/orm.
type ormClient struct {
	name    string // test and directory name
	what    string // for messages
	require func(t testing.TB)
	argv    func(t testing.TB) []string
	env     []string // added to the program's environment
}

func nodeRequire(t testing.TB, module string) {
	require(t, "node with "+module+" in internal/clients/testdata/node/node_modules (scripts/deps-clients.sh runs npm ci)",
		"node", "-e", `require("./node/node_modules/`+module+`")`)
}

var (
	djangoORM = ormClient{
		name: "django", what: "Django (python3-django) on mysqlclient",
		require: func(t testing.TB) {
			require(t, "Django with mysqlclient for /usr/bin/python3 (Debian: python3-django python3-mysqldb)",
				python, "-c", "import django, MySQLdb")
		},
		argv: func(t testing.TB) []string { return []string{python, testdataPath(t, "orm", "django", "counters.py")} },
	}
	sqlalchemyORM = ormClient{
		name: "sqlalchemy", what: "SQLAlchemy (python3-sqlalchemy) on mysqlclient",
		require: func(t testing.TB) {
			require(t, "SQLAlchemy with mysqlclient for /usr/bin/python3 (Debian: python3-sqlalchemy python3-mysqldb)",
				python, "-c", "import sqlalchemy, MySQLdb")
		},
		argv: func(t testing.TB) []string {
			return []string{python, testdataPath(t, "orm", "sqlalchemy", "counters.py")}
		},
	}
	activeRecordORM = ormClient{
		name: "activerecord", what: "ActiveRecord (ruby-activerecord) on mysql2",
		require: func(t testing.TB) {
			require(t, "Ruby with ActiveRecord and mysql2 (Debian: ruby ruby-activerecord ruby-mysql2)",
				"ruby", "-e", `require "active_record"; require "mysql2"`)
		},
		argv: func(t testing.TB) []string {
			return []string{"ruby", testdataPath(t, "orm", "activerecord", "counters.rb")}
		},
	}
	laravelORM = ormClient{
		name: "laravel", what: "Laravel's query builder and Eloquent (php-illuminate-database) on PDO_MYSQL",
		require: func(t testing.TB) {
			require(t, "PHP with Illuminate Database and PDO_MYSQL (Debian: php-cli php-mysql php-illuminate-database)",
				"php", "-r", `require "/usr/share/php/Illuminate/Database/autoload.php"; `+
					`exit(class_exists("Illuminate\\Database\\Capsule\\Manager") && extension_loaded("pdo_mysql") && function_exists("pcntl_fork") ? 0 : 1);`)
		},
		argv: func(t testing.TB) []string { return []string{"php", testdataPath(t, "orm", "laravel", "counters.php")} },
	}
	sequelizeORM = ormClient{
		name: "sequelize", what: "Sequelize (npm) on mysql2",
		require: func(t testing.TB) { nodeRequire(t, "sequelize") },
		argv: func(t testing.TB) []string {
			return []string{"node", testdataPath(t, "orm", "sequelize", "counters.js")}
		},
	}
	mysql2ORM = ormClient{
		name: "mysql2", what: "node mysql2 execute()",
		require: func(t testing.TB) { nodeRequire(t, "mysql2/promise") },
		argv:    func(t testing.TB) []string { return []string{"node", testdataPath(t, "orm", "mysql2", "counters.js")} },
	}
	jdbcORM = ormClient{
		name: "jdbc", what: "JDBC PreparedStatement on MariaDB Connector/J (useServerPrepStmts=true)",
		require: func(t testing.TB) {
			require(t, "Java (a JDK) with MariaDB Connector/J 2.x (Debian: default-jdk-headless libmariadb-java)",
				"java", "-XX:-UsePerfData", "-cp", connectorJ, "java/Probe.java")
		},
		argv: func(t testing.TB) []string {
			return []string{"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-cp", connectorJ,
				testdataPath(t, "orm", "jdbc", "Counters.java")}
		},
	}
)

// TestORMDjango: QuerySet.update() with F() expressions (one and two
// counters, pk and pk__in), an instance saved with an F() expression, a
// tenant filter and a soft-delete manager.
func TestORMDjango(t *testing.T) { ormCounterTest(t, djangoORM) }

// TestORMSQLAlchemy: update(Repo).where(...).values(c=Repo.c + n) on a Core
// connection and a Session, an instance attribute set to an expression,
// in_(), a tenant filter and deleted_at IS NULL.
func TestORMSQLAlchemy(t *testing.T) { ormCounterTest(t, sqlalchemyORM) }

// TestORMActiveRecord: increment_counter (with and without touch),
// update_counters (by id and by a list of ids), increment!, a belongs_to
// counter cache, relation update_counters with a tenant condition and under
// a soft-delete default scope.
func TestORMActiveRecord(t *testing.T) { ormCounterTest(t, activeRecordORM) }

// TestORMLaravel: the query builder's increment() with server-side and
// emulated prepares, integer and string ids, extra columns and a tenant
// condition, and Eloquent's increment() (static and on an instance) on a
// model with timestamps and soft deletes.
func TestORMLaravel(t *testing.T) { ormCounterTest(t, laravelORM) }

// TestORMSequelize: Model.increment() (one and two counters, by n) on a
// model with timestamps and paranoid soft deletes and on a plain model,
// instance.increment(), string ids, a tenant condition and deleted_at:
// null.
func TestORMSequelize(t *testing.T) { ormCounterTest(t, sequelizeORM) }

// TestORMNodeMySQL2Execute: mysql2's execute() (parameters sent as DOUBLE,
// strings and BigInts as strings), with query() as the control.
func TestORMNodeMySQL2Execute(t *testing.T) { ormCounterTest(t, mysql2ORM) }

// TestORMHarnessControl runs the ORM test's checks on the textbook
// spelling alone (mysql2 query(): UPDATE repos SET downloads = downloads + 1
// WHERE id = 1), which the proxy has always slotted: it must pass, or the
// harness (not an ORM's spelling) is broken.
func TestORMHarnessControl(t *testing.T) {
	c := mysql2ORM
	c.name, c.what, c.env = "mysql2", "the textbook increment (mysql2 query())", []string{"SP_SPELLINGS=query"}
	ormCounterTest(t, c)
}

// TestORMJDBC: prepared increments as Hibernate/JPA applications send them
// over Connector/J with server-side prepares: in autocommit, in a
// transaction, in an executeBatch() and with a tenant condition.
func TestORMJDBC(t *testing.T) { ormCounterTest(t, jdbcORM) }

// ormEnv is one ORM test's schema, proxy and wire taps.
type ormEnv struct {
	schema  string
	db      *sql.DB // the schema on the server, directly
	srv     *proxy.Server
	logs    *syncBuffer
	rw      *rewrite.Rewriter
	backend *wireTap // between the proxy and the server (nil without taps)
	front   *wireTap // between the client and the proxy (nil without taps)
	addr    string   // where the client connects: the front tap or the proxy
}

// newORMEnv creates the schema and a proxy that rules it, with wire taps
// on both sides of the proxy when taps is set.
func newORMEnv(t testing.TB, taps bool) *ormEnv {
	t.Helper()
	e := &ormEnv{schema: schemaBase(t.Name())}
	server := testdb.Shared()
	stmts := []string{
		"DROP DATABASE IF EXISTS " + e.schema,
		"CREATE DATABASE " + e.schema + " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
		"USE " + e.schema,
	}
	if err := server.Exec(append(stmts, ormSchemaDDL...)...); err != nil {
		t.Fatalf("create schema %s: %v", e.schema, err)
	}
	t.Cleanup(func() {
		if err := server.Exec("DROP DATABASE IF EXISTS " + e.schema); err != nil {
			t.Errorf("drop the test schema: %v", err)
		}
	})
	db, err := sql.Open("mysql", server.DSN(testdb.User, testdb.Password, e.schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e.db = db
	backend := server.Addr
	if taps {
		e.backend = startTap(t, server.Addr)
		backend = e.backend.addr()
	}
	e.rw = catalog.NewRewriter(ormCatalog(e.schema), serverVersion)
	e.srv, e.addr, e.logs = startORMProxy(t, backend, e.rw)
	if taps {
		e.front = startTap(t, e.addr)
		e.addr = e.front.addr()
	}
	return e
}

// startORMProxy starts a proxy like startProxy does (with an info-level
// log), and returns the server (for its Stats), its address and its log.
func startORMProxy(t testing.TB, backend string, rw *rewrite.Rewriter) (*proxy.Server, string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	srv, err := proxy.NewServer(proxy.Config{
		Backend:  backend,
		Rewriter: rw,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetSlotReader(slotReader(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() {
			_ = srv.Close()
			<-done
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(closeLimit):
			t.Errorf("the proxy's Close did not return within %s: a session is stuck inside the proxy (left running)", closeLimit)
		}
		if t.Failed() {
			t.Logf("end of the proxy's log:\n%s", tail(logs.String(), 20))
		}
	})
	return srv, ln.Addr().String(), logs
}

// ormProgramEnv is the environment of an ORM program connecting to addr.
func ormProgramEnv(addr, schema string, extra ...string) []string {
	host, port, _ := net.SplitHostPort(addr)
	return append([]string{
		"SP_HOST=" + host, "SP_PORT=" + port, "SP_DATABASE=" + schema,
		"SP_USER=" + clientUser, "SP_PASSWORD=" + clientPassword,
	}, extra...)
}

// repoState is one row of repos as the server has it.
type repoState struct {
	id      int64
	tenant  int64
	deleted bool
	base    map[string]int64 // counter → base column
	slots   map[string]int64 // counter → SUM(count) of its slot rows
}

// readRepos reads every row of repos with its base counters and slot sums.
func readRepos(t testing.TB, db *sql.DB) map[int64]*repoState {
	t.Helper()
	rows, err := db.Query("SELECT id, tenant_id, deleted_at IS NOT NULL, downloads, stars FROM repos ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]*repoState{}
	for rows.Next() {
		r := &repoState{base: map[string]int64{}, slots: map[string]int64{}}
		var d, s int64
		if err := rows.Scan(&r.id, &r.tenant, &r.deleted, &d, &s); err != nil {
			t.Fatal(err)
		}
		r.base["downloads"], r.base["stars"] = d, s
		out[r.id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range ormCounters {
		q := "SELECT record_id, SUM(count) FROM slotted_counters WHERE record_type = ? GROUP BY record_id"
		srows, err := db.Query(q, c.RecordType)
		if err != nil {
			t.Fatal(err)
		}
		for srows.Next() {
			var id, sum int64
			if err := srows.Scan(&id, &sum); err != nil {
				t.Fatal(err)
			}
			if r := out[id]; r != nil {
				r.slots[c.Name] = sum
			} else {
				t.Errorf("slot rows of %s for record %d, which has no row in repos", c.Name, id)
			}
		}
		srows.Close()
	}
	return out
}

// ormReport is what an ORM program printed.
type ormReport struct {
	incs   map[ormIncKey]*ormIncs
	totals map[ormTotalKey]int64
}

// ormIncKey is one kind of increment: a delta to a counter of a row, under
// a scope ("-": none, "live": deleted_at IS NULL, "tenant=N").
type ormIncKey struct {
	id     int64
	col    string
	delta  int64
	scope  string
	counts bool // whether the program reported affected rows
}

type ormIncs struct {
	calls, affected int64
}

type ormTotalKey struct {
	id  int64
	col string
}

var ormIncLine = regexp.MustCompile(`^inc (\d+) (downloads|stars) (-?\d+) (\S+) (\d+) (\d+|-)$`)
var ormTotalLine = regexp.MustCompile(`^total (\d+) (downloads|stars) (-?\d+)$`)

// parseORMReport parses the "inc" and "total" lines of an ORM program.
func parseORMReport(out string) (*ormReport, error) {
	rep := &ormReport{incs: map[ormIncKey]*ormIncs{}, totals: map[ormTotalKey]int64{}}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if m := ormIncLine.FindStringSubmatch(line); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			delta, _ := strconv.ParseInt(m[3], 10, 64)
			calls, _ := strconv.ParseInt(m[5], 10, 64)
			k := ormIncKey{id: id, col: m[2], delta: delta, scope: m[4], counts: m[6] != "-"}
			if !validScope(k.scope) {
				return nil, fmt.Errorf("unknown scope in %q", line)
			}
			agg := rep.incs[k]
			if agg == nil {
				agg = &ormIncs{}
				rep.incs[k] = agg
			}
			agg.calls += calls
			if k.counts {
				a, _ := strconv.ParseInt(m[6], 10, 64)
				agg.affected += a
			}
			continue
		}
		if m := ormTotalLine.FindStringSubmatch(line); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			v, _ := strconv.ParseInt(m[3], 10, 64)
			k := ormTotalKey{id, m[2]}
			if _, dup := rep.totals[k]; dup {
				return nil, fmt.Errorf("two totals of %s of repo %d", k.col, k.id)
			}
			rep.totals[k] = v
			continue
		}
		return nil, fmt.Errorf("unexpected output line %q", line)
	}
	if len(rep.incs) == 0 || len(rep.totals) == 0 {
		return nil, fmt.Errorf("no inc or no total lines")
	}
	return rep, nil
}

func validScope(s string) bool {
	if s == "-" || s == "live" {
		return true
	}
	n, ok := strings.CutPrefix(s, "tenant=")
	_, err := strconv.ParseInt(n, 10, 64)
	return ok && err == nil
}

// matches reports whether an increment under scope applies to row r.
func (r *repoState) matches(scope string) bool {
	switch {
	case scope == "-":
		return true
	case scope == "live":
		return !r.deleted
	}
	n, _ := strconv.ParseInt(strings.TrimPrefix(scope, "tenant="), 10, 64)
	return r.tenant == n
}

// ormCounterTest runs an ORM's counters program through a ruled proxy and
// checks what the ORM read back and what the server received.
func ormCounterTest(t *testing.T, c ormClient) {
	t.Parallel()
	c.require(t)
	e := newORMEnv(t, true)
	before := readRepos(t, e.db)
	res := runClient(context.Background(), clientCmd{
		argv: c.argv(t),
		env: ormProgramEnv(e.addr, e.schema, append([]string{"SP_MODE=counters",
			"SP_WORKERS=" + strconv.Itoa(ormWorkers), "SP_ITERATIONS=" + strconv.Itoa(ormIterations)}, c.env...)...),
		dir: testdataPath(t, "orm", c.name),
	})
	front := e.front.Events()
	back := e.backend.Events()
	stats := e.srv.Stats()
	// What the ORM sent and what became of it: logged whatever happens.
	shapes, notSlotted := ormShapes(front, back, e.plan)
	t.Logf("%s: what the ORM sent through the proxy (statements naming repos, by shape; "+
		"N = a number, 'S' = a string; first instance; what became of it):\n%s", c.what, shapes)
	t.Logf("what the proxy sent the server (statements naming repos or the slot table, by shape):\n%s",
		formatShapes(groupShapes(back, func(ev tapEvent) bool { return mentions(ev.SQL, "repos") || mentions(ev.SQL, "slotted_counters") })))
	t.Logf("proxy stats: rewritten writes %d, guarded writes %d, rewritten reads %d, retries %d, parse failures %d",
		stats.RewrittenWrites, stats.GuardedWrites, stats.RewrittenReads, stats.Retries, stats.ParseFailures)
	if res.err != nil || res.killed != nil {
		t.Fatalf("%s through the proxy %s\nstderr:\n%s\nstdout:\n%s", c.what, res.describe(),
			tail(res.stderr, 40), tail(res.stdout, 40))
	}
	rep, err := parseORMReport(res.stdout)
	if err != nil {
		t.Fatalf("%s printed what the test cannot read: %v\nstdout:\n%s\nstderr:\n%s", c.what, err,
			tail(res.stdout, 40), tail(res.stderr, 20))
	}
	after := readRepos(t, e.db)

	// (a) Exact totals, read through the ORM and on the server.
	want := map[ormTotalKey]int64{}
	added := map[ormTotalKey]int64{}
	for id, r := range before {
		for _, col := range []string{"downloads", "stars"} {
			want[ormTotalKey{id, col}] = r.base[col] + r.slots[col]
		}
	}
	for k, agg := range rep.incs {
		r := before[k.id]
		match := r != nil && r.matches(k.scope)
		if match {
			want[ormTotalKey{k.id, k.col}] += k.delta * agg.calls
			added[ormTotalKey{k.id, k.col}] += k.delta * agg.calls
		}
		if k.counts {
			wantAffected := int64(0)
			if match {
				wantAffected = agg.calls
			}
			if agg.affected != wantAffected {
				t.Errorf("%d increments of %s of repo %d by %d (scope %s) reported %d affected rows, want %d",
					agg.calls, k.col, k.id, k.delta, k.scope, agg.affected, wantAffected)
			}
		}
	}
	keys := make([]ormTotalKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].id < keys[j].id || keys[i].id == keys[j].id && keys[i].col < keys[j].col
	})
	for _, k := range keys {
		got, ok := rep.totals[k]
		switch {
		case !ok:
			t.Errorf("%s printed no total of %s of repo %d", c.what, k.col, k.id)
		case got != want[k]:
			t.Errorf("%s read %s of repo %d as %d through the proxy, want %d (%d before, %+d by the increments that match the row)",
				c.what, k.col, k.id, got, want[k], want[k]-added[k], added[k])
		}
		if r := after[k.id]; r == nil {
			t.Errorf("repo %d is gone from the server", k.id)
		} else if sum := r.base[k.col] + r.slots[k.col]; sum != want[k] {
			t.Errorf("on the server, %s of repo %d is %d (base %d + slots %d), want %d",
				k.col, k.id, sum, r.base[k.col], r.slots[k.col], want[k])
		}
	}

	// (b) The increments were slotted.
	var problems []string
	if len(notSlotted) > 0 {
		problems = append(problems, fmt.Sprintf("%d increment shape(s) the ORM sent were not slotted:\n%s",
			len(notSlotted), strings.Join(notSlotted, "\n")))
	}
	var backendUpdates []tapEvent
	for _, ev := range back {
		// An UPDATE that matched no row (the proxy's privilege check, or a
		// statement whose WHERE excludes the row, run as written to answer
		// exactly) or failed (a deadlock the proxy retried) changes no base
		// row.
		if (ev.Command == "query" || ev.Command == "execute") && updatesCounters(ev.SQL) && !ev.NoRow && ev.ErrCode == 0 {
			backendUpdates = append(backendUpdates, ev)
		}
	}
	if len(backendUpdates) > 0 {
		problems = append(problems, fmt.Sprintf("the server received %d UPDATE(s) assigning a counter of the base row:\n%s",
			len(backendUpdates), formatShapes(groupShapes(backendUpdates, nil))))
	}
	for _, k := range keys {
		b, a := before[k.id], after[k.id]
		if a == nil {
			continue
		}
		if a.base[k.col] != b.base[k.col] {
			problems = append(problems, fmt.Sprintf("base column %s of repo %d changed from %d to %d (increments must go to the slot table)",
				k.col, k.id, b.base[k.col], a.base[k.col]))
		}
		if got := a.slots[k.col] - b.slots[k.col]; got != added[k] && a.base[k.col] == b.base[k.col] {
			problems = append(problems, fmt.Sprintf("the slot rows of %s of repo %d grew by %d, want %+d",
				k.col, k.id, got, added[k]))
		}
	}
	if stats.GuardedWrites != 0 {
		problems = append(problems, fmt.Sprintf("the proxy ran %d guarded write(s) (slots folded into the base row, base row locked)",
			stats.GuardedWrites))
	}
	if len(problems) > 0 {
		t.Errorf("%s: the increments were not all slotted (the rule on repos.downloads and repos.stars did not apply):\n%s",
			c.what, strings.Join(problems, "\n"))
	}
}

// plan is what the proxy's rewriter makes of a statement in the test's
// schema: the kind of its plan ("" when it is not rewritten at all) and,
// for a statement left as written, why.
func (e *ormEnv) plan(sql string) (kind, reason string) {
	plans, err := e.rw.Rewrite(sql, rewrite.Session{DB: e.schema, Charset: "utf8mb4"})
	switch {
	case err != nil:
		return "", "does not parse: " + err.Error()
	case len(plans) != 1:
		return "", ""
	}
	return plans[0].Kind().String(), plans[0].Reason
}

// ormShapes describes what the client sent, by shape, with what became of
// each shape (plan asks the rewriter), and lists the increment shapes that
// were not slotted.
func ormShapes(front, back []tapEvent, plan func(sql string) (kind, reason string)) (string, []string) {
	// What reached the server as written: query texts, and executed
	// prepared statements' texts.
	reached := map[string]bool{}
	for _, ev := range back {
		if (ev.Command == "query" || ev.Command == "execute") && !ev.NoRow && ev.ErrCode == 0 {
			reached[ev.Command+"\x00"+ev.SQL] = true
		}
	}
	groups := groupShapes(front, func(ev tapEvent) bool { return mentions(ev.SQL, "repos") })
	var b strings.Builder
	var notSlotted []string
	for _, g := range groups {
		b.WriteString(g.String())
		ev := g.first
		if ev.Command == "prepare" {
			continue
		}
		verdict := ""
		switch {
		case updatesCounters(ev.SQL):
			passed := 0
			for _, inst := range g.all {
				if reached[inst.Command+"\x00"+inst.SQL] {
					passed++
				}
			}
			kind, reason := plan(ev.SQL)
			if reason != "" {
				reason = " (" + reason + ")"
			}
			switch {
			case passed > 0 && kind == "increment":
				verdict = fmt.Sprintf("NOT slotted: planned as a slotted increment, but %d of %d ran as written on the base row "+
					"(parameters the upsert does not take)", passed, len(g.all))
			case passed > 0:
				verdict = fmt.Sprintf("NOT slotted: %d of %d reached the server as written, an UPDATE of the base row%s",
					passed, len(g.all), reason)
			case kind == "increment":
				verdict = "slotted"
			case kind == "guarded":
				verdict = "NOT slotted: a guarded write (the row's slots folded into the base row, which is updated and locked)"
			default:
				verdict = "NOT slotted: planned as " + kind + reason
			}
			if verdict != "slotted" {
				notSlotted = append(notSlotted, "  "+strings.TrimRight(g.String(), "\n")+"\n      → "+verdict)
			}
		case isUpdate(ev.SQL):
			verdict = "an UPDATE of repos that assigns no counter"
		default:
			if kind, _ := plan(ev.SQL); kind == "read" {
				verdict = "counter reads rewritten to base + slots"
			}
		}
		if verdict != "" {
			b.WriteString("      → " + verdict + "\n")
		}
	}
	if b.Len() == 0 {
		b.WriteString("  (nothing)\n")
	}
	return b.String(), notSlotted
}

// shapeGroup is the statements of one shape, in order.
type shapeGroup struct {
	shape string
	first tapEvent
	all   []tapEvent
}

func (g shapeGroup) String() string {
	ev := g.first
	var b strings.Builder
	fmt.Fprintf(&b, "  %4d× %s: %s", len(g.all), ev.Command, oneLine(ev.SQL))
	if ev.Command == "execute" {
		if ev.Unknown {
			b.WriteString(" (parameters not decoded)")
		} else {
			ps := make([]string, len(ev.Params))
			for i, p := range ev.Params {
				ps[i] = p.Type + " " + p.Value
			}
			b.WriteString(" ← [" + strings.Join(ps, ", ") + "]")
		}
	}
	if ev.ErrCode != 0 {
		fmt.Fprintf(&b, " (first error %d)", ev.ErrCode)
	}
	b.WriteString("\n")
	return b.String()
}

// groupShapes groups the events keep accepts (all when nil) by shape, in
// order of first appearance.
func groupShapes(events []tapEvent, keep func(tapEvent) bool) []shapeGroup {
	var out []shapeGroup
	index := map[string]int{}
	for _, ev := range events {
		if keep != nil && !keep(ev) {
			continue
		}
		shape := ev.Command + " " + sqlShape(ev.SQL)
		if ev.Command == "execute" {
			types := make([]string, len(ev.Params))
			for i, p := range ev.Params {
				types[i] = p.Type
			}
			shape += " [" + strings.Join(types, ", ") + "]"
		}
		i, ok := index[shape]
		if !ok {
			i = len(out)
			index[shape] = i
			out = append(out, shapeGroup{shape: shape, first: ev})
		}
		out[i].all = append(out[i].all, ev)
	}
	return out
}

func formatShapes(groups []shapeGroup) string {
	var b strings.Builder
	for _, g := range groups {
		b.WriteString(g.String())
	}
	if b.Len() == 0 {
		return "  (nothing)\n"
	}
	return b.String()
}

// oneLine shows newlines and tabs of a statement as escapes.
func oneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
}

// sqlShape replaces a statement's number literals with N and its string
// literals with 'S'; identifiers (also backquoted) and the rest stay.
func sqlShape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) {
				if s[j] == '\\' {
					j += 2
					continue
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			b.WriteString("'S'")
			i = min(j+1, len(s))
		case c == '`':
			j := strings.IndexByte(s[i+1:], '`')
			if j < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteString(s[i : i+j+2])
			i += j + 2
		case isDigit(c) && (i == 0 || !isIdentChar(s[i-1])):
			j := i
			for j < len(s) && (isDigit(s[j]) || s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			b.WriteString("N")
			i = j
		case isIdentChar(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			b.WriteString(s[i:j])
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isIdentChar(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '$' || c >= 0x80
}

// mentions reports whether sql names the identifier name (as a word,
// backquoted or not, case-insensitively).
func mentions(sql, name string) bool {
	lower := strings.ToLower(sql)
	for i := 0; ; {
		j := strings.Index(lower[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		if (start == 0 || !isIdentChar(lower[start-1])) && (end == len(lower) || !isIdentChar(lower[end])) {
			return true
		}
		i = end
	}
}

var updateStmt = regexp.MustCompile(`(?is)^\s*(?:/\*.*?\*/\s*)*update\s+(.+?)\s+set\s+(.+?)(?:\s+where\s+.*)?$`)

func isUpdate(sql string) bool { return updateStmt.MatchString(sql) }

// updatesCounters reports whether sql is an UPDATE of repos (alone or in a
// join) whose SET assigns one of its counters.
func updatesCounters(sql string) bool {
	m := updateStmt.FindStringSubmatch(sql)
	if m == nil || !mentions(m[1], "repos") {
		return false
	}
	for _, a := range splitTopLevel(m[2]) {
		lhs, _, ok := strings.Cut(a, "=")
		if !ok {
			continue
		}
		col := strings.TrimSpace(lhs)
		if i := strings.LastIndexByte(col, '.'); i >= 0 {
			col = col[i+1:]
		}
		col = strings.ToLower(strings.Trim(col, "`"))
		if slices.ContainsFunc(ormCounters, func(c rewrite.Counter) bool { return c.Name == col }) {
			return true
		}
	}
	return false
}

// splitTopLevel splits a SET list at the commas outside parentheses and
// quotes.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
