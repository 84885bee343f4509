package executor

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// Fuzz targets for what the executor decodes from a client or a server.
// Seeds live in testdata/fuzz; `make test` runs each target for a few
// seconds.

func FuzzParseExecute(f *testing.F) {
	exec := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_VAR_STRING, 0}
	exec = binary.LittleEndian.AppendUint64(exec, 42)
	exec = append(exec, 3, 'a', 'b', 'c')
	f.Add(exec, 2)
	f.Add(exec[:12], 2)
	f.Add([]byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0xff, 0}, 8)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 1000 {
			return
		}
		ep, err := parseExecute(b, n, nil, nil)
		if err != nil {
			return
		}
		idx := make([]int, 0, n)
		for i := range n {
			_, _ = ep.intParam(i)
			idx = append(idx, i)
		}
		pkt, err := ep.executePacket(7, idx)
		if err != nil {
			return
		}
		again, err := parseExecute(pkt, n, nil, nil)
		if err != nil {
			t.Fatalf("a rebuilt execute packet does not parse: %v", err)
		}
		for i := range n {
			if !bytes.Equal(again.values[i], ep.values[i]) || again.null[i] != ep.null[i] {
				t.Fatalf("parameter %d changed in the rebuilt packet", i)
			}
		}
	})
}

func FuzzBinaryInt(f *testing.F) {
	col := []byte{3, 'd', 'e', 'f', 0, 0, 0, 2, 'i', 'd', 0, 0x0c, 0x3f, 0, 20, 0, 0, 0, mysql.MYSQL_TYPE_LONGLONG, 0, 0, 0, 0, 0}
	row := append([]byte{0, 0}, binary.LittleEndian.AppendUint64(nil, 42)...)
	f.Add(col, row)
	f.Fuzz(func(t *testing.T, col, row []byte) {
		_, _ = binaryInt(col, row)
		_, _ = wire.TextRow(row)
	})
}
