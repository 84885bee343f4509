package executor

import (
	"sync"
	"testing"

	"github.com/slotproxy/slotproxy/rewrite"
)

// TestSlotUse: increments pick slots no one holds while there are any,
// and a released slot is free again.
func TestSlotUse(t *testing.T) {
	tbl := &rewrite.Table{Schema: "app", Name: "repos", Slots: 4}
	var u slotUse
	seen := map[int]bool{}
	for range 4 {
		s := u.pick(tbl)
		if seen[s] || s < 0 || s >= 4 {
			t.Fatalf("picked %d, held already or out of range (held: %v)", s, seen)
		}
		seen[s] = true
	}
	extra := u.pick(tbl) // all held: any
	u.release(ruleName(tbl), 2)
	u.release(ruleName(tbl), extra)
	if s := u.pick(tbl); s != 2 && s != extra {
		t.Fatalf("picked %d, want a released slot (2 or %d)", s, extra)
	}
	// A reload that changed the slot count: old holders release into
	// nothing.
	u.release(ruleName(tbl), 3)
	tbl2 := &rewrite.Table{Schema: "app", Name: "repos", Slots: 2}
	if s := u.pick(tbl2); s < 0 || s >= 2 {
		t.Fatalf("picked %d of 2", s)
	}
	u.release(ruleName(tbl2), 3)
}

// TestSlotUseConcurrent: concurrent holders never share a slot while there
// are enough (run with -race).
func TestSlotUseConcurrent(t *testing.T) {
	tbl := &rewrite.Table{Schema: "app", Name: "repos", Slots: 64}
	var u slotUse
	var mu sync.Mutex
	holders := map[int]int{}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				s := u.pick(tbl)
				mu.Lock()
				holders[s]++
				if holders[s] > 1 {
					t.Errorf("slot %d held twice with %d slots for 32 holders", s, tbl.Slots)
				}
				mu.Unlock()
				mu.Lock()
				holders[s]--
				mu.Unlock()
				u.release(ruleName(tbl), s)
			}
		}()
	}
	wg.Wait()
}
