package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// This file is the command pump's exclusive use of the backend: while it
// holds the backend (see acquire), the response pump is parked and the
// command pump sends its own statements on the client's backend connection
// (so they run in the client's transaction) and writes the client's
// response itself.

// acquire sends the first command of an exclusive section and waits until
// the response pump, woken by the response, hands the backend over.
func (s *session) acquire(first []byte) error {
	s.pending.Add(1)
	s.expects <- expect{kind: respHandoff}
	if err := s.writeCommand(first); err != nil {
		return err
	}
	select {
	case <-s.handoff:
		s.held = true
		return nil
	case <-s.done:
		return io.EOF
	}
}

// release flushes the client and hands the backend back.
func (s *session) release() error {
	if !s.held {
		return nil
	}
	s.held = false
	err := s.client.flush()
	select {
	case s.handback <- struct{}{}:
	case <-s.done:
		return io.EOF
	}
	return err
}

// backendCmd sends one command, acquiring the backend first if needed.
func (s *session) backendCmd(payload []byte) error {
	if !s.held {
		return s.acquire(payload)
	}
	return s.writeCommand(payload)
}

func (s *session) writeCommand(payload []byte) error {
	if _, err := s.back.writePacket(payload, 0); err != nil {
		return err
	}
	return s.back.flush()
}

func queryPacket(sql string) []byte {
	b := make([]byte, 1+len(sql))
	b[0] = mysql.COM_QUERY
	copy(b[1:], sql)
	return b
}

// response is a complete response read while holding the backend.
type response struct {
	ok     *okPacket
	errPkt []byte
	cols   [][]byte
	rows   [][]byte
	status uint16
}

func (r *response) failed() bool { return r.errPkt != nil }

// errCode returns the MySQL error code of an ERR response.
func (r *response) errCode() uint16 {
	if len(r.errPkt) < 3 {
		return 0
	}
	return binary.LittleEndian.Uint16(r.errPkt[1:])
}

// readPkt reads one logical backend packet into a fresh slice.
func (s *session) readPkt() ([]byte, error) {
	p, _, err := s.back.readPacket(nil, 1<<30)
	if err != nil {
		return nil, noEOF(err)
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: empty packet from backend", errMalformed)
	}
	return p, nil
}

// readResponse reads a whole response (OK, ERR or result sets; rows of the
// first result set are kept).
func (s *session) readResponse() (*response, error) {
	r := &response{}
	for {
		p, err := s.readPkt()
		if err != nil {
			return nil, err
		}
		switch p[0] {
		case 0x00:
			ok, err := parseOK(p)
			if err != nil {
				return nil, err
			}
			r.ok, r.status = &ok, ok.status
			if ok.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return r, nil
			}
			continue
		case 0xff:
			r.errPkt = p
			s.metrics().backendError(r.errCode())
			return r, nil
		case 0xfb:
			return nil, errors.New("LOCAL INFILE request to an internal statement")
		}
		n, _, ok := lenEnc(p)
		if !ok {
			return nil, fmt.Errorf("%w: bad column count", errMalformed)
		}
		first := r.cols == nil
		for range n {
			c, err := s.readPkt()
			if err != nil {
				return nil, err
			}
			if first {
				r.cols = append(r.cols, c)
			}
		}
		if !s.deprecateEOF() {
			if _, err := s.readPkt(); err != nil {
				return nil, err
			}
		}
		for {
			row, err := s.readPkt()
			if err != nil {
				return nil, err
			}
			if row[0] == 0xff {
				r.errPkt = row
				s.metrics().backendError(r.errCode())
				return r, nil
			}
			if row[0] == 0xfe && len(row) < maxPacketPayload {
				r.status = s.terminatorStatus(row)
				break
			}
			if first {
				r.rows = append(r.rows, row)
			}
		}
		if r.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			return r, nil
		}
	}
}

