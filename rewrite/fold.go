package rewrite

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// Folds that name slot rows by their primary key.
//
// A fold inside a client's transaction must not lock ranges of the slot
// table: at REPEATABLE READ a locking read or an UPDATE of the rows of one
// record (record_type = 1 AND record_id = 5) also locks the gaps on either
// side of them (next-key locks), up to the neighbouring records' rows, and
// an increment that inserts the first slot row of a neighbouring record
// (or of another table's counter) then waits for the transaction, where
// the same statements directly touch different rows and never wait. So the
// executor first learns which slot rows the records have (SlotRowsSQL, read
// where it sees every committed row: see the executor's fold), then locks
// exactly those rows by primary key (LockSlotRowsSQL: record locks only,
// no gap), and folds them with the sums it read (FoldRowsSQL).
//
// The base rows are locked (FOR UPDATE) before any of this: every
// increment holds a shared lock on its record's base row until it commits,
// so once the fold holds the exclusive one, no other transaction has an
// uncommitted slot row of those records, and none can add one until the
// fold's transaction ends.

// SlotRow is one row of a slot table: a record type, a record's key (a
// decimal integer), a slot and its count (a decimal integer).
type SlotRow struct {
	RecordType int
	Key        string
	Slot       int
	Count      string
}

// SlotRowsSQL selects record_type, record_id, slot and count of every slot
// row of t's records with keys (decimal integers). Run as a consistent
// read, it locks nothing.
func (t *Table) SlotRowsSQL(keys []string) string {
	return fmt.Sprintf("SELECT `record_type`, `record_id`, `slot`, `count` FROM %s WHERE `record_type` IN (%s) AND `record_id` IN (%s)",
		t.QualifiedSlots(), t.recordTypes(), strings.Join(keys, ", "))
}

// slotRowBatch bounds how many slot rows one statement names.
const slotRowBatch = 200

// Statements that must touch exactly given rows name them in a derived
// table joined first (STRAIGHT_JOIN) to the table's primary key (FORCE
// INDEX: for a table of a few rows the servers would scan it otherwise):
// each row is then read by key (eq_ref), locking it alone (a key without a
// row locks the gap where it would be, as the client's statement by key
// does). A WHERE clause listing
// the keys instead (key IN (…), or (…) OR (…)) leaves the access path to
// the optimizer, which may scan the index of a small table and lock every
// row it passes, where the client's own statement (an UPDATE by key)
// reads by key; and MariaDB reads a row constructor IN (one tuple) by
// scanning.

// keysTable is a derived table `_k` of keys (decimal integers), column k.
func keysTable(keys []string) string {
	var b strings.Builder
	b.WriteString("(")
	for i, k := range keys {
		if i == 0 {
			fmt.Fprintf(&b, "SELECT %s AS `k`", k)
			continue
		}
		fmt.Fprintf(&b, " UNION ALL SELECT %s", k)
	}
	b.WriteString(") AS `_k`")
	return b.String()
}

// slotRowsTable is a derived table `_k` of rows' primary keys, columns rt,
// id and slot, joined to the slot table (by name, unaliased: LOCK TABLES
// locks the table under that name) on its primary key.
func (t *Table) slotRowsTable(rows []SlotRow) string {
	var b strings.Builder
	b.WriteString("(")
	for i, r := range rows {
		if i == 0 {
			fmt.Fprintf(&b, "SELECT %d AS `rt`, %s AS `id`, %d AS `slot`", r.RecordType, r.Key, r.Slot)
			continue
		}
		fmt.Fprintf(&b, " UNION ALL SELECT %d, %s, %d", r.RecordType, r.Key, r.Slot)
	}
	s := t.QualifiedSlots()
	fmt.Fprintf(&b, ") AS `_k` STRAIGHT_JOIN %s FORCE INDEX (PRIMARY) ON %s.`record_type` = `_k`.`rt` AND %s.`record_id` = `_k`.`id` AND %s.`slot` = `_k`.`slot`", s, s, s, s)
	return b.String()
}

// LockSlotRowsSQL returns the statements that lock exactly rows (by
// primary key, FOR UPDATE: record locks only, on both servers) and select
// record_type, record_id, slot and count of those that exist, as they are
// now. rows should exist: a row that does not locks the gap where it
// would be.
func (t *Table) LockSlotRowsSQL(rows []SlotRow) []string {
	var stmts []string
	s := t.QualifiedSlots()
	for len(rows) > 0 {
		batch := rows[:min(slotRowBatch, len(rows))]
		rows = rows[len(batch):]
		stmts = append(stmts, fmt.Sprintf("SELECT %s.`record_type`, %s.`record_id`, %s.`slot`, %s.`count` FROM %s FOR UPDATE",
			s, s, s, s, t.slotRowsTable(batch)))
	}
	return stmts
}

// slotRowsUpdate returns UPDATEs of the slot table that set count to
// value in rows (existing ones: see LockSlotRowsSQL) where the count is
// cond (SQL after `count`).
func (t *Table) slotRowsUpdate(rows []SlotRow, value int, cond string) []string {
	var stmts []string
	s := t.QualifiedSlots()
	for len(rows) > 0 {
		batch := rows[:min(slotRowBatch, len(rows))]
		rows = rows[len(batch):]
		stmts = append(stmts, fmt.Sprintf("UPDATE %s SET %s.`count` = %d WHERE %s.`count` %s", t.slotRowsTable(batch), s, value, s, cond))
	}
	return stmts
}

