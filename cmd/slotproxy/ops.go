package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/rollup"
)

// This file holds what serve offers operators over HTTP: /metrics,
// /healthz and /readyz on metrics.listen.

const (
	// probeTimeout bounds one readiness check of the backend.
	probeTimeout = 2 * time.Second
	// probeCacheFor is how long a readiness check's result is reused, so
	// that frequent /readyz requests do not each dial the backend.
	probeCacheFor = time.Second
	// httpShutdownTimeout bounds the HTTP endpoint's graceful shutdown.
	httpShutdownTimeout = 5 * time.Second
)

// newRegistry returns a registry with the Go runtime and process
// collectors, for the proxy's and the roll-up's metrics to join.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// opsServer is the HTTP endpoint on metrics.listen.
type opsServer struct {
	http *http.Server
	ln   net.Listener
	done chan struct{} // closed when Serve has returned
	once sync.Once     // for stop
}

// startOps listens on addr and serves /metrics from reg, /healthz, and
// /readyz from ready. It returns once the endpoint is listening.
func startOps(addr string, reg *prometheus.Registry, ready *readiness, logger *slog.Logger) (*opsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slogPrinter{logger},
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready.check(r.Context()); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	o := &opsServer{
		http: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(o.done)
		if err := o.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return o, nil
}

// addr is the address the endpoint listens on.
func (o *opsServer) addr() string { return o.ln.Addr().String() }

// stop shuts the endpoint down, letting requests in flight finish for up to
// httpShutdownTimeout. It may be called more than once, and on a nil
// *opsServer.
func (o *opsServer) stop() {
	if o == nil {
		return
	}
	o.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := o.http.Shutdown(ctx); err != nil {
			o.http.Close()
		}
		<-o.done
	})
}

// writeText writes a one-line plain-text response.
func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// slogPrinter adapts a logger to promhttp.Logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics: " + fmt.Sprint(v...)) }

// readiness decides /readyz: ready once serve accepts clients with its rules
// loaded (when it has rules), while the backend answers and the last
// reload succeeded, until shutdown begins.
type readiness struct {
	rules    bool        // rules are configured
	loaded   atomic.Bool // the rules are loaded
	serving  atomic.Bool // the proxy accepts clients
	stopping atomic.Bool // shutdown has begun
	probe    func(context.Context) error
	reloads  *reloadMetrics // the outcome of the last reload; nil: none
	// waiting is why the rules are not loaded yet (the backend is
	// unreachable), nil while the first attempt runs.
	waiting atomic.Pointer[error]

	mu   sync.Mutex // serializes probes; guards at and last
	at   time.Time  // when last was found
	last error      // the last probe's result
}

