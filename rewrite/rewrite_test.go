package rewrite

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/dialect"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testCatalog: app.repos is ruled (downloads signed, stars unsigned;
// touch columns updated_at DATETIME(6) and seen_at TIMESTAMP); app.users is
// a plain table that also has a `downloads` column.
func testCatalog() *Catalog {
	return NewCatalog([]*Table{{
		Schema: "app", Name: "repos", Key: "id",
		Columns: []string{"id", "name", "owner_id", "downloads", "stars", "updated_at", "seen_at"},
		// The ranges of the columns of live_test.go's tables (INT, INT
		// UNSIGNED), as the catalog gives them.
		Counters: []Counter{{Name: "downloads", RecordType: 1, Min: "-2147483648", Max: "2147483647"},
			{Name: "stars", RecordType: 2, Unsigned: true, Min: "0", Max: "4294967295"},
			{Name: "updated_at", RecordType: 4, Touch: true, FSP: 6}, {Name: "seen_at", RecordType: 5, Touch: true, Timestamp: true}},
		SlotsTable: "slotted_counters", Slots: 100,
		Inserted: Inserted{Required: []string{"id"}, IntRanges: map[string][2]string{
			"id": {"-9223372036854775808", "9223372036854775807"}, "owner_id": {"-2147483648", "2147483647"},
			"downloads": {"-2147483648", "2147483647"}, "stars": {"0", "4294967295"}},
			StrLens: map[string]int{"name": 50}},
	}, {
		Schema: "app", Name: "pages", Key: "page_id",
		Columns:    []string{"page_id", "views"},
		Counters:   []Counter{{Name: "views", RecordType: 3, Min: "-2147483648", Max: "2147483647"}},
		SlotsTable: "slotted_counters", Slots: 16, Shadow: true,
	}, {
		Schema: "app", Name: "likes", Key: "id",
		Columns:    []string{"id", "n"},
		Counters:   []Counter{{Name: "n", RecordType: 6, Min: "-2147483648", Max: "2147483647"}},
		SlotsTable: "slotted_counters", Slots: 16, RolledUp: true, MaxStaleness: 10 * time.Second,
	}, {
		// A DECIMAL counter (Magento's stock quantity): slots in units of
		// 0.0001.
		Schema: "app", Name: "stock", Key: "id",
		Columns:    []string{"id", "qty"},
		Counters:   []Counter{{Name: "qty", RecordType: 10, Precision: 12, Scale: 4, Min: "-999999999999", Max: "999999999999"}},
		SlotsTable: "slotted_counters", Slots: 16,
	}, {
		// An AUTO_INCREMENT key and a UNIQUE key beside it (Magento's
		// search_query); hits has bounds the rule declares.
		Schema: "app", Name: "queries", Key: "id",
		Columns:    []string{"id", "q", "store", "hits"},
		Counters:   []Counter{{Name: "hits", RecordType: 7, Min: "-2147483648", Max: "2147483647", BoundMin: "0", BoundMax: "1000"}},
		SlotsTable: "slotted_counters", Slots: 16,
		UniqueKeys:  [][]string{{"q", "store"}},
		NullDefault: []string{"q"},
		Inserted: Inserted{KeyAutoIncrement: true, IntRanges: map[string][2]string{
			"id": {"0", "4294967295"}, "store": {"-2147483648", "2147483647"}, "hits": {"-2147483648", "2147483647"}},
			StrLens: map[string]int{"q": 50}},
	}, {
		// A key of a string and an integer (Mattermost's ChannelMembers):
		// records named by an encoding of the key, in the keyed slot
		// table.
		Schema: "app", Name: "members",
		KeyColumns: []KeyColumn{{Name: "channel", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"}, {Name: "user_id", Integer: true, Unsigned: true}},
		Columns:    []string{"channel", "user_id", "msgs", "note", "last_at"},
		Counters: []Counter{{Name: "msgs", RecordType: 8, Min: "-9223372036854775808", Max: "9223372036854775807"},
			{Name: "last_at", RecordType: 9, Touch: true, Integer: true, Min: "0", Max: "9223372036854775806"}},
		SlotsTable: "slotted_counters_keyed", Slots: 16,
		Inserted: Inserted{Required: []string{"channel", "user_id"}, IntRanges: map[string][2]string{
			"user_id": {"0", "4294967295"}, "msgs": {"-9223372036854775808", "9223372036854775807"}, "last_at": {"-9223372036854775808", "9223372036854775807"}},
			StrLens: map[string]int{"channel": 26, "note": 20}},
	}}, map[string][]string{"app.users": {"id", "name", "downloads"}})
}

func testRewriter(d dialect.Dialect) *Rewriter {
	return New(testCatalog(), Options{Dialect: d, Slot: func(int) int { return 42 }})
}

// goldenServers are the servers the golden files are written for, one file
// per server and input (testdata/NAME.SERVER.golden): the versions the test
// suite runs against (internal/testdb, SLOTPROXY_TEST_SERVER), whose live
// server executes every form of its file in TestGoldenLive.
var goldenServers = []struct {
	name    string // as in SLOTPROXY_TEST_SERVER
	dialect dialect.Dialect
}{
	{"mariadb", dialect.Parse("10.11.14-MariaDB")},
	{"mysql", dialect.Parse("9.7.4")},
}

// mariadb is the dialect of the tests that do not depend on the server.
var mariadb = goldenServers[0].dialect

// goldenFile is the golden file of input (testdata/NAME.sql) for server.
func goldenFile(input, server string) string {
	return strings.TrimSuffix(input, ".sql") + "." + server + ".golden"
}

// session is the Session a case asks for with "-- session:" lines:
// "ansi_quotes", "no_backslash_escapes", "db=NAME" (default app). A line
// may also say "fails_on=SERVER:CODE" (see goldenCase.failsOn).
func (c goldenCase) session() Session {
	sess := Session{DB: "app"}
	for _, opt := range c.opts {
		switch {
		case opt == "ansi_quotes":
			sess.ANSIQuotes = true
		case opt == "no_backslash_escapes":
			sess.NoBackslashEscapes = true
		case strings.HasPrefix(opt, "db="):
			sess.DB = strings.TrimPrefix(opt, "db=")
		}
	}
	return sess
}

// failsOn returns the error code with which the case's rewritten SQL is
// known to fail on server ("fails_on=mysql:1055"), and 0 when it must
// work: a limitation the README lists, which TestGoldenLive checks is still
// there (and reports once it is gone).
func (c goldenCase) failsOn(server string) uint16 {
	for _, opt := range c.opts {
		if v, ok := strings.CutPrefix(opt, "fails_on="+server+":"); ok {
			n, err := strconv.ParseUint(v, 10, 16)
			if err == nil {
				return uint16(n)
			}
		}
	}
	return 0
}

// readCases reads the cases of a golden input.
func readCases(t *testing.T, input string) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	return splitCases(string(data))
}

// TestGolden rewrites every case in testdata/*.sql for each golden server
// and compares the explanation with testdata/*.SERVER.golden. Cases are
// separated by lines starting with "-- case:"; a case may set a session
// (see goldenCase.session).
func TestGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.sql")
	if len(files) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, f := range files {
		cases := readCases(t, f)
		for _, srv := range goldenServers {
			t.Run(filepath.Base(goldenFile(f, srv.name)), func(t *testing.T) {
				r := testRewriter(srv.dialect)
				var out strings.Builder
				for _, c := range cases {
					plans, err := r.Rewrite(c.sql, c.session())
					out.WriteString("-- case: " + c.name + "\n" + c.sql + "\n=>\n" + Explain(plans, err) + "\n\n")
				}
				golden := goldenFile(f, srv.name)
				if *update {
					if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./rewrite -update)", err)
				}
				if got := out.String(); got != string(want) {
					t.Errorf("%s differs from %s; run go test ./rewrite -update and review the diff.\n%s", f, golden, firstDiff(got, string(want)))
				}
			})
		}
	}
}

type goldenCase struct {
	name string
	opts []string
	sql  string
}

func splitCases(data string) []goldenCase {
	var out []goldenCase
	for _, block := range strings.Split(data, "-- case:")[1:] {
		name, body, _ := strings.Cut(block, "\n")
		c := goldenCase{name: strings.TrimSpace(name)}
		var sql []string
		for _, line := range strings.Split(body, "\n") {
			if rest, ok := strings.CutPrefix(line, "-- session:"); ok {
				c.opts = append(c.opts, strings.Fields(rest)...)
				continue
			}
			sql = append(sql, line)
		}
		c.sql = strings.TrimSpace(strings.Join(sql, "\n"))
		out = append(out, c)
	}
	return out
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + itoa(i+1) + ":\n got:  " + gl + "\n want: " + wl
		}
	}
	return ""
}
