package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// OK is a decoded OK packet (or an EOF-style OK, header 0xfe, that ends a
// result set with CLIENT_DEPRECATE_EOF).
type OK struct {
	Header   byte
	Affected uint64
	InsertID uint64
	Status   uint16
	Warnings uint16
	// Info is the human-readable info string ("Rows matched: …").
	Info []byte
	// State is the session state change block, present when Status has
	// SERVER_SESSION_STATE_CHANGED (kept as sent, length prefix included).
	State []byte
}

// ParseOK decodes an OK packet payload. Info and State alias p.
//
// Both MySQL and MariaDB write the info string length-encoded whether or not
// the client negotiated CLIENT_SESSION_TRACK, and omit it when it is empty
// and no session state follows; ParseOK reads what they write.
func ParseOK(p []byte) (OK, error) {
	var ok OK
	if len(p) < 1 {
		return ok, fmt.Errorf("%w: empty OK packet", ErrMalformed)
	}
	ok.Header = p[0]
	pos := 1
	var n int
	var good bool
	if ok.Affected, n, good = LenEnc(p[pos:]); !good {
		return ok, fmt.Errorf("%w: OK packet affected rows", ErrMalformed)
	}
	pos += n
	if ok.InsertID, n, good = LenEnc(p[pos:]); !good {
		return ok, fmt.Errorf("%w: OK packet insert id", ErrMalformed)
	}
	pos += n
	if len(p) < pos+4 {
		return ok, fmt.Errorf("%w: OK packet too short", ErrMalformed)
	}
	ok.Status = binary.LittleEndian.Uint16(p[pos:])
	ok.Warnings = binary.LittleEndian.Uint16(p[pos+2:])
	rest := p[pos+4:]
	if len(rest) == 0 {
		return ok, nil
	}
	info, n, good := LenEncString(rest)
	if !good {
		return ok, fmt.Errorf("%w: OK packet info", ErrMalformed)
	}
	ok.Info = info
	if ok.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0 {
		ok.State = rest[n:]
	}
	return ok, nil
}

// Append encodes the OK packet for a client with capabilities caps, the way
// the servers do (see ParseOK).
func (ok *OK) Append(b []byte, caps uint32) []byte {
	b = append(b, ok.Header)
	b = mysql.AppendLengthEncodedInteger(b, ok.Affected)
	b = mysql.AppendLengthEncodedInteger(b, ok.InsertID)
	b = binary.LittleEndian.AppendUint16(b, ok.Status)
	b = binary.LittleEndian.AppendUint16(b, ok.Warnings)
	stateChanged := caps&mysql.CLIENT_SESSION_TRACK != 0 && ok.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0
	if len(ok.Info) > 0 || stateChanged {
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(ok.Info)))
		b = append(b, ok.Info...)
	}
	if stateChanged {
		b = append(b, ok.State...)
	}
	return b
}

// Bytes is Append to a new slice.
func (ok *OK) Bytes(caps uint32) []byte {
	return ok.Append(make([]byte, 0, 16+len(ok.Info)+len(ok.State)), caps)
}

// UpdateInfo is the info string MySQL and MariaDB send for UPDATE.
func UpdateInfo(matched, changed uint64, warnings uint16) []byte {
	b := append([]byte("Rows matched: "), strconv.FormatUint(matched, 10)...)
	b = append(b, "  Changed: "...)
	b = strconv.AppendUint(b, changed, 10)
	b = append(b, "  Warnings: "...)
	return strconv.AppendUint(b, uint64(warnings), 10)
}

// OKStatus returns the status flags of an OK packet from its leading bytes
// (header, affected rows, last insert id, status), or 0.
func OKStatus(p []byte) uint16 { return okField(p, 0) }

// OKWarnings returns the warning count of an OK packet (0 when it is too
// short to carry one).
func OKWarnings(p []byte) uint16 { return okField(p, 2) }

// okField returns the 2-byte field at offset off after an OK packet's
// affected rows and last insert id: the status (0), the warnings (2).
func okField(p []byte, off int) uint16 {
	pos := 1
	for range 2 {
		_, n, ok := LenEnc(p[min(pos, len(p)):])
		if !ok {
			return 0
		}
		pos += n
	}
	pos += off
	if len(p) < pos+2 {
		return 0
	}
	return binary.LittleEndian.Uint16(p[pos:])
}

// Error is a MySQL error: a server's ERR packet decoded, or an error the
// proxy reports itself. Error codes the proxy uses itself are in the
// server's range (1000–1999, 3000–…), never a client library's 2000–2999,
// which clients refuse from a server ("malformed packet").
type Error struct {
	Code    uint16
	State   string // SQLSTATE, five characters
	Message string
}

func (e *Error) Error() string {
	return "ERROR " + strconv.Itoa(int(e.Code)) + " (" + e.State + "): " + e.Message
}

// Errorf returns a proxy error: the message is prefixed "slotproxy: " so
// a user can tell it from the server's own errors.
func Errorf(code uint16, state, format string, args ...any) *Error {
	if len(state) != 5 {
		state = mysql.DEFAULT_MYSQL_STATE
	}
	return &Error{Code: code, State: state, Message: "slotproxy: " + fmt.Sprintf(format, args...)}
}

// Packet encodes e as an ERR packet payload (CLIENT_PROTOCOL_41 form).
func (e *Error) Packet() []byte {
	state := e.State
	if len(state) != 5 {
		state = mysql.DEFAULT_MYSQL_STATE
	}
	b := make([]byte, 0, 9+len(e.Message))
	b = append(b, 0xff, byte(e.Code), byte(e.Code>>8), '#')
	b = append(b, state...)
	return append(b, e.Message...)
}

// ErrPacket turns err into the payload of an ERR packet. This is the one
// place where Go errors become MySQL errors: an *Error is sent as it is;
// anything else becomes error 1105 with a generic message, so internal
// details do not leak to clients (they are logged by the caller).
func ErrPacket(err error) []byte {
	var e *Error
	if !errors.As(err, &e) {
		e = Errorf(mysql.ER_UNKNOWN_ERROR, "HY000", "internal error")
	}
	return e.Packet()
}

// ParseErr decodes an ERR packet payload (0xff header included).
func ParseErr(p []byte) *Error {
	e := &Error{State: mysql.DEFAULT_MYSQL_STATE}
	if len(p) < 3 {
		return e
	}
	e.Code = binary.LittleEndian.Uint16(p[1:])
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State, rest = string(rest[1:6]), rest[6:]
	}
	e.Message = string(rest)
	return e
}

// ErrCode returns the error code of an ERR packet payload, or 0.
func ErrCode(p []byte) uint16 {
	if len(p) < 3 || p[0] != 0xff {
		return 0
	}
	return binary.LittleEndian.Uint16(p[1:])
}

// SetEOFStatus returns the EOF packet p (0xfe, warnings, status) with its
// status flags replaced; p is modified in place when long enough.
func SetEOFStatus(p []byte, status uint16) []byte {
	if len(p) >= 5 {
		binary.LittleEndian.PutUint16(p[3:], status)
	}
	return p
}
