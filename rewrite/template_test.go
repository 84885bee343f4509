package rewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/slotproxy/slotproxy/internal/dialect"
)

// TestTemplatesMatchPlanning: for every golden statement, and for a variant
// with different integer literals, the plans served from a template equal
// the plans of parsing the statement itself.
func TestTemplatesMatchPlanning(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.sql")
	num := regexp.MustCompile(`\b[1-9][0-9]*\b`)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range splitCases(string(data)) {
			sess := c.session()
			variant := num.ReplaceAllStringFunc(c.sql, func(s string) string {
				v, _ := strconv.Atoi(s)
				return strconv.Itoa(v*7 + 3)
			})
			for _, srv := range goldenServers {
				r := testRewriter(srv.dialect)
				for _, sql := range []string{c.sql, variant, c.sql} {
					got, gerr := r.Rewrite(sql, sess)
					want, werr := r.rewrite(sql, sess, r.opts.Slot)
					if r.cat.Mentions(sql) == false {
						want, werr = nil, nil
					}
					if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(batchesMapped(got), batchesMapped(want)) {
						t.Errorf("%s: %q\ntemplate: %s\nparse:    %s", c.name, sql, Explain(got, gerr), Explain(want, werr))
					}
					n++
				}
			}
		}
	}
	t.Logf("%d statements compared", n)
}

func TestTemplateKeySkipsUnsafeLiterals(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		lits int
	}{
		{"UPDATE repos SET downloads = downloads + 1 WHERE id = 5", 2},
		{"UPDATE repos SET downloads = downloads + 0 WHERE id = 5", 1},
		{"SELECT 'a 5 b', `c5`, t1.x, 1.5, 1e3, 0x15, 007, .5, x'15' FROM repos", 0},
		{"SELECT * FROM repos LIMIT 10 /* 12 */ -- 13", 1},
		{"SELECT 99999999999999999999 FROM repos", 0},
		{"SELECT \"5\" FROM repos", 0},
	} {
		_, spans, _ := templateKey(tc.sql, Session{}, nil, nil)
		if len(spans) != tc.lits {
			t.Errorf("%q: %d literal spans %v, want %d", tc.sql, len(spans), spans, tc.lits)
		}
	}
}

// TestCoalesceKey: increments of one record of the same shape share a
// coalescing key whatever their deltas and slots, and WithDelta puts the
// sum in place of the delta; other shapes have none.
func TestCoalesceKey(t *testing.T) {
	rw := testRewriter(dialect.Parse("10.11.14-MariaDB"))
	plan := func(sql string, slot int) *Increment {
		t.Helper()
		plans, err := rw.rewrite(sql, Session{DB: "app"}, func(int) int { return slot })
		if err != nil || len(plans) != 1 {
			t.Fatalf("%s: %v %v", sql, plans, err)
		}
		inc, ok := plans[0].Op.(*Increment)
		if !ok {
			t.Fatalf("%s: planned as %s", sql, plans[0].Kind())
		}
		return inc
	}
	a, b := plan("UPDATE repos SET downloads = downloads + 1 WHERE id = 7", 3), plan("UPDATE repos SET downloads = downloads + 25 WHERE id = 7", 5)
	if a.CoalesceKey() == "" || a.CoalesceKey() != b.CoalesceKey() {
		t.Fatalf("keys differ:\n%s\n%s", a.CoalesceKey(), b.CoalesceKey())
	}
	sum, ok := a.WithDelta("26")
	if !ok || !strings.Contains(sum, "(26) AS `_slotproxy_n`") || !strings.Contains(sum, "(SELECT CAST(3 AS SIGNED) AS `_slotproxy_slot`)") {
		t.Fatalf("WithDelta: %v %s", ok, sum)
	}
	if k := plan("UPDATE repos SET downloads = downloads - 2 WHERE id = 7", 9).CoalesceKey(); k != a.CoalesceKey() {
		t.Errorf("a decrement of the record: key %q", k) // its delta is -(2)
	}
	for _, other := range []string{
		"UPDATE repos SET downloads = downloads + 1 WHERE id = 8",
		"UPDATE repos SET stars = stars + 1 WHERE id = 7",
	} {
		if k := plan(other, 3).CoalesceKey(); k == "" || k == a.CoalesceKey() {
			t.Errorf("%s: key %q", other, k)
		}
	}
	for _, none := range []string{
		"UPDATE repos SET downloads = downloads + 1 WHERE id IN (7, 8)",
		"UPDATE repos SET downloads = downloads + 1, stars = stars + 1 WHERE id = 7",
		"UPDATE repos SET downloads = downloads + ? WHERE id = 7",
	} {
		if k := plan(none, 3).CoalesceKey(); k != "" {
			t.Errorf("%s: coalescable (%q)", none, k)
		}
	}
}

