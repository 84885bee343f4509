package proxy_test

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// rawConn drives the protocol command by command on top of an authenticated
// go-mysql client connection, to exercise commands database/sql never sends.
type rawConn struct {
	t *testing.T
	*client.Conn
	deprecateEOF bool
	tls          bool // the connection is on TLS
}

func dialRaw(t *testing.T, addr string, deprecateEOF bool) *rawConn {
	t.Helper()
	c, err := client.Connect(addr, testdb.User, testdb.Password, testdb.DBName, func(c *client.Conn) error {
		if !deprecateEOF {
			c.UnsetCapability(gomysql.CLIENT_DEPRECATE_EOF)
		}
		// The proxy does not offer CLIENT_QUERY_ATTRIBUTES (MySQL does):
		// without it a direct connection speaks the same COM_STMT_EXECUTE
		// as one through the proxy, which the tests build by hand.
		c.UnsetCapability(gomysql.CLIENT_QUERY_ATTRIBUTES)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return &rawConn{t: t, Conn: c, deprecateEOF: deprecateEOF}
}

// command sends one command packet with sequence id 0.
func (r *rawConn) command(cmd byte, payload ...byte) {
	r.t.Helper()
	r.ResetSequence()
	if err := r.WritePacket(append([]byte{0, 0, 0, 0, cmd}, payload...)); err != nil {
		r.t.Fatal(err)
	}
}

// send writes a continuation packet (sequence id continues).
func (r *rawConn) send(payload []byte) {
	r.t.Helper()
	if err := r.WritePacket(append([]byte{0, 0, 0, 0}, payload...)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) read() []byte {
	r.t.Helper()
	p, err := r.ReadPacket()
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *rawConn) expectOK(what string) []byte {
	r.t.Helper()
	p := r.read()
	if p[0] != 0x00 {
		r.t.Fatalf("%s: got packet %q, want OK", what, p)
	}
	return p
}

// readUntilEOF reads packets up to a terminator (0xfe) and returns how many
// came before it, and the terminator's status flags.
func (r *rawConn) readUntilEOF(what string) (int, uint16) {
	r.t.Helper()
	for n := 0; ; n++ {
		p := r.read()
		if p[0] == 0xff {
			r.t.Fatalf("%s: error %q", what, p)
		}
		if p[0] == 0xfe && len(p) < 0xffffff {
			if r.deprecateEOF {
				res := r.HandleOKPacket(p)
				return n, res.Status
			}
			return n, binary.LittleEndian.Uint16(p[3:])
		}
	}
}

func (r *rawConn) scalar(q string) string {
	r.t.Helper()
	res, err := r.Execute(q)
	if err != nil {
		r.t.Fatalf("%s: %v", q, err)
	}
	s, err := res.GetString(0, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// TestRawCommands covers the commands database/sql does not send, with and
// without CLIENT_DEPRECATE_EOF: ping, init db, statistics, field list,
// server-side cursors with fetch, statement reset and close, long data,
// connection reset and change user.
func TestRawCommands(t *testing.T) {
	p := startProxy(t, nil)
	direct := directDB(t, "")
	mustExec(t, direct, "CREATE TABLE IF NOT EXISTS fields (id INT PRIMARY KEY, a VARCHAR(10), b BLOB)")
	for _, deprecateEOF := range []bool{true, false} {
		t.Run(fmt.Sprintf("deprecateEOF=%v", deprecateEOF), func(t *testing.T) {
			r := dialRaw(t, p.addr, deprecateEOF)

			r.command(gomysql.COM_PING)
			r.expectOK("ping")

			r.command(gomysql.COM_INIT_DB, []byte("mysql")...)
			r.expectOK("init db")
			if got := r.scalar("SELECT DATABASE()"); got != "mysql" {
				t.Fatalf("DATABASE() = %q after COM_INIT_DB", got)
			}
			r.command(gomysql.COM_INIT_DB, []byte(testdb.DBName)...)
			r.expectOK("init db")

			r.command(gomysql.COM_STATISTICS)
			if s := r.read(); !bytes.HasPrefix(s, []byte("Uptime")) {
				t.Fatalf("statistics: %q", s)
			}

			r.command(gomysql.COM_FIELD_LIST, []byte("fields\x00")...)
			if n, _ := r.readUntilEOF("field list"); n != 3 {
				t.Fatalf("field list: %d columns, want 3", n)
			}

			// A read-only cursor over 25 rows, fetched 10 at a time.
			r.command(gomysql.COM_STMT_PREPARE, []byte("SELECT seq FROM "+testdb.Seq(25))...)
			ok := r.expectOK("prepare")
			stmtID := binary.LittleEndian.Uint32(ok[1:])
			columns := binary.LittleEndian.Uint16(ok[5:])
			for range columns {
				r.read()
			}
			if !deprecateEOF && columns > 0 {
				r.read()
			}
			exec := binary.LittleEndian.AppendUint32(nil, stmtID)
			exec = append(exec, 1 /* CURSOR_TYPE_READ_ONLY */, 1, 0, 0, 0)
			r.command(gomysql.COM_STMT_EXECUTE, exec...)
			if cc := r.read(); cc[0] != 1 {
				t.Fatalf("execute: column count packet %q", cc)
			}
			r.read() // column definition
			if !deprecateEOF {
				if _, status := r.readUntilEOF("execute metadata"); status&gomysql.SERVER_STATUS_CURSOR_EXISTS == 0 {
					t.Fatalf("no cursor opened (status %#x)", status)
				}
			} else {
				if _, status := r.readUntilEOF("execute"); status&gomysql.SERVER_STATUS_CURSOR_EXISTS == 0 {
					t.Fatalf("no cursor opened (status %#x)", status)
				}
			}
			total := 0
			for range 10 {
				fetch := binary.LittleEndian.AppendUint32(nil, stmtID)
				fetch = binary.LittleEndian.AppendUint32(fetch, 10)
				r.command(gomysql.COM_STMT_FETCH, fetch...)
				n, status := r.readUntilEOF("fetch")
				total += n
				if status&gomysql.SERVER_STATUS_LAST_ROW_SEND != 0 {
					break
				}
			}
			if total != 25 {
				t.Fatalf("fetched %d rows, want 25", total)
			}
			r.command(gomysql.COM_STMT_RESET, binary.LittleEndian.AppendUint32(nil, stmtID)...)
			r.expectOK("stmt reset")
			r.command(gomysql.COM_STMT_CLOSE, binary.LittleEndian.AppendUint32(nil, stmtID)...)

			// Long data for a parameter, in chunks, then execute.
			r.command(gomysql.COM_STMT_PREPARE, []byte("SELECT CAST(LENGTH(?) AS CHAR)")...)
			ok = r.expectOK("prepare")
			stmtID = binary.LittleEndian.Uint32(ok[1:])
			params, columns := binary.LittleEndian.Uint16(ok[7:]), binary.LittleEndian.Uint16(ok[5:])
			for range params {
				r.read()
			}
			if !deprecateEOF {
				r.read()
			}
			for range columns {
				r.read()
			}
			if !deprecateEOF {
				r.read()
			}
			for range 3 {
				chunk := binary.LittleEndian.AppendUint32(nil, stmtID)
				chunk = append(chunk, 0, 0) // parameter 0
				chunk = append(chunk, bytes.Repeat([]byte("z"), 1000)...)
				r.command(gomysql.COM_STMT_SEND_LONG_DATA, chunk...)
			}
			exec = binary.LittleEndian.AppendUint32(nil, stmtID)
			exec = append(exec, 0, 1, 0, 0, 0, 0 /* null bitmap */, 1 /* new params bound */, gomysql.MYSQL_TYPE_BLOB, 0)
			r.command(gomysql.COM_STMT_EXECUTE, exec...)
			r.read() // column count
			r.read() // column definition
			if !deprecateEOF {
				r.read()
			}
			row := r.read() // 0x00, NULL bitmap, length-prefixed string
			if got := string(row[3 : 3+int(row[2])]); got != "3000" {
				t.Fatalf("LENGTH(long data) = %q, want 3000", got)
			}
			r.readUntilEOF("execute rows")
			r.command(gomysql.COM_STMT_CLOSE, binary.LittleEndian.AppendUint32(nil, stmtID)...)

			// COM_RESET_CONNECTION forgets session state.
			if _, err := r.Execute("SET @v = 5"); err != nil {
				t.Fatal(err)
			}
			r.command(gomysql.COM_RESET_CONNECTION)
			r.expectOK("reset connection")
			if got := r.scalar("SELECT COALESCE(@v, 'unset')"); got != "unset" {
				t.Fatalf("@v = %q after reset", got)
			}

			// COM_CHANGE_USER to each account, with an auth switch relayed:
			// the default plugin's account, then the server's other plugin.
			type account struct{ user, pass, plugin string }
			accounts := []account{{testdb.DriverUser, testdb.DriverPassword, testdb.Shared().DefaultAuthPlugin()}}
			if testdb.Shared().IsMySQL() {
				accounts = append(accounts, account{testdb.Sha2User, testdb.Sha2Password, "caching_sha2_password"})
			} else {
				accounts = append(accounts, account{testdb.EdUser, testdb.EdPassword, "client_ed25519"})
			}
			for _, a := range accounts {
				changeUser(t, r, a.user, a.pass, a.plugin)
				if got := r.scalar("SELECT CURRENT_USER()"); got != a.user+"@%" {
					t.Fatalf("after change user: %q", got)
				}
			}

			r.command(gomysql.COM_PING)
			r.expectOK("ping after everything")
			r.command(gomysql.COM_QUIT)
			if _, err := r.ReadPacket(); err == nil {
				t.Fatal("connection still open after COM_QUIT")
			}
		})
	}
}

// changeUser sends COM_CHANGE_USER naming a plugin the server will not use,
// so the server answers with an auth switch request carrying a fresh
// scramble, which is answered for the account's real plugin (for
// caching_sha2_password, with fast or full authentication).
func changeUser(t *testing.T, r *rawConn, user, pass, plugin string) {
	t.Helper()
	payload := append([]byte(user), 0)
	payload = append(payload, 0)       // empty auth response
	payload = append(payload, 0)       // no default schema
	payload = append(payload, 0x2d, 0) // utf8mb4_general_ci
	payload = append(payload, "dummy_plugin\x00"...)
	payload = append(payload, 0) // connection attributes: none (MariaDB wants the field)
	r.command(gomysql.COM_CHANGE_USER, payload...)
	sw := r.read()
	if sw[0] != 0xfe {
		t.Fatalf("change user: got %q, want an auth switch request", sw)
	}
	name, data, _ := bytes.Cut(sw[1:], []byte{0})
	if string(name) != plugin {
		t.Fatalf("auth switch to %q, want %q", name, plugin)
	}
	scramble := switchScramble(plugin, data)
	resp, err := authResponse(plugin, scramble, pass)
	if err != nil {
		t.Fatal(err)
	}
	r.send(resp)
	if plugin == "caching_sha2_password" {
		// 0x01 0x03: fast authentication (the server has the account
		// cached); 0x01 0x04: full authentication, with the password in
		// clear over TLS, else encrypted with the server's RSA key.
		switch p := r.read(); {
		case len(p) == 2 && p[0] == 1 && p[1] == 3:
		case len(p) == 2 && p[0] == 1 && p[1] == 4 && r.tls:
			r.send(append([]byte(pass), 0))
		case len(p) == 2 && p[0] == 1 && p[1] == 4:
			r.send([]byte{2})
			key := r.read()
			block, _ := pem.Decode(key[1:])
			if key[0] != 1 || block == nil {
				t.Fatalf("change user: got %q, want the server's public key", key)
			}
			pub, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := gomysql.EncryptPassword(pass, scramble, pub.(*rsa.PublicKey))
			if err != nil {
				t.Fatal(err)
			}
			r.send(enc)
		default:
			t.Fatalf("change user: got %q after the scramble", p)
		}
	}
	r.expectOK("change user to " + user)
}
