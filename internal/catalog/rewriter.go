package catalog

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/slotproxy/slotproxy/rewrite"
)

// RowAlias reports whether upserts for a backend whose greeting announced
// serverVersion should use the row alias (INSERT … AS new ON DUPLICATE KEY
// UPDATE count = count + new.count) instead of VALUES(): true for MySQL
// 8.0.20 and later, which deprecate VALUES() there, and false for MariaDB
// (whose version string contains "MariaDB", possibly after a "5.5.5-"
// prefix), which has no row alias, and for anything unparsable.
func RowAlias(serverVersion string) bool {
	if strings.Contains(strings.ToLower(serverVersion), "mariadb") {
		return false
	}
	var v [3]int
	rest := serverVersion
	for i := range v {
		n := 0
		for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
			n++
		}
		if n == 0 {
			return false
		}
		v[i], _ = strconv.Atoi(rest[:n])
		rest = rest[n:]
		if i < 2 {
			if !strings.HasPrefix(rest, ".") {
				return false
			}
			rest = rest[1:]
		}
	}
	switch {
	case v[0] != 8:
		return v[0] > 8
	case v[1] != 0:
		return v[1] > 0
	default:
		return v[2] >= 20
	}
}

// NewRewriter returns a rewriter for cat that generates SQL suited to the
// backend whose greeting announced serverVersion (see RowAlias).
func NewRewriter(cat *rewrite.Catalog, serverVersion string) *rewrite.Rewriter {
	return rewrite.New(cat, rewrite.Options{RowAlias: RowAlias(serverVersion)})
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
