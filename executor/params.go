package executor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// execParams is the decoded parameter block of a COM_STMT_EXECUTE packet.
// Values point into the packet; they are valid as long as it is.
type execParams struct {
	n      int
	null   []bool
	types  []byte // two bytes per parameter: type, flags (0x80 unsigned)
	values [][]byte
	long   []bool // value was sent with COM_STMT_SEND_LONG_DATA (absent here)
	// longVals holds the long data the proxy kept a copy of (nil when it
	// was too big to keep); see stmtInfo.
	longVals [][]byte
}

// parseExecute decodes the parameters of a COM_STMT_EXECUTE payload
// (command byte included) for a statement with n parameters. prevTypes are
// the types bound by the previous execute, used when the client omits them
// (new-params-bound flag 0). longData marks parameters sent as long data.
func parseExecute(p []byte, n int, prevTypes []byte, longData []bool) (execParams, error) {
	ep := execParams{n: n}
	bad := func(what string) error { return fmt.Errorf("%w: COM_STMT_EXECUTE: %s", wire.ErrMalformed, what) }
	if len(p) < 10 {
		return ep, bad("too short")
	}
	if n == 0 {
		return ep, nil
	}
	pos := 10
	nb := (n + 7) / 8
	if len(p) < pos+nb+1 {
		return ep, bad("truncated NULL bitmap")
	}
	bitmap := p[pos : pos+nb]
	pos += nb
	bound := p[pos]
	pos++
	if bound == 1 {
		if len(p) < pos+2*n {
			return ep, bad("truncated parameter types")
		}
		ep.types = p[pos : pos+2*n]
		pos += 2 * n
	} else {
		if len(prevTypes) != 2*n {
			return ep, bad("parameter types omitted before any were bound")
		}
		ep.types = prevTypes
	}
	ep.null = make([]bool, n)
	ep.values = make([][]byte, n)
	ep.long = make([]bool, n)
	for i := range n {
		if bitmap[i/8]&(1<<(i%8)) != 0 {
			ep.null[i] = true
			continue
		}
		if i < len(longData) && longData[i] {
			ep.long[i] = true
			continue
		}
		size, err := paramSize(ep.types[2*i], p[pos:])
		if err != nil {
			return ep, bad(err.Error())
		}
		ep.values[i] = p[pos : pos+size]
		pos += size
	}
	return ep, nil
}

// paramSize is the encoded size of one binary-protocol value of type t at
// the start of b.
func paramSize(t byte, b []byte) (int, error) {
	var size int
	switch t {
	case mysql.MYSQL_TYPE_NULL:
		size = 0
	case mysql.MYSQL_TYPE_TINY:
		size = 1
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		size = 2
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT:
		size = 4
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
		size = 8
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
		if len(b) < 1 {
			return 0, fmt.Errorf("truncated temporal value")
		}
		size = 1 + int(b[0])
	default:
		l, n, ok := wire.LenEnc(b)
		if !ok || uint64(len(b)-n) < l {
			return 0, fmt.Errorf("truncated value of type %d", t)
		}
		size = n + int(l)
	}
	if len(b) < size {
		return 0, fmt.Errorf("truncated value of type %d", t)
	}
	return size, nil
}

// stringParam returns parameter i when the client sent it as a string
// (not NULL, not long data the proxy did not keep).
func (ep execParams) stringParam(i int) (string, bool) {
	if i < 0 || i >= ep.n || ep.null[i] {
		return "", false
	}
	if ep.long[i] {
		if i < len(ep.longVals) && ep.longVals[i] != nil {
			return string(ep.longVals[i]), true
		}
		return "", false
	}
	switch ep.types[2*i] {
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING:
		v := ep.values[i]
		l, n, ok := wire.LenEnc(v)
		if !ok || uint64(len(v)-n) < l {
			return "", false
		}
		return string(v[n : n+int(l)]), true
	}
	return "", false
}

