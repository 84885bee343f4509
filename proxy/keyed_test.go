package proxy_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// keyedDDL are tables whose records are named by a key that is not one
// integer column (issue 22): a composite key of a string and an integer
// (Mattermost's ChannelMembers, given in reverse order by the application),
// a string key in a case-insensitive collation (knex's trending topics),
// a CHAR key in latin1 (phpBB's config, keyed by name), a composite
// integer key (OpenMage's coupon usage) and a composite key with a string
// (a post-views plugin's per-period rows, upserted).
var keyedDDL = []string{
	"CREATE TABLE ChannelMembers (ChannelId VARCHAR(26) NOT NULL, UserId VARCHAR(26) NOT NULL, MsgCount BIGINT, MentionCount BIGINT, " +
		"MentionCountRoot BIGINT, LastUpdateAt BIGINT, PRIMARY KEY (ChannelId, UserId)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
	"CREATE TABLE trending_topics (topic VARCHAR(64) NOT NULL, count INT NOT NULL DEFAULT 0, PRIMARY KEY (topic)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
	"CREATE TABLE config (config_name CHAR(32) CHARACTER SET latin1 NOT NULL, hits INT UNSIGNED NOT NULL DEFAULT 0, note VARCHAR(20), PRIMARY KEY (config_name)) ENGINE=InnoDB",
	"CREATE TABLE salesrule_coupon_usage (coupon_id INT UNSIGNED NOT NULL DEFAULT 0, customer_id INT UNSIGNED NOT NULL DEFAULT 0, " +
		"times_used SMALLINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (coupon_id, customer_id)) ENGINE=InnoDB",
	"CREATE TABLE wp_post_views (`id` BIGINT UNSIGNED NOT NULL, `type` TINYINT(1) UNSIGNED NOT NULL, `period` VARCHAR(8) NOT NULL, `count` BIGINT UNSIGNED NOT NULL, " +
		"PRIMARY KEY (type, period, id), UNIQUE INDEX id_type_period_count (id, type, period, count)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
	"INSERT INTO ChannelMembers VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 'u1x9w8y3ujtbpmyq1r6f9x3ab7', 0, 0, 0, 0), ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 'u2', 5, NULL, 1, 0), " +
		"('other', 'u1x9w8y3ujtbpmyq1r6f9x3ab7', 9, 9, 9, 0)",
	"INSERT INTO trending_topics VALUES ('mysql', 0), ('proxy', 10), ('Ünïcode', 1)",
	"INSERT INTO config VALUES ('num_posts', 0, NULL), ('num_topics', 4294967290, 'near max')",
	"INSERT INTO salesrule_coupon_usage VALUES (5, 1001, 0), (5, 1002, 65530)",
}

const keyedRules = "table: %s.ChannelMembers\nkey: [UserId, ChannelId]\ncounters: [MsgCount, MentionCount, MentionCountRoot]\nslots: 4\n" +
	"---\ntable: %s.trending_topics\nkey: topic\ncounters: [count]\nslots: 4\n" +
	"---\ntable: %s.config\nkey: config_name\ncounters: [hits]\nslots: 4\n" +
	"---\ntable: %s.salesrule_coupon_usage\nkey: [coupon_id, customer_id]\ncounters: [times_used]\nslots: 4\n" +
	"---\ntable: %s.wp_post_views\nkey: [id, type, period]\ncounters: [count]\nslots: 4\n"

