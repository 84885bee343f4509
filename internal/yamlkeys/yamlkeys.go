// Package yamlkeys holds what the configuration and rule-file decoders share:
// following YAML aliases and naming unknown keys helpfully.
package yamlkeys

import (
	"fmt"
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
