package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

// clusterNode is one node of the test cluster with its proxy.
type clusterNode struct {
	srv     *testdb.Server
	listen  string
	metrics string // serve's HTTP endpoint
	config  string
	proc    *process
	db      *sql.DB // through the proxy
}

// TestCluster: one proxy per node in front of a 3-node multi-primary
// cluster, all on loopback, as operations.md "In front of a cluster"
// deploys it: MariaDB Galera Cluster (Debian's galera-4) on the MariaDB run,
// a MySQL Group Replication group in multi-primary mode (the plugin of the
// MySQL chroot) on the MySQL run.
//   - The three proxies start at once, each registering a counter that no
//     proxy registered before from its own node (certification failures
//     between them are retried): they agree on its record type.
//   - Each takes its own part of the slots from its node (Galera:
//     wsrep_local_index of wsrep_cluster_size; Group Replication: its
//     place among the ONLINE members): three distinct parts of three.
//   - 32 clients, 10 or 11 per proxy, increment one hot record in autocommit and
//     in transactions (an increment, a read of it, COMMIT: see handOut),
//     retrying certification failures as an application would, then all
//     in autocommit, while each proxy's roll-up keeps the record folded
//     within 2 s; then absolute writes, a delete and a re-insert through
//     different nodes.
//   - Every total is exact through every proxy, and on every node's base
//     rows once the roll-ups of all three proxies have folded the slots.
func TestCluster(t *testing.T) {
	c := startCluster(t)
	// A counter no proxy has registered (stars): the three register it at
	// once.
	nodes := clusterProxies(t, c, "downloads", "downloads, stars", 48, "500ms")
	// The load: autocommit increments of downloads, transactions of stars.
	var (
		downloads, stars     atomic.Int64
		broken               atomic.Int64 // statements whose connection broke
		retriedAC, retriedTx atomic.Int64
		wg                   sync.WaitGroup
		stop                 = make(chan struct{})
		errs                 = make(chan error, 32)
		handOuts             atomic.Bool
	)
	handOuts.Store(true)
	for i := range 32 {
		db := nodes[i%3].db
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				tx := i%3 == 0 && handOuts.Load()
				if tx {
					_, err = handOut(db)
					if err == nil {
						stars.Add(1)
					}
				} else {
					_, err = db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
					if err == nil {
						downloads.Add(1)
					}
				}
				if certificationFailure(err) {
					// Certification failed: the application tries again.
					if tx {
						retriedTx.Add(1)
					} else if retriedAC.Add(1) == 1 {
						t.Logf("an autocommit increment failed: %v", err)
					}
					continue
				}
				if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
					// The connection broke mid-statement (seen on a
					// loaded machine): its outcome is unknown.
					if broken.Add(1) == 1 {
						clusterState(t, c) // what held it up
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Meanwhile every proxy's roll-up folds its own part of the hot
	// record's slots (the others' are written by increments through other
	// nodes, and a fold of them would lose certification against them).
	// After 3 s the clients of proxy 0 turn from hand-outs to autocommit
	// increments too: with 32 writers of one record each proxy's
	// slotproxy_rollup_staleness_seconds stays under 2 s, a max_staleness
	// of 4 passes. (Passes every 500 ms, not faster: each fold of the hot
	// record that a node applies may meet the Galera stall of limits.md.)
	// (While hand-outs queue on the base row, which each
	// holds from its read to its COMMIT, a fold waits its turn, up to a
	// second a pass: logged, not asserted.)
	sample := func() []float64 {
		var out []float64
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			for _, n := range nodes {
				out = append(out, scrape(t, n.metrics)["slotproxy_rollup_staleness_seconds"])
			}
		}
		return out
	}
	time.Sleep(2 * time.Second)
	withHandOuts := sample()
	handOuts.Store(false)
	time.Sleep(2 * time.Second)
	pausedBefore := flowControlPaused(t, c)
	staleness := sample()
	paused := flowControlPaused(t, c) - pausedBefore
	if slices.Max(staleness) >= 2 {
		clusterState(t, c) // what held the roll-up up
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a client failed: %v", err)
	}
	t.Logf("slotproxy_rollup_staleness_seconds every 200ms on each proxy, with hand-outs: %v", withHandOuts)
	t.Logf("slotproxy_rollup_staleness_seconds every 200ms on each proxy, 32 writers: %v", staleness)
	switch worst := slices.Max(staleness); {
	case worst < 2:
	case paused >= 500*time.Millisecond:
		// Galera's flow control paused the cluster (every client of it
		// stopped): the stall of limits.md, not a roll-up that fell
		// behind.
		t.Logf("slotproxy_rollup_staleness_seconds reached %.1f s while flow control paused the nodes for %v in all (limits.md: a Galera cluster under a hot load can stall)", worst, paused)
	default:
		t.Errorf("slotproxy_rollup_staleness_seconds reached %.1f s with 32 writers of one record (flow control paused the nodes %v in all), want under 2 s", worst, paused)
	}
	t.Logf("%d autocommit increments (%d failed certification and were retried by the clients), %d transactions committed (%d failed certification)",
		downloads.Load(), retriedAC.Load(), stars.Load(), retriedTx.Load())

	// Writes of another record through different nodes, one at a time
	// (each waits until its node has applied what came before: see
	// syncWait).
	for _, step := range []struct {
		node int
		sql  string
	}{
		{1, "UPDATE repos SET downloads = downloads + 7 WHERE id = 2"},
		{2, "UPDATE repos SET downloads = 500 WHERE id = 2"},
		{0, "UPDATE repos SET downloads = downloads + 5 WHERE id = 2"},
		{1, "DELETE FROM repos WHERE id = 2"},
		{2, "INSERT INTO repos (id, name) VALUES (2, 'two again')"},
		{0, "UPDATE repos SET downloads = downloads + 3 WHERE id = 2"},
		{1, "UPDATE repos SET downloads = downloads + 4 WHERE id = 2"},
	} {
		if _, err := syncedExec(nodes[step.node].db, step.sql); err != nil {
			t.Fatalf("through node %d: %s: %v", step.node, step.sql, err)
		}
	}
	// A statement whose connection broke may or may not have counted.
	var d, st int64
	if _, err := fmt.Sscanf(syncedTotals(t, nodes[0].db, "SELECT downloads, stars, 0 FROM repos WHERE id = 1"), "%d:%d:0", &d, &st); err != nil {
		t.Fatal(err)
	}
	if n := broken.Load(); n > 0 {
		t.Logf("%d statements ended with a broken connection (outcome unknown)", n)
	}
	if d < downloads.Load() || st < stars.Load() || d+st > downloads.Load()+stars.Load()+broken.Load() {
		t.Fatalf("through proxy 0: downloads %d, stars %d; want %d and %d, plus at most %d between them", d, st, downloads.Load(), stars.Load(), broken.Load())
	}
	want := fmt.Sprintf("1:%d:%d 2:7:0", d, st)
	for i, n := range nodes {
		if got := syncedTotals(t, n.db, "SELECT id, downloads, stars FROM repos ORDER BY id"); got != want {
			t.Errorf("through proxy %d: %s, want %s", i, got, want)
		}
	}
	// Folded by the roll-ups: every node's base rows hold the totals.
	for i, n := range nodes {
		direct, err := sql.Open("mysql", n.srv.DSN(testdb.User, testdb.Password, clusterSchema, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer direct.Close()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := syncedTotals(t, direct, "SELECT id, downloads, stars FROM repos ORDER BY id")
			left := syncedTotals(t, direct, "SELECT COUNT(*), COALESCE(SUM(count), 0), 0 FROM slotted_counters WHERE count <> 0")
			if got == want && left == "0:0:0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d's base rows: %s with slots %s left, want %s folded", i, got, left, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// One record type for stars, whichever proxy registered it.
	direct, err := sql.Open("mysql", nodes[2].srv.DSN(testdb.User, testdb.Password, clusterSchema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	types := syncedTotals(t, direct, "SELECT COUNT(*), MIN(record_type), MAX(record_type) FROM slotproxy_record_types WHERE column_name = 'stars'")
	if !strings.HasPrefix(types, "1:") {
		t.Errorf("record types of stars (count:min:max): %s", types)
	}

	// Kills under load: proxy 0 (SIGKILL) after half a second, node 2's
	// server (SIGKILL) after one. Their clients' statements in flight end
	// in errors (the outcome unknown to the client; never a hang); the
	// total on the nodes left is the increments acknowledged plus at most
	// those unknown ones, and proxy 1's roll-up folds it into both.
	before := downloads.Load()
	var acked, unknown atomic.Int64
	stop = make(chan struct{})
	for i := range 24 {
		db := nodes[i%3].db
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
				switch {
				case err == nil:
					acked.Add(1)
				case certificationFailure(err):
				default:
					unknown.Add(1) // its proxy or its node is gone
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if err := nodes[0].proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := nodes[2].srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("clients still waiting 30s after the kills")
	}
	t.Logf("with kills: %d increments acknowledged, %d clients ended by an error", acked.Load(), unknown.Load())
	if unknown.Load() < 8 {
		t.Errorf("%d clients ended by an error; want at least the 16 of the killed proxy and node", unknown.Load())
	}
	lo, hi := before+acked.Load(), before+acked.Load()+unknown.Load()
	total := func(db *sql.DB) int64 {
		var a, n, b int64
		_, err := fmt.Sscanf(syncedTotals(t, db, "SELECT downloads, 0, 0 FROM repos WHERE id = 1"), "%d:%d:%d", &n, &a, &b)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	got := total(nodes[1].db)
	if got < lo || got > hi {
		t.Fatalf("downloads through proxy 1 after the kills: %d, want %d to %d", got, lo, hi)
	}
	for _, i := range []int{0, 1} {
		direct, err := sql.Open("mysql", nodes[i].srv.DSN(testdb.User, testdb.Password, clusterSchema, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer direct.Close()
		deadline := time.Now().Add(20 * time.Second)
		for {
			base := total(direct)
			left := syncedTotals(t, direct, "SELECT COUNT(*), COALESCE(SUM(count), 0), 0 FROM slotted_counters WHERE count <> 0")
			if base == got && left == "0:0:0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d's base row after the kills: %d with slots %s left, want %d folded", i, base, left, got)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The cluster has two nodes now: proxy 1 takes one of two parts of
	// the slots (without a reload), so that it and a proxy of node 0 share
	// them again.
	changed := regexp.MustCompile(`msg="slot partition changed[^"]*" count=(\d+) index=(\d+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := changed.FindAllStringSubmatch(nodes[1].proc.stderr(), -1)
		if len(m) > 0 && m[len(m)-1][1] == "2" {
			t.Logf("proxy 1 after node 2 left: part %s of %s", m[len(m)-1][2], m[len(m)-1][1])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy 1 did not take a part of two slots within 30 s of node 2's kill; its log says: %q", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterSchema is the schema of the test cluster's application.
const clusterSchema = "cluster_app"

// startCluster starts a 3-node multi-primary cluster of the test server's
// kind (Galera on MariaDB, Group Replication on MySQL) with the test
// accounts and the schema cluster_app: repos with records 1 and 2.
func startCluster(tb testing.TB) *testdb.Cluster {
	tb.Helper()
	var (
		c   *testdb.Cluster
		err error
	)
	if testdb.Shared().IsMariaDB() {
		c, err = testdb.StartGalera(3, testdb.Options{Logf: tb.Logf})
	} else {
		c, err = testdb.StartGroupReplication(3, testdb.Options{Logf: tb.Logf})
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Stop() })
	first := c.Nodes[0]
	if err := testdb.Setup(first); err != nil {
		tb.Fatal(err)
	}
	if err := first.Exec(
		"CREATE DATABASE "+clusterSchema,
		"CREATE TABLE "+clusterSchema+".repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL DEFAULT '', downloads BIGINT NOT NULL DEFAULT 0, stars INT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO "+clusterSchema+".repos (id, name) VALUES (1, 'one'), (2, 'two')",
	); err != nil {
		tb.Fatal(err)
	}
	return c
}

// clusterProxies migrates a rule on repos with the counters migrated, then
// rules the counters served (which may name more, for serve to register)
// and starts one proxy per node of c, all at once, each with the default
// slot_partition (auto) and a roll-up every interval ("" for the default).
// Each must take its own part of the slots, of three.
func clusterProxies(tb testing.TB, c *testdb.Cluster, migrated, served string, slots int, interval string) []*clusterNode {
	tb.Helper()
	dir := tb.TempDir()
	rules := filepath.Join(dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		tb.Fatal(err)
	}
	writeRule := func(counters string) {
		rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [%s]\nslots: %d\n", clusterSchema, counters, slots)
		if err := os.WriteFile(filepath.Join(rules, "repos.yaml"), []byte(rule), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	writeRule(migrated)
	nodes := make([]*clusterNode, len(c.Nodes))
	for i, srv := range c.Nodes {
		n := &clusterNode{srv: srv, listen: freeAddr(tb), metrics: freeAddr(tb), config: filepath.Join(dir, fmt.Sprintf("node%d.yaml", i))}
		cfg := fmt.Sprintf("listen: %s\nbackend: %s\nrules: rules\nadmin:\n  user: %s\n  password: %s\nmetrics:\n  listen: %s\n",
			n.listen, srv.Addr, srv.RootUser, srv.RootPassword, n.metrics)
		if interval != "" {
			cfg += "rollup:\n  interval: " + interval + "\n"
		}
		if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
			tb.Fatal(err)
		}
		nodes[i] = n
	}
	migrateSchema(tb, nodes[0].config)
	writeRule(served)
	for _, n := range nodes {
		n.proc = startServe(tb, "serve", "--config", n.config)
	}
	tb.Cleanup(func() {
		if !tb.Failed() {
			return
		}
		// What the proxies said that was not routine.
		for i, n := range nodes {
			var lines []string
			for _, l := range strings.Split(n.proc.stderr(), "\n") {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 40 {
				lines = append(lines[:20], lines[len(lines)-20:]...)
			}
			tb.Logf("proxy %d's warnings and errors:\n%s", i, strings.Join(lines, "\n"))
		}
		clusterState(tb, c)
	})
	parts := map[string]bool{}
	for i, n := range nodes {
		line := n.proc.waitFor(tb, "slot partition")
		if logValue(tb, line, "count") != "3" {
			tb.Fatalf("proxy %d: %s", i, line)
		}
		parts[logValue(tb, line, "index")] = true
		n.proc.waitFor(tb, "msg=listening")
		n.db = openProxy(tb, n.srv, n.listen, clusterSchema)
		n.db.SetMaxOpenConns(16)
	}
	if len(parts) != 3 {
		tb.Fatalf("the proxies took the parts %v of the slots, want three distinct ones", parts)
	}
	return nodes
}

// certificationFailure reports whether err is a cluster's certification
// failure: 1213 on Galera; in a Group Replication group 3101, or 1180
// with the handler's deadlock (error 149).
func certificationFailure(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 3101 || me.Number == 1180 && strings.Contains(me.Message, "error 149"))
}

// syncWait makes a session's statements wait until its node has applied
// every transaction the cluster committed before them.
func syncWait() string {
	if testdb.Shared().IsMariaDB() {
		return "SET SESSION wsrep_sync_wait = 15"
	}
	return "SET SESSION group_replication_consistency = 'BEFORE'"
}

// syncedExec runs one statement on a connection that first waits until its
// node has applied every write committed on the cluster before.
func syncedExec(db *sql.DB, q string) (sql.Result, error) {
	for attempt := 1; ; attempt++ {
		conn, err := db.Conn(context.Background())
		if err != nil {
			return nil, err
		}
		if _, err := conn.ExecContext(context.Background(), syncWait()); err != nil {
			conn.Close()
			// A pooled connection that broke while idle (the proxy ended
			// it during a stall): q was not sent, so another is safe.
			if attempt < 3 && (errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn)) {
				continue
			}
			return nil, err
		}
		res, err := conn.ExecContext(context.Background(), q)
		conn.Close()
		return res, err
	}
}

// syncedTotals runs a query of three integer columns, as syncedExec does,
// and renders its rows as "a:b:c a:b:c".
func syncedTotals(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, err := syncedRows(db, q)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1047 && time.Now().Before(deadline) {
			// A Galera node that is not in the primary component yet
			// (the cluster re-forms after a node was killed): as
			// directly, the application tries again.
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// syncedRows is one attempt of syncedTotals.
func syncedRows(db *sql.DB, q string) (string, error) {
	conn, err := db.Conn(context.Background())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), syncWait()); err != nil {
		return "", err
	}
	rows, err := conn.QueryContext(context.Background(), q)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a, b, c int64
		if err := rows.Scan(&a, &b, &c); err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("%d:%d:%d", a, b, c))
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	sort.Strings(out)
	return strings.Join(out, " "), nil
}

// TestClusterStartups: the proxies' roll-up passes every 10 s in front of a
// cluster when rollup.interval is not set. Then 20 times, three proxies
// (one per node) start at once
// while the rules name a counter that no proxy has registered yet: each
// registers it from its own node, their inserts fail certification against
// each other and are retried. Every proxy must start (none may exit) and
// all must agree on the new counter's record type.
func TestClusterStartups(t *testing.T) {
	c := startCluster(t)
	const rounds = 20
	alter := "ALTER TABLE " + clusterSchema + ".repos"
	for k := 1; k <= rounds; k++ {
		if k > 1 {
			alter += ","
		}
		alter += fmt.Sprintf(" ADD c%d INT NOT NULL DEFAULT 0", k)
	}
	if err := c.Nodes[0].Exec(alter); err != nil {
		t.Fatal(err)
	}
	nodes := clusterProxies(t, c, "downloads", "downloads", 48, "")
	// rollup.interval not set: in front of a cluster, a pass every 10 s.
	for i, n := range nodes {
		line := ""
		for l := range strings.SplitSeq(n.proc.stderr(), "\n") {
			if strings.Contains(l, `msg="roll-up started"`) {
				line = l
			}
		}
		if got := logValue(t, line, "interval"); got != config.ClusterRollupInterval.String() {
			t.Errorf("proxy %d: roll-up interval %q, want %v (%s)", i, got, config.ClusterRollupInterval, line)
		}
	}
	rules := filepath.Join(filepath.Dir(nodes[0].config), "rules", "repos.yaml")
	direct, err := sql.Open("mysql", c.Nodes[0].DSN(testdb.User, testdb.Password, clusterSchema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	for k := 1; k <= rounds; k++ {
		for _, n := range nodes {
			if err := n.proc.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-n.proc.exited
		}
		rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, c%d]\nslots: 48\n", clusterSchema, k)
		if err := os.WriteFile(rules, []byte(rule), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			n.proc = startServe(t, "serve", "--config", n.config)
		}
		for i, n := range nodes {
			line := n.proc.waitFor(t, "msg=\"loaded rules\"")
			if !strings.Contains(line, "tables=1") {
				t.Fatalf("round %d, proxy %d: %s", k, i, line)
			}
			n.proc.waitFor(t, "msg=listening")
		}
		types := syncedTotals(t, direct, fmt.Sprintf("SELECT COUNT(*), MIN(record_type), MAX(record_type) FROM slotproxy_record_types WHERE column_name = 'c%d'", k))
		if !strings.HasPrefix(types, "1:") {
			t.Fatalf("round %d: record types of c%d (count:min:max): %s", k, k, types)
		}
	}
}

// flowControlPaused returns how long Galera's flow control has paused the
// nodes of c since they started, summed over the nodes (0 on Group
// Replication).
func flowControlPaused(t *testing.T, c *testdb.Cluster) time.Duration {
	t.Helper()
	if !testdb.Shared().IsMariaDB() {
		return 0
	}
	var sum time.Duration
	for i, srv := range c.Nodes {
		db, err := sql.Open("mysql", srv.DSN(srv.RootUser, srv.RootPassword, "", "timeout=2s&readTimeout=5s"))
		if err != nil {
			t.Fatal(err)
		}
		var name string
		var ns int64
		err = db.QueryRow("SHOW GLOBAL STATUS LIKE 'wsrep_flow_control_paused_ns'").Scan(&name, &ns)
		db.Close()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// clusterState logs what each node of c is doing: its replication state,
// its transactions and their lock waits, and its sessions.
func clusterState(t testing.TB, c *testdb.Cluster) {
	t.Helper()
	queries := []string{
		"SELECT id, user, command, time, state, LEFT(info, 160) FROM information_schema.processlist WHERE command <> 'Sleep'",
		"SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id, trx_operation_state, trx_rows_locked, LEFT(trx_query, 160) FROM information_schema.innodb_trx",
	}
	if testdb.Shared().IsMariaDB() {
		queries = append(queries, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state_comment', 'wsrep_flow_control_paused', 'wsrep_flow_control_sent', 'wsrep_flow_control_recv', 'wsrep_local_recv_queue', 'wsrep_local_send_queue', 'wsrep_cluster_status')",
			"SELECT * FROM information_schema.innodb_lock_waits")
	} else {
		queries = append(queries, "SELECT MEMBER_HOST, MEMBER_PORT, MEMBER_STATE, COUNT_TRANSACTIONS_IN_QUEUE, COUNT_TRANSACTIONS_REMOTE_IN_APPLIER_QUEUE FROM performance_schema.replication_group_member_stats JOIN performance_schema.replication_group_members USING (MEMBER_ID)",
			"SELECT REQUESTING_ENGINE_TRANSACTION_ID, BLOCKING_ENGINE_TRANSACTION_ID FROM performance_schema.data_lock_waits")
	}
	for i, srv := range c.Nodes {
		db, err := sql.Open("mysql", srv.DSN(srv.RootUser, srv.RootPassword, "", "timeout=2s&readTimeout=5s"))
		if err != nil {
			t.Logf("node %d: %v", i, err)
			continue
		}
		for _, q := range queries {
			rows, err := db.Query(q)
			if err != nil {
				t.Logf("node %d: %s: %v", i, q, err)
				continue
			}
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]sql.NullString, len(cols))
				ptrs := make([]any, len(vals))
				for j := range vals {
					ptrs[j] = &vals[j]
				}
				if err := rows.Scan(ptrs...); err != nil {
					break
				}
				line := make([]string, len(vals))
				for j, v := range vals {
					line[j] = cols[j] + "=" + v.String
				}
				t.Logf("node %d: %s", i, strings.Join(line, " "))
			}
			rows.Close()
		}
		db.Close()
	}
}
