package wire

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Forward is the sink that relays a response to a client as it arrives.
// By default every packet is forwarded verbatim (zero copy, its sequence id
// shifted by Client.SeqShift); the optional fields change that for the
// packets a rewrite must hide or renumber.
type Forward struct {
	// Client receives the response; Server is the connection it comes
	// from (for LOCAL INFILE, whose file goes back to it).
	Client, Server *Conn
	// Caps are the capabilities negotiated with the client.
	Caps uint32
	// Seq, when non-nil, renumbers the packets: each is written with *Seq,
	// which is then incremented. Nil keeps the server's numbering.
	Seq *byte
	// More sets SERVER_MORE_RESULTS_EXISTS on the response's last packet,
	// so that further results can follow it (a multi-statement query the
	// proxy runs statement by statement).
	More bool
	// PatchOK, when set, rewrites the payload of the response's final OK
	// (an increment's OK made to look like the UPDATE's).
	PatchOK func(ok *OK)
	// Status, when set, rewrites the status flags of the response's last
	// packet (OK, EOF or the OK that ends rows).
	Status func(uint16) uint16
	// Column and Row, when set, rewrite the column definitions (i counts
	// from 0) and the rows of the response's first result set (or the
	// column definitions of a COM_STMT_PREPARE response).
	Column func(i int, def []byte) []byte
	Row    func(row []byte) []byte
	// Copy, when set, is given every packet written to the client (after
	// the changes above), with its role: a response that goes to other
	// clients too (consolidated reads). The payload is the Forward's no
	// more: Copy must copy what it keeps. Packets are then read whole.
	Copy func(payload []byte, role Role)
	// Infiles counts LOCAL INFILE requests served.
	Infiles int

	infileSeq byte // the server's sequence id of its LOCAL INFILE request
	sets      int  // result sets begun
	col       int  // column definitions of the current set seen
}

// Wait flushes the client before the reader blocks on the server.
func (f *Forward) Wait() error { return f.Client.Flush() }

// ForwardRows implements RowForwarder when the numbering is the server's
// and rows are not rewritten.
func (f *Forward) ForwardRows(src *Conn) error {
	if f.Seq != nil || f.Copy != nil || (f.Row != nil && f.sets <= 1) {
		return nil
	}
	return src.ForwardBufferedRows(f.Client)
}

// Take forwards one packet.
func (f *Forward) Take(src *Conn, p *Packet) error {
	switch p.Role {
	case RoleInfile:
		f.infileSeq = p.Header.Seq
	case RoleColumnCount:
		f.sets++
		f.col = 0
	case RoleColumn:
		if f.Column != nil && f.sets <= 1 {
			i := f.col
			f.col++
			return f.rewrite(src, p, func(def []byte) []byte { return f.Column(i, def) })
		}
	case RoleRow:
		if f.Row != nil && f.sets <= 1 {
			return f.rewrite(src, p, f.Row)
		}
	}
	patch := p.Last && ((p.Role == RoleOK && (f.PatchOK != nil || f.More || f.Status != nil)) || (p.Role == RoleEnd && (f.More || f.Status != nil)))
	if patch {
		return f.rewrite(src, p, func(payload []byte) []byte { return payload })
	}
	if f.Copy != nil {
		return f.rewrite(src, p, func(payload []byte) []byte { return payload })
	}
	if f.Seq == nil {
		return src.ForwardRest(f.Client, p.Header)
	}
	// Renumbered verbatim: header by header, payload streamed.
	return src.CopyRest(f.Client, p.Header, f.nextSeq)
}

