package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

func TestMain(m *testing.M) {
	// idle-conns runs the server under test in a child process: this test
	// binary, started again with childEnv set.
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// TestSmoke runs the whole benchmark in smoke mode against a throwaway
// MariaDB, plus a two-value slot study, and checks that every workload and
// target did work without errors and that the JSON and SVG files are
// written.
func TestSmoke(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	svgPath, profPath := filepath.Join(dir, "bench.svg"), filepath.Join(dir, "cpu.prof")
	rep, stdout := runReport(t, "--smoke", "--workloads", "all", "--slot-study", "--svg", svgPath, "--cpuprofile", profPath)
	targets := map[string][]string{
		wHotTx:         {"direct", "slotproxy", "handwritten", "handwritten-relay"},
		wHotAutocommit: {"relay", "slotproxy"},
		wPointSelect:   {"direct", "relay", "slotproxy"},
		wRangeSelect:   {"direct", "relay", "slotproxy"},
		wCounterRead:   {"relay", "slotproxy", "relay-rewritten", "relay-join", "relay-slots"},
		wHotRead:       {"relay", "slotproxy", "slotproxy-solo"},
	}
	seen := map[string][]string{}
	for _, r := range append(rep.Results, rep.StudyRuns...) {
		if r.Ops == 0 || r.Errors != 0 || r.Rate <= 0 || r.P99Ms <= 0 {
			t.Errorf("%s c=%d %s: ops %d, errors %d (%q), rate %.1f, p99 %.3fms", r.Workload, r.Clients, r.Target,
				r.Ops, r.Errors, r.FirstErrors, r.Rate, r.P99Ms)
		}
		if !slices.Contains(seen[r.Workload], r.Target) {
			seen[r.Workload] = append(seen[r.Workload], r.Target)
		}
	}
	for w, want := range targets {
		for _, tg := range want {
			if !slices.Contains(seen[w], tg) {
				t.Errorf("no result for %s on %s", w, tg)
			}
		}
	}
	if len(rep.Idle) != 2 {
		t.Errorf("idle-conns: %d results, want slotproxy and relay", len(rep.Idle))
	}
	for _, i := range rep.Idle {
		if i.RSSBeforeKiB <= 0 || i.RSSAfterKiB <= 0 || i.Conns == 0 || i.GoroutinesAfter <= 0 {
			t.Errorf("idle-conns %s: %+v", i.Target, *i)
		}
		if i.Target == "slotproxy" && (i.ActiveCountsExact == nil || !*i.ActiveCountsExact || i.ActiveOpsPerSec <= 0) {
			t.Errorf("idle-conns active phase: %+v", *i)
		}
	}
	if len(rep.SlotStudy) != 2 {
		t.Errorf("slot study: %d rows, want 2", len(rep.SlotStudy))
	}
	if len(rep.Comparisons) < 7 {
		t.Errorf("%d comparisons, want every row of the table", len(rep.Comparisons))
	}
	checkReport(t, rep)

	if fi, err := os.Stat(profPath); err != nil || fi.Size() == 0 {
		t.Errorf("no CPU profile written: %v", err)
	}

	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg ")) || !bytes.Contains(svg, []byte("<polyline")) {
		t.Errorf("SVG lacks a chart:\n%s", svg)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("SVG is not well-formed XML: %v", err)
			}
			break
		}
	}
	for _, s := range []string{"workload", "hot-tx", "idle-conns", "slot study", "verdict"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("stdout lacks %q", s)
		}
	}
}

// runReport runs slotbench with args and --json, fails the test on an
// error, and returns the JSON report and what it printed.
func runReport(t *testing.T, args ...string) (report, string) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	err := run(append(args, "--json", jsonPath), &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, strings.ReplaceAll(stderr.String(), "\r", "\n"))
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	return rep, stdout.String()
}

// checkReport fails the test for a failed check or a problem in rep, and
// unless every hot-tx increment was slotted: a guarded write there is an
// increment run on the base row (the transactions' reads of other columns
// locked the hot record: TestReadAfterIncrementsMakesTheSnapshot).
func checkReport(t *testing.T, rep report) {
	t.Helper()
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check %s: %s", c.Name, c.Detail)
		}
	}
	if len(rep.Problems) > 0 {
		t.Errorf("problems: %q", rep.Problems)
	}
	if st := rep.ProxyStats[wHotTx]; st.RewrittenWrites == 0 || st.GuardedWrites != 0 {
		t.Errorf("slotproxy did not slot every hot-tx increment: %+v", st)
	}
}

