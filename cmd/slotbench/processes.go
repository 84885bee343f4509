package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"gopkg.in/yaml.v3"

	"github.com/slotproxy/slotproxy/executor"
	"github.com/slotproxy/slotproxy/proxy"
)

// With --slotproxy BINARY, the servers under test run as they are
// deployed, each a process of its own: slotproxy as `BINARY serve` with a
// configuration slotbench writes (--serve-config's settings, else the
// defaults of a configuration file, roll-up, coalescing and TLS to a
// backend that offers it included; the listener, backend address, rules,
// admin account and metrics endpoint are slotbench's; one process per variant: as
// configured, coalescing and consolidation off for the -solo targets, the
// rule with reads: rolled_up for counter-read's rolled-up target), and the
// plain relay as a child process (see childMain). The load generator then
// holds only the clients, and each operation's CPU time is reported for
// the process serving it apart from slotbench's own.

// served is a `slotproxy serve` process.
type served struct {
	cmd     *exec.Cmd
	addr    string // its listener
	metrics string // its HTTP endpoint (readyz, metrics)
	log     string // its log file
	done    chan error
}

// startServe starts BINARY serve in a directory of its own under dir with
// the rule text rule and the configuration's top-level settings extra
// (coalesce: false, say), and waits until it is ready.
func (b *bench) startServe(dir, name string, rule []byte, extra map[string]any) (*served, error) {
	dir = filepath.Join(dir, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	rulesDir := filepath.Join(dir, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(rulesDir, "repos.yaml"), rule, 0o644); err != nil {
		return nil, err
	}
	listen, err := freeLoopback()
	if err != nil {
		return nil, err
	}
	metrics, err := freeLoopback()
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{}
	if b.opts.serveConfig != "" {
		data, err := os.ReadFile(b.opts.serveConfig)
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", b.opts.serveConfig, err)
		}
		if cfg == nil {
			cfg = map[string]any{}
		}
	}
	cfg = serveConfig(cfg, listen, metrics, rulesDir, b.backendAddr, b.adminUser, b.adminPass, extra)
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "slotproxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(b.opts.slotproxyBin, "serve", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Never outlives slotbench.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s serve: %w", b.opts.slotproxyBin, err)
	}
	s := &served{cmd: cmd, addr: listen, metrics: metrics, log: logPath, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	if err := s.waitReady(); err != nil {
		s.stop()
		return nil, fmt.Errorf("slotproxy %s: %w (its log: %s)", name, err, lastLines(logPath, 5))
	}
	return s, nil
}

// serveConfig is the configuration of a serve process: cfg (--serve-config's
// settings, or empty) with slotbench's listener, metrics listener, rules
// directory, backend address (a backend mapping keeps its other settings,
// such as tls) and admin account, then the top-level settings extra.
func serveConfig(cfg map[string]any, listen, metrics, rulesDir, backend, adminUser, adminPass string, extra map[string]any) map[string]any {
	m, _ := cfg["metrics"].(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	m["listen"] = metrics
	cfg["metrics"] = m
	cfg["listen"], cfg["rules"] = listen, rulesDir
	if be, ok := cfg["backend"].(map[string]any); ok {
		be["address"] = backend
	} else {
		cfg["backend"] = backend
	}
	cfg["admin"] = map[string]string{"user": adminUser, "password": adminPass}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// waitReady polls the process's /readyz for up to a minute.
func (s *served) waitReady() error {
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := http.Get("http://" + s.metrics + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("not ready within a minute")
		}
	}
}

// stop sends SIGTERM and waits for the process to exit (SIGKILL after 10s).
func (s *served) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// stats reads the process's counters that StatsSnapshot reports from its
// metrics (false when they cannot be read).
func (s *served) stats() (proxy.StatsSnapshot, bool) {
	var st proxy.StatsSnapshot
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return st, false
	}
	if f := fams["slotproxy_coalesced_batch_size"]; f != nil && len(f.Metric) > 0 {
		h := f.Metric[0].GetHistogram()
		st.Coalesced, st.Batches = uint64(h.GetSampleSum()), h.GetSampleCount()
	}
	if f := fams["slotproxy_consolidated_read_size"]; f != nil && len(f.Metric) > 0 {
		st.ConsolidatedReads = uint64(f.Metric[0].GetHistogram().GetSampleSum())
	}
	if f := fams["slotproxy_statements_total"]; f != nil {
		for _, m := range f.Metric {
			n := uint64(m.GetCounter().GetValue())
			for _, l := range m.Label {
				if l.GetName() != "path" {
					continue
				}
				switch l.GetValue() {
				case executor.PathRewrittenWrite:
					st.RewrittenWrites += n
				case executor.PathGuarded:
					st.GuardedWrites += n
				case executor.PathRewrittenRead:
					st.RewrittenReads += n
				case executor.PathRefused:
					st.Refused += n
				case executor.PathParseFailure:
					st.ParseFailures += n
				case executor.PathShadow:
					st.Shadowed += n
				}
			}
		}
	}
	if f := fams["slotproxy_retries_total"]; f != nil && len(f.Metric) > 0 {
		st.Retries = uint64(f.Metric[0].GetCounter().GetValue())
	}
	return st, true
}

