package rewrite

import (
	"strings"
	"testing"
)

// TestRecordKeys: a keyed table's record ids, as the server computes them
// (RecordID) and as the proxy reads them back (KeyOf) and names the rows
// again (keyCond, keysJoin).
func TestRecordKeys(t *testing.T) {
	tb := &Table{Schema: "app", Name: "m", SlotsTable: "slotted_counters_keyed", KeyColumns: []KeyColumn{
		{Name: "ch", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
		{Name: "n", Integer: true},
		{Name: "code", Char: true, Charset: "latin1", Collation: "latin1_swedish_ci"},
		{Name: "h"},
	}}
	if got, want := tb.RecordID("`_t`"), "CONCAT_WS(',', HEX(`_t`.`ch`), `_t`.`n`, HEX(RTRIM(`_t`.`code`)), HEX(`_t`.`h`))"; got != want {
		t.Errorf("RecordID = %s, want %s", got, want)
	}
	key := tb.KeyOf("6162,-5,78,00FF")
	if key != "'6162,-5,78,00FF'" {
		t.Errorf("KeyOf = %s", key)
	}
	want := "`ch` = _utf8mb4 X'6162' COLLATE `utf8mb4_general_ci` AND `n` = -5 AND `code` = _latin1 X'78' COLLATE `latin1_swedish_ci` AND `h` = X'00FF'"
	if got := tb.KeyCond(key); got != want {
		t.Errorf("KeyCond = %s\nwant %s", got, want)
	}
	// Not an id of this table: no row (and nothing the server would read
	// as SQL).
	for _, raw := range []string{"6162,5", "6162,x,78,00", "61',1,2,3", "6G,1,78,00"} {
		k := tb.KeyOf(raw)
		if got := tb.KeyCond(k); got != "FALSE" {
			t.Errorf("KeyCond(KeyOf(%q) = %s) = %s, want FALSE", raw, k, got)
		}
		if strings.Contains(k, "'") && !strings.HasPrefix(k, "'") && !strings.HasPrefix(k, "X'") {
			t.Errorf("KeyOf(%q) = %s is not one literal", raw, k)
		}
	}
	if got := tb.keysJoin([]string{"'zz'"}, "`_t`"); !strings.Contains(got, "WHERE FALSE") {
		t.Errorf("keysJoin of no row = %s", got)
	}
	// One integer column: its value, unchanged.
	plain := &Table{Schema: "app", Name: "r", Key: "id"}
	if plain.KeyOf("42") != "42" || plain.RecordID("r") != "r.`id`" || plain.KeyCond("42") != "`id` = 42" || plain.Keyed() {
		t.Errorf("single integer key: KeyOf %s, RecordID %s, KeyCond %s", plain.KeyOf("42"), plain.RecordID("r"), plain.KeyCond("42"))
	}
}
