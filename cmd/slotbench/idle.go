package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/slotproxy/slotproxy/proxy"
)

// The idle-conns workload measures memory per idle connection in a child
// process that runs nothing but the server under test: this executable
// started again with childEnv set (go test's binary does the same from
// TestMain). Measuring this process instead would mix in the client side's
// connections, the load generator's heap and everything the earlier
// workloads left behind; the child's VmRSS (from /proc/PID/status) has
// only the server's memory in it. No GC is forced in the child: the number
// is what the operating system sees a real slotproxy hold.
const (
	childEnv         = "SLOTBENCH_CHILD" // "proxy" or "relay"
	childBackendEnv  = "SLOTBENCH_CHILD_BACKEND"
	childUserEnv     = "SLOTBENCH_CHILD_ADMIN_USER"
	childPasswordEnv = "SLOTBENCH_CHILD_ADMIN_PASSWORD"
	childSlotsEnv    = "SLOTBENCH_CHILD_SLOTS"
)

// childMain serves as a child process: it starts the server named by
// childEnv on a free loopback port, prints "LISTEN ADDR" on stdout and
// serves until stdin is closed (so it never outlives its parent).
func childMain() int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "slotbench child: %v\n", err)
		return 1
	}
	backend := os.Getenv(childBackendEnv)
	var (
		addr string
		stop func()
	)
	switch mode := os.Getenv(childEnv); mode {
	case "proxy":
		slots, err := strconv.Atoi(os.Getenv(childSlotsEnv))
		if err != nil {
			return fail(fmt.Errorf("%s: %w", childSlotsEnv, err))
		}
		rw, err := buildRewriter(context.Background(), backend, os.Getenv(childUserEnv), os.Getenv(childPasswordEnv), slots, "", false)
		if err != nil {
			return fail(err)
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		srv, err := proxy.NewServer(proxy.Config{Backend: backend, Rewriter: rw, Logger: logger})
		if err != nil {
			return fail(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		go srv.Serve(ln)
		addr, stop = ln.Addr().String(), func() { srv.Close() }
	case "relay":
		r, err := startRelay(backend)
		if err != nil {
			return fail(err)
		}
		addr, stop = r.addr(), r.close
	default:
		return fail(fmt.Errorf("%s=%q: want proxy or relay", childEnv, mode))
	}
	fmt.Printf("LISTEN %s\n", addr)
	// Each line on stdin asks for the goroutine count; EOF stops.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Printf("GOROUTINES %d\n", runtime.NumGoroutine())
	}
	stop()
	return 0
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	lines chan string // stdout after the LISTEN line
	done  chan error
}

// goroutines asks the child for its goroutine count (-1 if it does not
// answer within 10s).
func (c *child) goroutines() int64 {
	if _, err := io.WriteString(c.stdin, "goroutines\n"); err != nil {
		return -1
	}
	select {
	case line := <-c.lines:
		if v, ok := strings.CutPrefix(line, "GOROUTINES "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	case <-time.After(10 * time.Second):
	}
	return -1
}

func (b *bench) startChild(mode string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		childEnv+"="+mode,
		childBackendEnv+"="+b.backendAddr,
		childUserEnv+"="+b.adminUser,
		childPasswordEnv+"="+b.adminPass,
		childSlotsEnv+"="+strconv.Itoa(b.opts.slots),
	)
	cmd.Stderr = b.cons
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody asked: drop
			}
		}
		close(c.lines)
		c.done <- cmd.Wait()
	}()
	select {
	case line, ok := <-c.lines:
		if addr, found := strings.CutPrefix(line, "LISTEN "); ok && found {
			c.addr = addr
			return c, nil
		}
		c.stop()
		return nil, fmt.Errorf("child %s did not start (stdout %q)", mode, line)
	case <-time.After(60 * time.Second):
		c.stop()
		return nil, fmt.Errorf("child %s did not start within 60s", mode)
	}
}

// stop closes the child's stdin and waits for it to exit (killing it
// after 10s).
func (c *child) stop() error {
	c.stdin.Close()
	select {
	case err := <-c.done:
		return err
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		return errors.Join(errors.New("child did not exit; killed"), <-c.done)
	}
}

// procStatus reads numeric fields (in kB for memory) of /proc/PID/status.
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}

