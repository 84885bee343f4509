package executor

import (
	"encoding/binary"
	"strconv"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// A rewritten read returns its counters as expressions (base + slots), whose
// column definitions are not the columns': another type (BIGINT for INT),
// other flags, no table or original name. Clients that read metadata (JDBC
// getObject, ORMs, the CLIs' column widths) would see another column. So the
// proxy learns the definitions the client's own statement has, by preparing
// it once on the backend (a prepare runs nothing), and sends those instead;
// in binary (prepared) results it also encodes each value as the column's
// own type. Definitions are cached per database and the read's MetaKey (rewrite.Read).

// metaCacheSize bounds the cached definitions.
const metaCacheSize = 4096

// metaCache maps database and MetaKey to column definitions; a nil entry
// means the statement's own definitions could not be learned (they are then
// left as the rewrite's). Safe for concurrent use.
type metaCache struct {
	mu sync.RWMutex
	m  map[string][][]byte
}

func (c *metaCache) get(key string) ([][]byte, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *metaCache) put(key string, defs [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][][]byte{}
	}
	if len(c.m) >= metaCacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = defs
}

// Forget drops every cached definition (after DDL).
func (c *metaCache) forget() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// originalColumns returns the column definitions of a read plan's own
// statement, or nil when they cannot be learned.
func (s *Session) originalColumns(p rewrite.Plan) ([][]byte, error) {
	var key string
	switch op := p.Op.(type) {
	case *rewrite.Read:
		key = op.MetaKey
	case *rewrite.LockingRead:
		key = op.MetaKey
	}
	if key == "" {
		key = p.Original
	}
	key = s.rw.db + "\x00" + strconv.FormatBool(s.rw.ansiQuotes) + strconv.FormatBool(s.rw.noBackslash) + "\x00" + key
	if defs, ok := s.env.meta.get(key); ok {
		return defs, nil
	}
	var r *wire.Response
	for attempt := 1; ; attempt++ {
		if err := s.send(append([]byte{mysql.COM_STMT_PREPARE}, p.Original...)); err != nil {
			return nil, err
		}
		var err error
		if r, err = s.rd.ReadAll(wire.Prepare); err != nil {
			return nil, err
		}
		if !r.Failed() {
			break
		}
		s.noteErr(r.ErrCode)
		s.noteOwn(r.Result, r.Err)
		if !transient(r.ErrCode) {
			break // the statement cannot be prepared: never learned
		}
		if s.untold != nil {
			// A deadlock ended the client's transaction: the client
			// hears it, and the read does not run.
			return nil, errUntold
		}
		if attempt == 3 {
			return nil, nil // not learned this time
		}
	}
	var defs [][]byte
	if !r.Failed() {
		defs = r.Columns
		if defs == nil {
			defs = [][]byte{}
		}
		// COM_STMT_CLOSE has no response.
		if _, err := s.link.Backend.WritePacket(binary.LittleEndian.AppendUint32([]byte{mysql.COM_STMT_CLOSE}, r.StmtID), 0); err != nil {
			return nil, err
		}
	}
	s.env.meta.put(key, defs)
	return defs, nil
}

// columnPatch rewrites the column definitions and rows of a rewritten
// read's result to the original statement's (see the file comment).
type columnPatch struct {
	orig   [][]byte
	binary bool     // rows are in the binary protocol
	got    [][]byte // the rewritten definitions, as they came
	recode []bool   // per column: the value is re-encoded for its type
}

// newColumnPatch returns the patch for a result whose original column
// definitions are orig (nil: no patch).
func newColumnPatch(orig [][]byte, binary bool) *columnPatch {
	if orig == nil {
		return nil
	}
	return &columnPatch{orig: orig, binary: binary}
}

// forward installs the patch on a Forward sink.
func (c *columnPatch) install(f *wire.Forward) {
	if c == nil {
		return
	}
	f.Column = c.column
	if c.binary {
		f.Row = c.row
	}
}

func (c *columnPatch) column(i int, def []byte) []byte {
	c.got = append(c.got, def)
	c.recode = append(c.recode, false)
	if i >= len(c.orig) {
		return def
	}
	gt, gflags, ok1 := defType(def)
	ot, oflags, ok2 := defType(c.orig[i])
	if !ok1 || !ok2 {
		return def
	}
	switch {
	case gt == ot && gflags&mysql.UNSIGNED_FLAG == oflags&mysql.UNSIGNED_FLAG:
	case integerType(gt) && integerType(ot):
		c.recode[i] = c.binary
	case dateTimeType(gt) && dateTimeType(ot):
		// A touch column's value, computed as DATETIME: a TIMESTAMP's
		// text and binary forms are the same.
	case !c.binary && numericText(gt) && numericText(ot):
		// Text rows print the value the same way.
	default:
		return def
	}
	if defOrigin(c.orig[i]) {
		// A column of a table: its definition is the column's (MySQL
		// marks columns next to the rewrite's subqueries nullable).
		return c.orig[i]
	}
	if sameButFlags(def, c.orig[i]) {
		// An expression the rewrite did not change: the server's
		// definition from running it is the truest.
		return def
	}
	// An expression: the server's flags depend on how the statement runs
	// (a temporary table drops BINARY), which the rewrite does alike; its
	// type, length, decimals and signedness are the statement's own.
	return mergeDef(c.orig[i], def)
}

