package proxy_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// dialRawCaps is dialRawDB with capability flags set and unset.
func dialRawCaps(t *testing.T, addr, db string, set, unset uint32) *rawConn {
	t.Helper()
	c, err := client.Connect(addr, testdb.User, testdb.Password, db, func(c *client.Conn) error {
		c.UnsetCapability(gomysql.CLIENT_QUERY_ATTRIBUTES) // the proxy does not offer it
		for f := uint32(1); f != 0; f <<= 1 {
			if set&f != 0 {
				c.SetCapability(f)
			}
			if unset&f != 0 {
				c.UnsetCapability(f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return &rawConn{t: t, Conn: c, deprecateEOF: set&gomysql.CLIENT_DEPRECATE_EOF != 0}
}

// TestSynthesizedPacketsByteForByte: every OK the proxy builds or patches
// for a rewritten statement is, byte for byte, the OK the server sends for
// the same statement on a plain table, for each combination of the
// capabilities that change an OK's encoding (CLIENT_SESSION_TRACK,
// CLIENT_DEPRECATE_EOF, CLIENT_FOUND_ROWS), over the text and the binary
// protocol, in and out of transactions, and for ERR packets the server
// sends through the proxy's own statements.
func TestSynthesizedPacketsByteForByte(t *testing.T) {
	p := startRuledProxy(t)
	type capSet struct{ set, unset uint32 }
	var sets []capSet
	for _, st := range []uint32{0, gomysql.CLIENT_SESSION_TRACK} {
		for _, eof := range []uint32{0, gomysql.CLIENT_DEPRECATE_EOF} {
			for _, found := range []uint32{0, gomysql.CLIENT_FOUND_ROWS} {
				all := uint32(gomysql.CLIENT_SESSION_TRACK | gomysql.CLIENT_DEPRECATE_EOF | gomysql.CLIENT_FOUND_ROWS)
				set := st | eof | found
				sets = append(sets, capSet{set, all &^ set})
			}
		}
	}
	// Each step: a statement (text, or prepared with its arguments) and
	// the packet compared (the first of its response).
	type step struct {
		sql  string
		args []int64
	}
	steps := []step{
		{sql: "UPDATE repos SET downloads = downloads + 1 WHERE id = 1"},
		{sql: "UPDATE repos SET downloads = downloads + 0 WHERE id = 2"},
		{sql: "UPDATE repos SET downloads = downloads + 1 WHERE id = 999"},
		{sql: "UPDATE repos SET downloads = downloads + 1, stars = stars + 2 WHERE id = 3"},
		{sql: "UPDATE repos SET downloads = downloads + ? WHERE id = ?", args: []int64{3, 1}},
		{sql: "UPDATE repos SET downloads = downloads + ? WHERE id = ?", args: []int64{0, 1}},
		{sql: "UPDATE repos SET downloads = downloads + ? WHERE id = ?", args: []int64{1, 998}},
		{sql: "UPDATE repos SET downloads = 5 WHERE id = 4"},
		{sql: "UPDATE repos SET downloads = 5 WHERE id = 4"},
		{sql: "UPDATE repos SET downloads = ? WHERE id = ?", args: []int64{6, 4}},
		{sql: "BEGIN"},
		{sql: "UPDATE repos SET downloads = downloads + 1 WHERE id = 1"},
		{sql: "UPDATE repos SET downloads = downloads + ? WHERE id = ?", args: []int64{2, 2}},
		{sql: "UPDATE repos SET downloads = downloads + 1 WHERE id = 997"},
		{sql: "UPDATE repos SET downloads = 9 WHERE id = 1"},
		{sql: "COMMIT"},
		{sql: "REPLACE INTO repos (id, name) VALUES (1, 'alpha')"},
		{sql: "INSERT INTO repos (id, name) VALUES (1, 'dup')"},
		{sql: "DELETE FROM repos WHERE id = 999"},
		{sql: "UPDATE repos SET downloads = downloads + 1 WHERE id = 'x' AND id = 1"},
	}
	run := func(r *rawConn, st step) []byte {
		if st.args == nil {
			r.command(gomysql.COM_QUERY, []byte(st.sql)...)
			return r.read()
		}
		id := prepareRaw(t, r, st.sql)
		exec := binary.LittleEndian.AppendUint32(nil, id)
		exec = append(exec, 0, 1, 0, 0, 0)
		exec = append(exec, make([]byte, (len(st.args)+7)/8)...)
		exec = append(exec, 1)
		for range st.args {
			exec = append(exec, gomysql.MYSQL_TYPE_LONGLONG, 0)
		}
		for _, a := range st.args {
			exec = binary.LittleEndian.AppendUint64(exec, uint64(a))
		}
		r.command(gomysql.COM_STMT_EXECUTE, exec...)
		pkt := r.read()
		r.command(gomysql.COM_STMT_CLOSE, binary.LittleEndian.AppendUint32(nil, id)...)
		return pkt
	}
	for _, cs := range sets {
		t.Run(fmt.Sprintf("caps+%#x-%#x", cs.set, cs.unset), func(t *testing.T) {
			setupDiffSchemas(t)
			direct := dialRawCaps(t, testdb.Shared().Addr, plainSchema, cs.set, cs.unset)
			proxied := dialRawCaps(t, p.addr, ruledSchema, cs.set, cs.unset)
			for i, st := range steps {
				want, got := run(direct, st), run(proxied, st)
				if !bytes.Equal(got, want) {
					t.Errorf("step %d %s %v:\n proxy:  % x\n direct: % x", i, st.sql, st.args, got, want)
				}
			}
		})
	}
}