// TestKeyedRecords: records named by a composite or string primary key are
// slotted (increments by the whole key, upserts of one row), and every
// statement answers as directly: reads of totals, absolute writes,
// deletes, key changes, upserts, transactions and their rollback, prepared
// statements, range errors, and the tables after a roll-up.
func TestKeyedRecords(t *testing.T) {
	const plain, ruled = "keyed_plain", "keyed_ruled"
	cat := loadedSetup(t, plain, ruled, keyedDDL, strings.ReplaceAll(keyedRules, "%s", ruled))
	mysql := !strings.Contains(strings.ToLower(testdb.Shared().Version), "mariadb")
	corpus := []step{
		// Mattermost: the composite key in reverse order, three counters
		// and a time.
		text("UPDATE ChannelMembers SET MentionCount = MentionCount + 1, MentionCountRoot = MentionCountRoot + 1 WHERE UserId = 'u1x9w8y3ujtbpmyq1r6f9x3ab7' AND ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("UPDATE ChannelMembers SET MsgCount = MsgCount + 3 WHERE ChannelId = 'KQ8W9Y3UJTBPMYQ1R6F9X3AB7E' AND UserId = 'U1X9W8Y3UJTBPMYQ1R6F9X3AB7'"),
		prep("UPDATE ChannelMembers SET MsgCount = MsgCount + ? WHERE ChannelId = ? AND UserId = ?", 2, "other", "u1x9w8y3ujtbpmyq1r6f9x3ab7"),
		// A NULL counter stays NULL; a missing record matches nothing.
		text("UPDATE ChannelMembers SET MentionCount = MentionCount + 1 WHERE ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e' AND UserId = 'u2'"),
		text("UPDATE ChannelMembers SET MsgCount = MsgCount + 1 WHERE ChannelId = 'nope' AND UserId = 'u2'"),
		text("SELECT * FROM ChannelMembers ORDER BY ChannelId, UserId"),
		text("SELECT ChannelId, SUM(MsgCount), MAX(MentionCount) FROM ChannelMembers GROUP BY ChannelId ORDER BY 1"),
		text("SELECT c.UserId, c.MsgCount + o.MsgCount FROM ChannelMembers c JOIN ChannelMembers o ON o.UserId = c.UserId AND o.ChannelId <> c.ChannelId ORDER BY 1"),
		// knex: a string key, an IN list, case-insensitively.
		text("update `trending_topics` set `count` = `count` + 1 where `topic` in ('mysql', 'PROXY', 'unicode', 'missing')"),
		text("UPDATE trending_topics SET count = count + 2 WHERE topic = 'ünïcode'"),
		text("SELECT * FROM trending_topics WHERE topic = 'Proxy'"),
		text("SELECT * FROM trending_topics ORDER BY topic"),
		// phpBB: a CHAR key in latin1, up to the UNSIGNED limit.
		text("UPDATE config SET hits = hits + 1 WHERE config_name = 'num_posts'"),
		text("UPDATE config SET hits = hits + 1 WHERE config_name = 'num_posts '"),
		text("UPDATE config SET hits = hits + 5 WHERE config_name = 'num_topics'"),
		text("UPDATE config SET hits = hits + 1 WHERE config_name = 'num_topics'"),
		text("SHOW WARNINGS"),
		text("UPDATE config SET hits = hits - 7 WHERE config_name = 'num_posts'"),
		text("SELECT config_name, hits, LENGTH(config_name) FROM config ORDER BY 1"),
		// OpenMage: a composite integer key, SMALLINT UNSIGNED near its
		// limit, and an upsert of one row (slotted when the row exists).
		text("INSERT INTO `salesrule_coupon_usage` (`coupon_id`,`customer_id`,`times_used`) VALUES (5, 1001, 1) ON DUPLICATE KEY UPDATE `times_used` = times_used + 1"),
		text("INSERT INTO `salesrule_coupon_usage` (`coupon_id`,`customer_id`,`times_used`) VALUES (5, 1003, 1) ON DUPLICATE KEY UPDATE `times_used` = times_used + 1"),
		text("INSERT INTO `salesrule_coupon_usage` (`coupon_id`,`customer_id`,`times_used`) VALUES (5, 1003, 1) ON DUPLICATE KEY UPDATE `times_used` = times_used + 1"),
		text("UPDATE salesrule_coupon_usage SET times_used = times_used + 10 WHERE coupon_id = 5 AND customer_id = 1002"),
		text("SELECT * FROM salesrule_coupon_usage ORDER BY 1, 2"),
		// The post-views plugin: an upsert per period, then a flush of
		// several rows at once.
		text("INSERT INTO wp_post_views (`id`, `type`, `period`, `count`) VALUES (123, 4, 'total', 1) ON DUPLICATE KEY UPDATE count = count + 1"),
		text("INSERT INTO wp_post_views (`id`, `type`, `period`, `count`) VALUES (123, 4, 'total', 1) ON DUPLICATE KEY UPDATE count = count + 1"),
		text("INSERT INTO wp_post_views (`id`, `type`, `period`, `count`) VALUES (123, 4, \"total\", 1) ON DUPLICATE KEY UPDATE count = count + 1"),
		text("INSERT INTO wp_post_views (id, type, period, count) VALUES (123, 0, '20250115', 3), (123, 4, 'total', 3) ON DUPLICATE KEY UPDATE count = count + VALUES(count)"),
		// Prepared (Go, Node and mysqli send parameters): guarded writes.
		prep("INSERT INTO wp_post_views (id, type, period, count) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE count = count + ?", 123, 4, "total", 1, 5),
		prep("INSERT INTO wp_post_views (id, type, period, count) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE count = count + ?", 124, 4, "total", 1, 5),
		prep("INSERT INTO wp_post_views (id, type, period, count) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE count = count + ?", 124, 4, "total", 1, 5),
		prep("INSERT INTO wp_post_views (id, type, period, count) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE count = count + VALUES(count)", 124, 4, "it's", 1),
		prep("INSERT INTO wp_post_views (id, type, period, count) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE count = count + ?", 124, 4, "total", nil, 1),
		text("SELECT * FROM wp_post_views ORDER BY type, period"),
		// Absolute writes, a key change, deletes and a re-insert of a
		// slotted record.
		text("UPDATE ChannelMembers SET MsgCount = 100 WHERE ChannelId = 'other' AND UserId = 'u1x9w8y3ujtbpmyq1r6f9x3ab7'"),
		text("UPDATE trending_topics SET count = count + 1 WHERE topic = 'mysql'"),
		text("UPDATE trending_topics SET topic = 'MySQL!' WHERE topic = 'mysql'"),
		text("SELECT * FROM trending_topics ORDER BY topic"),
		text("DELETE FROM trending_topics WHERE topic = 'proxy'"),
		text("INSERT INTO trending_topics VALUES ('proxy', 0)"),
		text("SELECT * FROM trending_topics ORDER BY topic"),
		text("DELETE FROM config WHERE hits > 100"),
		text("SELECT * FROM config"),
		// A transaction: increment, read, roll back; increment, commit.
		text("BEGIN"),
		text("UPDATE salesrule_coupon_usage SET times_used = times_used + 1 WHERE customer_id = 1001 AND coupon_id = 5"),
		text("SELECT times_used FROM salesrule_coupon_usage WHERE coupon_id = 5 AND customer_id = 1001"),
		text("ROLLBACK"),
		text("BEGIN"),
		text("UPDATE ChannelMembers SET MsgCount = MsgCount + 1 WHERE UserId = 'u2' AND ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("UPDATE ChannelMembers SET MsgCount = MsgCount + 1 WHERE UserId = 'u2' AND ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("SELECT MsgCount FROM ChannelMembers WHERE UserId = 'u2'"),
		text("COMMIT"),
		text("SELECT * FROM ChannelMembers ORDER BY ChannelId, UserId"),
		text(touchRollup),
		text("SELECT * FROM ChannelMembers ORDER BY ChannelId, UserId"),
		text("SELECT * FROM trending_topics ORDER BY topic"),
		text("SELECT * FROM salesrule_coupon_usage ORDER BY 1, 2"),
		text("SELECT * FROM wp_post_views ORDER BY type, period"),
		// (SMALLINT: slotted too, within its slot's share.)
		text("UPDATE salesrule_coupon_usage SET times_used = times_used + 1 WHERE coupon_id = 5 AND customer_id = 1003"),
		text("SELECT * FROM salesrule_coupon_usage ORDER BY 1, 2"),
		text("UPDATE ChannelMembers SET MsgCount = MsgCount + 1 WHERE ChannelId = 'other' AND UserId = 'u1x9w8y3ujtbpmyq1r6f9x3ab7'"),
		text("SELECT * FROM ChannelMembers ORDER BY ChannelId, UserId"),
	}
	if mysql {
		corpus = append(corpus,
			text("INSERT INTO wp_post_views (id, type, period, count) VALUES (123, 4, 'total', 1) AS new ON DUPLICATE KEY UPDATE count = count + new.count"),
			text("SELECT * FROM wp_post_views ORDER BY type, period"))
	}
	st, folded := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d, folded by roll-up %d", st.RewrittenWrites, st.GuardedWrites, folded)
	if st.RewrittenWrites < 15 {
		t.Errorf("%d increments slotted, want at least 15: records of composite and string keys are not slotted", st.RewrittenWrites)
	}
	if folded == 0 {
		t.Error("roll-up folded no keyed record")
	}
	// Nothing left to fold but what the last two increments slotted: the
	// totals above came from the slot rows the roll-up folded.
	r, err := touchAdmin(t).Execute("SELECT COUNT(*) FROM " + ruled + ".slotted_counters_keyed WHERE count <> 0")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.GetInt(0, 0); n != 2 {
		t.Errorf("%d keyed slot rows hold counts after the roll-up and two increments, want 2", n)
	}
}

// TestKeyedHandOuts is issue 22's hand-out on a key of several strings,
// as Zabbix reserves blocks of ids: 4 clients × 5 transactions, each BEGIN;
// update ids set nextid=nextid+5 where table_name=? and field_name=?;
// select nextid …; COMMIT. Directly all 20 commit with distinct values
// (each waits for the one before); through the proxy too, with text and
// prepared statements, and the total is exact.
func TestKeyedHandOuts(t *testing.T) {
	for _, params := range []string{"", "interpolateParams=true"} {
		name := "prepared"
		if params != "" {
			name = "text"
		}
		t.Run(name, func(t *testing.T) {
			const plain, ruled = "kho_plain", "kho_ruled"
			cat := loadedSetup(t, plain, ruled, []string{
				"CREATE TABLE ids (table_name VARCHAR(64) DEFAULT '' NOT NULL, field_name VARCHAR(64) DEFAULT '' NOT NULL, nextid BIGINT UNSIGNED NOT NULL, " +
					"PRIMARY KEY (table_name, field_name)) ENGINE=InnoDB",
				"INSERT INTO ids VALUES ('items', 'itemid', 100000), ('hosts', 'hostid', 7)",
			}, "table: "+ruled+".ids\nkey: [table_name, field_name]\ncounters: [nextid]\nslots: 16\n")
			p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
			reserve := func(db *sql.DB) (int64, error) {
				ctx := context.Background()
				conn, err := db.Conn(ctx)
				if err != nil {
					return 0, err
				}
				defer conn.Close()
				if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
					return 0, err
				}
				var v int64
				_, err = conn.ExecContext(ctx, "update ids set nextid=nextid+5 where table_name=? and field_name=?", "items", "itemid")
				if err == nil {
					err = conn.QueryRowContext(ctx, "select nextid from ids where table_name=? and field_name=?", "items", "itemid").Scan(&v)
				}
				if err != nil {
					_, _ = conn.ExecContext(ctx, "ROLLBACK")
					return 0, err
				}
				_, err = conn.ExecContext(ctx, "COMMIT")
				return v, err
			}
			direct := openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, plain, params))
			proxied := openDSN(t, p.dsn(testdb.User, testdb.Password, ruled, params))
			for _, side := range []struct {
				name string
				db   *sql.DB
			}{{"direct", direct}, {"proxy", proxied}} {
				values := concurrentHandOuts(t, side.name, side.db, reserve)
				var total, other int64
				if err := side.db.QueryRow("SELECT (SELECT nextid FROM ids WHERE table_name = 'items'), (SELECT nextid FROM ids WHERE table_name = 'hosts')").Scan(&total, &other); err != nil {
					t.Fatal(err)
				}
				if want := 100000 + 5*int64(len(values)); total != want || other != 7 {
					t.Errorf("%s: nextid %d and %d after %d reservations, want %d and 7", side.name, total, other, len(values), want)
				}
			}
		})
	}
}

