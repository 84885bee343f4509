package difffuzz

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// reproducerRuled is how a reproducer names the ruled schema (the default
// Env.Prefix's).
const reproducerRuled = "difffuzz_ruled"

var (
	reproducerStep  = regexp.MustCompile(`^\s*\d+ \[(c\d+|admin)\] (.*)$`)
	reproducerTable = regexp.MustCompile(`(?i)^CREATE TABLE\s+` + "`?" + `(\w+)`)
)

// ParseReproducer reads a reproducer as Reproducer prints it (the seed and
// difference lines are ignored) into the sequence it ran: the schema's
// statements and rule files as written, its steps (their classes unknown,
// but for roll-up passes).
func ParseReproducer(text string) (*Sequence, error) {
	seq := &Sequence{Schema: &Schema{}}
	section := ""
	rules := []string{""}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- schema"):
			section = "schema"
			continue
		case trimmed == "-- rules:":
			section = "rules"
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
			if trimmed == "" {
				continue
			}
			stmt := strings.TrimSuffix(trimmed, ";")
			seq.Schema.rawDDL = append(seq.Schema.rawDDL, stmt)
			if m := reproducerTable.FindStringSubmatch(stmt); m != nil {
				seq.Schema.Tables = append(seq.Schema.Tables, &Table{Name: m[1]})
			}
		case "rules":
			switch {
			case trimmed == "---":
				rules = append(rules, "")
			case trimmed != "":
				// (Indentation kept: a rule's bounds are a nested mapping.)
				rules[len(rules)-1] += strings.TrimRight(line, " \t\r") + "\n"
			}
		case "steps":
			m := reproducerStep.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[1] == "admin" {
				seq.Steps = append(seq.Steps, Step{Class: Rollup})
				continue
			}
			conn, _ := strconv.Atoi(m[1][1:])
			seq.Conns = max(seq.Conns, conn+1)
			st := Step{Conn: conn, SQL: m[2]}
			if i := strings.Index(st.SQL, "  -- one COM_QUERY (multi-statement)"); i >= 0 {
				st.SQL, st.Multi = st.SQL[:i], true
			}
			if i := strings.Index(st.SQL, "  -- prepared, args ["); i >= 0 {
				args := strings.TrimSuffix(st.SQL[i+len("  -- prepared, args ["):], "]")
				st.SQL, st.Args = st.SQL[:i], []any{}
				for _, a := range strings.Fields(args) {
					if q, ok := strings.CutPrefix(a, "'"); ok && strings.HasSuffix(q, "'") {
						st.Args = append(st.Args, strings.TrimSuffix(q, "'")) // a string parameter
					} else if n, err := strconv.ParseInt(a, 10, 64); err == nil {
						st.Args = append(st.Args, n)
					} else if u, err := strconv.ParseUint(a, 10, 64); err == nil {
						st.Args = append(st.Args, u)
					} else {
						st.Args = append(st.Args, a)
					}
				}
			}
			seq.Steps = append(seq.Steps, st)
		}
	}
	for _, r := range rules {
		if r != "" {
			seq.Schema.rawRules = append(seq.Schema.rawRules, r)
		}
	}
	if len(seq.Schema.rawDDL) == 0 || len(seq.Schema.rawRules) == 0 || len(seq.Steps) == 0 {
		return nil, fmt.Errorf("not a reproducer: no schema, rules or steps")
	}
	return seq, nil
}
