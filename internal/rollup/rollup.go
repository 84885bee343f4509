// Package rollup folds slot rows back into their base rows ("roll-up" or
// compaction), so slot tables stay small and the base column converges to
// the true value for tools that bypass the proxy.
//
// Each fold is one short transaction for one record and counter: lock the
// base row, then the record's slot rows (SKIP LOCKED, so several proxies can
// roll up the same tables at once and increments in flight are not waited
// for), add their sum
// to the base column, zero them (and delete the ones that were already zero:
// see fold), commit. Base row + slots is the truth
// before and after, and the change commits atomically, so readers never see
// a total go down or double. Slot rows whose base row no longer exists are
// deleted.
package rollup

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/rewrite"
)

// Options tune a roll-up pass.
type Options struct {
	// Batch bounds how many records one pass folds per slot table. Zero
	// means 1000.
	Batch int
	// LockWait bounds the time one pass spends waiting for busy base rows.
	// A pass first folds every record whose base row is free (NOWAIT);
	// then it folds the busy ones, each waiting up to a second for the
	// transactions that hold its row (a hot record's row is always held
	// in share mode by some increment in flight) until LockWait is spent,
	// unless a transaction on the server has been open for a second or
	// more (innodb_trx; not known without PROCESS): then increments that
	// queue behind the fold would wait for it too, and busy records are
	// skipped. Zero means one second; negative means no waiting.
	LockWait time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Partition returns the part of the slots that increments through
	// this proxy pick from (slot_partition: slots s with s % count =
	// index; count <= 1, or a rule with fewer slots than count: all of
	// them); nil means all. A pass folds that part of each record, and
	// the other parts only where they were quiet (unchanged) since the
	// previous pass. On a multi-primary cluster the other parts are
	// written by increments through other nodes' proxies, whose own
	// roll-ups fold them: a fold of them would fail certification against
	// those increments, or abort them. A part nobody writes any more (its
	// proxy stopped) stays quiet, and whichever roll-up finds it so folds
	// it.
	Partition func() (count, index int)
	// QuietAfter is how long another part must stay unchanged before a
	// pass folds it: longer than a node's applier may lag behind under
	// load (a part that only looks unchanged from here is another
	// proxy's, live, and a fold of it would fail certification against
	// its increments, or abort them). Zero means 5 s.
	QuietAfter time.Duration
}

// Stats describe what a pass did.
type Stats struct {
	Folds       int           // records folded into their base rows
	SlotRows    int           // slot rows deleted (idle ones; active ones are zeroed)
	Orphans     int           // records whose base row was gone
	Skipped     int           // records whose slots were locked by someone else
	MaxLockHold time.Duration // longest time a base row stayed locked by a fold
	Pending     int           // records with slots seen at the start of the pass
	// Unfoldable are records whose fold the server refused (a total
	// beyond the column's range, a constraint): skipped, logged, left in
	// their slots; the pass goes on with the others.
	Unfoldable int
	// Began is when the pass began, before it listed the records with
	// slot rows: a pass with nothing skipped, unfoldable or left beyond
	// Batch folded every increment committed before Began.
	Began time.Time
}

func (s *Stats) add(o Stats) {
	s.Folds += o.Folds
	s.SlotRows += o.SlotRows
	s.Orphans += o.Orphans
	s.Skipped += o.Skipped
	s.Pending += o.Pending
	s.Unfoldable += o.Unfoldable
	s.MaxLockHold = max(s.MaxLockHold, o.MaxLockHold)
	if s.Began.IsZero() || !o.Began.IsZero() && o.Began.Before(s.Began) {
		s.Began = o.Began
	}
}

// Conn is what a roll-up needs from a connection (go-mysql's client.Conn).
type Conn interface {
	Execute(command string, args ...any) (*mysql.Result, error)
	// GetServerVersion is the version string of the server's greeting,
	// from which the roll-up takes the dialect (see dialect.Parse).
	GetServerVersion() string
}

var _ Conn = (*client.Conn)(nil)

type target struct {
	table   *rewrite.Table
	counter rewrite.Counter
}

