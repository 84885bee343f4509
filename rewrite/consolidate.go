package rewrite

import "strings"

// Consolidatable reports whether sql, one SELECT, gives the same rows to
// every session with the same account, default database, character set
// and session variables at the same moment: no user or system variable,
// no locking or INTO clause, no second statement, and no function call
// but of the functions below (aggregates and functions of their arguments
// alone: not RAND(), UUID(), CONNECTION_ID(), LAST_INSERT_ID(),
// FOUND_ROWS(), a lock function, a sequence, or a stored function, whose
// value is the caller's or the call's). Conservative: a text it cannot
// lex is not.
func Consolidatable(sql string, sess Session) bool {
	toks, ok := lex(sql, sess)
	if !ok || len(toks) == 0 || !toks[0].is(sql, "SELECT") {
		return false
	}
	for i, t := range toks {
		switch t.kind {
		case tokVar:
			return false
		case tokPunct:
			if sql[t.start] == ';' && i < len(toks)-1 {
				return false
			}
		case tokWord:
			w := t.text(sql)
			if equalFoldAny(w, "INTO", "FOR", "LOCK", "SQL_CALC_FOUND_ROWS", "NEXT", "PROCEDURE") {
				return false
			}
			if i+1 < len(toks) && toks[i+1].punct(sql, '(') && !pureCall(w) {
				return false
			}
		}
	}
	return true
}

// pureCall reports whether w( is a keyword's parenthesis or a call of a
// function whose value depends on its arguments alone.
func pureCall(w string) bool {
	return equalFoldAny(w,
		// Keywords before a parenthesis.
		"SELECT", "FROM", "JOIN", "ON", "WHERE", "AND", "OR", "XOR", "NOT", "IN", "EXISTS", "ANY", "SOME", "ALL",
		"AS", "BY", "HAVING", "WHEN", "THEN", "ELSE", "CASE", "BETWEEN", "IS", "LIKE", "UNION", "DISTINCT",
		"USING", "LIMIT", "OFFSET", "DIV", "MOD", "USE", "FORCE", "IGNORE", "INDEX", "KEY", "STRAIGHT_JOIN",
		"INNER", "LEFT", "RIGHT", "OUTER", "CROSS", "NATURAL", "GROUP", "ORDER", "ASC", "DESC", "WITH", "ROLLUP",
		"INTERVAL", "BINARY", "DECIMAL", "SIGNED", "UNSIGNED", "CHAR", "CHARACTER", "VARCHAR",
		// Aggregates and functions of their arguments.
		"COUNT", "SUM", "MIN", "MAX", "AVG", "GROUP_CONCAT", "BIT_AND", "BIT_OR", "BIT_XOR",
		"COALESCE", "IFNULL", "NULLIF", "IF", "CAST", "CONVERT", "GREATEST", "LEAST", "ABS", "SIGN",
		"ROUND", "TRUNCATE", "FLOOR", "CEIL", "CEILING", "CONCAT", "CONCAT_WS", "LOWER", "UPPER", "LCASE",
		"UCASE", "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "SUBSTRING", "SUBSTR", "LEFT", "RIGHT", "TRIM",
		"LTRIM", "RTRIM", "REPLACE", "LPAD", "RPAD", "HEX", "UNHEX", "ISNULL", "FIELD", "FIND_IN_SET", "ELT")
}

// equalFoldAny reports whether w is one of words, in any case.
func equalFoldAny(w string, words ...string) bool {
	for _, x := range words {
		if strings.EqualFold(w, x) {
			return true
		}
	}
	return false
}
