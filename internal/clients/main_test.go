package clients

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	_ "github.com/go-sql-driver/mysql" // for the version query in TestMain

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// serverVersion is SELECT VERSION() of the test server; the rewriter picks
// its upsert syntax from it (catalog.RowAlias).
var serverVersion string

func TestMain(m *testing.M) {
	os.Exit(testdb.Run(m, testdb.Options{}, func(s *testdb.Server) error {
		if err := testdb.Setup(s); err != nil {
			return err
		}
		db, err := sql.Open("mysql", s.RootDSN("", ""))
		if err != nil {
			return fmt.Errorf("clients: %w", err)
		}
		defer db.Close()
		if err := db.QueryRow("SELECT VERSION()").Scan(&serverVersion); err != nil {
			return fmt.Errorf("clients: read the server version: %w", err)
		}
		return nil
	}))
}

// The account the client programs log in with.
var (
	clientUser     = testdb.User
	clientPassword = testdb.Password
)

// schemaDDL creates the tables of both schemas of a test. repos holds the
// counters (ruled in the ruled schema), users is a plain table joined to
// it, events a plain table with an AUTO_INCREMENT key for insert ids and
// batched inserts.
var schemaDDL = []string{
	"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL DEFAULT '', " +
		"owner_id INT NOT NULL DEFAULT 0, downloads INT NOT NULL DEFAULT 0, " +
		"stars INT UNSIGNED NOT NULL DEFAULT 0, big BIGINT UNSIGNED NOT NULL DEFAULT 0, touched DATETIME(3) NULL) ENGINE=InnoDB",
	"CREATE TABLE users (id INT NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL, downloads INT NOT NULL DEFAULT 0) ENGINE=InnoDB",
	"CREATE TABLE events (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, repo_id BIGINT NOT NULL, " +
		"kind VARCHAR(20) NOT NULL, amount DECIMAL(10,2) NULL, at DATETIME NULL) ENGINE=InnoDB",
	"INSERT INTO repos VALUES (1, 'alpha', 1, 10, 1, 18446744073709551000, NULL), (2, 'beta', 1, 20, 2, 0, NULL), " +
		"(3, 'gamma', 2, 0, 0, 5, NULL), (4, 'delta', 3, 5, 7, 1, NULL)",
	"INSERT INTO users VALUES (1, 'ann', 100), (2, 'bob', 200), (3, 'cid', 300)",
}

// slotsDDL creates the slot table in the ruled schema (as slotproxy
// migrate does).
const slotsDDL = "CREATE TABLE slotted_counters (" +
	"record_type SMALLINT UNSIGNED NOT NULL, record_id BIGINT NOT NULL, slot SMALLINT UNSIGNED NOT NULL, " +
	"count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot)) ENGINE=InnoDB"

// ruledCatalog describes schema's tables to the rewriter: the counters
// downloads, stars and big of repos, its touch column touched, and the
// columns of the other tables.
func ruledCatalog(schema string) *rewrite.Catalog {
	return rewrite.NewCatalog([]*rewrite.Table{{
		Schema: schema, Name: "repos", Key: "id",
		Columns: []string{"id", "name", "owner_id", "downloads", "stars", "big", "touched"},
		Counters: []rewrite.Counter{
			{Name: "downloads", RecordType: 1},
			{Name: "stars", RecordType: 2},
			{Name: "big", RecordType: 3, Unsigned: true},
			{Name: "touched", RecordType: 4, Touch: true, FSP: 3},
		},
		SlotsTable: "slotted_counters", Slots: 8,
	}}, map[string][]string{
		schema + ".users":  {"id", "name", "downloads"},
		schema + ".events": {"id", "repo_id", "kind", "amount", "at"},
	})
}

// env is one test's pair of identical schemas and the proxy that rules the
// counters of one of them.
type env struct {
	plain string // read and written directly on the server
	ruled string // read and written through the proxy
	proxy *proxyServer
}

// newEnv creates fresh schemas named after the test and starts a proxy
// that rules the counters of one of them. Everything is removed when the
// test ends.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, true)
}

// newRelayEnv is newEnv with a proxy that rewrites nothing: a pure relay.
// Its tests tell relay bugs from rewrite bugs.
func newRelayEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, false)
}

