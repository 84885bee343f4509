// Package wire frames the MySQL client/server protocol for slotproxy: one
// buffered packet connection per socket (Conn), the packets the proxy reads
// or builds itself (OK, ERR, EOF), and one reader of command responses that
// hands every packet to a pluggable Sink (forward to the client, collect,
// renumber). It knows nothing about rules or rewriting.
//
// Ownership: a Conn is used by one goroutine at a time (the session that
// owns it). Slices returned by Peek-style methods are valid until the next
// read from the same Conn; slices returned by ReadPacket belong to the
// caller.
package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// MaxPayload is the largest payload one wire packet carries. A logical
// packet of that size or more continues in the following packet(s); the
// last one is shorter (possibly empty).
const MaxPayload = 1<<24 - 1

// ErrMalformed marks protocol violations by a peer. The connection that
// sent the packet is closed; nothing is forwarded.
var ErrMalformed = errors.New("malformed packet")

// ErrWrite marks a failed write to a Conn created with NewConn(…, Options{
// Server: true}): the peer may have said why it went away (ERR 1153
// before closing), and that answer is worth reading.
var ErrWrite = errors.New("write failed")

// ErrServer marks every failed read or write of a Conn created with
// NewConn(…, Options{Server: true}); a clean EOF from such a Conn is
// io.ErrUnexpectedEOF marked so.
var ErrServer = errors.New("server connection")

// Options tune a Conn.
type Options struct {
	// ReadBuf and WriteBuf are the buffer sizes; zero means 16 KiB.
	ReadBuf, WriteBuf int
	// WriteTimeout, when positive, closes the stream for writes that make
	// no progress for that long (a peer that stopped reading).
	WriteTimeout time.Duration
	// Server marks the connection to a server: read and write errors are
	// wrapped with ErrServer, write errors also with ErrWrite.
	Server bool
}

// Conn frames MySQL packets on one socket with a buffered reader and writer.
// It is not safe for concurrent use.
type Conn struct {
	net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	sw *sockWriter
	// src is what br reads from (the socket, marked for a server); own is
	// the Conn's own reader while br is a wide one borrowed (see Widen).
	src io.Reader
	own *bufio.Reader
	// streamed counts the row bytes ForwardBufferedRows moved since the
	// last Narrow.
	streamed int
	// SeqShift is added to the sequence id of every forwarded header (see
	// ForwardRest), for a response whose command the proxy sent in a
	// different number of packets than the client did.
	SeqShift byte

	wrote   bool // a header was written since MarkSeq
	lastSeq byte // the sequence id of the last header written
}

// MarkSeq starts tracking the sequence ids written (at a new command).
func (p *Conn) MarkSeq() { p.wrote = false }

// NextSeq is the sequence id that follows the last header written since
// MarkSeq, or first when none was.
func (p *Conn) NextSeq(first byte) byte {
	if p.wrote {
		return p.lastSeq + 1
	}
	return first
}

// NewConn wraps c.
func NewConn(c net.Conn, o Options) *Conn {
	if o.ReadBuf <= 0 {
		o.ReadBuf = 16 << 10
	}
	if o.WriteBuf <= 0 {
		o.WriteBuf = 16 << 10
	}
	sw := &sockWriter{c: c, timeout: o.WriteTimeout, mark: o.Server}
	var r io.Reader = c
	if o.Server {
		r = serverReader{c}
	}
	return &Conn{Conn: c, br: bufio.NewReaderSize(r, o.ReadBuf), bw: bufio.NewWriterSize(sw, o.WriteBuf), sw: sw, src: r}
}

// WideReadBuf is the size of the read buffer a Conn borrows while a large
// response streams through it (see Widen).
const WideReadBuf = 64 << 10

var wideReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, WideReadBuf) }}

// Widen makes p read through a borrowed WideReadBuf buffer until Narrow,
// carrying over what its own buffer holds: a large response then takes a
// quarter of the reads (and of the client's writes), and an idle
// connection keeps only its own small buffer.
func (p *Conn) Widen() {
	if p.own != nil || p.br.Size() >= WideReadBuf {
		return
	}
	wide := wideReaders.Get().(*bufio.Reader)
	wide.Reset(p.carried())
	p.own, p.br = p.br, wide
}