// TestSorted: an increment that may write several slot rows (several
// records, several counters or touch columns of one) has a Sorted form,
// which tests every slot row before inserting any; one slot row (one
// record by its key, integer or keyed, or by a UNIQUE key, one counter)
// has none.
func TestSorted(t *testing.T) {
	rw := testRewriter(dialect.Parse("10.11.14-MariaDB"))
	for sql, want := range map[string]bool{
		"UPDATE repos SET downloads = downloads + 1 WHERE id = 7":                                                false,
		"UPDATE repos SET downloads = downloads + 1, owner_id = 0 WHERE id = 7":                                  false,
		"UPDATE repos SET downloads = downloads + 1, owner_id = 0 WHERE id IN (7, 8)":                            true,
		"UPDATE repos SET downloads = downloads + 1, stars = stars + 1 WHERE id = 7":                             true,
		"UPDATE members SET msgs = msgs + 1, last_at = GREATEST(5, last_at) WHERE channel = 'a' AND user_id = 1": true,
		"UPDATE members SET msgs = msgs + 1 WHERE channel = 'a' AND user_id = 1":                                 false,
		"UPDATE repos SET downloads = downloads + 1 WHERE id IN (7, 8)":                                          true,
		"UPDATE repos SET downloads = downloads + 1 WHERE name = 'x'":                                            true,
	} {
		plans, err := rw.rewrite(sql, Session{DB: "app"}, nil)
		if err != nil || len(plans) != 1 {
			t.Fatalf("%s: %v %v", sql, plans, err)
		}
		inc, ok := plans[0].Op.(*Increment)
		if !ok {
			t.Fatalf("%s: planned as %s (%s)", sql, plans[0].Kind(), plans[0].Reason)
		}
		if got := inc.Sorted != ""; got != want {
			t.Errorf("%s: Sorted %v, want %v", sql, got, want)
		}
		if want && !strings.Contains(inc.Sorted, " ORDER BY IF(") {
			t.Errorf("%s: Sorted without its ORDER BY: %s", sql, inc.Sorted)
		}
	}
}

// TestPlainIncrementsServedFromTemplates: the hot statements (an increment
// or decrement by an integer literal, of one key or an IN list) are planned
// once per shape and then served from their template, not parsed again per
// statement: a single literal delta is not an expression of literals whose
// plan depends on its values (a regression made every increment pay a
// full parse, 21 µs instead of 5).
func TestPlainIncrementsServedFromTemplates(t *testing.T) {
	r := testRewriter(mariadb)
	sess := Session{DB: "app"}
	for _, sql := range []string{
		"UPDATE repos SET downloads = downloads + 1 WHERE id = 12345",
		"UPDATE repos SET downloads = downloads - 3 WHERE id = 7",
		"UPDATE repos SET downloads = downloads + -2 WHERE id = 7",
		"UPDATE repos SET downloads = downloads + 1 WHERE id IN (1, 2, 3)",
	} {
		if _, err := r.Rewrite(sql, sess); err != nil {
			t.Fatalf("%q: %v", sql, err)
		}
		key, _, ok := templateKey(sql, sess, nil, nil)
		if !ok {
			t.Fatalf("%q: no template key", sql)
		}
		if tp := r.templates.get(key); tp == nil || tp.plans == nil {
			t.Errorf("%q: planned from its own values every time (template %+v), want a template", sql, tp)
		}
	}
	// An expression of literals is planned from its values.
	sql := "UPDATE repos SET downloads = downloads + (2 * 3) WHERE id = 7"
	if _, err := r.Rewrite(sql, sess); err != nil {
		t.Fatal(err)
	}
	key, _, _ := templateKey(sql, sess, nil, nil)
	if tp := r.templates.get(key); tp == nil || tp.plans != nil {
		t.Errorf("%q: template %+v, want one that says: planned from its values", sql, tp)
	}
}

// batchesMapped returns plans with each increment's batch statement mapped
// (Increment.batchSQL, which a template defers), so that plans compare
// with reflect.DeepEqual.
func batchesMapped(plans []Plan) []Plan {
	out := slices.Clone(plans)
	mapped := func(o *Increment) *Increment {
		c := *o
		c.batch, c.batchMap = c.batchSQL(), nil
		return &c
	}
	for i, p := range out {
		switch op := p.Op.(type) {
		case *Increment:
			out[i].Op = mapped(op)
		case *UpsertIncrement:
			c := *op
			c.Increment = mapped(op.Increment)
			out[i].Op = &c
		case *UpsertRows:
			c := *op
			c.Rows = slices.Clone(op.Rows)
			for j, r := range c.Rows {
				u := *r
				u.Increment = mapped(r.Increment)
				c.Rows[j] = &u
			}
			out[i].Op = &c
		}
	}
	return out
}
