package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// runServe implements "slotproxy serve": it runs the proxy until SIGTERM or
// SIGINT, then shuts down gracefully and returns nil. SIGHUP reloads the
// configuration file and the rules.
func runServe(args []string, stdout, stderr io.Writer) error {
	// SIGHUP would end the process: take it over before anything else. A
	// SIGHUP that arrives while serve starts is handled once it serves.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)

	// SIGTERM and SIGINT end serve from here on: while it waits for the
	// backend to load the rules as well as while it serves.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)

	fs := newFlagSet("serve", "--config FILE [--listen HOST:PORT] [--backend HOST:PORT] [--metrics HOST:PORT]",
		"Run the proxy until SIGTERM or SIGINT, then let statements in flight finish\n"+
			"for up to timeouts.shutdown (a second signal cuts that short).\n\n"+
			"--listen, --backend and --metrics override listen, backend.address and\n"+
			"metrics.listen from FILE (--metrics \"\" turns the HTTP endpoint off);\n"+
			"--config may be left out when --listen and --backend are given, and the\n"+
			"defaults are used for everything else.\n\n"+
			"serve binds listen first (a port in use is an error at once). With rules\n"+
			"set in FILE, it then connects as the admin account and checks the rules\n"+
			"against the schema before it accepts clients: while the backend cannot be\n"+
			"reached it waits and tries again (not ready meanwhile); it refuses to start\n"+
			"if the rules do not match the schema (run \"slotproxy migrate\" first to\n"+
			"create the slot tables) or the admin account is refused. After DDL on a\n"+
			"ruled table it reloads the schema.\n\n"+
			"SIGHUP rereads FILE and the rules and applies them without dropping\n"+
			"connections (rules, slots_table and admin; other changes need a restart);\n"+
			"so does a change of FILE or of a rule file when --watch is set.\n"+
			"If they fail to load, serve logs why, keeps the previous ones and is not\n"+
			"ready until a reload succeeds.\n\n"+
			"On metrics.listen serve answers /metrics (Prometheus), /healthz (200 while\n"+
			"running) and /readyz (200 once serving with the rules loaded, while the\n"+
			"backend answers and the last reload succeeded; 503 with the reason\n"+
			"otherwise). Under systemd (Type=notify) it sends READY=1 once it serves.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML)")
	fs.String("listen", "", "accept clients on `HOST:PORT` (overrides listen)")
	fs.String("backend", "", "relay to the MySQL server at `HOST:PORT` (overrides backend.address)")
	fs.String("metrics", "", "serve metrics and health checks on `HOST:PORT` (overrides metrics.listen; \"\" turns them off)")
	watch := fs.Duration("watch", 0, "every `DURATION`, reread --config FILE and the rule files and reload when they changed, as SIGHUP does (for a Kubernetes ConfigMap); 0: only on SIGHUP")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *watch < 0 {
		return usagef("serve: --watch: negative duration %v", *watch)
	}
	if *watch > 0 && *configPath == "" {
		return usagef("serve: --watch needs --config")
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	over := overrides{listen: flagValue(fs, "listen"), backend: flagValue(fs, "backend"), metrics: flagValue(fs, "metrics")}
	cfg, err := serveConfig(*configPath, over)
	if err != nil {
		return err
	}
	logger := cfg.Logger(stderr)
	pcfg, err := proxyConfig(cfg, logger)
	if err != nil {
		return err
	}
	reg := newRegistry()
	pcfg.Metrics = proxy.NewMetrics(reg)
	// OnDDL runs only while serving, after reloader is set.
	var reloader *catalog.Reloader
	if cfg.Rules != "" {
		pcfg.OnDDL = func() { reloader.Trigger() }
	}
	srv, err := proxy.NewServer(pcfg)
	if err != nil {
		return fmt.Errorf("configuring proxy: %w", err)
	}
	proxy.RegisterServerGauges(reg, srv)
	reloads := newReloadMetrics(reg)
	l := &live{path: *configPath, over: over, srv: srv, log: logger, reloads: reloads}
	l.cfg.Store(cfg)
	if cfg.Rules != "" {
		// Folds inside clients' REPEATABLE READ transactions read which
		// slot rows count as the admin account (executor.SlotReader).
		reader := catalog.NewSlotReader(func(ctx context.Context) (*client.Conn, error) { return catalog.Connect(ctx, l.config()) }, 4)
		defer reader.Close()
		srv.SetSlotReader(reader)
	}

	// The HTTP endpoint comes up first, so that /healthz answers and
	// /readyz says what serve is waiting for while the rules load.
	ready := &readiness{rules: cfg.Rules != "", probe: backendProbe(l.config), reloads: reloads}
	var ops *opsServer
	if cfg.Metrics.Listen != "" {
		if ops, err = startOps(cfg.Metrics.Listen, reg, ready, logger); err != nil {
			return err
		}
		defer ops.stop()
	}
	// Then the clients' port, before the rules load and the roll-up
	// starts: a port in use is reported at once. Clients that connect
	// before serve accepts wait in the listen backlog.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	defer ln.Close() // Serve closes it too; this covers the returns before it

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops reloads and roll-up once serving is over
	if cfg.Rules != "" {
		set, err := rules.LoadDir(cfg.Rules)
		if err != nil {
			return err
		}
		rw, version, err := startRewriter(ctx, cfg, set, ready, logger, sigs)
		if errors.Is(err, errStopped) {
			logger.Info("stopped")
			return nil
		}
		if err != nil {
			return err
		}
		logger.Info("loaded rules", "dir", cfg.Rules, "tables", len(rw.Catalog().Tables()),
			"backend_version", version, "dialect", dialect.Parse(version).String(), "row_alias", dialect.Parse(version).UpsertRowAlias())
		applySlotPartition(ctx, cfg, srv, logger)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			watchSlotPartition(ctx, l.config, srv, logger)
		}()
		defer func() { cancel(); <-watched }()
		srv.SetRewriter(rw)
		l.set = set
		ready.loaded.Store(true)
		// afterDDL applies the rewriter itself, under the lock that
		// serializes it with SIGHUP reloads.
		reloader = catalog.NewReloader(ctx, l.afterDDL, func(*rewrite.Rewriter) {}, logger)
		if cfg.Rollup.Enabled {
			metrics := newRollupMetrics(reg, time.Now())
			metrics.batch = cfg.Rollup.Batch
			cat := func() *rewrite.Catalog { return srv.Rewriter().Catalog() }
			late := false
			observe := func(st rollup.Stats, err error) {
				metrics.observe(st, err)
				// reads: rolled_up promises a bound: say when it is missed
				// (and when it is kept again).
				bound := minStaleness(cat())
				over := bound > 0 && metrics.staleness() > bound
				switch {
				case over && !late:
					logger.Warn("roll-up is behind the max_staleness of reads: rolled_up", "staleness", metrics.staleness().Round(time.Millisecond), "max_staleness", bound)
				case !over && late:
					logger.Info("roll-up is within max_staleness again", "staleness", metrics.staleness().Round(time.Millisecond), "max_staleness", bound)
				}
				late = over
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				runRollupLoop(ctx, l.config, cat, srv.SlotPartition, false, logger, observe)
			}()
			defer func() { cancel(); <-done }()
		}
	}
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		var tick <-chan time.Time
		var seen [sha256.Size]byte
		if *watch > 0 {
			t := time.NewTicker(*watch)
			defer t.Stop()
			tick = t.C
			seen = filesDigest(*configPath, l.config().Rules)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-hups:
				logger.Info("reloading", "signal", sig.String())
				notify("RELOADING=1")
				l.reload(ctx, reloadSignal)
				notify("READY=1")
				seen = filesDigest(*configPath, l.config().Rules)
			case <-tick:
				now := filesDigest(*configPath, l.config().Rules)
				if now == seen {
					continue
				}
				seen = now
				logger.Info("reloading: the configuration file or the rule files changed", "config", *configPath)
				notify("RELOADING=1")
				l.reload(ctx, reloadWatch)
				notify("READY=1")
			}
		}
	}()
	defer func() { cancel(); <-reloaded }()
	return serve(srv, ln, cfg, logger, ready, ops, sigs)
}

