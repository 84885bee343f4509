package wire

import (
	"bytes"
	"io"
	"net"
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
