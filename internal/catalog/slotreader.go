package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/rewrite"
)

// SlotReader reads slot rows on connections of its own (the admin
// account's), in autocommit: each read sees every row committed when it
// runs. It is the executor's SlotReader (folds inside clients' REPEATABLE
// READ transactions). Safe for concurrent use; connections are dialed on
// demand and at most maxIdle are kept between reads.
type SlotReader struct {
	connect func(context.Context) (*client.Conn, error)
	maxIdle int

	mu     sync.Mutex
	idle   []*client.Conn
	closed bool
}

// NewSlotReader returns a SlotReader that dials with connect.
func NewSlotReader(connect func(context.Context) (*client.Conn, error), maxIdle int) *SlotReader {
	return &SlotReader{connect: connect, maxIdle: max(maxIdle, 1)}
}

// ReadSlotRows runs query, a SELECT of record_type, record_id, slot and
// count, and returns its rows. A connection that fails is dropped.
func (r *SlotReader) ReadSlotRows(ctx context.Context, query string) ([]rewrite.SlotRow, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	_ = c.SetDeadline(deadline)
	res, err := c.Execute(query)
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading slot rows: %w", err)
	}
	defer r.put(c)
	if res.Resultset == nil {
		return nil, errors.New("reading slot rows: no result set")
	}
	rows := make([]rewrite.SlotRow, 0, len(res.Values))
	for i := range res.Values {
		var v [4]string
		for j := range v {
			if v[j], err = res.GetString(i, j); err != nil {
				return nil, fmt.Errorf("reading slot rows: %w", err)
			}
		}
		rt, err1 := strconv.Atoi(v[0])
		slot, err2 := strconv.Atoi(v[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("reading slot rows: %w", err)
		}
		rows = append(rows, rewrite.SlotRow{RecordType: rt, Key: v[1], Slot: slot, Count: v[3]})
	}
	return rows, nil
}

func (r *SlotReader) get(ctx context.Context) (*client.Conn, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("slot reader closed")
	}
	if n := len(r.idle); n > 0 {
		c := r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return c, nil
	}
	r.mu.Unlock()
	c, err := r.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("slot reader: %w", err)
	}
	return c, nil
}

func (r *SlotReader) put(c *client.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.idle) >= r.maxIdle {
		_ = c.Close()
		return
	}
	r.idle = append(r.idle, c)
}

// Close closes the idle connections; reads after it fail.
func (r *SlotReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, c := range r.idle {
		_ = c.Close()
	}
	r.idle = nil
}
