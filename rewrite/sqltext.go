package rewrite

import (
	"sort"
	"strconv"
	"strings"
)

// quoteIdent quotes an identifier with backquotes, which every sql_mode
// accepts (ANSI_QUOTES only adds double quotes).
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func itoa(n int) string { return strconv.Itoa(n) }

// edit replaces sql[start:end] with text. Edits of one statement never
// overlap; inserts have start == end.
type edit struct {
	start, end int
	text       string
	// target: a read of a counter of the row a single-table UPDATE or
	// DELETE writes (reads.target), as its total. Once the write's guard
	// has folded the records it writes, their base columns are their
	// totals, and the statement reads them as the client wrote it
	// (foldedEdits).
	target bool
}

// foldedEdits returns edits without the target reads (edit.target).
func foldedEdits(edits []edit) []edit {
	out := make([]edit, 0, len(edits))
	for _, e := range edits {
		if !e.target {
			out = append(out, e)
		}
	}
	return out
}

// apply returns sql[from:to] with the edits that fall inside applied.
func apply(sql string, from, to int, edits []edit) string {
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b strings.Builder
	b.Grow(to - from + 256*len(edits))
	pos := from
	for _, e := range edits {
		if e.start < pos || e.end > to {
			continue // overlapping or outside: never produced by the walker
		}
		b.WriteString(sql[pos:e.start])
		// Keep tokens apart: SELECT"c"FROM is valid SQL, SELECTCAST(…) is not.
		if e.start > 0 && len(e.text) > 0 && joins(sql[e.start-1], e.text[0]) {
			b.WriteByte(' ')
		}
		b.WriteString(e.text)
		if e.end < len(sql) && len(e.text) > 0 && joins(e.text[len(e.text)-1], sql[e.end]) {
			b.WriteByte(' ')
		}
		pos = e.end
	}
	b.WriteString(sql[pos:to])
	return b.String()
}

// skipSpace skips white space and comments starting at i.
func skipSpace(sql string, i int) int {
	for i < len(sql) {
		switch {
		case sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r' || sql[i] == '\f':
			i++
		case strings.HasPrefix(sql[i:], "/*") && !strings.HasPrefix(sql[i:], "/*!") && !strings.HasPrefix(sql[i:], "/*+"):
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return len(sql)
			}
			i += end + 4
		case strings.HasPrefix(sql[i:], "-- ") || sql[i] == '#':
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				return len(sql)
			}
			i += end + 1
		default:
			return i
		}
	}
	return i
}

// identEnd returns the end of the identifier starting at i (quoted with
// backquotes, with double quotes under ANSI_QUOTES, or bare), or -1.
func identEnd(sql string, i int, ansiQuotes bool) int {
	if i >= len(sql) {
		return -1
	}
	q := sql[i]
	if q == '`' || (q == '"' && ansiQuotes) {
		for j := i + 1; j < len(sql); j++ {
			if sql[j] == q {
				if j+1 < len(sql) && sql[j+1] == q {
					j++
					continue
				}
				return j + 1
			}
		}
		return -1
	}
	j := i
	for j < len(sql) {
		c := sql[j]
		if c == '_' || c == '$' || c >= 0x80 || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') {
			j++
			continue
		}
		break
	}
	if j == i {
		return -1
	}
	return j
}

// nameEnd returns the end of a dotted name (a, a.b, a.b.c, a.*, a.b.*)
// starting at i, or -1 when the text there is not one.
func nameEnd(sql string, i int, ansiQuotes bool) int {
	if i < len(sql) && sql[i] == '*' {
		return i + 1
	}
	end := identEnd(sql, i, ansiQuotes)
	if end < 0 {
		return -1
	}
	for {
		j := skipSpace(sql, end)
		if j >= len(sql) || sql[j] != '.' {
			return end
		}
		j = skipSpace(sql, j+1)
		if j < len(sql) && sql[j] == '*' {
			return j + 1
		}
		next := identEnd(sql, j, ansiQuotes)
		if next < 0 {
			return end
		}
		end = next
	}
}

// joins reports whether bytes a and b, written next to each other, would
// merge into one token (or start a quoted one).
func joins(a, b byte) bool {
	word := func(c byte) bool { return isIdentByte(c) || c == '`' || c == '"' || c == '\'' }
	return word(a) && word(b)
}
