package executor

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/wire"
	"github.com/slotproxy/slotproxy/rewrite"
)

// untoldSession is a session in a client's open transaction whose backend
// is scripted by the test: a single server cannot end a transaction behind
// its client's back (a Galera node does: TestClusterAbortWhileIdle in
// cmd/slotproxy runs that on both cluster kinds).
type untoldSession struct {
	s        *Session
	client   *wire.Conn // the client's end
	backend  *wire.Conn // the server's end
	rw       *rewrite.Rewriter
	autocomm uint16 // the status outside a transaction
}

func newUntoldSession(t *testing.T) *untoldSession {
	t.Helper()
	c1, c2 := net.Pipe()
	b1, b2 := net.Pipe()
	t.Cleanup(func() { c1.Close(); c2.Close(); b1.Close(); b2.Close() })
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_DEPRECATE_EOF)
	inTxn := uint16(mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_AUTOCOMMIT)
	s := NewSession(NewEnv(), Link{Client: wire.NewConn(c1, wire.Options{}), Backend: wire.NewConn(b1, wire.Options{Server: true}), Caps: caps},
		slog.New(slog.NewTextHandler(io.Discard, nil)), inTxn, "10.11.19-MariaDB")
	return &untoldSession{s: s, client: wire.NewConn(c2, wire.Options{}), backend: wire.NewConn(b2, wire.Options{}),
		rw: rewrite.New(rewrite.NewCatalog(nil, nil), rewrite.Options{}), autocomm: mysql.SERVER_STATUS_AUTOCOMMIT}
}

// serve answers the next command the backend gets with answer and returns
// the command's text.
func (u *untoldSession) serve(t *testing.T, answer []byte) chan string {
	got := make(chan string, 1)
	go func() {
		p, _, err := u.backend.ReadPacket(nil, 1<<20)
		if err != nil {
			got <- "(" + err.Error() + ")"
			return
		}
		u.backend.WritePacket(answer, 1)
		u.backend.Flush()
		got <- string(p[1:])
	}()
	return got
}

// handle runs a client's query through the session and returns the first
// packet of its answer.
func (u *untoldSession) handle(t *testing.T, sql string) []byte {
	t.Helper()
	out := make(chan []byte, 1)
	go func() {
		p, _, err := u.client.ReadPacket(nil, 1<<20)
		if err != nil {
			t.Error(err)
		}
		out <- p
	}()
	if err := u.s.Handle(u.rw, append([]byte{mysql.COM_QUERY}, sql...), 1); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if err := u.s.link.Client.Flush(); err != nil {
		t.Fatal(err)
	}
	return <-out
}

func okPacket(status uint16) []byte {
	return (&wire.OK{Status: status}).Bytes(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_TRANSACTIONS)
}