// textValues decodes a text-protocol row; NULL is nil.
func textValues(row []byte) ([][]byte, error) {
	var out [][]byte
	for len(row) > 0 {
		if row[0] == 0xfb {
			out = append(out, nil)
			row = row[1:]
			continue
		}
		l, n, ok := lenEnc(row)
		if !ok || uint64(len(row)-n) < l {
			return nil, fmt.Errorf("%w: text row", errMalformed)
		}
		out = append(out, row[n:n+int(l)])
		row = row[n+int(l):]
	}
	return out, nil
}

// binaryInt decodes the first column of a binary-protocol row as an integer
// of the type given by its column definition.
func binaryInt(col, row []byte) (string, bool) {
	// Column definition: six length-encoded strings, a length-encoded
	// 0x0c, charset(2), length(4), type(1), flags(2), decimals(1).
	pos := 0
	for range 6 {
		l, n, ok := lenEnc(col[pos:])
		if !ok || l > uint64(len(col)-pos-n) {
			return "", false
		}
		pos += n + int(l)
	}
	_, n, ok := lenEnc(col[pos:])
	if !ok || len(col) < pos+n+9 {
		return "", false
	}
	pos += n
	t := col[pos+6]
	unsigned := binary.LittleEndian.Uint16(col[pos+7:])&mysql.UNSIGNED_FLAG != 0
	if len(row) < 3 || row[1]&0x04 != 0 { // header, NULL bitmap (offset 2 bits)
		return "", false
	}
	size, err := paramSize(t, row[2:])
	if err != nil {
		return "", false
	}
	ep := execParams{n: 1, null: []bool{false}, long: []bool{false}, types: []byte{t, 0}, values: [][]byte{row[2 : 2+size]}}
	if unsigned {
		ep.types[1] = 0x80
	}
	return ep.intParam(0)
}

// relayHeld relays the response to a command sent while holding the
// backend, renumbering sequence ids from *seq and, when more is set,
// flagging SERVER_MORE_RESULTS_EXISTS on its last packet so that further
// results can follow. It reports whether the response was an ERR.
func (s *session) relayHeld(seq *byte, more bool) (bool, error) {
	out := func(p []byte) error {
		_, err := s.client.writePacket(p, *seq)
		*seq++
		return err
	}
	for {
		p, err := s.readPkt()
		if err != nil {
			return false, err
		}
		switch p[0] {
		case 0x00:
			ok, err := parseOK(p)
			if err != nil {
				return false, err
			}
			final := ok.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0
			s.noteStatus(ok.status)
			if final && more {
				ok.status |= mysql.SERVER_MORE_RESULTS_EXISTS
				p = ok.build(s.caps, nil)
			}
			if err := out(p); err != nil || final {
				return false, err
			}
			continue
		case 0xff:
			return true, out(p)
		case 0xfb:
			return false, errors.New("LOCAL INFILE inside a rewritten multi-statement query is not supported")
		}
		n, _, ok := lenEnc(p)
		if !ok {
			return false, fmt.Errorf("%w: bad column count", errMalformed)
		}
		if err := out(p); err != nil {
			return false, err
		}
		for range n {
			c, err := s.readPkt()
			if err != nil {
				return false, err
			}
			if err := out(c); err != nil {
				return false, err
			}
		}
		if !s.deprecateEOF() {
			e, err := s.readPkt()
			if err != nil {
				return false, err
			}
			if err := out(e); err != nil {
				return false, err
			}
		}
		for {
			row, err := s.readPkt()
			if err != nil {
				return false, err
			}
			if row[0] == 0xff {
				return true, out(row)
			}
			if row[0] == 0xfe && len(row) < maxPacketPayload {
				status := s.terminatorStatus(row)
				s.noteStatus(status)
				final := status&mysql.SERVER_MORE_RESULTS_EXISTS == 0
				if final && more {
					row = s.withMoreResults(row)
				}
				if err := out(row); err != nil || final {
					return false, err
				}
				break
			}
			if err := out(row); err != nil {
				return false, err
			}
		}
	}
}

