package executor

import (
	"bytes"
	"regexp"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// Consolidated reads. Identical concurrent autocommit reads of counters
// (the same text, by the same account from the same host, in sessions
// whose state gives the text the same meaning: database, character set,
// sql_mode, capabilities and the session variables they set) share one
// query. As with coalesced increments (lanes), the first read of a text
// runs at once, alone; those that arrive while it runs queue, and when it
// is done the first of them sends the query for all of them: a read joins
// the next query sent after it arrived, never one in flight, so it sees
// every increment acknowledged before it was sent. Each client gets the
// response with its own sequence numbers, and SHOW WARNINGS after it
// shows the query's warnings. A response larger than
// maxConsolidatedBytes, an error, or a broken connection: each of the
// others runs alone.

// maxConsolidatedBytes bounds the response a consolidated read keeps for
// the others.
const maxConsolidatedBytes = 256 << 10

// reader is one session's read waiting in a lane.
type reader struct{ done chan readTurn }

// readTurn is what a reader's wait ends with: it leads the next query
// (lead, itself first), or the query it joined answered (res), or else it
// runs alone.
type readTurn struct {
	lead []*reader
	res  *readResult
}

// readResult is the response a consolidated query gave, for each reader.
type readResult struct {
	resp     *wire.Buffer // as the leader's client got it (patched)
	warnings *wire.Buffer // SHOW WARNINGS after it
}

// consolidateKey returns the lane key of a read the session may share with
// others, or "" (see the comment above): a text statement alone in its
// command, a read the proxy rewrote to read counters' totals, in
// autocommit with no transaction, table locks or temporary table shadowing
// a ruled one, and Consolidatable.
func (s *Session) consolidateKey(p rewrite.Plan, op *rewrite.Read) string {
	if !s.env.Consolidate || s.link.Account == "" || s.rw.unshared || op.SQL == p.Original || s.stmtsInCommand > 1 ||
		!s.autocommitted() || s.tablesLocked() || len(s.rw.temp) > 0 || !rewrite.Consolidatable(p.Original, s.rewriteSession()) {
		return ""
	}
	flags := []byte("----")
	for i, on := range []bool{s.rw.strict, s.rw.noUnsignedSub, s.rw.ansiQuotes, s.rw.noBackslash} {
		if on {
			flags[i] = '+'
		}
	}
	return s.link.Account + "\x00" + s.rw.db + "\x00" + s.rw.charset + "\x00" + strconv.FormatUint(uint64(s.link.Caps), 10) + "\x00" +
		string(flags) + "\x00" + s.rw.sets + "\x00" + p.Original
}

// noteSessionSets keeps, for consolidateKey, the text of a statement that
// may set session variables (sql, of a COM_QUERY or a COM_STMT_PREPARE):
// sessions share reads only with sessions that ran the same ones. A
// session whose list grows beyond 4 KiB shares none.
func (s *Session) noteSessionSets(sql []byte) {
	if s.rw.unshared || !maySetSession(sql) || setsAutocommit.Match(sql) {
		return // SET autocommit: no read is shared in a transaction
	}
	if len(s.rw.sets)+len(sql) > 4<<10 {
		s.rw.unshared, s.rw.sets = true, ""
		return
	}
	s.rw.sets += string(sql) + "\x00"
}

// setsAutocommit matches a statement that only sets autocommit, which
// pools send often: it changes no read's result.
var setsAutocommit = regexp.MustCompile(`(?i)^\s*SET\s+(SESSION\s+|@@(SESSION\.)?)?autocommit\s*=\s*(0|1|ON|OFF|TRUE|FALSE)\s*;?\s*$`)

// maySetSession reports whether sql may set a session variable: it names
// SET (not as an UPDATE's or INSERT's clause) or CALL. Conservative.
func maySetSession(sql []byte) bool {
	t := bytes.TrimLeft(sql, " \t\r\n(")
	if len(t) >= 6 && (equalFold(t[:6], "select") || equalFold(t[:6], "update") || equalFold(t[:6], "insert") || equalFold(t[:6], "delete")) &&
		bytes.IndexByte(sql, ';') < 0 && !containsFold(sql, "call") && !containsFold(sql, ":=") {
		return false // one statement, whose SET (if any) is a clause
	}
	return containsFold(sql, "set") || containsFold(sql, "call") || containsFold(sql, ":=")
}

// consolidated runs read p (its SQL sql, the column definitions orig of
// the statement as written) through its text's lane. done reports that the
// client has its answer; otherwise the read runs alone (the caller's
// path), and the lane is handed on when the caller returns (leave, never
// nil).
func (s *Session) consolidated(sql string, orig [][]byte, key string) (done bool, leave func(), err error) {
	nop := func() {}
	lanes := &s.env.consolidate
	m := &reader{done: make(chan readTurn, 1)}
	if lanes.enter(key, m) {
		return false, func() { s.leaveReads(key) }, nil // alone, at once
	}
	t := <-m.done
	switch {
	case t.lead != nil:
		if len(t.lead) == 1 {
			return false, func() { s.leaveReads(key) }, nil // a batch of one: alone
		}
		err := s.leadReads(sql, orig, t.lead)
		s.leaveReads(key)
		return true, nop, err
	case t.res != nil:
		return true, nop, s.answerRead(t.res)
	}
	return false, nop, nil // the query failed: alone
}

// leaveReads ends the query of key's lane: the reads queued meanwhile are
// the next one's, led by the first of them.
func (s *Session) leaveReads(key string) {
	if batch := s.env.consolidate.leave(key); len(batch) > 0 {
		batch[0].done <- readTurn{lead: batch}
	}
}

// leadReads sends the query for the reads of batch (this session's
// first), answers this session's client as the response arrives, and
// hands the response to the others; they run alone when it cannot serve
// them.
func (s *Session) leadReads(sql string, orig [][]byte, batch []*reader) error {
	s.metrics().Consolidated(len(batch))
	s.env.Stats.ConsolidatedReads.Add(uint64(len(batch)))
	resp, size := &wire.Buffer{}, 0
	keep := func(payload []byte, role wire.Role) {
		if resp == nil {
			return
		}
		if size += len(payload); size > maxConsolidatedBytes {
			resp = nil
			return
		}
		resp.Packets = append(resp.Packets, bytes.Clone(payload))
		resp.Roles = append(resp.Roles, role)
	}
	alone := func() {
		for _, m := range batch[1:] {
			m.done <- readTurn{}
		}
	}
	res, err := s.forwardCopied(queryPacket(sql), wire.Results, nil, newColumnPatch(orig, false), keep)
	if err != nil || res.Failed() || resp == nil {
		alone()
		return err
	}
	out := &readResult{resp: resp}
	warned := false
	if n := len(resp.Packets); n > 0 {
		last := resp.Packets[n-1]
		switch {
		case last[0] == 0xfe && len(last) >= 5 && s.link.Caps&mysql.CLIENT_DEPRECATE_EOF == 0:
			warned = last[1] != 0 || last[2] != 0
		default:
			if ok, err := wire.ParseOK(last); err == nil {
				warned = ok.Warnings > 0
			}
		}
	}
	// What SHOW WARNINGS shows after it (see runBatch).
	cacheKey := s.rw.charset + "\x00" + strconv.FormatUint(uint64(s.link.Caps), 10)
	if cached, ok := s.env.coalesce.noWarnings.Load(cacheKey); ok && !warned {
		out.warnings = cached.(*wire.Buffer)
	} else {
		if err := s.saveWarnings(); err != nil {
			alone()
			return err
		}
		out.warnings = s.warnings
		if !warned && out.warnings != nil {
			s.env.coalesce.noWarnings.Store(cacheKey, out.warnings)
		}
	}
	for _, m := range batch[1:] {
		m.done <- readTurn{res: out}
	}
	return nil
}

// answerRead writes a consolidated query's response to this session's
// client.
func (s *Session) answerRead(res *readResult) error {
	seq := s.respSeq
	if err := s.writeHeld(res.resp, &seq, nil); err != nil {
		return err
	}
	s.warnings = res.warnings
	return nil
}