func newEnvWith(t *testing.T, rules bool) *env {
	t.Helper()
	base := schemaBase(t.Name())
	e := &env{plain: base + "_plain", ruled: base + "_ruled"}
	db := testdb.Shared()
	for _, schema := range []string{e.plain, e.ruled} {
		stmts := []string{
			"DROP DATABASE IF EXISTS " + schema,
			"CREATE DATABASE " + schema + " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
			"USE " + schema,
		}
		stmts = append(stmts, schemaDDL...)
		if schema == e.ruled {
			stmts = append(stmts, slotsDDL)
		}
		if err := db.Exec(stmts...); err != nil {
			t.Fatalf("create schema %s: %v", schema, err)
		}
	}
	t.Cleanup(func() {
		if err := db.Exec("DROP DATABASE IF EXISTS "+e.plain, "DROP DATABASE IF EXISTS "+e.ruled); err != nil {
			t.Errorf("drop the test schemas: %v", err)
		}
	})
	var rw *rewrite.Rewriter
	if rules {
		rw = catalog.NewRewriter(ruledCatalog(e.ruled), serverVersion)
	}
	e.proxy = startProxy(t, db.Addr, rw)
	return e
}

// schemaBase turns a test name into a schema name prefix: "TestPHP/pdo-native"
// becomes "cl_php_pdo_native". Long names are cut and get a hash suffix.
func schemaBase(testName string) string {
	name := strings.ToLower(strings.TrimPrefix(testName, "Test"))
	var b strings.Builder
	b.WriteString("cl_")
	for _, r := range name {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 40 {
		sum := sha256.Sum256([]byte(testName))
		s = s[:31] + "_" + hex.EncodeToString(sum[:4])
	}
	return s
}

// target is where a client program connects: the server on the plain
// schema, or the proxy on the ruled one.
type target struct {
	name string // "direct" or "proxy"
	host string
	port string
	db   string
}

func (e *env) targets() (direct, proxied target) {
	dh, dp, _ := net.SplitHostPort(testdb.Shared().Addr)
	ph, pp, _ := net.SplitHostPort(e.proxy.addr)
	return target{"direct", dh, dp, e.plain}, target{"proxy", ph, pp, e.ruled}
}

// proxyServer is an in-process proxy on a loopback port.
type proxyServer struct {
	addr string
	logs *syncBuffer
}

// startProxy starts a proxy for backend with rewriter rw (nil: no
// rewriting). It is closed when the test ends; if the test failed, the
// end of the proxy's log is logged.
func startProxy(t *testing.T, backend string, rw *rewrite.Rewriter) *proxyServer {
	t.Helper()
	logs := &syncBuffer{}
	// The proxy's defaults, as slotproxy serve sets them: TLS offered to
	// clients with a generated certificate, TLS to a backend that offers it.
	cert, _, err := config.SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.NewServer(proxy.Config{
		Backend:             backend,
		Rewriter:            rw,
		ClientTLS:           &tls.Config{Certificates: []tls.Certificate{cert}},
		BackendTLS:          &tls.Config{InsecureSkipVerify: true},
		BackendTLSPreferred: true,
		Logger:              slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
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
		// Close waits for every session to end; a session stuck in the
		// proxy would block it forever, so it gets a deadline too.
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
			t.Logf("end of the proxy's log:\n%s", tail(logs.String(), 60))
		}
	})
	return &proxyServer{addr: ln.Addr().String(), logs: logs}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d earlier lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// testdataPath is the absolute path of a file under testdata.
func testdataPath(t testing.TB, rel ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"testdata"}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// requirement is the cached outcome of probing for one client.
type requirement struct {
	once sync.Once
	err  error
}

var requirements sync.Map // name → *requirement

// require fails the test unless the probe command exits 0: the client
// named what is missing. The probe runs once per test binary.
func require(t testing.TB, what string, probe ...string) {
	t.Helper()
	v, _ := requirements.LoadOrStore(what, &requirement{})
	r := v.(*requirement)
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, probe[0], probe[1:]...)
		cmd.Dir = testdataPath(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			r.err = fmt.Errorf("%s: %w\n%s", strings.Join(probe, " "), err, bytes.TrimSpace(out))
		}
	})
	if r.err != nil {
		t.Fatalf("%s is required for this test; run scripts/deps.sh to install it.\nprobe failed: %v", what, r.err)
	}
}

// clientCmd is one run of a client program.
type clientCmd struct {
	argv  []string
	env   []string // added to the environment
	dir   string   // working directory; "" is testdata
	stdin string
}

// clientEnv is the environment every scenario program reads: where to
// connect, as whom, the scenario file and the mode.
func clientEnv(t *testing.T, tg target, mode string) []string {
	return []string{
		"SP_HOST=" + tg.host, "SP_PORT=" + tg.port, "SP_DATABASE=" + tg.db,
		"SP_USER=" + clientUser, "SP_PASSWORD=" + clientPassword,
		"SP_MODE=" + mode, "SP_SCENARIO=" + testdataPath(t, "scenario.tsv"),
	}
}

