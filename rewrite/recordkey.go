package rewrite

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// Records and their keys.
//
// A record is one row of a ruled table; its slot rows name it by a record
// id. For a table whose primary key is one integer column (Table.Key), the
// record id is that column's value, in the slot table's BIGINT record_id.
// For any other primary key (several columns, or strings: Table.KeyColumns)
// it is an encoding of the key's values, in the keyed slot table's
// VARBINARY record_id (KeyedSlotsSuffix): the values in key order, joined
// by commas, each integer in decimal and each string as the hexadecimal
// digits of its bytes as stored (HEX: two keys the server tells apart have
// different ids, and one row always the same one, whatever the session's
// character set or sql_mode).
//
// Keys are passed around as SQL literals of record ids (what the slot
// table's record_id compares equal to): a decimal integer, or a quoted
// encoding such as '5,616263'. KeyOf makes one of a record_id as the server
// returns it.

// KeyedSlotsSuffix is appended to a schema's slot table name to name the
// slot table of its records with keyed record ids.
const KeyedSlotsSuffix = "_keyed"

// KeyedIDBytes is the keyed slot table's record_id width: a rule whose
// key's encoding may be longer is refused.
const KeyedIDBytes = 3000

// KeyColumn is one column of a primary key that names records by an
// encoding (see Table.KeyColumns).
type KeyColumn struct {
	Name string
	// Integer: an integer column (Unsigned: of an UNSIGNED type). Else a
	// string column, of Charset and Collation ("" for a binary string);
	// Char: a CHAR column (its values read without trailing spaces, so
	// they are encoded so too).
	Integer, Unsigned, Char bool
	Charset, Collation      string
}

// Keyed reports whether t's records are named by an encoding of their key
// (KeyColumns) rather than by one integer column (Key).
func (t *Table) Keyed() bool { return len(t.KeyColumns) > 0 }

// KeyNames are the key's columns, in key order.
func (t *Table) KeyNames() []string {
	if !t.Keyed() {
		return []string{t.Key}
	}
	out := make([]string, len(t.KeyColumns))
	for i, c := range t.KeyColumns {
		out[i] = c.Name
	}
	return out
}

// KeyDescription is the key for messages: "id" or "(user_id, day)".
func (t *Table) KeyDescription() string {
	if !t.Keyed() {
		return t.Key
	}
	if len(t.KeyColumns) == 1 {
		return t.KeyColumns[0].Name
	}
	return "(" + strings.Join(t.KeyNames(), ", ") + ")"
}

// isKey reports whether col is one of the key's columns.
func (t *Table) isKey(col string) bool {
	for _, k := range t.KeyNames() {
		if strings.EqualFold(k, col) {
			return true
		}
	}
	return false
}

// qualify returns qual.`col`, or `col` when qual is "".
func qualify(qual, col string) string {
	if qual == "" {
		return quoteIdent(col)
	}
	return qual + "." + quoteIdent(col)
}

// RecordID is the SQL expression of the record id of t's row under qual
// (an alias or qualified name, quoted; "" for unqualified columns).
func (t *Table) RecordID(qual string) string {
	if !t.Keyed() {
		return qualify(qual, t.Key)
	}
	parts := make([]string, len(t.KeyColumns))
	for i, c := range t.KeyColumns {
		col := qualify(qual, c.Name)
		switch {
		case c.Integer:
			parts[i] = col
		case c.Char:
			parts[i] = "HEX(RTRIM(" + col + "))"
		default:
			parts[i] = "HEX(" + col + ")"
		}
	}
	return "CONCAT_WS(',', " + strings.Join(parts, ", ") + ")"
}

// KeyOf returns the key (an SQL literal of the record id) of raw, a
// record_id as the server returns it in a row.
func (t *Table) KeyOf(raw string) string {
	if !t.Keyed() {
		return raw
	}
	if strings.Trim(raw, "0123456789ABCDEFabcdef,-") == "" {
		return "'" + raw + "'"
	}
	return "X'" + hex.EncodeToString([]byte(raw)) + "'" // not an encoding: matches no record
}

