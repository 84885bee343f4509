package clients

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// Pipelining: how many commands TestRawPipeline writes before reading any
// response, and how long the whole exchange may take.
const (
	pipelineCommands = 10000
	pipelineLimit    = 60 * time.Second
	pipelineStall    = 15 * time.Second
)

// TestRawPipeline writes 10,000 COM_QUERY and COM_STMT_EXECUTE packets on
// one connection before reading any response, as a pipelining driver
// does: runs of 200 pass-through commands (prepared inserts and reads),
// and rewritten increments (text and prepared, of existing and missing
// keys, of one and two counters), rewritten reads, and pass-through reads,
// inserts and errors, mixed. Then it reads all responses in order. The
// same is done directly on the server; the rendered responses (OK: affected
// rows, insert id, warnings, info; ERR: code, SQLSTATE, message; result
// sets: column names and raw rows) must be equal, and so must the totals
// read afterwards. Status flags and column definitions are left to the
// client tests. A proxy that stops reading or answering fails the test
// after pipelineLimit, naming the first response that did not come.
func TestRawPipeline(t *testing.T) {
	t.Parallel()
	comparePipelines(t, newEnv(t))
}

// comparePipelines runs the pipeline directly and through e's proxy and
// compares the responses.
func comparePipelines(t *testing.T, e *env) {
	t.Helper()
	dt, pt := e.targets()
	var direct, proxied pipelineRun
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); direct = runPipeline(dt) }()
	go func() { defer wg.Done(); proxied = runPipeline(pt) }()
	wg.Wait()
	if direct.err != nil {
		t.Fatalf("the pipeline directly against the server failed (the test is broken, not the proxy): %v", direct.err)
	}
	if proxied.err != nil {
		t.Errorf("the pipeline through the proxy failed: %v", proxied.err)
	}
	wantLines := direct.lines
	what := "pipelined responses differ through the proxy"
	if proxied.err != nil {
		// Compare what did arrive.
		wantLines = wantLines[:min(len(wantLines), len(proxied.lines))]
		what = fmt.Sprintf("the %d pipelined responses that arrived through the proxy differ", len(proxied.lines))
	}
	want, got := strings.Join(wantLines, "\n"), strings.Join(proxied.lines, "\n")
	if got != want {
		t.Errorf("%s (-direct +proxy):\n%s", what, lineDiff(want, got))
	}
	t.Logf("%d pipelined commands: directly %s, through the proxy %s", pipelineCommands,
		direct.took.Round(time.Millisecond), proxied.took.Round(time.Millisecond))
}

// pipelineRun is the outcome of runPipeline on one target.
type pipelineRun struct {
	lines []string // one per response, then the totals
	err   error
	took  time.Duration
}

// rawConn frames MySQL packets on a connection whose handshake is done.
type rawConn struct {
	conn         net.Conn
	r            *bufio.Reader
	w            *bufio.Writer
	deprecateEOF bool
	deadline     time.Time // of the whole exchange
}

// writeCommand writes one command packet (sequence id 0), buffered.
func (c *rawConn) writeCommand(payload []byte) error {
	var h [4]byte
	if len(payload) >= 1<<24-1 {
		return errors.New("command too large for one packet")
	}
	h[0], h[1], h[2] = byte(len(payload)), byte(len(payload)>>8), byte(len(payload)>>16)
	if _, err := c.w.Write(h[:]); err != nil {
		return err
	}
	_, err := c.w.Write(payload)
	return err
}

// read returns the next packet's payload.
func (c *rawConn) read() ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return nil, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	p := make([]byte, n)
	if _, err := io.ReadFull(c.r, p); err != nil {
		return nil, err
	}
	if n == 1<<24-1 {
		return nil, errors.New("multi-packet payloads are not expected here")
	}
	return p, nil
}

// lenenc decodes a length-encoded integer at b[0:].
func lenenc(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	switch b[0] {
	case 0xfc:
		return uint64(binary.LittleEndian.Uint16(b[1:3])), 3
	case 0xfd:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4
	case 0xfe:
		return binary.LittleEndian.Uint64(b[1:9]), 9
	default:
		return uint64(b[0]), 1
	}
}

// isEOF reports whether p ends a row or column sequence (an EOF packet,
// or an OK packet with the 0xfe header under CLIENT_DEPRECATE_EOF).
func isEOF(p []byte) bool { return len(p) > 0 && p[0] == 0xfe && len(p) < 0xffffff }

// renderOK renders an OK packet: affected rows, insert id, warnings, info.
func renderOK(p []byte) string {
	i := 1
	affected, n := lenenc(p[i:])
	i += n
	insertID, n := lenenc(p[i:])
	i += n
	warnings := binary.LittleEndian.Uint16(p[i+2 : i+4])
	return fmt.Sprintf("ok affected=%d insert_id=%d warnings=%d info=%q", affected, insertID, warnings, p[i+4:])
}

