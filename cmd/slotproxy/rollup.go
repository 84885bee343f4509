package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/rewrite"
)

// runRollup implements "slotproxy rollup": fold slot rows into their base
// rows, once or continuously.
func runRollup(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollup", "--config FILE [--backend HOST:PORT] [--once] [--all]",
		"Fold slot rows into their base rows (roll-up), as serve does in the\n"+
			"background: each record in one short transaction, slot rows locked with\n"+
			"SKIP LOCKED so any number of proxies and roll-ups can run at once.\n\n"+
			"Without --once it runs a pass every rollup.interval until SIGTERM or SIGINT.\n"+
			"--once runs a single pass of up to rollup.batch records per slot table.\n"+
			"--all repeats passes until no slot row is left (with --once: then exits);\n"+
			"run \"slotproxy rollup --all --once\" before removing a rule, so the base\n"+
			"columns hold the whole count.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML), which must set rules")
	fs.String("backend", "", "the MySQL server at `HOST:PORT` (overrides backend.address)")
	once := fs.Bool("once", false, "run once and exit")
	all := fs.Bool("all", false, "fold every slot row, not one batch")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg, set, err := adminConfig("rollup", *configPath, flagValue(fs, "backend"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	cat, err := catalog.Load(ctx, conn, set, cfg.SlotsTable)
	if err != nil {
		return err
	}
	opts := rollup.Options{Batch: cfg.Rollup.Batch, Logger: cfg.Logger(stderr)}
	if *once {
		var st rollup.Stats
		if *all {
			st, err = rollup.All(ctx, conn, cat, opts)
		} else {
			st, err = rollup.Once(ctx, conn, cat, opts)
		}
		fmt.Fprintf(stdout, "folded %d records, deleted %d idle slot rows and %d orphaned records, skipped %d locked; longest base-row lock %v\n",
			st.Folds, st.SlotRows, st.Orphans, st.Skipped, st.MaxLockHold)
		return err
	}
	logger := cfg.Logger(stderr)
	runRollupLoop(ctx, func() *config.Config { return cfg }, func() *rewrite.Catalog { return cat }, nil, *all, logger, nil)
	return nil
}

// runRollupLoop runs roll-up passes every rollup.interval until ctx ends,
// on a connection of its own, logging each pass that did something and
// passing each pass's outcome to observe (if set). cfg returns the current
// configuration: the admin account is read from it whenever the loop
// connects, rollup.interval and rollup.batch once at the start. partition,
// if set, returns the part of the slots the proxy's increments use, which
// each pass folds (the others' parts only when quiet: see
// rollup.Options.Partition).
func runRollupLoop(ctx context.Context, cfg func() *config.Config, cat func() *rewrite.Catalog, partition func() (int, int), all bool,
	logger *slog.Logger, observe func(rollup.Stats, error)) {
	dial := func(ctx context.Context) (*client.Conn, error) { return catalog.Connect(ctx, cfg()) }
	start := cfg()
	opts := rollup.Options{Batch: start.Rollup.Batch, Logger: logger, Partition: partition}
	if all {
		opts.Batch = 1 << 30
	}
	cluster := false
	if partition != nil {
		count, _ := partition()
		cluster = count > 1
	}
	interval := start.Rollup.Every(cluster)
	if b := minStaleness(cat()); b > 0 && b/2 < interval {
		// A pass must begin and end within reads: rolled_up's bound.
		interval = b / 2
	}
	tables := 0
	if c := cat(); c != nil {
		tables = len(c.Tables())
	}
	logger.Info("roll-up started", "interval", interval, "batch", opts.Batch, "tables", tables)
	// A summary at the default level now and then, so a running roll-up
	// says what it does without a line per pass.
	var sum rollup.Stats
	passes, failed := 0, 0
	last := time.Now()
	rollup.Loop(ctx, dial, cat, interval, opts, func(st rollup.Stats, err error) {
		if observe != nil {
			observe(st, err)
		}
		passes++
		switch {
		case err != nil:
			failed++
			logger.Warn("roll-up pass failed", "err", err)
		case st.Folds+st.Orphans+st.SlotRows+st.Skipped+st.Unfoldable > 0:
			logger.Debug("roll-up pass", "folds", st.Folds, "idle_slot_rows_deleted", st.SlotRows,
				"orphans", st.Orphans, "skipped", st.Skipped, "unfoldable", st.Unfoldable, "pending", st.Pending, "max_lock_hold", st.MaxLockHold)
		}
		sum.Folds += st.Folds
		sum.Orphans += st.Orphans
		sum.Skipped += st.Skipped
		sum.Unfoldable += st.Unfoldable
		sum.MaxLockHold = max(sum.MaxLockHold, st.MaxLockHold)
		if time.Since(last) >= rollupSummaryEvery {
			logger.Info("roll-up summary", "since", time.Since(last).Round(time.Second), "passes", passes, "failed_passes", failed,
				"folds", sum.Folds, "orphans", sum.Orphans, "skipped_busy", sum.Skipped, "unfoldable", sum.Unfoldable,
				"max_lock_hold", sum.MaxLockHold, "pending_records", st.Pending)
			sum, passes, failed, last = rollup.Stats{}, 0, 0, time.Now()
		}
	})
}

// rollupSummaryEvery is how often a running roll-up logs its summary.
var rollupSummaryEvery = time.Minute

// minStaleness is the smallest max_staleness of the tables of cat with
// reads: rolled_up, or 0 when there are none.
func minStaleness(cat *rewrite.Catalog) time.Duration {
	var b time.Duration
	if cat == nil {
		return 0
	}
	for _, t := range cat.Tables() {
		if t.RolledUp && !t.Shadow && (b == 0 || t.MaxStaleness < b) {
			b = t.MaxStaleness
		}
	}
	return b
}