// TestSmokeProcesses runs every workload in smoke mode with --slotproxy:
// slotproxy as serve processes of the real binary (built here) and the
// relay as a process of its own. Every target does work without errors,
// the processes' CPU time per operation is reported, slotproxy slots
// hot-tx's increments (its metrics say so), and the processes are gone
// afterwards.
func TestSmokeProcesses(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "slotproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "../slotproxy").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep, _ := runReport(t, "--smoke", "--workloads", "hot-tx,hot-autocommit,point-select,counter-read,hot-read", "--sweep", "", "--slotproxy", bin)
	if !rep.Options.Processes {
		t.Error("the report does not say the proxy ran as processes of its own")
	}
	// CPU time comes in clock ticks (10 ms): a smoke round of one client
	// may cost a process less than one, so each served target must show
	// CPU time in some workload, not in every one.
	cpu := map[string]bool{}
	for _, r := range rep.Results {
		if r.Ops == 0 || r.Errors != 0 {
			t.Errorf("%s c=%d %s: ops %d, errors %d (%q)", r.Workload, r.Clients, r.Target, r.Ops, r.Errors, r.FirstErrors)
		}
		served := strings.HasPrefix(r.Target, "slotproxy") || strings.Contains(r.Target, "relay") // handwritten-relay too
		if served {
			cpu[r.Target] = cpu[r.Target] || r.TargetCPUUsPerOp > 0
			if r.TargetCPUUsPerOp < 0 {
				t.Errorf("%s c=%d %s: CPU time %v", r.Workload, r.Clients, r.Target, r.TargetCPUUsPerOp)
			}
		}
		if !served && r.TargetCPUUsPerOp != 0 {
			t.Errorf("%s c=%d %s: CPU time %v of a process, but it has none", r.Workload, r.Clients, r.Target, r.TargetCPUUsPerOp)
		}
	}
	for target, some := range cpu {
		if !some {
			t.Errorf("%s: no CPU time of its process in any workload", target)
		}
	}
	checkReport(t, rep)
	if st := rep.ProxyStats[wHotAutocommit]; st.Batches == 0 {
		t.Errorf("hot-autocommit through the serve process: %+v, want coalesced batches", st)
	}
	if out, _ := exec.Command("pgrep", "-f", bin+" serve").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("serve processes left running: %s", out)
	}
}

// TestSmokeUpsertIncrement runs hot-tx and hot-autocommit in smoke mode
// with --increment set to an upsert increment of the hot row: every
// committed increment is counted on every target, and slotproxy slots
// them (the upsert's row exists).
func TestSmokeUpsertIncrement(t *testing.T) {
	defer goleak.VerifyNone(t)
	const upsert = "INSERT INTO repos (id, downloads) VALUES (1, 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1"
	rep, _ := runReport(t, "--smoke", "--workloads", "hot-tx,hot-autocommit", "--sweep", "", "--increment", upsert)
	if rep.Options.Increment != upsert {
		t.Errorf("report's increment %q, want %q", rep.Options.Increment, upsert)
	}
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check %s: %s", c.Name, c.Detail)
		}
	}
	for _, w := range []string{wHotTx, wHotAutocommit} {
		if st := rep.ProxyStats[w]; st.RewrittenWrites == 0 {
			t.Errorf("%s: slotproxy slotted no upsert: %+v", w, st)
		}
	}
}

func TestHist(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 500e3}, {0.99, 990e3}, {1, 1000e3}} {
		got := float64(h.quantile(tc.q))
		if got < tc.want*0.98 || got > tc.want*1.02 {
			t.Errorf("quantile(%v) = %v, want %v ± 2%%", tc.q, got, tc.want)
		}
	}
	for i := range histBuckets - 1 {
		if histValue(i) >= histValue(i+1) {
			t.Fatalf("bucket %d value %d ≥ bucket %d value %d", i, histValue(i), i+1, histValue(i+1))
		}
	}
	for _, d := range []time.Duration{-1, 0, 1, 127, 128, 129, 255, 256, 1e6, 1e9, 1e12, math.MaxInt64} {
		i := histIndex(d)
		if i < 0 || i >= histBuckets {
			t.Errorf("histIndex(%d) = %d, out of range", d, i)
			continue
		}
		if v := histValue(i); d > 0 && (float64(v) < float64(d)*0.98 || float64(v) > float64(d)*1.02) && d >= 128 {
			t.Errorf("histValue(histIndex(%d)) = %d, more than 2%% off", d, v)
		}
	}
}

