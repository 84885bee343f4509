package proxy

import (
	"fmt"
	"io"
	"os"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// bigCommand serves a command the executor would need whole (h is its first
// packet's header) that takes 16 MiB or more, or more than
// limits.max_statement_bytes. One that fits the limit is read into memory
// and handed to the executor as usual. A larger one is never held in
// memory: it is spooled to a temporary file while its text is scanned for
// the names of ruled tables. If it names none, it is relayed from the file
// as it came; if it does, the proxy cannot plan it and refuses it with an
// error (fail closed). Either way the client's connection stays usable.
func (s *session) bigCommand(rw *rewrite.Rewriter, cmd byte, h wire.Header) error {
	limit := s.srv.cfg.MaxStatementBytes
	buf := make([]byte, 0, min(h.Length, limit))
	packets := byte(0)
	for {
		if len(buf)+h.Length > limit {
			break
		}
		start := len(buf)
		buf = append(buf, make([]byte, h.Length)...)
		if err := s.client.ReadFull(buf[start:]); err != nil {
			return err
		}
		packets++
		if h.Length < wire.MaxPayload {
			return s.ex.Handle(rw, buf, packets)
		}
		var err error
		if h, err = s.client.ReadHeader(); err != nil {
			return wire.NoEOF(err)
		}
		if h.Seq != packets {
			return fmt.Errorf("%w: continuation packet with sequence id %d, want %d", wire.ErrMalformed, h.Seq, packets)
		}
	}
	// Over the limit: spool what was read and the rest.
	f, err := os.CreateTemp("", "slotproxy-statement-")
	if err != nil {
		return fmt.Errorf("spool a large statement: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	scan := newMentionScanner(rw.Catalog())
	scan.write(buf)
	if _, err := f.Write(buf); err != nil {
		return fmt.Errorf("spool a large statement: %w", err)
	}
	size := len(buf)
	buf = nil
	chunk := make([]byte, 64<<10)
	for {
		rest := h.Length
		for rest > 0 {
			n := min(rest, len(chunk))
			if err := s.client.ReadFull(chunk[:n]); err != nil {
				return err
			}
			scan.write(chunk[:n])
			if _, err := f.Write(chunk[:n]); err != nil {
				return fmt.Errorf("spool a large statement: %w", err)
			}
			rest -= n
			size += n
		}
		packets++
		if h.Length < wire.MaxPayload {
			break
		}
		if h, err = s.client.ReadHeader(); err != nil {
			return wire.NoEOF(err)
		}
		if h.Seq != packets {
			return fmt.Errorf("%w: continuation packet with sequence id %d, want %d", wire.ErrMalformed, h.Seq, packets)
		}
	}
	if cmd != mysql.COM_QUERY && cmd != mysql.COM_STMT_PREPARE {
		s.log.Info("refused an execution too large to plan", "bytes", size, "limit", limit)
		return s.ex.Refuse(packets, "an execution of a rewritten statement of %d bytes is larger than limits.max_statement_bytes (%d); the proxy cannot plan it", size, limit)
	}
	if scan.found {
		s.log.Info("refused a statement too large to plan", "bytes", size, "limit", limit)
		return s.ex.Refuse(packets, "a statement of %d bytes that names a ruled table is larger than limits.max_statement_bytes (%d); the proxy cannot plan it", size, limit)
	}
	s.metrics().statement(PathPassThrough, "")
	// The executor counts it (a statement of the transaction: one it runs
	// again after a deadlock must not skip it) and reads the session's
	// state again after it.
	s.ex.Relayed([]byte{cmd})
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := s.sendSpooled(f, size); err != nil {
		return err
	}
	if err := s.back.Flush(); err != nil {
		return err
	}
	if cmd == mysql.COM_STMT_PREPARE {
		return s.relayResponse(wire.Prepare)
	}
	return s.relayResponse(wire.Results)
}

// sendSpooled writes a command of size bytes from r to the backend, framed
// as the protocol requires (as the client framed it).
func (s *session) sendSpooled(r io.Reader, size int) error {
	chunk := make([]byte, 64<<10)
	seq := byte(0)
	for {
		n := min(size, wire.MaxPayload)
		if err := s.back.WriteHeader(n, seq); err != nil {
			return err
		}
		seq++
		for rest := n; rest > 0; {
			m, err := io.ReadFull(r, chunk[:min(rest, len(chunk))])
			if err != nil {
				return fmt.Errorf("read back a spooled statement: %w", err)
			}
			if err := s.back.WriteRaw(chunk[:m]); err != nil {
				return err
			}
			rest -= m
		}
		size -= n
		if n < wire.MaxPayload {
			return nil
		}
	}
}

// mentionScanner reports whether a text written in chunks names a ruled
// table anywhere (rewrite.Catalog.Mentions), carrying the end of each chunk
// over so that no name is split unseen.
type mentionScanner struct {
	cat   *rewrite.Catalog
	carry []byte
	found bool
}

func newMentionScanner(cat *rewrite.Catalog) *mentionScanner { return &mentionScanner{cat: cat} }

func (m *mentionScanner) write(p []byte) {
	if m.found || len(p) == 0 {
		return
	}
	keep := max(m.cat.LongestName()-1, 0)
	window := append(m.carry, p...)
	if m.cat.Mentions(string(window)) {
		m.found = true
		return
	}
	if len(window) > keep {
		window = window[len(window)-keep:]
	}
	m.carry = append(m.carry[:0], window...)
}
