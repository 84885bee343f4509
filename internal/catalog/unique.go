package catalog

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/rewrite"
)

// fillUniqueKeys sets the UniqueKeys of tables: their UNIQUE keys other
// than the primary key, from information_schema.STATISTICS. A key the
// rewriter cannot match values against (a column prefix, an expression)
// is recorded as an empty column list, which makes upserts and REPLACE
// of the table fold every record first.
func fillUniqueKeys(ctx context.Context, conn *client.Conn, tables []*rewrite.Table) error {
	if len(tables) == 0 {
		return nil
	}
	byName := map[[2]string]*rewrite.Table{}
	var args []any
	var pairs []string
	for _, t := range tables {
		byName[[2]string{t.Schema, t.Name}] = t
		args = append(args, t.Schema, t.Name)
		pairs = append(pairs, "(?, ?)")
	}
	// SUB_PART is the prefix length; COLUMN_NAME is NULL for an
	// expression (MySQL's functional key parts).
	rows, err := exec(ctx, conn, "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COALESCE(COLUMN_NAME, ''), COALESCE(SUB_PART, 0) "+
		"FROM information_schema.STATISTICS WHERE NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY' AND (TABLE_SCHEMA, TABLE_NAME) IN ("+
		strings.Join(pairs, ", ")+") ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX", args...)
	if err != nil {
		return fmt.Errorf("reading the unique keys: %w", err)
	}
	type key struct{ schema, table, index string }
	var order []key
	cols := map[key][]string{}
	exact := map[key]bool{}
	for _, row := range rows {
		k := key{row[0], row[1], row[2]}
		if _, seen := cols[k]; !seen {
			order = append(order, k)
			exact[k] = true
		}
		cols[k] = append(cols[k], row[3])
		if row[3] == "" || row[4] != "0" {
			exact[k] = false
		}
	}
	for _, k := range order {
		t := byName[[2]string{k.schema, k.table}]
		if t == nil {
			continue
		}
		if exact[k] {
			t.UniqueKeys = append(t.UniqueKeys, cols[k])
		} else {
			t.UniqueKeys = append(t.UniqueKeys, nil)
		}
	}
	return nil
}
