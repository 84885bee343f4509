package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Buffer sizes per connection. Backend reads and client writes carry result
// sets; client reads and backend writes carry mostly small commands.
const (
	clientReadBuf   = 4 << 10
	clientWriteBuf  = 16 << 10
	backendReadBuf  = 16 << 10
	backendWriteBuf = 4 << 10
)

// What the client owes the backend after a packet the backend sent it
// (session.clientOwes).
const (
	owesNothing = iota
	owesInfile  // LOCAL INFILE data packets up to an empty packet
)

// session is one client connection and its own backend connection.
//
// After the handshake two goroutines run: the command pump reads client
// packets and writes them to the backend; the response pump reads backend
// packets and writes them to the client, using the queue of expected
// responses the command pump fills (in command order) to know where each
// response ends. Only the command pump writes to the backend and reads from
// the client; only the response pump reads from the backend and writes to
// the client, except while the command pump holds the backend by handoff
// (see expect.handoff).
type session struct {
	srv        *Server
	id         uint64
	log        *slog.Logger
	clientConn net.Conn // the client socket, or the TLS connection over it; owned by the session's goroutines
	backConn   net.Conn // likewise for the backend

	// The raw sockets, for close from any goroutine. rawBack is set once,
	// by the handshake, under connMu.
	connMu    sync.Mutex
	rawClient net.Conn
	rawBack   net.Conn
	client    *packetConn
	back      *packetConn
	started   time.Time

	// Set by the handshake, read-only afterwards.
	caps          uint32
	serverVersion string
	backendConnID uint32
	user, db      string
	tls           bool

	expects    chan expect
	handoff    chan struct{} // response pump → command pump: backend is yours
	handback   chan struct{} // command pump → response pump: backend is back
	done       chan struct{} // closed when the session tears down
	clientOwes atomic.Int32
	pending    atomic.Int32 // commands whose response has not fully been relayed
	draining   atomic.Bool
	authed     atomic.Bool
	closeOnce  sync.Once
	commands   atomic.Uint64

	// Set by the response pump from every completed response, read by the
	// command pump.
	lastStatus atomic.Uint32 // server status flags
	rolledBack atomic.Bool   // a deadlock or lock wait timeout rolled the transaction back

	// Owned by the command pump.
	held bool         // the command pump holds the backend (see acquire)
	rw   rewriteState // rewriting state
	cmd  []byte       // reusable buffer for intercepted commands
	// respSeq is the sequence id the response to the current intercepted
	// command starts with: the number of packets the client sent it in.
	respSeq byte
}

// respKind says how a command's response is delimited.
type respKind uint8

const (
	respOne       respKind = iota // exactly one packet (OK, ERR, EOF, statistics string)
	respResults                   // OK / ERR / LOCAL INFILE / result sets, repeated while more results exist
	respPrepare                   // COM_STMT_PREPARE: OK with parameter and column definitions, or ERR
	respRows                      // COM_STMT_FETCH: rows up to EOF, or ERR
	respFieldList                 // COM_FIELD_LIST: column definitions up to EOF, or ERR
	respHandoff                   // the command pump reads the response itself (COM_CHANGE_USER)
	respStream                    // replication stream: raw bytes until close
)

// expect is one entry of the queue of responses the backend owes.
type expect struct {
	kind  respKind
	patch *incPatch // rewrite the final OK of a slotted increment
	// seqShift renumbers the response when the command the backend got
	// took a different number of packets than the client's (a rewrite that
	// crossed a 16 MiB boundary).
	seqShift byte
}

