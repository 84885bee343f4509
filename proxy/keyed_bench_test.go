package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// keyedIdioms are hot-tx increments of records named by a key of several
// columns or a string (class F of the survey), each with the read that
// checks its total.
var keyedIdioms = []struct {
	name, increment, total string
	// autocommit: the increment alone, no transaction (as the plugin
	// flushes its counts).
	autocommit bool
}{
	{"F composite string key (Mattermost)",
		"UPDATE ChannelMembers SET MentionCount = MentionCount + 1 WHERE UserId = 'u1x9w8y3ujtbpmyq1r6f9x3ab7' AND ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'",
		"SELECT MentionCount FROM ChannelMembers WHERE UserId = 'u1x9w8y3ujtbpmyq1r6f9x3ab7' AND ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'", false},
	{"B+F upsert, composite key (post views)",
		"INSERT INTO wp_post_views (`id`, `type`, `period`, `count`) VALUES (123, 4, 'total', 1) ON DUPLICATE KEY UPDATE count = count + 1",
		"SELECT `count` FROM wp_post_views WHERE id = 123 AND type = 4 AND period = 'total'", false},
	{"A/D+F string key (knex increment)",
		"update `trending_topics` set `count` = `count` + 1 where `topic` = 'mysql'",
		"SELECT `count` FROM trending_topics WHERE topic = 'mysql'", false},
	{"B+D upsert of three rows in autocommit (post views flush)",
		"INSERT INTO wp_post_views (id, type, period, count) VALUES (123, 0, '20250115', 1), (123, 1, '202503', 1), (123, 4, 'total', 1) " +
			"ON DUPLICATE KEY UPDATE count = count + VALUES(count)",
		"SELECT SUM(count) DIV 3 FROM wp_post_views WHERE id = 123 AND type IN (0, 1, 4)", true},
}

// BenchmarkKeyedHotTx is issue 22's contention figure for records named
// by a key of several columns or a string: 32 clients, each transaction
// BEGIN, the increment of one hot record, a read of another row's other
// column, 2 ms of work, COMMIT (slotbench's hot-tx), directly and through
// a proxy with 16 slots, in rounds of SLOTPROXY_BENCH_SECONDS (default 5)
// alternating the two, 3 rounds. It reports the proxy's tx/s over
// direct's for each round and checks that every committed increment is
// counted. b.N is not used: run it with -benchtime 1x.
// SLOTPROXY_BENCH_IDIOM=TEXT runs the idioms whose names contain TEXT.
func BenchmarkKeyedHotTx(b *testing.B) {
	secs := 5 * time.Second
	if v := os.Getenv("SLOTPROXY_BENCH_SECONDS"); v != "" {
		d, err := time.ParseDuration(v + "s")
		if err != nil {
			b.Fatalf("SLOTPROXY_BENCH_SECONDS=%q", v)
		}
		secs = d
	}
	const plain, ruled, clients, rounds = "kbench_plain", "kbench_ruled", 32, 3
	cat := loadedSetup(b, plain, ruled, append(keyedDDL,
		"INSERT INTO wp_post_views VALUES (123, 4, 'total', 0), (123, 0, '20250115', 0), (123, 1, '202503', 0)",
		"INSERT INTO ChannelMembers (ChannelId, UserId, MsgCount, MentionCount, MentionCountRoot, LastUpdateAt) "+
			"SELECT 'other', CONCAT('u', seq), 0, 0, 0, seq FROM "+testdb.Seq(1000)),
		strings.ReplaceAll(strings.ReplaceAll(keyedRules, "slots: 4", "slots: 16"), "%s", ruled))
	p := startProxy(b, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	targets := []struct {
		name string
		db   *sql.DB
	}{
		{"direct", openDSN(b, testdb.Shared().DSN(testdb.User, testdb.Password, plain, ""))},
		{"slotproxy", openDSN(b, p.dsn(testdb.User, testdb.Password, ruled, ""))},
	}
	only := os.Getenv("SLOTPROXY_BENCH_IDIOM") // a part of an idiom's name: that one alone
	for _, idiom := range keyedIdioms {
		if only != "" && !strings.Contains(idiom.name, only) {
			continue
		}
		var ratios []string
		for round := range rounds {
			rates := map[string]float64{}
			for _, tg := range targets {
				tg.db.SetMaxOpenConns(clients)
				tg.db.SetMaxIdleConns(clients)
				var before int64
				if err := tg.db.QueryRow(idiom.total).Scan(&before); err != nil {
					b.Fatal(err)
				}
				var committed, failed atomic.Int64
				var wg sync.WaitGroup
				stop := time.Now().Add(secs)
				for c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx := context.Background()
						conn, err := tg.db.Conn(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						defer conn.Close()
						for i := 0; time.Now().Before(stop); i++ {
							var err error
							if idiom.autocommit {
								_, err = conn.ExecContext(ctx, idiom.increment)
							} else {
								err = keyedHotTx(ctx, conn, idiom.increment, fmt.Sprintf("u%d", 1+(c*131+i)%1000))
							}
							var me *mysql.MySQLError
							switch {
							case err == nil:
								committed.Add(1)
							case errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205):
								failed.Add(1)
							default:
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				var after int64
				if err := tg.db.QueryRow(idiom.total).Scan(&after); err != nil {
					b.Fatal(err)
				}
				if after-before != committed.Load() {
					b.Errorf("%s, %s: the total moved by %d after %d committed increments", idiom.name, tg.name, after-before, committed.Load())
				}
				rates[tg.name] = float64(committed.Load()) / secs.Seconds()
				b.Logf("%s round %d %s: %.0f tx/s, %d deadlocks or lock wait timeouts", idiom.name, round+1, tg.name, rates[tg.name], failed.Load())
			}
			ratios = append(ratios, fmt.Sprintf("%.0f/%.0f = %.2f×", rates["slotproxy"], rates["direct"], rates["slotproxy"]/rates["direct"]))
		}
		// Printed, not logged: a benchmark's log shows only with -v.
		fmt.Printf("keyed hot-tx, %s, %d clients: slotproxy/direct tx/s (statements/s in autocommit) by round: %s\n", idiom.name, clients, strings.Join(ratios, ", "))
	}
	st := p.srv.Stats()
	b.ReportMetric(float64(st.RewrittenWrites), "slotted")
}

// keyedHotTx runs one hot-tx transaction with increment, reading the
// other column of member user's row of channel 'other'.
func keyedHotTx(ctx context.Context, conn *sql.Conn, increment, user string) error {
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	var v int64
	_, err := conn.ExecContext(ctx, increment)
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT LastUpdateAt FROM ChannelMembers WHERE ChannelId = 'other' AND UserId = ?", user).Scan(&v)
	}
	if err == nil {
		time.Sleep(2 * time.Millisecond)
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
	}
	return err
}
