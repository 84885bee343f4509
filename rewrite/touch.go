package rewrite

import (
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// Touch columns (Counter.Touch) keep, per slot row, the greatest time an
// increment assigned them, as an integer in the slot's count column:
//
//   - DATETIME(fsp): microseconds since 0001-01-01 00:00:00, plus one
//     (so every time is positive and 0 means "no time");
//   - TIMESTAMP(fsp): microseconds since the Unix epoch (UTC), which the
//     session's time zone converts the way the column itself does; the
//     column's range (1970-01-01 00:00:01 to 2038-01-19 03:14:07.999999
//     UTC) bounds it.
//
// The value assigned is first converted to the column's type with CAST(v
// AS DATETIME(fsp)), which rounds (MySQL) or truncates (MariaDB) the
// fraction exactly as storing it in the column does. A value the server
// cannot convert gives NULL, and the slotted increment raises its range
// error instead, so that the client's statement runs as written on the
// base row with the server's own error or warning (see the executor).
//
// A slot row's count starts at 0 ("no time") when roll-up zeroes it, and
// an increment keeps the greater of the slot's time and its own
// (GREATEST). The column reads as its base value, unless the slots hold a
// later time; roll-up and guards fold the same way.

// touchEpoch is the DATETIME that a touch slot value of 1 stands for.
const touchEpoch = "'0001-01-01 00:00:00'"

// touchBounds returns the range of a touch column's slot values, as
// decimal literals.
func (c *Counter) touchBounds() (lo, hi string) {
	if c.Integer {
		return "1", c.intSpan()
	}
	if c.Timestamp {
		return "1000000", "2147483647999999"
	}
	return "1", "9223372036854775807"
}

// touchType is the SQL type a touch column's value is cast to.
func (c *Counter) touchType() string {
	if c.Integer && c.Unsigned {
		return "UNSIGNED"
	}
	if c.Integer {
		return "SIGNED"
	}
	return "DATETIME(" + strconv.Itoa(c.FSP) + ")"
}

// intSpan is Max - Min + 1 of an integer touch column: its greatest slot
// value (v - Min + 1 stands for v, so that every value is positive).
func (c *Counter) intSpan() string {
	lo, _ := new(big.Int).SetString(c.Min, 10)
	hi, _ := new(big.Int).SetString(c.Max, 10)
	if lo == nil || hi == nil {
		return "0"
	}
	return new(big.Int).Add(new(big.Int).Sub(hi, lo), big.NewInt(1)).String()
}

// encodeTouch returns the SQL for the slot value of the time v (SQL)
// assigned to touch column c: NULL when the server cannot convert it (for
// an integer touch column, a value out of range when v is).
func (c *Counter) encodeTouch(v string) string {
	if c.Integer {
		// Out of the column's range, it is out of the slot values'
		// (touchBounds): the slotted increment raises its range error.
		// (v once: it may be a placeholder.)
		return "(" + v + " - (" + c.Min + ") + 1)"
	}
	conv := "CAST(" + v + " AS " + c.touchType() + ")"
	if c.Timestamp {
		return "CAST(UNIX_TIMESTAMP(" + conv + ") * 1000000 AS SIGNED)"
	}
	return "(TIMESTAMPDIFF(MICROSECOND, " + touchEpoch + ", " + conv + ") + 1)"
}

// encodeBase returns the SQL for the slot value of a temporal touch
// column's base value b (SQL naming the column), to compare with slot
// values.
func (c *Counter) encodeBase(b string) string {
	if c.Timestamp {
		return "CAST(UNIX_TIMESTAMP(" + b + ") * 1000000 AS SIGNED)"
	}
	return "(TIMESTAMPDIFF(MICROSECOND, " + touchEpoch + ", " + b + ") + 1)"
}

// decodeTouch returns the SQL for the time a slot value m (SQL, positive)
// stands for, as the column's type.
func (c *Counter) decodeTouch(m string) string {
	if c.Integer {
		return "CAST((" + m + ") + (" + c.Min + ") - 1 AS " + c.touchType() + ")"
	}
	if c.Timestamp {
		return "CAST(DATE_ADD(FROM_UNIXTIME((" + m + ") DIV 1000000), INTERVAL ((" + m + ") MOD 1000000) MICROSECOND) AS " + c.touchType() + ")"
	}
	return "CAST(DATE_ADD(CAST(" + touchEpoch + " AS DATETIME(6)), INTERVAL ((" + m + ") - 1) MICROSECOND) AS " + c.touchType() + ")"
}

// TouchLatest returns the SQL for the touch column's value given its base
// value b (SQL naming the column) and m, the greatest slot value (SQL,
// NULL or 0 when there is none): the base value unless the slots hold a
// later time. Both appear several times: m must be cheap (an aggregate of
// the enclosing query). An integer column is compared as it is, with the
// time m stands for: its base value may lie outside what a slot holds (a
// BIGINT's negative or topmost values, written on the base row).
func (c *Counter) TouchLatest(b, m string) string {
	m = "NULLIF(" + m + ", 0)"
	later := c.encodeBase(b) + " >= " + m
	if c.Integer {
		later = b + " >= " + c.decodeTouch(m)
	}
	return "IF(" + m + " IS NULL OR (" + b + " IS NOT NULL AND " + later + "), " + b + ", " + c.decodeTouch(m) + ")"
}

// touchRead returns the SQL for the value of touch column c of the record
// whose base column is base (SQL) and key key (SQL), read from slot table
// slots (as alias sp): one aggregate subquery over the record's slot rows.
func (c *Counter) touchRead(base, key, slots, sp string) string {
	return "CAST((SELECT " + c.TouchLatest(base, "MAX("+sp+".`count`)") + " FROM " + slots +
		" AS " + sp + " WHERE " + sp + ".`record_type` = " + itoa(c.RecordType) + " AND " + sp + ".`record_id` = " + key + ") AS " + c.touchType() + ")"
}

// strictTime matches the time literals a touch column takes in the
// slotted increment: 'YYYY-MM-DD hh:mm:ss[.ffffff]' (or with a T), the
// form ORMs send. Anything else (dates alone, numbers, odd spacing) runs as
// written, where the server converts it with its own rules and warnings.
var strictTime = regexp.MustCompile(`^([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,6})?$`)

// ValidTime reports whether s is a time a touch column takes as it is: in
// the strict form, a real calendar date from year 1 on, and a real time
// of day (no leap seconds, no zero dates).
func ValidTime(s string) bool {
	m := strictTime.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	n := make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	year, month, day, hour, minute, second := n[0], n[1], n[2], n[3], n[4], n[5]
	if year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59 {
		return false
	}
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[month-1]
	if month == 2 && year%4 == 0 && (year%100 != 0 || year%400 == 0) {
		days = 29
	}
	return day <= days
}

// touchFuncs are the functions of the current time a touch column takes
// in the slotted increment, with an optional precision argument.
var touchFuncs = map[string]bool{
	"now": true, "current_timestamp": true, "localtime": true, "localtimestamp": true,
	"utc_timestamp": true, "sysdate": true,
}

// touchValue reports whether e, assigned to touch column c, can go into
// the slotted increment: a placeholder (checked when it is executed, see
// ValidTime), a time literal in the strict form, or a function of the
// current time; for an integer touch column, a placeholder (an integer
// when it is executed) or an integer literal.
func touchValue(e ast.ExprNode, c *Counter) bool {
	if c.Integer {
		return isIntLiteralOrParam(unparen(e))
	}
	switch x := unparen(e).(type) {
	case *driver.ParamMarkerExpr:
		return true
	case *driver.ValueExpr:
		return x.Kind() == driver.KindString && ValidTime(x.GetString())
	case *ast.FuncCallExpr:
		if !touchFuncs[x.FnName.L] || len(x.Args) > 1 {
			return false
		}
		// The precision: any integer (the server rejects one above 6 with
		// the same error in the slotted increment as in the UPDATE).
		return len(x.Args) == 0 || isIntLiteralOrParam(x.Args[0])
	}
	return false
}

// touchTypes lists the record types of the touch columns among ctrs.
func touchTypes(ctrs []*Counter) string {
	var b strings.Builder
	for _, c := range ctrs {
		if c.Touch {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(itoa(c.RecordType))
		}
	}
	return b.String()
}