// Narrow returns a borrowed buffer (see Widen), carrying over what it
// holds into the Conn's own; the reader of responses calls it at the end
// of each.
func (p *Conn) Narrow() {
	p.streamed = 0
	if p.own == nil {
		return
	}
	wide := p.br
	p.own.Reset(p.carried())
	p.br, p.own = p.own, nil
	wide.Reset(nil)
	wideReaders.Put(wide)
}

// carried is the source of a reader that replaces br: what br holds, then
// the socket.
func (p *Conn) carried() io.Reader {
	n := p.br.Buffered()
	if n == 0 {
		return p.src
	}
	b, _ := p.br.Peek(n)
	return io.MultiReader(bytes.NewReader(slices.Clone(b)), p.src)
}

// serverReader marks the read errors of a server connection.
type serverReader struct{ c net.Conn }

func (r serverReader) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	switch {
	case err == nil:
	case err == io.EOF:
		err = fmt.Errorf("%w: %w", ErrServer, io.ErrUnexpectedEOF)
	default:
		err = fmt.Errorf("%w: %w", ErrServer, err)
	}
	return n, err
}

// SetWriteTimeout changes the no-progress write timeout (see Options).
func (p *Conn) SetWriteTimeout(d time.Duration) { p.sw.timeout = d }

// sockWriter is the socket end of a Conn's write buffer. With a timeout,
// every write must make progress within it: the deadline is pushed out as
// writes succeed (refreshed once less than 7/8 of it is left, so most
// writes cost no timer update).
type sockWriter struct {
	c       net.Conn
	timeout time.Duration
	until   time.Time
	mark    bool
}

func (w *sockWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		if now := time.Now(); w.until.Sub(now) < w.timeout-w.timeout/8 {
			w.until = now.Add(w.timeout)
			_ = w.c.SetWriteDeadline(w.until)
		}
	}
	n, err := w.c.Write(p)
	if err != nil && w.mark {
		err = fmt.Errorf("%w: %w: %w", ErrServer, ErrWrite, err)
	}
	return n, err
}

// Header is the four-byte header of one wire packet.
type Header struct {
	Length int
	Seq    byte
}

// Buffered is how many bytes have been read from the socket and not yet
// consumed.
func (p *Conn) Buffered() int { return p.br.Buffered() }

// PeekHeader waits for the next packet header without consuming it.
func (p *Conn) PeekHeader() (Header, error) {
	h, err := p.br.Peek(4)
	if err != nil {
		return Header{}, err
	}
	return Header{Length: int(h[0]) | int(h[1])<<8 | int(h[2])<<16, Seq: h[3]}, nil
}

// ReadHeader consumes the next packet header.
func (p *Conn) ReadHeader() (Header, error) {
	h, err := p.PeekHeader()
	if err != nil {
		return h, err
	}
	_, _ = p.br.Discard(4)
	return h, nil
}

// PeekPayload returns up to n leading bytes of the payload of a packet
// whose header was just consumed, without consuming them.
func (p *Conn) PeekPayload(h Header, n int) ([]byte, error) {
	n = min(n, h.Length, p.br.Size())
	return p.br.Peek(n)
}

// Peek waits until n bytes are buffered and returns them without consuming
// them.
func (p *Conn) Peek(n int) ([]byte, error) { return p.br.Peek(n) }

// PeekBuffered returns what is buffered, up to n bytes, without reading
// from the socket.
func (p *Conn) PeekBuffered(n int) []byte {
	b, _ := p.br.Peek(min(n, p.br.Buffered()))
	return b
}

// Discard drops n buffered-or-incoming payload bytes.
func (p *Conn) Discard(n int) error {
	_, err := p.br.Discard(n)
	return NoEOF(err)
}

// ReadFull reads len(b) payload bytes.
func (p *Conn) ReadFull(b []byte) error {
	_, err := io.ReadFull(p.br, b)
	return NoEOF(err)
}

