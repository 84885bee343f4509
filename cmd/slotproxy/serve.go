package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// runServe implements "slotproxy serve": it runs the proxy until SIGTERM or
// SIGINT, then shuts down gracefully and returns nil.
func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "--config FILE [--listen HOST:PORT] [--backend HOST:PORT]",
		"Run the proxy until SIGTERM or SIGINT, then let statements in flight finish\n"+
			"for up to timeouts.shutdown (a second signal cuts that short).\n\n"+
			"--listen and --backend override listen and backend.address from FILE;\n"+
			"--config may be left out when both are given, and the defaults are used\n"+
			"for everything else.\n\n"+
			"With rules set in FILE, serve first connects as the admin account and checks\n"+
			"the rules against the schema; it refuses to start if that fails (run\n"+
			"\"slotproxy migrate\" first to create the slot tables). After DDL on a ruled\n"+
			"table it reloads the schema.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML)")
	fs.String("listen", "", "accept clients on `HOST:PORT` (overrides listen)")
	fs.String("backend", "", "relay to the MySQL server at `HOST:PORT` (overrides backend.address)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg, err := serveConfig(*configPath, flagValue(fs, "listen"), flagValue(fs, "backend"))
	if err != nil {
		return err
	}
	logger := cfg.Logger(stderr)
	pcfg, err := proxyConfig(cfg, logger)
	if err != nil {
		return err
	}
	var set *rules.Set
	if cfg.Rules != "" {
		if set, err = rules.LoadDir(cfg.Rules); err != nil {
			return err
		}
		rw, version, err := loadRewriter(context.Background(), cfg, set)
		if err != nil {
			return err
		}
		logger.Info("loaded rules", "dir", cfg.Rules, "tables", len(rw.Catalog().Tables()),
			"backend_version", version, "row_alias", catalog.RowAlias(version))
		pcfg.Rewriter = rw
	}
	// OnDDL runs only while serving, after reloader is set.
	var reloader *catalog.Reloader
	if set != nil {
		pcfg.OnDDL = func() { reloader.Trigger() }
	}
	srv, err := proxy.NewServer(pcfg)
	if err != nil {
		return fmt.Errorf("configuring proxy: %w", err)
	}
	if set != nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // stops reloads and roll-up once serving is over
		reloader = catalog.NewReloader(ctx, func(ctx context.Context) (*rewrite.Rewriter, error) {
			rw, _, err := loadRewriter(ctx, cfg, set)
			return rw, err
		}, srv.SetRewriter, logger)
		if cfg.Rollup.Enabled {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runRollupLoop(ctx, cfg, func() *rewrite.Catalog { return srv.Rewriter().Catalog() }, false, logger)
			}()
			defer func() { cancel(); <-done }()
		}
	}
	return serve(srv, cfg, logger)
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

// serveConfig loads the configuration from path, or starts from the
// defaults when path is empty (which needs both flags), applies the --listen
// and --backend overrides (nil when not given), and validates the result.
func serveConfig(path string, listen, backend *string) (*config.Config, error) {
	var cfg *config.Config
	switch {
	case path != "":
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	case listen != nil && backend != nil:
		cfg = config.Default()
	default:
		return nil, usagef("serve: --config is required unless both --listen and --backend are given")
	}
	if listen != nil {
		if err := config.CheckAddress(*listen); err != nil {
			return nil, usagef("serve: --listen: %w", err)
		}
		cfg.Listen = *listen
	}
	if backend != nil {
		if err := config.CheckAddress(*backend); err != nil {
			return nil, usagef("serve: --backend: %w", err)
		}
		cfg.Backend.Address = *backend
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

// proxyConfig translates cfg, which has passed Validate, into the proxy's
// configuration, loading the TLS material it names.
func proxyConfig(cfg *config.Config, logger *slog.Logger) (proxy.Config, error) {
	backendTLS, err := cfg.BackendTLSConfig()
	if err != nil {
		return proxy.Config{}, err
	}
	clientTLS, err := cfg.ClientTLSConfig()
	if err != nil {
		return proxy.Config{}, err
	}
	return proxy.Config{
		Backend:            cfg.Backend.Address,
		BackendTLS:         backendTLS,
		ClientTLS:          clientTLS,
		ConnectTimeout:     cfg.Timeouts.Connect,
		HandshakeTimeout:   cfg.Timeouts.Handshake,
		MaxUnauthenticated: cfg.Limits.MaxUnauthenticated,
		MaxRetries:         retries(cfg.Retries),
		Logger:             logger,
	}, nil
}

// serve listens on cfg.Listen and runs srv until SIGTERM or SIGINT. It then
// shuts srv down, giving statements in flight cfg.Timeouts.Shutdown (or
// until a second signal) before closing every connection, and returns nil:
// a forced close is logged as a warning, not an error. It returns an error
// if it cannot listen or if srv stops serving on its own.
func serve(srv *proxy.Server, cfg *config.Config, logger *slog.Logger) error {
	// Subscribe before listening, so that a signal arriving once clients can
	// connect always means a graceful shutdown.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	logger.Info("listening",
		"listen", ln.Addr().String(),
		"backend", cfg.Backend.Address,
		"backend_tls", string(cfg.Backend.TLS.Mode),
		"client_tls", cfg.TLS.Cert != "")

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

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
		logger.Info("shutting down", "signal", sig.String(), "timeout", cfg.Timeouts.Shutdown)
		shutdown(srv, sigs, cfg.Timeouts.Shutdown, logger)
	}
	if err := <-served; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
		logger.Warn("serve failed during shutdown", "err", err)
	}
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

// retries maps the config's retries (0 = none) to proxy.Config.MaxRetries
// (0 = default, negative = none).
func retries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
