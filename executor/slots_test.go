package executor

import (
	"slices"
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

// TestSlotPartition: a proxy given index i of n picks only slots s with
// s % n == i, free ones first, of a rule with at least n slots; of a rule
// with fewer, any.
func TestSlotPartition(t *testing.T) {
	for _, tc := range []struct {
		part  SlotPartition
		slots int
		want  []int
	}{
		{SlotPartition{3, 0}, 16, []int{0, 3, 6, 9, 12, 15}},
		{SlotPartition{3, 1}, 16, []int{1, 4, 7, 10, 13}},
		{SlotPartition{3, 2}, 16, []int{2, 5, 8, 11, 14}},
		{SlotPartition{3, 2}, 3, []int{2}},
		{SlotPartition{3, 1}, 2, []int{0, 1}},
		{SlotPartition{1, 0}, 4, []int{0, 1, 2, 3}},
		{SlotPartition{}, 4, []int{0, 1, 2, 3}},
	} {
		tbl := &rewrite.Table{Schema: "app", Name: "repos", Slots: tc.slots}
		var u slotUse
		u.part.Store(&tc.part)
		got := map[int]bool{}
		for range len(tc.want) {
			s := u.pick(tbl)
			if got[s] {
				t.Errorf("%+v of %d slots: picked %d twice while others were free", tc.part, tc.slots, s)
			}
			got[s] = true
		}
		for range 50 { // all held: any of the partition's
			got[u.pick(tbl)] = true
		}
		var slots []int
		for s := range tc.slots {
			if got[s] {
				slots = append(slots, s)
			}
		}
		if !slices.Equal(slots, tc.want) || len(got) != len(tc.want) {
			t.Errorf("%+v of %d slots: picked %v, want %v", tc.part, tc.slots, slots, tc.want)
		}
	}
	for _, p := range []SlotPartition{{2, 2}, {0, 0}, {2, -1}, {-1, 0}} {
		if p != (SlotPartition{}) && p.Valid() {
			t.Errorf("%+v is valid", p)
		}
	}
}
