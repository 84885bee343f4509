package clients

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// wireTap is a TCP relay between MySQL clients and a server that records
// the statements the clients send: COM_QUERY and COM_STMT_PREPARE texts,
// and COM_STMT_EXECUTE with the statement's text and the parameters' types
// and values. It frames both directions (the server's responses with
// internal/wire's response grammar, to learn statement ids and parameter
// counts) and relays every packet unchanged.
//
// It understands plaintext, uncompressed connections only, which is what
// the proxy offers clients (no ClientTLS) and uses towards the server in
// these tests (no BackendTLS).
type wireTap struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	events []tapEvent
	nconns int
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// tapEvent is one recorded statement.
type tapEvent struct {
	Conn    int    // connection number, from 1 in accept order
	Command string // "query", "prepare" or "execute"
	SQL     string // the text; for "execute" the prepared statement's text
	Params  []tapParam
	// Unknown: an execute of a statement whose prepare the tap did not see
	// answered, or whose parameters did not decode.
	Unknown bool
	// ErrCode is the error the server answered with (0: success).
	ErrCode uint16
	// NoRow: the server's OK said the statement matched no row (affected
	// rows 0 and "Rows matched: 0", or no info string at all).
	NoRow bool
}

// tapParam is one parameter of an execute as sent: the binary protocol
// type (e.g. "DOUBLE", "LONGLONG UNSIGNED", "VAR_STRING") and the value.
type tapParam struct {
	Type, Value string
}

// startTap listens on a loopback port and relays each connection to target
// until the test ends.
func startTap(t testing.TB, target string) *wireTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &wireTap{target: target, ln: ln, conns: map[net.Conn]bool{}}
	tp.wg.Add(1)
	go tp.accept()
	t.Cleanup(tp.close)
	return tp
}

func (tp *wireTap) addr() string { return tp.ln.Addr().String() }

func (tp *wireTap) accept() {
	defer tp.wg.Done()
	for {
		c, err := tp.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", tp.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		tp.mu.Lock()
		if tp.conns == nil { // closed meanwhile
			tp.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		tp.nconns++
		tp.conns[c], tp.conns[s] = true, true
		tc := &tapConn{tap: tp, id: tp.nconns, client: c, server: s,
			queue: make(chan tapPending, 1024), stmts: map[uint32]*tapStmt{}}
		tp.mu.Unlock()
		tp.wg.Add(2)
		go tc.clientToServer()
		go tc.serverToClient()
	}
}

// close stops accepting, closes every relayed connection and waits for the
// relay goroutines.
func (tp *wireTap) close() {
	tp.ln.Close()
	tp.mu.Lock()
	for c := range tp.conns {
		c.Close()
	}
	tp.conns = nil
	tp.mu.Unlock()
	tp.wg.Wait()
}

// Events returns a copy of what was recorded so far.
func (tp *wireTap) Events() []tapEvent {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make([]tapEvent, len(tp.events))
	copy(out, tp.events)
	return out
}

// record appends ev and returns its index.
func (tp *wireTap) record(ev tapEvent) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.events = append(tp.events, ev)
	return len(tp.events) - 1
}

func (tp *wireTap) setNoRow(idx int) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.events[idx].NoRow = true
}

func (tp *wireTap) setErr(idx int, code uint16) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.events[idx].ErrCode = code
}

// tapConn is one relayed connection.
type tapConn struct {
	tap            *wireTap
	id             int
	client, server net.Conn
	// deprecateEOF is set by clientToServer from the handshake response,
	// before the first command is queued (the queue orders it for
	// serverToClient).
	deprecateEOF bool
	queue        chan tapPending

	mu    sync.Mutex
	stmts map[uint32]*tapStmt // prepared statements, by id
}

// tapPending is a command waiting for its response.
type tapPending struct {
	kind wire.Kind
	ev   int    // event index, or -1
	sql  string // COM_STMT_PREPARE's text
}

// tapStmt is a prepared statement the server acknowledged.
type tapStmt struct {
	sql    string
	params int
	types  []byte // last bound types (client side only)
}

const tapPacketLimit = 1 << 30

func (tc *tapConn) stop() {
	tc.client.Close()
	tc.server.Close()
}

