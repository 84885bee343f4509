// Package yamlkeys holds what the configuration and rule-file decoders share:
// following YAML aliases and naming unknown keys helpfully.
package yamlkeys

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Unknown describes an unknown key name: it suggests the nearest of known
// when that is a plausible typo (one edit away for short names, up to a third
// of the name's length for longer ones), else lists them all. known must be
// sorted.
func Unknown(name string, known []string) string {
	best, bestDist := "", max(1, len(name)/3)+1
	for _, k := range known {
		if d := EditDistance(strings.ToLower(name), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q (did you mean %q?)", name, best)
	}
	return fmt.Sprintf("unknown key %q (want one of: %s)", name, strings.Join(known, ", "))
}

// EditDistance is the Levenshtein distance between a and b, in bytes.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Resolve follows an alias to the node it names.
func Resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// syntaxRE splits a gopkg.in/yaml.v3 syntax error: "yaml: line N: PROBLEM",
// where "line N: " is absent when N is unknown or the first line.
var syntaxRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// parserProblems are the problems yaml.v3 v3.0.1 reports from its parser
// rather than its scanner. For these it prints the 0-based line of the
// construct being parsed (the scanner's lines are 1-based), and no line at
// all when that is 0. gopkg.in/yaml.v3 is frozen, so the list is too.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// Syntax splits a yaml.v3 syntax error into its problem and its 1-based
// line, 0 when the message names none (the first line, or unknown). ok is
// false when err is not in yaml.v3's format.
func Syntax(err error) (line int, problem string, ok bool) {
	m := syntaxRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, "", false
	}
	line, _ = strconv.Atoi(m[1]) // 0 when absent
	if parserProblems[m[2]] {
		line++
	}
	return line, m[2], true
}
