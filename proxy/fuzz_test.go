package proxy

import (
	"encoding/binary"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Fuzz targets for everything that decodes bytes from a peer. Seeds live in
// testdata/fuzz; `make test` runs each target for a few seconds.

func FuzzParseGreeting(f *testing.F) {
	f.Add([]byte("\x0a5.5.5-10.11.19-MariaDB\x00\x05\x00\x00\x00abcdefgh\x00\xfe\xf7\x2d\x02\x00\xff\x81\x15\x00\x00\x00\x00\x00\x00\x1d\x00\x00\x00ijklmnopqrst\x00mysql_native_password\x00"))
	f.Add([]byte("\x0a8.4.0\x00\x01\x00\x00\x00abcdefgh\x00\xff\xff\xff\x02\x00\xff\xdf\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00ijklmnopqrst\x00caching_sha2_password\x00"))
	f.Add([]byte{10})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseGreeting(b)
		if err != nil {
			return
		}
		g.setCaps(g.caps & passCaps)
		if _, err := parseGreeting(g.raw); err != nil {
			t.Fatalf("a greeting the proxy rewrote no longer parses: %v", err)
		}
	})
}

func FuzzParseHandshakeResponse(f *testing.F) {
	resp := binary.LittleEndian.AppendUint32(nil, mysql.CLIENT_PROTOCOL_41|mysql.CLIENT_SECURE_CONNECTION|mysql.CLIENT_PLUGIN_AUTH|mysql.CLIENT_CONNECT_WITH_DB)
	resp = append(resp, make([]byte, 28)...)
	resp = append(resp, "user\x00\x14abcdefghijklmnopqrst"+"db\x00mysql_native_password\x00"...)
	f.Add(resp)
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseHandshakeResponse(b)
	})
}
