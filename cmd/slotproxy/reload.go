package main

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// live is serve's configuration and rules as they change with reloads
// (SIGHUP) and with the catalog reloads that follow DDL. Loads are
// serialized, and each applies its rewriter before the next starts, so a
// reload after DDL never brings back rules a SIGHUP replaced.
type live struct {
	path string    // the configuration file; empty when serve runs on flags alone
	over overrides // the command line's overrides of the file
	srv  *proxy.Server
	log  *slog.Logger

	cfg atomic.Pointer[config.Config] // what is in effect; replaced, never modified

	reloads *reloadMetrics // outcomes of reloads, for /metrics and /readyz; may be nil

	mu  sync.Mutex // held while loading a rewriter
	set *rules.Set // the rules in effect; guarded by mu
}

// config returns the configuration in effect. Only the keys reloads apply
// (rules, slots_table, admin) ever differ from the one serve started with.
func (l *live) config() *config.Config { return l.cfg.Load() }

// afterDDL reloads the catalog with the rules in effect and applies it. It
// is the load function of serve's catalog.Reloader, which is given an
// apply function that does nothing.
func (l *live) afterDDL(ctx context.Context) (*rewrite.Rewriter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rw, _, err := loadRewriter(ctx, l.config(), l.set, l.log, true)
	if err != nil {
		l.reloads.record(reloadAfterDDL, err)
		return nil, err
	}
	l.srv.SetRewriter(rw)
	l.reloads.record(reloadAfterDDL, nil)
	return rw, nil
}

// reload rereads the configuration file and the rules and, if they load
// and match the live schema, switches the proxy to them; otherwise it logs
// why on one line and keeps what it had. Connections stay open, and
// statements they prepared earlier keep the plan they were prepared with.
// Keys that only take effect at start are logged in a warning.
//
// Each outcome is recorded (slotproxy_reloads_total, and /readyz is not
// ready while the last reload has failed); a reload that has nothing to do
// (serve started without --config) records none.
func (l *live) reload(ctx context.Context, trigger string) {
	if l.path == "" {
		l.log.Warn("reload: serve was started without --config; nothing to reload")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Recorded before logged: once the log says so, /readyz and the
	// metrics do too.
	fail := func(msg, why string) {
		l.reloads.record(trigger, errors.New(why))
		l.log.Error(msg, "err", why)
	}
	cur := l.config()
	next, err := serveConfig(l.path, l.over)
	if err != nil {
		fail("reload failed; keeping the previous configuration and rules", oneLine(err))
		return
	}
	if keys := restartKeys(cur, next); len(keys) > 0 {
		l.log.Warn("reload: these changes take effect only when serve restarts", "keys", strings.Join(keys, ", "))
	}
	if cur.Rules == "" || next.Rules == "" {
		l.reloads.record(trigger, nil)
		l.log.Info("reloaded the configuration; no rules to reload")
		return
	}
	set, err := rules.LoadDir(next.Rules)
	if err != nil {
		fail("reload failed; keeping the previous rules", strings.Join(ruleProblems(err), "; "))
		return
	}
	eff := *cur
	eff.Rules, eff.SlotsTable, eff.Admin = next.Rules, next.SlotsTable, next.Admin
	eff.SlotPartition = next.SlotPartition
	rw, _, err := loadRewriter(ctx, &eff, set, l.log, true)
	if err != nil {
		// The same problems, with the same hints, as slotproxy check.
		fail("reload failed; keeping the previous rules", strings.Join(ruleProblems(err), "; "))
		return
	}
	applySlotPartition(ctx, &eff, l.srv, l.log)
	l.srv.SetRewriter(rw)
	l.cfg.Store(&eff)
	l.set = set
	l.reloads.record(trigger, nil)
	l.log.Info("reloaded rules", "dir", eff.Rules, "rules", set.Len(), "counters", countCounters(set),
		"tables", len(rw.Catalog().Tables()))
}

// What triggered a reload: the "trigger" label of slotproxy_reloads_total.
const (
	reloadSignal   = "sighup" // SIGHUP
	reloadWatch    = "watch"  // serve --watch saw the files change
	reloadAfterDDL = "ddl"    // DDL on a ruled table through the proxy
)

// reloadMetrics records the outcomes of reloads: SIGHUP reloads of the
// configuration and rules, and the catalog reloads after DDL. A nil
// *reloadMetrics records nothing.
type reloadMetrics struct {
	total       *prometheus.CounterVec
	successful  prometheus.Gauge
	lastSuccess prometheus.Gauge
	// failure is why the last reload failed; empty after a success.
	failure atomic.Pointer[string]
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotproxy_reloads_total",
			Help: "Reloads by trigger (sighup, or watch: the configuration and rules, on SIGHUP or because serve --watch saw them change; ddl: the catalog after DDL on a ruled table) and result (ok, failed: the previous rules stay)."},
			[]string{"trigger", "result"}),
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotproxy_config_last_reload_successful",
			Help: "1 unless the last reload failed (then serve runs with the rules it had, and /readyz is not ready until a reload succeeds)."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotproxy_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful load of the configuration and rules (at start, or a reload)."}),
	}
	for _, trigger := range []string{reloadSignal, reloadWatch, reloadAfterDDL} {
		for _, result := range []string{"ok", "failed"} {
			m.total.WithLabelValues(trigger, result)
		}
	}
	m.successful.Set(1)
	m.lastSuccess.SetToCurrentTime()
	reg.MustRegister(m.total, m.successful, m.lastSuccess)
	return m
}