// ReadPacket reads one logical packet (joining continuation packets) and
// appends its payload to buf[:0]. It returns the payload and the sequence
// id of the last wire packet. A payload longer than limit is an error.
func (p *Conn) ReadPacket(buf []byte, limit int) ([]byte, byte, error) {
	h, err := p.ReadHeader()
	if err != nil {
		return buf[:0], 0, err
	}
	return p.ReadRest(buf, h, limit)
}

// ReadRest is ReadPacket for a packet whose header h was consumed.
func (p *Conn) ReadRest(buf []byte, h Header, limit int) ([]byte, byte, error) {
	buf = buf[:0]
	for {
		if len(buf)+h.Length > limit {
			return buf, 0, fmt.Errorf("%w: packet of more than %d bytes", ErrMalformed, limit)
		}
		start := len(buf)
		buf = slices.Grow(buf, h.Length)[:start+h.Length]
		if _, err := io.ReadFull(p.br, buf[start:]); err != nil {
			return buf, 0, NoEOF(err)
		}
		if h.Length < MaxPayload {
			return buf, h.Seq, nil
		}
		var err error
		if h, err = p.ReadHeader(); err != nil {
			return buf, 0, NoEOF(err)
		}
	}
}

// WritePacket frames payload as one logical packet starting at sequence id
// seq, splitting it as the protocol requires. It returns the next sequence
// id. The data is buffered; call Flush to send it.
func (p *Conn) WritePacket(payload []byte, seq byte) (byte, error) {
	for {
		n := min(len(payload), MaxPayload)
		if err := p.WriteHeader(n, seq); err != nil {
			return seq, err
		}
		if _, err := p.bw.Write(payload[:n]); err != nil {
			return seq, err
		}
		seq++
		payload = payload[n:]
		if n < MaxPayload {
			return seq, nil
		}
	}
}

// Flush sends what is buffered.
func (p *Conn) Flush() error { return p.bw.Flush() }

// WriteRaw buffers bytes that are already framed packets.
func (p *Conn) WriteRaw(b []byte) error {
	_, err := p.bw.Write(b)
	return err
}

// writeHeader buffers a wire packet header, shifted by SeqShift.
func (p *Conn) writeHeader(h Header) error { return p.WriteHeader(h.Length, h.Seq+p.SeqShift) }

// WriteHeader buffers a wire packet header as given (SeqShift is not
// applied).
func (p *Conn) WriteHeader(length int, seq byte) error {
	p.wrote, p.lastSeq = true, seq
	_, err := p.bw.Write([]byte{byte(length), byte(length >> 8), byte(length >> 16), seq})
	return err
}

// CopyRest copies the rest of a logical packet whose header h was consumed
// from p to dst, writing every wire header with the sequence id next(),
// called once per wire packet.
func (p *Conn) CopyRest(dst *Conn, h Header, next func() byte) error {
	for {
		if err := dst.WriteHeader(h.Length, next()); err != nil {
			return err
		}
		if err := p.CopyTo(dst, h.Length); err != nil {
			return err
		}
		if h.Length < MaxPayload {
			return nil
		}
		var err error
		if h, err = p.ReadHeader(); err != nil {
			return NoEOF(err)
		}
	}
}

// CopyTo moves n payload bytes from p's reader to dst's writer without an
// intermediate buffer of its own.
func (p *Conn) CopyTo(dst *Conn, n int) error {
	for n > 0 {
		chunk := min(n, p.br.Size())
		if b := p.br.Buffered(); b > 0 && b < chunk {
			chunk = b
		}
		buf, err := p.br.Peek(chunk)
		if err != nil {
			return NoEOF(err)
		}
		if _, err := dst.bw.Write(buf); err != nil {
			return err
		}
		_, _ = p.br.Discard(chunk)
		n -= chunk
	}
	return nil
}

