package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// retiredSuffix names the slot table while uninstall folds it: the slot
// table renamed so that nothing writes it any more.
const retiredSuffix = "_uninstalling"

// uninstallLockWait bounds how long uninstall waits for the metadata lock
// of a slot table that open transactions hold, per attempt (seconds).
const uninstallLockWait = 30

// runUninstall implements "slotproxy uninstall": take slotproxy out of the
// database. For every schema with rules it renames the slot table (from
// then on no proxy can add slot rows: a proxy still serving with rules gets
// error 1146 for its counter statements, so nothing is lost silently),
// folds every slot row into its base row, checks that no count is left,
// then drops the renamed slot table and the record-type registry. An
// interrupted run is taken up where it stopped by running it again.
func runUninstall(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("uninstall", "--config FILE [--backend HOST:PORT] [--yes]",
		"Take slotproxy out of the database: fold every slot row into its base row,\n"+
			"then drop the slot table (slots_table) and the record-type registry\n"+
			"(slotproxy_record_types) of every schema that has rules. Afterwards the base\n"+
			"columns hold every total, and applications can use the database directly.\n\n"+
			"Point the applications' DSN at the database (backend.address) first: the\n"+
			"slot table is renamed (to slots_table"+retiredSuffix+") before it is folded,\n"+
			"so a proxy still serving with rules gets error 1146 for counter statements\n"+
			"from then on instead of adding slot rows nobody would fold. The rename waits\n"+
			"for open transactions that wrote slot rows. Increments made directly while\n"+
			"it runs are exact; reads made directly miss the slot rows not folded yet.\n\n"+
			"Without --yes it only prints what it would do. It uses the admin account and\n"+
			"checks the rules as rollup does; slot rows of counters no rule names stop it\n"+
			"before anything is dropped (put their rules back with mode: shadow). Run it\n"+
			"again to finish an interrupted uninstall.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML), which must set rules")
	fs.String("backend", "", "the MySQL server at `HOST:PORT` (overrides backend.address)")
	yes := fs.Bool("yes", false, "fold and drop; without it, only print what would be done")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg, set, err := adminConfig("uninstall", *configPath, flagValue(fs, "backend"))
	if err != nil {
		return err
	}
	retired := cfg.SlotsTable + retiredSuffix
	if len(retired) > 64 {
		return fmt.Errorf("uninstall: slots_table %q is too long to rename to %q (64 characters at most)", cfg.SlotsTable, retired)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()

	schemas := ruledSchemas(set)
	states := make([]schemaState, len(schemas))
	for i, s := range schemas {
		if states[i], err = readSchemaState(conn, s, cfg.SlotsTable, retired); err != nil {
			return fmt.Errorf("uninstall: %w", err)
		}
		fmt.Fprintln(stdout, states[i].describe(cfg.SlotsTable, retired))
	}
	if !*yes {
		fmt.Fprintln(stdout, "nothing done: run again with --yes to fold every slot row and drop these tables")
		return nil
	}
	// The rules must match the schema before anything changes.
	renamed, slotTables := false, false
	for _, st := range states {
		if st.live && st.retired {
			return fmt.Errorf("uninstall: schema %s has both %s and %s (an interrupted uninstall, then migrate?): fold one into the other by hand or drop the empty one, then run uninstall again",
				quoteIdent(st.schema), cfg.SlotsTable, retired)
		}
		if st.keyedLive && st.keyedRetired {
			return fmt.Errorf("uninstall: schema %s has both %s and %s (an interrupted uninstall, then migrate?): fold one into the other by hand or drop the empty one, then run uninstall again",
				quoteIdent(st.schema), cfg.SlotsTable+rewrite.KeyedSlotsSuffix, retired+rewrite.KeyedSlotsSuffix)
		}
		renamed = renamed || st.retired
		slotTables = slotTables || st.live || st.retired || st.keyedLive || st.keyedRetired
	}
	if slotTables {
		if err := foldAway(ctx, conn, cfg, set, states, renamed, retired, stdout, stderr); err != nil {
			return err
		}
	}
	// Drop.
	for _, s := range states {
		for _, t := range []struct {
			name string
			drop bool
		}{{retired, s.live || s.retired}, {retired + rewrite.KeyedSlotsSuffix, s.keyedLive || s.keyedRetired}, {config.RecordTypesTable, s.registry}} {
			if !t.drop {
				continue
			}
			q := fmt.Sprintf("DROP TABLE %s.%s", quoteIdent(s.schema), quoteIdent(t.name))
			if _, err := conn.Execute(q); err != nil {
				return fmt.Errorf("uninstall: %s: %w", q, err)
			}
			fmt.Fprintln(stdout, q)
		}
	}
	fmt.Fprintln(stdout, "done: no slot table is left; the base columns hold every total")
	return nil
}

// foldAway renames the slot table of every schema in states that has it
// (unless an interrupted run did: renamed), folds every slot row of the
// renamed tables into the base rows, and checks that none holds a count.
func foldAway(ctx context.Context, conn *client.Conn, cfg *config.Config, set *rules.Set, states []schemaState, renamed bool, retired string,
	stdout, stderr io.Writer) error {
	if !renamed {
		if _, err := catalog.Load(ctx, conn, set, cfg.SlotsTable); err != nil {
			return err
		}
	}
	// 1. Rename: from now on nothing writes slot rows.
	if _, err := conn.Execute("SET SESSION lock_wait_timeout = " + strconv.Itoa(uninstallLockWait)); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	for i, st := range states {
		if st.keyedLive {
			// The keyed slot table first: the slot table's rename is what
			// an interrupted run takes up from.
			q := fmt.Sprintf("RENAME TABLE %s.%s TO %s.%s", quoteIdent(st.schema), quoteIdent(cfg.SlotsTable+rewrite.KeyedSlotsSuffix),
				quoteIdent(st.schema), quoteIdent(retired+rewrite.KeyedSlotsSuffix))
			if _, err := conn.Execute(q); err != nil {
				return fmt.Errorf("uninstall: %s: %w (open transactions hold the slot table: run uninstall again once they end)", q, err)
			}
			states[i].keyedLive, states[i].keyedRetired = false, true
			fmt.Fprintf(stdout, "%s: from now on counter statements of tables keyed by several columns or strings through a proxy with these rules fail (error 1146)\n", q)
		}
		if !st.live {
			continue
		}
		q := fmt.Sprintf("RENAME TABLE %s.%s TO %s.%s", quoteIdent(st.schema), quoteIdent(cfg.SlotsTable), quoteIdent(st.schema), quoteIdent(retired))
		if _, err := conn.Execute(q); err != nil {
			return fmt.Errorf("uninstall: %s: %w (open transactions hold the slot table: run uninstall again once they end)", q, err)
		}
		states[i].live, states[i].retired = false, true
		fmt.Fprintf(stdout, "%s: from now on counter statements through a proxy with these rules fail (error 1146)\n", q)
	}
	// 2. Fold every slot row into its base row.
	cat, err := catalog.Load(ctx, conn, set, retired)
	if err != nil {
		return fmt.Errorf("uninstall: loading the rules with the renamed slot table: %w", err)
	}
	st, err := rollup.All(ctx, conn, cat, rollup.Options{Batch: cfg.Rollup.Batch, Logger: cfg.Logger(stderr)})
	fmt.Fprintf(stdout, "folded %d records into their base rows (%d orphaned records deleted)\n", st.Folds, st.Orphans)
	if err != nil {
		return fmt.Errorf("uninstall: folding: %w", err)
	}
	// 3. Nothing may be left that holds a count.
	for _, s := range states {
		for _, t := range []struct {
			name string
			ok   bool
		}{{retired, s.retired}, {retired + rewrite.KeyedSlotsSuffix, s.keyedRetired}} {
			if !t.ok {
				continue
			}
			left, err := countsLeft(conn, s.schema, t.name)
			if err != nil {
				return fmt.Errorf("uninstall: %w", err)
			}
			if len(left) > 0 {
				return fmt.Errorf("uninstall: %s.%s still holds counts after the fold (%s): the rules do not name these counters, or their totals are out of range; "+
					"put their rules back (mode: shadow) or repair them (slotproxy check), then run uninstall again; nothing was dropped",
					quoteIdent(s.schema), quoteIdent(t.name), strings.Join(left, "; "))
			}
		}
	}
	return nil
}

// ruledSchemas lists the schemas that set's rules name, in order of first
// appearance.
func ruledSchemas(set *rules.Set) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range set.Rules() {
		if k := strings.ToLower(r.Schema); !seen[k] {
			seen[k] = true
			out = append(out, r.Schema)
		}
	}
	return out
}

