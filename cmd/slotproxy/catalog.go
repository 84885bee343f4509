package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/cluster"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/proxy"
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
// version. With degrade (a reload of a running proxy), a table whose
// schema gained a side effect that slotted increments would go around is
// not refused: its increments run on the base row, and each such problem
// is logged as an error (catalog.LoadDegrading). Bounds of rules that are
// not in force are logged as warnings.
func loadRewriter(ctx context.Context, cfg *config.Config, set *rules.Set, log *slog.Logger, degrade bool) (*rewrite.Rewriter, string, error) {
	ctx, cancel := context.WithTimeout(ctx, schemaTimeout)
	defer cancel()
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	var cat *rewrite.Catalog
	if !degrade {
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
	for _, n := range cat.BoundsNotInForce {
		log.Warn("a rule's bounds are not in force", "problem", n)
	}
	version := conn.GetServerVersion()
	return catalog.NewRewriter(cat, version), version, nil
}

// applySlotPartition resolves cfg.SlotPartition, asking the backend (as the
// admin account) for what is auto, and applies it to srv: from then on
// increments pick only their part of every rule's slots. A backend that
// cannot tell, or a part that does not fit, leaves every slot to pick
// from, with a warning.
func applySlotPartition(ctx context.Context, cfg *config.Config, srv *proxy.Server, log *slog.Logger) {
	count, index, from, err := resolveSlotPartition(ctx, cfg)
	if err != nil {
		log.Warn("cannot tell the backend's place in a cluster: increments pick from every slot", "err", err)
		_ = srv.SetSlotPartition(1, 0)
		return
	}
	if err := srv.SetSlotPartition(count, index); err != nil {
		log.Warn("slot partition does not fit: increments pick from every slot", "count", count, "index", index, "from", from)
		_ = srv.SetSlotPartition(1, 0)
		return
	}
	if count > 1 {
		log.Info("slot partition: increments pick slots s with s % count = index", "count", count, "index", index, "from", from)
	}
}

// resolveSlotPartition returns cfg.SlotPartition with what is auto asked of
// the backend, and where it came from (the backend's place in its cluster,
// or "slot_partition").
func resolveSlotPartition(ctx context.Context, cfg *config.Config) (count, index int, from string, err error) {
	count, index = cfg.SlotPartition.Count, cfg.SlotPartition.Index
	if count != config.Auto && index != config.Auto {
		return count, index, "slot_partition", nil
	}
	node, err := detectNode(ctx, cfg)
	if err != nil {
		return 0, 0, "", err
	}
	if count == config.Auto {
		count = node.Size
	}
	if index == config.Auto {
		index = node.Index
	}
	return count, index, node.String(), nil
}

// partitionRecheck is how often serve asks its backend again for its place
// in a cluster (see watchSlotPartition).
const partitionRecheck = 5 * time.Second

// watchSlotPartition keeps an automatic slot partition (slot_partition
// auto, the default) in step with the cluster's membership: every
// partitionRecheck it asks the backend again for its place, and applies a
// part that changed (a node left or joined, and the nodes' indexes moved),
// so that the proxies of the nodes left share the slots among them again
// instead of two of them picking from one part. A backend that cannot
// tell (unreachable, not in the primary component) keeps the part as it
// is. A backend found to be a single server is not asked again. It
// returns when ctx ends; cfg gives the configuration in force (reloads may
// change it).
func watchSlotPartition(ctx context.Context, cfg func() *config.Config, srv *proxy.Server, log *slog.Logger) {
	t := time.NewTicker(partitionRecheck)
	defer t.Stop()
	single := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c := cfg()
		if single || c.SlotPartition.Count != config.Auto && c.SlotPartition.Index != config.Auto {
			continue
		}
		count, index, from, err := resolveSlotPartition(ctx, c)
		if err != nil {
			log.Debug("cannot tell the backend's place in a cluster: the slot partition stays", "err", err)
			continue
		}
		single = from == cluster.KindSingle
		if count <= 1 {
			count, index = 1, 0
		}
		was, wasIndex := srv.SlotPartition()
		if was <= 1 {
			was, wasIndex = 1, 0
		}
		if count == was && index == wasIndex {
			continue
		}
		if err := srv.SetSlotPartition(count, index); err != nil {
			log.Warn("slot partition does not fit: the slot partition stays", "count", count, "index", index, "from", from)
			continue
		}
		log.Info("slot partition changed: the cluster's membership changed", "count", count, "index", index,
			"was_count", was, "was_index", wasIndex, "from", from)
	}
}

// detectNode asks the backend where it stands in its cluster.
func detectNode(ctx context.Context, cfg *config.Config) (cluster.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, schemaTimeout)
	defer cancel()
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return cluster.Node{}, err
	}
	defer conn.Close()
	return cluster.Detect(conn)
}
