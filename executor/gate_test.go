package executor

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGate: at most n statements hold a turn; a waiter gets the turn given
// back; a queue that moves is waited out however long it is; waiters run
// without a turn only when no turn was given back for the wait.
func TestGate(t *testing.T) {
	if NewGate(0, time.Second) != nil {
		t.Fatal("a gate of 0 turns is not nil")
	}
	var none *Gate
	if entered, waited, over := none.enter(); entered || waited || over {
		t.Fatal("a nil gate held a statement back")
	}

	// A queue that moves: 2 turns, 20 statements of 30 ms each, a wait of
	// 100 ms. The last waits ~270 ms but never overflows.
	g := NewGate(2, 100*time.Millisecond)
	var running, most, overflows atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, over := g.enter()
			if over {
				overflows.Add(1)
				return
			}
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(30 * time.Millisecond)
			running.Add(-1)
			g.leave()
		}()
	}
	wg.Wait()
	if most.Load() > 2 || most.Load() < 1 {
		t.Fatalf("%d statements held a turn at once, want at most 2", most.Load())
	}
	if overflows.Load() != 0 {
		t.Fatalf("%d statements overflowed a moving queue", overflows.Load())
	}

	// Every holder stuck: a waiter runs without a turn after the wait.
	g = NewGate(1, 50*time.Millisecond)
	g.enter()
	start := time.Now()
	entered, waited, over := g.enter()
	if entered || !waited || !over || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("stuck holder: entered %v waited %v overflowed %v after %s", entered, waited, over, time.Since(start))
	}
	// A turn given back goes to the next waiter.
	done := make(chan bool)
	go func() {
		entered, waited, over := g.enter()
		if entered {
			g.leave()
		}
		done <- waited && !over && entered
	}()
	time.Sleep(10 * time.Millisecond)
	g.leave()
	if !<-done {
		t.Fatal("the waiter did not get the turn given back")
	}
}
