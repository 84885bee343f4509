package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slotproxy/slotproxy/proxy"
)

// targetResult is one target of one scenario, summed over its rounds.
type targetResult struct {
	Workload    string    `json:"workload"`
	Target      string    `json:"target"`
	Clients     int       `json:"clients"`
	Sweep       bool      `json:"sweep,omitempty"` // an extra client count for the chart
	Slots       int       `json:"slots,omitempty"` // slot study only
	Unit        string    `json:"unit"`
	Ops         int64     `json:"ops"`
	Errors      int64     `json:"errors"`
	Retries     int64     `json:"retries"`
	Seconds     float64   `json:"seconds"`
	Rate        float64   `json:"rate"` // ops per second over all rounds
	RoundRates  []float64 `json:"round_rates"`
	MeanMs      float64   `json:"mean_ms"`
	P50Ms       float64   `json:"p50_ms"`
	P90Ms       float64   `json:"p90_ms"`
	P99Ms       float64   `json:"p99_ms"`
	MaxMs       float64   `json:"max_ms"`
	FirstErrors []string  `json:"first_errors,omitempty"`
	// OtherCores is how many cores, on average, processes other than this
	// one and the backend kept busy while this target ran: load from
	// whoever else shares the machine. StealCores is CPU time the
	// hypervisor took, in cores.
	OtherCores      float64   `json:"other_cores"`
	RoundOtherCores []float64 `json:"round_other_cores"`
	StealCores      float64   `json:"steal_cores"`
	// CPU time per operation, in microseconds, of the backend's server
	// process and of this process (the clients and the proxy or relay
	// under test, which run in it), over the measured rounds: where an
	// operation's cost goes. Zero when unknown.
	BackendCPUUsPerOp float64 `json:"backend_cpu_us_per_op,omitempty"`
	BenchCPUUsPerOp   float64 `json:"bench_cpu_us_per_op,omitempty"`
	// TargetCPUUsPerOp is the CPU time per operation of the process
	// serving the target, when it is one of its own (--slotproxy: a
	// slotproxy serve process or the relay's); zero otherwise.
	TargetCPUUsPerOp float64 `json:"target_cpu_us_per_op,omitempty"`

	hist                                 *hist
	otherSum, stealSum                   float64
	backendTicks, selfTicks, targetTicks int64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *targetResult) finish() {
	if r.Seconds > 0 {
		r.Rate = float64(r.Ops) / r.Seconds
		r.OtherCores, r.StealCores = r.otherSum/r.Seconds, r.stealSum/r.Seconds
	}
	if r.Ops > 0 {
		const usPerTick = 1e6 / clockTicks
		r.BackendCPUUsPerOp = float64(r.backendTicks) * usPerTick / float64(r.Ops)
		r.BenchCPUUsPerOp = float64(r.selfTicks) * usPerTick / float64(r.Ops)
		r.TargetCPUUsPerOp = float64(r.targetTicks) * usPerTick / float64(r.Ops)
	}
	h := r.hist
	r.MeanMs, r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs = ms(h.mean()), ms(h.quantile(0.50)), ms(h.quantile(0.90)), ms(h.quantile(0.99)), ms(h.max)
}

// comparison is one line of the acceptance table.
type comparison struct {
	Row       int     `json:"row"`
	Workload  string  `json:"workload"`
	Clients   int     `json:"clients,omitempty"`
	What      string  `json:"what"`
	Ratio     float64 `json:"ratio"`
	Op        string  `json:"op"` // ">=" or "<="
	Threshold float64 `json:"threshold"`
	Gated     bool    `json:"gated"` // false: shown for information only
	Verdict   string  `json:"verdict"`
}

// check is a correctness check made along the way.
type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// studyRow is one slot count of the slot study.
type studyRow struct {
	Slots          int     `json:"slots"`
	HotTxRate      float64 `json:"hot_tx_rate"`
	HotTxP50Ms     float64 `json:"hot_tx_p50_ms"`
	HotTxP99Ms     float64 `json:"hot_tx_p99_ms"`
	HotTxRetries   int64   `json:"hot_tx_retries"`
	HotTxErrors    int64   `json:"hot_tx_errors"`
	ReadRate       float64 `json:"counter_read_rate"`
	ReadP99Ms      float64 `json:"counter_read_p99_ms"`
	BaseReadRate   float64 `json:"base_read_rate"`
	ReadRatio      float64 `json:"counter_read_ratio"`
	SlotRowsPerKey int     `json:"slot_rows_per_key"`
	OtherCores     float64 `json:"other_cores"` // the most of the study's runs (see targetResult)
}