func newSession(srv *Server, id uint64, c net.Conn) *session {
	return &session{
		srv:        srv,
		id:         id,
		clientConn: c,
		rawClient:  c,
		client:     newPacketConn(c, clientReadBuf, clientWriteBuf),
		started:    time.Now(),
		log:        srv.log.With("conn", id, "client", c.RemoteAddr().String()),
		expects:    make(chan expect, 64),
		handoff:    make(chan struct{}),
		handback:   make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// close tears the session down: both sockets are closed, which unblocks
// both pumps. Safe to call from any goroutine, any number of times.
func (s *session) close() {
	s.closeOnce.Do(func() {
		s.connMu.Lock()
		defer s.connMu.Unlock()
		close(s.done)
		_ = s.rawClient.Close()
		if s.rawBack != nil {
			_ = s.rawBack.Close()
			s.metrics().conns(0, -1)
		}
	})
}

// serve runs the session to completion. It never panics: a panic in either
// pump is logged with its stack and closes only this session.
func (s *session) serve(ctx context.Context) {
	s.metrics().conns(1, 0)
	defer s.metrics().conns(-1, 0)
	defer s.close()
	defer s.recoverPanic("handshake")

	hctx, cancel := context.WithTimeout(ctx, s.srv.cfg.HandshakeTimeout)
	_ = s.clientConn.SetDeadline(time.Now().Add(s.srv.cfg.HandshakeTimeout))
	err := s.handshake(hctx)
	cancel()
	s.srv.handshakeDone()
	if err != nil {
		if errors.Is(err, errAuthFailed) {
			s.log.Info("authentication failed")
		} else {
			s.log.Info("handshake failed", "err", err)
		}
		return
	}
	_ = s.clientConn.SetDeadline(time.Time{})
	_ = s.backConn.SetDeadline(time.Time{})
	s.client.sw.timeout = s.srv.cfg.ClientWriteTimeout
	s.back.sw.backend = true
	s.log.Info("connection open", "tls", s.tls, "db", s.db)
	s.authed.Store(true)
	if s.draining.Load() {
		return // shutdown began during the handshake
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer s.recoverPanic("response pump")
		err := s.responsePump()
		if err == nil || s.isClosed() {
			s.close()
			return
		}
		s.log.Info("relaying responses ended", "err", err)
		// Like the server closing a connection: what was relayed is
		// flushed, the client gets FIN, and what it still sends is read
		// off for a moment by the command pump (which then fails to
		// forward it, or sees the client's EOF, and closes), so the client
		// reads the last packets (ERR 1153, say) instead of a reset.
		if s.client.flush() != nil || s.halfClose() != nil {
			s.close()
		}
	}()
	pumpDone := make(chan struct{})
	go func() { wg.Wait(); close(pumpDone) }()
	err = s.commandPump()
	if errors.Is(err, errBackendWrite) && !s.isClosed() {
		// The backend closed on us mid-command. It may have said why
		// first (ERR 1153 for a command over max_allowed_packet): let the
		// response pump relay that before the client is closed.
		s.log.Info("backend connection ended", "err", err)
		s.lingerClose(pumpDone)
	} else if err != nil && !s.isClosed() && !errors.Is(err, io.EOF) {
		s.log.Info("client connection ended", "err", err)
	}
	s.close()
	<-pumpDone
	s.log.Info("connection closed", "duration", time.Since(s.started).Round(time.Millisecond), "commands", s.commands.Load())
}

// lingerClose waits (a little) for the response pump to relay what the
// backend sent before it closed, then reads off what the client still
// sends, for a moment, so that closing does not reset the connection
// before the client read the last packets.
func (s *session) lingerClose(pumpDone <-chan struct{}) {
	select {
	case <-pumpDone:
	case <-time.After(2 * time.Second):
		return
	}
	if s.halfClose() == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(s.clientConn, 64<<20))
	}
}

// lingerTime bounds reading off a client after the backend went away.
const lingerTime = 2 * time.Second

// halfClose ends the proxy's side of the client connection (FIN, or TLS
// close_notify and FIN) and gives reads from the client lingerTime.
func (s *session) halfClose() error {
	cw, ok := s.clientConn.(interface{ CloseWrite() error })
	if !ok {
		return errors.New("no half-close")
	}
	_ = s.clientConn.SetReadDeadline(time.Now().Add(lingerTime))
	return cw.CloseWrite()
}

// setRawBack records the backend socket so close can reach it. It fails
// (and closes c) when the session was closed meanwhile.
func (s *session) setRawBack(c net.Conn) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.isClosed() {
		_ = c.Close()
		return false
	}
	s.rawBack = c
	s.metrics().conns(0, 1)
	return true
}

func (s *session) metrics() *Metrics { return s.srv.cfg.Metrics }