// renderErr renders an ERR packet.
func renderErr(p []byte) string {
	code := binary.LittleEndian.Uint16(p[1:3])
	if len(p) > 9 && p[3] == '#' {
		return fmt.Sprintf("error %d %s %s", code, p[4:9], p[9:])
	}
	return fmt.Sprintf("error %d %s", code, p[3:])
}

// columnName extracts the name from a column definition packet.
func columnName(p []byte) string {
	i := 0
	for range 4 { // catalog, schema, table, org_table
		l, n := lenenc(p[i:])
		i += n + int(l)
	}
	l, n := lenenc(p[i:])
	return string(p[i+n : i+n+int(l)])
}

// readResponse reads one command's response and renders it on one line.
func (c *rawConn) readResponse() (string, error) {
	p, err := c.read()
	if err != nil {
		return "", err
	}
	switch {
	case len(p) == 0:
		return "", errors.New("empty packet")
	case p[0] == 0x00:
		return renderOK(p), nil
	case p[0] == 0xff:
		return renderErr(p), nil
	}
	cols, _ := lenenc(p)
	var b strings.Builder
	b.WriteString("rows [")
	for i := range cols {
		col, err := c.read()
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(columnName(col))
	}
	b.WriteString("]")
	if !c.deprecateEOF {
		if _, err := c.read(); err != nil {
			return "", err
		}
	}
	for {
		row, err := c.read()
		if err != nil {
			return "", err
		}
		if isEOF(row) {
			return b.String(), nil
		}
		if row[0] == 0xff {
			return b.String() + " " + renderErr(row), nil
		}
		fmt.Fprintf(&b, " %q", row)
	}
}

// prepare prepares query synchronously and returns its statement id.
func (c *rawConn) prepare(query string) (uint32, error) {
	if err := c.writeCommand(append([]byte{gomysql.COM_STMT_PREPARE}, query...)); err != nil {
		return 0, err
	}
	if err := c.w.Flush(); err != nil {
		return 0, err
	}
	p, err := c.read()
	if err != nil {
		return 0, err
	}
	if p[0] != 0x00 || len(p) < 12 {
		return 0, fmt.Errorf("prepare %q: %s", query, renderErr(p))
	}
	id := binary.LittleEndian.Uint32(p[1:5])
	cols, params := int(binary.LittleEndian.Uint16(p[5:7])), int(binary.LittleEndian.Uint16(p[7:9]))
	for _, n := range []int{params, cols} {
		if n == 0 {
			continue
		}
		if !c.deprecateEOF {
			n++
		}
		for range n {
			if _, err := c.read(); err != nil {
				return 0, err
			}
		}
	}
	return id, nil
}

// executePacket is a COM_STMT_EXECUTE of statement id with BIGINT
// parameters, types always sent.
func executePacket(id uint32, args ...int64) []byte {
	p := []byte{gomysql.COM_STMT_EXECUTE}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = append(p, 0)                                // no cursor
	p = binary.LittleEndian.AppendUint32(p, 1)      // iteration count
	p = append(p, make([]byte, (len(args)+7)/8)...) // NULL bitmap: none
	p = append(p, 1)                                // new params bound
	for range args {
		p = append(p, gomysql.MYSQL_TYPE_LONGLONG, 0)
	}
	for _, a := range args {
		p = binary.LittleEndian.AppendUint64(p, uint64(a))
	}
	return p
}

// dialPipeline connects to tg with large socket buffers, so that the
// responses to every pipelined command fit in the kernel while the test
// is still writing: a real server deadlocks otherwise, whatever the proxy
// does.
func dialPipeline(tg target) (*rawConn, error) {
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 20)
			_ = tc.SetWriteBuffer(4 << 20)
		}
		return conn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The packets are built without query attributes, which the proxy does
	// not offer and MySQL would expect when agreed.
	noAttrs := func(c *client.Conn) error { c.UnsetCapability(gomysql.CLIENT_QUERY_ATTRIBUTES); return nil }
	c, err := client.ConnectWithDialer(ctx, "tcp", net.JoinHostPort(tg.host, tg.port), clientUser, clientPassword, tg.db, dialer, noAttrs)
	if err != nil {
		return nil, fmt.Errorf("connect to the %s target: %w", tg.name, err)
	}
	// From here on, packets are framed by rawConn on the bare connection:
	// nothing is pending after the handshake.
	nc := c.Conn.Conn
	return &rawConn{
		conn: nc,
		r:    bufio.NewReaderSize(nc, 64<<10),
		w:    bufio.NewWriterSize(nc, 64<<10),
		// go-mysql always asks for CLIENT_DEPRECATE_EOF; CapabilityString
		// names the server's capabilities, so this is what was agreed.
		deprecateEOF: slices.Contains(strings.Split(c.CapabilityString(), "|"), "CLIENT_DEPRECATE_EOF"),
	}, nil
}

