// Command slotbench is slotproxy's benchmark: it measures what the proxy
// buys on hot counters and what it costs everywhere else.
//
// Usage:
//
//	go run ./cmd/slotbench [flags]
//
// It starts a throwaway MariaDB (internal/testdb), or uses an existing
// server given with --backend, creates schema bench (repos, items and the
// slot tables, with a rule for bench.repos.downloads), and starts two
// servers in this process in front of the same backend: slotproxy
// (proxy.NewServer with the rewriter) and a plain TCP relay (io.Copy both
// ways, no parsing). Clients use go-sql-driver/mysql with real server-side
// prepared statements.
//
// Each throughput workload runs its targets alternately in short rounds
// (A B A B ...), so that drift on a shared machine hits every target alike,
// and reports ops/s, p50 and p99 latency, errors, and the ratios of the
// project's acceptance table with PASS or FAIL. See the -h output for the
// workloads and flags.
//
// Exit status: 0 on success, 1 when a workload had errors (or, with
// --strict, when a gated ratio failed), 2 for a wrong command line. With
// --smoke, ratios never fail the run; errors and missing operations do.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "slotbench: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "slotbench: %v\n", err)
		os.Exit(1)
	}
}

// run runs slotbench with args (without the program name).
func run(args []string, stdout, stderr io.Writer) error {
	return runContext(context.Background(), args, stdout, stderr)
}

// usageError marks a mistake in the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Workload names, in the order they run.
const (
	wHotTx         = "hot-tx"
	wHotAutocommit = "hot-autocommit"
	wPointSelect   = "point-select"
	wRangeSelect   = "range-select"
	wCounterRead   = "counter-read"
	wHotRead       = "hot-read"
	wIdleConns     = "idle-conns"
)

var allWorkloads = []string{wHotTx, wHotAutocommit, wPointSelect, wRangeSelect, wCounterRead, wHotRead, wIdleConns}

