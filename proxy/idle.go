package proxy

import (
	"time"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// idleWatch watches the backend of a session whose client is idle. A
// server speaks on its own only to say goodbye: MySQL sends ERR 4031 before
// it closes a connection idle for wait_timeout, and any server may close
// (restart, KILL, wait_timeout). Directly, the client sees that at once;
// the watcher makes it so through the proxy: it relays such an ERR and then
// closes the client's side the way the server closed its own, so a pool
// that checks its connections before use discards this one.
//
// While the watcher runs it owns reading the backend and writing the
// client; the session goroutine only reads the client. stop hands both back.
type idleWatch struct {
	s    *session
	quit chan struct{}
	done chan struct{}
}

func (s *session) startWatch() *idleWatch {
	w := &idleWatch{s: s, quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// stop ends the watcher and waits for it: the session owns its connections
// again when stop returns.
func (w *idleWatch) stop() {
	close(w.quit)
	_ = w.s.back.SetReadDeadline(time.Unix(1, 0)) // unblocks the watcher's read
	<-w.done
	_ = w.s.back.SetReadDeadline(time.Time{})
}

func (w *idleWatch) stopped() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

func (w *idleWatch) run() {
	defer close(w.done)
	s := w.s
	defer s.recoverPanic("idle watcher")
	for {
		h, err := s.back.PeekHeader()
		if w.stopped() {
			return // the client sent a command; nothing was consumed
		}
		if err != nil {
			s.log.Info("backend closed the connection while the client was idle", "err", err)
			w.goodbye()
			return
		}
		peek, err := s.back.Peek(5)
		if w.stopped() {
			return
		}
		if err != nil || h.Length == 0 {
			w.goodbye()
			return
		}
		if peek[4] != 0xff {
			s.log.Info("backend sent an unsolicited packet; closing", "first_byte", peek[4])
			s.close()
			return
		}
		// An unsolicited ERR (4031, or 1927 after KILL on MariaDB): relay it.
		_, _ = s.back.ReadHeader()
		code := wire.ErrCode(s.back.PeekBuffered(min(h.Length, 3)))
		if err := s.back.ForwardRest(s.client, h); err != nil {
			s.close()
			return
		}
		if err := s.client.Flush(); err != nil {
			s.close()
			return
		}
		s.log.Info("relayed the backend's unsolicited error", "code", code)
	}
}

// goodbye closes the client's side after the backend closed: FIN, and the
// session's pending read of the client ends within lingerTime.
func (w *idleWatch) goodbye() {
	s := w.s
	s.backendGone.Store(true)
	_ = s.client.Flush()
	conn := s.client.Conn
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = conn.SetReadDeadline(time.Now().Add(lingerTime))
		return
	}
	s.close()
}
