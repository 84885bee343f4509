package proxy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Differences the differential fuzzer (internal/difffuzz) found, as it
// printed them, each run again as a differential test: the schema, the
// rules and the steps, directly and through a proxy, every answer compared
// (runDifferential). Every connection waits at most 1 s for a row lock, so
// a step that waits through the proxy where it does not directly fails
// with 1205 there, and the two sides differ. (The fuzzer runs a blocked
// step on while later steps of other connections run; here each step runs
// to its end, so a step that waits on both sides ends with 1205 on both.)

// reproducerStep matches a step line: its number, connection and text.
var reproducerStep = regexp.MustCompile(`^\s*\d+ \[(c\d+|admin)\] (.*)$`)

// parseReproducer reads a reproducer: the schema's statements, the rule
// files (naming the schema ruled) and the steps.
func parseReproducer(t *testing.T, repro, ruled string) (ddl []string, rule string, steps []step) {
	t.Helper()
	section := ""
	var rules []string
	for _, line := range strings.Split(repro, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- schema"):
			section = "schema"
			continue
		case trimmed == "-- rules:":
			section = "rules"
			rules = []string{""}
			continue
		case strings.HasPrefix(trimmed, "-- steps"):
			section = "steps"
			continue
		case strings.HasPrefix(trimmed, "-- difference"), strings.HasPrefix(trimmed, "difffuzz reproducer"):
			section = ""
			continue
		}
		switch section {
		case "schema":
			if trimmed != "" {
				ddl = append(ddl, strings.TrimSuffix(trimmed, ";"))
			}
		case "rules":
			if trimmed == "---" {
				rules = append(rules, "")
				continue
			}
			if trimmed != "" {
				rules[len(rules)-1] += strings.ReplaceAll(trimmed, "difffuzz_ruled", ruled) + "\n"
			}
		case "steps":
			m := reproducerStep.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[1] == "admin" {
				steps = append(steps, text(touchRollup))
				continue
			}
			conn, _ := strconv.Atoi(m[1][1:])
			sql := m[2]
			st := step{conn: conn}
			if i := strings.Index(sql, "  -- one COM_QUERY (multi-statement)"); i >= 0 {
				sql, st.multi = sql[:i], true
			}
			if i := strings.Index(sql, "  -- prepared, args ["); i >= 0 {
				args := strings.TrimSuffix(sql[i+len("  -- prepared, args ["):], "]")
				sql = sql[:i]
				st.args = []any{}
				for _, a := range strings.Fields(args) {
					if n, err := strconv.ParseInt(a, 10, 64); err == nil {
						st.args = append(st.args, n)
					} else if u, err := strconv.ParseUint(a, 10, 64); err == nil {
						st.args = append(st.args, u)
					} else {
						st.args = append(st.args, a)
					}
				}
			}
			st.sql = sql
			steps = append(steps, st)
		}
	}
	rules = slices.DeleteFunc(rules, func(r string) bool { return r == "" })
	return ddl, strings.Join(rules, "---\n"), steps
}

// runReproducer runs a reproducer (see parseReproducer) as a differential
// test in schemas of its own (name_plain, name_ruled).
func runReproducer(t *testing.T, name, repro string) {
	t.Helper()
	plain, ruled := name+"_plain", name+"_ruled"
	ddl, rule, steps := parseReproducer(t, repro, ruled)
	if len(ddl) == 0 || rule == "" || len(steps) == 0 {
		t.Fatalf("%s: no schema, rule or steps in the reproducer", name)
	}
	cat := loadedSetup(t, plain, ruled, ddl, strings.TrimSuffix(rule, "\n"))
	conns := 0
	for _, st := range steps {
		conns = max(conns, st.conn+1)
	}
	var corpus []step
	for c := range conns {
		corpus = append(corpus, on(c, text("SET SESSION innodb_lock_wait_timeout = 1, SESSION lock_wait_timeout = 1")))
	}
	runDifferential(t, cat, plain, ruled, append(corpus, steps...))
}

// TestReproducers runs every reproducer in testdata/reproducers (files
// SERVER-SEED-KIND.txt, found on that server by the fuzzer with seed SEED:
// each runs on both servers).
func TestReproducers(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "reproducers", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no reproducers: %v", err)
	}
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name, func(t *testing.T) { runReproducer(t, fmt.Sprintf("repro%d", i), string(b)) })
	}
}
