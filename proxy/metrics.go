package proxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotproxy/slotproxy/executor"
)

// Statement paths, the "path" label of slotproxy_statements_total.
const (
	PathPassThrough    = executor.PathPassThrough
	PathRewrittenRead  = executor.PathRewrittenRead
	PathRewrittenWrite = executor.PathRewrittenWrite
	PathGuarded        = executor.PathGuarded
	PathParseFailure   = executor.PathParseFailure
	PathShadow         = executor.PathShadow
	PathRefused        = executor.PathRefused
	PathRolledUpRead   = executor.PathRolledUpRead
)

// Metrics are the proxy's Prometheus collectors. A nil *Metrics records
// nothing; all methods are safe for concurrent use.
type Metrics struct {
	clientConns  prometheus.Gauge
	backendConns prometheus.Gauge
	statements   *prometheus.CounterVec
	// The series of every pass-through statement and every rewritten read,
	// looked up once: the per-statement cost of a label lookup (hashing,
	// a lock) is not paid on the hot path.
	passThrough, rewrittenRead prometheus.Counter
	rewriteSeconds             prometheus.Histogram
	backendErrors              *prometheus.CounterVec
	retries                    prometheus.Counter
	queued                     *prometheus.CounterVec
}

// NewMetrics creates the proxy's collectors and registers them with reg,
// including a gauge of the existence cache's size read from srv when it is
// set later (see Server).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		clientConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotproxy_client_connections", Help: "Client connections open (in the handshake or authenticated)."}),
		backendConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotproxy_backend_connections", Help: "Backend connections open."}),
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotproxy_statements_total",
			Help: "Statements by how they were handled (path) and the ruled table they touched (rule, empty for none)."},
			[]string{"path", "rule"}),
		rewriteSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slotproxy_rewrite_seconds",
			Help:    "Time to decide and build the rewrite of a statement that names a ruled table.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3}}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotproxy_backend_errors_total", Help: "ERR packets from the backend, by MySQL error code."},
			[]string{"code"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotproxy_retries_total", Help: "Rewritten autocommit statements retried after a deadlock or lock wait timeout."}),
	}
	m.queued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slotproxy_queued_statements_total",
		Help: "Rewritten statements of sessions outside transactions that waited for a turn (limits.max_concurrent_rewrites): outcome ran (got one) or overflowed (ran without one: no turn given back for limits.queue_wait)."},
		[]string{"outcome"})
	reg.MustRegister(m.clientConns, m.backendConns, m.statements, m.rewriteSeconds, m.backendErrors, m.retries, m.queued)
	m.passThrough = m.statements.WithLabelValues(PathPassThrough, "")
	m.rewrittenRead = m.statements.WithLabelValues(PathRewrittenRead, "")
	return m
}

// RegisterServerGauges adds gauges read from srv to reg: the ruled tables
// whose increments inside transactions lock the record.
func RegisterServerGauges(reg prometheus.Registerer, srv *Server) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slotproxy_read_after_increment_tables",
		Help: "Ruled tables whose counters transactions read after incrementing them; their increments inside transactions lock the record."},
		func() float64 { return float64(len(srv.env.LockedTables())) }))
}

func (m *Metrics) statement(path, rule string) {
	switch {
	case m == nil:
	case rule == "" && path == PathPassThrough:
		m.passThrough.Inc()
	case rule == "" && path == PathRewrittenRead:
		m.rewrittenRead.Inc()
	default:
		m.statements.WithLabelValues(path, rule).Inc()
	}
}

// Statement implements executor.Recorder.
func (m *Metrics) Statement(path, rule string) { m.statement(path, rule) }

// RewriteTook implements executor.Recorder.
func (m *Metrics) RewriteTook(seconds float64) {
	if m != nil {
		m.rewriteSeconds.Observe(seconds)
	}
}

// BackendError implements executor.Recorder.
func (m *Metrics) BackendError(code uint16) {
	if m != nil {
		m.backendErrors.WithLabelValues(strconv.Itoa(int(code))).Inc()
	}
}

// Retry implements executor.Recorder.
func (m *Metrics) Retry() {
	if m != nil {
		m.retries.Inc()
	}
}

// Queued implements executor.Recorder.
func (m *Metrics) Queued(overflowed bool) {
	if m != nil {
		outcome := "ran"
		if overflowed {
			outcome = "overflowed"
		}
		m.queued.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) conns(client, backend float64) {
	if m != nil {
		m.clientConns.Add(client)
		m.backendConns.Add(backend)
	}
}
