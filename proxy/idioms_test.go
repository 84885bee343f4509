package proxy_test

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
)

// idiomRules are the rules a user would write for the survey's tables
// (testdata/idioms/real-apps.sql, counter statements of real applications,
// classes A–G): every table with a primary key (of one integer column,
// several columns or a string) whose integer columns its statements
// increment, with the integer or DATETIME columns assigned alongside the
// increments (or GREATEST(v, itself)) under touch, the DECIMAL counters
// of tables with such a key, and the bound phpBB keeps its login attempts
// under (bounds: user_login_attempts max 100, which its WHERE
// user_login_attempts < 100 implies). Counters in text columns, and tables keyed by
// a prefix of a column or by no unique key, cannot have a rule.
var idiomRules = map[string]string{
	"phpbb.phpbb_topics":           "key: topic_id\ncounters: [topic_views, topic_posts_approved]\ntouch: [topic_last_view_time]",
	"phpbb.phpbb_attachments":      "key: attach_id\ncounters: [download_count]",
	"phpbb.phpbb_users":            "key: user_id\ncounters: [user_posts, user_login_attempts, user_new_privmsg, user_unread_privmsg]\ntouch: [user_lastpost_time, user_last_privmsg]\nbounds:\n  user_login_attempts: {max: 100}",
	"phpbb.phpbb_search_wordlist":  "key: word_id\ncounters: [word_count]",
	"smf.smf_topics":               "key: id_topic\ncounters: [num_replies, num_views]",
	"joomla.jos_content":           "key: id\ncounters: [hits]",
	"wordpress.wp_posts":           "key: ID\ncounters: [comment_count]",
	"magento.search_query":         "key: query_id\ncounters: [popularity]",
	"opencart.oc_product":          "key: product_id\ncounters: [quantity, viewed]",
	"django.sentry_groupedmessage": "key: id\ncounters: [times_seen]\ntouch: [last_seen]",
	"django.dtable_external_links": "key: id\ncounters: [view_cnt]",
	"longtail.posts":               "key: id\ncounters: [view_count]\ntouch: [updated_at]",
	"longtail.invoice_counters":    "key: year\ncounters: [counter]",
	// Keys of several columns or strings.
	"wordpress.wp_post_views":        "key: [type, period, id]\ncounters: [count]",
	"zabbix.ids":                     "key: [table_name, field_name]\ncounters: [nextid]",
	"mattermost.Channels":            "key: Id\ncounters: [TotalMsgCount, TotalMsgCountRoot]\ntouch: [LastPostAt, LastRootPostAt]",
	"mattermost.ChannelMembers":      "key: [ChannelId, UserId]\ncounters: [MsgCount, MentionCount, MentionCountRoot]\ntouch: [LastUpdateAt]",
	"magento.salesrule_coupon_usage": "key: [coupon_id, customer_id]\ncounters: [times_used]",
	"longtail.trending_topics":       "key: topic\ncounters: [count]",
	// DECIMAL counters.
	"magento.cataloginventory_stock_item": "key: item_id\ncounters: [qty]",
	"opencart.oc_statistics":              "key: statistics_id\ncounters: [value]",
}

// idiomSeeds are the rows of the tables of idiomRules whose keys are not
// one integer column, for the keys their statements name (the others get
// rows for a list of integers).
var idiomSeeds = map[string]string{
	"wordpress.wp_post_views":        "",
	"zabbix.ids":                     "",
	"mattermost.Channels":            "INSERT INTO Channels (Id, TotalMsgCount, TotalMsgCountRoot) VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 10, 2)",
	"mattermost.ChannelMembers":      "INSERT INTO ChannelMembers VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 'u1x9w8y3ujtbpmyq1r6f9x3ab7', 0, 0, 0, 0)",
	"magento.salesrule_coupon_usage": "",
	"longtail.trending_topics":       "INSERT INTO trending_topics VALUES ('mysql', 0), ('proxy', 3)",
	"magento.cataloginventory_stock_item": "INSERT INTO cataloginventory_stock_item (item_id, product_id, stock_id, qty, website_id) " +
		"VALUES (1, 14, 1, 100.0000, 0), (2, 27, 1, 5.5000, 0), (3, 28, 1, NULL, 0)",
	"opencart.oc_statistics": "INSERT INTO oc_statistics (statistics_id, code, value) VALUES (1, 'order_sale', 1000.2500), (2, 'order_processing', 0)",
}

// idiomStatement is one statement of the survey: its app's database, its
// class letters (as the survey's comment gives them), and its text.
type idiomStatement struct {
	app, classes, sql string
}

var idiomClass = regexp.MustCompile(`\[([A-G](?:[/+][A-G])*)`)

