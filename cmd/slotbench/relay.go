package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// relay is the baseline every proxied number is compared with: a plain TCP
// relay that copies bytes both ways with io.Copy, one goroutine per
// direction, without looking at them. Whatever the proxy costs beyond this
// is the price of understanding the protocol.
type relay struct {
	ln      net.Listener
	backend string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startRelay listens on a free loopback port and relays every connection to
// backend until close.
func startRelay(backend string) (*relay, error) { return listenRelay("127.0.0.1:0", backend) }

// listenRelay is startRelay on the address addr.
func listenRelay(addr, backend string) (*relay, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if !r.track(c) {
			c.Close()
			return
		}
		r.wg.Add(1)
		go r.handle(c)
	}
}

// track registers c so that close can end it; false once closed.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// handle relays one connection. Go's TCP connections have TCP_NODELAY set
// by default, on both sides.
func (r *relay) handle(client net.Conn) {
	defer r.wg.Done()
	defer r.untrack(client)
	defer client.Close()
	backend, err := net.DialTimeout("tcp", r.backend, 5*time.Second)
	if err != nil {
		return
	}
	if !r.track(backend) {
		backend.Close()
		return
	}
	defer r.untrack(backend)
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(backend, client)
		backend.Close() // the client left: so does the backend connection
	}()
	io.Copy(client, backend)
	client.Close()
	<-done
}

// close stops accepting, closes every connection and waits for the
// goroutines.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}
