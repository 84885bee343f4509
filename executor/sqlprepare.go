package executor

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// SQL-level prepared statements (see rewrite.Prepares): the session keeps
// the plan of each write of a ruled table prepared with PREPARE, and an
// EXECUTE of it folds the records it may write before it runs, as a
// guarded write whose statement is the EXECUTE.

// notePrepared keeps w (nil: forgets) as the write prepared as name.
func (s *Session) notePrepared(name string, w *rewrite.Plan) {
	if w == nil {
		delete(s.rw.sqlStmts, name)
		return
	}
	if s.rw.sqlStmts == nil {
		s.rw.sqlStmts = map[string]*rewrite.Plan{}
	}
	s.rw.sqlStmts[name] = w
}

// maybeSQLPrepared reports whether sql may start with PREPARE, EXECUTE,
// DEALLOCATE or DROP: a cheap test before rewrite.SQLPrepared.
func maybeSQLPrepared(sql []byte) bool {
	for _, c := range sql {
		switch c {
		case ' ', '\t', '\r', '\n', '(':
			continue
		case 'p', 'P', 'e', 'E', 'd', 'D', '/', '#', '-':
			return true
		}
		return false
	}
	return false
}

// sqlPrepared handles a query that names a statement prepared with PREPARE
// while the session keeps writes so prepared: an EXECUTE of one runs as a
// guarded write (done true); a PREPARE or DEALLOCATE of a name that names
// no ruled table, relayed as it is, forgets the write kept under the name
// (done true). Anything else is left to the caller.
func (s *Session) sqlPrepared(rw *rewrite.Rewriter, sql, payload []byte) (done bool, err error) {
	if err := s.ensureSessionInfo(); err != nil {
		return false, nil // planned as usual, which reports it
	}
	verb, name, using := rewrite.SQLPrepared(string(sql), s.rewriteSession())
	w := s.rw.sqlStmts[name]
	switch {
	case w == nil:
		return false, nil
	case verb == rewrite.ExecuteVerb:
		wop := w.Op.(*rewrite.Guarded)
		g := *wop.Guards[0]
		if g.Fallback != nil {
			// (Its parameters are not bound: the probe is not run.)
			g = *g.Fallback
		}
		bound, ok := rewrite.BindVars(g.KeysSQL, s.rewriteSession(), pick(using, g.KeysParams))
		if !ok {
			return false, nil // the server's own error for a wrong USING list
		}
		g.KeysSQL, g.KeysParams, g.Keys = bound, nil, nil
		if g.ScanSQL != "" {
			if g.ScanSQL, ok = rewrite.BindVars(g.ScanSQL, s.rewriteSession(), pick(using, g.ScanParams)); !ok {
				return false, nil
			}
			g.ScanParams = nil
		}
		op := *wop
		op.Guards = []*rewrite.Guard{&g}
		p := *w
		p.Op, p.Original = &op, string(sql)
		seq := s.respSeq
		s.stmtsInCommand = 1
		_, err := s.execGuardedWith(p, &op, nil, nil, &seq, false, func() ([]byte, []byte, error) { return payload, nil, nil }, nil)
		return true, err
	case verb == rewrite.PrepareVerb || verb == rewrite.DeallocateVerb:
		if rw.Catalog().Mentions(string(sql)) {
			return false, nil // planned: the PREPARE's plan keeps what it prepares
		}
		// Another statement under the name, or none.
		s.metrics().Statement(PathPassThrough, "")
		res, err := s.forward(payload, wire.Results, nil)
		if err == nil && (!res.Failed() || verb == rewrite.DeallocateVerb) {
			s.notePrepared(name, nil)
		}
		return true, err
	}
	return false, nil
}

// pick returns the variables of the placeholders at indexes idx.
func pick(vars []string, idx []int) []string {
	out := make([]string, 0, len(idx))
	for _, i := range idx {
		if i < 0 || i >= len(vars) {
			return nil
		}
		out = append(out, vars[i])
	}
	return out
}

// showWarningsFirst runs a multi-statement query that names no ruled table
// and whose SHOW WARNINGS shows the warnings the session keeps of its
// previous statement (see saveWarnings, keptWarningsReach): each SHOW
// WARNINGS before a statement that clears them is answered with them; on
// MariaDB a statement before it that leaves them (rewrite.
// LeavesDiagnostics) runs alone, and they stay the client's when it raised
// no condition. The rest of the query is sent as it is. A statement sent
// first that reads ROW_COUNT() is given the client's count when the
// server's is not that (see rowCountFor).
func (s *Session) showWarningsFirst(sql []byte) error {
	seq := s.respSeq
	rest := string(sql)
	sess := s.rewriteSession()
	relay := func(stmt string, more bool) (wire.Result, error) {
		if sub, first, ok := s.rowCountFor(stmt); ok {
			// The server's ROW_COUNT() is of the proxy's statements, not
			// of the client's statement before: the count the client was
			// given, under the columns of the statement as written.
			orig, err := s.originalColumns(rewrite.Plan{Original: first})
			if err != nil {
				return wire.Result{}, err
			}
			return s.relayAsPatched(queryPacket(sub), &seq, more, newColumnPatch(orig, false))
		}
		return s.relayAs(queryPacket(stmt), &seq, more)
	}
	for s.warnings != nil {
		first, after, ok := rewrite.SplitFirst(rest, sess)
		if !ok {
			break
		}
		if isShowWarnings([]byte(first)) {
			status := func(uint16) uint16 { return s.status | mysql.SERVER_MORE_RESULTS_EXISTS }
			if err := s.writeHeld(s.warnings, &seq, status); err != nil {
				return err
			}
			rest = after
			continue
		}
		if !s.dial.IsMariaDB() || !rewrite.LeavesDiagnostics(first, sess) || !isShowWarnings([]byte(after)) && !s.keptWarningsReach([]byte(after)) {
			break
		}
		s.metrics().Statement(PathPassThrough, "")
		res, err := relay(first, true)
		if err != nil || res.Failed() {
			return err // an error ends the query, as on the server
		}
		if res.Warnings > 0 {
			s.warnings = nil // the server's are the client's now
		}
		rest = after
	}
	if s.warnings != nil && isShowWarnings([]byte(rest)) {
		status := func(uint16) uint16 { return s.status &^ mysql.SERVER_MORE_RESULTS_EXISTS }
		return s.writeHeld(s.warnings, &seq, status)
	}
	s.warnings = nil
	s.metrics().Statement(PathPassThrough, "")
	_, err := relay(rest, false)
	return err
}