// runPipeline runs the pipelined workload against tg.
func runPipeline(tg target) (run pipelineRun) {
	start := time.Now()
	defer func() { run.took = time.Since(start) }()
	c, err := dialPipeline(tg)
	if err != nil {
		run.err = err
		return run
	}
	defer c.conn.Close()
	deadline := time.Now().Add(pipelineLimit)
	c.deadline = deadline
	if err := c.conn.SetDeadline(deadline); err != nil {
		run.err = err
		return run
	}
	inc, err := c.prepare("UPDATE repos SET downloads = downloads + ? WHERE id = ?")
	if err == nil {
		var read, insert uint32
		if read, err = c.prepare("SELECT downloads, stars FROM repos WHERE id = ?"); err == nil {
			if insert, err = c.prepare("INSERT INTO events (repo_id, kind) VALUES (?, 'pipelined')"); err == nil {
				run.lines, run.err = pipeline(c, inc, read, insert)
			}
		}
	}
	if err != nil {
		run.err = fmt.Errorf("prepare on the %s target: %w", tg.name, err)
	}
	var ne net.Error
	if errors.As(run.err, &ne) && ne.Timeout() || errors.Is(run.err, os.ErrDeadlineExceeded) {
		run.err = fmt.Errorf("%w: no response within %s (or the whole exchange took over %s): the %s target hangs with pipelined commands in flight",
			run.err, pipelineStall, pipelineLimit, tg.name)
	}
	return run
}

// pipeline writes every command, then reads every response, then the
// totals.
func pipeline(c *rawConn, inc, read, insert uint32) ([]string, error) {
	what := make([]string, 0, pipelineCommands)
	for i := range pipelineCommands {
		key := int64(1 + i%4)
		var p []byte
		// Every 1,000 commands start with 200 that pass through (as a
		// batch of inserts would); the rest mix rewritten statements in.
		if i%1000 < 200 {
			if i%2 == 0 {
				p = executePacket(insert, key)
			} else {
				p = append([]byte{gomysql.COM_QUERY}, fmt.Sprintf("SELECT id, name FROM users WHERE id <= %d ORDER BY id", 1+i%3)...)
			}
			what = append(what, fmt.Sprintf("%d %q", i, p))
			if err := c.writeCommand(p); err != nil {
				return nil, fmt.Errorf("writing command %d of %d: %w", i+1, pipelineCommands, err)
			}
			continue
		}
		switch i % 8 {
		case 0:
			p = append([]byte{gomysql.COM_QUERY}, fmt.Sprintf("UPDATE repos SET downloads = downloads + 1 WHERE id = %d", key)...)
		case 1:
			p = executePacket(inc, 2, key)
		case 2:
			p = append([]byte{gomysql.COM_QUERY}, fmt.Sprintf("SELECT name FROM users WHERE id = %d", 1+i%3)...)
		case 3:
			p = executePacket(insert, key)
		case 4:
			p = executePacket(read, key)
		case 5:
			p = executePacket(inc, 1, 999) // no such row: 0 rows
		case 6:
			p = append([]byte{gomysql.COM_QUERY}, "UPDATE repos SET stars = stars + 1 WHERE id = 998"...)
		case 7:
			if i%100 == 7 {
				p = append([]byte{gomysql.COM_QUERY}, "SELECT nope FROM users"...)
			} else {
				p = append([]byte{gomysql.COM_QUERY}, fmt.Sprintf("UPDATE repos SET downloads = downloads + 1, stars = stars + 1 WHERE id = %d", key)...)
			}
		}
		what = append(what, fmt.Sprintf("%d %q", i, p))
		if err := c.writeCommand(p); err != nil {
			return nil, fmt.Errorf("writing command %d of %d: %w", i+1, pipelineCommands, err)
		}
	}
	if err := c.w.Flush(); err != nil {
		return nil, fmt.Errorf("writing %d pipelined commands: %w", pipelineCommands, err)
	}
	lines := make([]string, 0, pipelineCommands+2)
	for i := range pipelineCommands {
		// A response that is pipelineStall late is a hang; no need to
		// wait for pipelineLimit.
		next := time.Now().Add(pipelineStall)
		if next.After(c.deadline) {
			next = c.deadline
		}
		if err := c.conn.SetReadDeadline(next); err != nil {
			return lines, err
		}
		line, err := c.readResponse()
		if err != nil {
			return lines, fmt.Errorf("reading the response to command %d of %d (%s): %w", i+1, pipelineCommands, what[i], err)
		}
		lines = append(lines, fmt.Sprintf("%d %s", i, line))
	}
	for _, q := range []string{"SELECT id, downloads, stars FROM repos ORDER BY id", "SELECT COUNT(*), SUM(repo_id) FROM events"} {
		if err := c.writeCommand(append([]byte{gomysql.COM_QUERY}, q...)); err != nil {
			return lines, err
		}
		if err := c.w.Flush(); err != nil {
			return lines, err
		}
		line, err := c.readResponse()
		if err != nil {
			return lines, fmt.Errorf("totals: %w", err)
		}
		lines = append(lines, q+": "+line)
	}
	return lines, nil
}
