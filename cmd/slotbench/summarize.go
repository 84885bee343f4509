package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// summarize prints, in Markdown, the acceptance table of several runs of
// one server (JSON reports written with --json): for each comparison, its
// ratio's min, median and max over the runs and a verdict by the rule that
// a target is met only when every run meets it (a spread that straddles the
// target is a miss).
func summarize(files []string, w io.Writer) error {
	type row struct {
		c      *comparison
		ratios []float64
		passes int
	}
	var rows []*row
	find := func(c *comparison) *row {
		for _, r := range rows {
			if r.c.Row == c.Row && r.c.Workload == c.Workload && r.c.Clients == c.Clients && r.c.What == c.What {
				return r
			}
		}
		r := &row{c: c}
		rows = append(rows, r)
		return r
	}
	type cpu struct {
		workload, target string
		clients          int
		server, bench    []float64
	}
	var cpus []*cpu
	findCPU := func(r *targetResult) *cpu {
		for _, c := range cpus {
			if c.workload == r.Workload && c.clients == r.Clients && c.target == r.Target {
				return c
			}
		}
		c := &cpu{workload: r.Workload, target: r.Target, clients: r.Clients}
		cpus = append(cpus, c)
		return c
	}
	backend := ""
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var rep report
		if err := json.Unmarshal(data, &rep); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if backend == "" {
			backend = rep.Env.BackendVersion
		} else if rep.Env.BackendVersion != backend {
			return fmt.Errorf("%s: server %s, the first report's is %s: summarize the runs of one server at a time", f, rep.Env.BackendVersion, backend)
		}
		for _, r := range rep.Results {
			if r.Sweep || r.BackendCPUUsPerOp == 0 {
				continue
			}
			c := findCPU(r)
			c.server = append(c.server, r.BackendCPUUsPerOp)
			c.bench = append(c.bench, r.BenchCPUUsPerOp)
		}
		for _, c := range rep.Comparisons {
			if c.Verdict == "n/a" {
				continue
			}
			r := find(c)
			r.ratios = append(r.ratios, c.Ratio)
			if c.Verdict == "PASS" {
				r.passes++
			}
		}
	}
	fmt.Fprintf(w, "| # | workload | clients | comparison | runs | min | median | max | target | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		c := r.c
		v := slices.Clone(r.ratios)
		slices.Sort(v)
		med := median(v)
		f := func(x float64) string {
			switch {
			case c.Row == 7:
				return fmt.Sprintf("%.1f KiB", x)
			case strings.Contains(c.What, "p99"):
				return fmt.Sprintf("%.2f", x)
			}
			return fmt.Sprintf("%.2f×", x)
		}
		verdict := "info"
		if c.Gated {
			switch {
			case r.passes == len(v):
				verdict = "pass (all runs)"
			case r.passes == 0:
				verdict = "**miss** (no run)"
			default:
				verdict = fmt.Sprintf("**miss** (%d of %d runs pass: the spread straddles the target)", r.passes, len(v))
			}
		}
		clients := ""
		if c.Clients > 0 {
			clients = fmt.Sprint(c.Clients)
		}
		target := fmt.Sprintf("%s %g", c.Op, c.Threshold)
		if c.Row == 7 {
			target += " KiB"
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", c.Row, c.Workload, clients, c.What, len(v), f(v[0]), f(med), f(v[len(v)-1]), target, verdict)
	}
	if len(cpus) > 0 {
		fmt.Fprintf(w, "\nCPU time per operation, µs (median over the runs): the server process, and slotbench itself (the clients and the proxy or relay under test)\n\n")
		fmt.Fprintf(w, "| workload | clients | target | server | bench |\n|---|---|---|---|---|\n")
		for _, c := range cpus {
			fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.0f |\n", c.workload, c.clients, c.target, median(c.server), median(c.bench))
		}
	}
	return nil
}

// median of v (not empty).
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}