// TestDemo runs the demo briefly with the repository's example rule: the
// before/after table is printed, the proxy uses the example rule file, and
// every committed increment is counted.
func TestDemo(t *testing.T) {
	defer goleak.VerifyNone(t)
	var stdout, stderr bytes.Buffer
	err := run([]string{"--demo", "--rule", "../../testdata/rules/repos.yaml", "--clients", "4", "--hold", "1ms",
		"--rounds", "1", "--duration", "300ms", "--warmup", "50ms"}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s", out)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, strings.ReplaceAll(stderr.String(), "\r", "\n"))
	}
	for _, want := range []string{
		"with ../../testdata/rules/repos.yaml (after)",
		"direct (before)", "slotproxy (after)", "transactions/s", "p99 latency",
		"ok   hot-tx: every committed increment counted",
		"ok   hot-tx: slotproxy reads the true total",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if err := run([]string{"--demo", "--backend", "127.0.0.1:3306"}, io.Discard, io.Discard); err == nil {
		t.Error("--demo with --backend was accepted")
	}
}

// TestDemoExternalProxy runs the demo the way docker-compose.yml does: the
// schema, the migrated rule and a slotproxy exist already (here an
// in-process server), and slotbench only drives them.
func TestDemoExternalProxy(t *testing.T) {
	s, err := testdb.Start(testdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := testdb.Setup(s); err != nil {
		t.Fatal(err)
	}
	admin, err := openDB(s.Addr, s.RootUser, s.RootPassword, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := t.Context()
	if err := execAll(ctx, admin, "CREATE DATABASE app",
		"CREATE TABLE app.repos (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL DEFAULT '', downloads BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO app.repos (id) SELECT seq FROM "+testdb.Seq(200)); err != nil {
		t.Fatal(err)
	}
	schema = "app"
	defer func() { schema = "bench" }()
	const rule = "../../testdata/rules/repos.yaml"
	rw, err := buildRewriter(ctx, s.Addr, s.RootUser, s.RootPassword, 0, rule, true)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.NewServer(proxy.Config{Backend: s.Addr, Rewriter: rw, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	var stdout, stderr bytes.Buffer
	err = run([]string{"--demo", "--backend", s.Addr, "--proxy", ln.Addr().String(), "--rule", rule,
		"--user", testdb.User, "--password", testdb.Password,
		"--admin-user", s.RootUser, "--admin-password", s.RootPassword,
		"--clients", "4", "--hold", "1ms", "--rounds", "1", "--duration", "300ms", "--warmup", "50ms"}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("stdout:\n%s", out)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(out, "ok   hot-tx: every committed increment counted") || !strings.Contains(out, "slotproxy (after)") {
		t.Errorf("demo output lacks the table or the check")
	}
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM app.repos").Scan(&n); err != nil || n != 200 {
		t.Errorf("app.repos has %d rows (%v) after the demo; it must be left as it was", n, err)
	}
	if err := run([]string{"--demo", "--backend", s.Addr}, io.Discard, io.Discard); err == nil {
		t.Error("--demo with --backend and without --proxy was accepted")
	}
}

// TestSummarize: --summarize turns the committed runs into BENCHMARKS.md's
// table (every row's min, median and max over the runs, and the verdict by
// the straddle rule), and refuses to mix servers.
func TestSummarize(t *testing.T) {
	runs, _ := filepath.Glob("../../bench/mariadb-[0-9].json")
	if len(runs) < 2 {
		t.Fatalf("committed runs: %v", runs)
	}
	var out bytes.Buffer
	if err := run(append([]string{"--summarize"}, runs...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| # | workload | clients | comparison | runs | min | median | max | target | verdict |",
		"| 1 | hot-tx | 32 | slotproxy / direct tx/s | " + fmt.Sprint(len(runs)) + " | "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	other, _ := filepath.Glob("../../bench/mysql-[0-9].json")
	if len(other) > 0 {
		if err := run([]string{"--summarize", runs[0], other[0]}, io.Discard, io.Discard); err == nil {
			t.Error("summarized runs of two servers together")
		}
	}
}

// TestServeConfig: --serve-config's settings are kept but for slotbench's
// own (a backend mapping keeps its tls and gets the address), and extra
// replaces top-level settings.
func TestServeConfig(t *testing.T) {
	var base map[string]any
	if err := yaml.Unmarshal([]byte("backend:\n  tls:\n    mode: disabled\nmetrics:\n  listen: 1.2.3.4:9\ncoalesce: true\n"), &base); err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig(base, "127.0.0.1:1", "127.0.0.1:2", "/r", "127.0.0.1:3", "u", "p", map[string]any{"coalesce": false})
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Listen   string
		Rules    string
		Coalesce bool
		Backend  struct {
			Address string
			TLS     struct{ Mode string }
		}
		Metrics struct{ Listen string }
		Admin   struct{ User, Password string }
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Listen != "127.0.0.1:1" || got.Rules != "/r" || got.Coalesce || got.Backend.Address != "127.0.0.1:3" ||
		got.Backend.TLS.Mode != "disabled" || got.Metrics.Listen != "127.0.0.1:2" || got.Admin.User != "u" || got.Admin.Password != "p" {
		t.Errorf("configuration:\n%s", out)
	}
	plain := serveConfig(map[string]any{}, "a", "b", "c", "127.0.0.1:3", "u", "p", nil)
	if plain["backend"] != "127.0.0.1:3" {
		t.Errorf("without --serve-config, backend = %v", plain["backend"])
	}
}
