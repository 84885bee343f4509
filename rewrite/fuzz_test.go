package rewrite

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pingcap/tidb/pkg/parser"
)

// FuzzRewrite: any SQL, in any of the modes that change how SQL is read:
// no panic; every statement the rewriter produces parses again; a statement
// that names no ruled table is never touched; templates give the same plans
// as parsing.
func FuzzRewrite(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.sql")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		for _, c := range splitCases(string(data)) {
			f.Add(c.sql, false, false)
		}
	}
	f.Add("UPDATE repos SET downloads = downloads + 1 WHERE id = 'a\\' OR 1=1 -- '", false, false)
	f.Add("UPDATE repos SET downloads = downloads + 1 WHERE id = 'a\\' OR 1=1 -- '", false, true)
	f.Add(`SELECT "downloads" FROM "repos" WHERE "id" = 1`, true, false)
	f.Add("UPDATE repos SET downloAds=?WHERE 0#0", false, false) // comment at the end of a guarded WHERE
	f.Fuzz(func(t *testing.T, sql string, ansi, noBackslash bool) {
		sess := Session{DB: "app", ANSIQuotes: ansi, NoBackslashEscapes: noBackslash}
		r := testRewriter(false)
		plans, err := r.Rewrite(sql, sess)
		if !r.cat.Mentions(sql) && (plans != nil || err != nil) {
			t.Fatalf("a statement naming no ruled table was planned: %q", sql)
		}
		if err != nil || plans == nil {
			return
		}
		direct, derr := r.rewrite(sql, sess, r.opts.Slot)
		if derr != nil || len(direct) != len(plans) {
			t.Fatalf("template and parse disagree on %q: %v", sql, derr)
		}
		p := parser.New()
		mode := sessionMode(sess)
		p.SetSQLMode(mode)
		for i, pl := range plans {
			if direct[i].SQL != pl.SQL {
				t.Fatalf("template and parse disagree on %q:\n%s\n%s", sql, pl.SQL, direct[i].SQL)
			}
			out := []string{pl.SQL}
			if pl.Increment != nil {
				out = append(out, pl.Increment.CheckSQL)
			}
			if pl.Guard != nil {
				out = append(out, pl.Guard.KeysSQL)
			}
			if pl.Kind == KindOriginal {
				continue
			}
			for _, q := range out {
				if _, _, err := p.Parse(q, "", ""); err != nil {
					t.Fatalf("rewrite of %q does not parse: %v\n%s", sql, err, q)
				}
			}
		}
	})
}
