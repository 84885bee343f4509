package rewrite

import (
	"strings"
)

// LOCK TABLES. A session that locks a ruled table may then use only the
// tables (and aliases) it locked, and the proxy's statements for it name
// the slot table (by name, and as `_sp`, `_sp2`… once per counter read) and the
// ruled table as `_t` (folds). So the lock statement is extended with
// those, and while the locks are held the executor runs the session's
// increments on the base row (the table is the session's alone: slots
// would spread nothing) and its guarded writes without a transaction of
// their own (BEGIN would release the locks). A ruled table locked READ is
// not written by the session at all: the server refuses its writes, as
// directly.

// lockedAliases is how many aliases of the slot table (spAlias) LOCK TABLES
// locks: a statement of a locking session that reads more counters than
// that fails with the server's error 1100 (nothing runs).
const lockedAliases = 16

// TableLock is a ruled table a LOCK TABLES statement locks.
type TableLock struct {
	Table *Table
	// Write: locked WRITE (else READ).
	Write bool
}

// lockTables plans LOCK TABLES (text; toks its tokens): ok is false when
// it is not one.
func (r *Rewriter) lockTables(text string, toks []token, sess Session) (Plan, bool) {
	if len(toks) < 2 || !toks[0].is(text, "LOCK") || !(toks[1].is(text, "TABLES") || toks[1].is(text, "TABLE")) {
		return Plan{}, false
	}
	var locks []TableLock
	insertAt := -1
	item := toks[2:]
	for len(item) > 0 {
		n := 0
		for n < len(item) && !(item[n].kind == tokPunct && text[item[n].start] == ',') && !item[n].is(text, "WAIT") && !item[n].is(text, "NOWAIT") {
			n++
		}
		if n == 0 {
			break
		}
		it := item[:n]
		insertAt = it[n-1].end
		schema, name := sess.DB, it[0].ident(text)
		if len(it) > 2 && it[1].kind == tokPunct && text[it[1].start] == '.' {
			schema, name = name, it[2].ident(text)
		}
		write := false
		for _, tk := range it {
			if tk.is(text, "WRITE") {
				write = true
			}
		}
		if t := r.cat.slotTable(schema, name); t != nil {
			return Plan{Op: &Refused{}, Table: t, Reason: schema + "." + name + " is slotproxy's own table: LOCK TABLES locks it for the ruled tables it names"}, true
		}
		if t := r.cat.lookup(schema, name); t != nil && !t.Shadow && !sess.shadowed(schema, name) {
			found := false
			for i := range locks {
				if locks[i].Table == t {
					locks[i].Write = locks[i].Write || write
					found = true
				}
			}
			if !found {
				locks = append(locks, TableLock{Table: t, Write: write})
			}
		}
		if n == len(item) || !(item[n].kind == tokPunct && text[item[n].start] == ',') {
			break
		}
		item = item[n+1:]
	}
	if len(locks) == 0 || insertAt < 0 {
		return Plan{}, false
	}
	// The slot tables, once per schema: WRITE when a ruled table of the
	// schema is locked WRITE, and as `_sp` for reads; `_t` for folds.
	var extra []string
	slots := map[string]bool{}
	for _, l := range locks {
		q := l.Table.QualifiedSlots()
		slots[q] = slots[q] || l.Write
	}
	seen := map[string]bool{}
	for _, l := range locks {
		q := l.Table.QualifiedSlots()
		if !seen[q] {
			seen[q] = true
			mode := "READ"
			if slots[q] {
				mode = "WRITE"
			}
			extra = append(extra, q+" "+mode)
			for i := range lockedAliases {
				extra = append(extra, q+" AS "+spAlias(i)+" READ")
			}
		}
		if l.Write {
			extra = append(extra, l.Table.Qualified()+" AS `_t` WRITE")
		}
	}
	return Plan{Op: &LockTables{Locks: locks, SQL: text[:insertAt] + ", " + strings.Join(extra, ", ") + text[insertAt:]},
		Table:  locks[0].Table,
		Reason: "LOCK TABLES of a ruled table: its slot table is locked with it; increments run on the base row until UNLOCK TABLES"}, true
}

// EndsTableLocks reports whether sql (a statement the proxy passes
// through) releases the session's table locks: UNLOCK TABLES, another
// LOCK TABLES, BEGIN or START TRANSACTION. It reads only the first words.
func EndsTableLocks(sql []byte) bool {
	w := leadingWords(sql, 2)
	switch {
	case len(w) == 0:
		return false
	case w[0] == "UNLOCK", w[0] == "LOCK", w[0] == "BEGIN":
		return true
	}
	return w[0] == "START" && len(w) > 1 && w[1] == "TRANSACTION"
}

// CommitsImplicitly reports whether sql is a statement that commits the
// session's transaction before it runs (DDL other than of temporary
// tables, TRUNCATE, RENAME, GRANT and REVOKE, LOCK TABLES): when it then
// fails waiting for a lock, the transaction is over all the same, though
// the error carries no status to say so. It reads only the first words.
func CommitsImplicitly(sql []byte) bool {
	w := leadingWords(sql, 2)
	if len(w) == 0 {
		return false
	}
	switch w[0] {
	case "CREATE", "DROP":
		return len(w) < 2 || w[1] != "TEMPORARY"
	case "ALTER", "RENAME", "TRUNCATE", "GRANT", "REVOKE":
		return true
	case "LOCK":
		return len(w) > 1 && (w[1] == "TABLES" || w[1] == "TABLE")
	}
	return false
}

// leadingWords returns up to n words (runs of identifier bytes) that sql
// starts with, in upper case, past white space, parentheses and /* */
// comments; it stops at anything else.
func leadingWords(sql []byte, n int) []string {
	var out []string
	i := 0
	for i < len(sql) && len(out) < n {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(':
			i++
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(string(sql[i+2:]), "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		default:
			j := i
			for j < len(sql) && isIdentByte(sql[j]) {
				j++
			}
			if j == i {
				return out
			}
			out = append(out, strings.ToUpper(string(sql[i:j])))
			i = j
		}
	}
	return out
}
