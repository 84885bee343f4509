package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Kind says how the response to a command is delimited.
type Kind uint8

const (
	// None: the server sends nothing (COM_QUIT, COM_STMT_CLOSE,
	// COM_STMT_SEND_LONG_DATA).
	None Kind = iota
	// One: exactly one packet (OK, ERR, EOF, a statistics string).
	One
	// Results: OK, ERR, a LOCAL INFILE request or result sets, repeated
	// while the server flags more results (COM_QUERY, COM_STMT_EXECUTE).
	Results
	// Prepare: COM_STMT_PREPARE's OK and definitions, or ERR.
	Prepare
	// Rows: COM_STMT_FETCH's rows up to a terminator, or ERR.
	Rows
	// FieldList: COM_FIELD_LIST's column definitions up to EOF, or ERR.
	FieldList
	// Auth: COM_CHANGE_USER starts an authentication exchange.
	Auth
	// Stream: the replication stream, raw bytes until the connection ends.
	Stream
)

// KindOf classifies a command byte.
func KindOf(cmd byte) Kind {
	switch cmd {
	case mysql.COM_QUIT, mysql.COM_STMT_CLOSE, mysql.COM_STMT_SEND_LONG_DATA:
		return None
	case mysql.COM_QUERY, mysql.COM_STMT_EXECUTE, mysql.COM_PROCESS_INFO, ComStmtBulkExecute:
		return Results
	case mysql.COM_STMT_PREPARE:
		return Prepare
	case mysql.COM_STMT_FETCH:
		return Rows
	case mysql.COM_FIELD_LIST:
		return FieldList
	case mysql.COM_CHANGE_USER:
		return Auth
	case mysql.COM_BINLOG_DUMP, mysql.COM_BINLOG_DUMP_GTID, mysql.COM_TABLE_DUMP:
		return Stream
	case mysql.COM_PING, mysql.COM_INIT_DB, mysql.COM_STATISTICS, mysql.COM_RESET_CONNECTION,
		mysql.COM_STMT_RESET, mysql.COM_SET_OPTION, mysql.COM_PROCESS_KILL, mysql.COM_REFRESH,
		mysql.COM_SHUTDOWN, mysql.COM_DEBUG, mysql.COM_CREATE_DB, mysql.COM_DROP_DB,
		mysql.COM_REGISTER_SLAVE:
		return One
	}
	// Unknown or obsolete commands: the server answers with ERR (or OK),
	// which the Results grammar reads as a one-packet response.
	return Results
}

// ComStmtBulkExecute is MariaDB's COM_STMT_BULK_EXECUTE.
const ComStmtBulkExecute = 0xfa

// Role says what one packet of a response is.
type Role uint8

const (
	RoleOK          Role = iota // OK (the response's last unless Status has SERVER_MORE_RESULTS_EXISTS)
	RoleErr                     // ERR, always the last packet
	RoleInfile                  // LOCAL INFILE request: the client sends the file next
	RoleColumnCount             // a result set's column count
	RoleColumn                  // a column definition (also of a prepared statement's result)
	RoleColumnsEnd              // EOF after column definitions (without CLIENT_DEPRECATE_EOF)
	RoleRow                     // a row
	RoleEnd                     // EOF or OK ending rows (or ending COM_FIELD_LIST)
	RolePrepareOK               // COM_STMT_PREPARE's OK (statement id, counts)
	RoleParam                   // a prepared statement's parameter definition
	RoleParamsEnd               // EOF after parameter definitions
	RoleOther                   // the one packet of a One response that is not OK or ERR
)

// PeekLen is how many payload bytes a Packet shows before it is consumed:
// enough for an OK packet's two length-encoded integers and status flags,
// and for COM_STMT_PREPARE's OK.
const PeekLen = 32

// Packet describes one packet of a response to a Sink.
type Packet struct {
	Header Header
	Role   Role
	// Peek holds the leading payload bytes (up to PeekLen); valid until the
	// sink consumes the packet.
	Peek []byte
	// Status is the server status of OK, EOF and row terminators.
	Status uint16
	// Last: no packet of this response follows.
	Last bool
}