// freeLoopback returns a loopback address whose port was free a moment ago.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// lastLines returns the last n lines of the file at path, on one line.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// startProcesses is setup's last part with --slotproxy: the relay as a
// child process and slotproxy's variants as serve processes (see
// startServed), their addresses and pids recorded for the targets.
func (b *bench) startProcesses(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "slotbench-serve-")
	if err != nil {
		return err
	}
	b.procDir = dir
	b.pids = map[string]int{}
	b.cons.progress("starting the relay...")
	if b.relayChild, err = b.startChild("relay"); err != nil {
		return err
	}
	b.relayAddr = b.relayChild.addr
	b.pids[b.relayAddr] = b.relayChild.cmd.Process.Pid
	return b.startServed(ctx, false)
}

// rollupOff reports whether workload runs against serve processes with
// roll-up off whatever the configuration says: the read workloads seed
// slot rows and read them, which a roll-up would fold into the base rows.
func rollupOff(workload string) bool {
	return workload == wCounterRead || workload == wHotRead
}

// startServed (re)starts slotproxy's variants as serve processes, with
// roll-up forced off when off is set (see rollupOff): as configured (the
// main target), coalescing and consolidation off (-solo), and the rule
// with reads: rolled_up (-rolled-up; not with --rule).
func (b *bench) startServed(ctx context.Context, off bool) error {
	if b.served != nil && b.servedRollupOff == off {
		return nil
	}
	for _, s := range b.served {
		s.stop()
		delete(b.pids, s.addr)
	}
	b.served, b.mainServed, b.servedRollupOff = nil, nil, off
	rule, err := b.ruleText()
	if err != nil {
		return err
	}
	b.cons.progress("starting slotproxy serve (3 processes)...")
	start := func(name string, rule []byte, extra map[string]any) (*served, error) {
		if off {
			if extra == nil {
				extra = map[string]any{}
			}
			extra["rollup"] = map[string]any{"enabled": false}
		}
		s, err := b.startServe(b.procDir, name, rule, extra)
		if err != nil {
			return nil, err
		}
		b.served = append(b.served, s)
		b.pids[s.addr] = s.cmd.Process.Pid
		return s, nil
	}
	main, err := start("slotproxy", rule, nil)
	if err != nil {
		return err
	}
	b.proxyAddr, b.mainServed = main.addr, main
	solo, err := start("slotproxy-solo", rule, map[string]any{"coalesce": false, "consolidate": false})
	if err != nil {
		return err
	}
	b.soloAddr = solo.addr
	if b.opts.ruleFile == "" {
		rolled, err := start("slotproxy-rolled-up", append(rule, "reads: rolled_up\n"...), nil)
		if err != nil {
			return err
		}
		b.rolledAddr = rolled.addr
	}
	return ctx.Err()
}

// ruleText is the rule file the bench's catalog was built from.
func (b *bench) ruleText() ([]byte, error) {
	if b.opts.ruleFile != "" {
		return os.ReadFile(b.opts.ruleFile)
	}
	return []byte(builtinRule(b.opts.slots)), nil
}

// stopProcesses stops what startProcesses started and removes its
// directory.
func (b *bench) stopProcesses() {
	for _, s := range b.served {
		s.stop()
	}
	b.served = nil
	if b.relayChild != nil {
		if err := b.relayChild.stop(); err != nil {
			b.cons.logf("slotbench: relay: %v", err)
		}
	}
	if b.procDir != "" {
		os.RemoveAll(b.procDir)
	}
}

// proxyStats is the main slotproxy's counters: from the server in this
// process, or from the metrics of its serve process (false: unknown).
func (b *bench) proxyStats() (proxy.StatsSnapshot, bool) {
	switch {
	case b.srv != nil:
		return b.srv.Stats(), true
	case b.mainServed != nil:
		return b.mainServed.stats()
	}
	return proxy.StatsSnapshot{}, false
}
