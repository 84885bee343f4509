package proxy_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

func TestMetrics(t *testing.T) {
	setupDiffSchemas(t)
	reg := prometheus.NewRegistry()
	m := proxy.NewMetrics(reg)
	p := startProxy(t, func(c *proxy.Config) {
		c.Rewriter = newRewriter(diffCatalog())
		c.Metrics = m
	})
	proxy.RegisterServerGauges(reg, p.srv)
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, "interpolateParams=true"))
	db.SetMaxOpenConns(1)
	mustExec(t, db, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	mustExec(t, db, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	queryString(t, db, "SELECT downloads FROM repos WHERE id = 1")
	queryString(t, db, "SELECT name FROM users WHERE id = 1")
	mustExec(t, db, "DELETE FROM repos WHERE id = 4")
	if _, err := db.Exec("SELECT nope FROM repos"); err == nil {
		t.Fatal("want an error")
	}
	want := `
# HELP slotproxy_statements_total Statements by how they were handled (path) and the ruled table they touched (rule, empty for none).
# TYPE slotproxy_statements_total counter
slotproxy_statements_total{path="guarded_write",rule="diff_ruled.repos"} 1
slotproxy_statements_total{path="pass_through",rule=""} 2
slotproxy_statements_total{path="rewritten_read",rule=""} 1
slotproxy_statements_total{path="rewritten_write",rule="diff_ruled.repos"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slotproxy_statements_total"); err != nil {
		t.Error(err)
	}
	want = `
# HELP slotproxy_read_after_increment_tables Ruled tables whose counters transactions read after incrementing them; their increments inside transactions lock the record.
# TYPE slotproxy_read_after_increment_tables gauge
slotproxy_read_after_increment_tables 0
# HELP slotproxy_backend_errors_total ERR packets from the backend, by MySQL error code.
# TYPE slotproxy_backend_errors_total counter
slotproxy_backend_errors_total{code="1054"} 1
slotproxy_backend_errors_total{code="1205"} 0
slotproxy_backend_errors_total{code="1213"} 0
# HELP slotproxy_client_connections Client connections open (in the handshake or authenticated).
# TYPE slotproxy_client_connections gauge
slotproxy_client_connections 1
# HELP slotproxy_backend_connections Backend connections open.
# TYPE slotproxy_backend_connections gauge
slotproxy_backend_connections 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slotproxy_read_after_increment_tables",
		"slotproxy_backend_errors_total", "slotproxy_client_connections", "slotproxy_backend_connections"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "slotproxy_rewrite_seconds"); n != 1 {
		t.Errorf("rewrite latency histogram missing (%d)", n)
	}
}