// idleResult is the idle-conns measurement of one server.
type idleResult struct {
	Target        string  `json:"target"`
	Conns         int     `json:"conns"`
	RSSBeforeKiB  int64   `json:"rss_before_kib"`
	RSSAfterKiB   int64   `json:"rss_after_kib"`
	PerConnKiB    float64 `json:"per_conn_kib"`
	ThreadsBefore int64   `json:"threads_before"`
	ThreadsAfter  int64   `json:"threads_after"`
	// LoginsPerSec: connections opened (handshake, authentication, one
	// query) per second, 16 at a time.
	LoginsPerSec float64 `json:"logins_per_sec"`
	// BackendConns: the server's Threads_connected grew by this much.
	BackendConns int64 `json:"backend_conns"`
	// Goroutines in the child before and after opening the connections.
	GoroutinesBefore int64 `json:"goroutines_before"`
	GoroutinesAfter  int64 `json:"goroutines_after"`
	// The active phase: every connection at once runs increments of one
	// hot counter and reads of it, for ActiveSeconds.
	ActiveSeconds   float64 `json:"active_seconds,omitempty"`
	ActiveOpsPerSec float64 `json:"active_ops_per_sec,omitempty"`
	ActiveP99Ms     float64 `json:"active_p99_ms,omitempty"`
	ActiveMaxMs     float64 `json:"active_max_ms,omitempty"`
	ActiveErrors    int64   `json:"active_errors,omitempty"`
	// ActiveErrorTexts: the first distinct errors (a client read timeout
	// shows as a broken connection).
	ActiveErrorTexts []string `json:"active_error_texts,omitempty"`
	ActivePeakRSSKiB int64    `json:"active_peak_rss_kib,omitempty"`
	ActiveGoroutines int64    `json:"active_goroutines,omitempty"`
	// ActiveCountsExact: the counter's total grew by at least the
	// increments acknowledged in the active phase and at most those plus
	// ActiveUnknown, the increments that failed with an outcome the client
	// cannot know (the connection broke: they may have committed).
	ActiveCountsExact      *bool `json:"active_counts_exact,omitempty"`
	ActiveUnknown          int64 `json:"active_unknown,omitempty"`
	ActiveCommittedUnknown int64 `json:"active_committed_unknown,omitempty"`
	// The same active phase on as many connections straight to the
	// server, after the proxy's, for comparison.
	ActiveDirectOpsPerSec float64 `json:"active_direct_ops_per_sec,omitempty"`
	ActiveDirectP99Ms     float64 `json:"active_direct_p99_ms,omitempty"`
	ActiveDirectMaxMs     float64 `json:"active_direct_max_ms,omitempty"`
	ActiveDirectErrors    int64   `json:"active_direct_errors,omitempty"`
	// Skipped says why this target was not measured.
	Skipped string `json:"skipped,omitempty"`
	Method  string `json:"method"`
}

