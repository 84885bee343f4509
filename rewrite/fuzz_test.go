package rewrite

import (
	"os"
	"path/filepath"
	"strings"
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
	f.Add("UPDATE repos SET downloAds=?WHERE 0#0", false, false)                               // comment at the end of a guarded WHERE
	f.Add("UPDATE repos SET downloads = 0 WHERE name = '\xbf\\' OR id = 2 -- '", false, false) // GBK: 0xbf5c is one character
	f.Fuzz(func(t *testing.T, sql string, ansi, noBackslash bool) {
		sess := Session{DB: "app", ANSIQuotes: ansi, NoBackslashEscapes: noBackslash}
		fuzzCheck(t, sql, sess)
		if strings.IndexFunc(sql, func(r rune) bool { return r >= 0x80 }) >= 0 {
			// Bytes >= 0x80: read it as GBK too, where they can hide a
			// backslash or a backquote.
			sess.Charset = "gbk"
			fuzzCheck(t, sql, sess)
		}
	})
}

// fuzzCheck is FuzzRewrite's check of sql in one session.
func fuzzCheck(t *testing.T, sql string, sess Session) {
	r := testRewriter(mariadb)
	plans, err := r.Rewrite(sql, sess)
	if !r.cat.Mentions(sql) && (plans != nil || err != nil) {
		t.Fatalf("a statement naming no ruled table was planned: %q", sql)
	}
	if err != nil || plans == nil {
		return
	}
	// The same statement parsed without the template cache, in UTF-8.
	u, tc, err := toUTF8(sql, sess.Charset)
	if err != nil {
		t.Fatalf("rewritten, but not convertible from %s: %q", sess.Charset, sql)
	}
	direct, derr := r.rewrite(u, sess, r.opts.Slot)
	if derr == nil {
		direct, derr = tc.plans(direct)
	}
	if derr != nil || len(direct) != len(plans) {
		t.Fatalf("template and parse disagree on %q: %v", sql, derr)
	}
	p := parser.New()
	mode := sessionMode(sess)
	p.SetSQLMode(mode)
	for i, pl := range plans {
		if direct[i].SQL() != pl.SQL() {
			t.Fatalf("template and parse disagree on %q:\n%s\n%s", sql, pl.SQL(), direct[i].SQL())
		}
		out := []string{pl.SQL()}
		if inc, ok := pl.Op.(*Increment); ok {
			out = append(out, inc.ProbeSQL)
		}
		for _, g := range pl.Guards() {
			out = append(out, g.KeysSQL)
		}
		if pl.Kind() == KindOriginal {
			continue
		}
		for _, q := range out {
			// Generated SQL is in the client's character set: read it
			// back in UTF-8, as the server reads it in that set.
			uq := q
			if sess.Charset != "" {
				if uq, _, err = toUTF8(q, sess.Charset); err != nil {
					t.Fatalf("rewrite of %q is not valid %s: %q", sql, sess.Charset, q)
				}
			}
			if _, _, err := p.Parse(uq, "", ""); err != nil {
				// A RETURNING clause (which the parser does not know) is
				// kept as the client wrote it: the rest must parse.
				if cut, ok := returningClause(p, uq, err); ok {
					if _, _, err = p.Parse(uq[:cut], "", ""); err == nil {
						continue
					}
				}
				// So are the clauses it does not know (INTO @v, AS alias).
				if toks, ok := lex(uq, sess); ok {
					if cutText, cuts := cutClauses(uq, toks); len(cuts) > 0 {
						if _, _, err = p.Parse(cutText, "", ""); err == nil {
							continue
						}
					}
				}
				t.Fatalf("rewrite of %q does not parse: %v\n%s", sql, err, q)
			}
		}
	}
}