func (s *session) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *session) recoverPanic(where string) {
	if v := recover(); v != nil {
		s.log.Error("panic in connection; closing it", "where", where, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		s.close()
	}
}

// drain asks the session to close as soon as no statement is in flight.
func (s *session) drain() {
	s.draining.Store(true)
	if !s.authed.Load() || s.pending.Load() == 0 {
		s.close()
	}
}

// commandPump reads client commands and forwards them to the backend.
func (s *session) commandPump() error {
	c, b := s.client, s.back
	for {
		if c.br.Buffered() < 4 {
			if err := b.flush(); err != nil {
				return err
			}
		}
		h, err := c.readHeader()
		if err != nil {
			return err
		}
		if s.clientOwes.Load() == owesInfile {
			if h.length == 0 {
				s.clientOwes.Store(owesNothing)
			}
			if err := c.forwardRest(b, h); err != nil {
				return err
			}
			continue
		}
		if h.seq != 0 {
			return fmt.Errorf("%w: command packet with sequence id %d", errMalformed, h.seq)
		}
		if h.length == 0 {
			return fmt.Errorf("%w: empty command packet", errMalformed)
		}
		first, err := c.peekPayload(h, 1)
		if err != nil {
			return noEOF(err)
		}
		cmd := first[0]
		s.commands.Add(1)
		if s.srv.commandHook != nil {
			s.srv.commandHook(cmd)
		}
		rw := s.srv.rewriter.Load()
		if rw == nil && (cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_EXECUTE) {
			s.metrics().statement(PathPassThrough, "")
		}
		if rw != nil && intercepted(cmd) {
			var buf []byte
			s.respSeq = 1
			if h.length < maxPacketPayload {
				buf = s.cmd[:0]
				if cap(buf) < h.length {
					buf = make([]byte, h.length)
				}
				buf = buf[:h.length]
				if _, err := io.ReadFull(c.br, buf); err != nil {
					return noEOF(err)
				}
				if cap(buf) <= 64<<10 {
					s.cmd = buf
				}
			} else {
				// 16 MiB or more: the rest of the logical packet follows.
				first := make([]byte, h.length)
				if _, err := io.ReadFull(c.br, first); err != nil {
					return noEOF(err)
				}
				buf = first
				for seq, n := byte(1), h.length; n == maxPacketPayload; seq++ {
					ch, err := c.readHeader()
					if err != nil {
						return noEOF(err)
					}
					if ch.seq != seq {
						return fmt.Errorf("%w: continuation packet with sequence id %d, want %d", errMalformed, ch.seq, seq)
					}
					if len(buf)+ch.length > 1<<30 {
						return fmt.Errorf("%w: command of more than 1 GiB", errMalformed)
					}
					start := len(buf)
					buf = append(buf, make([]byte, ch.length)...)
					if _, err := io.ReadFull(c.br, buf[start:]); err != nil {
						return noEOF(err)
					}
					n = ch.length
					s.respSeq++
				}
			}
			if err := s.handleCommand(rw, buf); err != nil {
				var be *backendError
				if !errors.As(err, &be) {
					return err
				}
				// An internal statement failed: the client sees its error.
				if werr := s.client.sendError(s.respSeq, proxyError(codeUnknown, "%s", be.Error())); werr != nil {
					return werr
				}
			}
			switch cmd {
			case mysql.COM_CHANGE_USER:
				s.resetRewriteState()
				if err := s.changeUser(); err != nil {
					return err
				}
			case mysql.COM_RESET_CONNECTION:
				s.resetRewriteState()
			}
			continue
		}
		kind, hasResponse := responseKind(cmd)
		if hasResponse {
			s.pending.Add(1)
			s.expects <- expect{kind: kind}
		}
		if err := c.forwardRest(b, h); err != nil {
			return err
		}
		switch {
		case cmd == mysql.COM_QUIT:
			_ = b.flush()
			return io.EOF
		case kind == respHandoff:
			if err := s.changeUser(); err != nil {
				return err
			}
		case kind == respStream:
			if err := b.flush(); err != nil {
				return err
			}
			_, err := io.Copy(s.backConn, c.br)
			return err
		}
	}
}

// responseKind classifies a command byte. hasResponse is false for commands
// the server never answers.
func responseKind(cmd byte) (kind respKind, hasResponse bool) {
	switch cmd {
	case mysql.COM_QUIT, mysql.COM_STMT_CLOSE, mysql.COM_STMT_SEND_LONG_DATA:
		return 0, false
	case mysql.COM_QUERY, mysql.COM_STMT_EXECUTE, mysql.COM_PROCESS_INFO, comStmtBulkExecute:
		return respResults, true
	case mysql.COM_STMT_PREPARE:
		return respPrepare, true
	case mysql.COM_STMT_FETCH:
		return respRows, true
	case mysql.COM_FIELD_LIST:
		return respFieldList, true
	case mysql.COM_CHANGE_USER:
		return respHandoff, true
	case mysql.COM_BINLOG_DUMP, mysql.COM_BINLOG_DUMP_GTID, mysql.COM_TABLE_DUMP:
		return respStream, true
	case mysql.COM_PING, mysql.COM_INIT_DB, mysql.COM_STATISTICS, mysql.COM_RESET_CONNECTION,
		mysql.COM_STMT_RESET, mysql.COM_SET_OPTION, mysql.COM_PROCESS_KILL, mysql.COM_REFRESH,
		mysql.COM_SHUTDOWN, mysql.COM_DEBUG, mysql.COM_CREATE_DB, mysql.COM_DROP_DB,
		mysql.COM_REGISTER_SLAVE:
		return respOne, true
	}
	// Unknown or obsolete commands: the server answers with ERR (or OK),
	// which the result-set reader handles as a one-packet response.
	return respResults, true
}

// intercepted reports whether a command goes through the rewriting layer
// when a rewriter is configured.
func intercepted(cmd byte) bool {
	switch cmd {
	case mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_STMT_EXECUTE, mysql.COM_STMT_CLOSE,
		mysql.COM_STMT_SEND_LONG_DATA, mysql.COM_STMT_RESET, mysql.COM_INIT_DB,
		mysql.COM_CHANGE_USER, mysql.COM_RESET_CONNECTION, mysql.COM_SET_OPTION:
		return true
	}
	return false
}

// comStmtBulkExecute is MariaDB's COM_STMT_BULK_EXECUTE.
const comStmtBulkExecute = 0xfa

// changeUser takes the backend from the response pump and relays the
// re-authentication of COM_CHANGE_USER like the initial handshake's auth
// phase.
func (s *session) changeUser() error {
	if err := s.back.flush(); err != nil {
		return err
	}
	select {
	case <-s.handoff:
	case <-s.done:
		return io.EOF
	}
	a := authRelay{s: s, clientTLS: s.tls, backendTLS: s.srv.cfg.BackendTLS != nil}
	err := a.run()
	if errors.Is(err, errAuthFailed) {
		err = nil // the client saw the ERR; the server closes the connection if it wants to
	}
	select {
	case s.handback <- struct{}{}:
	case <-s.done:
	}
	return err
}

// responsePump relays backend packets to the client, one response per
// queued expectation.
func (s *session) responsePump() error {
	b, c := s.back, s.client
	for {
		if b.br.Buffered() < 4 {
			if err := c.flush(); err != nil {
				return err
			}
			if s.draining.Load() && s.pending.Load() == 0 {
				return nil
			}
		}
		h, err := b.peekHeader()
		if err != nil {
			return err
		}
		var e expect
		select {
		case e = <-s.expects:
		default:
			// Nothing is owed: the server speaks on its own, e.g. MySQL's
			// ERR 4031 before it closes an idle connection. Relay an ERR,
			// reject anything else.
			if err := s.relayUnsolicited(h); err != nil {
				return err
			}
			continue
		}
		c.seqShift = e.seqShift
		switch e.kind {
		case respOne:
			err = s.relayOne()
		case respResults:
			err = s.relayResults(e.patch)
		case respPrepare:
			err = s.relayPrepare()
		case respRows:
			_, err = s.relayRows()
		case respFieldList:
			err = s.relayFieldList()
		case respHandoff:
			if err := c.flush(); err != nil {
				return err
			}
			select {
			case s.handoff <- struct{}{}:
			case <-s.done:
				return nil
			}
			select {
			case <-s.handback:
			case <-s.done:
				return nil
			}
		case respStream:
			if err := c.flush(); err != nil {
				return err
			}
			_, err := io.Copy(s.clientConn, b.br)
			return err
		}
		c.seqShift = 0
		if err != nil {
			return err
		}
		s.pending.Add(-1)
	}
}

func (s *session) relayUnsolicited(h header) error {
	first, err := s.back.br.Peek(5)
	if err != nil {
		return noEOF(err)
	}
	if first[4] != 0xff {
		return fmt.Errorf("%w: unsolicited packet 0x%02x from backend", errMalformed, first[4])
	}
	_, _ = s.back.readHeader()
	if err := s.back.forwardRest(s.client, h); err != nil {
		return err
	}
	return s.client.flush()
}