// patchLast applies PatchOK, More and Status to payload, the response's
// last packet (an OK, or the EOF or OK that ends rows).
func (f *Forward) patchLast(p *Packet, payload []byte) ([]byte, error) {
	if p.Role == RoleOK || f.Caps&mysql.CLIENT_DEPRECATE_EOF != 0 {
		ok, err := ParseOK(payload)
		if err != nil {
			return nil, err
		}
		if f.PatchOK != nil && p.Role == RoleOK {
			f.PatchOK(&ok)
		}
		if f.More {
			ok.Status |= mysql.SERVER_MORE_RESULTS_EXISTS
		}
		if f.Status != nil {
			ok.Status = f.Status(ok.Status)
		}
		return ok.Bytes(f.Caps), nil
	}
	st := p.Status
	if f.More {
		st |= mysql.SERVER_MORE_RESULTS_EXISTS
	}
	if f.Status != nil {
		st = f.Status(st)
	}
	return SetEOFStatus(payload, st), nil
}

// rewrite reads a packet whole, rewrites its payload with fn, patches it
// when it is the response's last (patchLast), writes it and hands it to
// Copy.
func (f *Forward) rewrite(src *Conn, p *Packet, fn func([]byte) []byte) error {
	payload, _, err := src.ReadRest(nil, p.Header, 1<<30)
	if err != nil {
		return err
	}
	payload = fn(payload)
	if p.Last && (p.Role == RoleOK && (f.PatchOK != nil || f.More || f.Status != nil) || p.Role == RoleEnd && (f.More || f.Status != nil)) {
		if payload, err = f.patchLast(p, payload); err != nil {
			return err
		}
	}
	seq := p.Header.Seq + f.Client.SeqShift
	if f.Seq != nil {
		seq = f.nextSeq()
	}
	if _, err = f.Client.WritePacket(payload, seq); err != nil {
		return err
	}
	if f.Copy != nil {
		f.Copy(payload, p.Role)
	}
	return nil
}

func (f *Forward) nextSeq() byte {
	s := *f.Seq
	*f.Seq++
	return s
}

// Infile serves a LOCAL INFILE request: the client, which was just sent
// the request, answers with its file's packets ending with an empty one;
// they go to the server as they are. The proxy never reads files itself.
func (f *Forward) Infile() error {
	f.Infiles++
	if err := f.Client.Flush(); err != nil {
		return err
	}
	seq := f.infileSeq
	next := func() byte { seq++; return seq }
	for {
		h, err := f.Client.ReadHeader()
		if err != nil {
			return NoEOF(err)
		}
		if f.Seq != nil {
			*f.Seq = h.Seq + 1
		}
		if err := f.Client.CopyRest(f.Server, h, next); err != nil {
			return err
		}
		if h.Length == 0 {
			return f.Server.Flush()
		}
	}
}

// Response is a whole response read into memory by Collect.
type Response struct {
	Result
	// OK is the final OK packet, if the response ended with one.
	OK *OK
	// Err is the ERR packet payload, if the response ended with one.
	Err []byte
	// Columns and Rows are the first result set's column definitions and
	// row payloads.
	Columns, Rows [][]byte
	// Sets counts the result sets.
	Sets int
	// Dropped counts the rows of the first result set read beyond
	// Collect.MaxRows and not kept.
	Dropped int
	// Final is the payload of the response's last packet.
	Final []byte
}

// Collect is the sink that reads a response into memory (the proxy's own
// statements, whose results are small). Limit bounds each packet; zero
// means 1 GiB.
type Collect struct {
	R     Response
	Limit int
	// MaxRows, when positive, bounds the rows of the first result set
	// kept: the others are read and dropped (counted in R.Dropped).
	MaxRows int
}

// Wait does nothing: nobody is waiting for a collected response.
func (c *Collect) Wait() error { return nil }