// result is what one run of a client program printed and how it ended.
type result struct {
	stdout, stderr string
	err            error // how the program exited: nil, an *exec.ExitError, or a start failure
	killed         error // non-nil if the program was killed: why
	took           time.Duration
}

// Limits of a client program's run. A run that takes longer is killed and
// the test fails saying so: a hang is a failure, never a stuck suite.
const (
	// runLimit bounds any run of a client program.
	runLimit = 120 * time.Second
	// stallGrace is how much longer than the direct run the run through the
	// proxy may take (on top of stallFactor times the direct run's time).
	stallGrace  = 20 * time.Second
	stallFactor = 4
)

// closeLimit bounds how long closing a test's proxy may take.
const closeLimit = 10 * time.Second

// errStalled kills a run through the proxy that goes on long after the
// same program finished directly.
var errStalled = errors.New("still running long after the direct run finished")

// runBoth runs the program mk describes for each target at the same time,
// directly and through the proxy, and returns both results with schema
// names replaced by "<schema>". The run through the proxy is killed if it
// is still running stallGrace (plus stallFactor times the direct run's
// time) after the direct run ended.
func (e *env) runBoth(mk func(tg target) clientCmd) (direct, proxied result) {
	dt, pt := e.targets()
	pctx, pcancel := context.WithCancelCause(context.Background())
	defer pcancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		direct = runClient(context.Background(), mk(dt))
		grace := stallGrace + stallFactor*direct.took
		time.AfterFunc(grace, func() {
			pcancel(fmt.Errorf("%w (after %s; the direct run took %s)", errStalled, grace.Round(time.Second), direct.took.Round(time.Millisecond)))
		})
	}()
	proxied = runClient(pctx, mk(pt))
	wg.Wait()
	norm := strings.NewReplacer(e.plain, "<schema>", e.ruled, "<schema>")
	for _, r := range []*result{&direct, &proxied} {
		r.stdout, r.stderr = norm.Replace(r.stdout), norm.Replace(r.stderr)
	}
	return direct, proxied
}

// runClient runs c until it exits, ctx is done or runLimit passes.
func runClient(ctx context.Context, c clientCmd) result {
	ctx, cancel := context.WithTimeoutCause(ctx, runLimit, fmt.Errorf("ran for %s, the limit for any client run", runLimit))
	defer cancel()
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Dir = c.dir
	if cmd.Dir == "" {
		cmd.Dir, _ = filepath.Abs("testdata")
	}
	cmd.Stdin = strings.NewReader(c.stdin)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), err: err, took: time.Since(start)}
	if ctx.Err() != nil {
		r.killed = context.Cause(ctx)
	}
	return r
}

// describe names a run's outcome for failure messages.
func (r result) describe() string {
	switch {
	case r.killed != nil:
		return fmt.Sprintf("killed: %v", r.killed)
	case r.err != nil:
		return fmt.Sprintf("failed after %s: %v", r.took.Round(time.Millisecond), r.err)
	default:
		return fmt.Sprintf("exited 0 after %s", r.took.Round(time.Millisecond))
	}
}

// compareRuns fails t unless the run through the proxy printed exactly
// what the direct run printed. The transcripts are compared in two parts,
// each a subtest: "results" (everything but column metadata) and
// "metadata" (lines starting with "meta "; step headers starting with
// "> " are in both), so that a metadata difference does not hide a
// broken result and the other way round. A direct run that failed means
// the test or the client is broken, not the proxy: that is reported as
// such.
func compareRuns(t *testing.T, what string, direct, proxied result) {
	t.Helper()
	if direct.err != nil || direct.killed != nil {
		t.Fatalf("%s directly against the server (no proxy) %s: the test program is broken, or the client is "+
			"not installed (run scripts/deps.sh)\nstderr:\n%s\nstdout:\n%s",
			what, direct.describe(), tail(direct.stderr, 40), tail(direct.stdout, 40))
	}
	if proxied.killed != nil || proxied.err != nil {
		t.Errorf("%s through the proxy %s (directly it exited 0 after %s); the transcript up to then is compared below\nstderr through the proxy:\n%s",
			what, proxied.describe(), direct.took.Round(time.Millisecond), tail(proxied.stderr, 40))
	} else if proxied.stderr != direct.stderr {
		t.Errorf("%s wrote to stderr through the proxy:\n%s\ndirectly:\n%s", what, tail(proxied.stderr, 40), tail(direct.stderr, 40))
	}
	for _, part := range []struct {
		name string
		meta bool
	}{{"results", false}, {"metadata", true}} {
		want, got := transcriptPart(direct.stdout, part.meta), transcriptPart(proxied.stdout, part.meta)
		t.Run(part.name, func(t *testing.T) {
			if got != want {
				t.Errorf("%s %s differ through the proxy (-direct +proxy):\n%s", what, part.name, lineDiff(want, got))
			}
		})
	}
}

