package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// runCheck implements "slotproxy check": it validates the configuration
// and the rules against the live schema without changing anything, and
// prints each problem on a line of its own.
func runCheck(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("check", "--config FILE [--backend HOST:PORT]",
		"Check FILE, the rules it names and, through the admin account, the live\n"+
			"schema, as serve does when it starts: the slot table and the record-type\n"+
			"registry exist with the right shape, every ruled table exists with its\n"+
			"primary key as its key, and every counter is an\n"+
			"integer column. Nothing is written to the database (the checks run in a\n"+
			"read-only transaction): counters without a record type yet are noted,\n"+
			"serve registers them when it starts. Records whose total (base plus\n"+
			"slots) is outside the counter column's range are reported, with how to\n"+
			"repair them (roll-up cannot fold them).\n\n"+
			"Each problem is printed on stdout as FILE:LINE: PROBLEM, with what to do;\n"+
			"if there is none, check prints \"ok: N rules, M counters\". The exit status\n"+
			"is 0 when everything is fine, 1 when problems were found and 2 for a wrong\n"+
			"command line.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML)")
	fs.String("backend", "", "the MySQL server at `HOST:PORT` (overrides backend.address)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *configPath == "" {
		return usagef("check: --config is required")
	}
	backend := flagValue(fs, "backend")
	if backend != nil {
		if err := config.CheckAddress(*backend); err != nil {
			return usagef("check: --backend: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaTimeout)
	defer cancel()
	res := check(ctx, *configPath, backend)
	for _, n := range res.notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	for _, p := range res.problems {
		fmt.Fprintln(stdout, p)
	}
	switch n := len(res.problems); n {
	case 0:
		fmt.Fprintf(stdout, "ok: %d rules, %d counters\n", res.rules, res.counters)
		return nil
	case 1:
		return errors.New("check: 1 problem found")
	default:
		return fmt.Errorf("check: %d problems found", n)
	}
}

// checkResult is what check found.
type checkResult struct {
	problems        []string // one line each: FILE[:LINE]: PROBLEM
	notes           []string // things worth knowing that are not problems
	rules, counters int
}

// check checks the configuration at path, with the --backend override
// (nil when not given), and its rules against the live schema.
func check(ctx context.Context, path string, backend *string) checkResult {
	var res checkResult
	cfg, err := config.Load(path)
	if err != nil {
		res.problems = append(res.problems, oneLine(err))
		return res
	}
	if backend != nil {
		cfg.Backend.Address = *backend
	}
	if cfg.Rules == "" {
		return res // nothing to check against the schema
	}
	if cfg.Backend.Address == "" {
		res.problems = append(res.problems, path+": backend: not set; add it to the file or pass --backend")
	}
	set, err := rules.LoadDir(cfg.Rules)
	if err != nil {
		res.problems = append(res.problems, ruleProblems(err)...)
		return res
	}
	res.rules, res.counters = set.Len(), countCounters(set)
	if len(res.problems) > 0 || set.Len() == 0 {
		return res
	}
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		res.problems = append(res.problems, path+": "+oneLine(err))
		return res
	}
	defer conn.Quit()
	cat, unregistered, err := loadReadOnly(ctx, conn, set, cfg.SlotsTable)
	if err != nil {
		res.problems = append(res.problems, ruleProblems(err)...)
		return res
	}
	if cat != nil {
		found, err := unfoldable(conn, cat)
		if err != nil {
			res.problems = append(res.problems, path+": "+oneLine(err))
			return res
		}
		res.problems = append(res.problems, found...)
		res.notes = append(res.notes, narrowNotes(cat)...)
		res.notes = append(res.notes, cat.BoundsNotInForce...)
	}
	if len(unregistered) > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%d counters have no record type yet (%s); serve registers them when it starts, or run slotproxy migrate",
			len(unregistered), strings.Join(unregistered, ", ")))
	}
	res.notes = append(res.notes, readModeNotes(cfg, set)...)
	return res
}

// narrowNotes names the counters whose range is too narrow for any slot to
// take an increment (rewrite.Counter.Narrow): their rules remove no
// contention.
func narrowNotes(cat *rewrite.Catalog) []string {
	var notes []string
	for _, t := range cat.Tables() {
		for _, c := range t.Counters {
			if c.Narrow() {
				notes = append(notes, fmt.Sprintf("%s.%s.%s: its range, %s to %s, spans fewer than 18 values: no slot can take a share of it, so its increments run on the base row (as directly, with no contention removed); widen the column or its CHECK constraint to slot them",
					t.Schema, t.Name, c.Name, c.Min, c.Max))
			}
		}
	}
	return notes
}

