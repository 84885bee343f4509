package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// opFunc runs one operation (a transaction or a statement) on a client's
// connection. retries counts transactions an application would retry
// (deadlock, lock wait timeout) and that were retried within the op.
type opFunc func(rng *rand.Rand) (retries int, err error)

// target is one way of running a workload: an address and the operation
// each client runs there.
type target struct {
	name string // direct, relay, slotproxy or handwritten
	addr string
	// build prepares a client's statements on conn and returns its
	// operation.
	build func(ctx context.Context, conn *sql.Conn) (opFunc, error)
}

// scenario is a workload at one client count, run on several targets.
type scenario struct {
	workload string
	clients  int
	unit     string // "tx/s" or "qps"
	targets  []*target
}

// client is one connection of a target's pool with its operation.
type client struct {
	conn *sql.Conn
	op   opFunc
	rng  *rand.Rand
	hist hist
}

// pool is a target's clients, open for the whole scenario so that rounds
// measure statements, not connecting.
type pool struct {
	t       *target
	db      *sql.DB
	clients []*client
	res     *targetResult
}

func (b *bench) openPool(ctx context.Context, sc *scenario, t *target) (*pool, error) {
	db, err := openDB(t.addr, b.user, b.password, schema, sc.clients)
	if err != nil {
		return nil, err
	}
	p := &pool{t: t, db: db, res: &targetResult{
		Workload: sc.workload, Target: t.name, Clients: sc.clients, Unit: sc.unit, hist: &hist{},
	}}
	for i := range sc.clients {
		conn, err := db.Conn(ctx)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("%s: connecting to %s: %w", t.name, t.addr, err)
		}
		op, err := t.build(ctx, conn)
		if err != nil {
			conn.Close()
			p.close()
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		p.clients = append(p.clients, &client{conn: conn, op: op, rng: rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano())))})
	}
	return p, nil
}

func (p *pool) close() {
	for _, c := range p.clients {
		c.conn.Close()
	}
	p.db.Close()
}

// roundStats is what one round of one target measured.
type roundStats struct {
	ops, errors, retries int64
	elapsed              time.Duration
	other, steal         float64 // cores busy with other processes, stolen by the hypervisor
	backendTicks         int64   // CPU time the backend's server process used
	selfTicks            int64   // CPU time this process used (clients, and the proxy or relay under test when they run in it)
	targetTicks          int64   // CPU time the process serving the target used, when it is one of its own (--slotproxy)
}

// runFor runs every client's operation in a loop for d and waits for the
// operations in flight. With measure unset (warm-up) nothing is recorded.
func (b *bench) runFor(ctx context.Context, p *pool, d time.Duration, measure bool, status func(ops int64, elapsed time.Duration)) roundStats {
	var (
		wg        sync.WaitGroup
		ops, errs atomic.Int64
		retries   atomic.Int64
		errMu     sync.Mutex
	)
	pid := b.pids[p.t.addr]
	cpu0 := sampleCPU(b.backendPID, pid)
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range p.clients {
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("component", "client"), func(context.Context) {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				r, err := c.op(c.rng)
				lat := time.Since(t0)
				retries.Add(int64(r))
				if err != nil {
					errs.Add(1)
					if measure {
						errMu.Lock()
						if len(p.res.FirstErrors) < 5 {
							p.res.FirstErrors = append(p.res.FirstErrors, err.Error())
						}
						errMu.Unlock()
					}
					time.Sleep(time.Millisecond) // a broken connection must not spin
					continue
				}
				ops.Add(1)
				if measure {
					c.hist.record(lat)
				}
			}
		})
	}
	if status != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		tick := time.NewTicker(200 * time.Millisecond)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-tick.C:
				status(ops.Load(), time.Since(start))
			}
		}
		tick.Stop()
	} else {
		wg.Wait()
	}
	rs := roundStats{ops: ops.Load(), errors: errs.Load(), retries: retries.Load(), elapsed: time.Since(start)}
	cpu1 := sampleCPU(b.backendPID, pid)
	rs.other, rs.steal = otherCores(cpu0, cpu1, rs.elapsed.Seconds())
	if cpu0.ok && cpu1.ok {
		rs.backendTicks, rs.selfTicks, rs.targetTicks = cpu1.backend-cpu0.backend, cpu1.self-cpu0.self, cpu1.target-cpu0.target
	}
	if !measure && rs.errors > 0 {
		// Warm-up errors count too: they are errors all the same.
		p.res.Errors += rs.errors
		p.res.FirstErrors = append(p.res.FirstErrors, fmt.Sprintf("(%d errors during warm-up)", rs.errors))
	}
	return rs
}

