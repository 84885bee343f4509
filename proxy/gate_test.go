package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestConcurrentRewritesGate: with limits.max_concurrent_rewrites, a
// rewritten statement of a session outside a transaction waits while the
// turns are taken, and gets one when a statement ends; when no turn has
// been given back for the queue wait (the holder is stuck in a lock wait), it
// runs without one; statements inside transactions never wait for a turn, so
// the transaction a gated statement waits for can always finish. Counts
// stay exact.
func TestConcurrentRewritesGate(t *testing.T) {
	setupDiffSchemas(t)
	const queueWait = 3 * time.Second
	reg := prometheus.NewRegistry()
	p := startProxyFull(t, func(c *proxy.Config) {
		c.Rewriter = newRewriter(diffCatalog())
		c.MaxConcurrentRewrites = 1
		c.QueueWait = queueWait
		c.Metrics = proxy.NewMetrics(reg)
	}, nil)
	connect := func() *client.Conn {
		c, err := client.Connect(p.addr, testdb.User, testdb.Password, ruledSchema)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	tx, inc, reader, other := connect(), connect(), connect(), connect()
	exec := func(c *client.Conn, q string) int64 {
		t.Helper()
		r, err := c.Execute(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if r.Resultset != nil && len(r.Values) > 0 {
			v, _ := r.GetInt(0, 0)
			return v
		}
		return int64(r.AffectedRows)
	}
	// async runs q on c in a goroutine and delivers its result and when
	// it finished.
	type done struct {
		v   int64
		err error
		at  time.Time
	}
	async := func(c *client.Conn, q string) <-chan done {
		ch := make(chan done, 1)
		go func() {
			r, err := c.Execute(q)
			d := done{err: err, at: time.Now()}
			if err == nil {
				if r.Resultset != nil && len(r.Values) > 0 {
					d.v, _ = r.GetInt(0, 0)
				} else {
					d.v = int64(r.AffectedRows)
				}
			}
			ch <- d
		}()
		return ch
	}
	before1, before2 := exec(other, "SELECT downloads FROM repos WHERE id = 1"), exec(other, "SELECT downloads FROM repos WHERE id = 2")

	// A transaction locks record 1 (a locking read, not gated).
	exec(tx, "BEGIN")
	exec(tx, "SELECT downloads FROM repos WHERE id = 1 FOR UPDATE")
	// An autocommit increment of record 1 takes the only turn and waits
	// for the transaction's lock.
	incDone := async(inc, "UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
	time.Sleep(300 * time.Millisecond)
	select {
	case d := <-incDone:
		t.Fatalf("the increment did not wait for the transaction's lock: %+v", d)
	default:
	}

	// A read of another record waits for a turn, then runs anyway.
	start := time.Now()
	if v := exec(reader, "SELECT downloads FROM repos WHERE id = 2"); v != before2 {
		t.Fatalf("read %d, want %d", v, before2)
	}
	if took := time.Since(start); took < queueWait-100*time.Millisecond {
		t.Fatalf("the read took %s: it did not wait for a turn (queue wait %s)", took, queueWait)
	}

	// Another waits; the transaction's own statements do not, and its
	// commit lets the increment finish, whose turn the waiting read gets.
	readDone := async(reader, "SELECT downloads FROM repos WHERE id = 2")
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	exec(tx, "UPDATE repos SET downloads = downloads + 10 WHERE id = 1")
	exec(tx, "COMMIT")
	if took := time.Since(start); took > queueWait/2 {
		t.Fatalf("the transaction's statements took %s: they waited for a turn", took)
	}
	committed := time.Now()
	d := <-incDone
	if d.err != nil || d.v != 1 {
		t.Fatalf("increment: %+v", d)
	}
	r := <-readDone
	if r.err != nil || r.v != before2 {
		t.Fatalf("second read: %+v", r)
	}
	if r.at.Sub(committed) > queueWait/2 {
		t.Fatalf("the second read ended %s after the commit: it did not get the increment's turn", r.at.Sub(committed))
	}
	if v := exec(other, "SELECT downloads FROM repos WHERE id = 1"); v != before1+11 {
		t.Fatalf("total %d, want %d", v, before1+11)
	}
	want := `
# HELP slotproxy_queued_statements_total Rewritten statements of sessions outside transactions that waited for a turn (limits.max_concurrent_rewrites): outcome ran (got one) or overflowed (ran without one: no turn given back for limits.queue_wait).
# TYPE slotproxy_queued_statements_total counter
slotproxy_queued_statements_total{outcome="overflowed"} 1
slotproxy_queued_statements_total{outcome="ran"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slotproxy_queued_statements_total"); err != nil {
		t.Fatal(err)
	}
}