// TestUntoldAbort: a statement of the proxy's own in the client's
// transaction learns that the server ended the transaction — a deadlock,
// or an OK whose status says no transaction is open. Nothing of the
// client's may run after it until the client is told: its next statement
// (a read, a COMMIT) is answered with the deadlock and never reaches the
// server; then the session is outside any transaction, as the server is.
func TestUntoldAbort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(u *untoldSession) []byte
	}{
		{"deadlock", func(*untoldSession) []byte { return deadlockPacket }},
		{"status", func(u *untoldSession) []byte { return okPacket(u.autocomm) }},
	} {
		for _, next := range []string{"SELECT name FROM repos WHERE id = 1", "COMMIT"} {
			t.Run(tc.name+"/"+next, func(t *testing.T) {
				u := newUntoldSession(t)
				got := u.serve(t, tc.answer(u))
				if _, err := u.s.query("SELECT id FROM repos WHERE id = 1 FOR UPDATE"); err != nil {
					t.Fatal(err)
				}
				<-got
				if u.s.untold == nil {
					t.Fatal("the session did not note that the transaction ended")
				}
				// The backend gets nothing: a command would fail the test
				// through this goroutine.
				sent := u.serve(t, okPacket(u.autocomm))
				p := u.handle(t, next)
				if p[0] != 0xff || wire.ErrCode(p) != mysql.ER_LOCK_DEADLOCK {
					t.Fatalf("%s answered %x, want the deadlock", next, p)
				}
				select {
				case q := <-sent:
					t.Fatalf("the backend got %q", q)
				default:
				}
				if u.s.inTransaction() || u.s.untold != nil {
					t.Fatalf("after the deadlock: status %#x, untold %v", u.s.status, u.s.untold != nil)
				}
				// Told: the next statement runs (outside the transaction,
				// as it would directly).
				p = u.handle(t, "SELECT 1")
				if p[0] != 0x00 {
					t.Fatalf("SELECT 1 after the deadlock answered %x", p)
				}
				if q := <-sent; q != "SELECT 1" {
					t.Fatalf("the backend got %q", q)
				}
			})
		}
	}
	// A ROLLBACK goes through, and ends the matter.
	u := newUntoldSession(t)
	got := u.serve(t, deadlockPacket)
	if _, err := u.s.query("SELECT id FROM repos WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	<-got
	sent := u.serve(t, okPacket(u.autocomm))
	if p := u.handle(t, "ROLLBACK"); p[0] != 0x00 {
		t.Fatalf("ROLLBACK answered %x", p)
	}
	if q := <-sent; q != "ROLLBACK" || u.s.untold != nil {
		t.Fatalf("the backend got %q; untold %v", q, u.s.untold != nil)
	}
}

// TestUntoldWords: which commands may run while the client has not been
// told, and which of the proxy's own may end a transaction on purpose.
func TestUntoldWords(t *testing.T) {
	q := func(s string) []byte { return append([]byte{mysql.COM_QUERY}, s...) }
	for _, tc := range []struct {
		payload []byte
		follow  bool
		ends    bool
	}{
		{q("ROLLBACK"), true, true},
		{q("  rollback work"), true, true},
		{q("ROLLBACK TO SAVEPOINT a"), false, true},
		{q("SHOW WARNINGS"), true, false},
		{q("COMMIT"), false, true},
		{q("SELECT 1"), false, false},
		{q("BEGIN"), false, true},
		{q("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"), false, true},
		{[]byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0}, false, false},
		{[]byte{mysql.COM_STMT_PREPARE, 'S'}, true, false},
		{[]byte{mysql.COM_PING}, true, false},
	} {
		if got := mayFollowAbort(tc.payload); got != tc.follow {
			t.Errorf("mayFollowAbort(%q) = %v", tc.payload, got)
		}
		if got := endsTransaction(tc.payload); got != tc.ends {
			t.Errorf("endsTransaction(%q) = %v", tc.payload, got)
		}
	}
}

// TestUntoldRetry: a statement that was the whole of its transaction so far
// (autocommit, or first after BEGIN) and met a deadlock of its own is run
// again (retry): nothing of the client's was lost, so the deadlock is not
// the client's to hear, and the proxy's BEGIN and statement that follow
// are sent.
func TestUntoldRetry(t *testing.T) {
	u := newUntoldSession(t)
	u.s.env.MaxRetries = 3
	got := u.serve(t, deadlockPacket)
	if _, err := u.s.query("INSERT INTO slotted_counters SELECT 1"); err != nil {
		t.Fatal(err)
	}
	<-got
	if u.s.untold == nil {
		t.Fatal("the deadlock was not noted")
	}
	if !u.s.retry(mysql.ER_LOCK_DEADLOCK, 1) {
		t.Fatal("a deadlock at the first attempt is not retried")
	}
	if u.s.untold != nil {
		t.Fatal("the retried deadlock is still to be told to the client")
	}
	sent := u.serve(t, okPacket(u.autocomm|mysql.SERVER_STATUS_IN_TRANS))
	if _, err := u.s.query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	if q := <-sent; q != "BEGIN" {
		t.Fatalf("the backend got %q", q)
	}
}
