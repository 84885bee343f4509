package proxy_test

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// A counter's column has a range: its integer type's, narrowed by CHECK
// constraints. Directly, a write past it fails (strict sql_mode: 1264,
// 1690, 3819/4025) or is clamped with a warning (non-strict); through the
// proxy a slot row must never take a total where the column cannot, and
// every statement must answer as directly. The catalog is the real one
// (catalog.Load on the server's own schema), so the ranges are the ones
// the proxy reads from the server.

// TestRangeScenarios runs the scenarios of the exactness issue as named:
// an INT UNSIGNED counter at 1 decremented by 3, an INT counter at
// 2147483600 incremented by 100, then a DELETE that reads the counters and
// a roll-up that must fold every record.
func TestRangeScenarios(t *testing.T) {
	const plain, ruled = "range_named_plain", "range_named_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT '', downloads INT UNSIGNED NOT NULL DEFAULT 0, stars INT NOT NULL DEFAULT 0)",
		"INSERT INTO repos (id, name, downloads, stars) VALUES (1, 'a', 5, 0), (2, 'b', 1, 2147483600)",
	}, "table: "+ruled+".repos\nkey: id\ncounters: [downloads, stars]\nslots: 8\n")
	corpus := []step{
		text("UPDATE repos SET downloads = downloads - 3 WHERE id = 2"),
		text("SELECT id, downloads, stars FROM repos ORDER BY id"),
		text("UPDATE repos SET stars = stars + 100 WHERE id = 2"),
		text("SELECT id, downloads, stars FROM repos ORDER BY id"),
		prep("UPDATE repos SET downloads = downloads - ? WHERE id = ?", 3, 2),
		prep("UPDATE repos SET stars = stars + ? WHERE id = ?", 100, 2),
		text("UPDATE repos SET downloads = downloads - 1, stars = stars + 47 WHERE id = 2"),
		text("SELECT id, downloads, stars FROM repos ORDER BY id"),
		text("UPDATE repos SET stars = stars + 1 WHERE id = 2"),
		text("UPDATE repos SET downloads = downloads - 1 WHERE id = 2"),
		text("DELETE FROM repos WHERE downloads >= 1"),
		text("SELECT id, downloads, stars FROM repos ORDER BY id"),
		text(touchRollup),
		text("SELECT id, downloads, stars FROM repos ORDER BY id"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
	assertNoSlots(t, ruled)
}

// assertNoSlots fails unless roll-up left no slot row in schema: every
// record the proxy wrote could be folded.
func assertNoSlots(t *testing.T, schema string) {
	t.Helper()
	admin := touchAdmin(t)
	r, err := admin.Execute("SELECT COUNT(*) FROM " + schema + ".slotted_counters WHERE `count` <> 0")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.GetInt(0, 0); n != 0 {
		t.Fatalf("%d slot rows left after a roll-up: records the proxy wrote that cannot be folded", n)
	}
}

// integerType is one integer column type and its range.
type integerType struct {
	sql    string
	lo, hi *big.Int
}

func integerTypes() []integerType {
	n := func(s string) *big.Int { v, _ := new(big.Int).SetString(s, 10); return v }
	return []integerType{
		{"TINYINT", n("-128"), n("127")},
		{"TINYINT UNSIGNED", n("0"), n("255")},
		{"SMALLINT", n("-32768"), n("32767")},
		{"SMALLINT UNSIGNED", n("0"), n("65535")},
		{"MEDIUMINT", n("-8388608"), n("8388607")},
		{"MEDIUMINT UNSIGNED", n("0"), n("16777215")},
		{"INT", n("-2147483648"), n("2147483647")},
		{"INT UNSIGNED", n("0"), n("4294967295")},
		{"BIGINT", n("-9223372036854775808"), n("9223372036854775807")},
		{"BIGINT UNSIGNED", n("0"), n("18446744073709551615")},
	}
}

// rangeCorpus takes the counter n of table c past both ends of typ's
// range: from rows near each end, with text and prepared statements, with
// slot rows already holding part of the total (so that the base value
// alone is in range and the total is not), on the slotted path and the
// base-row path, in strict and non-strict sql_mode.
func rangeCorpus(typ integerType) []step {
	add := func(v *big.Int, d int64) string { return new(big.Int).Add(v, big.NewInt(d)).String() }
	mid := new(big.Int).Rsh(new(big.Int).Add(typ.lo, typ.hi), 1)
	// A slot takes at most a share of max - base (see
	// rewrite.ShareScale), the rule's last slot (of 16) the least: three
	// increments of that much, then one that the base value could take
	// alone but the total cannot.
	share := slotShare(new(big.Int).Sub(typ.hi, mid), 15)
	if share.Sign() == 0 {
		share = big.NewInt(1)
	}
	rest := new(big.Int).Sub(new(big.Int).Sub(typ.hi, mid), share) // mid + rest + share = hi
	steps := []step{
		text("SELECT id, n FROM c ORDER BY id"),
		// The low end.
		text("UPDATE c SET n = n - 3 WHERE id = 1"),
		prep("UPDATE c SET n = n - ? WHERE id = ?", 3, 1),
		prep("UPDATE c SET n = n + ? WHERE id = ?", -3, 1),
		text("UPDATE c SET n = n - 2 WHERE id = 1"),
		text("UPDATE c SET n = n - 1 WHERE id = 1"),
		text("SELECT id, n FROM c WHERE id = 1"),
		text("UPDATE c SET n = n + 1 WHERE id = 1"),
		// The high end.
		text("UPDATE c SET n = n + 3 WHERE id = 2"),
		prep("UPDATE c SET n = n + ? WHERE id = ?", 3, 2),
		text("UPDATE c SET n = n + 2 WHERE id = 2"),
		text("UPDATE c SET n = n + 1 WHERE id = 2"),
		text("UPDATE c SET n = n + 1 WHERE id IN (2, 3)"),
		text("SELECT id, n FROM c ORDER BY id"),
		// Slots hold part of the total.
		text("UPDATE c SET n = n + " + share.String() + " WHERE id = 3"),
		prep("UPDATE c SET n = n + ? WHERE id = ?", share.String(), 3),
		text("UPDATE c SET n = n + " + share.String() + " WHERE id = 3"),
		text("SELECT id, n FROM c WHERE id = 3"),
		text("UPDATE c SET n = n + " + rest.String() + " WHERE id = 3"),
		prep("UPDATE c SET n = n + ? WHERE id = ?", rest.String(), 3),
		text("UPDATE c SET n = n + " + rest.String() + " WHERE id = 3 AND n IS NOT NULL"),
		text("UPDATE c SET n = n + " + rest.String() + ", name = 'x' WHERE id = 3"),
		text("SELECT id, n FROM c ORDER BY id"),
		text("UPDATE c SET n = n - " + share.String() + " WHERE id = 3"),
		text("UPDATE c SET n = n + " + rest.String() + " WHERE id = 3"),
		text("SELECT id, n FROM c ORDER BY id"),
		text(touchRollup),
		text("SELECT id, n FROM c ORDER BY id"),
		text("UPDATE c SET n = " + typ.hi.String() + " WHERE id = 3"),
		text("UPDATE c SET n = n + 1 WHERE id = 3"),
		// Non-strict: the server clamps and warns.
		text("SET SESSION sql_mode = ''"),
		text("UPDATE c SET n = n + 5 WHERE id = 2"),
		text("SHOW WARNINGS"),
		text("UPDATE c SET n = n - 5 WHERE id = 1"),
		text("SHOW WARNINGS"),
		prep("UPDATE c SET n = n + ? WHERE id = ?", 7, 3),
		text("SHOW WARNINGS"),
		text("UPDATE c SET n = n - 1 WHERE id = 3"),
		text("SELECT id, n FROM c ORDER BY id"),
		text("SET SESSION sql_mode = DEFAULT"),
		// Reads and writes of the counters that read the totals.
		text("DELETE FROM c WHERE n >= " + add(typ.hi, -10)),
		text("SELECT id, n FROM c ORDER BY id"),
		text(touchRollup),
		text("SELECT id, n FROM c ORDER BY id"),
	}
	return steps
}

// slotShare is the share of room that slot may hold (rewrite.ShareScale).
func slotShare(room *big.Int, slot int64) *big.Int {
	k := int64(rewrite.ShareScale)
	return new(big.Int).Quo(new(big.Int).Mul(room, big.NewInt(k)), big.NewInt((slot+k)*(slot+k+1)))
}

// TestRangeEveryType runs rangeCorpus for every integer type, signed and
// unsigned, on a table whose rows start 2 from each end of the range.
func TestRangeEveryType(t *testing.T) {
	for i, typ := range integerTypes() {
		t.Run(strings.ReplaceAll(typ.sql, " ", "_"), func(t *testing.T) {
			plain, ruled := fmt.Sprintf("range_plain_%d", i), fmt.Sprintf("range_ruled_%d", i)
			mid := new(big.Int).Rsh(new(big.Int).Add(typ.lo, typ.hi), 1)
			cat := loadedSetup(t, plain, ruled, []string{
				"CREATE TABLE c (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT '', n " + typ.sql + " NOT NULL)",
				fmt.Sprintf("INSERT INTO c (id, n) VALUES (1, %s), (2, %s), (3, %s)",
					new(big.Int).Add(typ.lo, big.NewInt(2)), new(big.Int).Sub(typ.hi, big.NewInt(2)), mid),
			}, "table: "+ruled+".c\nkey: id\ncounters: [n]\nslots: 16\n")
			ctr := cat.Tables()[0].Counters[0]
			if ctr.Min != typ.lo.String() || ctr.Max != typ.hi.String() {
				t.Fatalf("catalog range of %s: [%s, %s], want [%s, %s]", typ.sql, ctr.Min, ctr.Max, typ.lo, typ.hi)
			}
			runDifferential(t, cat, plain, ruled, rangeCorpus(typ))
			assertNoSlots(t, ruled)
			for _, db := range []string{plain, ruled} {
				_ = testdb.Shared().Exec("DROP DATABASE IF EXISTS " + db)
			}
		})
	}
}

// TestRangeCheckConstraints: a CHECK constraint that bounds the counter by
// constants narrows its range; one that reads it otherwise (against
// another column) keeps its increments on the base row, where the server
// checks it. MySQL raises 3819, MariaDB 4025, in any sql_mode.
func TestRangeCheckConstraints(t *testing.T) {
	const plain, ruled = "range_check_plain", "range_check_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE k (id BIGINT NOT NULL PRIMARY KEY, cap INT NOT NULL, n INT NOT NULL, o INT NOT NULL, " +
			"CONSTRAINT n_range CHECK (n >= -100000000 AND n <= 100000000), CONSTRAINT o_cap CHECK (o <= cap))",
		"INSERT INTO k VALUES (1, 10, 99999990, 8), (2, 1000, 0, 0)",
	}, "table: "+ruled+".k\nkey: id\ncounters: [n, o]\nslots: 8\n")
	ctrs := cat.Tables()[0].Counters
	if ctrs[0].Min != "-100000000" || ctrs[0].Max != "100000000" || len(ctrs[0].BaseOnly) != 0 {
		t.Fatalf("n: %+v, want the range of n_range", ctrs[0])
	}
	if strings.Join(ctrs[1].BaseOnly, ",") != "CHECK constraint o_cap reads o in a way that is not a constant bound" {
		t.Fatalf("o: %+v, want BaseOnly naming o_cap", ctrs[1])
	}
	corpus := []step{
		text("UPDATE k SET n = n + 11 WHERE id = 1"),
		text("UPDATE k SET n = n + 10 WHERE id = 1"),
		text("UPDATE k SET n = n + 1 WHERE id = 1"),
		text("UPDATE k SET n = n + 1500 WHERE id = 2"),
		prep("UPDATE k SET n = n + ? WHERE id = ?", 1500, 2),
		text("UPDATE k SET n = n - 100000000 WHERE id = 2"),
		text("SELECT id, n, o FROM k ORDER BY id"),
		text("UPDATE k SET o = o + 2 WHERE id = 1"),
		text("UPDATE k SET o = o + 3 WHERE id = 1"),
		prep("UPDATE k SET o = o + ? WHERE id = ?", 5, 2),
		text("SET SESSION sql_mode = ''"),
		text("UPDATE k SET o = o + 1 WHERE id = 1"),
		text("UPDATE k SET n = n + 100000000 WHERE id = 2"),
		text("SET SESSION sql_mode = DEFAULT"),
		text("SELECT id, n, o FROM k ORDER BY id"),
		text(touchRollup),
		text("SELECT id, n, o FROM k ORDER BY id"),
	}
	stats, _ := runDifferential(t, cat, plain, ruled, corpus)
	if stats.RewrittenWrites == 0 {
		t.Fatalf("no increment of n was slotted: %+v", stats)
	}
	assertNoSlots(t, ruled)
}

