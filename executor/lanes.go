package executor

import "sync"

// lanes queue, by key, the members that arrive while an operation of their
// key runs (a record's coalesced increment, a consolidated read), as
// InnoDB's group commit queues commits: no member waits when nothing of
// its key runs (it opens the lane and runs at once), those that arrive
// while something runs queue, and when it is done the queue is the next
// batch. Safe for concurrent use.
type lanes[M any] struct {
	mu sync.Mutex
	m  map[string][]M // open lanes: the members queued in each
}

// enter opens key's lane when it is closed (first: the caller runs at
// once), or queues m in it.
func (l *lanes[M]) enter(key string, m M) (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]M{}
	}
	q, open := l.m[key]
	if !open {
		l.m[key] = nil
		return true
	}
	l.m[key] = append(q, m)
	return false
}

// leave ends what runs in key's lane: it returns the members queued
// meanwhile, the next batch, whose first member must run it (the lane
// stays open until that one leaves), or nil and closes the lane.
func (l *lanes[M]) leave(key string) (batch []M) {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch = l.m[key]
	if len(batch) == 0 {
		delete(l.m, key)
		return nil
	}
	l.m[key] = nil
	return batch
}
