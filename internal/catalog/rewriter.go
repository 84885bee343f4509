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

	mu      sync.Mutex
	running bool // a Trigger is reloading
	again   bool // another Trigger came in meanwhile: reload once more
}

// NewReloader returns a Reloader that calls load and hands a new rewriter to
// apply (such as (*proxy.Server).SetRewriter). When load fails the error
// is logged and the previous rewriter stays. ctx ends the reloads: once it
// is done, Trigger does nothing and a load in progress is cut short.
func NewReloader(ctx context.Context, load func(context.Context) (*rewrite.Rewriter, error),
	apply func(*rewrite.Rewriter), logger *slog.Logger) *Reloader {
	return &Reloader{ctx: ctx, load: load, apply: apply, log: logger}
}

// Trigger reloads, unless a reload is already running: then that one runs
// once more when it is done, since it may have read the schema before the
// DDL that prompted this call. So calls that arrive together cost at most
// two loads, and the last load starts after the last call. Trigger returns
// when its reloading is done, or at once when it left it to another.
func (r *Reloader) Trigger() {
	r.mu.Lock()
	if r.running {
		r.again = true
		r.mu.Unlock()
		return
	}
	r.running = true
	r.mu.Unlock()
	for {
		if r.ctx.Err() == nil {
			if rw, err := r.load(r.ctx); err != nil {
				r.log.Error("reloading the catalog after DDL failed; keeping the previous one", "err", err)
			} else {
				r.apply(rw)
				r.log.Info("reloaded the catalog after DDL", "tables", len(rw.Catalog().Tables()))
			}
		}
		r.mu.Lock()
		if !r.again {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.again = false
		r.mu.Unlock()
	}
}