// check returns nil when serve is ready, else why not.
func (r *readiness) check(ctx context.Context) error {
	switch {
	case r.stopping.Load():
		return errors.New("shutting down")
	case r.rules && !r.loaded.Load():
		if w := r.waiting.Load(); w != nil {
			return fmt.Errorf("rules not loaded yet: %w", *w)
		}
		return errors.New("rules not loaded yet")
	case !r.serving.Load():
		return errors.New("not accepting connections yet")
	}
	if why := r.reloads.lastFailure(); why != "" {
		return fmt.Errorf("the last reload failed, serve runs with the rules it had: %s", why)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < probeCacheFor {
		return r.last
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	r.last = r.probe(ctx)
	r.at = time.Now()
	return r.last
}

// setWaiting records why the rules are not loaded yet (nil: they are, or
// the first attempt runs).
func (r *readiness) setWaiting(err error) {
	if err == nil {
		r.waiting.Store(nil)
		return
	}
	r.waiting.Store(&err)
}

// backendProbe returns the readiness check of the backend: the backend is
// reachable when it greets a new connection with a MySQL handshake (not an
// error such as "too many connections" or "host blocked").
//
// A connection closed right after the greeting counts on the server as an
// interrupted handshake of the proxy's host, and max_connect_errors of
// those in a row without a successful login block the host. So when an
// admin account is configured (cfg returns the current configuration), the
// probe logs in with it and quits cleanly instead, and reads a bare
// greeting only if that login fails: a failed login still means the backend
// answered.
func backendProbe(cfg func() *config.Config) func(context.Context) error {
	return func(ctx context.Context) error {
		c := cfg()
		if c.Admin.User != "" {
			if conn, err := catalog.Connect(ctx, c); err == nil {
				conn.Quit()
				return nil
			}
		}
		return readGreeting(ctx, c.Backend.Address)
	}
}

// readGreeting dials addr and reads the server's first packet, which must be
// a protocol 10 handshake.
func readGreeting(ctx context.Context, addr string) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("backend %s unreachable: %w", addr, err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return fmt.Errorf("backend %s sent no greeting: %w", addr, err)
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("backend %s: not a MySQL greeting (packet of %d bytes)", addr, n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(nc, payload); err != nil {
		return fmt.Errorf("backend %s sent no greeting: %w", addr, err)
	}
	switch {
	case payload[0] == 10:
		return nil
	case payload[0] == 0xff && len(payload) >= 3:
		// ERR: 0xff, code (2 bytes), then (with protocol 4.1) '#' and a
		// five-character SQL state, then the message.
		code := int(payload[1]) | int(payload[2])<<8
		msg := payload[3:]
		if len(msg) >= 6 && msg[0] == '#' {
			msg = msg[6:]
		}
		return fmt.Errorf("backend %s refused the connection: ERROR %d: %s", addr, code, msg)
	default:
		return fmt.Errorf("backend %s: not a MySQL greeting (protocol %d)", addr, payload[0])
	}
}

// rollupMetrics are the metrics of serve's background roll-up.
type rollupMetrics struct {
	folds, passes, errors prometheus.Counter
	unfoldable            prometheus.Counter
	pending               prometheus.Gauge
	lockHold              prometheus.Histogram
	lastOK                atomic.Int64 // UnixNano of the end of the last pass without error
	// batch is rollup.batch: a pass that saw fewer records with slot rows
	// saw them all.
	batch int
	// complete is when the last pass that folded every record with slot
	// rows began: every increment older than that is folded, so now -
	// complete bounds how stale a rolled-up read is.
	complete atomic.Int64
}

// staleness bounds the age of the oldest increment not yet folded.
func (m *rollupMetrics) staleness() time.Duration {
	return time.Since(time.Unix(0, m.complete.Load()))
}

// newRollupMetrics registers the roll-up's metrics with reg. The lag is
// counted from now until the first pass succeeds.
func newRollupMetrics(reg prometheus.Registerer, now time.Time) *rollupMetrics {
	m := &rollupMetrics{
		folds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotproxy_rollup_folds_total", Help: "Records (key and counter) folded from slot rows into their base rows."}),
		unfoldable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotproxy_rollup_unfoldable_total", Help: "Records whose fold the server refused (a total beyond the column's range, a constraint), skipped and logged; the pass went on."}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotproxy_rollup_passes_total", Help: "Roll-up passes run, failed or not."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotproxy_rollup_errors_total", Help: "Roll-up passes that failed (including failures to connect)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotproxy_rollup_pending_records", Help: "Records with slot rows seen at the start of the last successful pass (at most rollup.batch per slot table)."}),
		lockHold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slotproxy_rollup_lock_hold_seconds",
			Help:    "Longest time a fold held a base row locked, per pass that folded something.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}), // 0.5ms to ~1s
	}
	m.lastOK.Store(now.UnixNano())
	m.complete.Store(now.UnixNano())
	reg.MustRegister(m.folds, m.unfoldable, m.passes, m.errors, m.pending, m.lockHold,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slotproxy_rollup_staleness_seconds",
			Help: "Upper bound of the age of the oldest increment not yet folded into its base row: the time since the last roll-up pass that folded every record with slot rows began (since serve started, before the first). Reads of rules with reads: rolled_up are at most this far behind."},
			func() float64 { return m.staleness().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slotproxy_rollup_lag_seconds", Help: "Time since the last roll-up pass that completed without error (since serve started, before the first)."},
			func() float64 { return time.Since(time.Unix(0, m.lastOK.Load())).Seconds() }))
	return m
}

// observe records the outcome of one pass. A nil *rollupMetrics records
// nothing.
func (m *rollupMetrics) observe(st rollup.Stats, err error) {
	if m == nil {
		return
	}
	m.passes.Inc()
	m.folds.Add(float64(st.Folds))
	m.unfoldable.Add(float64(st.Unfoldable))
	if st.MaxLockHold > 0 {
		m.lockHold.Observe(st.MaxLockHold.Seconds())
	}
	now := time.Now().UnixNano()
	if err != nil {
		m.errors.Inc()
		return
	}
	if st.Skipped == 0 && st.Unfoldable == 0 && (m.batch <= 0 || st.Pending < m.batch) && !st.Began.IsZero() {
		m.complete.Store(st.Began.UnixNano())
	}
	m.pending.Set(float64(st.Pending))
	m.lastOK.Store(now)
}
