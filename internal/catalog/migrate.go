package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// RecordTypesTable is the record-type registry's fixed name.
const RecordTypesTable = config.RecordTypesTable

// DDL returns the statements that create the slot table slotsTable and the
// record-type registry in schema, if they do not exist yet.
//
// The slot table has a single unique key and no AUTO_INCREMENT: an upsert
// into it can conflict on one key only (an upsert with two unique keys is
// unsafe for statement-based replication and may take extra gap locks),
// and takes no auto-increment lock. The registry's names use a binary collation: Load and
// Migrate store them in lower case, and a case- or accent-insensitive
// collation would make distinct names collide on the unique key.
func DDL(schema, slotsTable string) []string {
	return []string{
		"CREATE TABLE IF NOT EXISTS " + qualified(schema, slotsTable) + ` (
  ` + "`record_type`" + ` SMALLINT UNSIGNED NOT NULL,
  ` + "`record_id`" + `   BIGINT NOT NULL,
  ` + "`slot`" + `        SMALLINT UNSIGNED NOT NULL,
  ` + "`count`" + `       BIGINT NOT NULL,
  PRIMARY KEY (` + "`record_type`, `record_id`, `slot`" + `)
) ENGINE=InnoDB`,
		"CREATE TABLE IF NOT EXISTS " + qualified(schema, RecordTypesTable) + ` (
  ` + "`record_type`" + ` SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  ` + "`table_name`" + `  VARCHAR(64) NOT NULL,
  ` + "`column_name`" + ` VARCHAR(64) NOT NULL,
  ` + "`created_at`" + `  TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  UNIQUE KEY ` + "`table_column` (`table_name`, `column_name`)" + `
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	}
}

// KeyedDDL returns the statement that creates the keyed slot table of
// schema (slotsTable with rewrite.KeyedSlotsSuffix), for the records of
// tables whose key is not one integer column: the same columns as the
// slot table's, but record_id, an encoding of the record's key (see
// rewrite.Table.RecordID).
func KeyedDDL(schema, slotsTable string) string {
	return "CREATE TABLE IF NOT EXISTS " + qualified(schema, slotsTable+rewrite.KeyedSlotsSuffix) + ` (
  ` + "`record_type`" + ` SMALLINT UNSIGNED NOT NULL,
  ` + "`record_id`" + `   VARBINARY(` + strconv.Itoa(rewrite.KeyedIDBytes) + `) NOT NULL,
  ` + "`slot`" + `        SMALLINT UNSIGNED NOT NULL,
  ` + "`count`" + `       BIGINT NOT NULL,
  PRIMARY KEY (` + "`record_type`, `record_id`, `slot`" + `)
) ENGINE=InnoDB`
}

// Migrate creates the slot table slotsTable and the record-type registry in
// every schema that has rules in set, printing each statement to out before
// running it (CREATE TABLE IF NOT EXISTS, so it is printed and run even
// when the table exists), then registers a record type for every counter of
// every rule and prints the record types as SQL comments. It is idempotent,
// and safe to run while proxies are serving. It does not check the rules
// against the schema; Load does.
func Migrate(ctx context.Context, conn *client.Conn, set *rules.Set, slotsTable string, out io.Writer) error {
	groups := bySchema(set)
	schemas, err := describe(ctx, conn, groups)
	if err != nil {
		return err
	}
	for i, g := range groups {
		stmts := DDL(g.schema, slotsTable)
		if keyedRules(schemas[i], g.rules) {
			stmts = append(stmts, KeyedDDL(g.schema, slotsTable))
		}
		for _, stmt := range stmts {
			fmt.Fprintf(out, "%s;\n\n", stmt)
			if _, err := exec(ctx, conn, stmt); err != nil {
				return err
			}
		}
	}
	for _, g := range bySchema(set) {
		var want []pair
		for _, r := range g.rules {
			for _, c := range r.Slotted() {
				want = append(want, pair{strings.ToLower(r.Table), strings.ToLower(c.Name)})
			}
		}
		types, err := register(ctx, conn, g.schema, want)
		if err != nil {
			return err
		}
		for _, r := range g.rules {
			for _, c := range r.Slotted() {
				fmt.Fprintf(out, "-- record type %d: %s.%s\n", types[pair{strings.ToLower(r.Table), strings.ToLower(c.Name)}],
					r.Name(), c.Name)
			}
		}
	}
	return nil
}

// keyedRules reports whether a rule of rs names a table of s whose key is
// not one integer column, or a key of several columns.
func keyedRules(s *schema, rs []*rules.Rule) bool {
	for _, r := range rs {
		if len(r.KeyColumns()) > 1 {
			return true
		}
		if t, _ := s.lookup(r.Table); t != nil && len(t.primary) > 0 && t.keyed() {
			return true
		}
	}
	return false
}

// pair is a registry entry's (table_name, column_name), in lower case.
type pair struct{ table, column string }

// register returns the record types of the pairs want in schema's registry,
// first inserting those that are missing. Concurrent callers (several
// proxies starting at once) agree thanks to the registry's unique key:
// INSERT IGNORE skips a pair another caller inserted first, and the read
// back sees it. An insert that loses a deadlock or a lock wait to another
// caller (on a multi-primary cluster, a certification failure) is
// tried again, after reading what the others registered meanwhile. Pairs
// already present are not inserted again, so that restarts do not burn
// AUTO_INCREMENT values (the column is a SMALLINT).
func register(ctx context.Context, conn *client.Conn, schema string, want []pair) (map[pair]int, error) {
	for attempt := 1; ; attempt++ {
		types, err := registerOnce(ctx, conn, schema, want)
		var me *mysql.MyError
		if err == nil || attempt == registerAttempts || !errors.As(err, &me) || !slices.Contains(registerRetried, me.Code) {
			return types, err
		}
		// Another registrar won: back off a little, more each time, with
		// jitter so that registrars that collided do not collide again.
		pause := time.Duration(attempt)*25*time.Millisecond + time.Duration(rand.Int64N(int64(25*time.Millisecond)))
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(pause):
		}
	}
}

// registerRetried are the errors of a registration that lost to another
// registrar: a deadlock or lock wait, and on a cluster a certification
// failure (Galera: 1213; Group Replication: 3101, or 1180 when a remote
// transaction aborted it while it committed).
var registerRetried = []uint16{mysql.ER_LOCK_DEADLOCK, mysql.ER_LOCK_WAIT_TIMEOUT, 3101, mysql.ER_ERROR_DURING_COMMIT}

// registerAttempts bounds register's attempts.
const registerAttempts = 10

func registerOnce(ctx context.Context, conn *client.Conn, schema string, want []pair) (map[pair]int, error) {
	types, err := readTypes(ctx, conn, schema)
	if err != nil {
		return nil, err
	}
	var (
		missing []string
		args    []any
		seen    = map[pair]bool{}
	)
	for _, p := range want {
		if _, ok := types[p]; ok || seen[p] {
			continue
		}
		seen[p] = true
		missing = append(missing, "(?, ?)")
		args = append(args, p.table, p.column)
	}
	if len(missing) == 0 {
		return types, nil
	}
	stmt := "INSERT IGNORE INTO " + qualified(schema, RecordTypesTable) +
		" (`table_name`, `column_name`) VALUES " + strings.Join(missing, ", ")
	if _, err := exec(ctx, conn, stmt, args...); err != nil {
		return nil, fmt.Errorf("registering record types in %s: %w", schema, err)
	}
	if types, err = readTypes(ctx, conn, schema); err != nil {
		return nil, err
	}
	for _, p := range want {
		if _, ok := types[p]; !ok {
			return nil, fmt.Errorf("registering record types in %s: %s.%s is still missing from %s after inserting it (are record types exhausted?)",
				schema, p.table, p.column, RecordTypesTable)
		}
	}
	return types, nil
}

// readTypes reads schema's record-type registry.
func readTypes(ctx context.Context, conn *client.Conn, schema string) (map[pair]int, error) {
	rows, err := exec(ctx, conn, "SELECT `record_type`, `table_name`, `column_name` FROM "+qualified(schema, RecordTypesTable))
	if err != nil {
		return nil, fmt.Errorf("reading record types: %w", err)
	}
	types := make(map[pair]int, len(rows))
	for _, row := range rows {
		var id int
		if _, err := fmt.Sscan(row[0], &id); err != nil {
			return nil, fmt.Errorf("reading record types: record_type %q: %w", row[0], err)
		}
		types[pair{row[1], row[2]}] = id
	}
	return types, nil
}

// schemaRules is the rules of one schema.
type schemaRules struct {
	schema string
	rules  []*rules.Rule
}

// bySchema groups set's rules by schema, in Rules order. Schemas are
// compared exactly, as the server does with lower_case_table_names=0.
func bySchema(set *rules.Set) []schemaRules {
	var out []schemaRules
	for _, r := range set.Rules() {
		if n := len(out); n > 0 && out[n-1].schema == r.Schema {
			out[n-1].rules = append(out[n-1].rules, r)
			continue
		}
		out = append(out, schemaRules{schema: r.Schema, rules: []*rules.Rule{r}})
	}
	return out
}

// quoteIdent backquotes a MySQL identifier.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// qualified is `schema`.`table`.
func qualified(schema, table string) string { return quoteIdent(schema) + "." + quoteIdent(table) }
