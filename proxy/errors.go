package proxy

import (
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Error codes the proxy itself reports. Backend errors are relayed as they
// are and never pass through here.
const (
	codeCantConnect  = 2003 // CR_CONN_HOST_ERROR: the backend cannot be reached
	codeTooManyConns = mysql.ER_CON_COUNT_ERROR
	codeHandshake    = mysql.ER_HANDSHAKE_ERROR
	codeUnknown      = mysql.ER_UNKNOWN_ERROR
)

// proxyError is an error the client should see as a MySQL ERR packet.
func proxyError(code uint16, format string, args ...any) *mysql.MyError {
	return mysql.NewError(code, "slotproxy: "+fmt.Sprintf(format, args...))
}

// errPacket turns err into the payload of an ERR packet. This is the one
// place where Go errors become MySQL errors; errors that are not a
// *mysql.MyError become ER_UNKNOWN_ERROR with a generic message so internal
// details (addresses aside) do not leak.
func errPacket(err error) []byte {
	var me *mysql.MyError
	if !errors.As(err, &me) {
		me = proxyError(codeUnknown, "internal error")
	}
	state := me.State
	if len(state) != 5 {
		state = mysql.DEFAULT_MYSQL_STATE
	}
	b := make([]byte, 0, 9+len(me.Message))
	b = append(b, 0xff, byte(me.Code), byte(me.Code>>8), '#')
	b = append(b, state...)
	return append(b, me.Message...)
}

// sendError writes err as an ERR packet with sequence id seq and flushes.
func (p *packetConn) sendError(seq byte, err error) error {
	if _, werr := p.writePacket(errPacket(err), seq); werr != nil {
		return werr
	}
	return p.flush()
}