// TestKeyedCoalescedIncrements: 16 clients send autocommit increments of
// one channel's message count (a string key, as Mattermost counts posts),
// directly and through a proxy: each gets 1 affected row, the totals are
// exact, and the proxy sent them in batches, as for an integer key.
func TestKeyedCoalescedIncrements(t *testing.T) {
	const plain, ruled = "kco_plain", "kco_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE Channels (Id VARCHAR(26) NOT NULL, TotalMsgCount BIGINT, PRIMARY KEY (Id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
		"INSERT INTO Channels VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 5), ('town-square', 0)",
	}, "table: "+ruled+".Channels\nkey: Id\ncounters: [TotalMsgCount]\nslots: 16\n")
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	const clients, each = 16, 60
	for _, side := range []struct {
		name string
		db   *sql.DB
	}{
		{"direct", openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, plain, ""))},
		{"proxy", openDSN(t, p.dsn(testdb.User, testdb.Password, ruled, ""))},
	} {
		side.db.SetMaxOpenConns(clients)
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for w := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					q := "UPDATE Channels SET TotalMsgCount = TotalMsgCount + 1 WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"
					if (w+i)%7 == 0 {
						q = "UPDATE Channels SET TotalMsgCount = TotalMsgCount + 2 WHERE Id = 'town-square'"
					}
					res, err := side.db.Exec(q)
					if err != nil {
						errs <- err
						return
					}
					if n, _ := res.RowsAffected(); n != 1 {
						errs <- fmt.Errorf("%s: %d affected rows, want 1", q, n)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", side.name, err)
		}
		var hot, other int64
		if err := side.db.QueryRow("SELECT (SELECT TotalMsgCount FROM Channels WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'), (SELECT TotalMsgCount FROM Channels WHERE Id = 'town-square')").Scan(&hot, &other); err != nil {
			t.Fatal(err)
		}
		n2 := 0
		for w := range clients {
			for i := range each {
				if (w+i)%7 == 0 {
					n2++
				}
			}
		}
		if want1, want2 := int64(5+clients*each-n2), int64(2*n2); hot != want1 || other != want2 {
			t.Errorf("%s: totals %d and %d, want %d and %d", side.name, hot, other, want1, want2)
		}
	}
	st := p.srv.Stats()
	if st.Batches == 0 {
		t.Fatalf("no increments of the keyed record were coalesced: %+v", st)
	}
	t.Logf("%d of %d increments sent in %d batches", st.Coalesced, clients*each, st.Batches)
}