// readModeNotes says, for each rule with reads: rolled_up, what its plain
// reads see and who keeps the bound.
func readModeNotes(cfg *config.Config, set *rules.Set) []string {
	var notes []string
	for _, r := range set.Rules() {
		if !r.RolledUp() {
			continue
		}
		single, cluster := rollupEvery(cfg.Rollup.Every(false), set), rollupEvery(cfg.Rollup.Every(true), set)
		who := fmt.Sprintf("serve's roll-up runs every %v", single)
		if cluster != single {
			who += fmt.Sprintf(" (every %v in front of a multi-primary cluster)", cluster)
		}
		if !cfg.Rollup.Enabled {
			who = "rollup.enabled is false here: run slotproxy rollup (in loop mode) beside serve, or the bound is not kept"
		}
		notes = append(notes, fmt.Sprintf("%s reads: rolled_up: plain reads of its counters see the base values, at most %v behind (max_staleness); %s",
			r.Name(), r.MaxStaleness, who))
	}
	return notes
}

// rollupEvery is the roll-up interval serve uses: the configured one, or
// half the smallest max_staleness of the rules with reads: rolled_up when
// that is shorter (a pass must start and finish within the bound).
func rollupEvery(interval time.Duration, set *rules.Set) time.Duration {
	for _, r := range set.Rules() {
		if r.RolledUp() && r.MaxStaleness/2 < interval {
			interval = r.MaxStaleness / 2
		}
	}
	return interval
}

// loadReadOnly runs catalog.Load's checks of set against the schema without
// writing: catalog.Load registers the record types of counters that have
// none, so it runs in a read-only transaction, where that INSERT fails
// (after every check has passed). It returns the catalog when every
// counter has a record type, else the counters without one, as
// schema.table.column; or Load's problems.
func loadReadOnly(ctx context.Context, conn *client.Conn, set *rules.Set, slotsTable string) (*rewrite.Catalog, []string, error) {
	if _, err := conn.Execute("START TRANSACTION READ ONLY"); err != nil {
		return nil, nil, fmt.Errorf("starting a read-only transaction: %w", err)
	}
	defer conn.Execute("ROLLBACK")
	cat, err := catalog.Load(ctx, conn, set, slotsTable)
	var me *mysql.MyError
	switch {
	case err == nil:
		return cat, nil, nil
	case errors.As(err, &me) && me.Code == mysql.ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION:
		unregistered, err := unregisteredCounters(conn, set)
		return nil, unregistered, err
	default:
		return nil, nil, err
	}
}

// maxUnfoldable bounds the records check names per counter.
const maxUnfoldable = 10

// unfoldable finds the records whose total (base value plus slot rows) is
// outside the counter's range: roll-up cannot fold them, and reads return
// a value the column cannot hold. This proxy never writes such a total
// (each slot keeps within its share of the range); versions before it,
// which gave every counter BIGINT's range, could. Each is reported with
// how to repair it.
func unfoldable(conn *client.Conn, cat *rewrite.Catalog) ([]string, error) {
	var out []string
	for _, t := range cat.Tables() {
		if t.Keyed() {
			continue // keyed record ids are newer than the versions that could
		}
		for _, c := range t.Counters {
			if c.Touch || c.Decimal() || c.Min == "" || c.Max == "" {
				continue // (DECIMAL counters are newer than those versions too)
			}
			key, col := quoteIdent(t.Key), quoteIdent(c.Name)
			q := fmt.Sprintf("SELECT t.%s, t.%s, SUM(s.`count`), CAST(t.%s AS DECIMAL(65,0)) + SUM(s.`count`) AS total FROM %s AS t JOIN %s AS s "+
				"ON s.`record_type` = %d AND s.`record_id` = t.%s GROUP BY t.%s, t.%s HAVING total < %s OR total > %s ORDER BY t.%s LIMIT %d",
				key, col, col, t.Qualified(), t.QualifiedSlots(), c.RecordType, key, key, col, c.Min, c.Max, key, maxUnfoldable+1)
			r, err := conn.Execute(q)
			if err != nil {
				return nil, fmt.Errorf("reading the totals of %s.%s: %w", t.Qualified(), c.Name, err)
			}
			for i := range r.Values {
				if i == maxUnfoldable {
					out = append(out, fmt.Sprintf("%s.%s.%s: more records outside the range; repair these and check again", t.Schema, t.Name, c.Name))
					break
				}
				id, _ := r.GetString(i, 0)
				base, _ := r.GetString(i, 1)
				slots, _ := r.GetString(i, 2)
				total, _ := r.GetString(i, 3)
				out = append(out, fmt.Sprintf("%s.%s.%s: record %s = %s totals %s (base %s, slots %s), outside the column's range [%s, %s]: "+
					"roll-up cannot fold it. Repair: set the value you want through the proxy (UPDATE %s SET %s = VALUE WHERE %s = %s folds the slots and sets it), "+
					"or drop its slot rows: DELETE FROM %s WHERE record_type = %d AND record_id = %s",
					t.Schema, t.Name, c.Name, t.Key, id, total, base, slots, c.Min, c.Max,
					t.Qualified(), col, key, id, t.QualifiedSlots(), c.RecordType, id))
			}
			r.Close()
		}
	}
	return out, nil
}

