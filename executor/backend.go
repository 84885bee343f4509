package executor

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// This file is the executor's use of the backend connection: its own
// statements (whose responses it reads into memory) and the client's
// statements (whose responses it relays, renumbered or patched).

func queryPacket(sql string) []byte {
	b := make([]byte, 1+len(sql))
	b[0] = mysql.COM_QUERY
	copy(b[1:], sql)
	return b
}

// send writes one command to the backend and flushes it.
func (s *Session) send(payload []byte) error {
	if s.untold != nil && !mayFollowAbort(payload) {
		return errUntold
	}
	s.noteSent(payload)
	if len(payload) > 0 && (payload[0] == mysql.COM_QUERY || payload[0] == mysql.COM_STMT_EXECUTE) {
		s.statements++ // it sets ROW_COUNT() (see rowCountFor)
	}
	if len(payload) > 0 && payload[0] == mysql.COM_QUERY && s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("backend statement", "sql", string(payload[1:]))
	}
	if _, err := s.link.Backend.WritePacket(payload, 0); err != nil {
		return err
	}
	return s.link.Backend.Flush()
}

// read reads a whole response into memory and records its outcome.
func (s *Session) read(kind wire.Kind) (*wire.Response, error) {
	r, err := s.rd.ReadAll(kind)
	if err != nil {
		return nil, err
	}
	if r.Failed() {
		s.noteErr(r.ErrCode)
	} else {
		s.noteStatus(r.Result)
	}
	s.noteOwn(r.Result, r.Err)
	return r, nil
}

// readRows is read for a result set whose rows beyond maxRows are read and
// dropped (Response.Dropped counts them).
func (s *Session) readRows(maxRows int) (*wire.Response, error) {
	c := &wire.Collect{MaxRows: maxRows}
	res, err := s.rd.Read(wire.Results, c)
	if err != nil {
		return nil, err
	}
	c.R.Result = res
	if res.Failed() {
		s.noteErr(res.ErrCode)
	} else {
		s.noteStatus(res)
	}
	s.noteOwn(res, c.R.Err)
	return &c.R, nil
}

// query runs sql, a statement of the proxy's own, and reads its response.
func (s *Session) query(sql string) (*wire.Response, error) {
	if err := s.send(queryPacket(sql)); err != nil {
		return nil, err
	}
	return s.read(wire.Results)
}

// queryErr runs sql like query and returns the server's ERR, if it failed.
func (s *Session) queryErr(sql string) (errPkt []byte, err error) {
	r, err := s.query(sql)
	if err != nil {
		return nil, err
	}
	if r.Failed() {
		return r.Err, nil
	}
	return nil, nil
}

// forward sends payload, the client's command or its rewrite, and relays
// the response with the server's numbering. When the payload takes another
// number of packets than the client's command did (a rewrite across a 16
// MiB boundary), the response is renumbered to follow the client's.
func (s *Session) forward(payload []byte, kind wire.Kind, patch func(*wire.OK)) (wire.Result, error) {
	return s.forwardPatched(payload, kind, patch, nil)
}

// forwardPatched is forward with the column patch cp (nil: none).
func (s *Session) forwardPatched(payload []byte, kind wire.Kind, patch func(*wire.OK), cp *columnPatch) (wire.Result, error) {
	return s.forwardCopied(payload, kind, patch, cp, nil)
}

// forwardCopied is forwardPatched handing every packet the client gets to
// keep, when set (see wire.Forward.Copy).
func (s *Session) forwardCopied(payload []byte, kind wire.Kind, patch func(*wire.OK), cp *columnPatch, keep func([]byte, wire.Role)) (wire.Result, error) {
	if packets := len(payload)/wire.MaxPayload + 1; packets != int(s.respSeq) {
		s.link.Client.SeqShift = s.respSeq - byte(packets)
	}
	if err := s.send(payload); err != nil {
		return wire.Result{}, err
	}
	sink := &wire.Forward{Client: s.link.Client, Server: s.link.Backend, Caps: s.link.Caps, PatchOK: patch, Copy: keep}
	cp.install(sink)
	res, err := s.rd.Read(kind, sink)
	s.link.Client.SeqShift = 0
	if err != nil {
		return res, err
	}
	s.Observe(res)
	return res, nil
}

// relayAs sends payload and relays its response to the client numbering
// packets from *seq; with more, its last packet flags further results. It
// is how a statement of a multi-statement query the proxy runs one by one
// is answered.
func (s *Session) relayAs(payload []byte, seq *byte, more bool) (wire.Result, error) {
	return s.relayAsPatched(payload, seq, more, nil)
}