// schemaState is what uninstall finds in one schema.
type schemaState struct {
	schema                  string
	live, retired, registry bool // the slot table, the renamed one, the registry exist
	// keyedLive, keyedRetired: the keyed slot table (of tables whose key is
	// not one integer column), and the renamed one, exist.
	keyedLive, keyedRetired bool
	rows, counts            int64 // slot rows, and those holding a count, in the one that exists
}

func (s schemaState) describe(slots, retired string) string {
	var parts []string
	switch {
	case s.live && s.retired:
		parts = append(parts, fmt.Sprintf("slot tables %s and %s", slots, retired))
	case s.live:
		parts = append(parts, fmt.Sprintf("slot table %s", slots))
	case s.retired:
		parts = append(parts, fmt.Sprintf("slot table %s (renamed by an interrupted uninstall)", retired))
	}
	if s.live || s.retired {
		parts[0] += fmt.Sprintf(" with %d slot rows, %d holding counts to fold", s.rows, s.counts)
	}
	switch {
	case s.keyedLive:
		parts = append(parts, "keyed slot table "+slots+rewrite.KeyedSlotsSuffix)
	case s.keyedRetired:
		parts = append(parts, "keyed slot table "+retired+rewrite.KeyedSlotsSuffix+" (renamed by an interrupted uninstall)")
	}
	if s.registry {
		parts = append(parts, "record-type registry "+config.RecordTypesTable)
	}
	if len(parts) == 0 {
		return fmt.Sprintf("schema %s: no slot table, no registry: nothing to do", quoteIdent(s.schema))
	}
	return fmt.Sprintf("schema %s: %s", quoteIdent(s.schema), strings.Join(parts, "; "))
}