// Take reads one packet.
func (c *Collect) Take(src *Conn, p *Packet) error {
	limit := c.Limit
	if limit <= 0 {
		limit = 1 << 30
	}
	payload, _, err := src.ReadRest(nil, p.Header, limit)
	if err != nil {
		return err
	}
	switch p.Role {
	case RoleOK:
		ok, err := ParseOK(payload)
		if err != nil {
			return err
		}
		c.R.OK = &ok
	case RoleErr:
		c.R.Err = payload
	case RoleColumnCount:
		c.R.Sets++
	case RoleColumn:
		if c.R.Sets <= 1 { // the first result set's, or a prepared statement's
			c.R.Columns = append(c.R.Columns, payload)
		}
	case RoleRow:
		switch {
		case c.R.Sets != 1:
		case c.MaxRows > 0 && len(c.R.Rows) >= c.MaxRows:
			c.R.Dropped++
		default:
			c.R.Rows = append(c.R.Rows, payload)
		}
	case RoleInfile:
		return fmt.Errorf("wire: LOCAL INFILE request to a statement of the proxy's own")
	}
	if p.Last {
		c.R.Final = payload
	}
	return nil
}

// Discard is the sink that drops a response.
type Discard struct{}

// Wait does nothing.
func (Discard) Wait() error { return nil }

// Take drops one packet.
func (Discard) Take(src *Conn, p *Packet) error { return src.DiscardRest(p.Header) }

// ReadAll reads a whole response of kind with Collect.
func (r Reader) ReadAll(kind Kind) (*Response, error) {
	c := &Collect{}
	res, err := r.Read(kind, c)
	c.R.Result = res
	return &c.R, err
}

// TextRow decodes a text-protocol row; NULL is nil.
func TextRow(row []byte) ([][]byte, error) {
	var out [][]byte
	for len(row) > 0 {
		if row[0] == 0xfb {
			out = append(out, nil)
			row = row[1:]
			continue
		}
		v, n, ok := LenEncString(row)
		if !ok {
			return nil, fmt.Errorf("%w: text row", ErrMalformed)
		}
		out = append(out, v)
		row = row[n:]
	}
	return out, nil
}

// Buffer is the sink that keeps a whole response's packets, to send them
// to a client later (a result set that must not reach the client before
// the proxy's own transaction around it commits). Limit bounds the bytes
// kept; zero means 64 MiB.
type Buffer struct {
	Packets [][]byte
	Roles   []Role
	Limit   int
	size    int
}

// Wait does nothing.
func (b *Buffer) Wait() error { return nil }

// Take keeps one packet.
func (b *Buffer) Take(src *Conn, p *Packet) error {
	limit := b.Limit
	if limit <= 0 {
		limit = 64 << 20
	}
	payload, _, err := src.ReadRest(nil, p.Header, limit-b.size)
	if err != nil {
		return fmt.Errorf("a result of more than %d bytes to hold: %w", limit, err)
	}
	if p.Role == RoleInfile {
		return fmt.Errorf("wire: LOCAL INFILE request to a statement whose result is held")
	}
	b.size += len(payload)
	b.Packets = append(b.Packets, payload)
	b.Roles = append(b.Roles, p.Role)
	return nil
}

// ResultSet reports whether the kept response is a result set.
func (b *Buffer) ResultSet() bool { return len(b.Roles) > 0 && b.Roles[0] == RoleColumnCount }

// WriteTo sends the kept packets to client, numbered from *seq, with the
// last packet's status flags passed through status.
func (b *Buffer) WriteTo(client *Conn, seq *byte, caps uint32, status func(uint16) uint16) error {
	for i, p := range b.Packets {
		if i == len(b.Packets)-1 && status != nil {
			switch {
			case p[0] == 0x00 || (p[0] == 0xfe && caps&mysql.CLIENT_DEPRECATE_EOF != 0):
				if ok, err := ParseOK(p); err == nil {
					ok.Status = status(ok.Status)
					p = ok.Bytes(caps)
				}
			case p[0] == 0xfe && len(p) >= 5:
				p = SetEOFStatus(append([]byte(nil), p...), status(uint16(p[3])|uint16(p[4])<<8))
			}
		}
		if _, err := client.WritePacket(p, *seq); err != nil {
			return err
		}
		*seq++
	}
	return nil
}
