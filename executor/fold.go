package executor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// SlotReader reads slot rows outside every client's transaction: on a
// connection of the proxy's own (the admin account's), in autocommit, so
// that a read sees every row committed when it runs. Implementations must
// be safe for concurrent use.
type SlotReader interface {
	// ReadSlotRows runs query, a SELECT of record_type, record_id, slot and
	// count (rewrite.Table.SlotRowsSQL), and returns its rows.
	ReadSlotRows(ctx context.Context, query string) ([]rewrite.SlotRow, error)
}

// slotReadTimeout bounds one read of a SlotReader; a fold whose read fails
// falls back to locking the records' slot rows by range.
const slotReadTimeout = 10 * time.Second

// foldKeys folds the slots of the records of t with keys (whose base rows
// the transaction has locked FOR UPDATE) into their base rows, in batches.
//
// The slot rows are locked by primary key only (rewrite/fold.go): a fold
// must not lock ranges of the slot table, whose gaps other records' first
// slot rows are inserted into. Which rows to lock is read where every row
// that counts is visible (slotRowsOf).
func (s *Session) foldKeys(t *rewrite.Table, keys []string) (errPkt []byte, err error) {
	return s.foldKeysOf(t, keys, false)
}

// foldKeysOf is foldKeys; with ownPart, of the slot rows of the proxy's own
// part only (SlotPartition), where that leaves the statement's view exact:
// before a read whose counters are totals of the base column and every
// slot (or the base column alone: reads: rolled_up), in a transaction
// whose snapshot the fold need not refresh. The other parts' rows are
// written by increments through other nodes' proxies: on a multi-primary
// cluster, locking them would wait for that node's applier, which may
// itself wait for the base row this transaction holds, a wait no deadlock
// detector sees (Group Replication's commit order).
func (s *Session) foldKeysOf(t *rewrite.Table, keys []string, ownPart bool) (errPkt []byte, err error) {
	refresh, err := s.snapshotFolds()
	if err != nil {
		return nil, err
	}
	part := SlotPartition{}
	if ownPart && !refresh {
		part = s.env.SlotPartition()
	}
	for len(keys) > 0 {
		batch := keys[:min(foldBatch, len(keys))]
		keys = keys[len(batch):]
		stmts, errPkt, err := s.foldStatements(t, batch, refresh, part)
		if err != nil || errPkt != nil {
			return errPkt, err
		}
		for _, q := range stmts {
			if errPkt, err := s.queryErr(q); err != nil || errPkt != nil {
				return errPkt, err
			}
		}
	}
	return nil, nil
}

// foldStatements returns the statements that fold the slots of the
// records of t with keys (locked), once their slot rows are locked: those
// in part (SlotPartition; the zero value: all).
func (s *Session) foldStatements(t *rewrite.Table, keys []string, refresh bool, part SlotPartition) (stmts []string, errPkt []byte, err error) {
	rows, ok, err := s.slotRowsOf(t, keys)
	if err != nil {
		return nil, nil, err
	}
	if ok && part.splits(t.Slots) {
		rows = slices.DeleteFunc(rows, func(r rewrite.SlotRow) bool { return !part.has(r.Slot) })
	}
	if !ok {
		// Which rows count cannot be read exactly: lock them by range.
		return t.FoldSQL(keys, refresh), nil, nil
	}
	if !refresh {
		// Zero rows change no total; only a refresh writes them.
		rows = slices.DeleteFunc(rows, func(r rewrite.SlotRow) bool { return r.Count == "0" })
	}
	var locked []rewrite.SlotRow
	for _, q := range t.LockSlotRowsSQL(rows) {
		r, err := s.query(q)
		if err != nil {
			return nil, nil, err
		}
		if r.Failed() {
			return nil, r.Err, nil
		}
		got, err := slotRows(t, r)
		if err != nil {
			return nil, nil, err
		}
		locked = append(locked, got...)
	}
	if refresh {
		// A record with no slot row at all needs no refresh: the
		// transaction's snapshot sees none of it either (roll-up deletes
		// a zeroed row only once no transaction older than its zeroing
		// is open), so its base row, read current by the statement, is
		// its total in every view. Left alone, it stays out of the
		// transaction's own versions, as directly when the statement
		// does not change it (a condition false on the total).
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
			return !slices.ContainsFunc(locked, func(r rewrite.SlotRow) bool { return r.Key == k })
		})
	}
	return t.FoldRowsSQL(keys, locked, refresh), nil, nil
}