// Sink receives the packets of one response, in order. Take must consume
// the packet's payload from src: forward it, read it or discard it.
type Sink interface {
	Take(src *Conn, p *Packet) error
	// Wait is called before the reader may block reading src: a sink that
	// forwards to a client flushes what the client is owed.
	Wait() error
}

// InfileHandler is implemented by sinks that can serve a LOCAL INFILE
// request: after taking the RoleInfile packet, the reader calls Infile,
// which must send the file's packets to the server (ending with an empty
// packet) before the reader reads the statement's result. A sink without it
// makes the request an error.
type InfileHandler interface {
	Infile() error
}

// RowForwarder is implemented by sinks that forward rows verbatim: before
// each row packet the reader lets them forward the complete rows already
// buffered in one write (see Conn.ForwardBufferedRows).
type RowForwarder interface {
	ForwardRows(src *Conn) error
}

// Result summarizes a response.
type Result struct {
	// Status is the server status of the last OK or EOF (0 after ERR).
	Status uint16
	// StatusKnown: the response carried a status (an OK or EOF). A status
	// of 0 is a real one (autocommit off, no transaction open); responses
	// without a status (ERR, a COM_STMT_PREPARE without EOF) leave the
	// session's status as it was.
	StatusKnown bool
	// ErrCode is the error code when the response ended with ERR.
	ErrCode uint16
	// StmtID, Params and Columns describe a successful COM_STMT_PREPARE.
	StmtID          uint32
	Params, Columns int
	// RowCount is what ROW_COUNT() gives after a statement's response
	// (kind Results): its last OK's affected rows, -1 after rows or an
	// error; RowCountKnown says whether it was read.
	RowCount      int64
	RowCountKnown bool
	// Warnings is the warning count of the last OK or EOF (0 after ERR).
	Warnings uint16
}

// Failed reports whether the response ended with ERR.
func (r Result) Failed() bool { return r.ErrCode != 0 }

// Reader reads responses from a server connection. deprecateEOF is whether
// CLIENT_DEPRECATE_EOF was negotiated.
type Reader struct {
	Src          *Conn
	DeprecateEOF bool
}

// Read reads the response of the given kind, handing each packet to sink.
// Kinds None, Auth and Stream have no packet grammar and are errors here.
func (r Reader) Read(kind Kind, sink Sink) (Result, error) {
	defer r.Src.Narrow() // a large result set's borrowed buffer (see Conn.Widen)
	switch kind {
	case One:
		return r.one(sink)
	case Results:
		return r.results(sink)
	case Prepare:
		return r.prepare(sink)
	case Rows:
		var res Result
		err := r.rows(sink, &res, true)
		return res, err
	case FieldList:
		return r.fieldList(sink)
	}
	return Result{}, fmt.Errorf("wire: no packet grammar for response kind %d", kind)
}

// next consumes the next packet header and peeks at its payload.
func (r Reader) next(sink Sink) (Packet, error) {
	if r.Src.Buffered() < 4 {
		if err := sink.Wait(); err != nil {
			return Packet{}, err
		}
	}
	h, err := r.Src.ReadHeader()
	if err != nil {
		return Packet{}, NoEOF(err)
	}
	if h.Length == 0 {
		return Packet{}, fmt.Errorf("%w: empty packet from server", ErrMalformed)
	}
	peek, err := r.Src.PeekPayload(h, PeekLen)
	if err != nil {
		return Packet{}, NoEOF(err)
	}
	return Packet{Header: h, Peek: peek}, nil
}

// isTerminator reports whether a packet inside rows ends them: EOF, or with
// CLIENT_DEPRECATE_EOF an OK with the 0xfe header. A row can start with
// 0xfe only as the length prefix of a value of 16 MiB or more, so its
// packet is always a full MaxPayload bytes.
func isTerminator(p *Packet) bool { return p.Peek[0] == 0xfe && p.Header.Length < MaxPayload }

