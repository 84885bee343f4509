package proxy

import (
	"io"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
)

// relay forwards one command whose header h was read, as it is, and relays
// its whole response.
func (s *session) relay(cmd byte, h wire.Header) error {
	kind := wire.KindOf(cmd)
	if kind == wire.Auth {
		return s.changeUser(h)
	}
	if err := s.client.ForwardRest(s.back, h); err != nil {
		return err
	}
	switch kind {
	case wire.None:
		if cmd == mysql.COM_QUIT {
			_ = s.back.Flush()
			return io.EOF
		}
		if s.dialect.AnswersShortNoReplyCommand(cmd, h.Length) {
			kind = wire.One // MySQL says the command is malformed
			break
		}
		return nil // flushed with the next command, or before idling
	case wire.Stream:
		return s.stream()
	}
	if err := s.back.Flush(); err != nil {
		return err
	}
	return s.relayResponse(kind)
}

// relayResponse relays the response to a command just sent to the backend.
func (s *session) relayResponse(kind wire.Kind) error {
	sink := &wire.Forward{Client: s.client, Server: s.back, Caps: s.caps}
	r := wire.Reader{Src: s.back, DeprecateEOF: s.caps&mysql.CLIENT_DEPRECATE_EOF != 0}
	res, err := r.Read(kind, sink)
	if err != nil {
		return err
	}
	s.ex.Observe(res)
	return nil
}

// stream relays a replication stream: raw bytes both ways until either side
// ends. The client's side is copied by a goroutine of its own, the only
// time a session has two.
func (s *session) stream() error {
	if err := s.back.Flush(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(s.back.Conn, s.client.Reader())
		done <- err
		s.close()
	}()
	if err := s.client.Flush(); err != nil {
		return err
	}
	_, err := io.Copy(s.client.Conn, s.back.Reader())
	s.close()
	<-done
	return err
}
