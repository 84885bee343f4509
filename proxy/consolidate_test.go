package proxy_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestConsolidatedReads: 16 clients read one hot record's counter over
// and over while 4 others increment it, through a proxy whose identical
// concurrent reads share one query (consolidate: true). Every read sees at
// least every increment acknowledged before it was sent and at most those
// sent before it was answered; SHOW WARNINGS after a read shows nothing
// although the statement before it left a warning on the connection, and
// after a read that warns shows its warning, as directly; ROW_COUNT()
// after a read is -1; the total is exact; and reads were shared.
func TestConsolidatedReads(t *testing.T) {
	p := startRuledProxy(t)
	const readers, writers, reads, writes, id = 16, 4, 150, 150, 3
	db := openDSN(t, p.dsn(testdb.User, testdb.Password, ruledSchema, ""))
	db.SetMaxOpenConns(readers + writers)
	db.SetMaxIdleConns(readers + writers)
	read := fmt.Sprintf("SELECT downloads FROM repos WHERE id = %d", id)
	var base int64
	if err := db.QueryRow(read).Scan(&base); err != nil {
		t.Fatal(err)
	}
	var sent, acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, readers+writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range writes {
				sent.Add(1)
				if _, err := db.Exec(hotIncrement("downloads", id, 1)); err != nil {
					errs <- err
					return
				}
				acked.Add(1)
			}
		}()
	}
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			conn, err := db.Conn(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			warnings := func() (int, error) {
				rows, err := conn.QueryContext(ctx, "SHOW WARNINGS")
				if err != nil {
					return 0, err
				}
				defer rows.Close()
				n := 0
				for rows.Next() {
					n++
				}
				return n, rows.Err()
			}
			for i := range reads {
				warned := (r+i)%7 == 0
				if warned {
					var v int64
					if err := conn.QueryRowContext(ctx, "SELECT CAST('7x' AS SIGNED)").Scan(&v); err != nil {
						errs <- err
						return
					}
				}
				q, warns := read, 0
				if (r+i)%11 == 0 {
					// A read with a warning of its own (1292).
					q, warns = fmt.Sprintf("SELECT downloads + CAST('0x' AS SIGNED) FROM repos WHERE id = %d", id), 1
				}
				lo := base + acked.Load()
				var v int64
				if err := conn.QueryRowContext(ctx, q).Scan(&v); err != nil {
					errs <- err
					return
				}
				if hi := base + sent.Load(); v < lo || v > hi {
					errs <- fmt.Errorf("%s read %d, want between %d (acknowledged before it) and %d (sent)", q, v, lo, hi)
					return
				}
				if warned || warns > 0 {
					n, err := warnings()
					if err != nil {
						errs <- err
						return
					}
					if n != warns {
						errs <- fmt.Errorf("SHOW WARNINGS after %s shows %d warnings, want %d", q, n, warns)
						return
					}
				}
				if i%13 == 0 {
					var rc int64
					if err := conn.QueryRowContext(ctx, "SELECT ROW_COUNT()").Scan(&rc); err != nil {
						errs <- err
						return
					}
					if rc != -1 {
						errs <- fmt.Errorf("ROW_COUNT() after %s is %d, want -1", q, rc)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total int64
	if err := db.QueryRow(read).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if want := base + writers*writes; total != want {
		t.Fatalf("total %d, want %d", total, want)
	}
	st := p.srv.Stats()
	if st.ConsolidatedReads == 0 {
		t.Fatalf("no read was consolidated: %+v", st)
	}
	t.Logf("%d of %d reads answered by a shared query", st.ConsolidatedReads, readers*reads)
}