// TestWarningsAcrossTablelessStatements: the warnings of a statement the
// proxy ran its own way (a clamped total written on the base row in a
// transaction of the proxy's own, whose SHOW WARNINGS it keeps) stay the
// client's for SHOW WARNINGS after statements that leave the diagnostics
// as they are: on MariaDB those that use no table and raise nothing
// (SAVEPOINT, SET, BEGIN, COMMIT, USE); on MySQL every statement resets
// them. Here the server's own diagnostics happen to be the statement's
// too; where the proxy's statements left others (a lock wait timeout of a
// slotted increment, which MariaDB lists once where the client's UPDATE
// lists it twice) the kept ones must be answered: the fuzzer's finding
// mariadb-1795789645388410412 in internal/difffuzz/testdata/reproducers.
func TestWarningsAcrossTablelessStatements(t *testing.T) {
	const plain, ruled = "tableless_plain", "tableless_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE hits (id INT NOT NULL PRIMARY KEY, n TINYINT NOT NULL DEFAULT 0)",
		"INSERT INTO hits VALUES (1, 100), (2, 5)",
	}, "table: "+ruled+".hits\nkey: id\ncounters: [n]\nslots: 4\n")
	clamp := text("UPDATE hits SET n = n + 100 WHERE id IN (1, 2)")
	corpus := []step{
		text("SET SESSION sql_mode = ''"),
		text("UPDATE hits SET n = n + 1 WHERE id = 2"),
		clamp,
		text("SAVEPOINT a"),
		text("SHOW WARNINGS"),
		text("SET @x = 1"),
		text("SHOW WARNINGS"),
		text("SHOW WARNINGS"),
		clamp,
		text("BEGIN"),
		text("SHOW WARNINGS"),
		text("COMMIT"),
		text("SHOW WARNINGS"),
		clamp,
		text("USE " + ruled),
		text("SHOW WARNINGS"),
		clamp,
		text("SET @y = 'a' + 1"),
		text("SHOW WARNINGS"),
		clamp,
		text("ROLLBACK TO SAVEPOINT nope"),
		text("SHOW WARNINGS"),
		clamp,
		text("SELECT 1"),
		text("SHOW WARNINGS"),
		clamp,
		text("SELECT * FROM hits ORDER BY id"),
		text("SHOW WARNINGS"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
}

// TestNarrowCountersConcurrent: counters of narrow types (TINYINT
// UNSIGNED, SMALLINT; Magento's times_used is a SMALLINT UNSIGNED) are
// slotted, each slot within its share of the room (rewrite.ShareScale),
// and 8 clients driving them past their ranges at once through the proxy
// get exactly the successes the range allows, every other statement
// failing with the server's own error for it: the totals end at the
// range's end, as directly.
func TestNarrowCountersConcurrent(t *testing.T) {
	const plain, ruled = "narrow_plain", "narrow_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE c (id INT NOT NULL PRIMARY KEY, t TINYINT UNSIGNED NOT NULL DEFAULT 0, s SMALLINT NOT NULL DEFAULT 0)",
		"INSERT INTO c VALUES (1, 0, -32000)",
	}, "table: "+ruled+".c\nkey: id\ncounters: [t, s]\nslots: 8\n")
	// The server's errors for one step past each end, directly.
	admin := touchAdmin(t)
	want := map[string]uint16{}
	for col, q := range map[string]string{
		"t": "UPDATE " + plain + ".c SET t = 255 WHERE id = 1; UPDATE " + plain + ".c SET t = t + 1 WHERE id = 1",
		"s": "UPDATE " + plain + ".c SET s = -32750 WHERE id = 1; UPDATE " + plain + ".c SET s = s - 30 WHERE id = 1",
	} {
		first, second, _ := strings.Cut(q, "; ")
		if _, err := admin.Execute(first); err != nil {
			t.Fatal(err)
		}
		_, err := admin.Execute(second)
		var me *gomysql.MyError
		if !errors.As(err, &me) {
			t.Fatalf("directly, %q: %v, want a range error", second, err)
		}
		want[col] = me.Code
	}
	p := startProxyFull(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) }, nil)
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, ruled)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Slotted while in range: one client, 10 increments and a decrement.
	oks := map[string]int{"t": 10, "s": 1}
	for _, q := range []string{"UPDATE c SET s = s - 30 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1",
		"UPDATE c SET t = t + 1 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1",
		"UPDATE c SET t = t + 1 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1",
		"UPDATE c SET t = t + 1 WHERE id = 1", "UPDATE c SET t = t + 1 WHERE id = 1"} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	r, err := admin.Execute("SELECT COUNT(*), SUM(`count`) FROM " + ruled + ".slotted_counters WHERE `count` <> 0")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.GetInt(0, 0); n == 0 {
		t.Errorf("no increment of the narrow counters was slotted")
	}
	// Past the ends, 8 clients at once.
	const clients, each = 8, 48
	var mu sync.Mutex
	onClients(t, p.addr, ruled, clients, func(i int, c *client.Conn) error {
		for k := range each {
			col, q := "t", "UPDATE c SET t = t + 1 WHERE id = 1"
			if k%4 == i%4 {
				col, q = "s", "UPDATE c SET s = s - 30 WHERE id = 1"
			}
			_, err := c.Execute(q)
			var me *gomysql.MyError
			switch {
			case err == nil:
				mu.Lock()
				oks[col]++
				mu.Unlock()
			case errors.As(err, &me) && me.Code == want[col]:
			default:
				return fmt.Errorf("client %d, %q: %v (want OK or error %d)", i, q, err, want[col])
			}
		}
		return nil
	})
	r, err = c.Execute("SELECT t, s FROM c WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	tv, _ := r.GetInt(0, 0)
	sv, _ := r.GetInt(0, 1)
	t.Logf("t: %d increments succeeded; s: %d decrements succeeded; %d planned as slotted increments", oks["t"], oks["s"], p.srv.Stats().RewrittenWrites)
	if tv != 255 || sv != -32750 || oks["t"] != 255 || oks["s"] != 25 {
		t.Errorf("t = %d after %d increments, s = %d after %d decrements; want 255 after 255 and -32750 after 25", tv, oks["t"], sv, oks["s"])
	}
	if _, err := rollup.Once(t.Context(), admin, cat, rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	assertNoSlots(t, ruled)
}

// TestCheckBoundedCondition: issue 22's condition on a counter (phpBB's
// `AND user_login_attempts < 100`) is slotted when a CHECK constraint
// declares the bound (CHECK (user_login_attempts <= 100)): every slotted
// increment keeps the total within it, so the condition holds whenever the
// slotted increment succeeds, and near the bound the statement runs on the
// base row, where the server decides it on the total. 8 clients, 160
// attempts at once through the proxy: exactly 100 change the row, as the
// condition allows, and none fails.
func TestCheckBoundedCondition(t *testing.T) {
	const plain, ruled = "checkbound_plain", "checkbound_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE phpbb_users (user_id INT UNSIGNED NOT NULL PRIMARY KEY, user_login_attempts TINYINT UNSIGNED NOT NULL DEFAULT 0, " +
			"CONSTRAINT attempts_cap CHECK (user_login_attempts <= 100))",
		"INSERT INTO phpbb_users VALUES (2, 0)",
	}, "table: "+ruled+".phpbb_users\nkey: user_id\ncounters: [user_login_attempts]\nslots: 8\n")
	rw := newRewriter(cat)
	const q = "UPDATE phpbb_users SET user_login_attempts = user_login_attempts + 1 WHERE user_id = 2 AND user_login_attempts < 100"
	plans, err := rw.Rewrite(q, rewrite.Session{DB: ruled})
	if err != nil || len(plans) != 1 || plans[0].Kind() != rewrite.KindIncrement {
		t.Fatalf("%s: planned %v %v, want a slotted increment", q, plans, err)
	}
	cappedAtOnce(t, rw, ruled, q, "SELECT user_login_attempts FROM phpbb_users WHERE user_id = 2", 100)
}