// clientToServer relays the client's packets, recording commands (the
// packets with sequence id 0) before they reach the server.
func (tc *tapConn) clientToServer() {
	defer tc.tap.wg.Done()
	defer tc.stop()
	defer close(tc.queue)
	src := wire.NewConn(tc.client, wire.Options{})
	dst := wire.NewConn(tc.server, wire.Options{})
	handshake := true
	for {
		h, err := src.ReadHeader()
		if err != nil {
			return
		}
		payload, _, err := src.ReadRest(nil, h, tapPacketLimit)
		if err != nil {
			return
		}
		switch {
		case h.Seq == 1 && handshake && len(payload) >= 4:
			// The handshake response (protocol 41) starts with the
			// client's capability flags.
			caps := binary.LittleEndian.Uint32(payload)
			tc.deprecateEOF = caps&gomysql.CLIENT_DEPRECATE_EOF != 0
			handshake = false
		case h.Seq == 0 && len(payload) > 0:
			tc.command(payload)
		}
		if _, err := dst.WritePacket(payload, h.Seq); err != nil {
			return
		}
		if err := dst.Flush(); err != nil {
			return
		}
	}
}

// command records one command and queues what its response looks like.
func (tc *tapConn) command(payload []byte) {
	kind := wire.KindOf(payload[0])
	p := tapPending{kind: kind, ev: -1}
	switch payload[0] {
	case gomysql.COM_QUERY:
		p.ev = tc.tap.record(tapEvent{Conn: tc.id, Command: "query", SQL: string(payload[1:])})
	case gomysql.COM_STMT_PREPARE:
		p.sql = string(payload[1:])
		p.ev = tc.tap.record(tapEvent{Conn: tc.id, Command: "prepare", SQL: p.sql})
	case gomysql.COM_STMT_EXECUTE:
		p.ev = tc.tap.record(tc.execute(payload))
	}
	if kind != wire.None {
		tc.queue <- p
	}
}

// execute decodes a COM_STMT_EXECUTE.
func (tc *tapConn) execute(payload []byte) tapEvent {
	ev := tapEvent{Conn: tc.id, Command: "execute", Unknown: true}
	if len(payload) < 10 {
		return ev
	}
	tc.mu.Lock()
	st := tc.stmts[binary.LittleEndian.Uint32(payload[1:])]
	tc.mu.Unlock()
	if st == nil {
		return ev
	}
	ev.SQL = st.sql
	params, types, err := decodeExecuteParams(payload, st.params, st.types)
	if err != nil {
		return ev
	}
	st.types = types
	ev.Params, ev.Unknown = params, false
	return ev
}

// serverToClient relays the server's packets: a response when a command
// is waiting for one, otherwise (the handshake) packet by packet.
func (tc *tapConn) serverToClient() {
	defer tc.tap.wg.Done()
	defer tc.stop()
	src := wire.NewConn(tc.server, wire.Options{})
	dst := wire.NewConn(tc.client, wire.Options{})
	relayOne := func() error {
		h, err := src.ReadHeader()
		if err != nil {
			return err
		}
		payload, _, err := src.ReadRest(nil, h, tapPacketLimit)
		if err != nil {
			return err
		}
		if _, err := dst.WritePacket(payload, h.Seq); err != nil {
			return err
		}
		return dst.Flush()
	}
	for {
		// The response's command was queued before the server could see
		// it, so once the server has sent something it is queued.
		if _, err := src.PeekHeader(); err != nil {
			return
		}
		var p tapPending
		select {
		case q, ok := <-tc.queue:
			if !ok {
				return
			}
			p = q
		default:
			if relayOne() != nil {
				return
			}
			continue
		}
		switch p.kind {
		case wire.Auth:
			// COM_CHANGE_USER: relay until the exchange ends with OK or ERR.
			for {
				b, err := src.Peek(5)
				if err != nil {
					return
				}
				first := b[4]
				if relayOne() != nil {
					return
				}
				if first == 0x00 || first == 0xff {
					break
				}
			}
		case wire.Stream:
			return // replication: not for this tap
		default:
			sink := &tapSink{dst: dst, conn: tc, sql: p.sql}
			res, err := wire.Reader{Src: src, DeprecateEOF: tc.deprecateEOF}.Read(p.kind, sink)
			if err != nil || dst.Flush() != nil {
				return
			}
			if p.ev >= 0 && res.ErrCode != 0 {
				tc.tap.setErr(p.ev, res.ErrCode)
			}
			if p.ev >= 0 && sink.noRow {
				tc.tap.setNoRow(p.ev)
			}
		}
	}
}

