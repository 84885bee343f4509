package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// schemaTimeout bounds loading the catalog: connecting as the admin
// account, reading the schema and registering record types.
const schemaTimeout = time.Minute

// adminConfig loads the configuration at path for a command that works on
// the rules through the admin account (migrate, explain), applies the
// --backend override (nil when not given) and loads the rules.
func adminConfig(cmd, path string, backend *string) (*config.Config, *rules.Set, error) {
	if path == "" {
		return nil, nil, usagef("%s: --config is required", cmd)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	if backend != nil {
		if err := config.CheckAddress(*backend); err != nil {
			return nil, nil, usagef("%s: --backend: %w", cmd, err)
		}
		cfg.Backend.Address = *backend
	}
	if cfg.Backend.Address == "" {
		return nil, nil, fmt.Errorf("%s: backend: not set (add it to the file or pass --backend)", path)
	}
	if cfg.Rules == "" {
		return nil, nil, fmt.Errorf("%s: rules: not set; %s works on the rules in that directory", path, cmd)
	}
	set, err := rules.LoadDir(cfg.Rules)
	if err != nil {
		return nil, nil, err
	}
	return cfg, set, nil
}

// loadRewriter connects to the backend as the admin account, checks set
// against the live schema, and returns a rewriter for it and the backend's
// version. With log set (a reload of a running proxy), a table whose
// schema gained a side effect that slotted increments would go around is
// not refused: its increments run on the base row, and each such problem
// is logged as an error (catalog.LoadDegrading).
func loadRewriter(ctx context.Context, cfg *config.Config, set *rules.Set, log *slog.Logger) (*rewrite.Rewriter, string, error) {
	ctx, cancel := context.WithTimeout(ctx, schemaTimeout)
	defer cancel()
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	var cat *rewrite.Catalog
	if log == nil {
		cat, err = catalog.Load(ctx, conn, set, cfg.SlotsTable)
	} else {
		var notes []string
		cat, notes, err = catalog.LoadDegrading(ctx, conn, set, cfg.SlotsTable)
		for _, n := range notes {
			log.Error("a ruled table's schema changed", "problem", n)
		}
	}
	if err != nil {
		return nil, "", err
	}
	version := conn.GetServerVersion()
	return catalog.NewRewriter(cat, version), version, nil
}
