package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// logValue returns the value of key in a text log line (key=value or
// key="quoted value").
func logValue(t testing.TB, line, key string) string {
	t.Helper()
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		t.Fatalf("log line lacks %s=: %s", key, line)
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		s, err := strconv.QuotedPrefix(v)
		if err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		v, _ = strconv.Unquote(s)
		return v
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// metricsAddr waits for serve's "listening" line and returns the address
// of its HTTP endpoint.
func (p *process) metricsAddr(t testing.TB) string {
	t.Helper()
	addr := logValue(t, p.waitFor(t, "msg=listening"), "metrics")
	if addr == "off" {
		t.Fatal("serve runs without its HTTP endpoint")
	}
	return addr
}

// get fetches http://addr/path and returns the status and body.
func get(t testing.TB, addr, path string) (int, string) {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// scrape fetches /metrics and returns every sample by its name and labels
// as exposed, such as `slotproxy_statements_total{path="pass_through",rule=""}`.
func scrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	code, body := get(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d: %s", code, body)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples
}

// TestMetricsEndpoint runs statements through serve and scrapes its
// metrics, health and readiness over HTTP.
func TestMetricsEndpoint(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	appendConfig(t, path, "rollup:\n  interval: 100ms\n")
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	addr := p.metricsAddr(t)

	if code, body := get(t, addr, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 \"ok\\n\"", code, body)
	}
	if code, body := get(t, addr, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz: %d %q, want 200 \"ok\\n\"", code, body)
	}
	if code, _ := get(t, addr, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: status %d, want 404", code)
	}

	db := openProxy(t, testdb.Shared(), listen, schema)
	for range 5 {
		if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil || n != 5 {
		t.Fatalf("downloads through the proxy = %d, %v; want 5", n, err)
	}
	if err := db.QueryRow("SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}

	// The roll-up folds the increments within a few passes.
	rule := schema + ".repos"
	var m map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		m = scrape(t, addr)
		if m["slotproxy_rollup_folds_total"] >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct {
		sample string
		min    float64
	}{
		{`slotproxy_statements_total{path="rewritten_write",rule="` + rule + `"}`, 5},
		{`slotproxy_statements_total{path="rewritten_read",rule=""}`, 1},
		{`slotproxy_statements_total{path="pass_through",rule=""}`, 1},
		{`slotproxy_client_connections`, 1},
		{`slotproxy_read_after_increment_tables`, 0},
		{`slotproxy_rollup_folds_total`, 1},
		{`slotproxy_rollup_passes_total`, 1},
		{`slotproxy_rollup_errors_total`, 0},
		{`slotproxy_rollup_pending_records`, 0},
		{`slotproxy_rollup_lock_hold_seconds_count`, 1},
		{`slotproxy_rollup_lag_seconds`, 0},
		{`go_goroutines`, 1},
		{`process_open_fds`, 1},
	} {
		v, ok := m[tc.sample]
		if !ok || v < tc.min {
			t.Errorf("%s = %v (present: %v), want at least %v", tc.sample, v, ok, tc.min)
		}
	}
	if v := m["slotproxy_rollup_lag_seconds"]; v > 5 {
		t.Errorf("slotproxy_rollup_lag_seconds = %v with passes every 100ms", v)
	}
	if v := m["slotproxy_rollup_errors_total"]; v != 0 {
		t.Errorf("slotproxy_rollup_errors_total = %v, want 0", v)
	}
	if _, ok := m[`slotproxy_rewrite_seconds_count`]; !ok {
		t.Error("slotproxy_rewrite_seconds missing")
	}

	// SIGTERM stops the endpoint too, once the proxy has drained.
	db.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v\nstderr:\n%s", err, p.stderr())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve still running 15s after SIGTERM")
	}
	client := http.Client{Timeout: time.Second}
	if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("the HTTP endpoint still answers after serve stopped")
	}
}

