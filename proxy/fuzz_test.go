package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Fuzz targets for everything that decodes bytes from a peer. Seeds live in
// testdata/fuzz; `make test` runs each target for a few seconds.

func FuzzParseGreeting(f *testing.F) {
	f.Add([]byte("\x0a5.5.5-10.11.19-MariaDB\x00\x05\x00\x00\x00abcdefgh\x00\xfe\xf7\x2d\x02\x00\xff\x81\x15\x00\x00\x00\x00\x00\x00\x1d\x00\x00\x00ijklmnopqrst\x00mysql_native_password\x00"))
	f.Add([]byte("\x0a8.4.0\x00\x01\x00\x00\x00abcdefgh\x00\xff\xff\xff\x02\x00\xff\xdf\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00ijklmnopqrst\x00caching_sha2_password\x00"))
	f.Add([]byte{10})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseGreeting(b)
		if err != nil {
			return
		}
		g.setCaps(g.caps & passCaps)
		if _, err := parseGreeting(g.raw); err != nil {
			t.Fatalf("a greeting the proxy rewrote no longer parses: %v", err)
		}
	})
}

func FuzzParseHandshakeResponse(f *testing.F) {
	resp := binary.LittleEndian.AppendUint32(nil, mysql.CLIENT_PROTOCOL_41|mysql.CLIENT_SECURE_CONNECTION|mysql.CLIENT_PLUGIN_AUTH|mysql.CLIENT_CONNECT_WITH_DB)
	resp = append(resp, make([]byte, 28)...)
	resp = append(resp, "user\x00\x14abcdefghijklmnopqrst"+"db\x00mysql_native_password\x00"...)
	f.Add(resp)
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseHandshakeResponse(b)
	})
}

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

func FuzzOKPacket(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 0, 0}, uint32(0))
	f.Add([]byte{0, 0xfc, 1, 2, 0, 2, 0, 0, 0, 3, 'a', 'b', 'c'}, uint32(mysql.CLIENT_SESSION_TRACK))
	f.Fuzz(func(t *testing.T, b []byte, caps uint32) {
		ok, err := parseOK(b)
		if err != nil {
			return
		}
		info := "Rows matched: 1  Changed: 1  Warnings: 0"
		rebuilt, err := parseOK(ok.build(caps, &info))
		if err != nil {
			t.Fatalf("a rebuilt OK packet does not parse: %v", err)
		}
		if rebuilt.affected != ok.affected || rebuilt.status != ok.status || rebuilt.warnings != ok.warnings {
			t.Fatal("a rebuilt OK packet changed its fields")
		}
	})
}

// FuzzResponseRelay feeds arbitrary backend bytes to the response state
// machine for each kind of command: it must end (forward, error, or wait
// for more bytes) without panicking.
func FuzzResponseRelay(f *testing.F) {
	okPkt := []byte{7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}
	rs := []byte{1, 0, 0, 1, 1}                         // one column
	rs = append(rs, 5, 0, 0, 2, 3, 'd', 'e', 'f', 0)    // column definition (truncated is fine)
	rs = append(rs, 5, 0, 0, 3, 0xfe, 0, 0, 2, 0)       // EOF
	rs = append(rs, 2, 0, 0, 4, 1, '1')                 // row
	rs = append(rs, 7, 0, 0, 5, 0xfe, 0, 0, 2, 0, 0, 0) // terminator
	f.Add(okPkt, byte(respResults), false)
	f.Add(rs, byte(respResults), true)
	f.Add(rs, byte(respRows), false)
	f.Add([]byte{12, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}, byte(respPrepare), true)
	f.Add([]byte{0xff, 0xff, 0xff, 1, 0}, byte(respOne), false)
	f.Fuzz(func(t *testing.T, b []byte, kind byte, deprecateEOF bool) {
		s := fuzzSession(b, deprecateEOF)
		defer s.close()
		var err error
		switch respKind(kind % 5) {
		case respOne:
			err = s.relayOne()
		case respResults:
			err = s.relayResults(&incPatch{matched: 1, changed: 1})
		case respPrepare:
			err = s.relayPrepare()
		case respRows:
			_, err = s.relayRows()
		case respFieldList:
			err = s.relayFieldList()
		}
		_ = err
	})
}

// fuzzSession is a session whose backend sends b and then closes, and whose
// client discards everything.
func fuzzSession(b []byte, deprecateEOF bool) *session {
	srv, _ := NewServer(Config{Backend: "127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	clientSide, clientPeer := net.Pipe()
	go func() { _, _ = io.Copy(io.Discard, clientPeer) }()
	s := newSession(srv, 1, clientSide)
	backSide := &bytesConn{r: bytes.NewReader(b)}
	s.backConn = backSide
	s.back = newPacketConn(backSide, backendReadBuf, backendWriteBuf)
	if deprecateEOF {
		s.caps |= mysql.CLIENT_DEPRECATE_EOF
	}
	_ = clientSide.SetDeadline(time.Now().Add(time.Second))
	return s
}

// bytesConn is a net.Conn that reads from r and discards writes.
type bytesConn struct {
	net.Conn
	r io.Reader
}

func (c *bytesConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *bytesConn) Close() error                { return nil }

func FuzzBinaryInt(f *testing.F) {
	col := []byte{3, 'd', 'e', 'f', 0, 0, 0, 2, 'i', 'd', 0, 0x0c, 0x3f, 0, 20, 0, 0, 0, mysql.MYSQL_TYPE_LONGLONG, 0, 0, 0, 0, 0}
	row := append([]byte{0, 0}, binary.LittleEndian.AppendUint64(nil, 42)...)
	f.Add(col, row)
	f.Fuzz(func(t *testing.T, col, row []byte) {
		_, _ = binaryInt(col, row)
		_, _ = textValues(row)
	})
}