// cappedAtOnce runs q, an increment by 1 capped at limit by its condition,
// 160 times from 8 clients at once through a proxy with rw (database db),
// and checks that exactly limit of them changed the row and the total,
// read by total, is limit: none failed, none counted twice or lost.
func cappedAtOnce(t *testing.T, rw *rewrite.Rewriter, db, q, total string, limit int64) {
	t.Helper()
	p := startProxyFull(t, func(c *proxy.Config) { c.Rewriter = rw }, nil)
	const clients, each = 8, 20
	var changed, unchanged atomic.Int64
	onClients(t, p.addr, db, clients, func(_ int, c *client.Conn) error {
		for range each {
			r, err := c.Execute(q)
			if err != nil {
				return err
			}
			if r.AffectedRows == 1 {
				changed.Add(1)
			} else {
				unchanged.Add(1)
			}
		}
		return nil
	})
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute(total)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := r.GetInt(0, 0)
	t.Logf("%d changed the row, %d did not; total %d; %d planned as slotted increments", changed.Load(), unchanged.Load(), v, p.srv.Stats().RewrittenWrites)
	if v != limit || changed.Load() != limit || unchanged.Load() != clients*each-limit {
		t.Errorf("total %d after %d changes and %d without; want %d, %d and %d", v, changed.Load(), unchanged.Load(), limit, limit, clients*each-limit)
	}
}