// filesDigest is a digest of the configuration file at path and of the
// rule files (*.yaml, *.yml) in the directory rules, read through symbolic
// links (a Kubernetes ConfigMap volume swaps a link when it changes). A
// file that cannot be read counts as empty: the reload reports it.
func filesDigest(path, rules string) [sha256.Size]byte {
	h := sha256.New()
	add := func(name string) {
		data, _ := os.ReadFile(name)
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
	}
	add(path)
	if rules != "" {
		entries, _ := os.ReadDir(rules)
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				continue
			}
			add(filepath.Join(rules, name))
		}
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// errStopped: a signal asked serve to stop before it served.
var errStopped = errors.New("stopped by a signal")

// retryMax bounds the wait between attempts to load the rules at start.
const retryMax = 30 * time.Second

// startRewriter loads the rules' rewriter when serve starts. While the
// backend cannot be reached (no connection, no greeting, or it refuses
// connections: too many, host blocked) it logs why, makes /readyz say so,
// and tries again, waiting 1 s, then twice as long each time up to
// retryMax, until SIGTERM or SIGINT on sigs (errStopped): under systemd or
// Kubernetes the proxy may start before its database. Any other failure is
// returned, as waiting would not cure it: a rule that does not match the
// schema, slot tables missing (migrate), the admin account refused.
func startRewriter(ctx context.Context, cfg *config.Config, set *rules.Set, ready *readiness, logger *slog.Logger,
	sigs <-chan os.Signal) (*rewrite.Rewriter, string, error) {
	wait := time.Second
	for {
		rw, version, err := loadRewriter(ctx, cfg, set, logger, false)
		if err == nil {
			ready.setWaiting(nil)
			return rw, version, nil
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		unreachable := readGreeting(pctx, cfg.Backend.Address)
		cancel()
		if unreachable == nil {
			return nil, "", err // the backend answers: the rules or the account are wrong
		}
		ready.setWaiting(unreachable)
		logger.Warn("cannot load the rules: the backend is unreachable; trying again", "err", unreachable, "in", wait)
		select {
		case <-time.After(wait):
		case sig := <-sigs:
			logger.Info("shutting down before serving", "signal", sig.String())
			return nil, "", errStopped
		}
		wait = min(2*wait, retryMax)
	}
}

// flagValue returns a pointer to the value of the flag name if it was given
// on the command line, and nil if not.
func flagValue(fs *flag.FlagSet, name string) *string {
	var v *string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			s := f.Value.String()
			v = &s
		}
	})
	return v
}

