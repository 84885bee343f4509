package proxy

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// okPacket is a decoded OK packet. rest is everything after the warnings
// count (info string, session state), as sent.
type okPacket struct {
	header   byte
	affected uint64
	insertID uint64
	status   uint16
	warnings uint16
	rest     []byte
}

func parseOK(p []byte) (okPacket, error) {
	var ok okPacket
	if len(p) < 1 {
		return ok, fmt.Errorf("%w: empty OK packet", errMalformed)
	}
	ok.header = p[0]
	pos := 1
	var n int
	var good bool
	if ok.affected, n, good = lenEnc(p[pos:]); !good {
		return ok, fmt.Errorf("%w: OK packet affected rows", errMalformed)
	}
	pos += n
	if ok.insertID, n, good = lenEnc(p[pos:]); !good {
		return ok, fmt.Errorf("%w: OK packet insert id", errMalformed)
	}
	pos += n
	if len(p) < pos+4 {
		return ok, fmt.Errorf("%w: OK packet too short", errMalformed)
	}
	ok.status = binary.LittleEndian.Uint16(p[pos:])
	ok.warnings = binary.LittleEndian.Uint16(p[pos+2:])
	ok.rest = p[pos+4:]
	return ok, nil
}

// build encodes the OK packet. When info is non-nil it replaces the info
// string (session state, if any, is kept).
func (ok okPacket) build(caps uint32, info *string) []byte {
	b := make([]byte, 0, 16+len(ok.rest)+64)
	b = append(b, ok.header)
	b = mysql.AppendLengthEncodedInteger(b, ok.affected)
	b = mysql.AppendLengthEncodedInteger(b, ok.insertID)
	b = binary.LittleEndian.AppendUint16(b, ok.status)
	b = binary.LittleEndian.AppendUint16(b, ok.warnings)
	if info == nil {
		return append(b, ok.rest...)
	}
	if caps&mysql.CLIENT_SESSION_TRACK == 0 {
		return append(b, *info...)
	}
	// Info is length-encoded, session state follows when flagged.
	var state []byte
	if l, n, good := lenEnc(ok.rest); good && l <= uint64(len(ok.rest)-n) {
		state = ok.rest[n+int(l):]
	}
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(*info)))
	b = append(b, *info...)
	return append(b, state...)
}

// updateInfo is the info string MySQL and MariaDB send for UPDATE.
func updateInfo(matched, changed uint64, warnings uint16) string {
	return fmt.Sprintf("Rows matched: %d  Changed: %d  Warnings: %d", matched, changed, warnings)
}
