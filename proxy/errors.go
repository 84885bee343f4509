package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// Errors the proxy reports itself. Every code is in the server's range:
// client libraries refuse server-sent codes in their own 2000–2999 range
// (the mariadb CLI then prints "2027 Received malformed packet"), so none is
// used. SQLSTATE class 08 (connection exception) tells drivers and pools
// that the connection is unusable. Backend errors are relayed as they are
// and never pass through here.
const (
	// ErrCodeBackend is the error code of the proxy's errors about its
	// backend connection (unreachable, TLS refused, lost), with SQLSTATE
	// SQLStateBackend: ER_UNKNOWN_ERROR, as no server error says "upstream
	// unreachable", with the connection-exception class.
	ErrCodeBackend  = mysql.ER_UNKNOWN_ERROR
	SQLStateBackend = "08S01"
)

var (
	// errBackendUnreachable: the backend cannot be dialed, refused TLS, or
	// closed before its greeting.
	errBackendUnreachable = func(format string, args ...any) *wire.Error {
		return wire.Errorf(ErrCodeBackend, SQLStateBackend, format, args...)
	}
	// errBackendLost: the backend connection ended in the middle of a
	// command.
	errBackendLost = func(format string, args ...any) *wire.Error {
		return wire.Errorf(ErrCodeBackend, SQLStateBackend, format, args...)
	}
	// errTooManyConns: more connections wait for the handshake than the
	// proxy lets wait.
	errTooManyConns = func(format string, args ...any) *wire.Error {
		return wire.Errorf(mysql.ER_CON_COUNT_ERROR, "08004", format, args...)
	}
	// errHandshake: a handshake the proxy cannot relay.
	errHandshake = func(format string, args ...any) *wire.Error {
		return wire.Errorf(mysql.ER_HANDSHAKE_ERROR, "08S01", format, args...)
	}
)

// sendError writes e as an ERR packet with sequence id seq and flushes.
func sendError(c *wire.Conn, seq byte, e *wire.Error) error {
	if _, err := c.WritePacket(e.Packet(), seq); err != nil {
		return err
	}
	return c.Flush()
}
