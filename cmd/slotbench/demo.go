package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"text/tabwriter"
)

// demo is --demo: the hot-counter workload run directly against the
// backend (before) and through slotproxy with the example rule (after),
// alternating, with a live progress line; then a before/after table and
// the check that no increment was lost.
func (b *bench) demo(ctx context.Context, w io.Writer) error {
	o := b.opts
	rule := "built-in rule"
	if o.ruleFile != "" {
		rule = o.ruleFile
	}
	fmt.Fprintf(w, "slotproxy demo: %d clients hammer one row. Each transaction runs\n\n", o.clients)
	fmt.Fprintf(w, "    BEGIN; %s; %s; <%s of work>; COMMIT\n\n", sqlIncrement, strings.Replace(sqlRepoName, "?", "<random id>", 1), o.hold)
	fmt.Fprintf(w, "first directly on %s %s (before), then through slotproxy %s with %s (after),\n", b.backendAddr, b.version, b.proxyAddr, rule)
	fmt.Fprintf(w, "%d rounds of %s each, alternating. The application code is the same; only the address differs.\n\n", o.rounds, o.duration)

	var committed atomic.Int64
	var res []*targetResult
	err := b.counterCheck(ctx, wHotTx, &committed, false, func() error {
		var err error
		res, err = b.runScenario(ctx, b.hotTxScenario(o.clients, &committed, "direct", "slotproxy"))
		return err
	})
	b.cons.clear()
	if err != nil {
		return err
	}
	direct, proxied := res[0], res[1]
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tdirect (before)\tslotproxy (after)\t\t")
	fmt.Fprintf(tw, "transactions/s\t%s\t%s\t%.1f× the throughput\t\n", fmtRate(direct.Rate), fmtRate(proxied.Rate), ratio(proxied.Rate, direct.Rate))
	fmt.Fprintf(tw, "p50 latency\t%s\t%s\t\t\n", fmtMs(direct.P50Ms), fmtMs(proxied.P50Ms))
	fmt.Fprintf(tw, "p99 latency\t%s\t%s\t%.2f× the tail\t\n", fmtMs(direct.P99Ms), fmtMs(proxied.P99Ms), ratio(proxied.P99Ms, direct.P99Ms))
	fmt.Fprintf(tw, "committed\t%d\t%d\t\t\n", direct.Ops, proxied.Ops)
	fmt.Fprintf(tw, "errors\t%d\t%d\t\t\n", direct.Errors, proxied.Errors)
	tw.Flush()
	fmt.Fprintf(w, "\n%d increments committed in all: %d + %d in the measured rounds, %d in the unmeasured warm-ups.\n\n",
		committed.Load(), direct.Ops, proxied.Ops, committed.Load()-direct.Ops-proxied.Ops)
	var failed []string
	for _, c := range b.rep.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			failed = append(failed, c.Name)
		}
		fmt.Fprintf(w, "%s %s: %s\n", mark, c.Name, c.Detail)
	}
	if o.proxy == "" {
		fmt.Fprintf(w, "\nTry it with your own client and your own table: make run, then docs/tutorial.md.\n")
	}
	if len(failed) > 0 {
		return errors.New("demo: " + strings.Join(failed, "; "))
	}
	return nil
}