// Roller runs roll-up passes that take turns over the records: each pass
// continues after the last record the previous one visited, so with more
// active records than Batch none is starved. Not safe for concurrent use.
type Roller struct {
	cursors map[string]cursor // by slot table
	// quiet are the other parts' slot rows of each record as the previous
	// pass saw them (see Options.Partition).
	quiet map[idleKey]quietSince
	// idle are the records seen with zero slot rows only, and when first
	// (see deletable).
	idle map[idleKey]time.Time
	// noTrxList: the account cannot read information_schema.innodb_trx
	// (it lacks PROCESS), logged once; zero slot rows are then kept.
	noTrxList bool
}

type idleKey struct {
	slots string
	rt    int
	id    string // the record's key (rewrite.Table.KeyOf)
	part  part
}

// part says which of a record's slot rows a fold takes.
type part uint8

const (
	allSlots    part = iota
	ownSlots         // the proxy's part (Options.Partition)
	othersSlots      // the other parts
)

// partSeen is what a pass saw of a record's slot rows of one part: their
// sum and how many there are.
type partSeen struct{ sum, rows int64 }

// quietSince is a part as passes saw it, and since when.
type quietSince struct {
	seen  partSeen
	since time.Time
}

// partition is a pass's Options.Partition.
type partition struct{ count, index int }

// of reports whether a rule of n slots is split: only then has a record
// parts other than all its slots.
func (p partition) of(n int) bool { return p.count > 1 && n >= p.count }

// where is the condition on slot rows of part k.
func (p partition) where(k part) string {
	switch k {
	case ownSlots:
		return fmt.Sprintf(" AND `slot` %% %d = %d", p.count, p.index)
	case othersSlots:
		return fmt.Sprintf(" AND `slot` %% %d <> %d", p.count, p.index)
	}
	return ""
}

type cursor struct {
	rt int
	id string // a key (rewrite.Table.KeyOf)
}

// Once runs one pass over every slot table of cat: up to Batch records per
// slot table, starting from the beginning. conn must be in autocommit mode
// and not shared.
func Once(ctx context.Context, conn Conn, cat *rewrite.Catalog, opts Options) (Stats, error) {
	return new(Roller).Once(ctx, conn, cat, opts)
}

// Once runs one pass, continuing where r's previous pass stopped.
func (r *Roller) Once(ctx context.Context, conn Conn, cat *rewrite.Catalog, opts Options) (Stats, error) {
	if r.cursors == nil {
		r.cursors = map[string]cursor{}
	}
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.LockWait == 0 {
		opts.LockWait = time.Second
	}
	if opts.QuietAfter <= 0 {
		opts.QuietAfter = 5 * time.Second
	}
	began := time.Now()
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Group counters by slot table: record types are per schema.
	bySlots := map[string]map[int]target{}
	var order []string
	for _, t := range cat.Tables() {
		key := t.QualifiedSlots()
		if bySlots[key] == nil {
			bySlots[key] = map[int]target{}
			order = append(order, key)
		}
		for _, c := range t.Counters {
			bySlots[key][c.RecordType] = target{table: t, counter: c}
		}
	}
	sort.Strings(order)
	// READ COMMITTED: the fold locks exactly the slot rows it reads and no
	// gaps, so increments inserting new slot rows never wait for it (and
	// cannot deadlock with it). With statement-based binary logging the
	// server refuses writes at READ COMMITTED (ERROR 1665): the fold then
	// runs at REPEATABLE READ, where it also locks the gaps it scans
	// (increments may wait for it, briefly, never lose a count).
	level := "READ COMMITTED"
	if r, err := conn.Execute("SELECT @@SESSION.binlog_format, @@GLOBAL.log_bin"); err == nil && len(r.Values) == 1 {
		format, _ := r.GetString(0, 0)
		logBin, _ := r.GetInt(0, 1)
		if logBin != 0 && strings.EqualFold(format, "STATEMENT") {
			level = "REPEATABLE READ"
		}
	}
	if _, err := conn.Execute("SET SESSION TRANSACTION ISOLATION LEVEL " + level); err != nil {
		return Stats{}, err
	}
	// A fold that waits for a busy base row waits at most a second (the
	// least the server allows), then gives up with 1205.
	if _, err := conn.Execute("SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		return Stats{}, err
	}
	waitLeft := max(opts.LockWait, 0)
	oldest, known := r.oldestTransaction(conn, opts.Logger)
	if !known || oldest > time.Second {
		// A transaction open for a second or more may hold a busy row for
		// long: increments queued behind a fold waiting for it would wait
		// for it too. Busy records wait for a pass that finds every
		// transaction young (or without PROCESS, for a free row).
		// (innodb_trx's ages are whole seconds: a transaction of a few
		// milliseconds across a second's turn reads as 1.)
		waitLeft = 0
	}
	var pt partition
	if opts.Partition != nil {
		pt.count, pt.index = opts.Partition()
	}
	if pt.count <= 1 {
		pt = partition{}
	}
	total := Stats{Began: began}
	var errs []error
	for _, slots := range order {
		st, err := r.passOne(ctx, conn, slots, bySlots[slots], opts, pt, oldest, known, &waitLeft)
		total.add(st)
		if err != nil {
			errs = append(errs, fmt.Errorf("roll-up of %s: %w", slots, err))
		}
	}
	return total, errors.Join(errs...)
}

