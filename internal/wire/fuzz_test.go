package wire

import (
	"bytes"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Fuzz targets for what the proxy decodes from a server. Seeds live in
// testdata/fuzz; `make test` runs each target for a few seconds.

func FuzzOKPacket(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 0, 0}, uint32(0))
	f.Add([]byte{0, 0xfc, 1, 2, 0, 2, 0, 0, 0, 3, 'a', 'b', 'c'}, uint32(mysql.CLIENT_SESSION_TRACK))
	f.Fuzz(func(t *testing.T, b []byte, caps uint32) {
		ok, err := ParseOK(b)
		if err != nil {
			return
		}
		ok.Info = []byte("Rows matched: 1  Changed: 1  Warnings: 0")
		rebuilt, err := ParseOK(ok.Bytes(caps))
		if err != nil {
			t.Fatalf("a rebuilt OK packet does not parse: %v", err)
		}
		if rebuilt.Affected != ok.Affected || rebuilt.Status != ok.Status || rebuilt.Warnings != ok.Warnings || !bytes.Equal(rebuilt.Info, ok.Info) {
			t.Fatal("a rebuilt OK packet changed its fields")
		}
	})
}

// FuzzResponseRelay feeds arbitrary server bytes to the response reader for
// each kind of command, forwarding to a client: it must end (forward, error,
// or run out of bytes) without panicking, and what it forwards unpatched
// goes out byte for byte.
func FuzzResponseRelay(f *testing.F) {
	okPkt := []byte{7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}
	rs := []byte{1, 0, 0, 1, 1}                         // one column
	rs = append(rs, 5, 0, 0, 2, 3, 'd', 'e', 'f', 0)    // column definition (truncated is fine)
	rs = append(rs, 5, 0, 0, 3, 0xfe, 0, 0, 2, 0)       // EOF
	rs = append(rs, 2, 0, 0, 4, 1, '1')                 // row
	rs = append(rs, 7, 0, 0, 5, 0xfe, 0, 0, 2, 0, 0, 0) // terminator
	f.Add(okPkt, byte(Results), false)
	f.Add(rs, byte(Results), true)
	f.Add(rs, byte(Rows), false)
	f.Add([]byte{12, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}, byte(Prepare), true)
	f.Add([]byte{0xff, 0xff, 0xff, 1, 0}, byte(One), false)
	f.Add(rs, byte(7+8*3), false) // results patched, read 4 bytes at a time
	f.Fuzz(func(t *testing.T, b []byte, kind byte, deprecateEOF bool) {
		// kind's low three bits pick the response kind (7: Results with
		// the OK patched); its high bits how many bytes each read returns.
		server, client, out := fuzzConns(b, 1+int(kind/8)*3)
		sink := &Forward{Client: client, Server: server}
		k := Kind(kind % 8)
		patched := k == 7
		if patched {
			k = Results
			sink.PatchOK = func(ok *OK) { ok.Affected = 1; ok.Info = []byte("patched") }
		}
		if k == None || k == Auth || k == Stream {
			return
		}
		_, err := Reader{Src: server, DeprecateEOF: deprecateEOF}.Read(k, sink)
		if err == nil {
			err = client.Flush()
		}
		got := out()
		if !patched && err == nil && (len(got) > len(b) || !bytes.Equal(got, b[:len(got)])) {
			t.Fatalf("relayed % x\nfrom      % x", got, b)
		}
	})
}

// TestRelayRowsVerbatim: a result set of many rows, arriving from the
// server in reads of every size, reaches the client byte for byte (the
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
			server, client, out := fuzzConns(rs, chunk)
			_, err := Reader{Src: server, DeprecateEOF: deprecateEOF}.Read(Results, &Forward{Client: client, Server: server})
			if err == nil {
				err = client.Flush()
			}
			if got := out(); err != nil || !bytes.Equal(got, rs) {
				t.Fatalf("deprecateEOF %v, reads of %d bytes: err %v, relayed %d of %d bytes", deprecateEOF, chunk, err, len(got), len(rs))
			}
		}
	}
}

// fuzzConns returns a server Conn that reads b, chunk bytes per read, and
// a client Conn whose writes out returns.
func fuzzConns(b []byte, chunk int) (server, client *Conn, out func() []byte) {
	var got bytes.Buffer
	server = NewConn(&bytesConn{r: &chunkReader{r: bytes.NewReader(b), n: chunk}, w: io.Discard}, Options{ReadBuf: 16 << 10})
	client = NewConn(&bytesConn{r: strings.NewReader(""), w: &got}, Options{})
	return server, client, got.Bytes
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// bytesConn is a net.Conn that reads from r and writes to w.
type bytesConn struct {
	net.Conn
	r io.Reader
	w io.Writer
}

func (c *bytesConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *bytesConn) Close() error                { return nil }

// sizeSink is a Forward that notes the largest read buffer its server
// Conn had while rows went through.
type sizeSink struct {
	Forward
	largest int
}

func (s *sizeSink) Take(src *Conn, p *Packet) error {
	s.largest = max(s.largest, src.br.Size())
	return s.Forward.Take(src, p)
}

func (s *sizeSink) ForwardRows(src *Conn) error { return s.Forward.ForwardRows(src) }

// TestRelayWideRows: a result set far larger than the read buffer is
// relayed through a borrowed wide buffer (Conn.Widen) byte for byte, and
// the Conn is back on its own buffer afterwards with the bytes that
// followed the result set (the next response) carried over intact.
func TestRelayWideRows(t *testing.T) {
	var rs []byte
	rs = append(rs, 1, 0, 0, 1, 1)                   // one column
	rs = append(rs, 5, 0, 0, 2, 3, 'd', 'e', 'f', 0) // column definition
	seq := byte(3)
	for i := range 300 {
		v := strings.Repeat(string(rune('a'+i%26)), (i*37)%2000)
		rs = append(rs, byte(3+len(v)), byte((3+len(v))>>8), 0, seq, 0xfc, byte(len(v)), byte(len(v)>>8))
		rs = append(rs, v...)
		seq++
	}
	rs = append(rs, 7, 0, 0, seq, 0xfe, 0, 0, 2, 0, 0, 0)
	okPkt := []byte{7, 0, 0, 1, 0, 3, 0, 2, 0, 0, 0} // the next command's OK: 3 affected rows
	for _, chunk := range []int{1000, 7000, 40000, 1 << 20} {
		server, client, out := fuzzConns(append(slices.Clone(rs), okPkt...), chunk)
		sink := &sizeSink{Forward: Forward{Client: client, Server: server}}
		_, err := Reader{Src: server, DeprecateEOF: true}.Read(Results, sink)
		if err == nil {
			err = client.Flush()
		}
		if got := out(); err != nil || !bytes.Equal(got, rs) {
			t.Fatalf("reads of %d bytes: err %v, relayed %d of %d bytes", chunk, err, len(got), len(rs))
		}
		if sink.largest != WideReadBuf || server.br.Size() != 16<<10 || server.own != nil {
			t.Fatalf("reads of %d bytes: largest read buffer %d, after the response %d (borrowed one kept: %v)", chunk, sink.largest, server.br.Size(), server.own != nil)
		}
		res, err := Reader{Src: server, DeprecateEOF: true}.Read(Results, &Forward{Client: client, Server: server})
		if err != nil || res.RowCount != 3 {
			t.Fatalf("reads of %d bytes: the next response after narrowing: %+v, %v", chunk, res, err)
		}
	}
}