// record counts the outcome err of a reload triggered by trigger.
func (m *reloadMetrics) record(trigger string, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.total.WithLabelValues(trigger, "failed").Inc()
		m.successful.Set(0)
		why := oneLine(err)
		m.failure.Store(&why)
		return
	}
	m.total.WithLabelValues(trigger, "ok").Inc()
	m.successful.Set(1)
	m.lastSuccess.SetToCurrentTime()
	m.failure.Store(nil)
}

// lastFailure is why the last reload failed, or "" (also on a nil
// *reloadMetrics).
func (m *reloadMetrics) lastFailure() string {
	if m == nil {
		return ""
	}
	if p := m.failure.Load(); p != nil {
		return *p
	}
	return ""
}

// countCounters is the number of counter columns of set's rules.
func countCounters(set *rules.Set) int {
	n := 0
	for _, r := range set.Rules() {
		n += len(r.Counters)
	}
	return n
}

// restartKeys lists the keys whose values differ between cur and next and
// that a reload does not apply. Turning rules on or off is one of them: the
// roll-up and the reloads after DDL are set up when serve starts.
func restartKeys(cur, next *config.Config) []string {
	var keys []string
	diff := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			keys = append(keys, key)
		}
	}
	diff("listen", cur.Listen, next.Listen)
	diff("backend.address", cur.Backend.Address, next.Backend.Address)
	diff("backend.tls.mode", cur.Backend.TLS.Mode, next.Backend.TLS.Mode)
	diff("backend.tls.ca", cur.Backend.TLS.CA, next.Backend.TLS.CA)
	diff("backend.tls.cert", cur.Backend.TLS.Cert, next.Backend.TLS.Cert)
	diff("backend.tls.key", cur.Backend.TLS.Key, next.Backend.TLS.Key)
	diff("backend.tls.server_name", cur.Backend.TLS.ServerName, next.Backend.TLS.ServerName)
	diff("tls.cert", cur.TLS.Cert, next.TLS.Cert)
	diff("tls.key", cur.TLS.Key, next.TLS.Key)
	diff("tls.min_version", cur.TLS.MinVersion, next.TLS.MinVersion)
	diff("tls.generate", cur.TLS.Generate, next.TLS.Generate)
	diff("timeouts.connect", cur.Timeouts.Connect, next.Timeouts.Connect)
	diff("timeouts.handshake", cur.Timeouts.Handshake, next.Timeouts.Handshake)
	diff("timeouts.shutdown", cur.Timeouts.Shutdown, next.Timeouts.Shutdown)
	diff("timeouts.client_write", cur.Timeouts.ClientWrite, next.Timeouts.ClientWrite)
	diff("limits.max_unauthenticated", cur.Limits.MaxUnauthenticated, next.Limits.MaxUnauthenticated)
	diff("limits.max_handshake_queue", cur.Limits.MaxHandshakeQueue, next.Limits.MaxHandshakeQueue)
	diff("limits.max_statement_bytes", cur.Limits.MaxStatementBytes, next.Limits.MaxStatementBytes)
	diff("limits.max_concurrent_rewrites", cur.Limits.MaxConcurrentRewrites, next.Limits.MaxConcurrentRewrites)
	diff("limits.queue_wait", cur.Limits.QueueWait, next.Limits.QueueWait)
	diff("backend.proxy_protocol", cur.Backend.ProxyProtocol, next.Backend.ProxyProtocol)
	diff("log.level", cur.Log.Level, next.Log.Level)
	diff("log.format", cur.Log.Format, next.Log.Format)
	diff("rules", cur.Rules == "", next.Rules == "")
	diff("rollup.enabled", cur.Rollup.Enabled, next.Rollup.Enabled)
	diff("rollup.interval", cur.Rollup.Interval, next.Rollup.Interval)
	diff("rollup.batch", cur.Rollup.Batch, next.Rollup.Batch)
	diff("retries", cur.Retries, next.Retries)
	diff("coalesce", cur.Coalesce, next.Coalesce)
	diff("consolidate", cur.Consolidate, next.Consolidate)
	diff("metrics.listen", cur.Metrics.Listen, next.Metrics.Listen)
	return keys
}

// oneLine joins the lines of err's message (errors.Join puts each problem
// on a line of its own) with "; ", for a log line.
func oneLine(err error) string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}
