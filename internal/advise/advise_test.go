package advise

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/rules"
)

func TestMain(m *testing.M) {
	os.Exit(testdb.Run(m, testdb.Options{ExtraArgs: []string{
		"--performance-schema=ON",
		"--performance-schema-consumer-events-statements-history=ON",
		// MariaDB fills events_statements_history only when the current
		// consumer is on too.
		"--performance-schema-consumer-events-statements-current=ON",
	}}, testdb.Setup))
}

// TestAdviseContendedWorkload runs a contended counter workload on the
// shared server and checks what the advisor makes of it, from the sources
// each server has.
func TestAdviseContendedWorkload(t *testing.T) {
	s := testdb.Shared()
	if err := s.Exec(
		"DROP DATABASE IF EXISTS shop",
		"CREATE DATABASE shop",
		// The hot counter.
		"CREATE TABLE shop.products (id BIGINT NOT NULL PRIMARY KEY, views INT NOT NULL DEFAULT 0, name VARCHAR(100) NOT NULL DEFAULT '')",
		"INSERT INTO shop.products (id, name) VALUES (1, 'hot'), (2, 'cold')",
		// A hot counter incremented only through one-shot prepared
		// statements, which MariaDB leaves out of its digests.
		"CREATE TABLE shop.likes (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO shop.likes (id) VALUES (7)",
		// Increments, but the primary key is composite.
		"CREATE TABLE shop.daily_views (product_id BIGINT NOT NULL, day DATE NOT NULL, views INT NOT NULL DEFAULT 0, PRIMARY KEY (product_id, day))",
		"INSERT INTO shop.daily_views VALUES (1, '2026-01-01', 0), (1, '2026-01-02', 0)",
		// Increments of a DECIMAL column.
		"CREATE TABLE shop.accounts (id BIGINT NOT NULL PRIMARY KEY, balance DECIMAL(12,2) NOT NULL DEFAULT 0)",
		"INSERT INTO shop.accounts (id) VALUES (1)",
		// Absolute SETs only.
		"CREATE TABLE shop.settings (id BIGINT NOT NULL PRIMARY KEY, value INT NOT NULL DEFAULT 0)",
		"INSERT INTO shop.settings (id) VALUES (1)",
	); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("mysql", s.RootDSN("shop", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64) // no reconnecting between transactions

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var txs, errs, likes atomic.Int64
	fail := func(err error) {
		if ctx.Err() == nil && errs.Add(1) <= 5 {
			t.Errorf("workload: %v", err)
		}
	}
	// 16 transactions on one row: 12 with literal SQL, 2 with one-shot
	// server-side prepared statements (the driver prepares, executes and
	// closes), 2 with a prepared statement kept open.
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := db.Conn(context.Background())
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			var stmt *sql.Stmt
			if i >= 14 {
				if stmt, err = conn.PrepareContext(context.Background(), "UPDATE products SET views = views + ? WHERE id = ?"); err != nil {
					fail(err)
					return
				}
				defer stmt.Close()
			}
			bg := context.Background() // finish the transaction once begun
			for ctx.Err() == nil {
				if _, err := conn.ExecContext(bg, "BEGIN"); err != nil {
					fail(err)
					return
				}
				switch {
				case stmt != nil:
					_, err = stmt.ExecContext(bg, 1, 1)
				case i >= 12:
					_, err = conn.ExecContext(bg, "UPDATE products SET views = views + ? WHERE id = ?", 1, 1)
				default:
					_, err = conn.ExecContext(bg, "UPDATE products SET views = views + 1 WHERE id = 1")
				}
				if err != nil {
					fail(err)
				}
				if _, err := conn.ExecContext(bg, "SELECT SLEEP(0.002)"); err != nil {
					fail(err)
				}
				if _, err := conn.ExecContext(bg, "COMMIT"); err != nil {
					fail(err)
					return
				}
				txs.Add(1)
			}
		}()
	}
	// 6 transactions on one row of shop.likes, one-shot prepared only, each
	// holding the row for 20ms so that waits are there to be sampled even on
	// a loaded machine.
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bg := context.Background()
			for ctx.Err() == nil {
				tx, err := db.BeginTx(bg, nil)
				if err != nil {
					fail(err)
					return
				}
				if _, err := tx.ExecContext(bg, "UPDATE likes SET n = n + ? WHERE id = ?", 1, 7); err != nil {
					fail(err)
				}
				if _, err := tx.ExecContext(bg, "SELECT SLEEP(0.02)"); err != nil {
					fail(err)
				}
				if err := tx.Commit(); err != nil {
					fail(err)
					return
				}
				likes.Add(1)
			}
		}()
	}
	// The unsuitable tables and the absolute SETs, in autocommit.
	for _, q := range []string{
		"UPDATE daily_views SET views = views + 1 WHERE product_id = 1",
		"UPDATE daily_views SET views = views + 1 WHERE product_id = 1",
		"UPDATE accounts SET balance = balance + 1.5 WHERE id = 1",
		"UPDATE settings SET value = 7 WHERE id = 1",
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := db.ExecContext(context.Background(), q); err != nil {
					fail(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	// Another goroutine samples lock waits as the advisor does.
	var sampledMax atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		sampler, err := NewSampler(context.Background(), db)
		if err != nil {
			fail(err)
			return
		}
		for ctx.Err() == nil {
			waits, err := sampler.Sample(context.Background())
			if err != nil {
				fail(err)
				return
			}
			waiting := map[string]bool{}
			for _, w := range waits {
				if w.Schema == "shop" && w.Table == "products" && w.Key == "1" {
					waiting[w.WaitingTrx] = true
				}
			}
			if n := int64(len(waiting)); n > sampledMax.Load() {
				sampledMax.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	time.Sleep(1500 * time.Millisecond)
	out := t.TempDir()
	opts := Options{
		DSN:      s.RootDSN("", ""),
		Out:      out,
		MinCalls: 50,
		Watch:    time.Second,
		Interval: 100 * time.Millisecond,
	}
	var stdout bytes.Buffer
	rep, err := Run(context.Background(), opts, &stdout)
	stop()
	wg.Wait()
	t.Logf("%d transactions on shop.products, %d on shop.likes; advisor output:\n%s", txs.Load(), likes.Load(), stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	if sampledMax.Load() < 1 {
		t.Errorf("the sampling goroutine saw no transaction waiting for shop.products id 1")
	} else {
		t.Logf("the sampling goroutine saw up to %d transactions waiting for shop.products id 1", sampledMax.Load())
	}

	// What differs between the servers: MariaDB's lock waits are in
	// information_schema and its digests leave prepared executions out
	// (hence prepared_statements_instances); MySQL's lock waits are in
	// performance_schema, and it has no prepared-statement source.
	type expected struct {
		flavor        Flavor
		sources       []string // used
		absent        []string // not even listed
		digest        string   // the increment's digest text
		lockWaits     string   // the source named in the rule file
		preparedNamed bool     // the open prepared statement is evidence
	}
	want := expected{MariaDB, []string{SourceDigests, SourceLockWaits, SourcePrepared, SourceHistory}, nil,
		"UPDATE `products` SET `views` = `views` + ? WHERE ID = ?", "Lock waits (information_schema.INNODB_LOCK_WAITS", true}
	if s.IsMySQL() {
		want = expected{MySQL, []string{SourceDigests, SourceDataLocks, SourceHistory}, []string{SourcePrepared, SourceLockWaits},
			"UPDATE `products` SET `views` = `views` + ? WHERE `id` = ?", "Lock waits (performance_schema.data_lock_waits", false}
	}
	if rep.Flavor != want.flavor {
		t.Errorf("flavor %q, want %s (version %q)", rep.Flavor, want.flavor, rep.Version)
	}
	for _, name := range want.sources {
		i := slices.IndexFunc(rep.Sources, func(s Source) bool { return s.Name == name })
		if i < 0 || !rep.Sources[i].Used {
			t.Errorf("source %s not used: %+v", name, rep.Sources)
		}
	}
	for _, name := range want.absent {
		if slices.ContainsFunc(rep.Sources, func(s Source) bool { return s.Name == name }) {
			t.Errorf("source %s listed on %s: %+v", name, want.flavor, rep.Sources)
		}
	}
	if rep.Samples < 5 {
		t.Errorf("%d lock-wait samples over 1s every 100ms, want more", rep.Samples)
	}

	// shop.products is the candidate.
	find := func(list []*Candidate, name string) *Candidate {
		for _, c := range list {
			if c.Name() == name {
				return c
			}
		}
		return nil
	}
	c := find(rep.Candidates, "shop.products")
	if c == nil {
		t.Fatalf("shop.products is not a candidate; candidates %v, unsuitable %v, ignored %v",
			names(rep.Candidates), names(rep.Unsuitable), names(rep.Ignored))
	}
	if c.Key != "id" || !slices.Equal(c.Counters, []string{"views"}) {
		t.Errorf("shop.products: key %q counters %q, want id [views]", c.Key, c.Counters)
	}
	if c.Calls < 50 || c.Latency <= 0 || c.LockShare <= 0 || c.LatencyShare <= 0 {
		t.Errorf("shop.products: calls %d, latency %v, lock share %v, latency share %v; want them all positive",
			c.Calls, c.Latency, c.LockShare, c.LatencyShare)
	}
	if want.preparedNamed && !slices.ContainsFunc(c.Statements, func(s *Statement) bool { return s.Source == SourcePrepared && s.Calls > 0 }) {
		t.Errorf("shop.products: no evidence from the open prepared statements: %+v", c.Statements)
	}
	if c.Waits.Waits == 0 || c.Waits.MaxWaiters == 0 {
		t.Errorf("shop.products: no lock waits seen by the advisor: %+v", c.Waits)
	} else if !slices.ContainsFunc(c.Waits.Rows, func(r RowWaits) bool { return r.Index == "PRIMARY" && r.Key == "1" }) {
		// The server's lock tables are sampled, not traced: under load a
		// sample can attribute a wait to a row of a neighbouring lock, so
		// the test asks for the hot row among those seen, not first.
		t.Errorf("shop.products: rows waited for %+v, want PRIMARY 1 among them", c.Waits.Rows)
	}
	if c.Slots < DefaultSlots || c.Slots > MaxSuggestedSlots {
		t.Errorf("shop.products: slots %d", c.Slots)
	}
	if !c.Written || c.File != filepath.Join(out, "shop.products.yaml") {
		t.Errorf("shop.products: file %q written %v", c.File, c.Written)
	}
	data, err := os.ReadFile(filepath.Join(out, "shop.products.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shop.products.yaml:\n%s", data)
	r, err := rules.Parse("shop.products.yaml", data)
	if err != nil {
		t.Fatalf("the rule file does not parse: %v", err)
	}
	if r.Schema != "shop" || r.Table != "products" || r.Key != "id" || len(r.Counters) != 1 || r.Counters[0].Name != "views" || r.Slots != c.Slots {
		t.Errorf("the rule file reads back as %+v", r)
	}
	for _, text := range []string{
		want.digest, // the digest
		"UPDATE products SET views = views + ? WHERE id = ?", // the prepared statement
		"calls:", "lock time:", "ms per call", "of all statements' lock time",
		want.lockWaits,
		"transactions waited for one row at once",
		"PRIMARY 1:",
		"waiting:  UPDATE products SET views = views + 1 WHERE id = 1",
	} {
		if !bytes.Contains(data, []byte(text)) {
			t.Errorf("the rule file does not mention %q", text)
		}
	}

	// shop.likes can only be found through lock waits caught in the
	// advisor's samples (its one-shot prepared statements leave no digest);
	// on a loaded machine the samples may miss them. When found, its file
	// must say why it has no call counts.
	if c := find(rep.Candidates, "shop.likes"); c == nil {
		t.Logf("shop.likes not found this time (no lock wait sampled); candidates %v, unsuitable %v, ignored %v",
			names(rep.Candidates), names(rep.Unsuitable), names(rep.Ignored))
	} else {
		if c.Key != "id" || !slices.Equal(c.Counters, []string{"n"}) || c.Waits.Waits == 0 {
			t.Errorf("shop.likes: key %q counters %q waits %+v", c.Key, c.Counters, c.Waits)
		}
		data, err := os.ReadFile(c.File)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("shop.likes.yaml:\n%s", data)
		if _, err := rules.Parse(c.File, data); err != nil {
			t.Error(err)
		}
		wants := []string{"UPDATE likes SET n = n + ? WHERE id = ?", "PRIMARY 7:"}
		if c.Calls == 0 {
			wants = append(wants, "No call counts")
		}
		for _, want := range wants {
			if !bytes.Contains(data, []byte(want)) {
				t.Errorf("shop.likes.yaml does not mention %q", want)
			}
		}
	}

	// The composite key and the DECIMAL counter are unsuitable, with reasons.
	if u := find(rep.Unsuitable, "shop.daily_views"); u == nil {
		t.Errorf("shop.daily_views not reported unsuitable; candidates %v, unsuitable %v, ignored %v",
			names(rep.Candidates), names(rep.Unsuitable), names(rep.Ignored))
	} else if !strings.Contains(u.Reason, "composite, (product_id, day)") {
		t.Errorf("shop.daily_views: reason %q", u.Reason)
	}
	if u := find(rep.Unsuitable, "shop.accounts"); u == nil {
		t.Errorf("shop.accounts not reported unsuitable")
	} else if !strings.Contains(u.Reason, "integer") {
		t.Errorf("shop.accounts: reason %q", u.Reason)
	}
	for _, list := range [][]*Candidate{rep.Candidates, rep.Unsuitable, rep.Ignored} {
		if find(list, "shop.settings") != nil {
			t.Errorf("shop.settings (absolute SETs only) was taken for a counter table")
		}
	}
	for _, f := range []string{"shop.daily_views.yaml", "shop.accounts.yaml", "shop.settings.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("%s was written", f)
		}
	}
	for _, want := range []string{"shop.products", "views", filepath.Join(out, "shop.products.yaml"),
		"shop.daily_views", "composite", "+ " + SourceDigests} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the summary does not mention %q", want)
		}
	}

	// A second run keeps the file; --force replaces it.
	opts.Watch = 0
	stdout.Reset()
	rep, err = Run(context.Background(), opts, &stdout)
	if err != nil {
		t.Fatal(err)
	}
	if c := find(rep.Candidates, "shop.products"); c == nil || c.Written {
		t.Errorf("second run: shop.products %+v, want it kept", c)
	}
	if again, _ := os.ReadFile(filepath.Join(out, "shop.products.yaml")); !bytes.Equal(again, data) {
		t.Errorf("second run changed the file")
	}
	if !strings.Contains(stdout.String(), "exists; not overwritten") {
		t.Errorf("second run summary:\n%s", stdout.String())
	}
	opts.Force = true
	rep, err = Run(context.Background(), opts, &stdout)
	if err != nil {
		t.Fatal(err)
	}
	if c := find(rep.Candidates, "shop.products"); c == nil || !c.Written {
		t.Errorf("forced run: shop.products %+v, want it written", c)
	}
}

func names(list []*Candidate) []string {
	var out []string
	for _, c := range list {
		out = append(out, c.Name()+" ("+c.Reason+")")
	}
	return out
}

func TestParseShape(t *testing.T) {
	tests := []struct {
		text     string
		schema   string
		table    string
		key      string
		counters []string
		others   []string
		times    []string
	}{
		{text: "UPDATE `products` SET `views` = `views` + ? WHERE ID = ? ", table: "products", key: "ID", counters: []string{"views"}},
		{text: "UPDATE `shop` . `products` SET `views` = ? + `views` , NAME = ? WHERE ID = ? ", schema: "shop", table: "products", key: "ID",
			counters: []string{"views"}, others: []string{"NAME"}, times: []string{"NAME"}},
		{text: "UPDATE `repos` `r` SET `r` . `stars` = `r` . `stars` - ? , `downloads` = `downloads` + ? WHERE ? = `r` . `id`",
			table: "repos", key: "id", counters: []string{"stars", "downloads"}},
		{text: "update t set c = c + -1 where (id = 5)", table: "t", key: "id", counters: []string{"c"}},
		{text: "/* app */ UPDATE t SET c = c + 1 WHERE id = 1 LIMIT 1", table: "t", key: "id", counters: []string{"c"}},
		// The spellings ORMs send (see internal/clients): Rails' COALESCE
		// and id lists, Django's parentheses, extra conditions, touch
		// columns assigned a time.
		{text: "UPDATE `repos` SET `downloads` = COALESCE ( `downloads` , ? ) + ? WHERE `repos` . `id` = ?", table: "repos", key: "id", counters: []string{"downloads"}},
		{text: "UPDATE `repos` SET `downloads` = COALESCE(`downloads`, 0) + 1 WHERE `repos`.`id` IN (1)", table: "repos", key: "id", counters: []string{"downloads"}},
		{text: "UPDATE `repos` SET `downloads` = ( `repos` . `downloads` + ? ) WHERE `repos` . `id` = ?", table: "repos", key: "id", counters: []string{"downloads"}},
		{text: "UPDATE t SET c = c + ? WHERE id = ? AND x = ?", table: "t", key: "id", counters: []string{"c"}},
		{text: "UPDATE repos SET downloads = downloads + 1 WHERE id = 1 AND deleted_at IS NULL", table: "repos", key: "id", counters: []string{"downloads"}},
		{text: "update `repos` set `downloads` = `downloads` + ?, `repos`.`updated_at` = ? where `id` = ?", table: "repos", key: "id",
			counters: []string{"downloads"}, others: []string{"updated_at"}, times: []string{"updated_at"}},
		{text: "UPDATE repos SET downloads = downloads + 1, seen = NOW(), name = UPPER(name) WHERE id = 1", table: "repos", key: "id",
			counters: []string{"downloads"}, others: []string{"seen", "name"}, times: []string{"seen"}},
		// Not increments.
		{text: "UPDATE `products` SET `views` = `views` - ? WHERE ID IN (...) "},
		{text: "UPDATE t SET c = ? WHERE id = ?"},
		{text: "UPDATE t SET c = c * ? WHERE id = ?"},
		{text: "UPDATE t SET c = ? - c WHERE id = ?"},
		{text: "UPDATE t SET c = c + d WHERE id = ?"},
		{text: "UPDATE t SET c = c + ? WHERE id = ? OR x = ?"},
		{text: "UPDATE t SET c = c + ? WHERE id > ?"},
		{text: "UPDATE t SET c = c + ?"},
		{text: "UPDATE t, u SET t.c = t.c + ? WHERE t.id = ?"},
		{text: "UPDATE t SET c = c + ?, c = ? WHERE id = ?"},
		{text: "SELECT c + ? FROM t WHERE id = ?"},
		{text: "INSERT INTO t VALUES (...)"},
	}
	for _, tt := range tests {
		sh, err := ParseShape(tt.text)
		if tt.table == "" {
			if err == nil {
				t.Errorf("ParseShape(%q) = %+v, want an error", tt.text, sh)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseShape(%q): %v", tt.text, err)
			continue
		}
		if sh.Schema != tt.schema || sh.Table != tt.table || sh.Key != tt.key || !slices.Equal(sh.Counters, tt.counters) ||
			!slices.Equal(sh.Others, tt.others) || !slices.Equal(sh.Times, tt.times) {
			t.Errorf("ParseShape(%q) = %+v", tt.text, sh)
		}
	}
}

// TestRenderRuleNames checks that awkward names survive the trip through
// the rule file.
func TestRenderRuleNames(t *testing.T) {
	rep := &Report{Version: "10.11.19-MariaDB", Flavor: MariaDB, Samples: 3, Watched: time.Second,
		Sources: []Source{{Name: SourceLockWaits, Used: true}}, TotalLatency: time.Second}
	for _, tc := range []struct{ schema, table, key string }{
		{"app", "repos", "id"},
		{"my.schema", "re`pos", "key id"},
		{"yes", "123", "on"},
		{"with:colon", "#hash", "-dash"},
		{"ünï", "tåble", "ïd"},
	} {
		c := &Candidate{Schema: tc.schema, Table: tc.table, Key: tc.key, Counters: []string{"no", "a b", "c,d", "[x]"},
			Calls: 10, Latency: time.Millisecond, Slots: 130, SlotsWhy: "because",
			Statements: []*Statement{{Source: SourceDigests, Text: "UPDATE x\nSET c = c + ? WHERE id = ?\x00\xff", Calls: 10}},
			Waits:      WaitStats{Waits: 2, MaxWaiters: 2, Samples: 1, Rows: []RowWaits{{Index: "PRIMARY", Key: "1", Waits: 2, MaxWaiters: 2}}},
			Notes:      []string{"line\none"}}
		data, err := RenderRule(rep, c, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkRule("x.yaml", data, c); err != nil {
			t.Errorf("%v\n%s", err, data)
		}
	}
	if got := FileName("a/b", "c\nd"); got != "a_b.c_d.yaml" {
		t.Errorf("FileName = %q", got)
	}
}

func TestSplitLockTable(t *testing.T) {
	for _, tc := range []struct{ in, schema, table string }{
		{"`shop`.`products`", "shop", "products"},
		{"`a``b`.`c.d`", "a`b", "c.d"},
		{"shop.products", "shop", "products"},
	} {
		if s, tb := splitLockTable(tc.in); s != tc.schema || tb != tc.table {
			t.Errorf("splitLockTable(%q) = %q, %q", tc.in, s, tb)
		}
	}
}

func TestSuggestSlots(t *testing.T) {
	for _, tc := range []struct{ waiters, want int }{{0, 100}, {3, 100}, {15, 130}, {40, 330}, {500, 1024}} {
		c := &Candidate{Waits: WaitStats{MaxWaiters: tc.waiters}}
		suggestSlots(c)
		if c.Slots != tc.want {
			t.Errorf("%d waiters: %d slots, want %d", tc.waiters, c.Slots, tc.want)
		}
	}
}

// TestValidateTouch: the increments ORMs send assign updated_at a time
// with the counter (Laravel, Sequelize, Rails' touch). The advisor lists a
// DATETIME or TIMESTAMP column so assigned under touch, and its rule reads
// back with it; a column of another type stays a note.
func TestValidateTouch(t *testing.T) {
	s := testdb.Shared()
	if err := s.Exec(
		"DROP DATABASE IF EXISTS advise_touch",
		"CREATE DATABASE advise_touch",
		"CREATE TABLE advise_touch.repos (id BIGINT NOT NULL PRIMARY KEY, downloads INT NOT NULL DEFAULT 0, "+
			"updated_at TIMESTAMP NULL, seen DATETIME(6) NULL, note VARCHAR(20) NULL, deleted_at DATETIME NULL)",
	); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.RootDSN("", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stmts []*Statement
	for _, text := range []string{
		"update `repos` set `downloads` = `downloads` + ? , `repos` . `updated_at` = ? where `id` = ? and `repos` . `deleted_at` is null",
		"UPDATE `repos` SET `downloads` = COALESCE ( `downloads` , ? ) + ? , `seen` = NOW ( ) WHERE `repos` . `id` IN ( ? )",
		"UPDATE `repos` SET `downloads` = `downloads` + ? , `note` = ? WHERE `id` = ?",
	} {
		sh, err := ParseShape(text)
		if err != nil {
			t.Fatalf("ParseShape(%q): %v", text, err)
		}
		stmts = append(stmts, &Statement{Source: SourceDigests, Text: text, Calls: 10, Shape: sh})
	}
	c := &Candidate{Schema: "advise_touch", Table: "repos", Key: "id", Statements: stmts, Slots: 16}
	if err := validate(t.Context(), db, c); err != nil {
		t.Fatal(err)
	}
	if c.Reason != "" || !slices.Equal(c.Counters, []string{"downloads"}) || !slices.Equal(c.Touch, []string{"updated_at", "seen"}) {
		t.Fatalf("validate: reason %q counters %v touch %v", c.Reason, c.Counters, c.Touch)
	}
	notes := strings.Join(c.Notes, "\n")
	if !strings.Contains(notes, "also assign note;") || strings.Contains(notes, "assign updated_at;") {
		t.Errorf("notes:\n%s\nwant note (not updated_at) named as keeping increments on the base row", notes)
	}
	rep := &Report{Version: s.Version, Flavor: MariaDB, Samples: 1, Watched: time.Second,
		Sources: []Source{{Name: SourceDigests, Used: true}}, TotalLatency: time.Second}
	data, err := RenderRule(rep, c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRule("repos.yaml", data, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\ntouch: [updated_at, seen]\n") {
		t.Errorf("rule:\n%s\nwant touch: [updated_at, seen]", data)
	}
}
