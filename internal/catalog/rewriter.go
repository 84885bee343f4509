package catalog

import (
	"context"
	"log/slog"
	"sync"

	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/rewrite"
)

// NewRewriter returns a rewriter for cat that generates SQL suited to the
// backend whose greeting announced serverVersion (see dialect.Parse).
func NewRewriter(cat *rewrite.Catalog, serverVersion string) *rewrite.Rewriter {
	return rewrite.New(cat, rewrite.Options{Dialect: dialect.Parse(serverVersion)})
}

// Reloader rebuilds the rewriter after DDL, one rebuild at a time. Its
// Trigger method fits proxy.Config.OnDDL.
type Reloader struct {
	ctx   context.Context
	load  func(context.Context) (*rewrite.Rewriter, error)
	apply func(*rewrite.Rewriter)
	log   *slog.Logger

	mu        sync.Mutex
	done      *sync.Cond // broadcast when a load ends
	running   bool       // a load is running
	requested uint64     // Trigger calls so far
	loaded    uint64     // every call up to this one has had a load that started after it
}

// NewReloader returns a Reloader that calls load and hands a new rewriter to
// apply (such as (*proxy.Server).SetRewriter). When load fails the error
// is logged and the previous rewriter stays. ctx ends the reloads: once it
// is done, Trigger does nothing and a load in progress is cut short.
func NewReloader(ctx context.Context, load func(context.Context) (*rewrite.Rewriter, error),
	apply func(*rewrite.Rewriter), logger *slog.Logger) *Reloader {
	r := &Reloader{ctx: ctx, load: load, apply: apply, log: logger}
	r.done = sync.NewCond(&r.mu)
	return r
}

// Trigger reloads and returns once a load that started after the call has
// ended (and its rewriter is applied, unless it failed): a session that
// ran DDL calls it before reading its next command, so that its next
// statement is planned with the schema the DDL made. Calls that arrive
// while a load runs share the one load after it, which reads the schema
// after all of them.
func (r *Reloader) Trigger() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requested++
	mine := r.requested
	for r.loaded < mine {
		if r.running {
			r.done.Wait()
			continue
		}
		r.running = true
		covers := r.requested
		r.mu.Unlock()
		r.loadOnce()
		r.mu.Lock()
		r.running = false
		r.loaded = covers
		r.done.Broadcast()
	}
}

func (r *Reloader) loadOnce() {
	if r.ctx.Err() != nil {
		return
	}
	rw, err := r.load(r.ctx)
	if err != nil {
		r.log.Error("reloading the catalog after DDL failed; keeping the previous one", "err", err)
		return
	}
	r.apply(rw)
	r.log.Info("reloaded the catalog after DDL", "tables", len(rw.Catalog().Tables()))
}
