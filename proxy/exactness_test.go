package proxy_test

import (
	"context"
	"fmt"
	"database/sql"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestTruncateAutocommitOff is the exactness issue's case 4 as named: with
// autocommit off, TRUNCATE, an INSERT rolled back, an INSERT of a key that
// had slots before the TRUNCATE, COMMIT: the key starts from 0, as
// directly (the slot clean-up once ran inside the client's next
// transaction and was rolled back with it).
func TestTruncateAutocommitOff(t *testing.T) {
	const plain, ruled = "trunc_plain", "trunc_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT '', downloads INT NOT NULL DEFAULT 0)",
		"INSERT INTO repos (id, name) VALUES (60, 'a'), (61, 'b')",
	}, "table: "+ruled+".repos\nkey: id\ncounters: [downloads]\nslots: 4\n")
	corpus := []step{
		text("UPDATE repos SET downloads = downloads + 1 WHERE id = 60"),
		text("UPDATE repos SET downloads = downloads + 1 WHERE id = 60"),
		text("SELECT id, downloads FROM repos ORDER BY id"),
		text("SET autocommit = 0"),
		text("TRUNCATE TABLE repos"),
		text("INSERT INTO repos (id, name) VALUES (70, 'c')"),
		text("ROLLBACK"),
		text("INSERT INTO repos (id, name) VALUES (60, 'd')"),
		text("COMMIT"),
		text("SELECT downloads FROM repos WHERE id = 60"),
		text("UPDATE repos SET downloads = downloads + 1 WHERE id = 60"),
		text("COMMIT"),
		text("SELECT id, downloads FROM repos ORDER BY id"),
		text("SET autocommit = 1"),
		text("SELECT id, downloads FROM repos ORDER BY id"),
	}
	runDifferential(t, cat, plain, ruled, corpus)
	admin := touchAdmin(t)
	r, err := admin.Execute("SELECT COUNT(*) FROM " + ruled + ".slotted_counters WHERE record_id = 70")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.GetInt(0, 0); n != 0 {
		t.Fatalf("%d slot rows for a key whose insert was rolled back", n)
	}
}

// TestOneAnswerWhenBackendBreaksAfterAnswer is the exactness issue's case
// 7: the backend connection breaks while the proxy prepares its own
// statement for a client's prepared increment, after the client already
// has its PREPARE answer. The client must get nothing more for that
// command (it once got an ERR as well, and the Go driver then failed with
// "busy buffer" on its next command): the connection just ends.
func TestOneAnswerWhenBackendBreaksAfterAnswer(t *testing.T) {
	setupDiffSchemas(t)
	cut := newPrepareCutter(t, testdb.Shared().Addr, 2)
	p := startProxy(t, func(c *proxy.Config) {
		c.Backend = cut.addr
		c.Rewriter = newRewriter(diffCatalog())
	})
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, ruledSchema, func(c *client.Conn) error { return c.SetCollation("utf8mb4_general_ci") })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stmt, err := c.Prepare("UPDATE repos SET downloads = downloads + ? WHERE id = ?")
	if err != nil {
		t.Fatalf("prepare: %v (the client's PREPARE is answered before the proxy's own)", err)
	}
	_ = stmt
	for deadline := time.Now().Add(5 * time.Second); !cut.fired.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the backend connection was not cut at the proxy's own PREPARE")
		}
	}
	// Whatever comes next on the socket: nothing, then the end.
	_ = c.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	pkt, err := c.Conn.ReadPacket()
	if err == nil {
		t.Fatalf("a second answer to the PREPARE: % x", pkt)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection stayed open after its backend ended: %v", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, gomysql.ErrBadConn) {
		t.Logf("read after the cut: %v", err)
	}
}

// prepareCutter relays connections to a backend and closes both sides of
// one when the proxy sends its nth COM_STMT_PREPARE on it.
type prepareCutter struct {
	addr  string
	fired atomic.Bool
}

