package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
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
	f.Add(rs, byte(5+6*3), false) // results relayed unpatched, read 4 bytes at a time
	f.Fuzz(func(t *testing.T, b []byte, kind byte, deprecateEOF bool) {
		// kind picks the response kind (and, at 5, results without a
		// patch); its high bits how many bytes each backend read returns.
		s, out := fuzzSession(b, deprecateEOF, 1+int(kind/6)*3)
		var err error
		identity := false
		switch kind % 6 {
		case byte(respOne):
			err = s.relayOne()
		case byte(respResults):
			err = s.relayResults(&incPatch{matched: 1, changed: 1})
		case byte(respPrepare):
			err = s.relayPrepare()
		case byte(respRows):
			_, err = s.relayRows()
			identity = true
		case byte(respFieldList):
			err = s.relayFieldList()
		case 5:
			err = s.relayResults(nil)
			identity = true
		}
		if err == nil {
			err = s.client.flush()
		}
		got := out()
		// Whatever is relayed without a patch goes out byte for byte.
		if identity && err == nil && (len(got) == 0 || !bytes.Equal(got, b[:min(len(got), len(b))]) || len(got) > len(b)) {
			t.Fatalf("relayed % x\nfrom      % x", got, b)
		}
	})
}

// TestRelayRowsVerbatim: a result set of many rows, arriving from the
// backend in reads of every size, reaches the client byte for byte (the
// bulk path for buffered rows and the packet-by-packet path agree).
func TestRelayRowsVerbatim(t *testing.T) {
	for _, deprecateEOF := range []bool{false, true} {
		var rs []byte
		rs = append(rs, 1, 0, 0, 1, 1)                   // one column
		rs = append(rs, 5, 0, 0, 2, 3, 'd', 'e', 'f', 0) // column definition (truncated is fine)
		seq := byte(3)
		if !deprecateEOF {
			rs = append(rs, 5, 0, 0, seq, 0xfe, 0, 0, 2, 0)
			seq++
		}
		for i := range 200 {
			v := strings.Repeat("x", i%40)
			rs = append(rs, byte(1+len(v)), 0, 0, seq, byte(len(v)))
			rs = append(rs, v...)
			seq++
		}
		if deprecateEOF {
			rs = append(rs, 7, 0, 0, seq, 0xfe, 0, 0, 2, 0, 0, 0)
		} else {
			rs = append(rs, 5, 0, 0, seq, 0xfe, 0, 0, 2, 0)
		}
		for chunk := 1; chunk <= 70; chunk++ {
			s, out := fuzzSession(rs, deprecateEOF, chunk)
			err := s.relayResults(nil)
			if err == nil {
				err = s.client.flush()
			}
			if got := out(); err != nil || !bytes.Equal(got, rs) {
				t.Fatalf("deprecateEOF %v, reads of %d bytes: err %v, relayed %d of %d bytes", deprecateEOF, chunk, err, len(got), len(rs))
			}
		}
	}
}

// fuzzSession is a session whose backend sends b, chunk bytes per read, and
// then closes. out closes the session and returns what its client got.
func fuzzSession(b []byte, deprecateEOF bool, chunk int) (*session, func() []byte) {
	srv, _ := NewServer(Config{Backend: "127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	clientSide, clientPeer := net.Pipe()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(&got, clientPeer)
	}()
	s := newSession(srv, 1, clientSide)
	backSide := &bytesConn{r: &chunkReader{r: bytes.NewReader(b), n: chunk}}
	s.backConn = backSide
	s.back = newPacketConn(backSide, backendReadBuf, backendWriteBuf)
	if deprecateEOF {
		s.caps |= mysql.CLIENT_DEPRECATE_EOF
	}
	_ = clientSide.SetDeadline(time.Now().Add(time.Second))
	return s, func() []byte {
		s.close()
		<-done
		return got.Bytes()
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

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
