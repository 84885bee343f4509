package proxy

import (
	"strconv"
	"time"

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

// statementPaths are the values of the path label, each initialised at
// start so that every series exists before its first event.
var statementPaths = []string{PathPassThrough, PathRewrittenRead, PathRewrittenWrite, PathGuarded,
	PathParseFailure, PathShadow, PathRefused, PathRolledUpRead}

// Outcomes of a connection phase, the "outcome" label of
// slotproxy_handshakes_total.
const (
	handshakeOK            = "ok"             // authenticated
	handshakeAuthFailed    = "auth_failed"    // the backend refused the credentials
	handshakeRefused       = "refused"        // too many connections waiting, or no slot in time (ERR 1040)
	handshakeBackendFailed = "backend_failed" // the backend could not be reached or failed during the handshake
	handshakeAborted       = "aborted"        // the client went away, timed out or sent something invalid
)

var handshakeOutcomes = []string{handshakeOK, handshakeAuthFailed, handshakeRefused, handshakeBackendFailed, handshakeAborted}

// backendErrorCodes are the codes of slotproxy_backend_errors_total
// initialised at start: the deadlocks and lock wait timeouts the proxy
// retries, which alerts watch.
var backendErrorCodes = []string{"1205", "1213"}

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
	coalesced                  prometheus.Histogram
	consolidated               prometheus.Histogram

	statementSeconds *prometheus.HistogramVec
	// pathSeconds are statementSeconds' series by path, looked up once.
	pathSeconds  map[string]prometheus.Observer
	connections  prometheus.Counter
	handshakes   *prometheus.CounterVec
	authFailures prometheus.Counter
	proxyGreets  prometheus.Counter
	parks        prometheus.Counter
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
	m.coalesced = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "slotproxy_coalesced_batch_size",
		Help:    "Autocommit increments of one record sent to the backend as one increment by their sum (coalesce: true), per batch of two or more.",
		Buckets: []float64{2, 4, 8, 16, 32, 64, 128},
	})
	m.consolidated = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "slotproxy_consolidated_read_size",
		Help:    "Identical autocommit counter reads answered by one query (consolidate: true), per query shared by two or more.",
		Buckets: []float64{2, 4, 8, 16, 32, 64, 128},
	})
	m.statementSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "slotproxy_statement_seconds",
		Help:    "Time from a statement's arrival (COM_QUERY, COM_STMT_EXECUTE) to the end of its response, by how it was handled (path; the last statement's of a multi-statement query).",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}},
		[]string{"path"})
	m.connections = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slotproxy_connections_total", Help: "Client connections accepted."})
	m.handshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slotproxy_handshakes_total",
		Help: "Connection phases ended, by outcome: ok, auth_failed (the backend refused the credentials), refused (ERR 1040: too many connections waiting for the handshake, or no slot in time), backend_failed (unreachable, refused or failed during the handshake), aborted (the client went away, timed out or sent something invalid)."},
		[]string{"outcome"})
	m.authFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slotproxy_auth_failures_total", Help: "Logins and COM_CHANGE_USER the backend refused (wrong credentials, unknown account)."})
	m.proxyGreets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slotproxy_handshakes_proxy_greeted_total", Help: "Clients greeted by the proxy itself because every handshake slot was taken (limits.max_unauthenticated); they take a slot once they answer."})
	m.parks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slotproxy_handshakes_parked_total", Help: "Handshakes whose slot was taken over while they waited for their client (their backend connection closed, the client kept)."})
	reg.MustRegister(m.clientConns, m.backendConns, m.statements, m.rewriteSeconds, m.backendErrors, m.retries, m.queued, m.coalesced, m.consolidated,
		m.statementSeconds, m.connections, m.handshakes, m.authFailures, m.proxyGreets, m.parks)
	m.passThrough = m.statements.WithLabelValues(PathPassThrough, "")
	m.rewrittenRead = m.statements.WithLabelValues(PathRewrittenRead, "")
	m.pathSeconds = make(map[string]prometheus.Observer, len(statementPaths))
	for _, p := range statementPaths {
		m.pathSeconds[p] = m.statementSeconds.WithLabelValues(p)
	}
	for _, o := range handshakeOutcomes {
		m.handshakes.WithLabelValues(o)
	}
	for _, c := range backendErrorCodes {
		m.backendErrors.WithLabelValues(c)
	}
	m.queued.WithLabelValues("ran")
	m.queued.WithLabelValues("overflowed")
	return m
}

// RegisterServerGauges adds gauges read from srv to reg: the ruled tables
// whose increments inside transactions lock the record.
func RegisterServerGauges(reg prometheus.Registerer, srv *Server) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slotproxy_read_after_increment_tables",
		Help: "Ruled tables whose counters transactions read after incrementing them; their increments inside transactions lock the record."},
		func() float64 { return float64(len(srv.env.LockedTables())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slotproxy_handshakes_waiting",
			Help: "Connections in the handshake that hold no handshake slot: greeted by the proxy and not yet answered, waiting for a slot, or parked (limits.max_handshake_queue bounds them)."},
			func() float64 { return float64(srv.HandshakesWaiting()) }))
}

// statementTook records the time a statement took, from its arrival to the
// end of its response, under its path.
func (m *Metrics) statementTook(path string, d time.Duration) {
	if m == nil {
		return
	}
	o, ok := m.pathSeconds[path]
	if !ok {
		o = m.statementSeconds.WithLabelValues(path)
	}
	o.Observe(d.Seconds())
}

func (m *Metrics) accepted() {
	if m != nil {
		m.connections.Inc()
	}
}

func (m *Metrics) handshake(outcome string) {
	if m != nil {
		m.handshakes.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) authFailed() {
	if m != nil {
		m.authFailures.Inc()
	}
}

func (m *Metrics) proxyGreeted() {
	if m != nil {
		m.proxyGreets.Inc()
	}
}

func (m *Metrics) parked() {
	if m != nil {
		m.parks.Inc()
	}
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

// Coalesced implements executor.Recorder.
func (m *Metrics) Coalesced(n int) {
	if m != nil {
		m.coalesced.Observe(float64(n))
	}
}

// Consolidated implements executor.Recorder.
func (m *Metrics) Consolidated(n int) {
	if m != nil {
		m.consolidated.Observe(float64(n))
	}
}

func (m *Metrics) conns(client, backend float64) {
	if m != nil {
		m.clientConns.Add(client)
		m.backendConns.Add(backend)
	}
}