// transcriptPart keeps the metadata lines of a transcript (meta) or all the
// others; step headers are kept in both.
func transcriptPart(s string, meta bool) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "> ") || strings.HasPrefix(line, "meta ") == meta {
			b.WriteString(line)
		}
	}
	return b.String()
}

// longDiff compares inputs too long for lineDiff line by line: it shows
// the first differing pairs of lines and counts them all.
func longDiff(x, y []string) string {
	var out []string
	differ := 0
	for i := range min(len(x), len(y)) {
		if x[i] == y[i] {
			continue
		}
		differ++
		if len(out) < maxDiffLines {
			out = append(out, fmt.Sprintf("line %d:", i+1), "- "+x[i], "+ "+y[i])
		}
	}
	head := fmt.Sprintf("(too long for a diff: compared line by line, %d of %d lines differ", differ, min(len(x), len(y)))
	if len(x) != len(y) {
		head += fmt.Sprintf("; %d lines directly, %d through the proxy", len(x), len(y))
	}
	return head + ")\n" + strings.Join(out, "\n") + "\n"
}

// maxDiffLines caps the diff shown for one transcript.
const maxDiffLines = 150

// lineDiff returns a unified diff of a and b by lines, with three lines of
// context. Inputs too large for a quadratic diff are shown from the first
// differing line on.
func lineDiff(a, b string) string {
	x := strings.Split(strings.TrimSuffix(a, "\n"), "\n")
	y := strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	if a == "" {
		x = nil
	}
	if b == "" {
		y = nil
	}
	const context = 3
	if len(x)*len(y) > 16<<20 {
		return longDiff(x, y)
	}
	// lcs[i][j] is the length of the longest common subsequence of x[i:]
	// and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		text string
	}
	var ops []op
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, op{' ', x[i]})
			i++
			j++
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, op{'+', y[j]})
			j++
		default:
			ops = append(ops, op{'-', x[i]})
			i++
		}
	}
	// Print changed lines with context; elide long unchanged stretches.
	keep := make([]bool, len(ops))
	for k, o := range ops {
		if o.kind != ' ' {
			for c := max(0, k-context); c <= min(len(ops)-1, k+context); c++ {
				keep[c] = true
			}
		}
	}
	var out []string
	skipped := 0
	for k, o := range ops {
		if !keep[k] {
			skipped++
			continue
		}
		if skipped > 0 {
			out = append(out, fmt.Sprintf("@@ %d equal lines @@", skipped))
			skipped = 0
		}
		out = append(out, string(o.kind)+" "+o.text)
	}
	if skipped > 0 {
		out = append(out, fmt.Sprintf("@@ %d equal lines @@", skipped))
	}
	if len(out) > maxDiffLines {
		out = append(out[:maxDiffLines], fmt.Sprintf("[... %d more lines of diff]", len(out)-maxDiffLines))
	}
	return strings.Join(out, "\n") + "\n"
}

// clientSpec is a client program that runs the scenario in modes.
type clientSpec struct {
	what    string                                               // for messages, e.g. "php"
	require func(t *testing.T)                                   // fails the test if the client is missing
	cmd     func(t *testing.T, tg target, mode string) clientCmd // one run of the program
}

// scenarioTest runs a client program in each of its modes, each mode a
// parallel subtest with its own schemas and proxy.
func scenarioTest(t *testing.T, c clientSpec, modes ...string) {
	t.Parallel()
	c.require(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			runScenario(t, newEnv(t), c, mode)
		})
	}
}

// runScenario runs c in mode directly and through e's proxy and compares.
func runScenario(t *testing.T, e *env, c clientSpec, mode string) {
	t.Helper()
	direct, proxied := e.runBoth(func(tg target) clientCmd { return c.cmd(t, tg, mode) })
	compareRuns(t, c.what+" "+mode, direct, proxied)
}

// slotReader reads slot rows of the shared server as its root account,
// as serve does as the admin account (closed when the test ends).
func slotReader(t testing.TB) *catalog.SlotReader {
	s := testdb.Shared()
	r := catalog.NewSlotReader(func(ctx context.Context) (*client.Conn, error) {
		return client.ConnectWithContext(ctx, s.Addr, s.RootUser, s.RootPassword, "", time.Minute)
	}, 2)
	t.Cleanup(r.Close)
	return r
}
