package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// sysbenchDB is the database the sysbench tables (sbtest1, sbtest2) live in,
// apart from the other tests' tables.
const sysbenchDB = "slotproxy_sysbench"

// sysbenchResult is what the tests read from a sysbench report.
type sysbenchResult struct {
	transactions, queries int64
	// ignoredErrors counts the errors sysbench counted and went on after
	// (those in --mysql-ignore-errors); any other error is fatal and ends
	// the run with a non-zero exit status.
	ignoredErrors int64
	reconnects    int64
	tps, qps      float64
	avgLatencyMS  float64
	output        string
}

// The lines of a sysbench 1.0 report that the tests read.
var (
	sysbenchTransactions = regexp.MustCompile(`(?m)^\s*transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)`)
	sysbenchQueries      = regexp.MustCompile(`(?m)^\s*queries:\s+(\d+)\s+\(([\d.]+) per sec\.\)`)
	sysbenchErrors       = regexp.MustCompile(`(?m)^\s*(?:ignored )?errors:\s+(\d+)\s`)
	sysbenchReconnects   = regexp.MustCompile(`(?m)^\s*reconnects:\s+(\d+)\s`)
	sysbenchAvgLatency   = regexp.MustCompile(`(?m)^\s*avg:\s+([\d.]+)\s*$`)
)