// intParam returns parameter i as a decimal integer string, or false when
// it is NULL, long data the proxy did not keep, or not an integer written
// the way the server would print it. A string such as ' 1', '01', '-0' or
// '1abc' is not: the server converts it with its own rules and warnings,
// so only the statement as the client wrote it gives the client's result.
func (ep execParams) intParam(i int) (string, bool) {
	if i < 0 || i >= ep.n || ep.null[i] {
		return "", false
	}
	if ep.long[i] {
		if i < len(ep.longVals) && ep.longVals[i] != nil && canonicalInt(ep.longVals[i]) {
			return string(ep.longVals[i]), true
		}
		return "", false
	}
	v := ep.values[i]
	unsigned := ep.types[2*i+1]&0x80 != 0
	switch ep.types[2*i] {
	case mysql.MYSQL_TYPE_TINY:
		if unsigned {
			return strconv.FormatUint(uint64(v[0]), 10), true
		}
		return strconv.FormatInt(int64(int8(v[0])), 10), true
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		u := binary.LittleEndian.Uint16(v)
		if unsigned {
			return strconv.FormatUint(uint64(u), 10), true
		}
		return strconv.FormatInt(int64(int16(u)), 10), true
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24:
		u := binary.LittleEndian.Uint32(v)
		if unsigned {
			return strconv.FormatUint(uint64(u), 10), true
		}
		return strconv.FormatInt(int64(int32(u)), 10), true
	case mysql.MYSQL_TYPE_LONGLONG:
		u := binary.LittleEndian.Uint64(v)
		if unsigned {
			return strconv.FormatUint(u, 10), true
		}
		return strconv.FormatInt(int64(u), 10), true
	case mysql.MYSQL_TYPE_DOUBLE:
		return exactInt(math.Float64frombits(binary.LittleEndian.Uint64(v)))
	case mysql.MYSQL_TYPE_FLOAT:
		return exactInt(float64(math.Float32frombits(binary.LittleEndian.Uint32(v))))
	case mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_DECIMAL:
		l, n, _ := wire.LenEnc(v)
		return decimalInt(v[n : n+int(l)])
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_BLOB:
		l, n, _ := wire.LenEnc(v)
		if s := v[n : n+int(l)]; canonicalInt(s) {
			return string(s), true
		}
	}
	return "", false
}

// exactInt returns f as a decimal integer when it is exactly one (drivers
// such as node's mysql2 send JavaScript numbers as DOUBLE), within ±2^53
// where every integer is exact.
func exactInt(f float64) (string, bool) {
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return "", false
	}
	if f == 0 {
		return "0", true // -0 too
	}
	return strconv.FormatInt(int64(f), 10), true
}

// decimalInt returns a DECIMAL parameter's text as a decimal integer when
// its value is exactly one ("5", "5.00"; not "5.1").
func decimalInt(s []byte) (string, bool) {
	if i := bytes.IndexByte(s, '.'); i >= 0 {
		for _, c := range s[i+1:] {
			if c != '0' {
				return "", false
			}
		}
		s = s[:i]
	}
	if string(s) == "-0" {
		return "0", true
	}
	if canonicalInt(s) {
		return string(s), true
	}
	return "", false
}

// canonicalInt reports whether s is a 64-bit integer in canonical decimal:
// an optional minus, no leading zeros, not "-0".
func canonicalInt(s []byte) bool {
	d := s
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 20 || (d[0] == '0' && (len(d) > 1 || len(s) > 1)) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	if _, err := strconv.ParseInt(string(s), 10, 64); err == nil {
		return true
	}
	_, err := strconv.ParseUint(string(s), 10, 64)
	return err == nil
}

// executePacket builds a COM_STMT_EXECUTE payload for stmtID carrying the
// given parameters of ep, in that order.
func (ep execParams) executePacket(stmtID uint32, idx []int) ([]byte, error) {
	b := []byte{mysql.COM_STMT_EXECUTE}
	b = binary.LittleEndian.AppendUint32(b, stmtID)
	b = append(b, 0)                           // no cursor
	b = binary.LittleEndian.AppendUint32(b, 1) // iteration count
	if len(idx) == 0 {
		return b, nil
	}
	bitmap := make([]byte, (len(idx)+7)/8)
	for j, i := range idx {
		if i < 0 || i >= ep.n {
			return nil, fmt.Errorf("parameter %d out of range", i)
		}
		if ep.long[i] && (i >= len(ep.longVals) || ep.longVals[i] == nil) {
			return nil, fmt.Errorf("parameter %d was sent as long data", i)
		}
		if ep.null[i] {
			bitmap[j/8] |= 1 << (j % 8)
		}
	}
	b = append(b, bitmap...)
	b = append(b, 1)
	for _, i := range idx {
		t, flags := ep.types[2*i], ep.types[2*i+1]
		if ep.long[i] && !ep.null[i] && !lenEncType(t) {
			t, flags = mysql.MYSQL_TYPE_STRING, 0
		}
		b = append(b, t, flags)
	}
	for _, i := range idx {
		switch {
		case ep.null[i]:
		case ep.long[i]:
			// The kept long data goes inline, as a length-encoded string.
			b = mysql.AppendLengthEncodedInteger(b, uint64(len(ep.longVals[i])))
			b = append(b, ep.longVals[i]...)
		default:
			b = append(b, ep.values[i]...)
		}
	}
	return b, nil
}