// tapSink relays a response packet by packet, keeping the sequence ids,
// and registers prepared statements as their OK passes.
type tapSink struct {
	dst   *wire.Conn
	conn  *tapConn
	sql   string
	noRow bool // the final OK matched no row
}

func (s *tapSink) Wait() error { return s.dst.Flush() }

func (s *tapSink) Take(src *wire.Conn, p *wire.Packet) error {
	payload, _, err := src.ReadRest(nil, p.Header, tapPacketLimit)
	if err != nil {
		return err
	}
	if p.Role == wire.RoleOK && p.Last {
		if ok, err := wire.ParseOK(payload); err == nil && ok.Affected == 0 &&
			(len(ok.Info) == 0 || strings.HasPrefix(string(ok.Info), "Rows matched: 0 ")) {
			s.noRow = true
		}
	}
	if p.Role == wire.RolePrepareOK && len(payload) >= 9 {
		id := binary.LittleEndian.Uint32(payload[1:])
		params := int(binary.LittleEndian.Uint16(payload[7:]))
		s.conn.mu.Lock()
		s.conn.stmts[id] = &tapStmt{sql: s.sql, params: params}
		s.conn.mu.Unlock()
	}
	_, err = s.dst.WritePacket(payload, p.Header.Seq)
	return err
}

// tapTypeNames names the binary protocol's parameter types.
var tapTypeNames = map[byte]string{
	gomysql.MYSQL_TYPE_DECIMAL: "DECIMAL", gomysql.MYSQL_TYPE_TINY: "TINY", gomysql.MYSQL_TYPE_SHORT: "SHORT",
	gomysql.MYSQL_TYPE_LONG: "LONG", gomysql.MYSQL_TYPE_FLOAT: "FLOAT", gomysql.MYSQL_TYPE_DOUBLE: "DOUBLE",
	gomysql.MYSQL_TYPE_NULL: "NULL", gomysql.MYSQL_TYPE_TIMESTAMP: "TIMESTAMP", gomysql.MYSQL_TYPE_LONGLONG: "LONGLONG",
	gomysql.MYSQL_TYPE_INT24: "INT24", gomysql.MYSQL_TYPE_DATE: "DATE", gomysql.MYSQL_TYPE_TIME: "TIME",
	gomysql.MYSQL_TYPE_DATETIME: "DATETIME", gomysql.MYSQL_TYPE_YEAR: "YEAR", gomysql.MYSQL_TYPE_VARCHAR: "VARCHAR",
	gomysql.MYSQL_TYPE_BIT: "BIT", gomysql.MYSQL_TYPE_JSON: "JSON", gomysql.MYSQL_TYPE_NEWDECIMAL: "NEWDECIMAL",
	gomysql.MYSQL_TYPE_ENUM: "ENUM", gomysql.MYSQL_TYPE_SET: "SET", gomysql.MYSQL_TYPE_TINY_BLOB: "TINY_BLOB",
	gomysql.MYSQL_TYPE_MEDIUM_BLOB: "MEDIUM_BLOB", gomysql.MYSQL_TYPE_LONG_BLOB: "LONG_BLOB",
	gomysql.MYSQL_TYPE_BLOB: "BLOB", gomysql.MYSQL_TYPE_VAR_STRING: "VAR_STRING",
	gomysql.MYSQL_TYPE_STRING: "STRING", gomysql.MYSQL_TYPE_GEOMETRY: "GEOMETRY",
}

var errTapDecode = errors.New("undecodable COM_STMT_EXECUTE")

