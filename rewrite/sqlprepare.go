package rewrite

import "strings"

// SQL-level prepared statements (PREPARE name FROM 'text', EXECUTE name
// USING @a, …, DEALLOCATE PREPARE name) run their text when EXECUTE names
// them, a statement that names no table. So the plan of a write prepared
// this way travels with its PREPARE (an SQLPrepare effect) and the executor keeps
// it by name, to fold the records an EXECUTE may write before it runs.

// Prepares is a PREPARE's statement as the executor keeps it.
type Prepares struct {
	// Name is the prepared statement's name, lower case (names are not
	// case-sensitive).
	Name string
	// Write is the guarded plan of the text when it writes a ruled table
	// (an increment is run on the base row, its records folded first):
	// its Guard's KeysSQL has the text's placeholders (see BindVars). Nil
	// for any other statement: a PREPARE of it replaces a write prepared
	// under the name.
	Write *Plan
}

// SQLPrepareVerb is what a statement does to SQL-level prepared
// statements.
type SQLPrepareVerb uint8

const (
	NotPrepared    SQLPrepareVerb = iota
	PrepareVerb                   // PREPARE name FROM …
	ExecuteVerb                   // EXECUTE name [USING @a, …]
	DeallocateVerb                // DEALLOCATE PREPARE name, DROP PREPARE name
)

// SQLPrepared reads a statement's verb on SQL-level prepared statements,
// the name it names (lower case) and, for EXECUTE, its USING variables as
// written. It reads the first words only: a statement that is none of
// these (or not one statement) is NotPrepared.
func SQLPrepared(sql string, sess Session) (verb SQLPrepareVerb, name string, using []string) {
	toks, ok := lex(strings.TrimRight(sql, "; \t\r\n"), sess)
	if !ok || len(toks) < 2 {
		return NotPrepared, "", nil
	}
	at := 1
	switch {
	case toks[0].is(sql, "PREPARE"):
		verb = PrepareVerb
	case toks[0].is(sql, "EXECUTE") && !toks[1].is(sql, "IMMEDIATE"):
		verb = ExecuteVerb
	case (toks[0].is(sql, "DEALLOCATE") || toks[0].is(sql, "DROP")) && toks[1].is(sql, "PREPARE") && len(toks) >= 3:
		verb, at = DeallocateVerb, 2
	default:
		return NotPrepared, "", nil
	}
	if name = toks[at].ident(sql); name == "" {
		return NotPrepared, "", nil
	}
	name = strings.ToLower(name)
	rest := toks[at+1:]
	if verb == ExecuteVerb && len(rest) > 0 {
		if !rest[0].is(sql, "USING") {
			return NotPrepared, "", nil
		}
		for i, t := range rest[1:] {
			if i%2 == 1 {
				if t.kind != tokPunct || sql[t.start] != ',' {
					return NotPrepared, "", nil
				}
				continue
			}
			if t.kind != tokVar {
				return NotPrepared, "", nil
			}
			using = append(using, t.text(sql))
		}
	}
	return verb, name, using
}

// BindVars returns sql with its placeholders, in order, replaced by the
// variables vars (an EXECUTE's USING list); false when their numbers
// differ or sql does not lex.
func BindVars(sql string, sess Session, vars []string) (string, bool) {
	toks, ok := lex(sql, sess)
	if !ok {
		return "", false
	}
	var b strings.Builder
	last, n := 0, 0
	for _, t := range toks {
		if t.kind != tokPunct || sql[t.start] != '?' {
			continue
		}
		if n >= len(vars) {
			return "", false
		}
		b.WriteString(sql[last:t.start])
		b.WriteString(vars[n])
		last, n = t.end, n+1
	}
	if n != len(vars) && n != 0 {
		return "", false
	}
	b.WriteString(sql[last:])
	return b.String(), true
}

// SplitFirst returns the first statement of a multi-statement query sql
// (up to its semicolon) and the rest; false when sql does not lex or is
// one statement.
func SplitFirst(sql string, sess Session) (first, rest string, ok bool) {
	toks, ok := lex(sql, sess)
	if !ok {
		return "", "", false
	}
	for _, t := range toks {
		if t.kind == tokPunct && sql[t.start] == ';' && t.depth == 0 {
			if strings.TrimSpace(sql[t.end:]) == "" {
				return "", "", false
			}
			return sql[:t.end], sql[t.end:], true
		}
	}
	return "", "", false
}

// diagnosticsFunctions are the built-in functions a statement that leaves
// MariaDB's diagnostics may call (LeavesDiagnostics): they read no table.
var diagnosticsFunctions = map[string]bool{
	"row_count": true, "found_rows": true, "last_insert_id": true, "connection_id": true,
	"database": true, "schema": true, "user": true, "current_user": true, "session_user": true,
	"system_user": true, "version": true, "now": true, "coalesce": true, "ifnull": true, "if": true,
	"concat": true, "abs": true, "greatest": true, "least": true,
}

// LeavesDiagnostics reports whether sql (one statement) is a SELECT that
// certainly uses no table: no FROM, INTO or subquery, its calls only
// diagnosticsFunctions. After such a statement MariaDB's SHOW WARNINGS
// still shows the diagnostics of the statement before it, unless it
// raised a condition itself (a division by 0); MySQL clears them.
func LeavesDiagnostics(sql string, sess Session) bool {
	toks, ok := lex(sql, sess)
	if !ok || len(toks) == 0 || !toks[0].is(sql, "select") {
		return false
	}
	for i, t := range toks {
		switch {
		case i > 0 && (t.is(sql, "select") || t.is(sql, "from") || t.is(sql, "into")):
			return false
		case t.kind == tokPunct && sql[t.start] == ';':
			if i != len(toks)-1 {
				return false
			}
		case (t.kind == tokWord || t.kind == tokIdent) && i+1 < len(toks) && toks[i+1].punct(sql, '('):
			if t.kind != tokWord || !diagnosticsFunctions[strings.ToLower(t.text(sql))] {
				return false
			}
		}
	}
	return true
}