// runScenario runs sc: every target opens its clients and warms up, then
// the targets run in turn, round after round (A B C A B C ...), so that
// machine noise lands on all of them alike. With --cpuprofile, the rounds
// of the first scenario of --cpuprofile-workload at its main client count
// are profiled.
func (b *bench) runScenario(ctx context.Context, sc *scenario) ([]*targetResult, error) {
	o := b.opts
	pools := make([]*pool, 0, len(sc.targets))
	defer func() {
		for _, p := range pools {
			p.close()
		}
	}()
	for _, t := range sc.targets {
		b.cons.progress(fmt.Sprintf("%-14s c=%-3d %-11s connecting", sc.workload, sc.clients, t.name))
		p, err := b.openPool(ctx, sc, t)
		if err != nil {
			return nil, err
		}
		pools = append(pools, p)
	}
	for _, p := range pools {
		if o.warmup > 0 {
			b.cons.progress(fmt.Sprintf("%-14s c=%-3d %-11s warm-up", sc.workload, sc.clients, p.t.name))
			b.runFor(ctx, p, o.warmup, false, nil)
		}
	}
	if stop := b.startProfile(sc); stop != nil {
		defer stop()
	}
	for round := 1; round <= o.rounds; round++ {
		for _, p := range pools {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			status := func(ops int64, el time.Duration) {
				rate := 0.0
				if el > 0 {
					rate = float64(ops) / el.Seconds()
				}
				b.cons.progress(fmt.Sprintf("%-14s c=%-3d %-11s round %d/%d  %4.1fs/%.1fs  ops %d  %s %s",
					sc.workload, sc.clients, p.t.name, round, o.rounds, el.Seconds(), o.duration.Seconds(), ops, fmtRate(rate), sc.unit))
			}
			rs := b.runFor(ctx, p, o.duration, true, status)
			r := p.res
			r.Ops += rs.ops
			r.Errors += rs.errors
			r.Retries += rs.retries
			r.Seconds += rs.elapsed.Seconds()
			r.RoundRates = append(r.RoundRates, float64(rs.ops)/rs.elapsed.Seconds())
			r.RoundOtherCores = append(r.RoundOtherCores, rs.other)
			r.otherSum += rs.other * rs.elapsed.Seconds()
			r.stealSum += rs.steal * rs.elapsed.Seconds()
			r.backendTicks += rs.backendTicks
			r.selfTicks += rs.selfTicks
			r.targetTicks += rs.targetTicks
		}
	}
	out := make([]*targetResult, len(pools))
	for i, p := range pools {
		for _, c := range p.clients {
			p.res.hist.merge(&c.hist)
		}
		p.res.finish()
		out[i] = p.res
	}
	return out, nil
}

// startProfile starts the CPU profile for sc if it is the scenario to
// profile, and returns the function that stops it (nil otherwise).
func (b *bench) startProfile(sc *scenario) func() {
	o := b.opts
	want := o.readClients
	if sc.workload == wHotTx || sc.workload == wHotAutocommit {
		want = o.clients
	}
	if o.cpuProfile == "" || b.profiled || sc.workload != o.profileWorkload || sc.clients != want {
		return nil
	}
	b.profiled = true
	f, err := os.Create(o.cpuProfile)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		b.problem("cpuprofile: %v", err)
		return nil
	}
	b.rep.Profile = fmt.Sprintf("%s: %s at %d clients, all targets (proxy goroutines have label component=slotproxy)",
		o.cpuProfile, sc.workload, sc.clients)
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.problem("cpuprofile: %v", err)
		}
	}
}
