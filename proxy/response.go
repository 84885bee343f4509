package proxy

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// This file is the response state machine: it forwards backend packets to
// the client as they arrive and decides only where each response ends. Rows
// are never decoded or buffered beyond the connection's write buffer.

// statusPeek is how many payload bytes are inspected before forwarding: enough
// for an OK packet's two length-encoded integers and its status flags.
const statusPeek = 32

// nextPacket consumes the next backend packet header and peeks at the start
// of its payload. It flushes what the client is owed before it may block.
func (s *session) nextPacket() (header, []byte, error) {
	b := s.back
	if b.br.Buffered() < 4 {
		if err := s.client.flush(); err != nil {
			return header{}, nil, err
		}
	}
	h, err := b.readHeader()
	if err != nil {
		return h, nil, noEOF(err)
	}
	if h.length == 0 {
		return h, nil, fmt.Errorf("%w: empty packet from backend", errMalformed)
	}
	p, err := b.peekPayload(h, statusPeek)
	if err != nil {
		return h, nil, noEOF(err)
	}
	return h, p, nil
}

func (s *session) forward(h header) error { return s.back.forwardRest(s.client, h) }

func (s *session) deprecateEOF() bool { return s.caps&mysql.CLIENT_DEPRECATE_EOF != 0 }

// isTerminator reports whether a packet inside a result set ends it: EOF, or
// with CLIENT_DEPRECATE_EOF an OK packet with the 0xfe header. A row can
// start with 0xfe only as a length prefix of a value of 16 MiB or more, so its
// packet is always a full 0xffffff bytes.
func isTerminator(h header, p []byte) bool { return p[0] == 0xfe && h.length < maxPacketPayload }

// terminatorStatus returns the server status flags of a terminator packet.
func (s *session) terminatorStatus(p []byte) uint16 {
	if s.deprecateEOF() {
		return okStatus(p)
	}
	if len(p) >= 5 { // 0xfe, warnings(2), status(2)
		return binary.LittleEndian.Uint16(p[3:])
	}
	return 0
}

// okStatus returns the status flags of an OK packet (header byte, affected
// rows, last insert id, status).
func okStatus(p []byte) uint16 {
	pos := 1
	for range 2 {
		_, n, ok := lenEnc(p[pos:])
		if !ok {
			return 0
		}
		pos += n
	}
	if len(p) < pos+2 {
		return 0
	}
	return binary.LittleEndian.Uint16(p[pos:])
}

func (s *session) relayOne() error {
	h, p, err := s.nextPacket()
	if err != nil {
		return err
	}
	if p[0] == 0x00 && h.length >= 7 {
		s.noteStatus(okStatus(p))
	}
	return s.forward(h)
}

// relayResults relays the response to COM_QUERY or COM_STMT_EXECUTE: OK,
// ERR, a LOCAL INFILE request, or result sets, repeated while the server
// flags more results.
func (s *session) relayResults(patch *incPatch) error {
	for {
		h, p, err := s.nextPacket()
		if err != nil {
			return err
		}
		switch {
		case p[0] == 0x00:
			status := okStatus(p)
			if patch != nil && h.length < maxPacketPayload {
				raw := make([]byte, h.length)
				if _, err := io.ReadFull(s.back.br, raw); err != nil {
					return noEOF(err)
				}
				if _, err := s.client.writePacket(patch.apply(s, raw), h.seq); err != nil {
					return err
				}
			} else if err := s.forward(h); err != nil {
				return err
			}
			if status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				s.noteStatus(status)
				return nil
			}
		case p[0] == 0xff:
			if len(p) >= 3 {
				code := binary.LittleEndian.Uint16(p[1:])
				s.noteErr(code)
				s.metrics().backendError(code)
			}
			return s.forward(h)
		case p[0] == 0xfb: // LOCAL INFILE: the client sends the file, then the server answers
			s.clientOwes.Store(owesInfile)
			if err := s.forward(h); err != nil {
				return err
			}
			if err := s.client.flush(); err != nil {
				return err
			}
		default:
			columns, _, ok := lenEnc(p)
			if !ok {
				return fmt.Errorf("%w: bad column count", errMalformed)
			}
			if err := s.forward(h); err != nil {
				return err
			}
			more, err := s.relayResultSet(columns)
			if err != nil || !more {
				return err
			}
		}
	}
}