// TestReadyz checks /readyz when the backend is down and while the rules
// are still loading; /healthz answers 200 throughout.
func TestReadyz(t *testing.T) {
	t.Run("backend down", func(t *testing.T) {
		listen, metrics, backend := freeAddr(t), freeAddr(t), freeAddr(t) // nothing listens on backend
		path := writeFile(t, "config.yaml", fmt.Sprintf("listen: %s\nbackend: %s\nmetrics:\n  listen: %s\n", listen, backend, metrics))
		p := startServe(t, "serve", "--config", path)
		if got := p.metricsAddr(t); got != metrics {
			t.Errorf("metrics endpoint on %s, want %s", got, metrics)
		}
		if code, body := get(t, metrics, "/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("/healthz: %d %q, want 200 \"ok\\n\"", code, body)
		}
		code, body := get(t, metrics, "/readyz")
		if want := "not ready: backend " + backend + " unreachable: "; code != http.StatusServiceUnavailable ||
			!strings.HasPrefix(body, want) || !strings.Contains(body, "connection refused") {
			t.Errorf("/readyz: %d %q, want 503 starting with %q, saying connection refused", code, body, want)
		}

		// A backend that comes up makes serve ready (after the cached
		// result expires).
		real := testdb.Shared()
		relay := startRelay(t, backend, real.Addr)
		defer relay()
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body = get(t, metrics, "/readyz")
			if code == http.StatusOK || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if code != http.StatusOK || body != "ok\n" {
			t.Errorf("/readyz with the backend up: %d %q, want 200", code, body)
		}
	})

	t.Run("rules loading", func(t *testing.T) {
		// A backend that accepts connections and never greets: loading the
		// rules hangs until timeouts.connect + timeouts.handshake, fails,
		// and serve tries again (the backend is unreachable: it sends no
		// greeting) instead of exiting.
		hung := newFakeBackend(t)
		listen, metrics := freeAddr(t), freeAddr(t)
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "rules"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rules", "r.yaml"), []byte("table: app.repos\nkey: id\ncounters: [downloads]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "config.yaml")
		cfg := fmt.Sprintf("listen: %s\nbackend: %s\nrules: rules\nadmin:\n  user: root\n  password: x\ntimeouts:\n  connect: 1s\n  handshake: 1s\nmetrics:\n  listen: %s\n",
			listen, hung.addr, metrics)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startServe(t, "serve", "--config", path)
		var code int
		var body string
		deadline := time.Now().Add(3 * time.Second)
		for {
			client := http.Client{Timeout: time.Second}
			resp, err := client.Get("http://" + metrics + "/readyz")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, body = resp.StatusCode, string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the HTTP endpoint did not come up while the rules load: %v\nstderr:\n%s", err, p.stderr())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: rules not loaded yet") {
			t.Errorf("/readyz while loading the rules: %d %q", code, body)
		}
		if code, body := get(t, metrics, "/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("/healthz while loading the rules: %d %q", code, body)
		}
		// The first attempt fails; serve says why and tries again.
		line := p.waitFor(t, "trying again")
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "sent no greeting") {
			t.Errorf("retry logged as: %s", line)
		}
		code, body = get(t, metrics, "/readyz")
		if want := "not ready: rules not loaded yet: backend " + hung.addr + " sent no greeting"; code != http.StatusServiceUnavailable || !strings.HasPrefix(body, want) {
			t.Errorf("/readyz while the backend does not greet: %d %q, want 503 %q…", code, body, want)
		}
		// SIGTERM while waiting: a clean exit.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.exited:
			if err != nil {
				t.Errorf("serve after SIGTERM while waiting for the backend: %v\nstderr:\n%s", err, p.stderr())
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("serve still running 15s after SIGTERM\nstderr:\n%s", p.stderr())
		}
	})
}

// startRelay relays TCP connections from listen to target until the
// returned function is called.
func startRelay(t *testing.T, listen, target string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { io.Copy(b, c); b.Close() }()
				io.Copy(c, b)
			}()
		}
	}()
	return func() { cancel(); ln.Close() }
}