// row re-encodes the values of a binary row whose column types changed.
func (c *columnPatch) row(row []byte) []byte {
	n := len(c.got)
	if n != len(c.orig) || len(row) < 1+(n+9)/8 {
		return row
	}
	bitmap := row[1 : 1+(n+9)/8]
	out := make([]byte, 0, len(row)+8)
	out = append(out, row[:1+len(bitmap)]...)
	pos := 1 + len(bitmap)
	for i := range n {
		if bitmap[(i+2)/8]&(1<<((i+2)%8)) != 0 {
			continue // NULL
		}
		gt, gflags, _ := defType(c.got[i])
		size, err := paramSize(gt, row[pos:])
		if err != nil {
			return row
		}
		v := row[pos : pos+size]
		pos += size
		if !c.recode[i] {
			out = append(out, v...)
			continue
		}
		ot, oflags, _ := defType(c.orig[i])
		enc, ok := recodeInt(v, gt, gflags&mysql.UNSIGNED_FLAG != 0, ot, oflags&mysql.UNSIGNED_FLAG != 0)
		if !ok {
			return row
		}
		out = append(out, enc...)
	}
	return out
}

// defFixed returns the offset of a column definition's fixed-length part
// (after its six strings and the length of the fixed fields): character
// set (2), length (4), type (1), flags (2), decimals (1).
func defFixed(def []byte) (int, bool) {
	pos := 0
	for range 6 {
		_, n, ok := wire.LenEncString(def[pos:])
		if !ok {
			return 0, false
		}
		pos += n
	}
	_, n, ok := wire.LenEnc(def[pos:])
	if !ok || len(def) < pos+n+10 {
		return 0, false
	}
	return pos + n, true
}

// defOrigin reports whether a column definition names a table column
// (its original table and name are set).
func defOrigin(def []byte) bool {
	pos := 0
	var orgTable, orgName []byte
	for i := range 6 {
		v, n, ok := wire.LenEncString(def[pos:])
		if !ok {
			return false
		}
		switch i {
		case 3:
			orgTable = v
		case 5:
			orgName = v
		}
		pos += n
	}
	return len(orgTable) > 0 && len(orgName) > 0
}

// mergeDef is the statement's own definition orig with the flags the
// server gave the rewritten expression (got), but orig's signedness and
// nullability.
func mergeDef(orig, got []byte) []byte {
	of, ok1 := defFixed(orig)
	gf, ok2 := defFixed(got)
	if !ok1 || !ok2 {
		return orig
	}
	out := append([]byte(nil), orig...)
	const own = mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG
	flags := binary.LittleEndian.Uint16(got[gf+7:])&^own | binary.LittleEndian.Uint16(orig[of+7:])&own
	binary.LittleEndian.PutUint16(out[of+7:], flags)
	return out
}

// sameButFlags reports whether two column definitions differ at most in
// their flags.
func sameButFlags(a, b []byte) bool {
	af, ok1 := defFixed(a)
	bf, ok2 := defFixed(b)
	return ok1 && ok2 && len(a) == len(b) && af == bf &&
		string(a[:af+7]) == string(b[:bf+7]) && string(a[af+9:]) == string(b[bf+9:])
}

// defType returns a column definition's type and flags.
func defType(def []byte) (byte, uint16, bool) {
	pos := 0
	for range 6 {
		_, n, ok := wire.LenEncString(def[pos:])
		if !ok {
			return 0, 0, false
		}
		pos += n
	}
	_, n, ok := wire.LenEnc(def[pos:])
	if !ok || len(def) < pos+n+9 {
		return 0, 0, false
	}
	pos += n
	return def[pos+6], binary.LittleEndian.Uint16(def[pos+7:]), true
}

func integerType(t byte) bool {
	switch t {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		return true
	}
	return false
}

func numericText(t byte) bool {
	return integerType(t) || t == mysql.MYSQL_TYPE_NEWDECIMAL || t == mysql.MYSQL_TYPE_DECIMAL
}

// recodeInt re-encodes a binary integer value of type from as type to.
func recodeInt(v []byte, from byte, fromUnsigned bool, to byte, toUnsigned bool) ([]byte, bool) {
	var u uint64
	switch len(v) {
	case 1:
		u = uint64(v[0])
		if !fromUnsigned {
			u = uint64(int64(int8(v[0])))
		}
	case 2:
		x := binary.LittleEndian.Uint16(v)
		u = uint64(x)
		if !fromUnsigned {
			u = uint64(int64(int16(x)))
		}
	case 4:
		x := binary.LittleEndian.Uint32(v)
		u = uint64(x)
		if !fromUnsigned {
			u = uint64(int64(int32(x)))
		}
	case 8:
		u = binary.LittleEndian.Uint64(v)
	default:
		return nil, false
	}
	neg := !fromUnsigned && int64(u) < 0
	if neg && toUnsigned {
		return nil, false
	}
	var size int
	switch to {
	case mysql.MYSQL_TYPE_TINY:
		size = 1
	case mysql.MYSQL_TYPE_SHORT:
		size = 2
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG:
		size = 4
	default:
		size = 8
	}
	if size < 8 {
		bits := uint(8 * size)
		if toUnsigned {
			if u>>bits != 0 {
				return nil, false
			}
		} else if s := int64(u); s < -(1<<(bits-1)) || s >= 1<<(bits-1) {
			return nil, false
		}
	}
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, u)
	return out[:size], true
}

// dateTimeType reports whether t is DATETIME or TIMESTAMP, whose values
// are written alike in text and binary rows.
func dateTimeType(t byte) bool {
	return t == mysql.MYSQL_TYPE_DATETIME || t == mysql.MYSQL_TYPE_TIMESTAMP ||
		t == mysql.MYSQL_TYPE_DATETIME2 || t == mysql.MYSQL_TYPE_TIMESTAMP2
}