// idleConns opens --idle-conns connections through slotproxy running as a
// child process, each having run one query on a ruled table (as a pooled
// application connection has), and reports the child's RSS growth per
// connection; then the same for the plain relay, for reference.
func (b *bench) idleConns(ctx context.Context) error {
	for _, mode := range []string{"proxy", "relay"} {
		if mode == "relay" {
			// The relay's io.Copy splices through a pipe pair per direction
			// while it waits: 6 descriptors per connection in its process.
			var lim syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && uint64(6*b.opts.idleConns+64) > lim.Cur {
				why := fmt.Sprintf("the relay needs 6 file descriptors per connection (client and backend sockets, a splice pipe pair per direction) and the limit is %d", lim.Cur)
				b.cons.progress(fmt.Sprintf("%-14s %-11s skipped: %s", wIdleConns, "relay", why))
				b.rep.Idle = append(b.rep.Idle, &idleResult{Target: "relay", Conns: b.opts.idleConns, Skipped: why})
				continue
			}
		}
		r, err := b.idleOne(ctx, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		b.rep.Idle = append(b.rep.Idle, r)
	}
	return nil
}

func (b *bench) idleOne(ctx context.Context, mode string) (*idleResult, error) {
	name := map[string]string{"proxy": "slotproxy", "relay": "relay"}[mode]
	n := b.opts.idleConns
	b.cons.progress(fmt.Sprintf("%-14s %-11s starting child process", wIdleConns, name))
	c, err := b.startChild(mode)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	pid := c.cmd.Process.Pid

	db, err := openDB(c.addr, b.user, b.password, schema, n)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	var mu sync.Mutex
	open := func(k int) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		sem := make(chan struct{}, 16)
		errs := make(chan error, k)
		var wg sync.WaitGroup
		for range k {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				// A login that takes 30s is a failure, and ends the others.
				cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
				defer ccancel()
				conn, err := db.Conn(cctx)
				if err == nil {
					var name string
					if err = conn.QueryRowContext(cctx, "SELECT name FROM repos WHERE id = 1").Scan(&name); err != nil {
						conn.Close()
					}
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	// Warm up (first connections pay for one-time initialisation), then
	// close those connections and let the child settle.
	if err := open(min(16, n)); err != nil {
		return nil, err
	}
	for _, conn := range conns {
		conn.Close()
	}
	conns = conns[:0]
	db.SetMaxIdleConns(0) // really close them: a pooled idle connection is still open
	db.SetMaxIdleConns(n)
	settle := 2 * time.Second
	if b.opts.smoke {
		settle = 200 * time.Millisecond
	}
	time.Sleep(settle / 2)
	st0, err := procStatus(pid)
	if err != nil {
		return nil, err
	}
	threads := func() int64 {
		var name string
		var v int64
		if err := b.admin.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &v); err != nil {
			return -1
		}
		return v
	}
	backend0 := threads()
	g0 := c.goroutines()
	b.cons.progress(fmt.Sprintf("%-14s %-11s opening %d connections", wIdleConns, name, n))
	opened := time.Now()
	if err := open(n); err != nil {
		return nil, fmt.Errorf("opening %d connections: %w", n, err)
	}
	logins := float64(n) / time.Since(opened).Seconds()
	backend1 := threads()
	b.cons.progress(fmt.Sprintf("%-14s %-11s %d connections open, settling", wIdleConns, name, n))
	time.Sleep(settle)
	st1, err := procStatus(pid)
	if err != nil {
		return nil, err
	}
	g1 := c.goroutines()
	res := &idleResult{
		Target:           name,
		Conns:            n,
		RSSBeforeKiB:     st0["VmRSS"],
		RSSAfterKiB:      st1["VmRSS"],
		PerConnKiB:       float64(st1["VmRSS"]-st0["VmRSS"]) / float64(n),
		ThreadsBefore:    st0["Threads"],
		ThreadsAfter:     st1["Threads"],
		LoginsPerSec:     logins,
		BackendConns:     backend1 - backend0,
		GoroutinesBefore: g0,
		GoroutinesAfter:  g1,
		Method: fmt.Sprintf("child process VmRSS growth / connections; each connection authenticated and ran one query; "+
			"measured %s after opening, no forced GC; then every connection at once increments repos id 1 and reads it back", settle),
	}
	if mode == "proxy" {
		if err := b.idleActive(ctx, c, conns, res); err != nil {
			return nil, fmt.Errorf("active phase: %w", err)
		}
		for _, conn := range conns {
			conn.Close()
		}
		conns = conns[:0]
		db.Close()
		if err := b.idleActiveDirect(ctx, n, res); err != nil {
			return nil, fmt.Errorf("active phase, direct: %w", err)
		}
	}
	return res, nil
}

// idleActiveDirect runs the active phase on n connections straight to the
// server.
func (b *bench) idleActiveDirect(ctx context.Context, n int, res *idleResult) error {
	db, err := openDB(b.backendAddr, b.user, b.password, schema, n)
	if err != nil {
		return err
	}
	defer db.Close()
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	b.cons.progress(fmt.Sprintf("%-14s %-11s opening %d connections", wIdleConns, "direct", n))
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	b.cons.progress(fmt.Sprintf("%-14s %-11s %d connections active", wIdleConns, "direct", n))
	run := b.runActive(ctx, conns, nil)
	res.ActiveDirectOpsPerSec = float64(run.ops) / run.elapsed.Seconds()
	res.ActiveDirectP99Ms = run.p99
	res.ActiveDirectMaxMs = run.max
	res.ActiveDirectErrors = run.errs
	return nil
}

// idleActive runs the active phase on the open connections conns: each
// loops on an autocommit increment of the hot counter (repos id 1) and a
// read of it, all at once, while the child's RSS and goroutines are
// sampled; then it checks that the total grew by exactly the increments
// acknowledged.
func (b *bench) idleActive(ctx context.Context, c *child, conns []*sql.Conn, res *idleResult) error {
	b.cons.progress(fmt.Sprintf("%-14s %-11s %d connections active", wIdleConns, "slotproxy", len(conns)))
	before, err := b.total(ctx, 1)
	if err != nil {
		return err
	}
	var peak, maxG int64
	run := b.runActive(ctx, conns, func() {
		if st, err := procStatus(c.cmd.Process.Pid); err == nil && st["VmRSS"] > peak {
			peak = st["VmRSS"]
		}
		if g := c.goroutines(); g > maxG {
			maxG = g
		}
	})
	after, err := b.total(ctx, 1)
	if err != nil {
		return err
	}
	grew := after - before
	exact := grew >= run.incs && grew <= run.incs+run.incErrs
	res.ActiveSeconds = run.elapsed.Seconds()
	res.ActiveOpsPerSec = float64(run.ops) / run.elapsed.Seconds()
	res.ActiveP99Ms = run.p99
	res.ActiveMaxMs = run.max
	res.ActiveErrors = run.errs
	res.ActiveErrorTexts = run.errors
	res.ActiveUnknown = run.incErrs
	res.ActiveCommittedUnknown = grew - run.incs
	res.ActivePeakRSSKiB = peak
	res.ActiveGoroutines = maxG
	res.ActiveCountsExact = &exact
	if !exact {
		return fmt.Errorf("the total grew by %d, %d increments were acknowledged (%s)", grew, run.incs, run.problems())
	}
	return nil
}

// activeRun is what runActive measured.
type activeRun struct {
	ops     int64         // statements run
	p99     float64       // ms, one increment + read
	max     float64       // ms, the slowest increment + read
	errs    int64         // statements that failed
	incs    int64         // increments acknowledged with 1 row affected
	incErrs int64         // increments that failed with an unknown outcome (no server error)
	elapsed time.Duration // how long it took
	// odd counts increments acknowledged with other than 1 row affected,
	// by the rows affected; errors keeps the first distinct error texts.
	odd    map[int64]int64
	errors []string
}

// problems describes the failed increments, odd affected-row counts and
// first errors of the run, for a count that does not match.
func (r *activeRun) problems() string {
	return fmt.Sprintf("%d increments failed, affected rows other than 1: %v, errors: %q", r.incErrs, r.odd, r.errors)
}

// runActive has every connection of conns loop, all at once, on an
// autocommit increment of the hot counter and a read of it for the active
// phase's duration, calling sample (if set) every 250 ms meanwhile.
func (b *bench) runActive(ctx context.Context, conns []*sql.Conn, sample func()) *activeRun {
	dur := 5 * time.Second
	if b.opts.smoke {
		dur = 500 * time.Millisecond
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		lat    []time.Duration
		stopAt = time.Now().Add(dur)
		run    = &activeRun{odd: map[int64]int64{}}
	)
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for sample != nil && time.Now().Before(stopAt) {
			sample()
			time.Sleep(250 * time.Millisecond)
		}
	}()
	noteErr := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if msg := err.Error(); len(run.errors) < 5 && !slices.Contains(run.errors, msg) {
			run.errors = append(run.errors, msg)
		}
	}
	start := time.Now()
	for _, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var myIncs, myOps, myErrs, myIncErrs int64
			myOdd := map[int64]int64{}
			for time.Now().Before(stopAt) {
				t0 := time.Now()
				r, err := conn.ExecContext(ctx, sqlIncrement)
				if err == nil {
					if n, _ := r.RowsAffected(); n == 1 {
						myIncs++
					} else {
						myOdd[n]++
					}
					var v int64
					err = conn.QueryRowContext(ctx, "SELECT downloads FROM repos WHERE id = 1").Scan(&v)
				} else if !errors.As(err, new(*mysql.MySQLError)) {
					// Not the server's answer: the connection broke, and
					// the increment may have committed.
					myIncErrs++
				}
				if err != nil {
					myErrs++
					noteErr(err)
					mine = append(mine, time.Since(t0))
					continue
				}
				myOps += 2
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			run.incs += myIncs
			run.ops += myOps
			run.errs += myErrs
			run.incErrs += myIncErrs
			for n, c := range myOdd {
				run.odd[n] += c
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	<-sampleDone
	slices.Sort(lat)
	if len(lat) > 0 {
		run.p99 = float64(lat[len(lat)*99/100].Microseconds()) / 1000
		run.max = float64(lat[len(lat)-1].Microseconds()) / 1000
	}
	return run
}