type envInfo struct {
	GoVersion      string `json:"go_version"`
	OS             string `json:"os"`
	Arch           string `json:"arch"`
	NumCPU         int    `json:"num_cpu"`
	GOMAXPROCS     int    `json:"gomaxprocs"`
	Backend        string `json:"backend"`
	BackendVersion string `json:"backend_version"`
	// Revision is the VCS revision this binary was built from ("+dirty"
	// when the tree had changes), when the toolchain stamped it.
	Revision string `json:"revision,omitempty"`
}

// revision returns the VCS revision stamped into the binary or, when the
// toolchain did not stamp one (-buildvcs=false), the git HEAD of the
// working directory at run time, marked "(git HEAD)".
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return gitHead()
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return gitHead()
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "+dirty"
	}
	return rev
}

func gitHead() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev + " (git HEAD)"
}

type optionsInfo struct {
	Workloads    []string `json:"workloads"`
	Clients      int      `json:"clients"`
	ReadClients  int      `json:"read_clients"`
	HoldMs       float64  `json:"hold_ms"`
	Increment    string   `json:"increment"`
	Rounds       int      `json:"rounds"`
	DurationS    float64  `json:"duration_s"`
	WarmupS      float64  `json:"warmup_s"`
	Slots        int      `json:"slots"`
	Rows         int      `json:"rows"`
	Items        int      `json:"items"`
	RangeSize    int      `json:"range_size"`
	CounterIDs   int      `json:"counter_ids"`
	CounterSlots int      `json:"counter_slots"`
	IdleConns    int      `json:"idle_conns"`
	Sweep        []int    `json:"sweep"`
	SlotStudy    bool     `json:"slot_study"`
	StudySlots   []int    `json:"study_slots,omitempty"`
	Smoke        bool     `json:"smoke"`
	// Processes: slotproxy ran as serve processes and the relay as a
	// process of its own (--slotproxy), not inside slotbench.
	Processes bool `json:"processes,omitempty"`
}

// report is everything measured; it is also the JSON document.
type report struct {
	Started     time.Time                      `json:"started"`
	Env         envInfo                        `json:"env"`
	Options     optionsInfo                    `json:"options"`
	Results     []*targetResult                `json:"results"`
	Comparisons []*comparison                  `json:"comparisons"`
	Idle        []*idleResult                  `json:"idle,omitempty"`
	SlotStudy   []*studyRow                    `json:"slot_study,omitempty"`
	StudyRuns   []*targetResult                `json:"slot_study_runs,omitempty"`
	Checks      []check                        `json:"checks"`
	ProxyStats  map[string]proxy.StatsSnapshot `json:"proxy_stats"`
	// RewrittenCounterRead is the SQL slotproxy sends for counter-read's
	// statement (the relay-rewritten target sends it by hand).
	RewrittenCounterRead string   `json:"rewritten_counter_read,omitempty"`
	Profile              string   `json:"cpu_profile,omitempty"`
	Problems             []string `json:"problems,omitempty"`
}

func newReport(o *options) *report {
	return &report{
		Started: time.Now().UTC(),
		Env: envInfo{
			GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Revision: revision(),
		},
		Options: optionsInfo{
			Workloads: o.workloads, Clients: o.clients, ReadClients: o.readClients, HoldMs: ms(o.hold), Increment: o.increment,
			Rounds: o.rounds, DurationS: o.duration.Seconds(), WarmupS: o.warmup.Seconds(), Slots: o.slots,
			Rows: o.rows, Items: o.items, RangeSize: o.rangeSize, CounterIDs: o.counterIDs,
			CounterSlots: o.counterSlots, IdleConns: o.idleConns, Sweep: o.sweep, SlotStudy: o.slotStudy,
			StudySlots: o.studySlots, Smoke: o.smoke, Processes: o.slotproxyBin != "",
		},
		ProxyStats: map[string]proxy.StatsSnapshot{},
	}
}