// slotRowsOf returns every slot row of t's records with keys that counts
// for the session's transaction: the committed ones and its own. ok is
// false when they cannot be read exactly (the caller then locks them by
// range).
//
// Where the transaction's own consistent read sees exactly that, the
// session reads them itself: in the proxy's own transaction around an
// autocommit statement (its snapshot begins now, after the base rows were
// locked), at READ COMMITTED (a snapshot per statement), and under LOCK
// TABLES (no one else writes the tables). A client's transaction at
// REPEATABLE READ or SERIALIZABLE may have an older snapshot, or none yet
// (and a read would make one, earlier than the client's own first read):
// the committed rows are read by the Env's SlotReader, outside it, and its
// own uncommitted ones are those its increments wrote (txnState.ownRows).
func (s *Session) slotRowsOf(t *rewrite.Table, keys []string) (rows []rewrite.SlotRow, ok bool, err error) {
	if err := s.ensureSessionInfo(); err != nil {
		return nil, false, err
	}
	if s.readsSlotsItself() {
		r, err := s.query(t.SlotRowsSQL(keys))
		if err != nil {
			return nil, false, err
		}
		if r.Failed() {
			return nil, false, nil
		}
		rows, err := slotRows(t, r)
		return rows, err == nil, err
	}
	if s.env.SlotReader == nil {
		return nil, false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), slotReadTimeout)
	defer cancel()
	rows, err = s.readSlotRows(ctx, t, t.SlotRowsSQL(keys))
	if err != nil {
		s.log.Warn("reading slot rows for a fold failed: locking them by range", "rule", ruleName(t), "err", err)
		return nil, false, nil
	}
	if err := s.resolveOwnRows(t); err != nil {
		return nil, false, err
	}
	return s.txn.addOwnRows(ruleName(t), keys, rows), true, nil
}

// slottedKeys returns the keys of t's records that have slot rows with
// counts (with zero, any slot rows: see rewrite.Table.SlottedRowsSQL),
// above after ("" for all), from a page of at most limit slot rows, read
// where every row that counts is visible (as slotRowsOf reads them), and
// the key the next page starts after ("" when this one is the last). ok is
// false when they cannot be read exactly.
func (s *Session) slottedKeys(t *rewrite.Table, after string, limit int, zero bool) (keys []string, next string, ok bool, err error) {
	q := t.SlottedRowsSQL(after, limit, zero)
	var rows []rewrite.SlotRow
	if s.readsSlotsItself() {
		r, err := s.query(q)
		if err != nil {
			return nil, "", false, err
		}
		if r.Failed() {
			return nil, "", false, nil
		}
		if rows, err = slotRows(t, r); err != nil {
			return nil, "", false, err
		}
	} else {
		if s.env.SlotReader == nil {
			return nil, "", false, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), slotReadTimeout)
		defer cancel()
		if rows, err = s.readSlotRows(ctx, t, q); err != nil {
			s.log.Warn("reading slot rows for a fold failed: locking them by range", "rule", ruleName(t), "err", err)
			return nil, "", false, nil
		}
	}
	if len(rows) >= limit {
		next = rows[len(rows)-1].Key
	}
	if after == "" && !s.readsSlotsItself() {
		// The transaction's own rows (not committed, not read above):
		// their records go with the first page.
		if err := s.resolveOwnRows(t); err != nil {
			return nil, "", false, err
		}
		for _, o := range s.txn.ownRows[ruleName(t)] {
			if o.key == "" {
				// Records its increments named by another UNIQUE key or
				// a key of several columns: which ones is not known
				// here, and their rows are not committed. Not exact: the
				// caller folds by range, which sees them.
				return nil, "", false, nil
			}
			rows = append(rows, rewrite.SlotRow{RecordType: o.recordType, Key: o.key, Slot: o.slot})
		}
	}
	for _, r := range rows {
		if !slices.Contains(keys, r.Key) {
			keys = append(keys, r.Key)
		}
	}
	return keys, next, true, nil
}

// readsSlotsItself reports whether the session's own consistent read of
// slot rows sees exactly those that count (see slotRowsOf).
func (s *Session) readsSlotsItself() bool {
	if s.tablesLocked() || strings.HasPrefix(s.isolation(), "READ") && s.rw.weakAt == 0 {
		return true
	}
	// At SERIALIZABLE a plain read locks what it reads (the slot rows
	// of other records, by range): the SlotReader reads them instead.
	return s.wrapping && (s.isolation() != "SERIALIZABLE" || s.env.SlotReader == nil)
}

// slotRows reads the rows of a SELECT of record_type, record_id, slot and
// count of t's slot table; their keys as t.KeyOf gives them.
func slotRows(t *rewrite.Table, r *wire.Response) ([]rewrite.SlotRow, error) {
	out := make([]rewrite.SlotRow, 0, len(r.Rows))
	for _, row := range r.Rows {
		vals, err := wire.TextRow(row)
		if err != nil || len(vals) != 4 || vals[0] == nil || vals[1] == nil || vals[2] == nil || !t.Keyed() && !isInteger(vals[1]) || !isInteger(vals[3]) {
			return nil, errSlotRow
		}
		rt, ok1 := atoi(vals[0])
		slot, ok2 := atoi(vals[2])
		if !ok1 || !ok2 {
			return nil, errSlotRow
		}
		out = append(out, rewrite.SlotRow{RecordType: rt, Key: t.KeyOf(string(vals[1])), Slot: slot, Count: string(vals[3])})
	}
	return out, nil
}