// parseSysbench reads the statistics of a sysbench "run" report.
func parseSysbench(out string) (sysbenchResult, error) {
	var errs []error
	field := func(re *regexp.Regexp, i int) string {
		m := re.FindStringSubmatch(out)
		if m == nil {
			errs = append(errs, fmt.Errorf("sysbench report has no line matching %s", re))
			return "0"
		}
		return m[i]
	}
	integer := func(re *regexp.Regexp, i int) int64 {
		n, err := strconv.ParseInt(field(re, i), 10, 64)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	float := func(re *regexp.Regexp, i int) float64 {
		f, err := strconv.ParseFloat(field(re, i), 64)
		if err != nil {
			errs = append(errs, err)
		}
		return f
	}
	r := sysbenchResult{
		transactions:  integer(sysbenchTransactions, 1),
		tps:           float(sysbenchTransactions, 2),
		queries:       integer(sysbenchQueries, 1),
		qps:           float(sysbenchQueries, 2),
		ignoredErrors: integer(sysbenchErrors, 1),
		reconnects:    integer(sysbenchReconnects, 1),
		avgLatencyMS:  float(sysbenchAvgLatency, 1),
		output:        out,
	}
	return r, errors.Join(errs...)
}

// sysbench runs Debian's sysbench (libmariadb, server-side prepared
// statements) against addr as testdb.User and returns its
// combined output. A non-zero exit status, which is how sysbench reports an
// error that is not in --mysql-ignore-errors, fails the test.
func sysbench(t *testing.T, addr string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("sysbench")
	if err != nil {
		t.Fatal("sysbench is required: run scripts/deps.sh to install it: ", err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{
		"--db-driver=mysql",
		"--mysql-host=" + host, // an IP address, so TCP rather than the unix socket
		"--mysql-port=" + port,
		"--mysql-user=" + testdb.User,
		"--mysql-password=" + testdb.Password,
		"--mysql-db=" + sysbenchDB,
		"--db-ps-mode=auto", // server-side prepared statements (COM_STMT_PREPARE/EXECUTE)
		"--tables=2",
		"--table-size=1000",
	}, args...)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sysbench %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stmtExecutes returns the backend's global count of COM_STMT_EXECUTE.
func stmtExecutes(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_stmt_execute'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSysbench runs sysbench through the proxy: it must finish without a
// single error, and its prepared statements must reach the backend as such.
//
// Zero errors: sysbench counts the errors listed in --mysql-ignore-errors
// (default 1213 deadlock, 1205 lock wait timeout, 1020 record changed) and
// goes on; any other error is fatal (exit status 1). oltp_read_write
// deadlocks on its own at 4 threads, directly as well: its transactions lock
// random rows of 1000 in random order, and with --mysql-ignore-errors=none a
// direct 4-thread run typically dies of 1213 within seconds. So the strict
// check (--mysql-ignore-errors=none, nothing counted) uses one thread, and
// the 4-thread run asserts that no other error occurred (exit status 0) and
// that no connection was lost (no reconnects).
func TestSysbench(t *testing.T) {
	if _, err := exec.LookPath("sysbench"); err != nil {
		t.Fatal("sysbench is required: run scripts/deps.sh to install it: ", err)
	}
	direct := testdb.Shared().Addr
	db := directDB(t, "")
	mustExec(t, db, "DROP DATABASE IF EXISTS "+sysbenchDB)
	mustExec(t, db, "CREATE DATABASE "+sysbenchDB)
	t.Cleanup(func() { mustExec(t, db, "DROP DATABASE IF EXISTS "+sysbenchDB) })

	sysbench(t, direct, "oltp_read_write", "prepare")
	p := startProxy(t, nil)

	// unprepared returns how many of a workload's statements per
	// transaction sysbench sends as text, measured directly on the server
	// in a short run: none on MariaDB; on MySQL one (a transaction
	// statement MySQL does not prepare, so sysbench sends it as text).
	unpreparedOf := map[string]int64{}
	unprepared := func(t *testing.T, workload string) int64 {
		t.Helper()
		if n, ok := unpreparedOf[workload]; ok {
			return n
		}
		before := stmtExecutes(t, db)
		out := sysbench(t, direct, workload, "--threads=1", "--time=1", "run")
		executes := stmtExecutes(t, db) - before
		r, err := parseSysbench(out)
		if err != nil || r.transactions <= 0 {
			t.Fatalf("direct %s run: %v\n%s", workload, err, out)
		}
		// Rounded down: other connections can only add executes.
		n := max(r.queries-executes, 0) / r.transactions
		t.Logf("%s directly: %d queries, %d COM_STMT_EXECUTE in %d transactions: %d text statements per transaction",
			workload, r.queries, executes, r.transactions, n)
		unpreparedOf[workload] = n
		return n
	}

	// run runs a sysbench test through the proxy and checks what every run
	// must show: work done, no reconnects, and every query that is a
	// server-side prepared statement directly one through the proxy.
	run := func(t *testing.T, args ...string) sysbenchResult {
		t.Helper()
		text := unprepared(t, args[0])
		before := stmtExecutes(t, db)
		out := sysbench(t, p.addr, append(args, "run")...)
		executes := stmtExecutes(t, db) - before
		r, err := parseSysbench(out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("%s: %d transactions (%.1f/s), %d queries (%.1f/s), avg latency %.2f ms, %d ignored errors, %d reconnects",
			strings.Join(args, " "), r.transactions, r.tps, r.queries, r.qps, r.avgLatencyMS, r.ignoredErrors, r.reconnects)
		if r.transactions <= 0 || r.queries <= 0 {
			t.Errorf("no work done: %d transactions, %d queries\n%s", r.transactions, r.queries, out)
		}
		if r.reconnects != 0 {
			t.Errorf("%d reconnects: the proxy dropped connections\n%s", r.reconnects, out)
		}
		// Other connections can only add to the global counter. A
		// transaction that fails with an ignored error is rolled back (at
		// most one more text statement) and run again.
		if want := r.queries - text*r.transactions - r.ignoredErrors; executes < want {
			t.Errorf("backend counted %d COM_STMT_EXECUTE for %d queries (%d text statements per transaction directly): sysbench did not use server-side prepared statements through the proxy",
				executes, r.queries, text)
		}
		// A proxy that leaves Nagle's algorithm on costs ~40 ms per round
		// trip (Nagle meets delayed ACKs); a healthy one well under 1 ms per query.
		if perQuery := r.avgLatencyMS * float64(r.transactions) / float64(max(r.queries, 1)); perQuery > 20 {
			t.Errorf("%.1f ms per query on average: is TCP_NODELAY off?", perQuery)
		}
		return r
	}

	t.Run("read_write 1 thread, no error ignored", func(t *testing.T) {
		r := run(t, "oltp_read_write", "--threads=1", "--time=3", "--mysql-ignore-errors=none")
		if r.ignoredErrors != 0 {
			t.Errorf("%d errors\n%s", r.ignoredErrors, r.output)
		}
	})
	t.Run("read_write 4 threads", func(t *testing.T) {
		// The default list, spelled out: deadlocks and lock waits are the
		// workload's, not the proxy's; any other error fails the run.
		run(t, "oltp_read_write", "--threads=4", "--time=4", "--mysql-ignore-errors=1213,1205,1020")
	})
	t.Run("point_select 4 threads, no error ignored", func(t *testing.T) {
		r := run(t, "oltp_point_select", "--threads=4", "--time=3", "--mysql-ignore-errors=none")
		if r.ignoredErrors != 0 {
			t.Errorf("%d errors\n%s", r.ignoredErrors, r.output)
		}
	})

	sysbench(t, p.addr, "oltp_read_write", "cleanup")
	var tables int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?", sysbenchDB).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("%d tables left in %s after sysbench cleanup through the proxy", tables, sysbenchDB)
	}
}