// keyValues decodes key (a key of t, see KeyOf) into one SQL literal per
// key column, as the column compares it: integers in decimal, strings as
// hexadecimal literals in the column's character set and collation.
func (t *Table) keyValues(key string) ([]string, error) {
	raw := strings.TrimSuffix(strings.TrimPrefix(key, "'"), "'")
	parts := strings.Split(raw, ",")
	if len(parts) != len(t.KeyColumns) {
		return nil, fmt.Errorf("record id %s does not name a row of %s", key, t.Qualified())
	}
	out := make([]string, len(parts))
	for i, c := range t.KeyColumns {
		p := parts[i]
		if c.Integer {
			if _, err := strconv.ParseInt(p, 10, 64); err != nil {
				if _, err := strconv.ParseUint(p, 10, 64); err != nil {
					return nil, fmt.Errorf("record id %s does not name a row of %s", key, t.Qualified())
				}
			}
			out[i] = p
			continue
		}
		if _, err := hex.DecodeString(p); err != nil {
			return nil, fmt.Errorf("record id %s does not name a row of %s", key, t.Qualified())
		}
		if c.Charset == "" {
			out[i] = "X'" + p + "'"
			continue
		}
		out[i] = "_" + c.Charset + " X'" + p + "' COLLATE " + quoteIdent(c.Collation)
	}
	return out, nil
}

// keyCond is the condition that t's row under qual has key (an equality
// of each key column: the server reads the row by its primary key). A key
// that names no row gives FALSE.
func (t *Table) keyCond(qual, key string) string {
	return t.keyCondOf(qual, key)
}

// KeyCond is the condition, on t's unqualified columns, that a row has
// key: its key columns' equalities.
func (t *Table) KeyCond(key string) string { return t.keyCond("", key) }

func (t *Table) keyCondOf(qual, key string) string {
	if !t.Keyed() {
		return qualify(qual, t.Key) + " = " + key
	}
	vals, err := t.keyValues(key)
	if err != nil {
		return "FALSE"
	}
	conds := make([]string, len(vals))
	for i, c := range t.KeyColumns {
		conds[i] = qualify(qual, c.Name) + " = " + vals[i]
	}
	return strings.Join(conds, " AND ")
}

// keysTable is a derived table `_k` of keys (see KeyOf) joined first to t
// (STRAIGHT_JOIN, FORCE INDEX (PRIMARY), under alias, quoted; "" for its
// qualified name) on its key, so that each of their rows is read by key;
// see the comment above it in fold.go. A key that names no row of a keyed
// table is left out.
func (t *Table) keysJoin(keys []string, alias string) string {
	target, qual := t.Qualified(), t.Qualified()
	if alias != "" {
		target, qual = t.Qualified()+" AS "+alias, alias
	}
	if !t.Keyed() {
		return fmt.Sprintf("%s STRAIGHT_JOIN %s FORCE INDEX (PRIMARY) ON %s = `_k`.`k`", keysTable(keys), target, qualify(qual, t.Key))
	}
	var b strings.Builder
	b.WriteString("(")
	n := 0
	for _, k := range keys {
		vals, err := t.keyValues(k)
		if err != nil && strings.HasPrefix(k, "<") {
			// explain's placeholder for keys known only as it runs: one
			// per key column.
			vals = make([]string, len(t.KeyColumns))
			for i, c := range t.KeyColumns {
				vals[i] = "<" + c.Name + ">"
			}
		} else if err != nil {
			continue
		}
		if n == 0 {
			b.WriteString("SELECT ")
			for i, v := range vals {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s AS `k%d`", v, i)
			}
		} else {
			b.WriteString(" UNION ALL SELECT ")
			b.WriteString(strings.Join(vals, ", "))
		}
		n++
	}
	if n == 0 {
		// No row: a derived table of no rows.
		b.WriteString("SELECT ")
		for i := range t.KeyColumns {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "NULL AS `k%d`", i)
		}
		b.WriteString(" FROM DUAL WHERE FALSE")
	}
	b.WriteString(") AS `_k`")
	on := make([]string, len(t.KeyColumns))
	for i, c := range t.KeyColumns {
		on[i] = fmt.Sprintf("%s = `_k`.`k%d`", qualify(qual, c.Name), i)
	}
	return fmt.Sprintf("%s STRAIGHT_JOIN %s FORCE INDEX (PRIMARY) ON %s", b.String(), target, strings.Join(on, " AND "))
}

// coversKey reports whether the columns cols include every column of t's
// key: a unique key of them is met by a row only where the key is.
func (t *Table) coversKey(cols []string) bool {
	for _, k := range t.KeyNames() {
		if !slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, k) }) {
			return false
		}
	}
	return true
}