// relayAsPatched is relayAs with a result set's column definitions
// patched by cp (nil: as they are).
func (s *Session) relayAsPatched(payload []byte, seq *byte, more bool, cp *columnPatch) (wire.Result, error) {
	if err := s.send(payload); err != nil {
		return wire.Result{}, err
	}
	sink := &wire.Forward{Client: s.link.Client, Server: s.link.Backend, Caps: s.link.Caps, Seq: seq, More: more}
	cp.install(sink)
	res, err := s.rd.Read(wire.Results, sink)
	if err != nil {
		return res, err
	}
	s.Observe(res)
	return res, nil
}

// writeOK sends a synthesized OK packet to the client.
func (s *Session) writeOK(ok wire.OK, seq *byte, more bool) error {
	if more {
		ok.Status |= mysql.SERVER_MORE_RESULTS_EXISTS
	}
	_, err := s.link.Client.WritePacket(ok.Bytes(s.link.Caps), *seq)
	*seq++
	s.noteAnswer(int64(ok.Affected), false)
	return err
}

// writeHeld sends buf, a response the proxy held, to the client, its last
// packet's status flags rewritten by status (nil: as they are).
func (s *Session) writeHeld(buf *wire.Buffer, seq *byte, status func(uint16) uint16) error {
	answered := int64(-1)
	if n := len(buf.Packets); n > 0 && buf.Roles[n-1] == wire.RoleOK {
		if ok, err := wire.ParseOK(buf.Packets[n-1]); err == nil {
			answered = int64(ok.Affected)
		}
	}
	s.noteAnswer(answered, false)
	return buf.WriteTo(s.link.Client, seq, s.link.Caps, status)
}

// writeErr sends an ERR packet to the client.
func (s *Session) writeErr(pkt []byte, seq *byte) error {
	if wire.ErrCode(pkt) == mysql.ER_LOCK_DEADLOCK {
		s.toldDeadlock()
	}
	_, err := s.link.Client.WritePacket(pkt, *seq)
	*seq++
	s.noteAnswer(-1, false)
	return err
}

// noteAnswer records what ROW_COUNT() gives after the client's statement
// just answered (see Session.rowCount): exact when the server's own
// value is that.
func (s *Session) noteAnswer(rowCount int64, exact bool) {
	s.rowCount, s.rowCountExact, s.rowCountAt = rowCount, exact, s.statements
}

// rowCountFor returns the text sql made to read the client's ROW_COUNT()
// in its first statement (see rewrite.WithRowCount), and that statement as
// written, when the server's value differs: the proxy answered the
// client's last statement itself, or sent statements of its own since.
// False: run sql as written.
func (s *Session) rowCountFor(sql string) (out, first string, ok bool) {
	if !s.rowCountWrong(sql) {
		return "", "", false
	}
	return rewrite.WithRowCount(sql, s.rowCount, s.rewriteSession())
}

// rowCountForBytes is rowCountFor of a query's text, which it copies only
// when the server's ROW_COUNT() is stale.
func (s *Session) rowCountForBytes(sql []byte) (out, first string, ok bool) {
	if !s.rowCountStale() {
		return "", "", false
	}
	return s.rowCountFor(string(sql))
}

// rowCountWrong reports whether sql reads ROW_COUNT() (as far as its text
// tells) where the server's value is not the client's.
func (s *Session) rowCountWrong(sql string) bool {
	return s.rowCountStale() && strings.Contains(strings.ToLower(sql), "row_count")
}

// rowCountStale reports whether the server's ROW_COUNT() is not the
// client's (see rowCountFor): a check of no text, for every statement.
func (s *Session) rowCountStale() bool {
	return !(s.rowCountExact && s.statements == s.rowCountAt)
}

// prepare prepares sql on the backend. With relay, the response goes to
// the client (numbered from the client's command); otherwise it is read
// and dropped. It returns the statement id and parameter count, or the ERR
// packet.
func (s *Session) prepare(sql []byte, relay bool) (id uint32, params int, errPkt []byte, err error) {
	return s.preparePatched(sql, relay, nil)
}

