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
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
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
	return nil
}
