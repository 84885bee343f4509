package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/rewrite"
)

// The statements of the workloads. The increments are text queries with a
// literal key, as applications usually write them; the selects are
// prepared statements (COM_STMT_PREPARE once per connection, then
// COM_STMT_EXECUTE).
const (
	sqlIncrement = "UPDATE repos SET downloads = downloads + 1 WHERE id = 1"
	// sqlPreparedIncrement is hot-tx's increment as a prepared statement.
	sqlPreparedIncrement = "UPDATE repos SET downloads = downloads + ? WHERE id = ?"
	sqlRepoName          = "SELECT name FROM repos WHERE id = ?"
	sqlPointSelect       = "SELECT c FROM items WHERE id = ?"
	sqlRangeSelect       = "SELECT id, k, c FROM items WHERE id BETWEEN ? AND ?"
	sqlCounterRead       = "SELECT downloads FROM repos WHERE id = ?"
	hotID                = 1
)

// runWorkload runs one workload and adds its results to the report.
func (b *bench) runWorkload(ctx context.Context, name string) error {
	if b.procDir != "" {
		if err := b.startServed(ctx, rollupOff(name)); err != nil {
			return err
		}
	}
	if before, ok := b.proxyStats(); ok {
		defer func() {
			if after, ok := b.proxyStats(); ok {
				b.rep.addProxyStats(name, before, after)
			}
		}()
	}
	switch name {
	case wHotTx:
		return b.hotTx(ctx)
	case wHotAutocommit:
		return b.hotAutocommit(ctx)
	case wPointSelect:
		return b.pointSelect(ctx)
	case wRangeSelect:
		return b.simple(ctx, wRangeSelect, b.opts.readClients, b.rangeOp)
	case wCounterRead:
		return b.counterRead(ctx)
	case wHotRead:
		return b.hotRead(ctx)
	case wIdleConns:
		return b.idleConns(ctx)
	}
	return fmt.Errorf("unknown workload %q", name)
}

// counterCheck checks that the increments committed during a workload all
// arrived: the true total of repos id 1 (base + slots) grew by exactly the
// number of increments the clients saw succeed, and slotproxy reads it the
// same.
func (b *bench) counterCheck(ctx context.Context, name string, committed *atomic.Int64, uncertain bool, run func() error) error {
	before, err := b.total(ctx, hotID)
	if err != nil {
		return err
	}
	runErr := run()
	after, err := b.total(ctx, hotID)
	if err != nil {
		return errors.Join(runErr, err)
	}
	c := check{Name: name + ": every committed increment counted"}
	got, want := after-before, committed.Load()
	switch {
	case got == want:
		c.OK = true
		c.Detail = fmt.Sprintf("total of repos id %d grew by %d = increments committed", hotID, got)
	case uncertain:
		c.OK = true
		c.Detail = fmt.Sprintf("total grew by %d, %d increments committed; inexact because some statements failed", got, want)
	default:
		c.Detail = fmt.Sprintf("total of repos id %d grew by %d, but clients committed %d increments", hotID, got, want)
	}
	b.rep.Checks = append(b.rep.Checks, c)
	rc := check{Name: name + ": slotproxy reads the true total"}
	if err := b.checkRead(ctx, b.proxyAddr, hotID, -1); err != nil {
		rc.Detail = err.Error()
	} else {
		rc.OK, rc.Detail = true, fmt.Sprintf("repos id %d downloads = %d (base + slots)", hotID, after)
	}
	b.rep.Checks = append(b.rep.Checks, rc)
	return runErr
}

// hotTx: each transaction increments the hot row, reads one repo name by
// primary key, works for --hold and commits.
func (b *bench) hotTx(ctx context.Context) error {
	var committed atomic.Int64
	clients := slices.Clone(b.opts.sweep)
	if !slices.Contains(clients, b.opts.clients) {
		clients = append(clients, b.opts.clients)
	}
	slices.Sort(clients)
	var results []*targetResult
	err := b.counterCheck(ctx, wHotTx, &committed, false, func() error {
		for _, n := range clients {
			targets := []string{"direct", "slotproxy", "handwritten"}
			if n == b.opts.clients {
				// The same hand-written app through the plain relay: what
				// an extra hop costs without any of the proxy's work; and
				// the increment as a prepared statement kept per
				// connection (each execution gets a slot of its own).
				targets = append(targets, "handwritten-relay", "slotproxy-prepared")
			}
			res, err := b.runScenario(ctx, b.hotTxScenario(n, &committed, targets...))
			if err != nil {
				return err
			}
			for _, r := range res {
				r.Sweep = n != b.opts.clients
			}
			results = append(results, res...)
		}
		return nil
	})
	b.rep.add(results...)
	return err
}