// options are the parsed flags.
type options struct {
	backend, user, password string
	adminUser, adminPass    string // --admin-user, --admin-password (default: --user, --password)
	proxy                   string // --proxy: a slotproxy already running in front of --backend
	relayListen             string // --relay-listen: only run the plain relay there
	slotproxyBin            string // --slotproxy: run slotproxy as serve processes of this binary
	serveConfig             string // --serve-config: their configuration's settings
	mariadbdArgs            []string
	server                  string // --server: the throwaway server's flavour

	workloads   []string
	clients     int
	readClients int
	hold        time.Duration
	// increment is hot-tx's and hot-autocommit's text increment of repos
	// id 1 by 1 (--increment; default sqlIncrement).
	increment    string
	rounds       int
	duration     time.Duration
	warmup       time.Duration
	slots        int
	rows, items  int
	rangeSize    int
	counterIDs   int
	counterSlots int
	hotReadIDs   int
	idleConns    int
	sweep        []int

	slotStudy bool
	// summarize: print the min/median/max table of the JSON reports
	// summaryFiles instead of measuring.
	summarize    bool
	summaryFiles []string
	studySlots   []int

	demo     bool   // the before/after demo (demo.go)
	ruleFile string // rule file for repos instead of the built-in rule

	smoke           bool
	strict          bool
	jsonPath        string
	svgPath         string
	cpuProfile      string
	profileWorkload string
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

const usageText = `Usage: go run ./cmd/slotbench [flags]

Benchmarks slotproxy against a direct connection, a plain TCP relay and a
hand-written slotted-counter application. Without --backend it starts a
throwaway MariaDB; with --backend it DROPS AND RE-CREATES schema "bench" on
that server.

Workloads (--workloads, comma-separated, default all):
  hot-tx          C clients; each transaction increments repos id 1, does one
                  prepared point select and --hold of work, then commits:
                  direct (hot row) vs slotproxy vs hand-written slotted upserts
                  (directly, and via the plain relay at --clients)
  hot-autocommit  C clients, autocommit increments of repos id 1: plain relay
                  vs slotproxy
  point-select    prepared point selects on items (a table without rules),
                  --read-clients and 1 client: direct, plain relay, slotproxy
  range-select    prepared 1000-row range selects on items, --read-clients:
                  direct, plain relay, slotproxy
  counter-read    SELECT downloads FROM repos WHERE id = ? on ids with
                  --counter-slots live slot rows each, --read-clients:
                  slotproxy (base + slots) vs the base column via plain relay,
                  and slotproxy's rewritten SQL sent by hand via the relay
  hot-read        SELECT downloads FROM repos WHERE id = N as text, N one of
                  --hot-read-ids ids with --counter-slots live slot rows each,
                  --read-clients: slotproxy (identical concurrent reads share
                  a query) vs slotproxy-solo (each read alone) vs the base
                  column via plain relay
  idle-conns      --idle-conns idle connections through slotproxy running as a
                  child process; its RSS growth per connection (and the plain
                  relay's, for reference)

Flags:
`

func parseOptions(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("slotbench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var mariadbdArgs stringList
	var workloads, sweep, studySlots string
	fs.StringVar(&o.backend, "backend", "", "use the existing MySQL/MariaDB at `HOST:PORT` instead of starting one (schema bench is dropped and re-created)")
	fs.StringVar(&o.user, "user", "root", "account for --backend (clients and admin)")
	fs.StringVar(&o.password, "password", "", "password for --user")
	fs.StringVar(&o.adminUser, "admin-user", "", "account that reads the slot table and the record types with --proxy (default --user)")
	fs.StringVar(&o.adminPass, "admin-password", "", "password for --admin-user (default --password)")
	fs.StringVar(&o.relayListen, "relay-listen", "", "run nothing but the plain relay, listening on `HOST:PORT` and relaying to --backend, "+
		"until interrupted (a baseline for other tools, e.g. scripts/sysbench.sh)")
	fs.StringVar(&o.proxy, "proxy", "", "with --demo and --backend: the slotproxy already serving --backend at `HOST:PORT`, "+
		"with the --rule rule migrated; schema app and app.repos must exist (nothing is dropped or created)")
	fs.StringVar(&o.slotproxyBin, "slotproxy", "", "run slotproxy as it is deployed: `BINARY` serve, a process of its own per variant, "+
		"with a configuration file's defaults (roll-up and coalescing on), and the relay as a process of its own too; "+
		"CPU per operation is then reported for the process serving each target (without: both run inside slotbench)")
	fs.StringVar(&o.serveConfig, "serve-config", "", "with --slotproxy: a slotproxy configuration `FILE` whose settings the serve processes start from "+
		"(its listen, backend address, rules, admin and metrics listener are replaced by slotbench's; e.g. backend: {tls: {mode: disabled}})")
	fs.Var(&mariadbdArgs, "mariadbd-arg", "extra mariadbd `FLAG` for the throwaway server (repeatable)")
	fs.StringVar(&o.server, "server", "", "the throwaway server: mariadb (MariaDB 10.11) or mysql (MySQL 9.7 in its chroot); "+
		"default: "+testdb.EnvServer+", else mariadb")
	fs.StringVar(&workloads, "workloads", "all", "comma-separated workloads to run, or all")
	fs.IntVar(&o.clients, "clients", 32, "clients of hot-tx and hot-autocommit")
	fs.IntVar(&o.readClients, "read-clients", 8, "clients of point-select (which also runs with 1), range-select and counter-read")
	fs.DurationVar(&o.hold, "hold", 2*time.Millisecond, "application work inside each hot-tx transaction")
	fs.StringVar(&o.increment, "increment", sqlIncrement, "hot-tx's and hot-autocommit's increment: any text statement that adds 1 to repos.downloads of id 1 "+
		"(an upsert, a condition: the counter checks hold it to that), sent as it is to every target")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per target; targets alternate within each round")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of one round of one target")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up per target before its first round")
	fs.IntVar(&o.slots, "slots", 100, "slots of the bench.repos rule")
	fs.IntVar(&o.rows, "rows", 10000, "rows in repos")
	fs.IntVar(&o.items, "items", 100000, "rows in items")
	fs.IntVar(&o.counterIDs, "counter-ids", 100, "ids read by counter-read")
	fs.IntVar(&o.counterSlots, "counter-slots", 100, "live slot rows per counter-read and hot-read id")
	fs.IntVar(&o.hotReadIDs, "hot-read-ids", 4, "ids read by hot-read (the first of counter-read's)")
	fs.IntVar(&o.idleConns, "idle-conns", 1000, "connections opened by idle-conns")
	fs.StringVar(&sweep, "sweep", "1,8,32", "client counts hot-tx also runs at, for the --svg chart (\"\" for none)")
	fs.BoolVar(&o.summarize, "summarize", false, "print the acceptance table of the JSON reports named as arguments (runs of one server): min, median and max of each ratio over the runs, and which runs meet the target, in Markdown")
	fs.BoolVar(&o.slotStudy, "slot-study", false, "run hot-tx and counter-read through slotproxy for each of --study-slots "+
		"(only the study, unless --workloads is given too)")
	fs.StringVar(&studySlots, "study-slots", "1,4,16,64,100,256", "slot counts of --slot-study")
	fs.BoolVar(&o.demo, "demo", false, "the one-minute demo: hot-tx at --clients, direct (before) and through slotproxy with the example rule "+
		"(after), on a throwaway MariaDB with schema app; prints a before/after table")
	fs.StringVar(&o.ruleFile, "rule", "", "rule `FILE` for repos (it must rule repos.downloads of the benchmark's schema); "+
		"default: a built-in rule with --slots, or testdata/rules/repos.yaml with --demo")
	fs.BoolVar(&o.smoke, "smoke", false, "a seconds-long run of every workload (for CI); fails only on errors, never on ratios")
	fs.BoolVar(&o.strict, "strict", false, "exit 1 when a gated ratio fails")
	fs.StringVar(&o.jsonPath, "json", "", "write every number to `FILE` as JSON")
	fs.StringVar(&o.svgPath, "svg", "", "write a chart of hot-tx throughput and p99 vs clients to `FILE`")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process during --cpuprofile-workload to `FILE` "+
		"(proxy goroutines carry the label component=slotproxy: go tool pprof -tagfocus=component=slotproxy -top FILE)")
	fs.StringVar(&o.profileWorkload, "cpuprofile-workload", wPointSelect, "the workload --cpuprofile covers "+
		"(its scenario at --clients or --read-clients, all targets)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprint(stdout, usageText)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err}
	}
	if o.summarize {
		if fs.NArg() == 0 {
			return nil, usageError{errors.New("--summarize: name the JSON reports to summarize")}
		}
		o.summaryFiles = fs.Args()
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if o.smoke {
		// Tiny everything, unless given explicitly.
		smoke := map[string]func(){
			"rounds":        func() { o.rounds = 1 },
			"duration":      func() { o.duration = 250 * time.Millisecond },
			"warmup":        func() { o.warmup = 50 * time.Millisecond },
			"clients":       func() { o.clients = 8 },
			"read-clients":  func() { o.readClients = 4 },
			"rows":          func() { o.rows = 2000 },
			"items":         func() { o.items = 3000 },
			"counter-ids":   func() { o.counterIDs = 10 },
			"counter-slots": func() { o.counterSlots = 20 },
			"idle-conns":    func() { o.idleConns = 20 },
			"slots":         func() { o.slots = 16 },
		}
		for name, apply := range smoke {
			if !set[name] {
				apply()
			}
		}
		if !set["sweep"] {
			sweep = "1,4"
		}
		if !set["study-slots"] {
			studySlots = "1,4"
		}
	}
	schema = "bench"
	if o.relayListen != "" && o.backend == "" {
		return nil, usageError{errors.New("--relay-listen needs --backend")}
	}
	if o.proxy != "" && (!o.demo || o.backend == "") {
		return nil, usageError{errors.New("--proxy needs --demo and --backend")}
	}
	if o.slotproxyBin != "" {
		if o.proxy != "" || o.slotStudy {
			return nil, usageError{errors.New("--slotproxy runs its own proxies: not with --proxy or --slot-study")}
		}
		bin, err := exec.LookPath(o.slotproxyBin)
		if err != nil {
			return nil, usageError{fmt.Errorf("--slotproxy: %w", err)}
		}
		if o.slotproxyBin, err = filepath.Abs(bin); err != nil {
			return nil, usageError{fmt.Errorf("--slotproxy: %w", err)}
		}
	}
	if o.serveConfig != "" && o.slotproxyBin == "" {
		return nil, usageError{errors.New("--serve-config needs --slotproxy")}
	}
	if o.adminUser == "" {
		o.adminUser, o.adminPass = o.user, o.password
	}
	if o.demo {
		if o.backend != "" && o.proxy == "" {
			return nil, usageError{errors.New("--demo with --backend needs --proxy (without, it would drop and re-create schema app there)")}
		}
		schema = "app"
		demo := map[string]func(){
			"rounds":   func() { o.rounds = 2 },
			"duration": func() { o.duration = 4 * time.Second },
			"warmup":   func() { o.warmup = 300 * time.Millisecond },
			"rows":     func() { o.rows = 1000 },
			"items":    func() { o.items = 1000 },
			"rule":     func() { o.ruleFile = "testdata/rules/repos.yaml" },
		}
		for name, apply := range demo {
			if !set[name] {
				apply()
			}
		}
		if !set["workloads"] {
			workloads = ""
		}
		sweep = ""
	}
	o.mariadbdArgs = mariadbdArgs
	switch o.server {
	case "", string(testdb.MariaDB), string(testdb.MySQL):
	default:
		return nil, usageError{fmt.Errorf("--server %q: want mariadb or mysql", o.server)}
	}

	var err error
	if o.sweep, err = parseInts(sweep); err != nil {
		return nil, usageError{fmt.Errorf("--sweep: %w", err)}
	}
	if o.studySlots, err = parseInts(studySlots); err != nil {
		return nil, usageError{fmt.Errorf("--study-slots: %w", err)}
	}
	switch {
	case o.slotStudy && !set["workloads"]:
		o.workloads = nil
	case workloads == "all":
		o.workloads = allWorkloads
	default:
		for _, w := range strings.Split(workloads, ",") {
			w = strings.TrimSpace(w)
			if w == "" {
				continue
			}
			if !slices.Contains(allWorkloads, w) {
				return nil, usageError{fmt.Errorf("--workloads: unknown workload %q (want %s)", w, strings.Join(allWorkloads, ", "))}
			}
			if !slices.Contains(o.workloads, w) {
				o.workloads = append(o.workloads, w)
			}
		}
		// Run in the canonical order.
		slices.SortFunc(o.workloads, func(a, b string) int {
			return slices.Index(allWorkloads, a) - slices.Index(allWorkloads, b)
		})
	}
	for _, c := range []struct {
		name string
		v    int
		min  int
	}{
		{"clients", o.clients, 1}, {"read-clients", o.readClients, 1}, {"rounds", o.rounds, 1},
		{"slots", o.slots, 1}, {"counter-ids", o.counterIDs, 1}, {"counter-slots", o.counterSlots, 1},
		{"idle-conns", o.idleConns, 1}, {"rows", o.rows, 2}, {"items", o.items, 1000},
	} {
		if c.v < c.min {
			return nil, usageError{fmt.Errorf("--%s must be at least %d", c.name, c.min)}
		}
	}
	if o.slots > 65535 || slices.Max(append([]int{1}, o.studySlots...)) > 65535 {
		return nil, usageError{errors.New("slots must be at most 65535")}
	}
	if o.counterIDs >= o.rows {
		return nil, usageError{fmt.Errorf("--counter-ids (%d) must be less than --rows (%d)", o.counterIDs, o.rows)}
	}
	if !slices.Contains(allWorkloads[:len(allWorkloads)-1], o.profileWorkload) {
		return nil, usageError{fmt.Errorf("--cpuprofile-workload: %q is not a throughput workload", o.profileWorkload)}
	}
	if o.duration <= 0 || o.warmup < 0 || o.hold < 0 {
		return nil, usageError{errors.New("--duration must be positive, --warmup and --hold not negative")}
	}
	o.rangeSize = 1000
	return o, nil
}

// runContext is run with a context that stops the benchmark early.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stdout)
	if err != nil {
		return err
	}
	if o.summarize {
		return summarize(o.summaryFiles, stdout)
	}
	if o.relayListen != "" {
		r, err := listenRelay(o.relayListen, o.backend)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "slotbench: relaying %s to %s until interrupted\n", r.addr(), o.backend)
		<-ctx.Done()
		r.close()
		return nil
	}
	cons := newConsole(stderr)
	b := &bench{opts: o, cons: cons, rep: newReport(o)}
	defer b.close()
	if err := b.setup(ctx); err != nil {
		return err
	}
	if o.demo {
		return b.demo(ctx, stdout)
	}
	for _, w := range o.workloads {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.runWorkload(ctx, w); err != nil {
			b.problem("%s: %v", w, err)
		}
	}
	if o.slotStudy && ctx.Err() == nil {
		if err := b.runSlotStudy(ctx); err != nil {
			b.problem("slot study: %v", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cons.clear()
	b.rep.compare()
	b.rep.print(stdout)
	if o.jsonPath != "" {
		if err := b.rep.writeJSON(o.jsonPath); err != nil {
			return err
		}
	}
	if o.svgPath != "" {
		if err := os.WriteFile(o.svgPath, []byte(b.rep.svg()), 0o644); err != nil {
			return err
		}
	}
	return b.rep.verdict(o)
}
