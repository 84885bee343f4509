//go:build knownbugs

// Tests that reproduce open bugs found by the hardening work (see the
// closing note of the session that added them). They fail today, so they
// are kept out of the default suite; run them with
//
//	go test -tags knownbugs -run 'Test' ./proxy
//
// and move each one back into hardening_test.go when its bug is fixed.

package proxy_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestBigStatementOnRuledTable: a statement of 16 MiB or more that names a
// ruled table must still be rewritten (or refused), never relayed as is: as
// is, reads miss the slots and absolute writes leave the slots in place.
func TestBigStatementOnRuledTable(t *testing.T) {
	p := startRuledProxy(t)
	pad := " /* " + strings.Repeat("p", wireMax) + " */"
	direct := dialRawDB(t, testdb.Shared().Addr, plainSchema)
	proxied := dialRawDB(t, p.addr, ruledSchema)
	steps := []step{
		text("UPDATE repos SET downloads = downloads + 5 WHERE id = 1"),
		text("SELECT id, downloads FROM repos WHERE id = 1" + pad),
		prep("SELECT id, downloads FROM repos WHERE id = ?"+pad, 1),
		text("UPDATE repos SET downloads = 100 WHERE id = 1" + pad),
		text("SELECT id, downloads FROM repos ORDER BY id"),
		prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", 1, strings.Repeat(" ", wireMax)+"999"),
		text("SELECT COUNT(*) FROM slotted_counters WHERE record_id = 999"),
	}
	for i, st := range steps {
		if strings.Contains(st.sql, "slotted_counters") {
			// Slot rows exist only in the ruled schema: count them there
			// directly, and expect none (as the plain schema has no slots).
			got := runStep(direct.Conn, text(strings.Replace(st.sql, "slotted_counters", ruledSchema+".slotted_counters", 1)))
			if !strings.Contains(got, "rows=(0)") {
				t.Errorf("step %d: orphan slot rows for a key without a base row: %s", i, got)
			}
			continue
		}
		want := runStep(direct.Conn, st)
		got := runStep(proxied.Conn, st)
		if got != want {
			t.Errorf("step %d %.80q (%d bytes):\n proxy:  %s\n direct: %s", i, st.sql, len(st.sql), got, want)
		}
	}
}

// TestHardeningLongDataKey: the key of a rewritten increment or guarded
// write may be sent with COM_STMT_SEND_LONG_DATA. The statement must behave
// as it does directly, not end the connection.
func TestHardeningLongDataKey(t *testing.T) {
	p := startRuledProxy(t)
	for _, q := range []string{
		"UPDATE repos SET downloads = downloads + ? WHERE id = ?",
		"UPDATE repos SET downloads = ? WHERE id = ?",
	} {
		var results []string
		for _, target := range []struct{ addr, db string }{{testdb.Shared().Addr, plainSchema}, {p.addr, ruledSchema}} {
			r := dialRawDB(t, target.addr, target.db)
			id := prepareRaw(t, r, q)
			r.command(gomysql.COM_STMT_SEND_LONG_DATA, append(binary.LittleEndian.AppendUint32(nil, id), append([]byte{1, 0}, "2"...)...)...)
			exec := binary.LittleEndian.AppendUint32(nil, id)
			exec = append(exec, 0, 1, 0, 0, 0, 0, 1, gomysql.MYSQL_TYPE_LONGLONG, 0, gomysql.MYSQL_TYPE_STRING, 0)
			exec = binary.LittleEndian.AppendUint64(exec, 3)
			r.command(gomysql.COM_STMT_EXECUTE, exec...)
			pkt, err := r.ReadPacket()
			var res string
			switch {
			case err != nil:
				res = "connection lost: " + err.Error()
			case pkt[0] == 0xff:
				res = parseErrPacket(pkt).Error()
			default:
				ok := r.HandleOKPacket(pkt)
				res = fmt.Sprintf("OK affected=%d", ok.AffectedRows)
				res += " then " + render(r.Execute("SELECT id, downloads FROM repos ORDER BY id"))
			}
			results = append(results, res)
		}
		if results[0] != results[1] {
			t.Errorf("%s with the key as long data:\n proxy:  %s\n direct: %s", q, results[1], results[0])
		}
	}
	noPanics(t, p)
}

// TestInjectionPreparedParams: hostile strings as parameters of rewritten
// prepared statements behave exactly as they do directly.
func TestInjectionPreparedParams(t *testing.T) {
	hostile := []any{
		"1' OR 1=1 -- ", `1\' OR 1=1 -- `, "1\" OR 1=1 -- ", "1 OR 1=1", "1; DELETE FROM repos",
		"1\xbf' OR 1=1 -- ", "1\xbf\\' OR 1=1 -- ", "0x31", "1e0", " 1", "01", "-0", "2\x00' OR 1=1", "\\N", "1abc",
		"18446744073709551616", "-9223372036854775809", []byte("1' OR '1'='1"),
	}
	for _, mode := range []struct {
		name    string
		session []string
	}{
		{"default", nil},
		{"non-strict gbk NO_BACKSLASH_ESCAPES", []string{"SET NAMES gbk", "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p := startRuledProxy(t)
			ip := newInjectionPair(t, p, mode.session...)
			for _, h := range hostile {
				ip.check(t, prep("UPDATE repos SET downloads = downloads + 1 WHERE id = ?", h))
				ip.check(t, prep("UPDATE repos SET downloads = downloads + ? WHERE id = ?", h, 2))
				ip.check(t, prep("UPDATE repos SET stars = stars + 1, downloads = downloads + ? WHERE id = ?", 1, h))
				ip.check(t, prep("UPDATE repos SET downloads = ? WHERE id = ?", 5, h))
				ip.check(t, prep("UPDATE repos SET downloads = 6 WHERE name = ?", h))
				ip.check(t, prep("SELECT id, downloads FROM repos WHERE id = ? OR name = ?", h, h))
				ip.check(t, prep("INSERT INTO repos (id, name, downloads) VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1", h, "x"))
			}
			noPanics(t, p)
		})
	}
}

// TestInjectionRewriteModes runs the attacks in each session mode on both
// sides of the differential and compares results and full table contents.
func TestInjectionRewriteModes(t *testing.T) {
	modes := []struct {
		name    string
		session []string
	}{
		{"default", nil},
		{"NO_BACKSLASH_ESCAPES", []string{"SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"}},
		{"ANSI_QUOTES", []string{"SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')"}},
		{"non-strict NO_BACKSLASH_ESCAPES,ANSI_QUOTES", []string{"SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES'"}},
		{"non-strict", []string{"SET SESSION sql_mode = ''"}},
		{"gbk", []string{"SET NAMES gbk"}},
		{"gbk non-strict", []string{"SET NAMES gbk", "SET SESSION sql_mode = ''"}},
		{"sjis non-strict", []string{"SET NAMES sjis", "SET SESSION sql_mode = ''"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startRuledProxy(t)
			ip := newInjectionPair(t, p, m.session...)
			for _, a := range injectionAttacks {
				if strings.Contains(a, "; ") {
					ip.check(t, multi(a))
				} else {
					ip.check(t, text(a))
				}
			}
			noPanics(t, p)
		})
	}
}