// preparePatched is prepare with the relayed column definitions patched.
func (s *Session) preparePatched(sql []byte, relay bool, cp *columnPatch) (id uint32, params int, errPkt []byte, err error) {
	if err := s.send(append([]byte{mysql.COM_STMT_PREPARE}, sql...)); err != nil {
		return 0, 0, nil, err
	}
	var sink wire.Sink = wire.Discard{}
	var c *wire.Collect
	seq := s.respSeq
	switch {
	case relay:
		f := &wire.Forward{Client: s.link.Client, Server: s.link.Backend, Caps: s.link.Caps, Seq: &seq}
		cp.install(f)
		sink = f
	default:
		c = &wire.Collect{}
		sink = c
	}
	res, err := s.rd.Read(wire.Prepare, sink)
	if err != nil {
		return 0, 0, nil, err
	}
	if res.Failed() {
		s.noteErr(res.ErrCode)
		if c != nil {
			errPkt = c.R.Err
			s.noteOwn(res, errPkt)
		} else {
			errPkt = []byte{0xff} // relayed already
		}
		return 0, 0, errPkt, nil
	}
	return res.StmtID, res.Params, nil, nil
}

// maxInternalStmts bounds the statements the proxy keeps prepared for its
// own use on one connection (they count against the server's
// max_prepared_stmt_count); the least recently used one is closed first.
const maxInternalStmts = 8

// internalStmts are the statements the proxy prepared for its own use on a
// connection, most recently used last.
type internalStmts struct {
	sql []string
	id  []uint32
}

// internalStmt returns the id of a statement the proxy prepared for its own
// use on this connection, preparing it on first use.
func (s *Session) internalStmt(sql string) (uint32, error) {
	in := &s.rw.internal
	for i, q := range in.sql {
		if q == sql {
			id := in.id[i]
			copy(in.sql[i:], in.sql[i+1:])
			copy(in.id[i:], in.id[i+1:])
			in.sql[len(in.sql)-1], in.id[len(in.id)-1] = sql, id
			return id, nil
		}
	}
	if len(in.sql) == maxInternalStmts {
		// COM_STMT_CLOSE has no response.
		if _, err := s.link.Backend.WritePacket(binary.LittleEndian.AppendUint32([]byte{mysql.COM_STMT_CLOSE}, in.id[0]), 0); err != nil {
			return 0, err
		}
		in.sql, in.id = in.sql[1:], in.id[1:]
	}
	id, _, errPkt, err := s.prepare([]byte(sql), false)
	if err != nil {
		return 0, err
	}
	if errPkt != nil {
		return 0, &backendError{pkt: errPkt}
	}
	in.sql, in.id = append(in.sql, sql), append(in.id, id)
	return id, nil
}

// backendError carries an ERR packet from a statement of the proxy's own;
// the client sees it as the error of its own statement.
type backendError struct{ pkt []byte }

func (e *backendError) Error() string {
	me := wire.ParseErr(e.pkt)
	return fmt.Sprintf("backend error %d: %s", me.Code, me.Message)
}

// executeInternal runs sql, prepared for the proxy's own use, with the
// given parameters of the client's execution.
func (s *Session) executeInternal(sql string, ep execParams, idx []int) (*wire.Response, error) {
	return s.executeInternalRows(sql, ep, idx, 0)
}

// executeInternalRows is executeInternal whose result keeps at most
// maxRows rows (0: all; see readRows).
func (s *Session) executeInternalRows(sql string, ep execParams, idx []int, maxRows int) (*wire.Response, error) {
	id, err := s.internalStmt(sql)
	if err != nil {
		return nil, err
	}
	pkt, err := ep.executePacket(id, idx)
	if err != nil {
		// A parameter the proxy needs was sent as long data too long to
		// keep: the client gets an error for this statement; the
		// connection stays.
		return nil, &backendError{pkt: wire.Errorf(mysql.ER_UNKNOWN_ERROR, "HY000",
			"a key parameter of a rewritten statement sent with COM_STMT_SEND_LONG_DATA is longer than %d bytes", maxKeptLongData).Packet()}
	}
	if err := s.send(pkt); err != nil {
		return nil, err
	}
	return s.readRows(maxRows)
}

// binaryString returns the value of a binary-protocol row of one string
// column (not NULL).
func binaryString(row []byte, more bool) (string, bool) {
	if len(row) < 3 || row[1]&0x04 != 0 { // header, NULL bitmap (offset 2 bits)
		return "", false
	}
	v, n, ok := wire.LenEncString(row[2:])
	if !ok || 2+n > len(row) || 2+n < len(row) && !more {
		return "", false
	}
	return string(v), true
}

// binaryInt decodes the first column of a binary-protocol row as an integer
// of the type given by its column definition.
func binaryInt(col, row []byte) (string, bool) {
	// Column definition: six length-encoded strings, a length-encoded
	// 0x0c, charset(2), length(4), type(1), flags(2), decimals(1).
	pos := 0
	for range 6 {
		_, n, ok := wire.LenEncString(col[pos:])
		if !ok {
			return "", false
		}
		pos += n
	}
	_, n, ok := wire.LenEnc(col[pos:])
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