func (b *bench) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Problems = append(b.rep.Problems, msg)
	b.cons.logf("slotbench: %s", msg)
}

func (r *report) add(res ...*targetResult) { r.Results = append(r.Results, res...) }

func (r *report) addProxyStats(workload string, before, after proxy.StatsSnapshot) {
	r.ProxyStats[workload] = proxy.StatsSnapshot{
		RewrittenReads:    after.RewrittenReads - before.RewrittenReads,
		RewrittenWrites:   after.RewrittenWrites - before.RewrittenWrites,
		GuardedWrites:     after.GuardedWrites - before.GuardedWrites,
		ParseFailures:     after.ParseFailures - before.ParseFailures,
		Shadowed:          after.Shadowed - before.Shadowed,
		Retries:           after.Retries - before.Retries,
		Refused:           after.Refused - before.Refused,
		Coalesced:         after.Coalesced - before.Coalesced,
		Batches:           after.Batches - before.Batches,
		ConsolidatedReads: after.ConsolidatedReads - before.ConsolidatedReads,
	}
}

// find returns the main (non-sweep) result of workload at clients (0: any)
// on target.
func (r *report) find(workload string, clients int, target string) *targetResult {
	for _, res := range r.Results {
		if res.Workload == workload && res.Target == target && !res.Sweep && (clients == 0 || res.Clients == clients) {
			return res
		}
	}
	return nil
}

