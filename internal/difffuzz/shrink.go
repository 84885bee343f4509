package difffuzz

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Shrink deletes steps of seq while running what is left still finds a
// difference the Same as want (delta debugging: chunks, then single
// steps), until nothing more can be deleted or budget is spent. It returns
// the smallest sequence found and its outcome (seq and the outcome given
// when nothing could be deleted). Every attempt runs from scratch.
func Shrink(ctx context.Context, env *Env, seq *Sequence, found *Outcome, budget time.Duration, logf func(string, ...any)) (*Sequence, *Outcome) {
	deadline := time.Now().Add(budget)
	best, bestOut := seq, found
	want := found.Diff
	try := func(steps []Step) bool {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		cand := &Sequence{Seed: seq.Seed, Schema: seq.Schema, Conns: seq.Conns, Steps: steps}
		out, err := Run(ctx, env, cand)
		if err != nil {
			logf("shrink: run failed: %v", err)
			return false
		}
		if !out.Diff.Same(want) {
			return false
		}
		best, bestOut = cand, out
		return true
	}
	// The steps after the difference rarely matter.
	if want.Step >= 0 && want.Step+1 < len(best.Steps) {
		try(slices.Clone(best.Steps[:want.Step+1]))
	}
	for size := len(best.Steps) / 2; size >= 1; size /= 2 {
		for changed := true; changed; {
			changed = false
			for i := 0; i < len(best.Steps); {
				if time.Now().After(deadline) {
					logf("shrink: time budget spent; %d steps left", len(best.Steps))
					return best, bestOut
				}
				end := min(i+size, len(best.Steps))
				cand := slices.Concat(best.Steps[:i], best.Steps[end:])
				if len(cand) > 0 && try(cand) {
					changed = true
					continue
				}
				i += size
			}
			if size > 1 {
				break
			}
		}
	}
	return best, bestOut
}

// Reproducer is seq and its difference as an engineer pastes them into a
// test: the seed, the server, the schema's DDL (run in both schemas), the
// rules, the numbered steps with their connections, and what each side
// answered.
func Reproducer(env *Env, seq *Sequence, out *Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "difffuzz reproducer: seed %d (DIFFFUZZ_SEED=%d), server %s\n", seq.Seed, seq.Seed, env.Version)
	fmt.Fprintf(&b, "-- schema, created in %s (direct) and %s (through the proxy):\n", env.plain(), env.ruled())
	for _, s := range seq.Schema.DDL() {
		fmt.Fprintf(&b, "%s;\n", s)
	}
	b.WriteString("-- rules:\n")
	for _, r := range seq.Schema.Rules(env.ruled()) {
		b.WriteString(r)
		b.WriteString("---\n")
	}
	fmt.Fprintf(&b, "-- steps (%d connection pairs; each step runs through the proxy, then directly):\n", seq.Conns)
	for i, st := range seq.Steps {
		fmt.Fprintf(&b, "%3d %s\n", i+1, st)
	}
	if d := out.Diff; d != nil {
		where := "at the end"
		if d.Step >= 0 {
			where = fmt.Sprintf("at step %d", d.Step+1)
		}
		fmt.Fprintf(&b, "-- difference (%s) %s: %s\n   direct: %s\n   proxy:  %s\n", d.Kind, where, d.Stmt, d.Direct, d.Proxy)
	}
	return b.String()
}
