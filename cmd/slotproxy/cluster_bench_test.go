package main

import (
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// BenchmarkCluster measures one hot counter on a 3-node multi-primary
// cluster (Galera on the MariaDB run, Group Replication on the MySQL run),
// directly and through one proxy per node (serve processes with the
// default configuration: roll-up every 10 s in front of a cluster; 48
// slots, 16 per node's part), with 24 clients spread over the nodes that
// retry certification failures as an application would:
//   - ac: autocommit UPDATE … SET downloads = downloads + 1;
//   - tx: BEGIN, an increment of stars, a read of the record's name, 2 ms
//     of work, COMMIT.
//
// It reports commits per second of each side, their ratio, and the
// certification failures clients saw per 1,000 commits; and, for tx, two
// anchors sent directly: the cluster's ceiling (the same transactions with
// every client on a record of its own: no contention, each transaction
// still commits through the cluster on its own) and the application
// slotted by hand (each client's increment an upsert of a slot row of its
// own, the record's base row read in share mode as the proxy reads it). Each phase runs
// SLOTPROXY_BENCH_SECONDS (default 10) seconds; b.N is not used (run it
// with -benchtime=1x, and -count for repetitions).
func BenchmarkCluster(b *testing.B) {
	seconds := 10
	if v := os.Getenv("SLOTPROXY_BENCH_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLOTPROXY_BENCH_SECONDS=%q", v)
		}
		seconds = n
	}
	c := startCluster(b)
	nodes := clusterProxies(b, c, "downloads, stars", "downloads, stars", 48, "") // serve's defaults
	direct := make([]*sql.DB, len(nodes))
	proxied := make([]*sql.DB, len(nodes))
	for i, n := range nodes {
		db, err := sql.Open("mysql", n.srv.DSN(testdb.User, testdb.Password, clusterSchema, "timeout=5s&readTimeout=30s&writeTimeout=30s"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(16)
		direct[i], proxied[i] = db, n.db
	}
	// Records of their own for the ceiling's clients.
	var own []string
	for i := range 24 {
		own = append(own, fmt.Sprintf("(%d, 'own')", 1000+i))
	}
	if _, err := direct[0].Exec("INSERT INTO repos (id, name) VALUES " + strings.Join(own, ", ")); err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second) // replicated everywhere before the phases start
	b.ResetTimer()
	for range b.N {
		for _, w := range []struct {
			name string
			run  func(db *sql.DB, client int) error
		}{
			{"ac", func(db *sql.DB, _ int) error {
				_, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")
				return err
			}},
			{"tx", func(db *sql.DB, _ int) error { return txIncrementWork(db, 1, 2*time.Millisecond) }},
		} {
			d := clusterLoad(b, direct, w.run, time.Duration(seconds)*time.Second)
			p := clusterLoad(b, proxied, w.run, time.Duration(seconds)*time.Second)
			b.ReportMetric(d.perSecond(), w.name+"-direct/s")
			b.ReportMetric(p.perSecond(), w.name+"-proxy/s")
			b.ReportMetric(p.perSecond()/d.perSecond(), w.name+"-ratio")
			b.ReportMetric(d.failuresPer1000(), w.name+"-direct-1213/1k")
			b.ReportMetric(p.failuresPer1000(), w.name+"-proxy-1213/1k")
			if w.name == "tx" {
				c := clusterLoad(b, direct, func(db *sql.DB, client int) error {
					return txIncrementWork(db, 1000+client, 2*time.Millisecond)
				}, time.Duration(seconds)*time.Second)
				b.ReportMetric(c.perSecond(), "tx-ceiling/s")
				b.ReportMetric(c.perSecond()/d.perSecond(), "tx-ceiling-ratio")
				h := clusterLoad(b, direct, func(db *sql.DB, client int) error {
					return txHandSlotted(db, client, 2*time.Millisecond)
				}, time.Duration(seconds)*time.Second)
				b.ReportMetric(h.perSecond(), "tx-handwritten/s")
				b.ReportMetric(p.perSecond()/h.perSecond(), "tx-proxy/handwritten")
			}
		}
	}
}

// loadResult is what clusterLoad counted.
type loadResult struct {
	commits, failures int64
	elapsed           time.Duration
}

func (r loadResult) perSecond() float64 { return float64(r.commits) / r.elapsed.Seconds() }

func (r loadResult) failuresPer1000() float64 {
	if r.commits == 0 {
		return 0
	}
	return 1000 * float64(r.failures) / float64(r.commits)
}

// clusterLoad runs 24 clients, spread over dbs, each running run until d
// has passed; a certification failure is counted and tried again, any
// other error fails the benchmark.
func clusterLoad(b *testing.B, dbs []*sql.DB, run func(db *sql.DB, client int) error, d time.Duration) loadResult {
	b.Helper()
	var (
		commits, failures atomic.Int64
		wg                sync.WaitGroup
		errs              = make(chan error, 24)
	)
	start := time.Now()
	deadline := start.Add(d)
	for i := range 24 {
		db := dbs[i%len(dbs)]
		client := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				err := run(db, client)
				switch {
				case err == nil:
					commits.Add(1)
				case certificationFailure(err):
					failures.Add(1)
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return loadResult{commits: commits.Load(), failures: failures.Load(), elapsed: time.Since(start)}
}

// txIncrementWork runs one transaction on record id: an increment of
// stars, a read of the record's name, work (a pause) and COMMIT.
func txIncrementWork(db *sql.DB, id int, work time.Duration) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(fmt.Sprintf("UPDATE repos SET stars = stars + 1 WHERE id = %d", id)); err != nil {
		return err
	}
	var name string
	if err := tx.QueryRow(fmt.Sprintf("SELECT name FROM repos WHERE id = %d", id)).Scan(&name); err != nil {
		return err
	}
	time.Sleep(work)
	return tx.Commit()
}

// handRecordType is the record type of the hand-slotted application's slot
// rows: no rule names it, so the proxies' roll-up leaves them alone.
const handRecordType = 999

// txHandSlotted is txIncrementWork written with slots by hand: the
// increment is an upsert of slot row client of record 1, reading the base
// row in share mode (no row, no slot).
func txHandSlotted(db *sql.DB, client int, work time.Duration) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(fmt.Sprintf("INSERT INTO slotted_counters (record_type, record_id, slot, count) "+
		"SELECT %d, id, %d, 1 FROM repos WHERE id = 1 LOCK IN SHARE MODE ON DUPLICATE KEY UPDATE count = count + 1", handRecordType, client)); err != nil {
		return err
	}
	var name string
	if err := tx.QueryRow("SELECT name FROM repos WHERE id = 1").Scan(&name); err != nil {
		return err
	}
	time.Sleep(work)
	return tx.Commit()
}