// readIdioms parses testdata/idioms/real-apps.sql: the CREATE TABLE
// statements per app, and the other statements in order. Lines kept as
// "-- [mysql8-only] STATEMENT" are statements on MySQL only.
func readIdioms(t *testing.T, mysql bool) (ddl map[string][]string, stmts []idiomStatement) {
	t.Helper()
	b, err := os.ReadFile("testdata/idioms/real-apps.sql")
	if err != nil {
		t.Fatal(err)
	}
	ddl = map[string][]string{}
	app, classes := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "-- [mysql8-only] "); ok && mysql {
			if f := strings.Fields(rest); len(f) > 0 && slices.Contains([]string{"insert", "update", "select", "replace"}, strings.ToLower(f[0])) {
				line = rest
			}
		}
		if strings.HasPrefix(line, "--") {
			// A class applies to the statements after it, up to the
			// next class or app (it may precede the table's CREATE).
			if m := idiomClass.FindStringSubmatch(line); m != nil {
				classes = m[1]
			}
			continue
		}
		if line == "" {
			continue
		}
		sql := strings.TrimSuffix(line, ";")
		upper := strings.ToUpper(sql)
		switch {
		case strings.HasPrefix(upper, "CREATE DATABASE"):
		case strings.HasPrefix(upper, "USE "):
			app = strings.TrimPrefix(strings.TrimSpace(sql[4:]), "idioms_")
			classes = ""
		case strings.HasPrefix(upper, "CREATE TABLE"):
			ddl[app] = append(ddl[app], sql)
		case app == "":
			// SET NAMES, sql_mode before the first app: on every
			// connection (see TestRealAppIdioms).
		default:
			stmts = append(stmts, idiomStatement{app: app, classes: classes, sql: sql})
		}
	}
	return ddl, stmts
}

