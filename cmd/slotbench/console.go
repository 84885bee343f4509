package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// console is stderr shared by the live progress line (rewritten in place
// with \r) and log output, which first clears the progress line. When
// stderr is not a terminal (a CI log, a pipe), progress is a plain line
// every few seconds instead.
type console struct {
	mu     sync.Mutex
	w      io.Writer
	status int // length of the progress line on screen; 0 if none
	plain  bool
	last   time.Time // of the last plain progress line
}

func newConsole(w io.Writer) *console {
	c := &console{w: w, plain: true}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			c.plain = false
		}
	}
	return c
}

// plainEvery is how often a plain progress line is printed.
const plainEvery = 2 * time.Second

// progress replaces the progress line with s.
func (c *console) progress(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plain {
		if time.Since(c.last) >= plainEvery {
			fmt.Fprintln(c.w, strings.TrimSpace(s))
			c.last = time.Now()
		}
		return
	}
	pad := ""
	if n := c.status - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(c.w, "\r%s%s", s, pad)
	c.status = len(s)
}

// clear removes the progress line.
func (c *console) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *console) clearLocked() {
	if c.status > 0 {
		fmt.Fprintf(c.w, "\r%s\r", strings.Repeat(" ", c.status))
		c.status = 0
	}
}

// Write writes log output on lines of its own.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	return c.w.Write(p)
}

// logf prints one line.
func (c *console) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	c.Write([]byte(s))
}