// readSlotRows reads slot rows of t with the Env's SlotReader (see
// SlotReader), their keys as t.KeyOf gives them.
func (s *Session) readSlotRows(ctx context.Context, t *rewrite.Table, query string) ([]rewrite.SlotRow, error) {
	rows, err := s.env.SlotReader.ReadSlotRows(ctx, query)
	for i := range rows {
		rows[i].Key = t.KeyOf(rows[i].Key)
	}
	return rows, err
}

// atoi parses a small non-negative decimal integer.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

var errSlotRow = errors.New("slot table row is not (record_type, record_id, slot, count)")

// ownSlot is a slot row the transaction's increments wrote: its record
// type, key ("" when the increment named its records by another UNIQUE
// key or by the columns of a key of several columns or a string) and
// slot. guard, for a key "", is the index of that increment's guard in
// txnState.ownGuards (see resolveOwnRows); -1 otherwise.
type ownSlot struct {
	recordType int
	key        string
	slot       int
	guard      int
}

// noteOwnRows records the slot rows an increment of t wrote in the open
// transaction: for each record it named (keys; "" for records named by
// another UNIQUE key or a Keyed table's columns, whose increment's guard
// is ownGuards[rule][guard]), a row of each record type at slot.
func (x *txnState) noteOwnRows(rule string, keys []string, recordTypes []int, slot, guard int) {
	if x.ownRows == nil {
		x.ownRows = map[string][]ownSlot{}
	}
	for _, k := range keys {
		g := -1
		if k == "" {
			g = guard
		}
		for _, rt := range recordTypes {
			o := ownSlot{rt, k, slot, g}
			if !slices.Contains(x.ownRows[rule], o) {
				x.ownRows[rule] = append(x.ownRows[rule], o)
			}
		}
	}
}

// resolveOwnRows gives the transaction's own slot rows of t whose records
// its increments did not know (key "") the keys of the records their
// guards find by key, read in share mode: the increment holds those base
// rows in share mode already, so the read waits for nothing. Without it a
// fold would take every record it folds for such a row's, and lock slot
// rows that do not exist (with the gaps before them, which inserts of
// other records' slot rows then wait for). Rows whose guard cannot tell
// (records named by another UNIQUE key, whose guard reads the WHERE
// clause, or a guard that finds other records than its increment
// matched) stay unknown.
func (s *Session) resolveOwnRows(t *rewrite.Table) error {
	rule := ruleName(t)
	rows := s.txn.ownRows[rule]
	if !slices.ContainsFunc(rows, func(o ownSlot) bool { return o.key == "" && o.guard >= 0 }) {
		return nil
	}
	found := map[int][]string{}
	out := make([]ownSlot, 0, len(rows))
	add := func(o ownSlot) {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	for _, o := range rows {
		if o.key != "" || o.guard < 0 || o.guard >= len(s.txn.ownGuards[rule]) {
			add(o)
			continue
		}
		keys, done := found[o.guard]
		if !done {
			g := s.txn.ownGuards[rule][o.guard]
			if g.guard != nil {
				if byKey, ok := resolveKeys(t, g.guard.Keys, g.execution()); ok && len(byKey) > 0 {
					k, errPkt, err := s.queryKeys(t, t.ShareLockSQL(byKey))
					if err != nil {
						return err
					}
					if errPkt == nil && uint64(len(k)) == g.matched {
						keys = k
					}
				}
			}
			found[o.guard] = keys
		}
		if keys == nil {
			add(o) // unknown still
			continue
		}
		for _, k := range keys {
			add(ownSlot{o.recordType, k, o.slot, -1})
		}
	}
	s.txn.ownRows[rule] = out
	return nil
}

// addOwnRows returns rows (committed slot rows of the records with keys)
// with the rows the transaction wrote for those records marked, and added
// if not there: their counts are unknown here ("?"; the caller locks every
// row and reads its count). A row of records named by another UNIQUE key
// may be any of keys'.
func (x *txnState) addOwnRows(rule string, keys []string, rows []rewrite.SlotRow) []rewrite.SlotRow {
	for _, o := range x.ownRows[rule] {
		for _, k := range keys {
			if o.key != k && o.key != "" {
				continue
			}
			i := slices.IndexFunc(rows, func(r rewrite.SlotRow) bool { return r.RecordType == o.recordType && r.Key == k && r.Slot == o.slot })
			if i < 0 {
				rows = append(rows, rewrite.SlotRow{RecordType: o.recordType, Key: k, Slot: o.slot})
				i = len(rows) - 1
			}
			rows[i].Count = "?"
		}
	}
	return rows
}
