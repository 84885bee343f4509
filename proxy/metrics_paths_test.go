package proxy_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// histogramCounts returns the sample count of every series of the
// histogram name in reg, by the value of its label.
func histogramCounts(t *testing.T, reg *prometheus.Registry, name, label string) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// TestStatementLatencyByPath: slotproxy_statement_seconds has a series for
// every statement path before any statement runs, and each statement is
// timed under the path it took: relayed statements (with and without
// rules) as pass_through, a slotted increment as rewritten_write, a counter
// read as rewritten_read, an absolute write as guarded_write, a prepared
// execution under its own path. The metrics that count events are all
// present at start, at zero.
func TestStatementLatencyByPath(t *testing.T) {
	setupDiffSchemas(t)
	reg := prometheus.NewRegistry()
	m := proxy.NewMetrics(reg)
	p := startProxy(t, func(c *proxy.Config) {
		c.Rewriter = newRewriter(diffCatalog())
		c.Metrics = m
	})
	proxy.RegisterServerGauges(reg, p.srv)
	paths := []string{"pass_through", "rewritten_read", "rewritten_write", "guarded_write",
		"parse_failure", "shadow", "refused", "rolled_up_read"}
	start := histogramCounts(t, reg, "slotproxy_statement_seconds", "path")
	for _, path := range paths {
		if n, ok := start[path]; !ok || n != 0 {
			t.Errorf("at start: slotproxy_statement_seconds{path=%q}: present %v, count %d; want present with 0", path, ok, n)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, mf := range mfs {
		present[mf.GetName()] = true
	}
	for _, name := range []string{"slotproxy_backend_errors_total", "slotproxy_queued_statements_total", "slotproxy_connections_total",
		"slotproxy_handshakes_total", "slotproxy_auth_failures_total", "slotproxy_handshakes_proxy_greeted_total",
		"slotproxy_handshakes_parked_total", "slotproxy_handshakes_waiting", "slotproxy_retries_total", "slotproxy_statements_total"} {
		if !present[name] {
			t.Errorf("%s is not exported before its first event", name)
		}
	}

	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, "interpolateParams=true"))
	db.SetMaxOpenConns(1)
	queryString(t, db, "SELECT 1")
	mustExec(t, db, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	queryString(t, db, "SELECT downloads FROM repos WHERE id = 1")
	mustExec(t, db, "UPDATE repos SET downloads = 5 WHERE id = 2")
	prepared := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	prepared.SetMaxOpenConns(1)
	mustExec(t, prepared, "UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, 1)

	// A statement is timed once its response is out: the client may have
	// it a moment before the observation.
	wantCounts := map[string]uint64{"pass_through": 1, "rewritten_write": 2, "rewritten_read": 1, "guarded_write": 1}
	got := waitCounts(t, reg, wantCounts)
	for path, want := range wantCounts {
		if got[path] < want {
			t.Errorf("slotproxy_statement_seconds{path=%q} counted %d statements, want at least %d", path, got[path], want)
		}
	}
	if got["refused"] != 0 || got["shadow"] != 0 {
		t.Errorf("statements timed under paths they did not take: %v", got)
	}
	// Without rules every statement is relayed, and timed as such.
	reg2 := prometheus.NewRegistry()
	plain := startProxy(t, func(c *proxy.Config) { c.Metrics = proxy.NewMetrics(reg2) })
	plainDB := plain.open(t, "")
	queryString(t, plainDB, "SELECT 1")
	queryString(t, plainDB, "SELECT 2")
	if n := waitCounts(t, reg2, map[string]uint64{"pass_through": 2})["pass_through"]; n < 2 {
		t.Errorf("without rules: %d pass-through statements timed, want at least 2", n)
	}
}

// waitCounts waits up to 5 s until slotproxy_statement_seconds has at least
// the counts of want, and returns its counts.
func waitCounts(t *testing.T, reg *prometheus.Registry, want map[string]uint64) map[string]uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := histogramCounts(t, reg, "slotproxy_statement_seconds", "path")
		done := true
		for path, n := range want {
			done = done && got[path] >= n
		}
		if done || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}
