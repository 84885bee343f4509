package main

import (
	"context"
	"fmt"
	"io"

	"github.com/slotproxy/slotproxy/internal/catalog"
)

// runMigrate implements "slotproxy migrate": it creates the slot table and
// the record-type registry in every schema that has rules, printing each
// statement on stdout, and registers a record type for every counter.
func runMigrate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "--config FILE [--backend HOST:PORT]",
		"Create the slot table (slots_table) and the record-type registry\n"+
			"(slotproxy_record_types) in every schema that has rules, and register a\n"+
			"record type for every counter. Every statement is printed before it runs;\n"+
			"they are CREATE TABLE IF NOT EXISTS, so migrate can run any number of times,\n"+
			"also while proxies are serving. Connects as the admin account (admin.user,\n"+
			"admin.password or SLOTPROXY_ADMIN_PASSWORD).\n\n"+
			"Afterwards the rules are checked against the schema as serve checks them;\n"+
			"a problem is reported on stderr as a warning (serve will refuse to start\n"+
			"until it is fixed) without failing the migration.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML), which must set rules")
	fs.String("backend", "", "the MySQL server at `HOST:PORT` (overrides backend.address)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg, set, err := adminConfig("migrate", *configPath, flagValue(fs, "backend"))
	if err != nil {
		return err
	}
	if set.Len() == 0 {
		return fmt.Errorf("%s: no rule files (*.yaml); nothing to migrate", cfg.Rules)
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaTimeout)
	defer cancel()
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := catalog.Migrate(ctx, conn, set, cfg.SlotsTable, stdout); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := catalog.Load(ctx, conn, set, cfg.SlotsTable); err != nil {
		printWarning(stderr, fmt.Errorf("migrated, but serve will refuse to start until the rules match the schema: %w", err))
	}
	return nil
}