// All repeats full passes until one finds nothing left to fold or delete
// (for turning a rule off), or ctx ends. Slot rows locked by transactions in
// flight are waited for, and so are transactions that began before a
// record's rows were zeroed (see Roller.deletable; without the PROCESS
// privilege zero rows are left). Slot rows of record types no rule names are left
// alone (and do not keep it running).
func All(ctx context.Context, conn Conn, cat *rewrite.Catalog, opts Options) (Stats, error) {
	opts.Batch = 1 << 30
	var total Stats
	var r Roller
	for {
		r.cursors = nil // every pass from the start
		st, err := r.Once(ctx, conn, cat, opts)
		total.add(st)
		if err != nil {
			return total, err
		}
		if st.Folds == 0 && st.Orphans == 0 && st.SlotRows == 0 {
			if st.Skipped == 0 && (len(r.idle) == 0 || r.noTrxList) {
				return total, nil
			}
			// Everything left is locked by transactions in flight, or
			// zero rows wait until no transaction can see their counts.
			// (More than 0.1 s: the server refreshes innodb_trx only when
			// it was last read longer ago than that.)
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(150 * time.Millisecond):
			}
		}
	}
}

// oldestTransaction returns how long the oldest InnoDB transaction of
// another connection has been open (0 when there is none), or known false
// when the server does not tell this account.
func (r *Roller) oldestTransaction(conn Conn, log *slog.Logger) (oldest time.Duration, known bool) {
	res, err := conn.Execute("SELECT COALESCE(MAX(TIMESTAMPDIFF(SECOND, `trx_started`, NOW())), 0) FROM `information_schema`.`innodb_trx` WHERE `trx_mysql_thread_id` <> CONNECTION_ID()")
	if err != nil || len(res.Values) != 1 {
		if !r.noTrxList {
			r.noTrxList = true
			log.Warn("roll-up cannot read information_schema.innodb_trx (grant PROCESS to its account): slot rows it zeroed are kept, not deleted", "err", err)
		}
		return 0, false
	}
	n, err := res.GetInt(0, 0)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// idleMargin covers innodb_trx's whole seconds (a transaction's age is
// read up to a second short) and its cache: the server fills the table
// anew only when it was last read more than 0.1 s before, so readers that
// poll it faster than that (Roller's own passes do not) keep it old.
const idleMargin = 2 * time.Second

// deletable reports whether the zero slot rows of record k, locked by the
// fold now, may be deleted: no transaction of another connection can still
// see them with a count. A transaction whose snapshot is older than the
// fold that zeroed them sees their old counts; should it write the record's
// row later, it must turn them into its own zero rows (see
// rewrite.Table.FoldSQL), which it cannot do to deleted rows. So they are
// deleted only when the record was seen with zero rows only at an earlier
// pass, and every transaction open now began after that.
func (r *Roller) deletable(k idleKey, now time.Time, oldest time.Duration, known bool) bool {
	since, seen := r.idle[k]
	if !seen {
		if r.idle == nil {
			r.idle = map[idleKey]time.Time{}
		}
		r.idle[k] = now
		return false
	}
	if known && now.Sub(since) > oldest+idleMargin {
		delete(r.idle, k)
		return true
	}
	return false
}

// passOne folds up to opts.Batch records of one slot table: those whose
// base row is free first, then the busy ones, waiting for their rows while
// *waitLeft lasts (what it spends is taken from it).
func (r *Roller) passOne(ctx context.Context, conn Conn, slots string, targets map[int]target, opts Options, pt partition,
	oldest time.Duration, known bool, waitLeft *time.Duration) (Stats, error) {
	var st Stats
	types := make([]string, 0, len(targets))
	for rt := range targets {
		types = append(types, strconv.Itoa(rt))
	}
	sort.Strings(types)
	cur, resume := r.cursors[slots]
	after := ""
	if resume {
		after = fmt.Sprintf(" AND (`record_type`, `record_id`) > (%d, %s)", cur.rt, cur.id)
	}
	// With a partition, each record's rows of the proxy's part and of
	// the others' (their sum and number: see Options.Partition).
	parts := ", 1, 0, 0"
	if pt.count > 1 {
		own := fmt.Sprintf("`slot` %% %d = %d", pt.count, pt.index)
		parts = fmt.Sprintf(", SUM(%s), COALESCE(SUM(IF(%s, 0, `count`)), 0), SUM(NOT (%s))", own, own, own)
	}
	res, err := conn.Execute(fmt.Sprintf("SELECT `record_type`, `record_id`%s FROM %s WHERE `record_type` IN (%s)%s GROUP BY `record_type`, `record_id` ORDER BY `record_type`, `record_id` LIMIT %d",
		parts, slots, strings.Join(types, ", "), after, opts.Batch))
	if err != nil {
		return st, err
	}
	type rec struct {
		rt      int
		id      string // its key (rewrite.Table.KeyOf)
		ownRows int64
		others  partSeen
	}
	var recs []rec
	for i := range res.Values {
		var vals [5]int64
		for j := range vals {
			if j == 1 {
				continue
			}
			v, err := res.GetInt(i, j)
			if err != nil {
				return st, fmt.Errorf("bad slot row: %v", err)
			}
			vals[j] = v
		}
		raw, err := res.GetString(i, 1)
		if err != nil {
			return st, fmt.Errorf("bad slot row: %v", err)
		}
		id := raw
		if tg, ok := targets[int(vals[0])]; ok {
			id = tg.table.KeyOf(raw)
		} else if _, err := strconv.ParseInt(raw, 10, 64); err != nil {
			id = "X'" + hex.EncodeToString([]byte(raw)) + "'" // (skipped below; the cursor passes it)
		}
		recs = append(recs, rec{int(vals[0]), id, vals[2], partSeen{vals[3], vals[4]}})
	}
	st.Pending = len(recs)
	if len(recs) < opts.Batch {
		delete(r.cursors, slots) // reached the end: next pass starts over
	} else {
		last := recs[len(recs)-1]
		r.cursors[slots] = cursor{last.rt, last.id}
	}
	// FOR UPDATE NOWAIT's error for a busy base row.
	nowait := dialect.Parse(conn.GetServerVersion()).LockNowaitError()
	var busy []rec
	for _, rc := range recs {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		tg, ok := targets[rc.rt]
		if !ok {
			continue // a record type with no rule now: left for an operator
		}
		k := allSlots
		if pt.of(tg.table.Slots) {
			k = ownSlots
			r.foldQuiet(conn, slots, tg, rc.id, rc.others, pt, opts.QuietAfter, oldest, known, &st)
			if rc.ownRows == 0 {
				continue
			}
		}
		one, err := r.foldAgain(conn, slots, tg, rc.id, pt, k, oldest, known, false)
		var me *mysql.MyError
		if errors.As(err, &me) && me.Code == nowait {
			// Base row busy: folded below, waiting for it.
			busy = append(busy, rc)
			continue
		}
		one, err = r.settle(opts, tg, rc.id, one, err)
		st.add(one)
		if err != nil {
			return st, err
		}
	}
	for _, rc := range busy {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if *waitLeft <= 0 {
			st.Skipped++
			continue
		}
		tg := targets[rc.rt]
		k := allSlots
		if pt.of(tg.table.Slots) {
			k = ownSlots
		}
		start := time.Now()
		one, err := r.foldAgain(conn, slots, tg, rc.id, pt, k, oldest, known, true)
		*waitLeft -= time.Since(start)
		one, err = r.settle(opts, tg, rc.id, one, err)
		st.add(one)
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// foldAgain is fold, tried again (up to foldAttempts in all) after a
// deadlock or a cluster's certification failure: on a multi-primary
// cluster every proxy's roll-up writes a hot record's base row, and two
// folds of it through different nodes at once fail one of them. A lock
// wait is not tried again.
func (r *Roller) foldAgain(conn Conn, slots string, tg target, id string, pt partition, k part, oldest time.Duration, known, wait bool) (Stats, error) {
	for attempt := 1; ; attempt++ {
		st, err := r.fold(conn, slots, tg, id, pt, k, oldest, known, wait)
		var me *mysql.MyError
		if attempt == foldAttempts || !errors.As(err, &me) ||
			me.Code != mysql.ER_LOCK_DEADLOCK && me.Code != 3101 && me.Code != mysql.ER_ERROR_DURING_COMMIT {
			return st, err
		}
		time.Sleep(time.Duration(attempt) * time.Millisecond)
	}
}

// foldAttempts bounds foldAgain.
const foldAttempts = 3

// foldQuiet folds the other parts' slot rows of a record (see
// Options.Partition) when passes have seen them unchanged for quietAfter,
// and keeps what this pass sees for the next. Such a fold does not wait
// for a busy base row, and one that fails is left for a later pass: those
// rows are other roll-ups' to fold.
func (r *Roller) foldQuiet(conn Conn, slots string, tg target, id string, seen partSeen, pt partition, quietAfter time.Duration,
	oldest time.Duration, known bool, st *Stats) {
	key := idleKey{slots, tg.counter.RecordType, id, othersSlots}
	if seen.rows == 0 {
		delete(r.quiet, key)
		return
	}
	if r.quiet == nil {
		r.quiet = map[idleKey]quietSince{}
	}
	before, ok := r.quiet[key]
	if !ok || before.seen != seen {
		r.quiet[key] = quietSince{seen, time.Now()}
		return
	}
	if time.Since(before.since) < quietAfter {
		return
	}
	one, err := r.fold(conn, slots, tg, id, pt, othersSlots, oldest, known, false)
	if err != nil {
		return
	}
	one.Skipped = 0
	st.add(one)
}

// settle turns a fold's server error into its outcome: a base row that
// stayed busy (a lock wait timeout, a deadlock with increments in flight,
// a cluster's certification failure) is skipped, to be folded later; a fold the server refused is logged and
// counted as unfoldable, and the pass goes on with the other records.
func (r *Roller) settle(opts Options, tg target, id string, one Stats, err error) (Stats, error) {
	var me *mysql.MyError
	if !errors.As(err, &me) {
		return one, err
	}
	switch me.Code {
	case mysql.ER_LOCK_DEADLOCK, mysql.ER_LOCK_WAIT_TIMEOUT, dialect.ErrLockNowait,
		// A Group Replication certification failure, or a remote
		// transaction that aborted the fold as it committed (Galera's
		// are deadlocks).
		3101, mysql.ER_ERROR_DURING_COMMIT:
		return Stats{Skipped: 1}, nil
	}
	opts.Logger.Warn("roll-up: a record cannot be folded; skipped", "table", tg.table.Qualified(), "counter", tg.counter.Name,
		"record", id, "err", me.Error())
	return Stats{Unfoldable: 1}, nil
}

// fold folds one record's slots of one counter in one transaction.
//
// Slot rows that carried counts are set to zero rather than deleted: a hot
// record keeps its slot rows, so its increments keep updating existing rows
// instead of inserting new ones (concurrent inserts of the same new row take
// gap locks and can deadlock), and transactions with older snapshots can
// still refresh them. Zero rows of a record that had zero rows only at an
// earlier pass are deleted once no transaction older than that is open
// (deletable), so idle records leave no rows.
//
// The base row is locked first: without waiting (NOWAIT) unless wait, when
// the fold waits for the transactions holding it (up to the session's lock
// wait timeout). Increments that ask for the row meanwhile queue behind the
// fold, as behind any writer of the row; from the lock to COMMIT the fold
// runs three short statements and never waits.
//
// k says which of the record's slot rows it takes (see Options.Partition).
func (ro *Roller) fold(conn Conn, slots string, tg target, id string, pt partition, k part, oldest time.Duration, known, wait bool) (st Stats, err error) {
	if _, err := conn.Execute("BEGIN"); err != nil {
		return st, err
	}
	defer func() {
		if err != nil {
			_, _ = conn.Execute("ROLLBACK")
		}
	}()
	// The base row before the slot rows: a fold never waits while it
	// holds slot rows (which would make increments wait behind it).
	lock := " FOR UPDATE NOWAIT"
	if wait {
		lock = " FOR UPDATE"
	}
	base, err := conn.Execute(fmt.Sprintf("SELECT 1 FROM %s WHERE %s%s", tg.table.Qualified(), tg.table.KeyCond(id), lock))
	if err != nil {
		return st, err
	}
	lockStart := time.Now()
	orphan := len(base.Values) == 0
	r, err := conn.Execute(fmt.Sprintf("SELECT `slot`, `count` FROM %s WHERE `record_type` = %d AND `record_id` = %s%s FOR UPDATE SKIP LOCKED",
		slots, tg.counter.RecordType, id, pt.where(k)))
	if err != nil {
		return st, err
	}
	if len(r.Values) == 0 {
		st.Skipped = 1
		_, err = conn.Execute("COMMIT")
		return st, err
	}
	var sum, latest int64 // a counter's sum; a touch column's latest time
	var counted, idle []string
	for i := range r.Values {
		slot, err1 := r.GetInt(i, 0)
		n, err2 := r.GetInt(i, 1)
		if err1 != nil || err2 != nil {
			return st, fmt.Errorf("bad slot row: %v %v", err1, err2)
		}
		sum += n
		latest = max(latest, n)
		if n == 0 {
			idle = append(idle, strconv.FormatInt(slot, 10))
		} else {
			counted = append(counted, strconv.FormatInt(slot, 10))
		}
	}
	where := func(ids []string) string {
		return fmt.Sprintf("`record_type` = %d AND `record_id` = %s AND `slot` IN (%s)", tg.counter.RecordType, id, strings.Join(ids, ", "))
	}
	if len(counted) > 0 && !orphan {
		col := quote(tg.counter.Name)
		set := fmt.Sprintf("%s = %s + %s", col, col, tg.counter.ValueSQL(strconv.FormatInt(sum, 10)))
		if tg.counter.Touch {
			// The later of the base row's time and the slots'.
			set = col + " = " + tg.counter.TouchLatest(col, strconv.FormatInt(latest, 10))
		}
		if _, err := conn.Execute(fmt.Sprintf("UPDATE %s SET %s WHERE %s",
			tg.table.Qualified(), set, tg.table.KeyCond(id))); err != nil {
			return st, err
		}
	}
	key := idleKey{slots, tg.counter.RecordType, id, k}
	switch {
	case orphan:
		// The base row is gone (deleted, or an increment raced a DELETE):
		// its slots go with it.
		idle = append(idle, counted...)
		counted = nil
		delete(ro.idle, key)
	case len(counted) > 0:
		delete(ro.idle, key) // not idle: its zero rows wait for a later pass
		idle = nil
	case len(idle) > 0 && !ro.deletable(key, time.Now(), oldest, known):
		idle = nil
	}
	if len(counted) > 0 {
		if _, err := conn.Execute(fmt.Sprintf("UPDATE %s SET `count` = 0 WHERE %s", slots, where(counted))); err != nil {
			return st, err
		}
	}
	if len(idle) > 0 {
		if _, err := conn.Execute(fmt.Sprintf("DELETE FROM %s WHERE %s", slots, where(idle))); err != nil {
			return st, err
		}
	}
	if _, err := conn.Execute("COMMIT"); err != nil {
		return st, err
	}
	st.MaxLockHold = time.Since(lockStart)
	switch {
	case orphan:
		st.Orphans = 1
	case len(counted) > 0:
		st.Folds = 1
	}
	st.SlotRows = len(idle)
	return st, nil
}

func quote(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Loop runs a pass every interval until ctx ends. dial opens the admin
// connection (again after an error); catalog returns the current catalog
// (it may change with reloads); report, if set, receives each pass's
// outcome.
func Loop(ctx context.Context, dial func(context.Context) (*client.Conn, error), catalog func() *rewrite.Catalog,
	interval time.Duration, opts Options, report func(Stats, error)) {
	var conn *client.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	var roller Roller
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil {
			c, err := dial(ctx)
			if err != nil {
				if report != nil {
					report(Stats{}, err)
				}
				continue
			}
			conn = c
		}
		st, err := roller.Once(ctx, conn, catalog(), opts)
		if err != nil && ctx.Err() == nil {
			// The connection may be broken: start afresh next time.
			_ = conn.Close()
			conn = nil
		}
		if report != nil {
			report(st, err)
		}
	}
}
