package main

import (
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// These tests drive the real binary: counts survive a proxy killed with
// SIGKILL, a backend restarted under load, and the rollup command.

// appendConfig adds YAML to the configuration at path.
func appendConfig(t *testing.T, path, yaml string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(yaml); err != nil {
		t.Fatal(err)
	}
}

func openProxy(t testing.TB, srv *testdb.Server, addr, schema string) *sql.DB {
	t.Helper()
	dsn := strings.Replace(srv.DSN(testdb.User, testdb.Password, schema, "timeout=5s&readTimeout=10s&writeTimeout=10s"), srv.Addr, addr, 1)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// total is base + slots of repos 1 and 2, read directly from MariaDB.
func total(t *testing.T, srv *testdb.Server, schema string) int64 {
	t.Helper()
	db, err := sql.Open("mysql", srv.DSN(testdb.User, testdb.Password, schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	q := "SELECT SUM(downloads) + COALESCE((SELECT SUM(count) FROM slotted_counters WHERE record_id IN (1, 2) AND record_type = " +
		"(SELECT record_type FROM slotproxy_record_types WHERE column_name = 'downloads')), 0) FROM repos WHERE id IN (1, 2)"
	for i := 0; ; i++ {
		err := db.QueryRow(q).Scan(&n)
		if err == nil {
			return n
		}
		if i == 50 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// load runs increments from 16 clients until stop is closed and counts
// acknowledged increments and attempts whose outcome is unknown (errors).
type load struct {
	acked, unknown atomic.Int64
	stop           chan struct{}
	wg             sync.WaitGroup
}

func startLoad(db *sql.DB) *load {
	l := &load{stop: make(chan struct{})}
	for w := range 16 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					_, err = db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = ?", 1+(w+i)%2)
				} else {
					_, err = db.Exec(fmt.Sprintf("UPDATE repos SET downloads = downloads + 1 WHERE id = %d", 1+(w+i)%2))
				}
				if err == nil {
					l.acked.Add(1)
				} else {
					l.unknown.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

func migrateSchema(t testing.TB, path string) {
	t.Helper()
	if _, stderr, code := runCLI(t, "migrate", "--config", path); code != 0 {
		t.Fatalf("migrate: %d %s", code, stderr)
	}
}

// TestProxyKilledMidRun: SIGKILL the proxy while 16 clients increment; after
// a restart the total equals the acknowledged increments plus at most the
// statements whose outcome the clients never learned.
func TestProxyKilledMidRun(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	appendConfig(t, path, "rollup:\n  interval: 100ms\n")
	migrateSchema(t, path)
	srv := testdb.Shared()
	base := total(t, srv, schema)

	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, "msg=listening")
	db := openProxy(t, srv, listen, schema)
	l := startLoad(db)
	time.Sleep(1500 * time.Millisecond)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	time.Sleep(300 * time.Millisecond)
	unknownAtKill := l.unknown.Load()
	// The proxy comes back on the same address; clients carry on.
	p2 := startServe(t, "serve", "--config", path)
	p2.waitFor(t, "msg=listening")
	time.Sleep(700 * time.Millisecond)
	l.finish()

	got := total(t, srv, schema)
	acked, unknown := l.acked.Load(), l.unknown.Load()
	t.Logf("acknowledged %d increments; %d attempts failed (%d around the kill); total %d = base %d + %d",
		acked, unknown, unknownAtKill, got, base, got-base)
	if got < base+acked || got > base+acked+unknown {
		t.Fatalf("total %d outside [%d, %d]: an acknowledged increment was lost or one was counted twice",
			got, base+acked, base+acked+unknown)
	}
	if acked == 0 {
		t.Fatal("no increment went through")
	}
}

// TestBackendRestartUnderLoad: the backend crashes (SIGKILL) and restarts
// while clients increment through the proxy: clients get errors meanwhile,
// the proxy recovers without a restart, and no acknowledged increment is
// lost.
func TestBackendRestartUnderLoad(t *testing.T) {
	own, err := testdb.Start(testdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	if err := testdb.Setup(own); err != nil {
		t.Fatal(err)
	}
	const schema = "restart_test"
	if err := own.Exec("CREATE DATABASE "+schema,
		"CREATE TABLE "+schema+".repos (id BIGINT NOT NULL PRIMARY KEY, downloads BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO "+schema+".repos VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/rules", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/rules/repos.yaml", []byte("table: "+schema+".repos\nkey: id\ncounters: [downloads]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	path := dir + "/config.yaml"
	cfg := fmt.Sprintf("listen: %s\nbackend: %s\nrules: rules\nadmin:\n  user: %s\n  password: %s\nrollup:\n  interval: 100ms\nmetrics:\n  listen: %s\n",
		listen, own.Addr, own.RootUser, own.RootPassword, freeAddr(t))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, "msg=listening")
	db := openProxy(t, own, listen, schema)
	l := startLoad(db)
	time.Sleep(time.Second)
	if err := own.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	failedWhileDown := l.unknown.Load()
	if err := own.Restart(); err != nil {
		t.Fatal(err)
	}
	ackedAtRestart := l.acked.Load()
	deadline := time.Now().Add(15 * time.Second)
	for l.acked.Load() < ackedAtRestart+200 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	l.finish()
	if l.acked.Load() < ackedAtRestart+200 {
		t.Fatalf("the proxy did not recover after the backend restart:\n%s", p.stderr())
	}
	got := total(t, own, schema)
	acked, unknown := l.acked.Load(), l.unknown.Load()
	t.Logf("acknowledged %d increments; %d attempts failed (%d while the backend was down); total %d", acked, unknown, failedWhileDown, got)
	if failedWhileDown == 0 {
		t.Fatal("no client noticed the backend going away")
	}
	if got < acked || got > acked+unknown {
		t.Fatalf("total %d outside [%d, %d]", got, acked, acked+unknown)
	}
}

// TestRollupCommand: "rollup --all --once" folds every slot row into the
// base rows, so a rule can be removed without losing counts.
func TestRollupCommand(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	appendConfig(t, path, "rollup:\n  enabled: false\n")
	migrateSchema(t, path)
	srv := testdb.Shared()
	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, "msg=listening")
	db := openProxy(t, srv, listen, schema)
	for i := range 50 {
		if _, err := db.Exec("UPDATE repos SET downloads = downloads + 2 WHERE id = ?", 1+i%2); err != nil {
			t.Fatal(err)
		}
	}
	direct, err := sql.Open("mysql", srv.DSN(testdb.User, testdb.Password, schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var slots int
	if err := direct.QueryRow("SELECT COUNT(*) FROM slotted_counters").Scan(&slots); err != nil || slots == 0 {
		t.Fatalf("no slot rows before the roll-up (%d, %v)", slots, err)
	}
	stdout, stderr, code := runCLI(t, "rollup", "--config", path, "--all", "--once")
	if code != 0 {
		t.Fatalf("rollup: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "folded 2 records") {
		t.Fatalf("rollup output: %q", stdout)
	}
	var base int64
	if err := direct.QueryRow("SELECT COUNT(*) FROM slotted_counters").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if err := direct.QueryRow("SELECT SUM(downloads) FROM repos WHERE id IN (1, 2)").Scan(&base); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || base != 100 {
		t.Fatalf("after rollup --all --once: %d slot rows, base total %d; want 0 and 100", slots, base)
	}
	// In loop mode it says it started, at the default log level.
	loop := startServe(t, "rollup", "--config", path)
	loop.waitFor(t, `msg="roll-up started"`)
}