// TestRealAppIdioms replays the survey's counter statements of real
// applications (issue 22) directly and through a proxy with the rules a
// user would write, on both servers: every response must be the same, and
// it reports, per class, how many increments of ruled tables are slotted.
// The floor below keeps what is slotted today slotted.
func TestRealAppIdioms(t *testing.T) {
	mysql := !strings.Contains(strings.ToLower(testdb.Shared().Version), "mariadb")
	ddl, stmts := readIdioms(t, mysql)
	db := testdb.Shared()
	plainDB := func(app string) string { return "idioms_" + app + "_p" }
	ruledDB := func(app string) string { return "idioms_" + app + "_r" }
	var ruleTexts []string
	apps := make([]string, 0, len(ddl))
	for app := range ddl {
		apps = append(apps, app)
	}
	sort.Strings(apps)
	for _, app := range apps {
		for _, schema := range []string{plainDB(app), ruledDB(app)} {
			stmts := append([]string{"DROP DATABASE IF EXISTS " + schema, "CREATE DATABASE " + schema, "USE " + schema, "SET SESSION sql_mode = ''"}, ddl[app]...)
			if err := db.Exec(stmts...); err != nil {
				t.Fatal(err)
			}
		}
		for _, create := range ddl[app] {
			name := strings.Trim(strings.Fields(create)[2], "`")
			rule, ok := idiomRules[app+"."+name]
			if !ok {
				continue
			}
			ruleTexts = append(ruleTexts, "table: "+ruledDB(app)+"."+name+"\n"+rule+"\nslots: 8\n")
			// Rows for the keys the statements name, the same on both
			// sides.
			key := strings.TrimPrefix(strings.SplitN(rule, "\n", 2)[0], "key: ")
			for _, schema := range []string{plainDB(app), ruledDB(app)} {
				seed, keyed := idiomSeeds[app+"."+name]
				if !keyed {
					seed = fmt.Sprintf("INSERT IGNORE INTO %s.%s (`%s`) VALUES (2), (3), (5), (7), (11), (12), (13), (42), (77), (123), (1234), (2025)", schema, name, key)
				}
				if seed == "" {
					continue // its statements insert its rows
				}
				if err := db.Exec("SET SESSION sql_mode = ''", "USE "+schema, seed); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rules := strings.Join(ruleTexts, "\n---\n")
	if err := catalog.Migrate(t.Context(), touchAdmin(t), ruleSet(t, rules), "slotted_counters", io.Discard); err != nil {
		t.Fatal(err)
	}
	cat := loadCatalog(t, rules)
	rw := newRewriter(cat)
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = rw })
	connect := func(addr string) *client.Conn {
		c, err := client.Connect(addr, testdb.User, testdb.Password, "", func(c *client.Conn) error {
			return c.SetCapability(gomysql.CLIENT_MULTI_STATEMENTS)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		for _, q := range []string{"SET NAMES utf8mb4", "SET SESSION sql_mode = ''"} {
			if _, err := c.Execute(q); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	direct, proxied := connect(db.Addr), connect(p.addr)

	type tally struct{ increments, slotted int }
	byClass := map[string]*tally{}
	var notSlotted, absolutes []string
	app := ""
	for i, st := range stmts {
		if st.app != app {
			app = st.app
			if _, err := direct.Execute("USE " + plainDB(app)); err != nil {
				t.Fatal(err)
			}
			if _, err := proxied.Execute("USE " + ruledDB(app)); err != nil {
				t.Fatal(err)
			}
		}
		want := strings.ReplaceAll(renderTyped(direct.Execute(st.sql)), plainDB(app), ruledDB(app))
		got := renderTyped(proxied.Execute(st.sql))
		if got != want {
			t.Errorf("statement %d (%s, class %s) %q:\n proxy:  %s\n direct: %s", i, app, st.classes, st.sql, got, want)
		}
		if strings.HasPrefix(want, "ERR ") || strings.HasPrefix(want, "error:") {
			// The server refuses it (MySQL: Laravel's unqualified counter
			// beside a row alias is ambiguous, 1052): nothing to slot.
			continue
		}
		plans, err := rw.Rewrite(st.sql, rewrite.Session{DB: ruledDB(app)})
		if err != nil || len(plans) != 1 || plans[0].Table == nil && plans[0].Kind() != rewrite.KindIncrement {
			continue // a statement of no ruled table
		}
		pl := plans[0]
		if k := pl.Kind(); k == rewrite.KindRead || k == rewrite.KindOriginal && !isWriteOthers(pl) {
			continue // reads, and statements that write no ruled table
		}
		if pl.Kind() == rewrite.KindGuarded && !strings.HasPrefix(pl.Reason, "increment not slotted") {
			// A write that increments nothing (WordPress's recount, an
			// absolute SET): it replaces the total, on the base rows.
			absolutes = append(absolutes, fmt.Sprintf("[%s] %s", st.classes, st.sql))
			continue
		}
		for _, c := range strings.FieldsFunc(st.classes, func(r rune) bool { return r == '+' || r == '/' }) {
			if byClass[c] == nil {
				byClass[c] = &tally{}
			}
			byClass[c].increments++
			if pl.Kind() == rewrite.KindIncrement && !narrowPlan(pl) {
				byClass[c].slotted++
			}
		}
		switch {
		case pl.Kind() != rewrite.KindIncrement:
			notSlotted = append(notSlotted, fmt.Sprintf("[%s] %s: %s (%s)", st.classes, st.sql, pl.Kind(), pl.Reason))
		case narrowPlan(pl):
			notSlotted = append(notSlotted, fmt.Sprintf("[%s] %s: on the base row (a counter too narrow for slots)", st.classes, st.sql))
		}
	}
	// Roll-up, then every ruled table the same on both sides.
	if _, err := rollup.Once(t.Context(), touchAdmin(t), cat, rollup.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, tb := range cat.Tables() {
		app := strings.TrimSuffix(strings.TrimPrefix(tb.Schema, "idioms_"), "_r")
		q := fmt.Sprintf("SELECT * FROM %s.%s ORDER BY 1", "%s", tb.Name)
		want := strings.ReplaceAll(renderTyped(direct.Execute(fmt.Sprintf(q, plainDB(app)))), plainDB(app), ruledDB(app))
		got := renderTyped(proxied.Execute(fmt.Sprintf(q, ruledDB(app))))
		if got != want {
			t.Errorf("%s after the replay:\n proxy:  %s\n direct: %s", tb.Qualified(), got, want)
		}
	}
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var report strings.Builder
	total, slotted := 0, 0
	for _, c := range classes {
		fmt.Fprintf(&report, " %s %d/%d", c, byClass[c].slotted, byClass[c].increments)
		total += byClass[c].increments
		slotted += byClass[c].slotted
	}
	t.Logf("%d statements replayed, identical; increments of ruled tables slotted by class:%s (%d of %d class memberships)", len(stmts), report.String(), slotted, total)
	t.Logf("increments not slotted:\n%s", strings.Join(notSlotted, "\n"))
	t.Logf("writes of ruled tables that increment nothing (exact, on the base rows):\n%s", strings.Join(absolutes, "\n"))
	// What is slotted today, per class: a floor.
	floor := map[string]int{"A": 11, "B": 5, "C": 1, "D": 7, "E": 2, "F": 8, "G": 1}
	for c, n := range floor {
		if byClass[c] == nil || byClass[c].slotted < n {
			t.Errorf("class %s: fewer increments slotted than before (%v, want at least %d)", c, byClass[c], n)
		}
	}
}

// narrowPlan reports whether p increments a counter too narrow for any
// slot to take a delta (rewrite.Counter.Narrow): the executor runs it on
// the base row.
func narrowPlan(p rewrite.Plan) bool {
	var deltas []rewrite.Delta
	switch op := p.Op.(type) {
	case *rewrite.Increment:
		deltas = op.Deltas
	case *rewrite.UpsertIncrement:
		deltas = op.Increment.Deltas
	}
	for _, d := range deltas {
		for i := range p.Table.Counters {
			if c := &p.Table.Counters[i]; strings.EqualFold(c.Name, d.Column) && c.Narrow() {
				return true
			}
		}
	}
	return false
}

// isWriteOthers reports whether p writes a ruled table's other columns.
func isWriteOthers(p rewrite.Plan) bool {
	_, ok := p.Op.(*rewrite.WriteOthers)
	return ok
}