// hotTxScenario is hot-tx at n clients on the named targets.
func (b *bench) hotTxScenario(n int, committed *atomic.Int64, targets ...string) *scenario {
	sc := &scenario{workload: wHotTx, clients: n, unit: "tx/s"}
	for _, name := range targets {
		switch name {
		case "direct":
			sc.targets = append(sc.targets, &target{name: name, addr: b.backendAddr, build: b.hotTxOp(committed, nil)})
		case "slotproxy":
			sc.targets = append(sc.targets, &target{name: name, addr: b.proxyAddr, build: b.hotTxOp(committed, nil)})
		case "handwritten":
			sc.targets = append(sc.targets, &target{name: name, addr: b.backendAddr, build: b.hotTxOp(committed, b.handwrittenIncrement)})
		case "handwritten-relay":
			sc.targets = append(sc.targets, &target{name: name, addr: b.relayAddr, build: b.hotTxOp(committed, b.handwrittenIncrement)})
		case "slotproxy-prepared":
			sc.targets = append(sc.targets, &target{name: name, addr: b.proxyAddr, build: b.hotTxOpWith(committed, nil, true)})
		}
	}
	return sc
}

// handwrittenIncrement is what a developer writes by hand for the
// slotted-counter pattern: an upsert into a random slot, sent as text.
func (b *bench) handwrittenIncrement(rng *rand.Rand) string {
	upd := "ON DUPLICATE KEY UPDATE count = count + VALUES(count)"
	if b.rowAlias {
		upd = "AS new ON DUPLICATE KEY UPDATE count = " + config.DefaultSlotsTable + ".count + new.count"
	}
	return fmt.Sprintf("INSERT INTO %s (record_type, slot, count, record_id) VALUES (%d, %d, 1, %d) %s",
		config.DefaultSlotsTable, b.recordType, rng.IntN(b.opts.slots), hotID, upd)
}

// hotTxOp returns the hot-tx transaction. increment makes the write
// statement; nil means the plain UPDATE of the hot row. Transactions are
// BEGIN ... COMMIT on the client's own connection; a deadlock or lock wait
// timeout is rolled back and retried, as an application would.
func (b *bench) hotTxOp(committed *atomic.Int64, increment func(*rand.Rand) string) func(context.Context, *sql.Conn) (opFunc, error) {
	return b.hotTxOpWith(committed, increment, false)
}

// hotTxOpWith is hotTxOp; prepared: the increment is sqlPreparedIncrement
// (with 1 and hotID), prepared once per connection.
func (b *bench) hotTxOpWith(committed *atomic.Int64, increment func(*rand.Rand) string, prepared bool) func(context.Context, *sql.Conn) (opFunc, error) {
	hold := b.opts.hold
	rows := b.opts.rows
	return func(ctx context.Context, conn *sql.Conn) (opFunc, error) {
		sel, err := conn.PrepareContext(ctx, sqlRepoName)
		if err != nil {
			return nil, err
		}
		var inc *sql.Stmt
		if prepared {
			if inc, err = conn.PrepareContext(ctx, sqlPreparedIncrement); err != nil {
				return nil, err
			}
		}
		bg := context.Background() // a cancelled context would kill the connection mid-statement
		var name []byte
		once := func(rng *rand.Rand) error {
			write := b.opts.increment
			if increment != nil {
				write = increment(rng)
			}
			if _, err := conn.ExecContext(bg, "BEGIN"); err != nil {
				return err
			}
			if inc != nil {
				_, err = inc.ExecContext(bg, 1, hotID)
			} else {
				_, err = conn.ExecContext(bg, write)
			}
			if err != nil {
				return err
			}
			if err := sel.QueryRowContext(bg, rng.IntN(rows)+1).Scan(&name); err != nil {
				return err
			}
			if hold > 0 {
				time.Sleep(hold)
			}
			_, err := conn.ExecContext(bg, "COMMIT")
			return err
		}
		return func(rng *rand.Rand) (int, error) {
			for retries := 0; ; retries++ {
				err := once(rng)
				if err == nil {
					committed.Add(1)
					return retries, nil
				}
				conn.ExecContext(bg, "ROLLBACK")
				if !retryable(err) || retries == 10 {
					return retries, err
				}
			}
		}, nil
	}
}