// TestKeyedTemplatedGuard: statements of one shape that differ in their
// integers share one plan (a template); the guard of such an increment of
// a record of a key with an integer column must lock and fold the record
// its own values name: here the second record's increment beyond its
// slot's share runs on the base row, and its slots are folded first.
func TestKeyedTemplatedGuard(t *testing.T) {
	const plain, ruled = "ktpl_plain", "ktpl_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE kt (g VARCHAR(5) NOT NULL, n INT NOT NULL, c INT NOT NULL DEFAULT 0, PRIMARY KEY (g, n))",
		"INSERT INTO kt VALUES ('a', 1, 0), ('a', 2, 0)",
	}, "table: "+ruled+".kt\nkey: [g, n]\ncounters: [c]\nslots: 1\n")
	st, _ := runDifferential(t, cat, plain, ruled, []step{
		text("UPDATE kt SET c = c + 5 WHERE g = 'a' AND n = 1"),
		text("UPDATE kt SET c = c + 7 WHERE g = 'a' AND n = 2"),
		text("UPDATE kt SET c = c + 300000000 WHERE g = 'a' AND n = 2"),
		text("SELECT * FROM kt ORDER BY n"),
	})
	if st.RewrittenWrites < 2 {
		t.Errorf("%d increments slotted, want 2", st.RewrittenWrites)
	}
	r, err := touchAdmin(t).Execute("SELECT record_id, count FROM " + ruled + ".slotted_counters_keyed WHERE count <> 0 ORDER BY record_id")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for i := range r.Values {
		id, _ := r.GetString(i, 0)
		n, _ := r.GetString(i, 1)
		left = append(left, id+"="+n)
	}
	if got := strings.Join(left, " "); got != "61,1=5" {
		t.Errorf("slot rows with counts: %s; want only record ('a', 1)'s 5 (record ('a', 2)'s folded before its increment ran on the base row)", got)
	}
}