// relayResultSet relays column definitions and rows after the column count.
// more reports SERVER_MORE_RESULTS_EXISTS on the final packet.
func (s *session) relayResultSet(columns uint64) (more bool, err error) {
	if err := s.relayN(columns); err != nil {
		return false, err
	}
	if !s.deprecateEOF() {
		h, p, err := s.nextPacket()
		if err != nil {
			return false, err
		}
		if !isTerminator(h, p) {
			return false, fmt.Errorf("%w: expected EOF after column definitions", errMalformed)
		}
		status := s.terminatorStatus(p)
		if err := s.forward(h); err != nil {
			return false, err
		}
		if status&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
			return false, nil // rows come with COM_STMT_FETCH
		}
	}
	status, err := s.relayRows()
	if err == nil && status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
		s.noteStatus(status)
	}
	return status&mysql.SERVER_MORE_RESULTS_EXISTS != 0, err
}

// relayN forwards n packets as they are (column or parameter definitions).
func (s *session) relayN(n uint64) error {
	for range n {
		h, _, err := s.nextPacket()
		if err != nil {
			return err
		}
		if err := s.forward(h); err != nil {
			return err
		}
	}
	return nil
}

// relayRows forwards rows up to and including the terminator or an ERR, and
// returns the terminator's status flags (0 after an ERR).
func (s *session) relayRows() (uint16, error) {
	for {
		if err := s.forwardBufferedRows(); err != nil {
			return 0, err
		}
		h, p, err := s.nextPacket()
		if err != nil {
			return 0, err
		}
		var status uint16
		end := false
		switch {
		case p[0] == 0xff:
			end = true
		case isTerminator(h, p):
			status, end = s.terminatorStatus(p), true
		}
		if err := s.forward(h); err != nil {
			return 0, err
		}
		if end {
			return status, nil
		}
	}
}

// forwardBufferedRows forwards, with one write into the client's buffer,
// the complete row packets already read from the backend, stopping before
// the first packet that needs a closer look: an ERR or a terminator (0xff,
// or 0xfe in a packet under 16 MiB; neither can start a row), one of 16 MiB
// or more, or one not yet complete. Rows are most of a large result, and
// this spares them the packet-by-packet path.
func (s *session) forwardBufferedRows() error {
	br := s.back.br
	if br.Buffered() < 5 || s.client.seqShift != 0 {
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	pos := 0
	for pos+4 < len(buf) {
		l := int(buf[pos]) | int(buf[pos+1])<<8 | int(buf[pos+2])<<16
		if l == 0 || l >= maxPacketPayload || pos+4+l > len(buf) {
			break
		}
		if first := buf[pos+4]; first == 0xff || first == 0xfe {
			break
		}
		pos += 4 + l
	}
	if pos == 0 {
		return nil
	}
	if _, err := s.client.bw.Write(buf[:pos]); err != nil {
		return err
	}
	_, _ = br.Discard(pos)
	return nil
}

// relayPrepare relays COM_STMT_PREPARE's response: ERR, or OK followed by
// the parameter and column definitions, each block ended by EOF unless
// CLIENT_DEPRECATE_EOF.
func (s *session) relayPrepare() error {
	h, p, err := s.nextPacket()
	if err != nil {
		return err
	}
	if p[0] == 0xff {
		return s.forward(h)
	}
	if p[0] != 0x00 || len(p) < 9 {
		return fmt.Errorf("%w: bad COM_STMT_PREPARE response", errMalformed)
	}
	columns := uint64(binary.LittleEndian.Uint16(p[5:]))
	params := uint64(binary.LittleEndian.Uint16(p[7:]))
	if err := s.forward(h); err != nil {
		return err
	}
	for _, n := range []uint64{params, columns} {
		if n == 0 {
			continue
		}
		if err := s.relayN(n); err != nil {
			return err
		}
		if !s.deprecateEOF() {
			if err := s.relayOne(); err != nil {
				return err
			}
		}
	}
	return nil
}

// relayFieldList relays COM_FIELD_LIST's column definitions up to EOF, or ERR.
func (s *session) relayFieldList() error {
	for {
		h, p, err := s.nextPacket()
		if err != nil {
			return err
		}
		end := p[0] == 0xff || isTerminator(h, p)
		if err := s.forward(h); err != nil {
			return err
		}
		if end {
			return nil
		}
	}
}
