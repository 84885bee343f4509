package rewrite

import (
	"strings"
)

// A small lexer for the statements the parser does not take (MySQL's
// INSERT … AS alias, SELECT … INTO, EXECUTE IMMEDIATE, LOCK TABLES with
// aliases): enough to find a clause, cut it out for the parser and put it
// back, or to tell which tables a statement names.

// tokKind classifies a token.
type tokKind uint8

const (
	tokWord   tokKind = iota // a bare word: keyword or identifier
	tokIdent                 // a quoted identifier (backquotes, or double quotes under ANSI_QUOTES)
	tokString                // a string literal
	tokNumber                // a number
	tokVar                   // a user or system variable: @a, @`a b`, @@x
	tokPunct                 // anything else, one byte at a time
)

// token is one token of a statement: sql[start:end], at parenthesis depth
// depth (the depth before it, for a parenthesis itself).
type token struct {
	kind       tokKind
	start, end int
	depth      int
}

// text returns the token's text.
func (t token) text(sql string) string { return sql[t.start:t.end] }

// is reports whether t is the bare word w (ASCII, any case).
func (t token) is(sql, w string) bool {
	return t.kind == tokWord && t.end-t.start == len(w) && strings.EqualFold(sql[t.start:t.end], w)
}

// punct reports whether t is the punctuation byte c.
func (t token) punct(sql string, c byte) bool { return t.kind == tokPunct && sql[t.start] == c }

// ident returns the identifier t names (unquoted), or "".
func (t token) ident(sql string) string {
	switch t.kind {
	case tokWord:
		return sql[t.start:t.end]
	case tokIdent:
		q := sql[t.start : t.start+1]
		return strings.ReplaceAll(sql[t.start+1:t.end-1], q+q, q)
	}
	return ""
}

// lex splits sql into tokens, skipping white space and comments (the text
// of executable comments, /*! … */ and /*+ … */, is lexed as code). It
// returns false for text it cannot lex (an unterminated quote or comment).
func lex(sql string, sess Session) ([]token, bool) {
	var toks []token
	depth := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case strings.HasPrefix(sql[i:], "/*!") || strings.HasPrefix(sql[i:], "/*M!") || strings.HasPrefix(sql[i:], "/*m!"):
			// Executable comment: skip the opener and version, lex the
			// rest; its "*/" is skipped below.
			i += strings.IndexByte(sql[i:], '!') + 1
			for i < len(sql) && '0' <= sql[i] && sql[i] <= '9' {
				i++
			}
		case strings.HasPrefix(sql[i:], "*/"):
			i += 2
		case strings.HasPrefix(sql[i:], "/*"):
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return nil, false
			}
			i += end + 4
		case c == '#' || (strings.HasPrefix(sql[i:], "--") && (i+2 == len(sql) || sql[i+2] == ' ' || sql[i+2] == '\t' || sql[i+2] == '\n' || sql[i+2] == '\r')):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				i = len(sql)
			} else {
				i += end + 1
			}
		case c == '\'' || (c == '"' && !sess.ANSIQuotes):
			end := stringEnd(sql, i, !sess.NoBackslashEscapes)
			if end < 0 {
				return nil, false
			}
			toks = append(toks, token{tokString, i, end, depth})
			i = end
		case c == '`' || (c == '"' && sess.ANSIQuotes):
			end := identEnd(sql, i, sess.ANSIQuotes)
			if end < 0 {
				return nil, false
			}
			toks = append(toks, token{tokIdent, i, end, depth})
			i = end
		case c == '@':
			j := i + 1
			if j < len(sql) && sql[j] == '@' {
				j++
			}
			switch {
			case j < len(sql) && (sql[j] == '`' || sql[j] == '\'' || sql[j] == '"'):
				var end int
				if sql[j] == '`' {
					end = identEnd(sql, j, false)
				} else {
					end = stringEnd(sql, j, !sess.NoBackslashEscapes)
				}
				if end < 0 {
					return nil, false
				}
				j = end
			default:
				for j < len(sql) && (isIdentByte(sql[j]) || sql[j] == '.') {
					j++
				}
			}
			toks = append(toks, token{tokVar, i, j, depth})
			i = j
		case '0' <= c && c <= '9':
			j := i
			for j < len(sql) && (isIdentByte(sql[j]) || sql[j] == '.') {
				j++
			}
			toks = append(toks, token{tokNumber, i, j, depth})
			i = j
		case isIdentByte(c):
			j := i
			for j < len(sql) && isIdentByte(sql[j]) {
				j++
			}
			toks = append(toks, token{tokWord, i, j, depth})
			i = j
		default:
			if c == ')' {
				depth--
			}
			toks = append(toks, token{tokPunct, i, i + 1, depth})
			if c == '(' {
				depth++
			}
			i++
		}
	}
	return toks, true
}

// ruledNamed returns a ruled table the tokens name (as name, schema.name,
// or with the session's default schema), or the owner of a slot table they
// name, or nil: whether a statement the parser did not take may read or
// write counters.
func (c *Catalog) ruledNamed(sql string, toks []token, sess Session) *Table {
	for i, t := range toks {
		name := t.ident(sql)
		if name == "" {
			continue
		}
		schema := sess.DB
		if i >= 2 && toks[i-1].kind == tokPunct && sql[toks[i-1].start] == '.' {
			if s := toks[i-2].ident(sql); s != "" {
				schema = s
			}
		}
		if rt := c.lookup(schema, name); rt != nil {
			return rt
		}
		if st := c.slotTable(schema, name); st != nil {
			return st
		}
	}
	return nil
}
