package clients

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// The hot-counter workload through an ORM, directly and through the proxy.
const (
	ormBenchWorkers = 16
	ormBenchWorkMS  = 2
	// ormBenchMinTx is the fewest transactions one run makes, unless
	// SLOTPROXY_ORM_BENCH_TX says otherwise; b.N when it is larger. A run
	// starts a program (and its ORM), so -benchtime 1x measures this many
	// transactions in one run.
	ormBenchMinTx = 2000
)

// ormBenchTx is how many transactions a run of b makes.
func ormBenchTx(b *testing.B) int {
	n := ormBenchMinTx
	if v := os.Getenv("SLOTPROXY_ORM_BENCH_TX"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SLOTPROXY_ORM_BENCH_TX=%q: want a positive number of transactions", v)
		}
	}
	return max(b.N, n)
}

// BenchmarkORMHotCounter runs the hot-counter workload with Django and
// Sequelize: ormBenchWorkers workers, each transaction an increment of repo
// 1 and ormBenchWorkMS of simulated work before COMMIT, directly on the
// server and through a proxy that rules the counter. Spelling "orm" is the
// ORM's own increment (Django: filter(pk=1).update(downloads=F(...)+1);
// Sequelize: Model.increment() on a model with timestamps), "raw" the
// textbook UPDATE on the ORM's connection. It reports tx/s (timed by the
// program, connections opened first), slotted/tx (the proxy's rewritten
// writes per transaction) and prints the speed-up. Run it with make
// bench-orm.
func BenchmarkORMHotCounter(b *testing.B) {
	for _, c := range []ormClient{djangoORM, sequelizeORM} {
		for _, spelling := range []string{"orm", "raw"} {
			rates := map[string]float64{}
			for _, target := range []string{"direct", "proxy"} {
				b.Run(c.name+"/"+spelling+"/"+target, func(b *testing.B) {
					rates[target] = ormBench(b, c, spelling, target == "proxy")
				})
			}
			if rates["direct"] > 0 && rates["proxy"] > 0 {
				// Printed, not logged: a benchmark's log shows only with -v.
				fmt.Printf("speed-up: %s, %s increment, %d workers, %d ms of work per transaction: %.0f tx/s directly, %.0f tx/s through the proxy (%.2f×)\n",
					c.name, spelling, ormBenchWorkers, ormBenchWorkMS, rates["direct"], rates["proxy"], rates["proxy"]/rates["direct"])
			}
		}
	}
}

// ormBench runs one measurement and returns its tx/s.
func ormBench(b *testing.B, c ormClient, spelling string, proxied bool) float64 {
	c.require(b)
	e := newORMEnv(b, false)
	addr := testdb.Shared().Addr
	if proxied {
		addr = e.addr
	}
	before := readRepos(b, e.db)[1]
	tx := ormBenchTx(b)
	res := runClient(context.Background(), clientCmd{
		argv: c.argv(b),
		env: ormProgramEnv(addr, e.schema, "SP_MODE=bench", "SP_BENCH_SPELLING="+spelling,
			"SP_WORKERS="+strconv.Itoa(ormBenchWorkers), "SP_WORK_MS="+strconv.Itoa(ormBenchWorkMS),
			"SP_BENCH_TX="+strconv.Itoa(tx)),
		dir: testdataPath(b, "orm", c.name),
	})
	if res.err != nil || res.killed != nil {
		b.Fatalf("%s %s\nstderr:\n%s\nstdout:\n%s", c.what, res.describe(), tail(res.stderr, 40), tail(res.stdout, 20))
	}
	var n, retries int
	var secs float64
	if _, err := fmt.Sscanf(strings.TrimSpace(res.stdout), "bench %d %f %d", &n, &secs, &retries); err != nil || n != tx || secs <= 0 {
		b.Fatalf("%s printed %q, want \"bench %d SECONDS RETRIES\" (%v)", c.what, res.stdout, tx, err)
	}
	after := readRepos(b, e.db)[1]
	if got, want := after.base["downloads"]+after.slots["downloads"], before.base["downloads"]+before.slots["downloads"]+int64(tx); got != want {
		b.Errorf("downloads of repo 1 is %d after %d increments, want %d", got, tx, want)
	}
	rate := float64(tx) / secs
	b.ReportMetric(rate, "tx/s")
	b.ReportMetric(secs*1e9/float64(tx), "ns/op")
	b.ReportMetric(float64(retries), "retries")
	if proxied {
		b.ReportMetric(float64(e.srv.Stats().RewrittenWrites)/float64(tx), "slotted/tx")
	}
	return rate
}
