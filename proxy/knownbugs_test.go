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
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestMalformedHandshakeSequenceID: a handshake response with a wrong
// sequence id. MariaDB itself refuses it ("packets out of order"); the proxy
// must not accept it as a login either.
func TestMalformedHandshakeSequenceID(t *testing.T) {
	p := startProxy(t, func(c *proxy.Config) { c.HandshakeTimeout = 2 * time.Second })
	for _, addr := range []string{testdb.Shared().Addr, p.addr} {
		w, err := dialWire(addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.greet(); err != nil {
			t.Fatal(err)
		}
		auth := gomysql.CalcNativePassword(w.scramble, []byte(testdb.NativePassword))
		resp := handshakeResponse(wireCaps|gomysql.CLIENT_CONNECT_WITH_DB, testdb.NativeUser, auth, testdb.DBName, "mysql_native_password")
		if err := w.writePacket(resp, 7); err != nil {
			t.Fatal(err)
		}
		via := "directly"
		if addr == p.addr {
			via = "through the proxy"
		}
		_ = w.SetReadDeadline(time.Now().Add(5 * time.Second))
		first, _, err := w.readFull()
		if err == nil && len(first) > 0 && first[0] == 0x00 {
			t.Errorf("%s: a handshake response with sequence id 7 logged in (MariaDB answers ERR 1156 Got packets out of order)", via)
			continue
		}
		if err == nil {
			t.Logf("%s: %v", via, parseErrPacket(first))
			_, err = w.readUntilClosed(5 * time.Second)
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: no answer and no close", via)
			continue
		} else {
			err = nil
		}
		if err != nil {
			t.Errorf("%s: connection not closed: %v", via, err)
		}
	}
	noPanics(t, p)
}

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

// TestInjectionHiddenSessionChange: the proxy must know the sql_mode and
// database the server uses, however the client changed them. The session
// starts (non-strict) with ANSI_QUOTES and the proxy learns that; then the
// client turns ANSI_QUOTES off in a way the server applies, and the attack
// WHERE "id" = 2 means the string 'id' (no row) to the server, the key
// column to a proxy that missed the change.
func TestInjectionHiddenSessionChange(t *testing.T) {
	mustExec(t, directDB(t, ""), "CREATE DATABASE IF NOT EXISTS hardening_empty")
	attack := text(`UPDATE repos SET downloads = downloads + 1 WHERE "id" = 2`)
	const off = "SET SESSION sql_mode = ''"
	cases := []struct {
		name   string
		change []string
		steps  []step
	}{
		{"control: plain SET", []string{off}, []step{attack}},
		{"SET after a comment", []string{"/* app */ " + off}, []step{attack}},
		{"SET after a form feed", []string{"\f" + off}, []step{attack}},
		{"SET/**/sql_mode", []string{"SET/**/sql_mode = ''"}, []step{attack}},
		{"SET inside a multi-statement query", []string{"DO 1; " + off}, []step{attack}},
		{"EXECUTE IMMEDIATE", []string{"EXECUTE IMMEDIATE 'SET SESSION sql_mode = '''''"}, []step{attack}},
		{"PREPARE and EXECUTE", []string{"PREPARE s FROM 'SET SESSION sql_mode = '''''", "EXECUTE s"}, []step{attack}},
		{"SET STATEMENT … FOR", nil, []step{text("SET STATEMENT sql_mode = '' FOR " + attack.sql)}},
		{"USE after a comment", []string{"/* app */ USE hardening_empty"},
			[]step{text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")}},
		{"USE inside a multi-statement query", []string{"DO 1; USE hardening_empty"},
			[]step{text("UPDATE repos SET downloads = downloads + 1 WHERE id = 1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startRuledProxy(t)
			ip := newInjectionPair(t, p, "SET SESSION sql_mode = 'ANSI_QUOTES'")
			for _, s := range tc.change {
				st := text(s)
				if strings.Contains(s, "; ") {
					st = multi(s)
				}
				ip.check(t, st)
			}
			for _, st := range tc.steps {
				ip.check(t, st)
			}
			noPanics(t, p)
		})
	}
}

// TestHardeningNonUTF8Statements: a statement whose text is not valid UTF-8
// (any non-ASCII text from a latin1, gbk or sjis client, which the server
// accepts) is still a statement on a ruled table: its counter reads must see
// the slots and its absolute writes must fold them first.
func TestHardeningNonUTF8Statements(t *testing.T) {
	p := startRuledProxy(t)
	direct := dialRawDB(t, testdb.Shared().Addr, plainSchema)
	proxied := dialRawDB(t, p.addr, ruledSchema)
	for _, c := range []*rawConn{direct, proxied} {
		if _, err := c.Execute("SET NAMES latin1"); err != nil {
			t.Fatal(err)
		}
	}
	steps := []step{
		text("UPDATE repos SET downloads = downloads + 5 WHERE id = 1"),
		text("SELECT id, downloads FROM repos WHERE name <> 'caf\xe9' ORDER BY id"),
		text("UPDATE repos SET downloads = 0, name = 'caf\xe9' WHERE id = 1"),
		text("SELECT id, downloads FROM repos ORDER BY id"),
	}
	for i, st := range steps {
		want := runStep(direct.Conn, st)
		got := runStep(proxied.Conn, st)
		if got != want {
			t.Errorf("step %d %q:\n proxy:  %s\n direct: %s", i, st.sql, got, want)
		}
	}
	if n := p.srv.Stats().ParseFailures; n > 0 {
		t.Logf("the proxy counted %d statements as not parsing", n)
	}
}
