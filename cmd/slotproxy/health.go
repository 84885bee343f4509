package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/slotproxy/slotproxy/internal/config"
)

// runHealth implements "slotproxy health": a readiness or liveness check of
// a running serve through its HTTP endpoint, for container images and
// hosts without curl (a Docker HEALTHCHECK, a Kubernetes exec probe, a
// systemd ExecStartPost).
func runHealth(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("health", "[--config FILE] [--metrics HOST:PORT] [--live] [--timeout DURATION]",
		"Ask a running serve whether it is ready (GET /readyz on its HTTP endpoint),\n"+
			"or with --live whether it runs (GET /healthz), and print its one-line\n"+
			"answer. Exit status 0 when it answers 200, 1 otherwise (not ready, not\n"+
			"running, no answer within --timeout).\n\n"+
			"The endpoint is metrics.listen of --config FILE (default 127.0.0.1:9307),\n"+
			"or --metrics HOST:PORT; an address that listens on every interface\n"+
			"(\":9307\", 0.0.0.0, ::) is asked on the loopback interface.")
	configPath := fs.String("config", "", "the configuration `FILE` of the serve to ask (for metrics.listen)")
	fs.String("metrics", "", "the HTTP endpoint at `HOST:PORT` (overrides metrics.listen)")
	live := fs.Bool("live", false, "ask /healthz (running) instead of /readyz (ready)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after `DURATION`")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	addr := config.DefaultMetricsListen
	if *configPath != "" {
		cfg, err := config.Load(*configPath)
		if err != nil {
			return err
		}
		addr = cfg.Metrics.Listen
	}
	if m := flagValue(fs, "metrics"); m != nil {
		if err := config.CheckAddress(*m); err != nil {
			return usagef("health: --metrics: %w", err)
		}
		addr = *m
	}
	if addr == "" {
		return fmt.Errorf("health: metrics.listen is off in %s: serve has no HTTP endpoint to ask", *configPath)
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	url := "http://" + dialable(addr) + path
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// Straight to serve: no HTTP proxy from the environment.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	answer := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s: %d %s", url, resp.StatusCode, answer)
	}
	fmt.Fprintln(stdout, answer)
	return nil
}

// dialable turns a listen address into one to connect to: an empty or
// unspecified host (every interface) becomes the loopback address.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case host == "", ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