// terminatorWarnings is the warning count of an EOF, or of an OK with
// CLIENT_DEPRECATE_EOF.
func (r Reader) terminatorWarnings(peek []byte) uint16 {
	if r.DeprecateEOF {
		return OKWarnings(peek)
	}
	if len(peek) >= 3 { // 0xfe, warnings(2)
		return binary.LittleEndian.Uint16(peek[1:])
	}
	return 0
}

// terminatorStatus is the status of an EOF, or of an OK with CLIENT_DEPRECATE_EOF.
func (r Reader) terminatorStatus(peek []byte) uint16 {
	if r.DeprecateEOF {
		return OKStatus(peek)
	}
	if len(peek) >= 5 { // 0xfe, warnings(2), status(2)
		return binary.LittleEndian.Uint16(peek[3:])
	}
	return 0
}

func (r Reader) one(sink Sink) (Result, error) {
	p, err := r.next(sink)
	if err != nil {
		return Result{}, err
	}
	p.Last = true
	var res Result
	switch {
	case p.Peek[0] == 0x00 && p.Header.Length >= 7:
		p.Role, p.Status = RoleOK, OKStatus(p.Peek)
		res.Status, res.StatusKnown, res.Warnings = p.Status, true, OKWarnings(p.Peek)
	case p.Peek[0] == 0xff:
		p.Role = RoleErr
		res.ErrCode = ErrCode(p.Peek)
	default:
		p.Role = RoleOther
	}
	return res, sink.Take(r.Src, &p)
}

func (r Reader) results(sink Sink) (Result, error) {
	var res Result
	for {
		p, err := r.next(sink)
		if err != nil {
			return res, err
		}
		switch p.Peek[0] {
		case 0x00:
			p.Role, p.Status = RoleOK, OKStatus(p.Peek)
			p.Last = p.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0
			res.Status, res.StatusKnown, res.Warnings = p.Status, true, OKWarnings(p.Peek)
			res.RowCount, res.RowCountKnown = -1, true
			if affected, _, ok := LenEnc(p.Peek[1:]); ok {
				res.RowCount = int64(affected)
			}
			if err := sink.Take(r.Src, &p); err != nil || p.Last {
				return res, err
			}
			continue
		case 0xff:
			p.Role, p.Last = RoleErr, true
			res.ErrCode, res.Status, res.StatusKnown, res.Warnings = ErrCode(p.Peek), 0, false, 0
			res.RowCount, res.RowCountKnown = -1, true
			return res, sink.Take(r.Src, &p)
		case 0xfb:
			p.Role = RoleInfile
			h, ok := sink.(InfileHandler)
			if !ok {
				return res, fmt.Errorf("wire: LOCAL INFILE request where none can be served")
			}
			if err := sink.Take(r.Src, &p); err != nil {
				return res, err
			}
			if err := h.Infile(); err != nil {
				return res, err
			}
			continue
		}
		columns, _, ok := LenEnc(p.Peek)
		if !ok {
			return res, fmt.Errorf("%w: bad column count", ErrMalformed)
		}
		p.Role = RoleColumnCount
		res.RowCount, res.RowCountKnown = -1, true
		if err := sink.Take(r.Src, &p); err != nil {
			return res, err
		}
		if err := r.definitions(sink, columns, RoleColumn); err != nil {
			return res, err
		}
		if !r.DeprecateEOF {
			e, err := r.next(sink)
			if err != nil {
				return res, err
			}
			if !isTerminator(&e) {
				return res, fmt.Errorf("%w: expected EOF after column definitions", ErrMalformed)
			}
			e.Role, e.Status = RoleColumnsEnd, r.terminatorStatus(e.Peek)
			// A cursor was opened: rows come with COM_STMT_FETCH.
			e.Last = e.Status&mysql.SERVER_STATUS_CURSOR_EXISTS != 0
			res.Status, res.StatusKnown = e.Status, true
			if err := sink.Take(r.Src, &e); err != nil || e.Last {
				return res, err
			}
		}
		if err := r.rows(sink, &res, false); err != nil || res.Failed() || res.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			return res, err
		}
	}
}