// readSchemaState looks at schema's slotproxy tables.
func readSchemaState(conn *client.Conn, schema, slots, retired string) (schemaState, error) {
	st := schemaState{schema: schema}
	res, err := conn.Execute("SELECT table_name FROM information_schema.tables WHERE table_schema = ?", schema)
	if err != nil {
		return st, fmt.Errorf("reading the tables of %s: %w", schema, err)
	}
	defer res.Close()
	for i := range res.RowNumber() {
		name, _ := res.GetString(i, 0)
		switch {
		case strings.EqualFold(name, slots):
			st.live = true
		case strings.EqualFold(name, retired):
			st.retired = true
		case strings.EqualFold(name, config.RecordTypesTable):
			st.registry = true
		case strings.EqualFold(name, slots+rewrite.KeyedSlotsSuffix):
			st.keyedLive = true
		case strings.EqualFold(name, retired+rewrite.KeyedSlotsSuffix):
			st.keyedRetired = true
		}
	}
	table := ""
	switch {
	case st.live:
		table = slots
	case st.retired:
		table = retired
	default:
		return st, nil
	}
	r, err := conn.Execute(fmt.Sprintf("SELECT COUNT(*), COALESCE(SUM(`count` <> 0), 0) FROM %s.%s", quoteIdent(schema), quoteIdent(table)))
	if err != nil {
		return st, err
	}
	defer r.Close()
	st.rows, _ = r.GetInt(0, 0)
	st.counts, _ = r.GetInt(0, 1)
	return st, nil
}

// countsLeft describes the slot rows of table that still hold a count, by
// record type (and the table and column the registry names for it).
func countsLeft(conn *client.Conn, schema, table string) ([]string, error) {
	q := fmt.Sprintf("SELECT s.record_type, COALESCE(CONCAT(r.table_name, '.', r.column_name), '?'), COUNT(*) FROM %s.%s AS s "+
		"LEFT JOIN %s.%s AS r ON r.record_type = s.record_type WHERE s.`count` <> 0 GROUP BY s.record_type, r.table_name, r.column_name",
		quoteIdent(schema), quoteIdent(table), quoteIdent(schema), quoteIdent(config.RecordTypesTable))
	res, err := conn.Execute(q)
	if err != nil {
		var out []string
		// Without a registry, the record types alone.
		res2, err2 := conn.Execute(fmt.Sprintf("SELECT record_type, COUNT(*) FROM %s.%s WHERE `count` <> 0 GROUP BY record_type", quoteIdent(schema), quoteIdent(table)))
		if err2 != nil {
			return nil, errors.Join(err, err2)
		}
		defer res2.Close()
		for i := range res2.RowNumber() {
			rt, _ := res2.GetInt(i, 0)
			n, _ := res2.GetInt(i, 1)
			out = append(out, fmt.Sprintf("record type %d: %d rows", rt, n))
		}
		return out, nil
	}
	defer res.Close()
	var out []string
	for i := range res.RowNumber() {
		rt, _ := res.GetInt(i, 0)
		name, _ := res.GetString(i, 1)
		n, _ := res.GetInt(i, 2)
		out = append(out, fmt.Sprintf("record type %d (%s): %d rows", rt, name, n))
	}
	return out, nil
}