// ForwardRest forwards the packet whose header h was consumed from p to
// dst: the header (shifted by dst.SeqShift), the payload, and every
// continuation packet of the same logical packet.
func (p *Conn) ForwardRest(dst *Conn, h Header) error {
	for {
		if err := dst.writeHeader(h); err != nil {
			return err
		}
		if err := p.CopyTo(dst, h.Length); err != nil {
			return err
		}
		if h.Length < MaxPayload {
			return nil
		}
		var err error
		if h, err = p.ReadHeader(); err != nil {
			return NoEOF(err)
		}
	}
}

// DiscardRest drops the rest of a logical packet whose header h was
// consumed.
func (p *Conn) DiscardRest(h Header) error {
	for {
		if err := p.Discard(h.Length); err != nil {
			return err
		}
		if h.Length < MaxPayload {
			return nil
		}
		var err error
		if h, err = p.ReadHeader(); err != nil {
			return NoEOF(err)
		}
	}
}

// ForwardBufferedRows forwards to dst, with one write into its buffer, the
// complete row packets already read from the socket, stopping before the
// first packet that needs a closer look: an ERR or a terminator (0xff, or
// 0xfe in a packet under 16 MiB; neither can start a row), one of 16 MiB or
// more, or one not yet complete. It does nothing while dst.SeqShift is set.
// Once the rows it moved since the last Narrow fill p's buffer, it widens
// p (Widen): the rest of a large result set comes in larger reads.
func (p *Conn) ForwardBufferedRows(dst *Conn) error {
	if p.br.Buffered() < 5 || dst.SeqShift != 0 {
		return nil
	}
	buf, _ := p.br.Peek(p.br.Buffered())
	pos := 0
	var lastSeq byte
	for pos+4 < len(buf) {
		l := int(buf[pos]) | int(buf[pos+1])<<8 | int(buf[pos+2])<<16
		if l == 0 || l >= MaxPayload || pos+4+l > len(buf) {
			break
		}
		if first := buf[pos+4]; first == 0xff || first == 0xfe {
			break
		}
		lastSeq = buf[pos+3]
		pos += 4 + l
	}
	if pos == 0 {
		return nil
	}
	if _, err := dst.bw.Write(buf[:pos]); err != nil {
		return err
	}
	dst.wrote, dst.lastSeq = true, lastSeq
	_, _ = p.br.Discard(pos)
	if p.streamed += pos; p.streamed >= p.br.Size() {
		p.Widen() // a large result set: more rows may follow
	}
	return nil
}

// Detach returns a net.Conn that reads first whatever p's reader buffered
// beyond the last packet, then from the socket. A TLS handshake must start
// on it rather than on the bare socket: a client sends its TLS hello right
// behind the SSL request, often in the same segment.
func (p *Conn) Detach() net.Conn {
	n := p.br.Buffered()
	if n == 0 {
		return p.Conn
	}
	b, _ := p.br.Peek(n)
	return &prefixConn{Conn: p.Conn, prefix: slices.Clone(b)}
}

// prefixConn is a net.Conn whose first reads return prefix.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// Reader returns the buffered reader, for a raw stream (replication)
// relayed with io.Copy.
func (p *Conn) Reader() io.Reader { return p.br }

// NoEOF turns a clean EOF in the middle of a packet exchange into
// io.ErrUnexpectedEOF.
func NoEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// LenEnc decodes a length-encoded integer at the start of b. ok is false
// when b is too short or starts with a byte that is not an integer prefix
// (0xfb NULL, 0xff).
func LenEnc(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch c := b[0]; {
	case c < 0xfb:
		return uint64(c), 1, true
	case c == 0xfc && len(b) >= 3:
		return uint64(b[1]) | uint64(b[2])<<8, 3, true
	case c == 0xfd && len(b) >= 4:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, true
	case c == 0xfe && len(b) >= 9:
		var v uint64
		for i := 8; i >= 1; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v, 9, true
	}
	return 0, 0, false
}

// LenEncString decodes a length-encoded string at the start of b and
// returns it and the bytes consumed.
func LenEncString(b []byte) (s []byte, n int, ok bool) {
	l, w, ok := LenEnc(b)
	if !ok || l > uint64(len(b)-w) {
		return nil, 0, false
	}
	return b[w : w+int(l)], w + int(l), true
}