// decodeExecuteParams decodes the n parameters of a COM_STMT_EXECUTE
// payload (command byte included); prev are the types bound before, for an
// execute that does not send them. It returns the parameters and the types
// now bound.
func decodeExecuteParams(p []byte, n int, prev []byte) ([]tapParam, []byte, error) {
	if n == 0 {
		return nil, prev, nil
	}
	pos := 10 // command, statement id, flags, iteration count
	nb := (n + 7) / 8
	if len(p) < pos+nb+1 {
		return nil, prev, errTapDecode
	}
	nulls := p[pos : pos+nb]
	pos += nb
	bound := p[pos]
	pos++
	types := prev
	if bound == 1 {
		if len(p) < pos+2*n {
			return nil, prev, errTapDecode
		}
		types = append([]byte(nil), p[pos:pos+2*n]...)
		pos += 2 * n
	}
	if len(types) != 2*n {
		return nil, prev, errTapDecode
	}
	out := make([]tapParam, n)
	for i := range n {
		t, unsigned := types[2*i], types[2*i+1]&0x80 != 0
		name, ok := tapTypeNames[t]
		if !ok {
			name = "TYPE_" + strconv.Itoa(int(t))
		}
		if unsigned {
			name += " UNSIGNED"
		}
		out[i].Type = name
		if nulls[i/8]&(1<<(i%8)) != 0 {
			out[i].Value = "NULL"
			continue
		}
		v, size, err := decodeBinaryValue(t, unsigned, p[pos:])
		if err != nil {
			return nil, prev, err
		}
		out[i].Value = v
		pos += size
	}
	return out, types, nil
}

// decodeBinaryValue decodes one binary-protocol value of type t at the
// start of b as SQL-like text and returns its encoded size.
func decodeBinaryValue(t byte, unsigned bool, b []byte) (string, int, error) {
	need := func(n int) error {
		if len(b) < n {
			return errTapDecode
		}
		return nil
	}
	intText := func(u uint64, bits int) string {
		if unsigned {
			return strconv.FormatUint(u, 10)
		}
		shift := 64 - bits
		return strconv.FormatInt(int64(u<<shift)>>shift, 10)
	}
	switch t {
	case gomysql.MYSQL_TYPE_NULL:
		return "NULL", 0, nil
	case gomysql.MYSQL_TYPE_TINY:
		if err := need(1); err != nil {
			return "", 0, err
		}
		return intText(uint64(b[0]), 8), 1, nil
	case gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_YEAR:
		if err := need(2); err != nil {
			return "", 0, err
		}
		return intText(uint64(binary.LittleEndian.Uint16(b)), 16), 2, nil
	case gomysql.MYSQL_TYPE_LONG, gomysql.MYSQL_TYPE_INT24:
		if err := need(4); err != nil {
			return "", 0, err
		}
		return intText(uint64(binary.LittleEndian.Uint32(b)), 32), 4, nil
	case gomysql.MYSQL_TYPE_LONGLONG:
		if err := need(8); err != nil {
			return "", 0, err
		}
		return intText(binary.LittleEndian.Uint64(b), 64), 8, nil
	case gomysql.MYSQL_TYPE_FLOAT:
		if err := need(4); err != nil {
			return "", 0, err
		}
		return strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 'g', -1, 32), 4, nil
	case gomysql.MYSQL_TYPE_DOUBLE:
		if err := need(8); err != nil {
			return "", 0, err
		}
		return strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)), 'g', -1, 64), 8, nil
	case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_TIMESTAMP:
		if err := need(1); err != nil {
			return "", 0, err
		}
		n := int(b[0])
		if err := need(1 + n); err != nil {
			return "", 0, err
		}
		v := b[1 : 1+n]
		var y, mo, d, h, mi, s, us int
		if n >= 4 {
			y, mo, d = int(binary.LittleEndian.Uint16(v)), int(v[2]), int(v[3])
		}
		if n >= 7 {
			h, mi, s = int(v[4]), int(v[5]), int(v[6])
		}
		if n >= 11 {
			us = int(binary.LittleEndian.Uint32(v[7:]))
		}
		text := fmt.Sprintf("'%04d-%02d-%02d %02d:%02d:%02d", y, mo, d, h, mi, s)
		if us != 0 {
			text += fmt.Sprintf(".%06d", us)
		}
		return text + "'", 1 + n, nil
	case gomysql.MYSQL_TYPE_TIME:
		if err := need(1); err != nil {
			return "", 0, err
		}
		n := int(b[0])
		if err := need(1 + n); err != nil {
			return "", 0, err
		}
		return fmt.Sprintf("TIME(%x)", b[1:1+n]), 1 + n, nil
	}
	s, n, ok := wire.LenEncString(b)
	if !ok {
		return "", 0, errTapDecode
	}
	return sqlQuote(string(s)), n, nil
}

// sqlQuote quotes s as a SQL string literal.
func sqlQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
