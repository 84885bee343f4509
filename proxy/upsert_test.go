package proxy_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestUpsertIncrements: issue 22's upsert increments (INSERT … VALUES …
// ON DUPLICATE KEY UPDATE c = c + n, c = c + VALUES(c), several counters)
// are slotted when the row's record exists, answered as the upsert that
// updated the row (2 affected rows, the key as insert id when it is
// AUTO_INCREMENT), and insert the row as written when it does not; where
// the slot cannot take the delta (beyond its share of the range, a NULL
// counter) or the row the server builds could fail (a string value, a
// column left out that has no default), the upsert runs on the base row,
// folded first. The server is the oracle for every answer.
func TestUpsertIncrements(t *testing.T) {
	const plain, ruled = "upsertinc_plain", "upsertinc_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		// MediaWiki's site_stats (its counters nullable BIGINT UNSIGNED).
		"CREATE TABLE site_stats (ss_row_id INT UNSIGNED NOT NULL PRIMARY KEY, ss_total_edits BIGINT UNSIGNED DEFAULT 0, " +
			"ss_good_articles BIGINT UNSIGNED DEFAULT 0, ss_total_pages BIGINT UNSIGNED DEFAULT 0, ss_users BIGINT UNSIGNED DEFAULT 0, ss_images BIGINT UNSIGNED DEFAULT 0)",
		// Invoice numbering (an upsert then a read).
		"CREATE TABLE invoice_counters (`year` INT NOT NULL PRIMARY KEY, counter INT NOT NULL)",
		"INSERT INTO invoice_counters VALUES (2024, 41)",
		// An AUTO_INCREMENT key, a CHECK bound, a required column, a
		// nullable UNIQUE name.
		"CREATE TABLE hits (id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, n SMALLINT NOT NULL DEFAULT 0, m INT NULL, " +
			"tag VARCHAR(10) NOT NULL, name VARCHAR(10) NULL, UNIQUE KEY (name), CONSTRAINT chk_n CHECK (n <= 30000))",
		"INSERT INTO hits (id, n, m, tag, name) VALUES (1, 5, NULL, 'a', 'one'), (2, 29990, 7, 'b', NULL)",
	}, "table: "+ruled+".site_stats\nkey: ss_row_id\ncounters: [ss_total_edits, ss_good_articles, ss_total_pages]\nslots: 4\n---\n"+
		"table: "+ruled+".invoice_counters\nkey: year\ncounters: [counter]\nslots: 4\n---\n"+
		"table: "+ruled+".hits\nkey: id\ncounters: [n, m]\nslots: 4\n")
	corpus := []step{
		// The first one inserts the row; the next ones increment it.
		text("INSERT INTO `site_stats` (ss_row_id,ss_total_edits,ss_total_pages,ss_good_articles,ss_users,ss_images) VALUES (1,1,1,1,0,0) " +
			"ON DUPLICATE KEY UPDATE ss_total_edits=GREATEST(`ss_total_edits`+1,0),ss_total_pages=GREATEST(`ss_total_pages`+1,0),ss_good_articles=GREATEST(`ss_good_articles`+1,0)"),
		text("INSERT INTO `site_stats` (ss_row_id,ss_total_edits,ss_total_pages,ss_good_articles,ss_users,ss_images) VALUES (1,1,1,1,0,0) " +
			"ON DUPLICATE KEY UPDATE ss_total_edits=GREATEST(`ss_total_edits`+1,0),ss_total_pages=GREATEST(`ss_total_pages`+1,0),ss_good_articles=GREATEST(`ss_good_articles`+1,0)"),
		text("INSERT INTO site_stats (ss_row_id, ss_total_edits, ss_good_articles) VALUES (1, 5, 2) " +
			"ON DUPLICATE KEY UPDATE ss_total_edits = ss_total_edits + VALUES(ss_total_edits), ss_good_articles = ss_good_articles - 1"),
		text("SHOW WARNINGS"),
		text("SELECT * FROM site_stats"),
		// Numbering: an upsert, then a read, in a transaction.
		text("BEGIN"),
		text("INSERT INTO invoice_counters (`year`, `counter`) VALUES (2024, 1) ON DUPLICATE KEY UPDATE `counter` = `counter` + 1"),
		text("SELECT counter FROM invoice_counters WHERE `year` = 2024"),
		text("COMMIT"),
		text("BEGIN"),
		text("INSERT INTO invoice_counters (`year`, `counter`) VALUES (2025, 1) ON DUPLICATE KEY UPDATE `counter` = `counter` + 1"),
		text("INSERT INTO invoice_counters (`year`, `counter`) VALUES (2025, 1) ON DUPLICATE KEY UPDATE `counter` = `counter` + 1"),
		text("SELECT counter FROM invoice_counters WHERE `year` = 2025"),
		text("ROLLBACK"),
		text("SELECT * FROM invoice_counters ORDER BY `year`"),
		// AUTO_INCREMENT key: the insert id of an upsert that updated is
		// the key; a required column must be named (else 1364 even when
		// the row exists); a value out of its column's range fails as
		// directly; a nullable UNIQUE column left out cannot conflict.
		text("INSERT INTO hits (id, tag, n) VALUES (1, 'x', 1) ON DUPLICATE KEY UPDATE n = n + 1"),
		text("INSERT INTO hits (id, n) VALUES (1, 1) ON DUPLICATE KEY UPDATE n = n + 1"),
		text("SHOW WARNINGS"),
		text("INSERT INTO hits (id, n, tag) VALUES (1, 40000, 'x') ON DUPLICATE KEY UPDATE n = n + 1"),
		text("INSERT INTO hits (id, n, tag) VALUES (1, 1, 'x') ON DUPLICATE KEY UPDATE n = n + 3"),
		text("SELECT LAST_INSERT_ID()"),
		text("INSERT INTO hits (id, n, tag) VALUES (7, 1, 'x') ON DUPLICATE KEY UPDATE n = n + 3"),
		text("INSERT INTO hits (id, n, tag, name) VALUES (1, 1, 'x', 'one') ON DUPLICATE KEY UPDATE n = n + 1"),
		// Beyond the slot's share of the range (a total past the CHECK
		// bound fails as directly), and a NULL counter (stays NULL).
		text("INSERT INTO hits (id, n, tag) VALUES (2, 1, 'x') ON DUPLICATE KEY UPDATE n = n + 5"),
		text("INSERT INTO hits (id, n, tag) VALUES (2, 1, 'x') ON DUPLICATE KEY UPDATE n = n + 20"),
		text("INSERT INTO hits (id, n, tag) VALUES (1, 1, 'x') ON DUPLICATE KEY UPDATE m = m + 1"),
		text("INSERT INTO hits (id, n, tag) VALUES (2, 1, 'x') ON DUPLICATE KEY UPDATE m = m + VALUES(n)"),
		// Prepared: exact on the base row.
		prep("INSERT INTO hits (id, n, tag) VALUES (?, 1, 'x') ON DUPLICATE KEY UPDATE n = n + ?", 1, 2),
		text("SELECT id, n, m, tag, name FROM hits ORDER BY id"),
		text(touchRollup),
		text("SELECT * FROM hits ORDER BY id"),
		text("SELECT * FROM site_stats"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	// Slotted: the site_stats upserts of an existing row (2), the
	// invoice numbers' of existing rows (2), the hits ones of m, an INT
	// (2). Those of hits.n, a SMALLINT whose range no slot can take a
	// share of, run on the base row at once.
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 6 {
		t.Errorf("%d upserts slotted, want at least 6 (stats %+v)", st.RewrittenWrites, st)
	}
}

// TestUpsertRowAlias: MySQL's row alias (INSERT … VALUES (…) AS new
// [(columns)] ON DUPLICATE KEY UPDATE, as Laravel's query builder writes
// upserts) with increments by literals or by the alias's values: slotted
// on MySQL when the row exists, inserted as written when it does not, and
// guarded where the update names an alias column unqualified. On MariaDB,
// which has no row alias, every one fails as directly.
func TestUpsertRowAlias(t *testing.T) {
	const plain, ruled = "upsertalias_plain", "upsertalias_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE posts (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, view_count INT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO posts VALUES (7, 10)",
	}, "table: "+ruled+".posts\nkey: id\ncounters: [view_count]\nslots: 4\n")
	corpus := []step{
		// Unqualified, the counter is ambiguous (1052): the alias has
		// every column of the table.
		text("insert into `posts` (`id`, `view_count`) values (7, 1) as laravel_upsert_alias on duplicate key update `view_count` = view_count + 1"),
		text("SHOW WARNINGS"),
		text("insert into `posts` (`id`, `view_count`) values (7, 1) as laravel_upsert_alias on duplicate key update `view_count` = `posts`.`view_count` + 1"),
		text("SELECT LAST_INSERT_ID()"),
		text("insert into `posts` (`id`, `view_count`) values (8, 1) as laravel_upsert_alias on duplicate key update `view_count` = posts.view_count + 1"),
		text("INSERT INTO posts (id, view_count) VALUES (7, 5) AS new ON DUPLICATE KEY UPDATE view_count = posts.view_count + new.view_count"),
		text("SHOW WARNINGS"),
		text("INSERT INTO posts (id, view_count) VALUES (7, 3) AS new (i, v) ON DUPLICATE KEY UPDATE view_count = view_count + new.v"),
		text("INSERT INTO posts (id, view_count) VALUES (7, 2) AS new (i, v) ON DUPLICATE KEY UPDATE view_count = view_count + v"),
		text("INSERT INTO posts (id, view_count) VALUES (8, 2) AS New ON DUPLICATE KEY UPDATE view_count = posts.view_count + new.view_count"),
		text("BEGIN"),
		text("INSERT INTO posts (id, view_count) VALUES (7, 1) AS new ON DUPLICATE KEY UPDATE view_count = posts.view_count + new.view_count"),
		text("SELECT view_count FROM posts WHERE id = 7"),
		text("ROLLBACK"),
		text("SELECT * FROM posts ORDER BY id"),
		text(touchRollup),
		text("SELECT * FROM posts ORDER BY id"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if testdb.Shared().IsMySQL() && st.RewrittenWrites < 3 {
		t.Errorf("%d upserts with a row alias slotted on MySQL, want at least 3 (stats %+v)", st.RewrittenWrites, st)
	}
}

// TestConcurrentFirstUpserts: clients upserting one new key at once, in
// autocommit and in transactions, through the proxy: one inserts the row,
// the others increment it (in slots, or on the base row if their slotted
// attempt found no row yet), and the total is every upsert's.
func TestConcurrentFirstUpserts(t *testing.T) {
	const ruled = "firstupsert_ruled"
	cat := loadedSetup(t, "firstupsert_plain", ruled, []string{
		"CREATE TABLE daily (day INT NOT NULL PRIMARY KEY, views BIGINT NOT NULL DEFAULT 0)",
	}, "table: "+ruled+".daily\nkey: day\ncounters: [views]\nslots: 8\n")
	p := startProxyFull(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) }, nil)
	const clients, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Connect(p.addr, testdb.User, testdb.Password, ruled)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for k := range each {
				q := fmt.Sprintf("INSERT INTO daily (day, views) VALUES (%d, 1) ON DUPLICATE KEY UPDATE views = views + 1", k)
				if i%2 == 1 {
					if _, err := c.Execute("BEGIN"); err != nil {
						errs <- err
						return
					}
				}
				if _, err := c.Execute(q); err != nil {
					errs <- fmt.Errorf("client %d, day %d: %w", i, k, err)
					return
				}
				if i%2 == 1 {
					if _, err := c.Execute("COMMIT"); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, ruled)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute("SELECT COUNT(*), SUM(views), MIN(views), MAX(views) FROM daily")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := r.GetInt(0, 0)
	sum, _ := r.GetInt(0, 1)
	lo, _ := r.GetInt(0, 2)
	hi, _ := r.GetInt(0, 3)
	if n != each || sum != clients*each || lo != clients || hi != clients {
		t.Errorf("%d rows, total %d, per day %d..%d; want %d rows of %d each", n, sum, lo, hi, each, clients)
	}
	t.Logf("%d of %d upserts planned as slotted increments", p.srv.Stats().RewrittenWrites, clients*each)
}
