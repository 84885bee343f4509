package executor

import (
	"math/big"
	"sync"
	"testing"
	"time"
)

// TestCoalescerLanes: the first increment of a lane runs at once; those
// that arrive while it runs form one batch, led by the first of them, once
// it leaves; the lane closes when nothing is queued; lanes are independent.
func TestCoalescerLanes(t *testing.T) {
	var c coalescer
	newMember := func(d int64) *member {
		return &member{delta: big.NewInt(d), done: make(chan turn, 1)}
	}
	if first, _ := c.enter("a", newMember(1)); !first {
		t.Fatal("the first increment of lane a queued")
	}
	if first, _ := c.enter("b", newMember(1)); !first {
		t.Fatal("the first increment of lane b queued behind lane a")
	}
	// Three arrive while a's first runs: they wait.
	var wg sync.WaitGroup
	turns := make([]turn, 3)
	ms := []*member{newMember(2), newMember(3), newMember(4)}
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, tr := c.enter("a", m)
			if first {
				t.Errorf("member %d ran at once while lane a was busy", i)
			}
			turns[i] = tr
		}()
		// In order: wait until it is queued.
		for deadline := time.Now().Add(5 * time.Second); ; {
			c.lanes.mu.Lock()
			n := len(c.lanes.m["a"])
			c.lanes.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	c.leave("a") // the first is done: the queue becomes a batch
	// Its leader is the first queued; the others wait for the leader's
	// answer, which the test gives as runBatch would.
	res := &batchResult{matched: 1}
	for _, m := range ms[1:] {
		m.done <- turn{ok: res}
	}
	wg.Wait()
	if len(turns[0].lead) != 3 || turns[0].lead[0] != ms[0] || turns[0].lead[1] != ms[1] || turns[0].lead[2] != ms[2] {
		t.Fatalf("the batch led by the first queued: %+v", turns[0])
	}
	if turns[1].ok != res || turns[2].ok != res {
		t.Fatalf("members got %+v and %+v, want the batch's result", turns[1], turns[2])
	}
	// The batch's leader leaves with nothing queued: the lane closes, and
	// the next increment runs at once.
	c.leave("a")
	if first, _ := c.enter("a", newMember(1)); !first {
		t.Fatal("an increment queued on a lane with nothing running")
	}
	c.leave("a")
	c.leave("b")
	if len(c.lanes.m) != 0 {
		t.Fatalf("lanes left open: %v", c.lanes.m)
	}
}
