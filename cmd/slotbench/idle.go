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
	"strconv"
	"strings"
	"sync"
	"time"

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
	io.Copy(io.Discard, os.Stdin)
	stop()
	return 0
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	done  chan error
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
	c := &child{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
		c.done <- cmd.Wait()
	}()
	select {
	case line, ok := <-lines:
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
	BackendConns int64  `json:"backend_conns"`
	Method       string `json:"method"`
}

// idleConns opens --idle-conns connections through slotproxy running as a
// child process, each having run one query on a ruled table (as a pooled
// application connection has), and reports the child's RSS growth per
// connection; then the same for the plain relay, for reference.
func (b *bench) idleConns(ctx context.Context) error {
	for _, mode := range []string{"proxy", "relay"} {
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
		sem := make(chan struct{}, 16)
		errs := make(chan error, k)
		var wg sync.WaitGroup
		for range k {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				conn, err := db.Conn(ctx)
				if err == nil {
					var name string
					if err = conn.QueryRowContext(ctx, "SELECT name FROM repos WHERE id = 1").Scan(&name); err != nil {
						conn.Close()
					}
				}
				if err != nil {
					errs <- err
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
	return &idleResult{
		Target:        name,
		Conns:         n,
		RSSBeforeKiB:  st0["VmRSS"],
		RSSAfterKiB:   st1["VmRSS"],
		PerConnKiB:    float64(st1["VmRSS"]-st0["VmRSS"]) / float64(n),
		ThreadsBefore: st0["Threads"],
		ThreadsAfter:  st1["Threads"],
		LoginsPerSec:  logins,
		BackendConns:  backend1 - backend0,
		Method: fmt.Sprintf("child process VmRSS growth / connections; each connection authenticated and ran one query; "+
			"measured %s after opening, no forced GC", settle),
	}, nil
}
