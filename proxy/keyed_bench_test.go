package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// keyedIdioms are hot-tx increments of the survey's classes (records named
// by a key of several columns or a string, class F; other columns, touch
// columns, DECIMAL and SMALLINT counters), each with the read that checks
// its total.
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
	{"A other columns held (phpBB reply)",
		"UPDATE phpbb_topics SET topic_last_view_time = 1718000000, topic_bumped = 0, topic_bumper = 0, topic_posts_approved = topic_posts_approved + 1 WHERE topic_id = 1234",
		"SELECT topic_posts_approved FROM phpbb_topics WHERE topic_id = 1234", false},
	{"D+F GREATEST of BIGINT touch columns (Mattermost post)",
		"UPDATE Channels SET LastPostAt = GREATEST(1718000000123, LastPostAt), LastRootPostAt = GREATEST(1718000000123, LastRootPostAt), " +
			"TotalMsgCount = TotalMsgCount + 1, TotalMsgCountRoot = TotalMsgCountRoot + 1 WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'",
		"SELECT TotalMsgCount FROM Channels WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'", false},
	{"G DECIMAL counter (Magento stock)",
		"UPDATE cataloginventory_stock_item SET qty = qty - 1 WHERE item_id = 1",
		"SELECT CAST(99999999 - qty AS SIGNED) FROM cataloginventory_stock_item WHERE item_id = 1", false},
	{"G CASE of decrements by product (Magento stock correction)",
		"UPDATE `cataloginventory_stock_item` SET `qty` = CASE product_id WHEN 14 THEN qty-2 WHEN 27 THEN qty-1 ELSE qty END WHERE (product_id IN (14, 27)) AND (website_id = 0)",
		"SELECT CAST(99999999 - qty AS SIGNED) FROM cataloginventory_stock_item WHERE item_id = 2", false},
	{"F condition on an unindexed, non-unique column (OpenCart statistics, decimal literal)",
		"UPDATE `oc_statistics` SET `value` = (`value` + 129.99) WHERE `code` = 'order_sale'",
		"SELECT CAST(value / 129.99 AS SIGNED) FROM oc_statistics WHERE code = 'order_sale'", false},
	{"B+F SMALLINT counter, composite key (coupon usage)",
		"UPDATE salesrule_coupon_usage SET times_used = times_used + 1 WHERE coupon_id = 5 AND customer_id = 1001",
		"SELECT times_used FROM salesrule_coupon_usage WHERE coupon_id = 5 AND customer_id = 1001", false},
	{"C decrement while in stock (stock > 0)",
		"UPDATE stock SET stock = stock - 1 WHERE id = 1 AND stock > 0",
		"SELECT CAST(100000000 - stock AS SIGNED) FROM stock WHERE id = 1", false},
	{"B+F upsert leaving out an AUTO_INCREMENT key, in autocommit (Magento search popularity)",
		"INSERT INTO search_query (store_id, query_text, popularity) VALUES (1, 'red shoes', 1) ON DUPLICATE KEY UPDATE popularity = popularity + 1",
		"SELECT popularity FROM search_query WHERE query_text = 'red shoes' AND store_id = 1", true},
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
// SLOTPROXY_BENCH_SLOTS sets the rules' slot count (default 16).
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
	slots := "16"
	if v := os.Getenv("SLOTPROXY_BENCH_SLOTS"); v != "" {
		slots = v // the rules' slot count (default 16; a rule's default is 100)
	}
	cat := loadedSetup(b, plain, ruled, append(slices.Clone(keyedDDL),
		"CREATE TABLE phpbb_topics (topic_id INT UNSIGNED NOT NULL AUTO_INCREMENT, topic_last_view_time INT UNSIGNED NOT NULL DEFAULT 0, "+
			"topic_posts_approved INT UNSIGNED NOT NULL DEFAULT 0, topic_bumped TINYINT UNSIGNED NOT NULL DEFAULT 0, topic_bumper INT UNSIGNED NOT NULL DEFAULT 0, "+
			"PRIMARY KEY (topic_id)) ENGINE=InnoDB",
		"INSERT INTO phpbb_topics (topic_id) VALUES (1234)",
		"CREATE TABLE Channels (Id VARCHAR(26) NOT NULL, LastPostAt BIGINT, TotalMsgCount BIGINT, LastRootPostAt BIGINT DEFAULT 0, "+
			"TotalMsgCountRoot BIGINT, PRIMARY KEY (Id)) ENGINE=InnoDB",
		"INSERT INTO Channels VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 1718000000000, 0, 0, 0)",
		"CREATE TABLE cataloginventory_stock_item (item_id INT UNSIGNED NOT NULL AUTO_INCREMENT, product_id INT UNSIGNED NOT NULL DEFAULT 0, stock_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, "+
			"qty DECIMAL(12,4) DEFAULT NULL, website_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (item_id), "+
			"UNIQUE KEY CATALOGINVENTORY_STOCK_ITEM_PRODUCT_ID_STOCK_ID (product_id, stock_id), KEY CATALOGINVENTORY_STOCK_ITEM_WEBSITE_ID (website_id)) ENGINE=InnoDB",
		"INSERT INTO cataloginventory_stock_item (item_id, product_id, stock_id, qty, website_id) VALUES (1, 14, 1, 99999999.0000, 0), (2, 27, 1, 99999999.0000, 0), (3, 14, 2, 5, 1)",
		"CREATE TABLE oc_statistics (statistics_id INT NOT NULL AUTO_INCREMENT, code VARCHAR(64) NOT NULL, value DECIMAL(15,4) NOT NULL, PRIMARY KEY (statistics_id)) ENGINE=InnoDB",
		"INSERT INTO oc_statistics (code, value) VALUES ('order_sale', 0), ('order_processing', 0), ('order_complete', 0), ('order_other', 0)",
		"CREATE TABLE stock (id INT UNSIGNED NOT NULL PRIMARY KEY, stock INT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB",
		"INSERT INTO stock VALUES (1, 100000000)",
		"CREATE TABLE search_query (query_id INT UNSIGNED NOT NULL AUTO_INCREMENT, query_text VARCHAR(255) DEFAULT NULL, num_results INT UNSIGNED NOT NULL DEFAULT 0, "+
			"popularity INT UNSIGNED NOT NULL DEFAULT 0, store_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (query_id), "+
			"UNIQUE KEY SEARCH_QUERY_QUERY_TEXT_STORE_ID (query_text, store_id)) ENGINE=InnoDB",
		"INSERT INTO search_query (query_text, store_id) VALUES ('red shoes', 1)",
		"INSERT INTO wp_post_views VALUES (123, 4, 'total', 0), (123, 0, '20250115', 0), (123, 1, '202503', 0)",
		"INSERT INTO ChannelMembers (ChannelId, UserId, MsgCount, MentionCount, MentionCountRoot, LastUpdateAt) "+
			"SELECT 'other', CONCAT('u', seq), 0, 0, 0, seq FROM "+testdb.Seq(1000)),
		strings.ReplaceAll(strings.ReplaceAll(keyedRules+
			"---\ntable: %s.phpbb_topics\nkey: topic_id\ncounters: [topic_posts_approved]\ntouch: [topic_last_view_time]\nslots: 4\n"+
			"---\ntable: %s.Channels\nkey: Id\ncounters: [TotalMsgCount, TotalMsgCountRoot]\ntouch: [LastPostAt, LastRootPostAt]\nslots: 4\n"+
			"---\ntable: %s.cataloginventory_stock_item\nkey: item_id\ncounters: [qty]\nslots: 4\n"+
			"---\ntable: %s.oc_statistics\nkey: statistics_id\ncounters: [value]\nslots: 4\n"+
			"---\ntable: %s.stock\nkey: id\ncounters: [stock]\nslots: 4\n"+
			"---\ntable: %s.search_query\nkey: query_id\ncounters: [popularity]\nslots: 4\n", "slots: 4", "slots: "+slots), "%s", ruled))
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
		fmt.Printf("keyed hot-tx, %s, %d clients, %s slots: slotproxy/direct tx/s (statements/s in autocommit) by round: %s\n", idiom.name, clients, slots, strings.Join(ratios, ", "))
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