// unregisteredCounters lists the counters of set that have no entry in the
// record-type registry of their schema, as schema.table.column.
func unregisteredCounters(conn *client.Conn, set *rules.Set) ([]string, error) {
	known := map[string]map[[2]string]bool{} // schema → registered (table, column), in lower case
	var out []string
	for _, r := range set.Rules() {
		reg, ok := known[r.Schema]
		if !ok {
			res, err := conn.Execute("SELECT `table_name`, `column_name` FROM " + quoteIdent(r.Schema) + "." + quoteIdent(catalog.RecordTypesTable))
			if err != nil {
				return nil, fmt.Errorf("reading the record types of %s: %w", r.Schema, err)
			}
			reg = map[[2]string]bool{}
			for i := range res.Values {
				t, _ := res.GetString(i, 0)
				c, _ := res.GetString(i, 1)
				reg[[2]string{strings.ToLower(t), strings.ToLower(c)}] = true
			}
			res.Close()
			known[r.Schema] = reg
		}
		for _, c := range r.Slotted() {
			if !reg[[2]string{strings.ToLower(r.Table), strings.ToLower(c.Name)}] {
				out = append(out, r.Name()+"."+c.Name)
			}
		}
	}
	return out, nil
}

// quoteIdent backquotes a MySQL identifier.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// ruleProblems splits err, from rules.LoadDir or catalog.Load, into one
// line per problem, each with a hint of what to do when the message lacks
// one.
func ruleProblems(err error) []string {
	errs := rules.Errors(err)
	if len(errs) == 0 {
		return []string{oneLine(err)}
	}
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = oneLine(e) + hint(e.Msg)
	}
	return out
}

// hints say what to do about the problems catalog.Load reports whose
// message does not: the first whose key prefix and phrase the message has.
var hints = []struct{ prefix, phrase, hint string }{
	{"table: ", "is not slotproxy's record-type registry", "rename that table, then run slotproxy migrate"},
	{"table: ", "is slotproxy's own table", "remove this rule"},
	{"table: schema ", "does not exist", "create the schema, correct table: in the rule, or grant the admin user access to it"},
	{"table: ", "does not exist", "correct table: in the rule, create the table, or grant the admin user access to it"},
	{"table: ", "not a base table", "rules apply to base tables only: name the underlying table"},
	{"key: ", "is not the primary key of", "set key: to the table's primary key column, or the list of its columns (key: [a, b])"},
	{"key: ", "indexes a prefix of a column", "change the table's primary key or remove the rule"},
	{"key: ", "may take", "give the table a shorter primary key or remove the rule"},
	{"counters: ", "has no column", "correct the column's name in counters or add the column"},
	{"counters: ", "not an integer column", "a counter must be an integer column or a DECIMAL of at most 18 digits: change the column's type or remove it from counters"},
}

// hint returns "; WHAT TO DO" for the message msg of a problem, or "" when
// msg says it already or no hint applies.
func hint(msg string) string {
	if strings.Contains(msg, "run slotproxy migrate") || strings.Contains(msg, "the key must be") {
		return ""
	}
	i := slices.IndexFunc(hints, func(h struct{ prefix, phrase, hint string }) bool {
		return strings.HasPrefix(msg, h.prefix) && strings.Contains(msg, h.phrase)
	})
	if i < 0 {
		return ""
	}
	return "; " + hints[i].hint
}