// overrides are serve's flags that override keys of the file; nil when not
// given.
type overrides struct {
	listen, backend, metrics *string
}

// serveConfig loads the configuration from path, or starts from the
// defaults when path is empty (which needs both --listen and --backend),
// applies the overrides, and validates the result.
func serveConfig(path string, over overrides) (*config.Config, error) {
	var cfg *config.Config
	switch {
	case path != "":
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	case over.listen != nil && over.backend != nil:
		cfg = config.Default()
	default:
		return nil, usagef("serve: --config is required unless both --listen and --backend are given")
	}
	if over.listen != nil {
		if err := config.CheckAddress(*over.listen); err != nil {
			return nil, usagef("serve: --listen: %w", err)
		}
		cfg.Listen = *over.listen
	}
	if over.backend != nil {
		if err := config.CheckAddress(*over.backend); err != nil {
			return nil, usagef("serve: --backend: %w", err)
		}
		cfg.Backend.Address = *over.backend
	}
	if over.metrics != nil {
		if *over.metrics != "" {
			if err := config.CheckAddress(*over.metrics); err != nil {
				return nil, usagef("serve: --metrics: %w", err)
			}
		}
		cfg.Metrics.Listen = *over.metrics
	}
	if cfg.Listen == "" {
		return nil, fmt.Errorf("%s: listen: not set (add it to the file or pass --listen)", path)
	}
	if cfg.Backend.Address == "" {
		return nil, fmt.Errorf("%s: backend: not set (add it to the file or pass --backend)", path)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// generatedFingerprint is the SHA-256 fingerprint of the client certificate
// proxyConfig made (tls.generate), for the "listening" log line.
var generatedFingerprint string

// proxyConfig translates cfg, which has passed Validate, into the proxy's
// configuration, loading the TLS material it names.
func proxyConfig(cfg *config.Config, logger *slog.Logger) (proxy.Config, error) {
	backendTLS, err := cfg.BackendTLSConfig()
	if err != nil {
		return proxy.Config{}, err
	}
	clientTLS, generated, err := cfg.ClientTLSConfig()
	if err != nil {
		return proxy.Config{}, err
	}
	generatedFingerprint = generated
	return proxy.Config{
		Backend:               cfg.Backend.Address,
		BackendTLS:            backendTLS,
		BackendTLSPreferred:   cfg.BackendTLSPreferred(),
		ClientTLS:             clientTLS,
		ConnectTimeout:        cfg.Timeouts.Connect,
		HandshakeTimeout:      cfg.Timeouts.Handshake,
		ClientWriteTimeout:    cfg.Timeouts.ClientWrite,
		MaxUnauthenticated:    cfg.Limits.MaxUnauthenticated,
		MaxHandshakeQueue:     cfg.Limits.MaxHandshakeQueue,
		MaxStatementBytes:     cfg.Limits.MaxStatementBytes,
		MaxConcurrentRewrites: concurrentRewrites(cfg.Limits.MaxConcurrentRewrites),
		QueueWait:             cfg.Limits.QueueWait,
		ProxyProtocol:         cfg.Backend.ProxyProtocol,
		MaxRetries:            retries(cfg.Retries),
		Coalesce:              cfg.Coalesce,
		Consolidate:           cfg.Consolidate,
		Logger:                logger,
	}, nil
}

// clientTLSMode says how TLS is offered to clients, for the log.
func clientTLSMode(cfg *config.Config) string {
	switch {
	case cfg.TLS.Cert != "":
		return "configured certificate"
	case cfg.TLS.Generate:
		return "generated certificate"
	}
	return "off"
}

// serve runs srv on ln until SIGTERM or SIGINT arrives on sigs. It then
// marks serve not ready, shuts srv down, giving statements in flight
// cfg.Timeouts.Shutdown (or until a second signal) before closing every
// connection, stops the HTTP endpoint ops (nil when off) and returns nil: a
// forced close is logged as a warning, not an error. It returns an error
// if srv stops serving on its own. Once it serves it tells systemd
// (READY=1, see notify).
func serve(srv *proxy.Server, ln net.Listener, cfg *config.Config, logger *slog.Logger, ready *readiness, ops *opsServer, sigs <-chan os.Signal) error {
	ready.serving.Store(true)
	metrics := "off"
	if ops != nil {
		metrics = ops.addr()
	}
	logger.Info("listening",
		"listen", ln.Addr().String(),
		"backend", cfg.Backend.Address,
		"backend_tls", string(cfg.Backend.TLS.Mode),
		"client_tls", clientTLSMode(cfg),
		"metrics", metrics,
		"version", versionString())
	if generatedFingerprint != "" {
		logger.Info("offering TLS to clients with a self-signed certificate made at start (set tls.cert and tls.key to use your own, or tls.generate: false to offer none)",
			"sha256_fingerprint", generatedFingerprint)
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if err := notify("READY=1\nSTATUS=serving on " + ln.Addr().String()); err != nil {
		logger.Warn("could not tell systemd that serve is ready", "err", err)
	}

	select {
	case err := <-served:
		// Serve runs until Shutdown or Close, so the proxy has stopped
		// without being asked to.
		srv.Close()
		if err == nil || errors.Is(err, proxy.ErrServerClosed) {
			err = errors.New("proxy stopped serving without being asked to")
		}
		return fmt.Errorf("serving: %w", err)
	case sig := <-sigs:
		ready.stopping.Store(true)
		notify("STOPPING=1")
		logger.Info("shutting down", "signal", sig.String(), "timeout", cfg.Timeouts.Shutdown)
		shutdown(srv, sigs, cfg.Timeouts.Shutdown, logger)
	}
	if err := <-served; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
		logger.Warn("serve failed during shutdown", "err", err)
	}
	ops.stop()
	logger.Info("stopped")
	return nil
}

// shutdown stops srv gracefully, closing the remaining connections after
// timeout or as soon as another signal arrives on sigs.
func shutdown(srv *proxy.Server, sigs <-chan os.Signal, timeout time.Duration, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			logger.Warn("second signal: closing connections now", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("graceful shutdown incomplete; closed the remaining connections", "err", err)
		if err := srv.Close(); err != nil {
			logger.Warn("closing", "err", err)
		}
	}
}

// concurrentRewrites maps the config's limits.max_concurrent_rewrites (0 =
// no limit) to proxy.Config.MaxConcurrentRewrites (0 = the default,
// negative = no limit).
func concurrentRewrites(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// retries maps the config's retries (0 = none) to proxy.Config.MaxRetries
// (0 = default, negative = none).
func retries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
