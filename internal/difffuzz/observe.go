package difffuzz

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// refusedCode is the error the proxy answers a statement it refuses with.
const refusedCode = 1235

// result is what a client sees of one statement's response.
type result struct {
	isErr    bool
	code     uint16
	state    string
	msg      string
	other    string // an error that is not a server's (a broken connection)
	affected uint64
	insertID uint64
	warnings uint16
	inTrans  bool
	cols     string // names
	types    string // type/decimals/unsigned per column
	rows     string
}

// obs is the observation of one step on one side: its results (several
// for a multi-statement query) and whether it blocked.
type obs struct {
	blocked bool
	results []result
}

// observe renders a response (or error) while its memory is still valid.
func observe(r *mysql.Result, err error) result {
	var out result
	if err != nil {
		var me *mysql.MyError
		if errors.As(err, &me) {
			out.isErr, out.code, out.state, out.msg = true, me.Code, me.State, me.Message
		} else {
			out.isErr, out.other = true, err.Error()
		}
		return out
	}
	if r == nil {
		out.other = "no result"
		return out
	}
	out.affected, out.insertID, out.warnings = r.AffectedRows, r.InsertId, r.Warnings
	out.inTrans = r.Status&mysql.SERVER_STATUS_IN_TRANS != 0
	if r.Resultset == nil || len(r.Fields) == 0 {
		return out
	}
	var names, types, rows strings.Builder
	for i, f := range r.Fields {
		if i > 0 {
			names.WriteString(",")
			types.WriteString(" ")
		}
		names.Write(f.Name)
		fmt.Fprintf(&types, "%d/%d/%v", f.Type, f.Decimal, f.Flag&mysql.UNSIGNED_FLAG != 0)
	}
	for _, row := range r.Values {
		rows.WriteString("(")
		for i, v := range row {
			if i > 0 {
				rows.WriteString(",")
			}
			switch x := v.Value().(type) {
			case nil:
				rows.WriteString("NULL")
			case []byte:
				fmt.Fprintf(&rows, "%q", string(x))
			case string:
				fmt.Fprintf(&rows, "%q", x)
			default:
				fmt.Fprintf(&rows, "%v", x)
			}
		}
		rows.WriteString(")")
	}
	out.cols, out.types, out.rows = names.String(), types.String(), rows.String()
	return out
}

// String renders everything a client sees of the result.
func (r result) String() string {
	if r.isErr {
		if r.other != "" {
			return "error: " + r.other
		}
		return fmt.Sprintf("ERR %d (%s) %s", r.code, r.state, r.msg)
	}
	s := fmt.Sprintf("OK affected=%d insert_id=%d warnings=%d in_trans=%v", r.affected, r.insertID, r.warnings, r.inTrans)
	if r.cols != "" {
		s += fmt.Sprintf(" cols=[%s] types=[%s] rows=%s", r.cols, r.types, r.rows)
	}
	return s
}

// String renders the observation, one result per line.
func (o obs) String() string {
	var parts []string
	for _, r := range o.results {
		parts = append(parts, r.String())
	}
	s := strings.Join(parts, " | ")
	if o.blocked {
		s = "(blocked, then) " + s
	}
	return s
}

// refusal is the reason of a proxy refusal in o's first result, or "".
// A multi-statement query refused after a first result is reported by
// refusedLater.
func (o obs) refusal() string {
	if len(o.results) == 0 {
		return ""
	}
	return refusalOf(o.results[0])
}

func refusalOf(r result) string {
	if !r.isErr || r.code != refusedCode || !strings.HasPrefix(r.msg, "slotproxy:") {
		return ""
	}
	reason := r.msg
	if i := strings.Index(reason, "nothing was run: "); i >= 0 {
		reason = reason[i+len("nothing was run: "):]
	}
	return reason
}

// refusedLater reports whether a result after the first one is a refusal.
func (o obs) refusedLater() bool {
	for _, r := range o.results[min(1, len(o.results)):] {
		if refusalOf(r) != "" {
			return true
		}
	}
	return false
}

// Kinds of difference, from the most to the least visible.
const (
	KindBlocked  = "blocked"  // one side blocked, the other did not
	KindError    = "error"    // error or not, or a different error
	KindAffected = "affected" // affected rows, insert id or warnings
	KindStatus   = "status"   // the in-transaction flag
	KindValues   = "values"   // column names, types or values
	KindFinal    = "final"    // table contents at the end of the sequence
	KindOrphan   = "orphan"   // slot rows without a base row
	KindRollup   = "rollup"   // roll-up failed, or changed a total
	KindHung     = "hung"     // a side did not answer at all
)

// kindOf is the kind of the difference between p (proxy) and d (direct),
// "" when they are equal. rename maps the plain schema's name to the
// ruled one in the direct side's messages.
func kindOf(p, d obs, rename func(string) string) string {
	if p.blocked != d.blocked && !(lockWaitEnded(p) && lockWaitEnded(d)) {
		return KindBlocked
	}
	if len(p.results) != len(d.results) {
		return KindError
	}
	for i := range p.results {
		a, b := p.results[i], d.results[i]
		b.msg = rename(b.msg)
		b.rows = rename(b.rows)
		switch {
		case a.isErr != b.isErr || a.code != b.code || a.state != b.state || a.msg != b.msg || a.other != b.other:
			return KindError
		case a.affected != b.affected || a.insertID != b.insertID || a.warnings != b.warnings:
			return KindAffected
		case a.inTrans != b.inTrans:
			return KindStatus
		case a.cols != b.cols || a.types != b.types || a.rows != b.rows:
			return KindValues
		}
	}
	return ""
}

// lockWaitEnded reports whether o ended with a lock wait timeout: it
// waited, whether or not longer than the step timeout (InnoDB ends lock
// waits within a second of the timeout).
func lockWaitEnded(o obs) bool {
	n := len(o.results)
	return n > 0 && o.results[n-1].isErr && o.results[n-1].code == 1205
}

// execute runs st on c and observes every result.
func execute(c *client.Conn, st Step) obs {
	var o obs
	if st.Multi {
		_, err := c.ExecuteMultiple(st.SQL, func(r *mysql.Result, err error) {
			o.results = append(o.results, observe(r, err))
		})
		if err != nil && len(o.results) == 0 {
			o.results = append(o.results, observe(nil, err))
		}
		return o
	}
	r, err := c.Execute(st.SQL, st.Args...)
	o.results = append(o.results, observe(r, err))
	return o
}