// rows reads rows up to a terminator or ERR. fetch: the rows of
// COM_STMT_FETCH, whose terminator always ends the response.
func (r Reader) rows(sink Sink, res *Result, fetch bool) error {
	fw, _ := sink.(RowForwarder)
	for {
		if fw != nil {
			if err := fw.ForwardRows(r.Src); err != nil {
				return err
			}
		}
		p, err := r.next(sink)
		if err != nil {
			return err
		}
		switch {
		case p.Peek[0] == 0xff:
			p.Role, p.Last = RoleErr, true
			res.ErrCode, res.Status, res.StatusKnown, res.Warnings = ErrCode(p.Peek), 0, false, 0
			return sink.Take(r.Src, &p)
		case isTerminator(&p):
			p.Role, p.Status = RoleEnd, r.terminatorStatus(p.Peek)
			p.Last = fetch || p.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0
			res.Status, res.StatusKnown, res.Warnings = p.Status, true, r.terminatorWarnings(p.Peek)
			return sink.Take(r.Src, &p)
		default:
			p.Role = RoleRow
			if err := sink.Take(r.Src, &p); err != nil {
				return err
			}
		}
	}
}

// definitions reads n column or parameter definitions.
func (r Reader) definitions(sink Sink, n uint64, role Role) error {
	for range n {
		p, err := r.next(sink)
		if err != nil {
			return err
		}
		p.Role = role
		if err := sink.Take(r.Src, &p); err != nil {
			return err
		}
	}
	return nil
}

func (r Reader) prepare(sink Sink) (Result, error) {
	var res Result
	p, err := r.next(sink)
	if err != nil {
		return res, err
	}
	if p.Peek[0] == 0xff {
		p.Role, p.Last = RoleErr, true
		res.ErrCode = ErrCode(p.Peek)
		return res, sink.Take(r.Src, &p)
	}
	if p.Peek[0] != 0x00 || len(p.Peek) < 9 {
		return res, fmt.Errorf("%w: bad COM_STMT_PREPARE response", ErrMalformed)
	}
	res.StmtID = binary.LittleEndian.Uint32(p.Peek[1:])
	res.Columns = int(binary.LittleEndian.Uint16(p.Peek[5:]))
	res.Params = int(binary.LittleEndian.Uint16(p.Peek[7:]))
	p.Role = RolePrepareOK
	p.Last = res.Params == 0 && res.Columns == 0
	if err := sink.Take(r.Src, &p); err != nil || p.Last {
		return res, err
	}
	blocks := []struct {
		n        int
		def, end Role
	}{{res.Params, RoleParam, RoleParamsEnd}, {res.Columns, RoleColumn, RoleColumnsEnd}}
	for i, b := range blocks {
		if b.n == 0 {
			continue
		}
		lastBlock := i == 1 || res.Columns == 0
		for j := range b.n {
			d, err := r.next(sink)
			if err != nil {
				return res, err
			}
			d.Role = b.def
			d.Last = lastBlock && r.DeprecateEOF && j == b.n-1
			if err := sink.Take(r.Src, &d); err != nil {
				return res, err
			}
		}
		if !r.DeprecateEOF {
			e, err := r.next(sink)
			if err != nil {
				return res, err
			}
			e.Role, e.Last = b.end, lastBlock
			e.Status = r.terminatorStatus(e.Peek)
			if err := sink.Take(r.Src, &e); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func (r Reader) fieldList(sink Sink) (Result, error) {
	var res Result
	for {
		p, err := r.next(sink)
		if err != nil {
			return res, err
		}
		switch {
		case p.Peek[0] == 0xff:
			p.Role, p.Last = RoleErr, true
			res.ErrCode = ErrCode(p.Peek)
		case isTerminator(&p):
			p.Role, p.Last = RoleEnd, true
			p.Status = r.terminatorStatus(p.Peek)
			res.Status, res.StatusKnown = p.Status, true
		default:
			p.Role = RoleColumn
		}
		if err := sink.Take(r.Src, &p); err != nil || p.Last {
			return res, err
		}
	}
}