// hotAutocommit: autocommit increments of the hot row, no work. Plain
// UPDATEs through the relay against the same UPDATEs through slotproxy
// (which coalesces them, as serve does by default), through slotproxy with
// coalescing off (slotproxy-solo), and the hand-written slotted upsert of
// a random slot, sent directly.
func (b *bench) hotAutocommit(ctx context.Context) error {
	var committed atomic.Int64
	opOf := func(increment func(*rand.Rand) string) func(ctx context.Context, conn *sql.Conn) (opFunc, error) {
		return func(ctx context.Context, conn *sql.Conn) (opFunc, error) {
			return func(rng *rand.Rand) (int, error) {
				for retries := 0; ; retries++ {
					_, err := conn.ExecContext(context.Background(), increment(rng))
					if err == nil {
						committed.Add(1)
						return retries, nil
					}
					if !retryable(err) || retries == 10 {
						return retries, err
					}
				}
			}, nil
		}
	}
	op := opOf(func(*rand.Rand) string { return b.opts.increment })
	sc := &scenario{workload: wHotAutocommit, clients: b.opts.clients, unit: "tx/s", targets: []*target{
		{name: "relay", addr: b.relayAddr, build: op},
		{name: "slotproxy", addr: b.proxyAddr, build: op},
	}}
	if b.soloAddr != "" {
		sc.targets = append(sc.targets,
			&target{name: "slotproxy-solo", addr: b.soloAddr, build: op},
			&target{name: "handwritten", addr: b.backendAddr, build: opOf(b.handwrittenIncrement)})
	}
	var results []*targetResult
	err := b.counterCheck(ctx, wHotAutocommit, &committed, false, func() error {
		var err error
		results, err = b.runScenario(ctx, sc)
		return err
	})
	b.rep.add(results...)
	return err
}

// simple runs a read workload at n clients on direct, relay and slotproxy.
func (b *bench) simple(ctx context.Context, name string, n int, op func(context.Context, *sql.Conn) (opFunc, error)) error {
	sc := &scenario{workload: name, clients: n, unit: "qps", targets: []*target{
		{name: "direct", addr: b.backendAddr, build: op},
		{name: "relay", addr: b.relayAddr, build: op},
		{name: "slotproxy", addr: b.proxyAddr, build: op},
	}}
	res, err := b.runScenario(ctx, sc)
	b.rep.add(res...)
	return err
}

// pointSelect: prepared primary-key lookups on items, a table without
// rules (slotproxy's pass-through path), at --read-clients and 1 client.
func (b *bench) pointSelect(ctx context.Context) error {
	items := b.opts.items
	op := func(ctx context.Context, conn *sql.Conn) (opFunc, error) {
		st, err := conn.PrepareContext(ctx, sqlPointSelect)
		if err != nil {
			return nil, err
		}
		var c []byte
		return func(rng *rand.Rand) (int, error) {
			return 0, st.QueryRowContext(context.Background(), rng.IntN(items)+1).Scan(&c)
		}, nil
	}
	counts := []int{b.opts.readClients}
	if b.opts.readClients != 1 {
		counts = append(counts, 1)
	}
	for _, n := range counts {
		if err := b.simple(ctx, wPointSelect, n, op); err != nil {
			return err
		}
	}
	return nil
}

