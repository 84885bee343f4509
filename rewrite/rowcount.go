package rewrite

import "strconv"

// WithRowCount returns sql, one statement, with every call ROW_COUNT()
// replaced by n as a BIGINT (CAST(n AS SIGNED)), and whether it had any.
// The executor uses it when the client's previous statement was answered
// by statements of the proxy's own (a slotted increment's upsert, whose
// affected rows are not the UPDATE's): on the server ROW_COUNT() would
// give theirs. False for text with no call, text it cannot lex, and
// several statements (a later one's ROW_COUNT() is of the statement
// before it in the same text).
func WithRowCount(sql string, n int64, sess Session) (string, bool) {
	if !mentionsFold(sql, "row_count") {
		return "", false
	}
	toks, ok := lex(sql, sess)
	if !ok {
		return "", false
	}
	var edits []edit
	for i, t := range toks {
		if t.kind == tokPunct && sql[t.start] == ';' && i < len(toks)-1 {
			return "", false // several statements
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
		return "", false
	}
	return apply(sql, 0, len(sql), edits), true
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