// TestServeLogs checks the log lines operators rely on, in JSON: connection
// open and close at info, rewrite decisions (with the SQL) at debug.
func TestServeLogs(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	appendConfig(t, path, "log:\n  level: debug\n  format: json\nrollup:\n  enabled: false\n")
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, `"msg":"listening"`)
	db := openProxy(t, testdb.Shared(), listen, schema)
	if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, want := range [][]string{
		{`"level":"INFO"`, `"msg":"connection open"`},
		{`"level":"DEBUG"`, `"msg":"rewrite"`, `"sql":"UPDATE repos SET downloads = downloads + 1 WHERE id = 1"`},
		{`"level":"INFO"`, `"msg":"connection closed"`},
	} {
		line := p.waitFor(t, want[1])
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("log line lacks %s: %s", w, line)
			}
		}
	}
}

// TestRolledUpServe: serve keeps the bound of reads: rolled_up: with a
// max_staleness of 1s and rollup.interval of a minute, its roll-up runs
// every 500ms, plain reads catch up with the increments within the bound,
// the staleness metric stays under it, and check says what the mode
// means.
func TestRolledUpServe(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	dir := filepath.Dir(path)
	rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\nreads: rolled_up\nmax_staleness: 1s\n", schema)
	if err := os.WriteFile(filepath.Join(dir, "rules", "repos.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	appendConfig(t, path, "rollup:\n  interval: 1m\n")
	migrateSchema(t, path)
	out, errOut, code := runCLI(t, "check", "--config", path)
	if code != 0 || !strings.Contains(out, "note: "+schema+".repos reads: rolled_up: plain reads of its counters see the base values, at most 1s behind (max_staleness); serve's roll-up runs every 500ms") {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	p := startServe(t, "serve", "--config", path)
	addr := p.metricsAddr(t)
	db := openProxy(t, testdb.Shared(), listen, schema)
	for range 5 {
		if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
	}
	done := time.Now()
	for {
		var n int
		if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 5 {
			break
		}
		if time.Since(done) > 3*time.Second {
			t.Fatalf("a plain read still sees %d 3s after the increments, with max_staleness 1s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := scrape(t, addr)
	if v, ok := m["slotproxy_rollup_staleness_seconds"]; !ok || v > 1.5 {
		t.Errorf("slotproxy_rollup_staleness_seconds = %v (present %v), want under the bound", v, ok)
	}
	if v := m[`slotproxy_statements_total{path="rolled_up_read",rule=""}`]; v < 1 {
		t.Errorf("rolled-up reads counted: %v", v)
	}
}

// TestRolledUpServeUnderLoad: 32 clients keep one record hot with
// transactions (an increment, 2 ms of work, COMMIT), so at any moment some
// of them hold its base row in share mode. The roll-up must still fold it
// within the bound: slotproxy_rollup_staleness_seconds stays under
// max_staleness (2s; passes every second) for the whole run, and the
// total is exact at the end.
func TestRolledUpServeUnderLoad(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	dir := filepath.Dir(path)
	rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads, stars]\nslots: 16\nreads: rolled_up\nmax_staleness: 2s\n", schema)
	if err := os.WriteFile(filepath.Join(dir, "rules", "repos.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	appendConfig(t, path, "rollup:\n  interval: 1m\n")
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	addr := p.metricsAddr(t)
	db := openProxy(t, testdb.Shared(), listen, schema)
	db.SetMaxOpenConns(40)
	const clients = 32
	var (
		wg        sync.WaitGroup
		committed atomic.Int64
		stop      = make(chan struct{})
		errs      = make(chan error, clients)
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := db.Begin()
				if err != nil {
					errs <- err
					return
				}
				if _, err := tx.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
					_ = tx.Rollback()
					errs <- err
					return
				}
				time.Sleep(2 * time.Millisecond)
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
				committed.Add(1)
			}
		}()
	}
	// Staleness is counted from serve's start until the first complete
	// pass: sample it once the load has run for longer than the bound.
	var worst float64
	for i := range 16 {
		time.Sleep(500 * time.Millisecond)
		if i < 6 {
			continue
		}
		m := scrape(t, addr)
		v, ok := m["slotproxy_rollup_staleness_seconds"]
		if !ok {
			t.Fatal("no slotproxy_rollup_staleness_seconds")
		}
		worst = max(worst, v)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a client failed: %v", err)
	}
	m := scrape(t, addr)
	t.Logf("%d transactions committed; worst staleness %.2fs; folds %v, passes %v", committed.Load(), worst,
		m["slotproxy_rollup_folds_total"], m["slotproxy_rollup_passes_total"])
	if worst > 2 {
		t.Errorf("slotproxy_rollup_staleness_seconds reached %.2fs under load, over max_staleness 2s", worst)
	}
	var n int64
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n != committed.Load() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if n != committed.Load() {
		t.Errorf("rolled-up read of downloads = %d after the load, want %d (committed)", n, committed.Load())
	}
}

// TestSlotPartitionServe: a proxy given part 1 of 2 of the slots (as in
// front of one of two cluster nodes) writes only odd slots, whatever its
// concurrent transactions pick; the total is exact.
func TestSlotPartitionServe(t *testing.T) {
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	dir := filepath.Dir(path)
	rule := fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads]\nslots: 16\n", schema)
	if err := os.WriteFile(filepath.Join(dir, "rules", "repos.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	appendConfig(t, path, "rollup:\n  enabled: false\nslot_partition:\n  count: 2\n  index: 1\n")
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	p.waitFor(t, "slot partition")
	db := openProxy(t, testdb.Shared(), listen, schema)
	const clients, each = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				tx, err := db.Begin()
				if err == nil {
					_, err = tx.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
					time.Sleep(time.Millisecond)
					err = errors.Join(err, tx.Commit())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	direct, err := sql.Open("mysql", testdb.Shared().DSN(testdb.User, testdb.Password, schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	rows, err := direct.Query("SELECT slot FROM slotted_counters WHERE record_id = 1 AND count <> 0 ORDER BY slot")
	if err != nil {
		t.Fatal(err)
	}
	var slots []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		slots = append(slots, n)
		if n%2 != 1 {
			t.Errorf("slot %d written by the proxy with part 1 of 2", n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(slots) < 2 {
		t.Errorf("slots written: %v; want several (8 concurrent transactions)", slots)
	}
	var n int
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil || n != clients*each {
		t.Errorf("downloads = %d, %v; want %d", n, err, clients*each)
	}

	// A hand-out (BEGIN, an increment, a read of it, COMMIT) folds the
	// proxy's own part of the record's slots only: a row of the other
	// part (another proxy's: on a cluster, written by that node's
	// increments) holds 5 and is locked by a session that stays open (as
	// an applier of that node's writes may), and the read neither waits
	// for it nor leaves it out.
	if _, err := direct.Exec("INSERT INTO slotted_counters (record_type, record_id, slot, count) SELECT record_type, 1, 0, 5 FROM slotproxy_record_types WHERE column_name = 'downloads'"); err != nil {
		t.Fatal(err)
	}
	holder, err := direct.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.Exec("SELECT count FROM slotted_counters WHERE record_type = (SELECT record_type FROM slotproxy_record_types WHERE column_name = 'downloads') AND record_id = 1 AND slot = 0 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := tx.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil || n != clients*each+6 {
		t.Fatalf("the hand-out read %d, %v; want %d", n, err, clients*each+6)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the hand-out's read took %v: it waited for the other part's row", took)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	var other int
	if err := direct.QueryRow("SELECT count FROM slotted_counters WHERE record_id = 1 AND slot = 0").Scan(&other); err != nil || other != 5 {
		t.Errorf("the other part's row holds %d, %v; want 5, unfolded", other, err)
	}
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil || n != clients*each+6 {
		t.Errorf("downloads = %d, %v; want %d", n, err, clients*each+6)
	}
}