// lenEncType reports whether values of binary-protocol type t are sent as
// length-encoded strings.
func lenEncType(t byte) bool {
	switch t {
	case mysql.MYSQL_TYPE_NULL, mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT,
		mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE,
		mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
		return false
	}
	return true
}

// timeParam reports whether parameter i is a time a touch column takes in
// the slotted increment (see rewrite.ValidTime): a string in the strict
// form, or a DATE, DATETIME or TIMESTAMP parameter holding a real calendar
// date and time of day. Anything else (NULL, numbers, zero dates, long
// data) runs as written.
func (ep execParams) timeParam(i int) bool {
	if i < 0 || i >= ep.n || ep.null[i] || ep.long[i] {
		return false
	}
	v := ep.values[i]
	switch ep.types[2*i] {
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_BLOB:
		l, n, _ := wire.LenEnc(v)
		return rewrite.ValidTime(string(v[n : n+int(l)]))
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP:
		// Length, year (2 bytes), month, day, [hour, minute, second,
		// [microseconds (4 bytes)]].
		if len(v) < 5 || (v[0] != 4 && v[0] != 7 && v[0] != 11) {
			return false
		}
		t := fmt.Sprintf("%04d-%02d-%02d 00:00:00", binary.LittleEndian.Uint16(v[1:]), v[3], v[4])
		if v[0] >= 7 {
			t = fmt.Sprintf("%s %02d:%02d:%02d", t[:10], v[5], v[6], v[7])
		}
		if v[0] == 11 && binary.LittleEndian.Uint32(v[8:]) > 999999 {
			return false
		}
		return rewrite.ValidTime(t)
	}
	return false
}

// executePacketWith builds a COM_STMT_EXECUTE payload for stmtID carrying
// every parameter in order, with v (an unsigned BIGINT) inserted as
// parameter at (0 to n).
func (ep execParams) executePacketWith(stmtID uint32, at int, v uint64) ([]byte, error) {
	if at < 0 || at > ep.n {
		return nil, fmt.Errorf("parameter %d out of range", at)
	}
	n := ep.n + 1
	b := []byte{mysql.COM_STMT_EXECUTE}
	b = binary.LittleEndian.AppendUint32(b, stmtID)
	b = append(b, 0)                           // no cursor
	b = binary.LittleEndian.AppendUint32(b, 1) // iteration count
	bitmap := make([]byte, (n+7)/8)
	src := func(j int) int { // the client's parameter at position j, or -1
		switch {
		case j < at:
			return j
		case j == at:
			return -1
		}
		return j - 1
	}
	for j := range n {
		i := src(j)
		if i < 0 {
			continue
		}
		if ep.long[i] && (i >= len(ep.longVals) || ep.longVals[i] == nil) {
			return nil, fmt.Errorf("parameter %d was sent as long data", i)
		}
		if ep.null[i] {
			bitmap[j/8] |= 1 << (j % 8)
		}
	}
	b = append(b, bitmap...)
	b = append(b, 1)
	for j := range n {
		i := src(j)
		if i < 0 {
			b = append(b, mysql.MYSQL_TYPE_LONGLONG, 0x80)
			continue
		}
		t, flags := ep.types[2*i], ep.types[2*i+1]
		if ep.long[i] && !ep.null[i] && !lenEncType(t) {
			t, flags = mysql.MYSQL_TYPE_STRING, 0
		}
		b = append(b, t, flags)
	}
	for j := range n {
		i := src(j)
		switch {
		case i < 0:
			b = binary.LittleEndian.AppendUint64(b, v)
		case ep.null[i]:
		case ep.long[i]:
			b = mysql.AppendLengthEncodedInteger(b, uint64(len(ep.longVals[i])))
			b = append(b, ep.longVals[i]...)
		default:
			b = append(b, ep.values[i]...)
		}
	}
	return b, nil
}

// clone returns a copy of ep that shares no memory with the payload it
// was parsed from, or nil when a parameter sent as long data was not kept.
func (ep execParams) clone() *execParams {
	c := execParams{n: ep.n, null: slices.Clone(ep.null), types: slices.Clone(ep.types), long: slices.Clone(ep.long)}
	for _, v := range ep.values {
		c.values = append(c.values, slices.Clone(v))
	}
	for i, v := range ep.longVals {
		if i < len(ep.long) && ep.long[i] && v == nil {
			return nil
		}
		c.longVals = append(c.longVals, slices.Clone(v))
	}
	return &c
}