// guardRecordKeys returns the keys of the records of t, a Keyed table,
// that where names by its key's columns (col = v for each, or col IN (v, …)
// for a key of one column), each as the values of its key's columns
// (KeyValue.Parts), for a guard that locks them by key (Table.LockSQL,
// which returns the keys of the rows it finds as the server stores them: a
// literal 'A' finds the row 'a' of a case-insensitive key): nil when a
// value is neither a placeholder nor a literal the encoding names exactly
// (an integer for an integer column, a printable ASCII string for a string
// column), or the key is named otherwise. The keys only lock: a locking
// read of the statement's own WHERE clause may scan a table of a few rows
// and lock rows the statement never reads.
func (w *reads) guardRecordKeys(where ast.ExprNode, t *Table, ref *tableRef) []KeyValue {
	if !t.Keyed() {
		return nil
	}
	eq, in := namedByConjuncts(where, ref)
	values := map[string][]ast.ExprNode{} // lower-case key column → its values
	for _, c := range t.KeyColumns {
		col := strings.ToLower(c.Name)
		if v, ok := eq[col]; ok {
			values[col] = []ast.ExprNode{v}
		} else if len(t.KeyColumns) == 1 {
			values[col] = in[col]
		}
	}
	var keys []KeyValue
	parts := make([]KeyValue, len(t.KeyColumns))
	var build func(i int) bool
	build = func(i int) bool {
		if i == len(t.KeyColumns) {
			keys = append(keys, KeyValue{Param: -1, Parts: slices.Clone(parts)})
			return true
		}
		c := t.KeyColumns[i]
		vs := values[strings.ToLower(c.Name)]
		if len(vs) == 0 {
			return false
		}
		for _, v := range vs {
			v = unparen(v)
			if p := w.paramIndex(v); p >= 0 {
				parts[i] = KeyValue{Param: p}
			} else if lit, ok := EncodeKeyPart(literalValue(v), c); ok {
				parts[i] = KeyValue{Literal: lit, Param: -1}
			} else {
				return false
			}
			if !build(i + 1) {
				return false
			}
		}
		return true
	}
	if !build(0) {
		return nil
	}
	return keys
}

// KeyPart is a value EncodeKeyPart encodes: an integer as its decimal
// digits (Int), or a string's bytes (Str, IsStr); OK when it is either.
type KeyPart struct {
	Int, Str  string
	IsStr, OK bool
}

func literalValue(v ast.ExprNode) KeyPart {
	if s := intLiteral(v); s != "" {
		return KeyPart{Int: s, OK: true}
	}
	if val, ok := v.(*driver.ValueExpr); ok && val.Kind() == driver.KindString {
		return KeyPart{Str: val.GetString(), IsStr: true, OK: true}
	}
	return KeyPart{}
}

// EncodeKeyPart is a value's part of a record id in key column c (see
// RecordID), when the encoding of the value is that of the value c stores
// for it: an integer (its decimal digits) for an integer
// column; a printable ASCII string for a string column (the same bytes in
// every ASCII-compatible character set; a CHAR column's without trailing
// spaces).
func EncodeKeyPart(v KeyPart, c KeyColumn) (string, bool) {
	switch {
	case !v.OK:
		return "", false
	case c.Integer:
		return v.Int, !v.IsStr && v.Int != ""
	case !v.IsStr:
		return "", false // compared as a number: '5', '05' and ' 5' all match
	}
	for i := 0; i < len(v.Str); i++ {
		if v.Str[i] < 0x20 || v.Str[i] > 0x7e {
			return "", false
		}
	}
	str := v.Str
	if c.Char {
		str = strings.TrimRight(str, " ")
	}
	return strings.ToUpper(hex.EncodeToString([]byte(str))), true
}

// IntKeyPart and StrKeyPart make the value EncodeKeyPart takes of a
// parameter: an integer's decimal digits, or a string's bytes.
func IntKeyPart(digits string) KeyPart { return KeyPart{Int: digits, OK: digits != ""} }

// StrKeyPart: see IntKeyPart.
func StrKeyPart(s string) KeyPart { return KeyPart{Str: s, IsStr: true, OK: true} }

// Narrowed returns restrict, a Restrict statement of t (or an
// Increment.ByKeys), with keys (record keys as SQL literals; none matches
// no row) in place of RestrictKeys. sameScan, for the statement that
// answers the client: an integer key is compared as key + 0, which offers
// the optimizer no index, so that the statement reads the rows the
// client's would, in its order (the row a range error names counts them;
// at READ COMMITTED a row another transaction holds is skipped or waited
// for alike). Without it the rows are read by key (a trial of one row
// reads that row only).
func (t *Table) Narrowed(restrict string, keys []string, sameScan bool) string {
	list := "NULL"
	if len(keys) > 0 {
		list = strings.Join(keys, ", ")
	}
	if sameScan && !t.Keyed() {
		return strings.Replace(restrict, " IN ("+RestrictKeys+")", " + 0 IN ("+list+")", 1)
	}
	return strings.Replace(restrict, RestrictKeys, list, 1)
}
