package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// lastVersion is the server version of the last backend greeting, which a
// greeting of the proxy's own announces.
var lastVersion atomic.Pointer[string]

// refuseCaps are the capabilities of the proxy's own greeting.
const refuseCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_LONG_FLAG | mysql.CLIENT_CONNECT_WITH_DB |
	mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_SECURE_CONNECTION |
	mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA

// refuseHandshake tells a client why it cannot be served when there is no
// backend greeting to relay (the backend is unreachable): a server that
// refuses a client speaks first, with a greeting, and answers the client's
// handshake response with ERR; a client told anything else first reports a
// protocol error of its own ("malformed packet", "error before TLS") instead
// of the message. So the proxy greets the client itself, with TLS when it
// offers TLS, reads the client's response, and answers it with e.
func (s *session) refuseHandshake(ctx context.Context, e *wire.Error) {
	version := "5.5.5-slotproxy"
	if v := lastVersion.Load(); v != nil {
		version = *v
	}
	caps := uint32(refuseCaps)
	if s.srv.cfg.ClientTLS != nil {
		caps |= mysql.CLIENT_SSL
	}
	scramble := make([]byte, 20)
	_, _ = rand.Read(scramble)
	for i, c := range scramble { // no NUL: the client reads up to one
		scramble[i] = c&0x7f | 1
	}
	g := []byte{10}
	g = append(g, version...)
	g = append(g, 0, 0, 0, 0, 0) // NUL, connection id 0
	g = append(g, scramble[:8]...)
	g = append(g, 0)
	g = binary.LittleEndian.AppendUint16(g, uint16(caps))
	g = append(g, 45) // utf8mb4_general_ci
	g = binary.LittleEndian.AppendUint16(g, mysql.SERVER_STATUS_AUTOCOMMIT)
	g = binary.LittleEndian.AppendUint16(g, uint16(caps>>16))
	g = append(g, 21)
	g = append(g, make([]byte, 10)...)
	g = append(g, scramble[8:]...)
	g = append(g, 0)
	g = append(g, "mysql_native_password\x00"...)
	if _, err := s.client.WritePacket(g, 0); err != nil || s.client.Flush() != nil {
		return
	}
	resp, cseq, err := s.client.ReadPacket(nil, handshakePacketLimit)
	if err != nil {
		return
	}
	if len(resp) >= 4 && binary.LittleEndian.Uint32(resp)&mysql.CLIENT_SSL != 0 && s.srv.cfg.ClientTLS != nil {
		tc := tls.Server(s.client.Detach(), s.srv.cfg.ClientTLS)
		if tc.HandshakeContext(ctx) != nil {
			return
		}
		s.client = wire.NewConn(tc, wire.Options{ReadBuf: clientReadBuf, WriteBuf: clientWriteBuf})
		s.tls = true
		if resp, cseq, err = s.client.ReadPacket(nil, handshakePacketLimit); err != nil {
			return
		}
	}
	clear(resp)
	_ = sendError(s.client, cseq+1, e)
}