// compare fills in the acceptance table (the rows of the issue):
//
//  1. hot-tx: slotproxy vs direct, tx/s ≥ 5× and p99 ≤ ¼
//  2. hot-tx: slotproxy vs hand-written slotted upserts ≥ 0.9×
//  3. hot-autocommit: slotproxy vs plain relay ≥ 1.0×
//  4. point-select: slotproxy vs plain relay ≥ 0.95×, and vs direct
//  5. range-select: slotproxy vs plain relay ≥ 0.95× (vs direct: information)
//  6. counter-read: slotproxy (base + slots) vs base column via relay ≥ 0.7×
//  7. idle-conns: slotproxy RSS ≤ 64 KiB per connection
//  9. hot-tx: the increment prepared once per connection vs sent as text ≥ 1.0×
//  10. hot-autocommit: slotproxy (coalescing) vs the hand-written slotted
//     upserts sent directly ≥ 3×, and vs plain relay ≥ 5×
//
// Row 6 also compares reads: rolled_up (the base value, as written) with
// the base read through the relay, ≥ 0.95×; the exact read's target is
// 0.7×.
func (r *report) compare() {
	rate := func(row int, workload string, clients int, num, den string, threshold float64, gated bool) {
		a, b := r.find(workload, clients, num), r.find(workload, clients, den)
		if a == nil || b == nil {
			return
		}
		c := &comparison{Row: row, Workload: workload, Clients: a.Clients, Op: ">=", Threshold: threshold, Gated: gated,
			What: fmt.Sprintf("%s / %s %s", num, den, a.Unit), Ratio: ratio(a.Rate, b.Rate)}
		r.Comparisons = append(r.Comparisons, c.judge())
	}
	p99 := func(row int, workload string, clients int, num, den string, threshold float64) {
		a, b := r.find(workload, clients, num), r.find(workload, clients, den)
		if a == nil || b == nil {
			return
		}
		c := &comparison{Row: row, Workload: workload, Clients: a.Clients, Op: "<=", Threshold: threshold, Gated: true,
			What: fmt.Sprintf("%s / %s p99", num, den), Ratio: ratio(a.P99Ms, b.P99Ms)}
		r.Comparisons = append(r.Comparisons, c.judge())
	}
	r.Comparisons = nil
	rate(1, wHotTx, 0, "slotproxy", "direct", 5, true)
	p99(1, wHotTx, 0, "slotproxy", "direct", 0.25)
	rate(2, wHotTx, 0, "slotproxy", "handwritten", 0.9, true)
	rate(2, wHotTx, 0, "slotproxy", "handwritten-relay", 0.9, false)
	rate(3, wHotAutocommit, 0, "slotproxy", "relay", 1.0, true)
	rate(10, wHotAutocommit, 0, "slotproxy", "handwritten", 3, true)
	rate(10, wHotAutocommit, 0, "slotproxy", "relay", 5, true)
	rate(10, wHotAutocommit, 0, "slotproxy", "slotproxy-solo", 1, false)
	for _, res := range r.Results {
		if res.Workload == wPointSelect && res.Target == "slotproxy" {
			rate(4, wPointSelect, res.Clients, "slotproxy", "relay", 0.95, true)
			rate(4, wPointSelect, res.Clients, "slotproxy", "direct", 0.95, true)
		}
	}
	rate(5, wRangeSelect, 0, "slotproxy", "relay", 0.95, true)
	rate(5, wRangeSelect, 0, "slotproxy", "direct", 0.95, false)
	rate(6, wCounterRead, 0, "slotproxy", "relay", 0.7, true)
	rate(6, wCounterRead, 0, "slotproxy-rolled-up", "relay", 0.95, true)
	rate(11, wHotRead, 0, "slotproxy", "relay", 1.0, true)
	rate(11, wHotRead, 0, "slotproxy", "slotproxy-solo", 1.0, false)
	rate(9, wHotTx, 0, "slotproxy-prepared", "slotproxy", 1.0, true)
	rate(6, wCounterRead, 0, "slotproxy", "relay-rewritten", 0.95, false)
	// Information: a join instead of the correlated subquery, and the
	// slot table alone, against the base read (all through the relay).
	rate(6, wCounterRead, 0, "relay-join", "relay", 0.8, false)
	rate(6, wCounterRead, 0, "relay-slots", "relay", 0.8, false)
	for _, idle := range r.Idle {
		if idle.Target == "slotproxy" {
			c := &comparison{Row: 7, Workload: wIdleConns, Op: "<=", Threshold: 64, Gated: true,
				What: fmt.Sprintf("slotproxy KiB RSS per idle connection (%d conns)", idle.Conns), Ratio: idle.PerConnKiB}
			r.Comparisons = append(r.Comparisons, c.judge())
		}
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func (c *comparison) judge() *comparison {
	ok := c.Ratio >= c.Threshold
	if c.Op == "<=" {
		ok = c.Ratio <= c.Threshold
	}
	switch {
	case math.IsNaN(c.Ratio):
		c.Verdict = "n/a"
	case !c.Gated:
		c.Verdict = "info"
	case ok:
		c.Verdict = "PASS"
	default:
		c.Verdict = "FAIL"
	}
	return c
}

// MarshalJSON writes NaN ratios as null.
func (c *comparison) MarshalJSON() ([]byte, error) {
	type plain comparison
	v := struct {
		*plain
		Ratio *float64 `json:"ratio"`
	}{plain: (*plain)(c)}
	if !math.IsNaN(c.Ratio) && !math.IsInf(c.Ratio, 0) {
		v.Ratio = &c.Ratio
	}
	return json.Marshal(v)
}

func fmtRate(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 1:
		return fmt.Sprintf("%.2fms", v)
	default:
		return fmt.Sprintf("%.0fµs", v*1000)
	}
}

func (r *report) print(w io.Writer) {
	rev := r.Env.Revision
	if rev == "" {
		rev = "unknown revision"
	}
	fmt.Fprintf(w, "slotbench (%s)  %s  %s/%s  %d CPUs (GOMAXPROCS %d)  backend %s %s\n",
		rev, r.Env.GoVersion, r.Env.OS, r.Env.Arch, r.Env.NumCPU, r.Env.GOMAXPROCS, r.Env.Backend, r.Env.BackendVersion)
	o := r.Options
	where := "slotproxy and the relay inside slotbench"
	if o.Processes {
		where = "slotproxy (serve) and the relay as processes of their own"
	}
	fmt.Fprintf(w, "rounds %d × %.3gs per target (alternating), warm-up %.3gs, hold %.3gms, slots %d, %s\n",
		o.Rounds, o.DurationS, o.WarmupS, o.HoldMs, o.Slots, where)
	fmt.Fprintf(w, "increment: %s\n\n", o.Increment)

	if len(r.Results) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		procCol := ""
		if o.Processes {
			procCol = "\ttarget µs/op"
		}
		fmt.Fprintln(tw, "workload\tclients\ttarget\trate\tunit\tp50\tp99\tmax\terrors\tretries\tserver µs/op\tbench µs/op"+procCol+"\tper round\tother load per round\t")
		for _, res := range r.Results {
			rounds := make([]string, len(res.RoundRates))
			for i, v := range res.RoundRates {
				rounds[i] = fmtRate(v)
			}
			other := make([]string, len(res.RoundOtherCores))
			for i, v := range res.RoundOtherCores {
				other[i] = fmt.Sprintf("%.2f", v)
			}
			name := res.Workload
			if res.Sweep {
				name += " (sweep)"
			}
			proc := ""
			if o.Processes {
				proc = fmt.Sprintf("\t%.0f", res.TargetCPUUsPerOp)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.0f\t%.0f%s\t%s\t%s\t\n", name, res.Clients, res.Target,
				fmtRate(res.Rate), res.Unit, fmtMs(res.P50Ms), fmtMs(res.P99Ms), fmtMs(res.MaxMs), res.Errors, res.Retries,
				res.BackendCPUUsPerOp, res.BenchCPUUsPerOp, proc, strings.Join(rounds, " "), strings.Join(other, " "))
		}
		tw.Flush()
		if o.Processes {
			fmt.Fprintf(w, "(server µs/op: CPU time of the backend's server process per operation; bench µs/op: of slotbench itself, the clients; "+
				"target µs/op: of the slotproxy or relay process serving the target (0: direct); "+
				"other load: cores kept busy by processes other than these during each round; the machine has %d)\n\n", r.Env.NumCPU)
		} else {
			fmt.Fprintf(w, "(server µs/op: CPU time of the backend's server process per operation; bench µs/op: of slotbench itself, clients and the proxy or relay under test; "+
				"other load: cores kept busy by processes other than slotbench and the backend during each round; the machine has %d)\n\n", r.Env.NumCPU)
		}
	}
	for _, res := range r.Results {
		for _, e := range res.FirstErrors {
			fmt.Fprintf(w, "error: %s c=%d %s: %s\n", res.Workload, res.Clients, res.Target, e)
		}
	}

	if len(r.Idle) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "idle-conns\tconns\tRSS before\tRSS after\tper conn\tthreads\tgoroutines\tlogins/s\tbackend conns\t")
		method := ""
		for _, i := range r.Idle {
			if i.Skipped != "" {
				fmt.Fprintf(tw, "%s\t%d\tskipped\t\t\t\t\t\t\t\n", i.Target, i.Conns)
				continue
			}
			method = i.Method
			fmt.Fprintf(tw, "%s\t%d\t%d KiB\t%d KiB\t%.1f KiB\t%d → %d\t%d → %d\t%.0f\t+%d\t\n", i.Target, i.Conns, i.RSSBeforeKiB, i.RSSAfterKiB,
				i.PerConnKiB, i.ThreadsBefore, i.ThreadsAfter, i.GoroutinesBefore, i.GoroutinesAfter, i.LoginsPerSec, i.BackendConns)
		}
		tw.Flush()
		fmt.Fprintf(w, "(%s)\n", method)
		for _, i := range r.Idle {
			if i.Skipped != "" {
				fmt.Fprintf(w, "%s skipped: %s\n", i.Target, i.Skipped)
			}
			if i.ActiveCountsExact != nil {
				fmt.Fprintf(w, "active: %s, %d connections at once for %.1fs: %.0f ops/s, p99 %.1f ms, max %.1f ms (increment + read), %d errors, peak RSS %d KiB, up to %d goroutines, counts exact: %v\n",
					i.Target, i.Conns, i.ActiveSeconds, i.ActiveOpsPerSec, i.ActiveP99Ms, i.ActiveMaxMs, i.ActiveErrors, i.ActivePeakRSSKiB, i.ActiveGoroutines, *i.ActiveCountsExact)
				if i.ActiveUnknown > 0 {
					fmt.Fprintf(w, "active: %d increments failed with an unknown outcome (%d of them committed); errors: %q\n",
						i.ActiveUnknown, i.ActiveCommittedUnknown, i.ActiveErrorTexts)
				}
				fmt.Fprintf(w, "active: direct, %d connections at once: %.0f ops/s, p99 %.1f ms, max %.1f ms, %d errors\n",
					i.Conns, i.ActiveDirectOpsPerSec, i.ActiveDirectP99Ms, i.ActiveDirectMaxMs, i.ActiveDirectErrors)
			}
		}
		fmt.Fprintln(w)
	}

	if len(r.Comparisons) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tworkload\tclients\tcomparison\tratio\twant\tverdict")
		for _, c := range r.Comparisons {
			clients := ""
			if c.Clients > 0 {
				clients = fmt.Sprint(c.Clients)
			}
			val := fmt.Sprintf("%.3f", c.Ratio)
			want := fmt.Sprintf("%s %.2f", c.Op, c.Threshold)
			if c.Row == 7 {
				val = fmt.Sprintf("%.1f KiB", c.Ratio)
				want = fmt.Sprintf("%s %.0f KiB", c.Op, c.Threshold)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Row, c.Workload, clients, c.What, val, want, c.Verdict)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}

	if len(r.SlotStudy) > 0 {
		fmt.Fprintln(w, "slot study (hot-tx and counter-read through slotproxy, per rule slot count):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "slots\thot-tx tx/s\tp50\tp99\tretries\terrors\tslot rows/key\tcounter-read qps\tp99\tbase read qps\tratio\tother load\t")
		for _, s := range r.SlotStudy {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%.3f\t%.2f\t\n", s.Slots, fmtRate(s.HotTxRate), fmtMs(s.HotTxP50Ms),
				fmtMs(s.HotTxP99Ms), s.HotTxRetries, s.HotTxErrors, s.SlotRowsPerKey, fmtRate(s.ReadRate), fmtMs(s.ReadP99Ms),
				fmtRate(s.BaseReadRate), s.ReadRatio, s.OtherCores)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}

	if len(r.ProxyStats) > 0 {
		fmt.Fprintln(w, "slotproxy counters per workload:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "workload\trewritten writes\tguarded writes\trewritten reads\tretries\tparse failures\trefused\tcoalesced (batches)\tconsolidated reads\t")
		for _, name := range append(append([]string{}, allWorkloads...), "slot-study") {
			s, ok := r.ProxyStats[name]
			if !ok {
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t\n", name, s.RewrittenWrites, s.GuardedWrites, s.RewrittenReads,
				s.Retries, s.ParseFailures, s.Refused, s.Coalesced, s.Batches, s.ConsolidatedReads)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}

	for _, c := range r.Checks {
		v := "ok"
		if !c.OK {
			v = "FAILED"
		}
		fmt.Fprintf(w, "check %-6s %s: %s\n", v, c.Name, c.Detail)
	}
	if r.RewrittenCounterRead != "" {
		fmt.Fprintf(w, "counter-read through slotproxy runs: %s\n", r.RewrittenCounterRead)
	}
	if r.Profile != "" {
		fmt.Fprintf(w, "cpu profile %s\n", r.Profile)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

func (r *report) writeJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// verdict is the run's outcome: errors, failed checks and workloads that
// did nothing fail it; failed ratios only with --strict (never in smoke).
func (r *report) verdict(o *options) error {
	var errs []error
	for _, p := range r.Problems {
		errs = append(errs, errors.New(p))
	}
	all := append(append([]*targetResult{}, r.Results...), r.StudyRuns...)
	for _, res := range all {
		if res.Errors > 0 {
			errs = append(errs, fmt.Errorf("%s c=%d %s: %d errors", res.Workload, res.Clients, res.Target, res.Errors))
		}
		if res.Ops == 0 {
			errs = append(errs, fmt.Errorf("%s c=%d %s: no operations", res.Workload, res.Clients, res.Target))
		}
	}
	for _, c := range r.Checks {
		if !c.OK {
			errs = append(errs, fmt.Errorf("check %s: %s", c.Name, c.Detail))
		}
	}
	for _, w := range o.workloads {
		ran := false
		for _, res := range r.Results {
			ran = ran || res.Workload == w
		}
		if w == wIdleConns {
			ran = len(r.Idle) > 0
		}
		if !ran {
			errs = append(errs, fmt.Errorf("workload %s produced no results", w))
		}
	}
	if o.strict && !o.smoke {
		for _, c := range r.Comparisons {
			if c.Verdict == "FAIL" {
				errs = append(errs, fmt.Errorf("row %d %s %s: %.3f, want %s %.2f", c.Row, c.Workload, c.What, c.Ratio, c.Op, c.Threshold))
			}
		}
	}
	return errors.Join(errs...)
}