// TestDeclaredBounds: phpBB's condition on a counter, with the survey's
// table as phpBB creates it (user_login_attempts TINYINT, no CHECK), is
// slotted when the rule declares the bound its increments keep (bounds:
// {user_login_attempts: {max: 100}}): a slotted increment keeps the
// total within them, so `user_login_attempts < 100` holds whenever one
// succeeds (+1 from at most 99). Beyond the bounds, statements run on the base row,
// where the server decides: an unconditional increment past 100 is the
// server's to allow (the bounds are no constraint), and the condition is
// then false, as directly. One client's sequence, compared with the same
// directly; then 8 clients, 160 attempts at once through the proxy:
// exactly 100 change the row.
func TestDeclaredBounds(t *testing.T) {
	const plain, ruled = "declbound_plain", "declbound_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE phpbb_users (user_id INT UNSIGNED NOT NULL AUTO_INCREMENT, user_posts INT UNSIGNED NOT NULL DEFAULT 0, " +
			"user_lastpost_time INT UNSIGNED NOT NULL DEFAULT 0, user_login_attempts TINYINT NOT NULL DEFAULT 0, user_new_privmsg INT NOT NULL DEFAULT 0, " +
			"user_unread_privmsg INT NOT NULL DEFAULT 0, user_last_privmsg INT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (user_id)) ENGINE=InnoDB",
		"INSERT INTO phpbb_users (user_id) VALUES (2), (3)",
	}, "table: "+ruled+".phpbb_users\nkey: user_id\ncounters: [user_posts, user_login_attempts]\nslots: 1\nbounds:\n  user_login_attempts: {max: 100}\n")
	rw := newRewriter(cat)
	const q = "UPDATE phpbb_users SET user_login_attempts = user_login_attempts + 1 WHERE user_id = 2 AND user_login_attempts < 100"
	plans, err := rw.Rewrite(q, rewrite.Session{DB: ruled})
	if err != nil || len(plans) != 1 || plans[0].Kind() != rewrite.KindIncrement {
		t.Fatalf("%s: planned %v %v, want a slotted increment", q, plans, err)
	}
	read := text("SELECT user_login_attempts FROM phpbb_users WHERE user_id = 2")
	var steps []step
	for i := range 30 {
		steps = append(steps, text(q))
		if i%10 == 9 {
			steps = append(steps, read)
		}
	}
	steps = append(steps,
		// Past the bound: on the base row, which the server allows.
		text("UPDATE phpbb_users SET user_login_attempts = user_login_attempts + 90 WHERE user_id = 2"),
		read,
		text(q), // 120 < 100: false, as directly
	)
	// Back down to 100 by 1s, slotted while the slot's share of the room
	// below takes them (one slot: 14 of them, then one on the base row,
	// and 5 more): the base value stays above the bounds (105) under a
	// negative slot (-5), where the condition is false (100 < 100): the
	// slotted +1 fails (the base value is beyond the bounds) and it runs
	// on the base row.
	for range 20 {
		steps = append(steps, text("UPDATE phpbb_users SET user_login_attempts = user_login_attempts - 1 WHERE user_id = 2"))
	}
	steps = append(steps, read, text(q), text(q), read,
		text("UPDATE phpbb_users SET user_login_attempts = user_login_attempts - 10 WHERE user_id = 2"),
		read,
	)
	for range 12 {
		steps = append(steps, text(q)) // 90 to 100, then unchanged
	}
	steps = append(steps, read,
		text("UPDATE phpbb_users SET user_login_attempts = 0 WHERE user_id = 2"),
		text(q), text(q), read,
		text("SELECT * FROM phpbb_users ORDER BY user_id"))
	st, _ := runDifferential(t, cat, plain, ruled, steps)
	if st.RewrittenWrites < 30 {
		t.Errorf("%d statements slotted, want at least the first 30 conditional increments", st.RewrittenWrites)
	}

	cappedAtOnce(t, rw, ruled, strings.Replace(q, "user_id = 2", "user_id = 3", 1), "SELECT user_login_attempts FROM phpbb_users WHERE user_id = 3", 100)
}

// onClients runs work on n connections to the proxy at addr (database db)
// at once, each with its index; the errors they return fail the test.
func onClients(t *testing.T, addr, db string, n int, work func(i int, c *client.Conn) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Connect(addr, testdb.User, testdb.Password, db)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if err := work(i, c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
