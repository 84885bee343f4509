package rewrite

import (
	"strings"
	"testing"
)

func TestToUTF8(t *testing.T) {
	for _, tc := range []struct {
		name, sql, charset string
		want               string // "" with wantErr
		wantErr            bool
	}{
		{"ascii in gbk", `SELECT 'a\'b'`, "gbk", `SELECT 'a\'b'`, false},
		{"gbk escape byte is a trail byte", "SELECT '\xbf\\' OR 1", "gbk", "SELECT '縗' OR 1", false},
		{"gbk lone lead byte", "SELECT '\xbf' OR 1", "gbk", "", true},
		{"utf-8 bytes read as gbk", "SELECT '中\\' OR 1", "gbk", "SELECT '涓璡' OR 1", false},
		{"sjis 0x95 0x5c", "SELECT '\x95\\'", "sjis", "SELECT '表'", false},
		{"cp932 like sjis", "SELECT '\x95\\'", "cp932", "SELECT '表'", false},
		{"big5 0xa4 0x5c", "SELECT '\xa4\\'", "big5", "SELECT '么'", false},
		{"latin1 keeps bytes", "SELECT '\x95\\' OR 1", "latin1", "SELECT '\x95\\' OR 1", false},
		{"utf8mb4 keeps invalid bytes", "SELECT '\x95\\' OR 1", "utf8mb4", "SELECT '\x95\\' OR 1", false},
		{"unknown charset, backslash", "SELECT '\x95\\' OR 1", "", "", true},
		{"unknown charset, backquote", "SELECT `\x95`", "", "", true},
		{"unknown charset, valid utf-8", "SELECT '中\\'", "", "SELECT '中\\'", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, tr, err := toUTF8(tc.sql, tc.charset)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("toUTF8(%q, %q) = %q, want an error", tc.sql, tc.charset, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("toUTF8(%q, %q) = %q, %v; want %q", tc.sql, tc.charset, got, err, tc.want)
			}
			back, err := tr.plans([]Plan{{Op: &Read{SQL: got}, Original: got}})
			if err != nil || back[0].SQL() != tc.sql || back[0].Original != tc.sql {
				t.Fatalf("converting back: %+v, %v; want %q", back, err, tc.sql)
			}
		})
	}
}

// TestRewriteGBK: a GBK statement whose string hides a backslash in a
// two-byte character is rewritten by where the server ends its strings,
// and comes back in GBK.
func TestRewriteGBK(t *testing.T) {
	r := testRewriter(mariadb)
	sql := "UPDATE repos SET downloads = 5 WHERE name = '\xbf\\' OR id = 2 -- '"
	plans, err := r.Rewrite(sql, Session{DB: "app", Charset: "gbk"})
	if err != nil || len(plans) != 1 {
		t.Fatalf("Rewrite: %v, %v", plans, err)
	}
	p := plans[0]
	if p.Kind() != KindGuarded || p.Original != sql {
		t.Fatalf("plan %v for %q, original %q", p.Kind(), sql, p.Original)
	}
	if keys := p.Guards()[0].KeysSQL; !strings.Contains(keys, "'\xbf\\' OR id = 2") {
		t.Fatalf("guard does not read the statement as the server does: %q", keys)
	}
	if _, err := r.Rewrite(sql, Session{DB: "app"}); err == nil {
		t.Fatalf("rewritten with the character set unknown")
	}
}

// TestRewriteGBKGuards: every statement of a plan comes back in the
// client's character set: a write of other columns' refresh guard, and
// the READ COMMITTED restricted form of a guarded write.
func TestRewriteGBKGuards(t *testing.T) {
	r := testRewriter(mariadb)
	for _, sql := range []string{
		"UPDATE repos SET name = 'x' WHERE name = '\xbf\\' OR id = 2",
		"UPDATE repos SET downloads = 5 WHERE name = '\xbf\\' AND id > 2",
	} {
		plans, err := r.Rewrite(sql, Session{DB: "app", Charset: "gbk"})
		if err != nil || len(plans) != 1 {
			t.Fatalf("Rewrite(%q): %v, %v", sql, plans, err)
		}
		p := plans[0]
		restrict := ""
		if g, ok := p.Op.(*Guarded); ok {
			restrict = g.Restrict
		}
		_, refresh := p.Op.(*WriteOthers)
		for _, q := range []string{guardSQL(p.Guards()[0]), restrict} {
			if q != "" && !strings.Contains(q, "'\xbf\\'") {
				t.Errorf("%q: %q is not in the client's character set", sql, q)
			}
		}
		if !refresh && restrict == "" {
			t.Errorf("%q: neither a refresh guard nor a restricted form", sql)
		}
	}
}

func guardSQL(g *Guard) string {
	if g == nil {
		return ""
	}
	return g.KeysSQL
}

// TestSessionCut: the first statement that changes what a rewrite depends
// on, when more statements follow it in the same query.
func TestSessionCut(t *testing.T) {
	r := testRewriter(mariadb)
	for _, tc := range []struct {
		sql  string
		want int
	}{
		{"USE other; SELECT downloads FROM repos", 0},
		{"SELECT 1; SET SESSION sql_mode = 'ANSI_QUOTES'; UPDATE repos SET downloads = 0 WHERE name = \"x\"", 1},
		{"SET @@sql_mode = ''; SELECT downloads FROM repos", 0},
		{"SET NAMES gbk; SELECT downloads FROM repos", 0},
		{"SET CHARACTER SET gbk; SELECT downloads FROM repos", 0},
		{"SET character_set_client = big5; SELECT downloads FROM repos", 0},
		{"EXECUTE s; SELECT downloads FROM repos", 0},
		{"SET @x = 1; SELECT downloads FROM repos", -1},
		{"SELECT downloads FROM repos; USE other", -1}, // nothing after it
		// GBK text after SET NAMES gbk that UTF-8 cannot read: the rest is
		// one plan, planned once SET NAMES has run.
		{"SET NAMES gbk; UPDATE repos SET downloads = 8 WHERE name = '\xbf\\' OR id = 2 -- '\n; SELECT downloads FROM repos", 0},
	} {
		plans, err := r.Rewrite(tc.sql, Session{DB: "app", Charset: "utf8mb4"})
		if err != nil {
			t.Fatalf("%q: %v", tc.sql, err)
		}
		if got := SessionCut(plans); got != tc.want {
			t.Errorf("SessionCut(%q) = %d, want %d", tc.sql, got, tc.want)
		}
		if tc.want >= 0 && !Changed(plans) {
			t.Errorf("%q: not Changed, so the proxy would send it as it is", tc.sql)
		}
		// The statement texts tile the query.
		var all strings.Builder
		for _, p := range plans {
			all.WriteString(p.Original)
		}
		if all.String() != tc.sql {
			t.Errorf("%q: the plans' texts are %q", tc.sql, all.String())
		}
	}
}
