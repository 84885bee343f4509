package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// maxPacketPayload is the largest payload one wire packet carries. A logical
// packet of that size or more continues in the following packet(s); the
// last one is shorter (possibly empty).
const maxPacketPayload = 1<<24 - 1

// errMalformed marks protocol violations by a peer. The connection that sent
// the packet is closed; nothing is forwarded.
var errMalformed = errors.New("malformed packet")

// packetConn frames MySQL packets on one socket. It owns a buffered reader
// and writer; it is not safe for concurrent use except that the reading side
// and the writing side may each be used by one goroutine at a time.
type packetConn struct {
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	sw   *sockWriter // bw's destination
	// seqShift is added to the sequence id of every forwarded header
	// (writeHeader), when the proxy sent a command in a different number of
	// packets than the client did. Set only by the side writing to p.
	seqShift byte
}

func newPacketConn(c net.Conn, readBuf, writeBuf int) *packetConn {
	sw := &sockWriter{c: c}
	return &packetConn{conn: c, br: bufio.NewReaderSize(c, readBuf), bw: bufio.NewWriterSize(sw, writeBuf), sw: sw}
}

// sockWriter is the socket end of a packetConn's write buffer. With a
// timeout, every write must make progress within it: the deadline is
// pushed out as writes succeed (refreshed once less than 7/8 of it is
// left, so most writes cost no timer update). On the backend side, write
// errors are marked (errBackendWrite).
type sockWriter struct {
	c       net.Conn
	timeout time.Duration
	until   time.Time
	backend bool
}

// errBackendWrite marks a failed write to the backend: the backend may
// have said why (ERR 1153 before closing) and that answer is worth relaying.
var errBackendWrite = errors.New("writing to the backend")

func (w *sockWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		if now := time.Now(); w.until.Sub(now) < w.timeout-w.timeout/8 {
			w.until = now.Add(w.timeout)
			_ = w.c.SetWriteDeadline(w.until)
		}
	}
	n, err := w.c.Write(p)
	if err != nil && w.backend {
		err = fmt.Errorf("%w: %w", errBackendWrite, err)
	}
	return n, err
}

// header is the four-byte header of one wire packet.
type header struct {
	length int
	seq    byte
}

// peekHeader waits for the next packet header without consuming it.
func (p *packetConn) peekHeader() (header, error) {
	h, err := p.br.Peek(4)
	if err != nil {
		return header{}, err
	}
	return header{length: int(h[0]) | int(h[1])<<8 | int(h[2])<<16, seq: h[3]}, nil
}

// readHeader consumes the next packet header.
func (p *packetConn) readHeader() (header, error) {
	h, err := p.peekHeader()
	if err != nil {
		return h, err
	}
	_, _ = p.br.Discard(4)
	return h, nil
}

// peekPayload returns up to n leading bytes of the payload of a packet whose
// header was just consumed, without consuming them. The slice is valid until
// the next read.
func (p *packetConn) peekPayload(h header, n int) ([]byte, error) {
	if n > h.length {
		n = h.length
	}
	if n > p.br.Size() {
		n = p.br.Size()
	}
	return p.br.Peek(n)
}

// readPacket reads one logical packet (joining continuation packets) and
// appends its payload to buf[:0]. It returns the payload and the sequence id
// of the last wire packet. A payload longer than limit is an error.
func (p *packetConn) readPacket(buf []byte, limit int) ([]byte, byte, error) {
	buf = buf[:0]
	for {
		h, err := p.readHeader()
		if err != nil {
			return buf, 0, err
		}
		if len(buf)+h.length > limit {
			return buf, 0, fmt.Errorf("%w: packet of more than %d bytes", errMalformed, limit)
		}
		start := len(buf)
		buf = slices.Grow(buf, h.length)[:start+h.length]
		if _, err := io.ReadFull(p.br, buf[start:]); err != nil {
			return buf, 0, err
		}
		if h.length < maxPacketPayload {
			return buf, h.seq, nil
		}
	}
}

// writePacket frames payload as one logical packet starting at sequence id
// seq, splitting it as the protocol requires. It returns the next sequence id.
// The data is buffered; call flush to send it.
func (p *packetConn) writePacket(payload []byte, seq byte) (byte, error) {
	for {
		n := len(payload)
		if n > maxPacketPayload {
			n = maxPacketPayload
		}
		if _, err := p.bw.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}); err != nil {
			return seq, err
		}
		if _, err := p.bw.Write(payload[:n]); err != nil {
			return seq, err
		}
		seq++
		payload = payload[n:]
		if n < maxPacketPayload {
			return seq, nil
		}
	}
}

func (p *packetConn) flush() error { return p.bw.Flush() }

// writeHeader buffers a wire packet header.
func (p *packetConn) writeHeader(h header) error {
	_, err := p.bw.Write([]byte{byte(h.length), byte(h.length >> 8), byte(h.length >> 16), h.seq + p.seqShift})
	return err
}

// copyTo moves n payload bytes from p's reader to dst's writer without an
// intermediate buffer of its own (zero allocations).
func (p *packetConn) copyTo(dst *packetConn, n int) error {
	for n > 0 {
		chunk := n
		if chunk > p.br.Size() {
			chunk = p.br.Size()
		}
		if b := p.br.Buffered(); b > 0 && b < chunk {
			chunk = b
		}
		buf, err := p.br.Peek(chunk)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if _, err := dst.bw.Write(buf); err != nil {
			return err
		}
		_, _ = p.br.Discard(chunk)
		n -= chunk
	}
	return nil
}

// forwardRest forwards the packet whose header h was consumed from p: the
// header, the payload, and every continuation packet of the same logical
// packet.
func (p *packetConn) forwardRest(dst *packetConn, h header) error {
	for {
		if err := dst.writeHeader(h); err != nil {
			return err
		}
		if err := p.copyTo(dst, h.length); err != nil {
			return err
		}
		if h.length < maxPacketPayload {
			return nil
		}
		var err error
		if h, err = p.readHeader(); err != nil {
			return noEOF(err)
		}
	}
}

// noEOF turns a clean EOF in the middle of a packet exchange into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// lenEnc decodes a length-encoded integer at the start of b. ok is false when
// b is too short or starts with a byte that is not an integer prefix (0xfb
// NULL, 0xff).
func lenEnc(b []byte) (v uint64, n int, ok bool) {
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

// detach returns a net.Conn that reads first whatever p's reader buffered
// beyond the last packet, then from the socket. A TLS handshake must start
// on it rather than on the bare socket: a client sends its TLS hello right
// behind the SSL request, often in the same segment.
func (p *packetConn) detach() net.Conn {
	n := p.br.Buffered()
	if n == 0 {
		return p.conn
	}
	b, _ := p.br.Peek(n)
	return &prefixConn{Conn: p.conn, prefix: slices.Clone(b)}
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