// FoldRowsSQL returns the statements that fold rows (slot rows of t's
// records with keys, locked, with their current counts: see
// LockSlotRowsSQL) into their base rows and zero them, to run in the
// transaction that locked them. Only base rows that have a slot row with
// a count are written (an UPDATE of the others would change nothing but
// still fire the table's UPDATE triggers), and only those slot rows zeroed.
//
// refresh is FoldSQL's: the fold also makes every base row of keys and
// every slot row in rows the transaction's own version (refreshSQL), for
// a fold inside a REPEATABLE READ transaction that may have read before.
// Rows of other record types than t's counters' are ignored.
func (t *Table) FoldRowsSQL(keys []string, rows []SlotRow, refresh bool) []string {
	byType := map[int]*Counter{}
	for i := range t.Counters {
		byType[t.Counters[i].RecordType] = &t.Counters[i]
	}
	type agg struct {
		sum, max *big.Int
	}
	aggs := map[int]map[string]*agg{} // record type → key → its slots
	var written []string              // keys with a count, in first-seen order
	var nonzero, zero []SlotRow
	for _, r := range rows {
		c := byType[r.RecordType]
		if c == nil {
			continue
		}
		n, ok := new(big.Int).SetString(r.Count, 10)
		if !ok {
			continue
		}
		if aggs[r.RecordType] == nil {
			aggs[r.RecordType] = map[string]*agg{}
		}
		a := aggs[r.RecordType][r.Key]
		if a == nil {
			a = &agg{sum: new(big.Int), max: new(big.Int).Set(n)}
			aggs[r.RecordType][r.Key] = a
		}
		a.sum.Add(a.sum, n)
		if n.Cmp(a.max) > 0 {
			a.max.Set(n)
		}
		if n.Sign() == 0 {
			zero = append(zero, r)
			continue
		}
		nonzero = append(nonzero, r)
		if !slices.Contains(written, r.Key) {
			written = append(written, r.Key)
		}
	}
	var stmts []string
	if len(written) > 0 {
		key := t.RecordID("`_t`")
		var set []string
		for i := range t.Counters {
			c := &t.Counters[i]
			col := quoteIdent(c.Name)
			if t.Keyed() {
				col = "`_t`." + col // beside `_k`'s columns
			}
			var cases strings.Builder
			found := false
			for _, k := range written {
				a := aggs[c.RecordType][k]
				if a == nil || (!c.Touch && a.sum.Sign() == 0) {
					continue
				}
				v := a.sum
				if c.Touch {
					v = a.max
				}
				fmt.Fprintf(&cases, " WHEN %s THEN %s", k, v.String())
				found = true
			}
			if !found {
				continue
			}
			if c.Touch {
				set = append(set, fmt.Sprintf("%s = %s", col, c.TouchLatest("`_t`."+quoteIdent(c.Name), "CASE "+key+cases.String()+" ELSE NULL END")))
				continue
			}
			// DECIMAL arithmetic, as SUM's: the total is in the column's
			// range whatever the signs of base and sum.
			set = append(set, fmt.Sprintf("%s = %s + %s", col, col, c.ValueSQL(fmt.Sprintf("CAST(CASE %s%s ELSE 0 END AS DECIMAL(21,0))", key, cases.String()))))
		}
		if len(set) > 0 {
			stmts = append(stmts, fmt.Sprintf("UPDATE %s SET %s", t.keysJoin(written, "`_t`"), strings.Join(set, ", ")))
		}
	}
	if refresh && len(keys) > 0 {
		if flips := t.refreshFlips(keys); flips != nil {
			stmts = append(stmts, flips...)
			stmts = append(stmts, t.slotRowsUpdate(zero, 1, "= 0")...)
			nonzero = append(nonzero, zero...)
		}
	}
	return append(stmts, t.slotRowsUpdate(nonzero, 0, "<> 0")...)
}

// FoldBatch bounds how many keys one fold statement names, and how many
// slot rows a page of SlottedRowsSQL reads.
const FoldBatch = 500

// SlottedRowsSQL selects record_type, record_id, slot and count of the
// slot rows with counts of t's records with keys above after (a decimal
// integer; "" for all), by key, at most limit rows: a page of the records
// that have slot rows (see the executor's foldAllSlotted). With zero, the
// rows roll-up zeroed too: a transaction whose snapshot predates their
// zeroing still sees their counts, and its fold must refresh them.
func (t *Table) SlottedRowsSQL(after string, limit int, zero bool) string {
	cond := ""
	if !zero {
		cond = " AND `count` <> 0"
	}
	if after != "" {
		cond += " AND `record_id` > " + after
	}
	return fmt.Sprintf("SELECT `record_type`, `record_id`, `slot`, `count` FROM %s WHERE `record_type` IN (%s)%s ORDER BY `record_id` LIMIT %d",
		t.QualifiedSlots(), t.recordTypes(), cond, limit)
}

// ValuesSQL selects columns (quoted names) of t's row with key (a decimal
// integer), as it is now (FOR UPDATE: a current read of a row the
// transaction has locked already).
func (t *Table) ValuesSQL(columns []string, key string) string {
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s FOR UPDATE", strings.Join(columns, ", "), t.Qualified(), t.keyCond("", key))
}
