package rules

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// file is the name the Parse tests give their data.
const file = "rules/repos.yaml"

// messages returns the text of every *Error in err, which must be made of
// them alone.
func messages(t *testing.T, err error) []string {
	t.Helper()
	errs := Errors(err)
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	if len(errs) == 0 && err != nil {
		t.Fatalf("error %q holds no *Error", err)
	}
	if got, want := strings.Join(out, "\n"), err.Error(); got != want {
		t.Fatalf("error text %q is not its *Errors joined: %q", want, got)
	}
	return out
}

func TestParseValid(t *testing.T) {
	long := strings.Repeat("é", MaxNameLen)
	for _, tc := range []struct {
		name, data string
		want       Rule
	}{
		{
			name: "minimal",
			data: "table: app.repos\nkey: id\ncounters: [downloads, stars]\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"downloads", 3}, {"stars", 3}},
				Slots:    100, Mode: "active", KeyLine: 2, CountersLine: 3},
		},
		{
			name: "a key of several columns",
			data: "table: app.views\nkey: [user_id, \"`day`\"]\ncounters: [n]\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "views", Keys: []string{"user_id", "day"},
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3},
		},
		{
			name: "a list of one key column",
			data: "table: app.repos\nkey: [id]\ncounters: [n]\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3},
		},
		{
			name: "every key, block list, comments, document marker, any order",
			data: "---\n# repos\ncounters:   # the hot ones\n  - downloads\n  - stars\n\nmode: shadow\nslots: 7\nkey: id\ntable: app.repos\n",
			want: Rule{File: file, Line: 10, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"downloads", 4}, {"stars", 5}},
				Slots:    7, Mode: "shadow", KeyLine: 9, CountersLine: 3, SlotsLine: 8, ModeLine: 7},
		},
		{
			name: "mode active, slots bounds low",
			data: "table: app.repos\nkey: id\ncounters: [n]\nslots: 1\nmode: active\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 1, Mode: "active",
				KeyLine: 2, CountersLine: 3, SlotsLine: 4, ModeLine: 5},
		},
		{
			name: "slots upper bound with sign",
			data: "table: app.repos\nkey: id\ncounters: [n]\nslots: +65535\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 65535, Mode: "active",
				KeyLine: 2, CountersLine: 3, SlotsLine: 4},
		},
		{
			name: "empty slots and mode keep defaults",
			data: "table: app.repos\nkey: id\ncounters: [n]\nslots:\nmode: ~\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active",
				KeyLine: 2, CountersLine: 3, SlotsLine: 4, ModeLine: 5},
		},
		{
			name: "quoted YAML strings",
			data: "table: 'app.repos'\nkey: \"id\"\ncounters: [\"stars\"]\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"stars", 3}}, Slots: 100, Mode: "active",
				KeyLine: 2, CountersLine: 3},
		},
		{
			name: "backquoted names",
			data: "table: \"`my.schema`.`t``x y`\"\nkey: \"`the id`\"\ncounters: [\"`a.b`\", \"`c`\", d]\n",
			want: Rule{File: file, Line: 1, Schema: "my.schema", Table: "t`x y", Key: "the id",
				Counters: []Counter{{"a.b", 3}, {"c", 3}, {"d", 3}}, Slots: 100, Mode: "active",
				KeyLine: 2, CountersLine: 3},
		},
		{
			name: "backquoted schema, bare table",
			data: "table: \"`my.schema`.repos\"\nkey: id\ncounters: [n]\n",
			want: Rule{File: file, Line: 1, Schema: "my.schema", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3},
		},
		{
			name: "unicode names of the longest length, names that look like numbers",
			data: "table: " + long + "." + long + "\nkey: 1\ncounters: [$n, 2]\n",
			want: Rule{File: file, Line: 1, Schema: long, Table: long, Key: "1",
				Counters: []Counter{{"$n", 3}, {"2", 3}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3},
		},
		{
			name: "aliases",
			data: "table: &t app.repos\nkey: id\ncounters: &c\n  - stars\nslots: &s 5\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"stars", 4}}, Slots: 5, Mode: "active", KeyLine: 2, CountersLine: 3, SlotsLine: 5},
		},
		{
			name: "flow mapping",
			data: "{table: app.repos, key: id, counters: [a, b]}\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"a", 1}, {"b", 1}}, Slots: 100, Mode: "active", KeyLine: 1, CountersLine: 1},
		},
		{
			name: "touch columns",
			data: "table: app.repos\nkey: id\ncounters: [downloads]\ntouch: [updated_at, \"`seen at`\"]\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"downloads", 3}}, Touch: []Column{{"updated_at", 4}, {"seen at", 4}},
				Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3, TouchLine: 4},
		},
		{
			name: "an empty touch list",
			data: "table: app.repos\nkey: id\ncounters: [n]\ntouch: []\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3, TouchLine: 4},
		},
		{
			name: "CRLF line ends, no final newline",
			data: "table: app.repos\r\nkey: id\r\ncounters:\r\n- a",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"a", 4}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3},
		},
		{
			name: "rolled-up reads with a staleness bound",
			data: "table: app.repos\nkey: id\ncounters: [n]\nreads: rolled_up\nmax_staleness: 1m30s\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", Reads: ReadsRolledUp, MaxStaleness: 90 * time.Second,
				KeyLine: 2, CountersLine: 3, ReadsLine: 4, MaxStalenessLine: 5},
		},
		{
			name: "bounds of counters",
			data: "table: app.users\nkey: id\ncounters: [attempts, posts]\nbounds:\n  attempts: {max: 100}\n  posts: {min: -5, max: 18446744073709551615}\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "users", Key: "id",
				Counters: []Counter{{"attempts", 3}, {"posts", 3}}, Slots: 100, Mode: "active", Reads: ReadsExact,
				Bounds:  []Bound{{Counter: "attempts", Max: "100", Line: 5}, {Counter: "posts", Min: "-5", Max: "18446744073709551615", Line: 6}},
				KeyLine: 2, CountersLine: 3, BoundsLine: 4},
		},
		{
			name: "rolled-up reads, default staleness",
			data: "table: app.repos\nkey: id\ncounters: [n]\nreads: rolled_up\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", Reads: ReadsRolledUp, MaxStaleness: DefaultMaxStaleness,
				KeyLine: 2, CountersLine: 3, ReadsLine: 4},
		},
		{
			name: "exact reads said out loud",
			data: "table: app.repos\nkey: id\ncounters: [n]\nreads: exact\n",
			want: Rule{File: file, Line: 1, Schema: "app", Table: "repos", Key: "id",
				Counters: []Counter{{"n", 3}}, Slots: 100, Mode: "active", KeyLine: 2, CountersLine: 3, ReadsLine: 4},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(file, []byte(tc.data))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tc.want.Reads == "" {
				tc.want.Reads = ReadsExact
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", *got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const valid = "table: app.repos\nkey: id\ncounters: [n]\n"
	for _, tc := range []struct {
		name, data string
		want       []string // full error texts, in order
	}{
		// The file as a whole.
		{"empty file", "",
			[]string{`1: empty rule file; want a mapping with keys table, key and counters`}},
		{"comments only", "# nothing\n# here\n",
			[]string{`1: empty rule file; want a mapping with keys table, key and counters`}},
		{"document marker only", "---\n",
			[]string{`1: empty rule file; want a mapping with keys table, key and counters`}},
		{"a list", "# rule\n- table: app.repos\n",
			[]string{`2: want a mapping with keys table, key and counters, got a list`}},
		{"a scalar", "app.repos\n",
			[]string{`1: want a mapping with keys table, key and counters, got "app.repos"`}},
		{"two documents", valid + "---\n" + valid,
			[]string{`4: more than one YAML document; want one rule per file`}},
		{"invalid UTF-8", "table: app.repos\nkey: i\xffd\n",
			[]string{`2: not valid UTF-8 (byte 24); rule files must be UTF-8`}},

		// YAML syntax.
		{"unclosed flow list", "table: app.repos\ncounters: [a\nkey: id\n",
			[]string{`2: invalid YAML: did not find expected ',' or ']'`}},
		{"mapping value in plain scalar", "table: app.repos\nkey: a: b\n",
			[]string{`2: invalid YAML: mapping values are not allowed in this context`}},
		{"tab indentation", "table: app.repos\ncounters:\n\t- a\n",
			[]string{`3: invalid YAML: found character that cannot start any token`}},
		{"bad indentation", "table: app.repos\ncounters:\n  - a\n - b\n",
			[]string{`4: invalid YAML: did not find expected key`}},
		{"unterminated quote at the end", "table: app.repos\nkey: \"id\n",
			[]string{`2: invalid YAML: found unexpected end of stream`}},
		{"unknown anchor", "table: app.repos\nkey: id\ncounters: *c\n",
			[]string{`3: invalid YAML: unknown anchor 'c' referenced`}},

		// Keys.
		{"unknown key, near a known one", valid + "slot: 5\n",
			[]string{`4: unknown key "slot" (did you mean "slots"?)`}},
		{"unknown key, capitalised", "Table: app.repos\nkey: id\ncounters: [n]\n",
			[]string{`1: unknown key "Table" (did you mean "table"?)`, `1: missing required key "table"`}},
		{"unknown key, far from any", valid + "colour: blue\n",
			[]string{`4: unknown key "colour" (want one of: bounds, counters, key, max_staleness, mode, reads, slots, table, touch)`}},
		// Read modes.
		{"unknown read mode", valid + "reads: fast\n",
			[]string{`4: reads: unknown read mode "fast" (want exact or rolled_up)`}},
		{"read mode misspelt", valid + "reads: rolled-up\n",
			[]string{`4: reads: unknown read mode "rolled-up"; did you mean rolled_up?`}},
		// Bounds.
		{"bounds of a column that is no counter", valid + "bounds:\n  m: {max: 3}\n",
			[]string{`5: bounds: "m" is not one of the rule's counters`}},
		{"bounds not a mapping", valid + "bounds: [n]\n",
			[]string{`4: bounds: want a mapping of counters to their bounds, such as {attempts: {max: 100}}, got a list`}},
		{"bound of an unknown kind", valid + "bounds:\n  n: {top: 3}\n",
			[]string{`5: bounds: n: unknown key "top"; want min or max`}},
		{"bound that is no whole number", valid + "bounds:\n  n: {max: 1.5}\n",
			[]string{`5: bounds: n: max: want a whole number, got "1.5"`}},
		{"bound quoted", valid + "bounds:\n  n: {max: '10'}\n",
			[]string{`5: bounds: n: max: want a whole number, got "10"`}},
		{"bounds the wrong way round", valid + "bounds:\n  n: {min: 10, max: 3}\n",
			[]string{`5: bounds: n: min 10 is above max 3`}},
		{"bounds of a counter twice", valid + "bounds:\n  n: {max: 3}\n  N: {min: 0}\n",
			[]string{`6: bounds: "N" is listed twice (first on line 5)`}},
		{"empty bounds of a counter", valid + "bounds:\n  n: {}\n",
			[]string{`5: bounds: n: want {min: m, max: n} (either or both), got no bound`}},
		{"staleness without rolled-up reads", valid + "max_staleness: 5s\n",
			[]string{`4: max_staleness: only with reads: rolled_up (reads are exact)`}},
		{"staleness without a unit", valid + "reads: rolled_up\nmax_staleness: 5\n",
			[]string{`5: max_staleness: "5" has no unit; want a duration, such as 5s`}},
		{"staleness that is no duration", valid + "reads: rolled_up\nmax_staleness: soon\n",
			[]string{`5: max_staleness: "soon" is not a duration; want one such as 10s or 1m`}},
		{"staleness too small", valid + "reads: rolled_up\nmax_staleness: 1ms\n",
			[]string{`5: max_staleness: 1ms is out of range (want 100ms to 24h0m0s)`}},
		{"duplicate key", valid + "key: other\n",
			[]string{`4: duplicate key "key" (first on line 2)`}},
		{"key that is a list", valid + "[a]: b\n",
			[]string{`4: want a key name, got a list`}},
		{"missing table", "# rule\nkey: id\ncounters: [n]\n",
			[]string{`2: missing required key "table"`}},
		{"missing key", "table: app.repos\ncounters: [n]\n",
			[]string{`1: missing required key "key"`}},
		{"missing counters", "table: app.repos\nkey: id\n",
			[]string{`1: missing required key "counters"`}},
		{"empty mapping", "{}\n", []string{
			`1: missing required key "table"`,
			`1: missing required key "key"`,
			`1: missing required key "counters"`}},

		// table.
		{"table empty", "key: id\ntable:\ncounters: [n]\n",
			[]string{`2: table: no value; want schema.table, such as app.repos`}},
		{"table empty string", "table: ''\nkey: id\ncounters: [n]\n",
			[]string{`1: table: "" is not schema-qualified; want schema.table, such as app.repos`}},
		{"table a list", "table: [app, repos]\nkey: id\ncounters: [n]\n",
			[]string{`1: table: want schema.table, such as app.repos, got a list`}},
		{"table not schema-qualified", "table: repos\nkey: id\ncounters: [n]\n",
			[]string{`1: table: "repos" is not schema-qualified; want schema.table, such as app.repos`}},
		{"table backquoted, not schema-qualified", "table: \"`repos`\"\nkey: id\ncounters: [n]\n",
			[]string{"1: table: \"`repos`\" is not schema-qualified; want schema.table, such as app.repos"}},
		{"table without schema", "table: .repos\nkey: id\ncounters: [n]\n",
			[]string{`1: table: ".repos" has no schema name before the '.'; want schema.table, such as app.repos`}},
		{"table without table", "table: app.\nkey: id\ncounters: [n]\n",
			[]string{`1: table: "app." has no table name after the '.'; want schema.table, such as app.repos`}},
		{"table with three parts", "table: app.my.repos\nkey: id\ncounters: [n]\n",
			[]string{"1: table: \"app.my.repos\" has more than one '.'; backquote the name that contains a dot, as in `my.schema`.repos"}},
		{"table with text after a backquoted name", "table: \"`app`x.repos\"\nkey: id\ncounters: [n]\n",
			[]string{"1: table: unexpected \"x.repos\" after the schema name in \"`app`x.repos\"; want schema.table, such as app.repos"}},
		{"table with text after a backquoted table name", "table: \"app.`repos`x\"\nkey: id\ncounters: [n]\n",
			[]string{"1: table: unexpected \"x\" after the table name in \"app.`repos`x\"; want schema.table, such as app.repos"}},
		{"table with unterminated backquote", "table: \"app.`repos\"\nkey: id\ncounters: [n]\n",
			[]string{"1: table: unterminated backquote in \"`repos\""}},
		{"table with stray backquote", "table: ap`p.repos\nkey: id\ncounters: [n]\n",
			[]string{"1: table: name \"ap`p\" has a stray backquote; backquote a whole name, as in `my name`"}},
		{"table with whitespace", "table: app.my repos\nkey: id\ncounters: [n]\n",
			[]string{"1: table: name \"my repos\" contains whitespace; backquote it if that is intended, as in `my name`"}},
		{"table with empty backquoted schema", "table: \"``.repos\"\nkey: id\ncounters: [n]\n",
			[]string{`1: table: schema name is empty`}},
		{"table with empty backquoted table", "table: \"app.``\"\nkey: id\ncounters: [n]\n",
			[]string{`1: table: table name is empty`}},
		{"table name too long", "table: app." + strings.Repeat("t", 65) + "\nkey: id\ncounters: [n]\n",
			[]string{`1: table: table name "` + strings.Repeat("t", 65) + `" is 65 characters long; MySQL allows at most 64`}},
		{"schema name with NUL", "table: \"a\\0b.repos\"\nkey: id\ncounters: [n]\n",
			[]string{`1: table: schema name "a\x00b" contains a NUL character`}},
		{"table name outside the BMP", "table: app.r😀\nkey: id\ncounters: [n]\n",
			[]string{`1: table: table name "r😀" contains U+1F600, which is outside the Basic Multilingual Plane; MySQL does not allow it in names`}},
		{"schema name ending in a space", "table: \"`app `.repos\"\nkey: id\ncounters: [n]\n",
			[]string{`1: table: schema name "app " ends with a space; MySQL does not allow that`}},

		// key.
		{"key empty", "table: app.repos\nkey:\ncounters: [n]\n",
			[]string{`2: key: no value; want the primary key column, or a list of its columns`}},
		{"key an empty list", "table: app.repos\nkey: []\ncounters: [n]\n",
			[]string{`2: key: empty list; want the primary key's columns`}},
		{"key a list with a column twice", "table: app.repos\nkey: [a, A]\ncounters: [n]\n",
			[]string{`2: key: "A" is listed twice`}},
		{"key a list with a mapping", "table: app.repos\nkey: [a, {b: c}]\ncounters: [n]\n",
			[]string{`2: key: item 2: want a column name, got a mapping`}},
		{"counter in a key of several", "table: app.repos\nkey: [a, b]\ncounters: [b]\n",
			[]string{`3: counters: "b" is a key column, it cannot also be a counter`}},
		{"key empty string", "table: app.repos\nkey: ''\ncounters: [n]\n",
			[]string{`2: key: column name is empty`}},
		{"key qualified", "table: app.repos\nkey: repos.id\ncounters: [n]\n",
			[]string{`2: key: "repos.id" contains a '.'; write the bare column name (backquoted if the name itself contains a dot)`}},
		{"key with text after the backquoted name", "table: app.repos\nkey: \"`id`x\"\ncounters: [n]\n",
			[]string{"2: key: unexpected \"x\" after the column name in \"`id`x\""}},
		{"key too long", "table: app.repos\nkey: " + strings.Repeat("k", 65) + "\ncounters: [n]\n",
			[]string{`2: key: column name "` + strings.Repeat("k", 65) + `" is 65 characters long; MySQL allows at most 64`}},

		// counters.
		{"counters empty", "table: app.repos\nkey: id\ncounters:\n",
			[]string{`3: counters: no value; want a list of counter columns, such as [downloads, stars]`}},
		{"counters empty list", "table: app.repos\nkey: id\ncounters: []\n",
			[]string{`3: counters: empty list; want at least one counter column`}},
		{"counters a scalar", "table: app.repos\nkey: id\ncounters: downloads, stars\n",
			[]string{`3: counters: want a list of counter columns, such as [downloads, stars], got "downloads, stars"`}},
		{"counters a mapping", "table: app.repos\nkey: id\ncounters:\n  stars: 1\n",
			[]string{`4: counters: want a list of counter columns, such as [downloads, stars], got a mapping`}},
		{"counter empty", "table: app.repos\nkey: id\ncounters:\n  - a\n  -\n  - b\n",
			[]string{`5: counters: item 2 is empty; want a column name`}},
		{"counter a mapping", "table: app.repos\nkey: id\ncounters:\n  - a\n  - b: 1\n",
			[]string{`5: counters: item 2: want a column name, got a mapping`}},
		{"counter qualified", "table: app.repos\nkey: id\ncounters: [repos.stars]\n",
			[]string{`3: counters: "repos.stars" contains a '.'; write the bare column name (backquoted if the name itself contains a dot)`}},
		// touch.
		{"touch a scalar", "table: app.repos\nkey: id\ncounters: [n]\ntouch: updated_at\n",
			[]string{`4: touch: want a list of columns assigned together with increments, such as [updated_at], got "updated_at"`}},
		{"touch the key", "table: app.repos\nkey: id\ncounters: [n]\ntouch: [ID]\n",
			[]string{`4: touch: "ID" is the key column, it cannot also be a touch column`}},
		{"touch a counter", "table: app.repos\nkey: id\ncounters: [n]\ntouch:\n  - updated_at\n  - N\n",
			[]string{`6: touch: "N" is a counter, it cannot also be a touch column`}},
		{"touch twice", "table: app.repos\nkey: id\ncounters: [n]\ntouch:\n  - updated_at\n  - Updated_At\n",
			[]string{`6: touch: "Updated_At" is listed twice (first as "updated_at" on line 5)`}},
		{"touch item empty", "table: app.repos\nkey: id\ncounters: [n]\ntouch:\n  -\n",
			[]string{`5: touch: item 1 is empty; want a column name`}},
		{"touch qualified", "table: app.repos\nkey: id\ncounters: [n]\ntouch: [repos.updated_at]\n",
			[]string{`4: touch: "repos.updated_at" contains a '.'; write the bare column name (backquoted if the name itself contains a dot)`}},
		{"counter with whitespace", "table: app.repos\nkey: id\ncounters: [a b]\n",
			[]string{"3: counters: name \"a b\" contains whitespace; backquote it if that is intended, as in `my name`"}},
		{"counter empty backquoted", "table: app.repos\nkey: id\ncounters: [\"``\"]\n",
			[]string{`3: counters: column name is empty`}},
		{"counter too long", "table: app.repos\nkey: id\ncounters:\n  - a\n  - " + strings.Repeat("c", 65) + "\n",
			[]string{`5: counters: column name "` + strings.Repeat("c", 65) + `" is 65 characters long; MySQL allows at most 64`}},
		{"counter listed twice", "table: app.repos\nkey: id\ncounters:\n  - stars\n  - downloads\n  - stars\n",
			[]string{`6: counters: "stars" is listed twice (first as "stars" on line 4)`}},
		{"counter listed twice, other case", "table: app.repos\nkey: id\ncounters: [stars, Stars]\n",
			[]string{`3: counters: "Stars" is listed twice (first as "stars" on line 3)`}},
		{"counter listed twice, backquoted", "table: app.repos\nkey: id\ncounters: [stars, \"`stars`\"]\n",
			[]string{`3: counters: "stars" is listed twice (first as "stars" on line 3)`}},
		{"counter listed twice, by alias", "table: app.repos\nkey: id\ncounters: [&c stars, *c]\n",
			[]string{`3: counters: "stars" is listed twice (first as "stars" on line 3)`}},
		{"counter is the key", "table: app.repos\nkey: id\ncounters: [id, stars]\n",
			[]string{`3: counters: "id" is the key column, it cannot also be a counter`}},
		{"counter is the key, other case", "table: app.repos\nkey: id\ncounters:\n  - stars\n  - ID\n",
			[]string{`5: counters: "ID" is the key column, it cannot also be a counter`}},

		// slots.
		{"slots zero", valid + "slots: 0\n", []string{`4: slots: 0 is out of range; want 1 to 65535`}},
		{"slots too many", valid + "slots: 65536\n", []string{`4: slots: 65536 is out of range; want 1 to 65535`}},
		{"slots negative", valid + "slots: -1\n", []string{`4: slots: -1 is out of range; want 1 to 65535`}},
		{"slots beyond int", valid + "slots: 99999999999999999999\n",
			[]string{`4: slots: 99999999999999999999 is out of range; want 1 to 65535`}},
		{"slots a string", valid + "slots: \"100\"\n", []string{`4: slots: want a whole number from 1 to 65535, got "100"`}},
		{"slots a word", valid + "slots: many\n", []string{`4: slots: want a whole number from 1 to 65535, got "many"`}},
		{"slots a fraction", valid + "slots: 1.5\n", []string{`4: slots: want a whole number from 1 to 65535, got "1.5"`}},
		{"slots in hex", valid + "slots: 0x10\n", []string{`4: slots: want a whole number from 1 to 65535, got "0x10"`}},
		{"slots with a leading zero", valid + "slots: 0100\n", []string{`4: slots: want a whole number from 1 to 65535, got "0100"`}},
		{"slots a list", valid + "slots: [1]\n", []string{`4: slots: want a whole number from 1 to 65535, got a list`}},

		// mode.
		{"mode unknown", valid + "mode: fast\n", []string{`4: mode: unknown mode "fast" (want active or shadow)`}},
		{"mode capitalised", valid + "mode: Active\n", []string{`4: mode: unknown mode "Active" (want active or shadow)`}},
		{"mode a list", valid + "mode: [active]\n", []string{`4: mode: want active or shadow, got a list`}},

		// Several at once, reported in line order.
		{"several problems", "mode: fast\nslots: 0\ncounters: [id, id]\nkey: id\ntable: repos\nextra: 1\n", []string{
			`1: mode: unknown mode "fast" (want active or shadow)`,
			`2: slots: 0 is out of range; want 1 to 65535`,
			`3: counters: "id" is the key column, it cannot also be a counter`,
			`3: counters: "id" is the key column, it cannot also be a counter`,
			`5: table: "repos" is not schema-qualified; want schema.table, such as app.repos`,
			`6: unknown key "extra" (want one of: bounds, counters, key, max_staleness, mode, reads, slots, table, touch)`,
		}},
		{"bad key spares the counters check against it", "table: app.repos\nkey: a.b\ncounters: [n, n]\n", []string{
			`2: key: "a.b" contains a '.'; write the bare column name (backquoted if the name itself contains a dot)`,
			`3: counters: "n" is listed twice (first as "n" on line 3)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(file, []byte(tc.data))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", *r)
			}
			if r != nil {
				t.Errorf("Parse returned a rule with its error: %+v", *r)
			}
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = file + ":" + w
			}
			if got := messages(t, err); !reflect.DeepEqual(got, want) {
				t.Errorf("Parse errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if len(want) == 1 {
				e, ok := err.(*Error)
				if !ok {
					t.Fatalf("single problem returned as %T, want *Error", err)
				}
				if e.File != file || !strings.HasPrefix(tc.want[0], fmt.Sprintf("%d: ", e.Line)) {
					t.Errorf("Error{File: %q, Line: %d}, want %s", e.File, e.Line, want[0])
				}
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Msg: "m"}, "a.yaml:3: m"},
		{Error{File: "a.yaml", Msg: "m"}, "a.yaml: m"},
		{Error{Line: 3, Msg: "m"}, "line 3: m"},
		{Error{Msg: "m"}, "m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
	if got := Errors(nil); got != nil {
		t.Errorf("Errors(nil) = %v", got)
	}
	wrapped := fmt.Errorf("loading: %w", &Error{File: "a", Line: 1, Msg: "m"})
	if got := Errors(wrapped); len(got) != 1 || got[0].Msg != "m" {
		t.Errorf("Errors(wrapped) = %v", got)
	}
	joined := fmt.Errorf("loading: %w", errors.Join(&Error{Msg: "a"}, errors.New("other"), &Error{Msg: "b"}))
	if got := Errors(joined); len(got) != 2 || got[0].Msg != "a" || got[1].Msg != "b" {
		t.Errorf("Errors(wrapped join) = %v", got)
	}
}

// rule returns a valid hand-built rule for schema.table.
func rule(file string, line int, schema, table string, counters ...string) *Rule {
	r := &Rule{File: file, Line: line, Schema: schema, Table: table, Key: "id", KeyLine: line + 1}
	for _, c := range counters {
		r.Counters = append(r.Counters, Counter{Name: c, Line: line + 2})
	}
	return r
}

func TestNewSet(t *testing.T) {
	a := rule("a.yaml", 1, "app", "repos", "stars", "Downloads")
	b := rule("b.yaml", 2, "app", "issues", "comments")
	c := rule("c.yaml", 1, "App", "Users", "logins")
	s, err := NewSet(a, b, c)
	if err != nil {
		t.Fatalf("NewSet: %v", err)
	}
	if s.Len() != 3 {
		t.Errorf("Len = %d, want 3", s.Len())
	}
	var names []string
	for _, r := range s.Rules() {
		names = append(names, r.Name())
		if r.Slots != DefaultSlots || r.Mode != ModeActive {
			t.Errorf("%s: Slots %d, Mode %q; want the defaults", r.Name(), r.Slots, r.Mode)
		}
	}
	if want := []string{"App.Users", "app.issues", "app.repos"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Rules = %v, want %v", names, want)
	}

	// The Set holds copies: changing the inputs or the returned slice does
	// not change it.
	a.Counters[0].Name = "changed"
	a.Table = "changed"
	s.Rules()[0] = nil
	if r := s.Lookup("app", "repos"); r == nil || r.Counters[0].Name != "stars" || r.File != "a.yaml" {
		t.Errorf("Lookup(app, repos) after changing the input = %+v", r)
	}
	if s.Rules()[0] == nil {
		t.Error("Rules shares its slice")
	}

	for _, tc := range []struct {
		schema, table string
		want          string // file of the rule, or "" for none
	}{
		{"app", "repos", "a.yaml"},
		{"APP", "Repos", "a.yaml"},
		{"app", "users", "c.yaml"},
		{"app", "nope", ""},
		{"other", "repos", ""},
		{"app.repos", "", ""},
	} {
		r := s.Lookup(tc.schema, tc.table)
		if got := ""; r != nil {
			got = r.File
			if got != tc.want {
				t.Errorf("Lookup(%q, %q) = %s, want %q", tc.schema, tc.table, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Lookup(%q, %q) = nil, want %s", tc.schema, tc.table, tc.want)
		}
	}

	for _, tc := range []struct {
		schema, table, column string
		want                  bool
	}{
		{"app", "repos", "stars", true},
		{"app", "repos", "STARS", true},
		{"app", "repos", "downloads", true},
		{"App", "Repos", "Downloads", true},
		{"app", "repos", "id", false},
		{"app", "repos", "comments", false},
		{"app", "issues", "comments", true},
		{"app", "nope", "stars", false},
	} {
		if got := s.Counter(tc.schema, tc.table, tc.column); got != tc.want {
			t.Errorf("Counter(%q, %q, %q) = %v, want %v", tc.schema, tc.table, tc.column, got, tc.want)
		}
	}
	r := s.Lookup("app", "repos")
	if !r.HasCounter("DOWNLOADS") || r.HasCounter("id") {
		t.Errorf("HasCounter wrong for %+v", r)
	}
}

func TestNewSetEmptyAndNil(t *testing.T) {
	s, err := NewSet()
	if err != nil || s == nil || s.Len() != 0 || len(s.Rules()) != 0 || s.Lookup("a", "b") != nil || s.Counter("a", "b", "c") {
		t.Errorf("NewSet() = %+v, %v; want an empty Set", s, err)
	}
	var n *Set
	if n.Len() != 0 || n.Rules() != nil || n.Lookup("a", "b") != nil || n.Counter("a", "b", "c") {
		t.Error("a nil Set is not empty")
	}
}

func TestNewSetErrors(t *testing.T) {
	bad := rule("d.yaml", 4, "app", "bad", "id")
	bad.Slots = 70000
	bad.Mode = "loud"
	noLines := &Rule{Schema: "app", Table: "x", Key: "id"}
	for _, tc := range []struct {
		name  string
		rules []*Rule
		want  []string
	}{
		{"duplicate table", []*Rule{
			rule("a.yaml", 1, "app", "repos", "n"),
			rule("b.yaml", 2, "app", "issues", "n"),
			rule("c.yaml", 3, "app", "repos", "m"),
		}, []string{`c.yaml:3: table: app.repos is already ruled by a.yaml:1`}},
		{"duplicate table, other case", []*Rule{
			rule("a.yaml", 1, "app", "repos", "n"),
			rule("b.yaml", 2, "APP", "Repos", "n"),
		}, []string{`b.yaml:2: table: APP.Repos is already ruled by a.yaml:1 (as app.repos; table names match ignoring case)`}},
		{"duplicate backquoted table", []*Rule{
			rule("a.yaml", 1, "my.app", "repos", "n"),
			rule("b.yaml", 2, "my.app", "repos", "n"),
		}, []string{"b.yaml:2: table: `my.app`.repos is already ruled by a.yaml:1"}},
		{"nil rule", []*Rule{rule("a.yaml", 1, "app", "repos", "n"), nil},
			[]string{`rule 2 of 2 is nil`}},
		{"invalid rule", []*Rule{bad}, []string{
			`d.yaml:6: counters: "id" is the key column, it cannot also be a counter`,
			`d.yaml: slots: 70000 is out of range; want 1 to 65535`,
			`d.yaml: mode: unknown mode "loud" (want active or shadow)`,
		}},
		{"invalid rule without lines", []*Rule{noLines}, []string{
			`counters: empty list; want at least one counter column`,
		}},
		{"invalid names", []*Rule{{File: "e.yaml", Line: 1, Schema: "", Table: "t\x00", Key: "", KeyLine: 2,
			Counters: []Counter{{"", 3}, {"a ", 4}}}}, []string{
			`e.yaml:1: table: schema name is empty`,
			`e.yaml:1: table: table name "t\x00" contains a NUL character`,
			`e.yaml:2: key: column name is empty`,
			`e.yaml:3: counters: column name is empty`,
			`e.yaml:4: counters: column name "a " ends with a space; MySQL does not allow that`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSet(tc.rules...)
			if err == nil {
				t.Fatalf("NewSet succeeded with %d rules", s.Len())
			}
			if s != nil {
				t.Error("NewSet returned a Set with its error")
			}
			if got := messages(t, err); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("NewSet errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// writeFiles creates dir/name with content for each pair.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"repos.yaml":  "table: app.repos\nkey: id\ncounters: [downloads, stars]\n",
		"issues.yml":  "# issues\ntable: app.issues\nkey: issue_id\ncounters:\n  - comments\nslots: 16\nmode: shadow\n",
		"Users.yaml":  "table: auth.users\nkey: id\ncounters: [logins]\n",
		"README.md":   "not a rule",
		"old.yaml~":   "not: a rule",
		"notes.txt":   "table: x",
		".hidden.yml": "broken: [",
		"sub/x.yaml":  "broken: [",
	})
	// A directory named like a rule file is skipped; a link to a rule file
	// is read.
	if err := os.Mkdir(filepath.Join(dir, "dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	writeFiles(t, other, map[string]string{"target": "table: app.linked\nkey: id\ncounters: [n]\n"})
	if err := os.Symlink(filepath.Join(other, "target"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}

	s, err := LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	var got []string
	for _, r := range s.Rules() {
		got = append(got, fmt.Sprintf("%s %s:%d key=%s counters=%v slots=%d mode=%s",
			r.Name(), filepath.Base(r.File), r.Line, r.Key, r.Counters, r.Slots, r.Mode))
	}
	want := []string{
		"app.issues issues.yml:2 key=issue_id counters=[{comments 5}] slots=16 mode=shadow",
		"app.linked link.yaml:1 key=id counters=[{n 3}] slots=100 mode=active",
		"app.repos repos.yaml:1 key=id counters=[{downloads 3} {stars 3}] slots=100 mode=active",
		"auth.users Users.yaml:1 key=id counters=[{logins 3}] slots=100 mode=active",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadDir rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := s.Lookup("app", "repos"); r == nil || r.File != filepath.Join(dir, "repos.yaml") {
		t.Errorf("Lookup(app, repos) = %+v", r)
	}
	if !s.Counter("AUTH", "USERS", "Logins") || s.Counter("auth", "users", "id") {
		t.Error("Counter wrong for auth.users")
	}
}

func TestLoadDirEmpty(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"README": "rules go here"})
	s, err := LoadDir(dir)
	if err != nil || s == nil || s.Len() != 0 {
		t.Errorf("LoadDir(empty) = %+v, %v; want an empty Set", s, err)
	}
}

func TestLoadDirMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	s, err := LoadDir(dir)
	if err == nil || s != nil {
		t.Fatalf("LoadDir(missing) = %+v, %v; want an error", s, err)
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Errorf("LoadDir(missing) error %q does not name the directory or wrap fs.ErrNotExist", err)
	}

	// A file is not a directory.
	f := filepath.Join(t.TempDir(), "f.yaml")
	writeFiles(t, filepath.Dir(f), map[string]string{"f.yaml": "table: a.b\n"})
	if _, err := LoadDir(f); err == nil {
		t.Error("LoadDir(a file) succeeded")
	}
}

func TestLoadDirErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml":       "table: app.repos\nkey: id\ncounters: [stars]\n",
		"b.yaml":       "table: app.users\nkey: id\ncounters: [id]\nslots: 0\n",
		"c.yml":        "# same table as a.yaml\n\ntable: APP.repos\nkey: id\ncounters: [forks]\n",
		"d.yaml":       "table: app.issues\nkey: id\ncounters: [n\n",
		"e.yaml":       "",
		"f.yaml":       "table: app.ok\nkey: id\ncounters: [n]\n",
		"g.yaml":       "table: app.repos\nkey: id\ncounters: [stars]\n",
		"h.yaml":       "table: app.ok\nkey: id\ncounters: [n]\nextra: 1\n",
		"notrule.yaml": "table: app.ok\nkey: id\ncounters: [m]\n",
	})
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	s, err := LoadDir(dir)
	if err == nil {
		t.Fatalf("LoadDir succeeded with %d rules", s.Len())
	}
	if s != nil {
		t.Error("LoadDir returned a Set with its error")
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	want := []string{
		p("b.yaml") + `:3: counters: "id" is the key column, it cannot also be a counter`,
		p("b.yaml") + `:4: slots: 0 is out of range; want 1 to 65535`,
		p("c.yml") + `:3: table: APP.repos is already ruled by ` + p("a.yaml") + `:1 (as app.repos; table names match ignoring case)`,
		p("d.yaml") + `:3: invalid YAML: did not find expected ',' or ']'`,
		p("dangling.yaml") + `: cannot read: no such file or directory`,
		p("e.yaml") + `:1: empty rule file; want a mapping with keys table, key and counters`,
		p("g.yaml") + `:1: table: app.repos is already ruled by ` + p("a.yaml") + `:1`,
		p("h.yaml") + `:4: unknown key "extra" (want one of: bounds, counters, key, max_staleness, mode, reads, slots, table, touch)`,
		p("notrule.yaml") + `:1: table: app.ok is already ruled by ` + p("f.yaml") + `:1`,
	}
	got := messages(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadDir errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the dangling link's error does not wrap fs.ErrNotExist")
	}
	var e *Error
	if !errors.As(err, &e) || e.File != p("b.yaml") || e.Line != 3 {
		t.Errorf("errors.As found %+v, want the first problem", e)
	}
}

func TestSetConcurrentUse(t *testing.T) {
	var rs []*Rule
	for i := range 50 {
		rs = append(rs, rule(fmt.Sprintf("r%02d.yaml", i), 1, "app", fmt.Sprintf("t%d", i), "n", "m"))
	}
	s, err := NewSet(rs...)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				table := fmt.Sprintf("T%d", (i+g)%60)
				r := s.Lookup("APP", table)
				if c := s.Counter("app", table, "N"); c != (r != nil) {
					t.Errorf("Counter(app, %s, N) = %v with Lookup %v", table, c, r)
				}
				_ = s.Rules()
				_ = s.Len()
			}
		})
	}
	wg.Wait()
}

func TestLookupDoesNotAllocate(t *testing.T) {
	s, err := NewSet(rule("a.yaml", 1, "app", "repos", "stars"))
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if !s.Counter("app", "repos", "stars") || s.Lookup("app", "other") != nil {
			t.Fatal("wrong answer")
		}
	})
	if allocs != 0 {
		t.Errorf("Lookup and Counter on lower-case names allocate %v times", allocs)
	}
}