// withMoreResults sets SERVER_MORE_RESULTS_EXISTS on a terminator packet.
func (s *session) withMoreResults(p []byte) []byte {
	if s.deprecateEOF() {
		ok, err := parseOK(p)
		if err != nil {
			return p
		}
		ok.status |= mysql.SERVER_MORE_RESULTS_EXISTS
		return ok.build(s.caps, nil)
	}
	if len(p) >= 5 {
		st := binary.LittleEndian.Uint16(p[3:]) | mysql.SERVER_MORE_RESULTS_EXISTS
		binary.LittleEndian.PutUint16(p[3:], st)
	}
	return p
}

// prepareHeld prepares sql on the backend while holding it, relaying the
// response to the client when relay is set. It returns the statement id and
// parameter count, or the ERR packet.
func (s *session) prepareHeld(sql []byte, relay bool) (id uint32, params int, errPkt []byte, err error) {
	if err := s.backendCmd(append([]byte{mysql.COM_STMT_PREPARE}, sql...)); err != nil {
		return 0, 0, nil, err
	}
	return s.readPrepareResponse(relay)
}

// readPrepareResponse reads a COM_STMT_PREPARE response while holding the
// backend, relaying it to the client when relay is set.
func (s *session) readPrepareResponse(relay bool) (id uint32, params int, errPkt []byte, err error) {
	seq := s.respSeq
	out := func(p []byte) error {
		if !relay {
			return nil
		}
		_, err := s.client.writePacket(p, seq)
		seq++
		return err
	}
	p, err := s.readPkt()
	if err != nil {
		return 0, 0, nil, err
	}
	if p[0] == 0xff {
		return 0, 0, p, out(p)
	}
	if p[0] != 0x00 || len(p) < 9 {
		return 0, 0, nil, fmt.Errorf("%w: bad COM_STMT_PREPARE response", errMalformed)
	}
	id = binary.LittleEndian.Uint32(p[1:])
	columns := int(binary.LittleEndian.Uint16(p[5:]))
	params = int(binary.LittleEndian.Uint16(p[7:]))
	if err := out(p); err != nil {
		return 0, 0, nil, err
	}
	for _, n := range [2]int{params, columns} {
		if n == 0 {
			continue
		}
		if !s.deprecateEOF() {
			n++
		}
		for range n {
			d, err := s.readPkt()
			if err != nil {
				return 0, 0, nil, err
			}
			if err := out(d); err != nil {
				return 0, 0, nil, err
			}
		}
	}
	return id, params, nil, nil
}

// internalStmt returns the id of a statement the proxy prepared for its
// own use on this connection, preparing it on first use.
func (s *session) internalStmt(sql string) (uint32, error) {
	if id, ok := s.rw.internal[sql]; ok {
		return id, nil
	}
	id, _, errPkt, err := s.prepareHeld([]byte(sql), false)
	if err != nil {
		return 0, err
	}
	if errPkt != nil {
		return 0, &backendError{pkt: errPkt}
	}
	if s.rw.internal == nil {
		s.rw.internal = map[string]uint32{}
	}
	s.rw.internal[sql] = id
	return id, nil
}

// backendError carries an ERR packet from an internal statement; the
// client sees it as the error of its own statement.
type backendError struct{ pkt []byte }

func (e *backendError) Error() string {
	if len(e.pkt) > 9 {
		return "backend error " + strconv.Itoa(int(binary.LittleEndian.Uint16(e.pkt[1:]))) + ": " + string(e.pkt[9:])
	}
	return "backend error"
}

// query runs sql as a text query while holding the backend.
func (s *session) query(sql string) (*response, error) {
	if err := s.backendCmd(queryPacket(sql)); err != nil {
		return nil, err
	}
	r, err := s.readResponse()
	if err == nil && r.status != 0 {
		s.noteStatus(r.status)
	}
	return r, err
}
