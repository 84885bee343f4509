package rewrite

import "strconv"

// WithRowCount returns sql with every call ROW_COUNT() of its first
// statement replaced by n as a BIGINT (CAST(n AS SIGNED)), the text of
// that first statement as written (first: sql itself when it has one
// statement), and whether it had any call. The executor uses it when the
// server's ROW_COUNT() is not the client's (the proxy answered the
// client's previous statement with statements of its own, or sent some
// since). A later statement's ROW_COUNT() is of the statement before it
// in the same text, which the server runs: left as it is. False for text
// with no call in its first statement, and text it cannot lex.
func WithRowCount(sql string, n int64, sess Session) (out, first string, ok bool) {
	if !mentionsFold(sql, "row_count") {
		return "", "", false
	}
	toks, ok := lex(sql, sess)
	if !ok {
		return "", "", false
	}
	first = sql
	var edits []edit
	for i, t := range toks {
		if t.kind == tokPunct && sql[t.start] == ';' {
			first = sql[:t.start]
			break
		}
		if !t.is(sql, "ROW_COUNT") || i+2 >= len(toks) || !toks[i+1].punct(sql, '(') || !toks[i+2].punct(sql, ')') {
			continue
		}
		if i > 0 && toks[i-1].punct(sql, '.') {
			continue // a stored function of a schema
		}
		edits = append(edits, edit{start: t.start, end: toks[i+2].end, text: "CAST(" + strconv.FormatInt(n, 10) + " AS SIGNED)"})
	}
	if len(edits) == 0 {
		return "", "", false
	}
	return apply(sql, 0, len(sql), edits), first, true
}

// mentionsFold reports whether s contains lower, an ASCII lower-case
// string, in any case of its letters.
func mentionsFold(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		if equalFoldASCII(s[i:], lower) {
			return true
		}
	}
	return false
}
