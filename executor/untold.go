package executor

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// A transaction the server ended behind the client's back.
//
// A deadlock rolls the whole transaction back. When it is a statement of
// the proxy's own that meets it (a lock the proxy takes before the client's
// read, the preparation it uses to learn a read's columns), the client has
// not been told; so has it not when the server aborted the transaction
// while it waited for its client — Galera does, for a write certified on
// another node that needs its rows, and answers the session's next command,
// whichever it is, with the deadlock. Had the proxy gone on, the client's
// statements would run outside the transaction it believes open: a read
// without its own increments, a COMMIT that commits nothing while the
// client counts them done.
//
// So the session keeps the error (Session.untold) until the client has it:
// every command the proxy would send for the client meanwhile is not sent
// (errUntold), and the client's command is answered with the deadlock, as
// the server answers a direct client. A proxy's own replay that opens the
// transaction again exactly as the client saw it (replayOnce), or a retry
// of a statement that was its transaction's first (retry), clears it. So
// does the client's ROLLBACK: its transaction is over, as it asks.

// errUntold stops a command that would run after the server ended the
// client's transaction without the client knowing (see above).
var errUntold = errors.New("the server rolled the transaction back; the client is told first")

// deadlockPacket is the server's deadlock, for a transaction the server
// ended that the proxy learned of from a status.
var deadlockPacket = wire.Errorf(mysql.ER_LOCK_DEADLOCK, "40001", "Deadlock found when trying to get lock; try restarting transaction").Packet()

// noteSent records, for a command of the proxy's own about to be sent,
// what noteOwn needs of it: whether the client's transaction is open
// (not one the proxy wraps around an autocommit statement), and whether
// the command may end a transaction on purpose.
func (s *Session) noteSent(payload []byte) {
	s.sentInTxn = s.inTransaction() && !s.wrapping
	s.sentEnds = endsTransaction(payload)
}

// noteOwn records the outcome of a command of the proxy's own sent in the
// client's transaction: a deadlock, or a response whose status says the
// transaction is gone, ends it behind the client's back.
func (s *Session) noteOwn(res wire.Result, errPkt []byte) {
	if !s.sentInTxn {
		return
	}
	switch {
	case res.Failed() && res.ErrCode == mysql.ER_LOCK_DEADLOCK:
		if errPkt == nil {
			errPkt = deadlockPacket
		}
		s.untold = append([]byte(nil), errPkt...)
	case !res.Failed() && res.StatusKnown && res.Status&mysql.SERVER_STATUS_IN_TRANS == 0 && !s.sentEnds:
		s.untold = deadlockPacket
	}
}

// mayFollowAbort reports whether a command may be sent while the client
// has not been told that its transaction ended: commands that run no
// statement, SHOW (the proxy's SHOW WARNINGS keeps diagnostics for the
// client), and ROLLBACK (not to a savepoint).
func mayFollowAbort(payload []byte) bool {
	switch payload[0] {
	case mysql.COM_QUERY:
	case mysql.COM_STMT_EXECUTE:
		return false
	default:
		return true
	}
	w, _ := nextWord(payload[1:])
	return equalFold(w, "show") || isRollback(payload[1:])
}

// endsUntold reports whether the client's command ends its transaction
// whatever its state: ROLLBACK, or a reset of the session.
func endsUntold(payload []byte) bool {
	switch payload[0] {
	case mysql.COM_QUERY:
		return isRollback(payload[1:])
	case mysql.COM_RESET_CONNECTION, mysql.COM_CHANGE_USER:
		return true
	}
	return false
}

// isRollback reports whether sql is ROLLBACK of the whole transaction (not
// to a savepoint).
func isRollback(sql []byte) bool {
	w, rest := nextWord(sql)
	if !equalFold(w, "rollback") {
		return false
	}
	w, _ = nextWord(rest)
	return !equalFold(w, "to")
}

// endsTransaction reports whether a command of the proxy's own may end a
// transaction on purpose (noteOwn does not take its status as an abort).
func endsTransaction(payload []byte) bool {
	if len(payload) == 0 || payload[0] != mysql.COM_QUERY {
		return false
	}
	w, _ := nextWord(payload[1:])
	for _, k := range []string{"commit", "rollback", "begin", "start", "set", "xa", "lock", "unlock"} {
		if equalFold(w, k) {
			return true
		}
	}
	return false
}

// nextWord returns the word (a run of identifier bytes) that sql starts
// with after white space, and the text after it.
func nextWord(sql []byte) (w, rest []byte) {
	i := 0
	for i < len(sql) && (sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r') {
		i++
	}
	j := i
	for j < len(sql) && isWordByte(sql[j]) {
		j++
	}
	return sql[i:j], sql[j:]
}

// tellUntold answers the client's command with the error of the
// transaction the server ended (see above).
func (s *Session) tellUntold() error {
	seq := s.link.Client.NextSeq(s.respSeq)
	return s.writeErr(s.untold, &seq)
}

// toldDeadlock records that the client got a deadlock: its transaction is
// over (the status of the error's statement, which an ERR does not carry,
// would still say it is open).
func (s *Session) toldDeadlock() {
	s.untold = nil
	s.status &^= mysql.SERVER_STATUS_IN_TRANS
}

// transient reports whether an error of a command of the proxy's own says
// nothing of the command itself: a lock or a cluster's certification got
// in its way, or the node was not ready (Galera's 1047).
func transient(code uint16) bool {
	switch code {
	case mysql.ER_LOCK_DEADLOCK, mysql.ER_LOCK_WAIT_TIMEOUT, errRollbackDuringCommit, mysql.ER_ERROR_DURING_COMMIT,
		mysql.ER_UNKNOWN_COM_ERROR, mysql.ER_QUERY_INTERRUPTED:
		return true
	}
	return false
}