func newPrepareCutter(t *testing.T, backend string, nth int) *prepareCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc := &prepareCutter{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			front, err := ln.Accept()
			if err != nil {
				return
			}
			back, err := net.Dial("tcp", backend)
			if err != nil {
				_ = front.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(front, back); _ = front.Close() }()
			go func() {
				defer wg.Done()
				defer func() { _ = back.Close(); _ = front.Close() }()
				prepares := 0
				head := make([]byte, 4)
				for {
					if _, err := io.ReadFull(front, head); err != nil {
						return
					}
					body := make([]byte, int(binary.LittleEndian.Uint32(append(head[:3:3], 0))))
					if _, err := io.ReadFull(front, body); err != nil {
						return
					}
					if head[3] == 0 && len(body) > 0 && body[0] == gomysql.COM_STMT_PREPARE {
						if prepares++; prepares == nth {
							pc.fired.Store(true)
							return
						}
					}
					if _, err := back.Write(append(head, body...)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return pc
}

// TestHandOuts is the exactness issue's case 2 as named: 4 clients × 5
// transactions, each BEGIN; UPDATE repos SET stars = stars + 1 WHERE id
// = ?; SELECT stars FROM repos WHERE id = ?; COMMIT. Directly all 20
// commit and read 20 distinct values (the second transaction waits for
// the first); through the proxy too, with prepared and with text
// statements, on a table whose rule is fresh (no transaction of this
// proxy has read its counters after an increment before).
func TestHandOuts(t *testing.T) {
	for _, params := range []string{"", "interpolateParams=true"} {
		name := "prepared"
		if params != "" {
			name = "text"
		}
		t.Run(name, func(t *testing.T) {
			const plain, ruled = "handout_plain", "handout_ruled"
			cat := loadedSetup(t, plain, ruled, []string{
				"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, stars INT NOT NULL DEFAULT 0)",
				"INSERT INTO repos (id, stars) VALUES (1, 100)",
			}, "table: "+ruled+".repos\nkey: id\ncounters: [stars]\nslots: 16\n")
			p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
			run := func(db *sql.DB) (values []int64, failures []string) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 5 {
							v, err := handOut(db)
							mu.Lock()
							if err != nil {
								failures = append(failures, err.Error())
							} else {
								values = append(values, v)
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				return values, failures
			}
			dsnParams := params
			direct := openDSN(t, testdb.Shared().DSN(testdb.User, testdb.Password, plain, dsnParams))
			proxied := openDSN(t, p.dsn(testdb.User, testdb.Password, ruled, dsnParams))
			for _, side := range []struct {
				name string
				db   *sql.DB
			}{{"direct", direct}, {"proxy", proxied}} {
				values, failures := run(side.db)
				if len(failures) > 0 {
					t.Errorf("%s: %d of 20 hand-outs failed: %v", side.name, len(failures), failures)
				}
				seen := map[int64]bool{}
				for _, v := range values {
					if seen[v] {
						t.Errorf("%s: value %d handed out twice", side.name, v)
					}
					seen[v] = true
				}
				var total int64
				if err := side.db.QueryRow("SELECT stars FROM repos WHERE id = 1").Scan(&total); err != nil {
					t.Fatal(err)
				}
				if want := 100 + int64(len(values)); total != want {
					t.Errorf("%s: total %d after %d committed hand-outs, want %d", side.name, total, len(values), want)
				}
				t.Logf("%s: %d committed, %d failed", side.name, len(values), len(failures))
			}
		})
	}
}

// handOut runs one hand-out transaction and returns the value it read.
func handOut(db *sql.DB) (int64, error) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return 0, err
	}
	var v int64
	_, err = conn.ExecContext(ctx, "UPDATE repos SET stars = stars + 1 WHERE id = ?", 1)
	if err != nil {
		err = fmt.Errorf("UPDATE: %w", err)
	} else if err = conn.QueryRowContext(ctx, "SELECT stars FROM repos WHERE id = ?", 1).Scan(&v); err != nil {
		err = fmt.Errorf("SELECT: %w", err)
	}
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return 0, err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return v, err
}