// rangeOp: a prepared range select of --range-size (1000) consecutive rows,
// every row read.
func (b *bench) rangeOp(ctx context.Context, conn *sql.Conn) (opFunc, error) {
	st, err := conn.PrepareContext(ctx, sqlRangeSelect)
	if err != nil {
		return nil, err
	}
	size, items := b.opts.rangeSize, b.opts.items
	var (
		id int64
		k  int64
		c  sql.RawBytes
	)
	return func(rng *rand.Rand) (int, error) {
		lo := rng.IntN(items-size+1) + 1
		rows, err := st.QueryContext(context.Background(), lo, lo+size-1)
		if err != nil {
			return 0, err
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(&id, &k, &c); err != nil {
				rows.Close()
				return 0, err
			}
			n++
		}
		if err := rows.Close(); err != nil {
			return 0, err
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if n != size {
			return 0, fmt.Errorf("range select returned %d rows, want %d", n, size)
		}
		return 0, nil
	}, nil
}

// counterReadOp reads a counter of a counter-read id with query (one
// placeholder, the id) and checks the value (want: what this target must
// return).
func (b *bench) counterReadOp(query string, want int64) func(context.Context, *sql.Conn) (opFunc, error) {
	lo, hi := b.counterIDRange()
	return func(ctx context.Context, conn *sql.Conn) (opFunc, error) {
		st, err := conn.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		var v int64
		return func(rng *rand.Rand) (int, error) {
			if err := st.QueryRowContext(context.Background(), lo+rng.Int64N(hi-lo+1)).Scan(&v); err != nil {
				return 0, err
			}
			if v != want {
				return 0, fmt.Errorf("downloads = %d, want %d", v, want)
			}
			return 0, nil
		}, nil
	}
}

// counterRead: counter reads of ids with live slot rows through slotproxy
// (base + SUM of the slots) against the plain base column through the relay.
func (b *bench) counterRead(ctx context.Context) error {
	res, err := b.counterReadAt(ctx, b.opts.counterSlots, true)
	b.rep.add(res...)
	return err
}

// counterReadAt runs counter-read with slotRows live slot rows per id.
// withRewritten adds three targets through the plain relay, which separate
// what the backend pays for the summing query from what the proxy costs:
// the SQL slotproxy sends, written by hand (relay-rewritten); the same read
// as a join with GROUP BY instead of a correlated subquery (relay-join);
// and the slot rows' sum alone, one table (relay-slots).
func (b *bench) counterReadAt(ctx context.Context, slotRows int, withRewritten bool) ([]*targetResult, error) {
	if err := b.seedCounterSlots(ctx, slotRows); err != nil {
		return nil, err
	}
	sc := &scenario{workload: wCounterRead, clients: b.opts.readClients, unit: "qps", targets: []*target{
		{name: "relay", addr: b.relayAddr, build: b.counterReadOp(sqlCounterRead, 0)},
		{name: "slotproxy", addr: b.proxyAddr, build: b.counterReadOp(sqlCounterRead, int64(slotRows))},
	}}
	if b.rolledAddr != "" {
		// reads: rolled_up: the base value (0: the slots are never
		// rolled up here), the statement as written.
		sc.targets = append(sc.targets, &target{name: "slotproxy-rolled-up", addr: b.rolledAddr, build: b.counterReadOp(sqlCounterRead, 0)})
	}
	if withRewritten {
		plans, err := b.rw.Rewrite(sqlCounterRead, rewrite.Session{DB: schema})
		if err != nil || len(plans) != 1 || plans[0].Kind() != rewrite.KindRead {
			return nil, fmt.Errorf("rewriting %q: %v (%s)", sqlCounterRead, err, rewrite.Explain(plans, err))
		}
		b.rep.RewrittenCounterRead = plans[0].SQL()
		join := fmt.Sprintf("SELECT CAST(r.downloads + COALESCE(SUM(s.count), 0) AS SIGNED) FROM repos r "+
			"LEFT JOIN %s s ON s.record_type = %d AND s.record_id = r.id WHERE r.id = ? GROUP BY r.id", config.DefaultSlotsTable, b.recordType)
		slots := fmt.Sprintf("SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM %s WHERE record_type = %d AND record_id = ?",
			config.DefaultSlotsTable, b.recordType)
		sc.targets = append(sc.targets,
			&target{name: "relay-rewritten", addr: b.relayAddr, build: b.counterReadOp(plans[0].SQL(), int64(slotRows))},
			&target{name: "relay-join", addr: b.relayAddr, build: b.counterReadOp(join, int64(slotRows))},
			&target{name: "relay-slots", addr: b.relayAddr, build: b.counterReadOp(slots, int64(slotRows))})
	}
	return b.runScenario(ctx, sc)
}

// hotRead: identical concurrent text reads of a few hot records with live
// slot rows through slotproxy, which shares one query among the reads
// that arrive while another of the same text runs (consolidate: true),
// through slotproxy reading each alone (slotproxy-solo), and the plain
// base column through the relay.
func (b *bench) hotRead(ctx context.Context) error {
	n := b.opts.counterSlots
	if err := b.seedCounterSlots(ctx, n); err != nil {
		return err
	}
	lo, _ := b.counterIDRange()
	ids := int64(max(b.opts.hotReadIDs, 1))
	op := func(want int64) func(context.Context, *sql.Conn) (opFunc, error) {
		return func(ctx context.Context, conn *sql.Conn) (opFunc, error) {
			var v int64
			return func(rng *rand.Rand) (int, error) {
				// Text: the id as a literal, no placeholder.
				q := fmt.Sprintf("SELECT downloads FROM repos WHERE id = %d", lo+rng.Int64N(ids))
				if err := conn.QueryRowContext(context.Background(), q).Scan(&v); err != nil {
					return 0, err
				}
				if v != want {
					return 0, fmt.Errorf("%s: downloads = %d, want %d", q, v, want)
				}
				return 0, nil
			}, nil
		}
	}
	sc := &scenario{workload: wHotRead, clients: b.opts.readClients, unit: "qps", targets: []*target{
		{name: "relay", addr: b.relayAddr, build: op(0)},
		{name: "slotproxy", addr: b.proxyAddr, build: op(int64(n))},
	}}
	if b.soloAddr != "" {
		sc.targets = append(sc.targets, &target{name: "slotproxy-solo", addr: b.soloAddr, build: op(int64(n))})
	}
	res, err := b.runScenario(ctx, sc)
	b.rep.add(res...)
	return err
}
