package executor

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// lockWait is the lock-wait budget of the statement running: a statement
// the proxy runs again after a deadlock its own statements met (retry)
// waits, in all its attempts, no longer than the client's statement would
// have waited directly before its lock wait timeout (1205).
//
// Directly, a statement waiting for a row another transaction holds fails
// after innodb_lock_wait_timeout. Through the proxy the same wait can end
// in a deadlock instead (the holder asks for a row the proxy's statement
// holds in share mode, say), and the retry waits again from zero: it could
// succeed after the holder commits, long after the statement would have
// failed directly. So a retry that starts half a second or more after the
// statement did runs with innodb_lock_wait_timeout set to what is left of
// the session's own, rounded to the variable's unit (a second), restored
// when the statement ends (restoreLockWait).
type lockWait struct {
	// start is when the client's statement began (zero outside one).
	start time.Time
	// saved is the session's innodb_lock_wait_timeout while the proxy has
	// set another ("" when it has not).
	saved string
}

// runPlan runs one of the client's statements (execPlan) with its lock-wait
// budget (see lockWait).
func (s *Session) runPlan(p rewrite.Plan, ex *execution, seq *byte, more bool) (bool, error) {
	s.wait.start = time.Now()
	failed, err := s.execPlan(p, ex, seq, more)
	s.wait.start = time.Time{}
	if err == nil {
		err = s.restoreLockWait()
	}
	return failed, err
}

// boundLockWait sets the session's innodb_lock_wait_timeout to what is
// left of the statement's budget before a retry (see lockWait). It changes
// nothing in the statement's first half second, when what is left rounds
// to the whole timeout.
func (s *Session) boundLockWait() error {
	if s.wait.start.IsZero() {
		return nil
	}
	elapsed := time.Since(s.wait.start)
	if elapsed < time.Second/2 {
		return nil // what is left rounds to the whole timeout
	}
	total := s.wait.saved
	if total == "" {
		r, err := s.query("SELECT @@SESSION.innodb_lock_wait_timeout")
		if err != nil {
			return err
		}
		if r.Failed() || len(r.Rows) != 1 {
			return nil // the retry runs with the session's timeout
		}
		row, err := wire.TextRow(r.Rows[0])
		if err != nil || len(row) != 1 || row[0] == nil {
			return nil
		}
		total = string(row[0])
	}
	t, err := strconv.ParseFloat(total, 64)
	if err != nil {
		return nil
	}
	// Rounded to the variable's unit, a second, the wait ends at most half
	// a second away from where it would have directly. MariaDB takes 0
	// (fail at once if the row is held, as the statement would have by
	// now); MySQL's least is 1.
	least := 1.0
	if s.dial.IsMariaDB() {
		least = 0
	}
	left := max(math.Round(t-elapsed.Seconds()), least)
	if left >= t {
		return nil
	}
	r, err := s.query(fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", int64(left)))
	if err != nil {
		return err
	}
	if !r.Failed() {
		s.wait.saved = total
	}
	return nil
}

// restoreLockWait gives the session its own innodb_lock_wait_timeout back
// after a statement whose retry ran with less (boundLockWait). The
// statement's warnings, which the SET would clear, are kept for the
// client's SHOW WARNINGS first.
func (s *Session) restoreLockWait() error {
	if s.wait.saved == "" {
		return nil
	}
	if s.warnings == nil {
		if err := s.saveWarnings(); err != nil {
			return err
		}
	}
	r, err := s.query("SET SESSION innodb_lock_wait_timeout = " + s.wait.saved)
	if err != nil {
		return err
	}
	if r.Failed() {
		s.log.Warn("restoring innodb_lock_wait_timeout failed", "code", r.ErrCode)
		return nil
	}
	s.wait.saved = ""
	return nil
}
