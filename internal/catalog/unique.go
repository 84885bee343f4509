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
	return fillNullDefaults(ctx, conn, pairs, args, byName)
}

// fillNullDefaults sets the NullDefault columns of the tables byName holds
// (pairs and args select them): nullable columns whose default is NULL
// (MySQL shows it as NULL, MariaDB as the word NULL, a string default
// 'NULL' as a quoted literal) that are not generated, of tables without an
// INSERT trigger (which could set them).
func fillNullDefaults(ctx context.Context, conn *client.Conn, pairs []string, args []any, byName map[[2]string]*rewrite.Table) error {
	in := strings.Join(pairs, ", ")
	rows, err := exec(ctx, conn, "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME FROM information_schema.COLUMNS AS c "+
		"WHERE (c.TABLE_SCHEMA, c.TABLE_NAME) IN ("+in+") AND c.IS_NULLABLE = 'YES' "+
		"AND (c.COLUMN_DEFAULT IS NULL OR c.COLUMN_DEFAULT = 'NULL' AND @@version LIKE '%MariaDB%') "+
		"AND COALESCE(c.GENERATION_EXPRESSION, '') = '' AND c.EXTRA NOT LIKE '%GENERATED%' "+
		"AND NOT EXISTS (SELECT 1 FROM information_schema.TRIGGERS AS g WHERE g.EVENT_OBJECT_SCHEMA = c.TABLE_SCHEMA "+
		"AND g.EVENT_OBJECT_TABLE = c.TABLE_NAME AND g.EVENT_MANIPULATION = 'INSERT') "+
		"ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION", args...)
	if err != nil {
		return fmt.Errorf("reading the columns' defaults: %w", err)
	}
	for _, row := range rows {
		if t := byName[[2]string{row[0], row[1]}]; t != nil {
			t.NullDefault = append(t.NullDefault, row[2])
		}
	}
	return nil
}
