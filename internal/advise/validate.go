package advise

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// integerTypes are the DATA_TYPE values of integer columns, as slotproxy's
// catalog accepts them for keys and counters.
var integerTypes = map[string]bool{"tinyint": true, "smallint": true, "mediumint": true, "int": true, "bigint": true}

// column is a column from information_schema.COLUMNS.
type column struct {
	name, dataType, columnType string
}

func (c *column) integer() bool { return integerTypes[strings.ToLower(c.dataType)] }

// temporal reports whether c is a DATETIME or TIMESTAMP column: a touch
// column's types.
func (c *column) temporal() bool {
	t := strings.ToLower(c.dataType)
	return t == "datetime" || t == "timestamp"
}

// validate checks c against information_schema as slotproxy checks a rule.
// It sets c.Reason when the table cannot have a rule; otherwise it sets
// c.Key and c.Counters to the schema's spelling, keeps only the statements
// that filter on the primary key (recomputing the totals) and adds notes.
// Only a failed query is returned as an error.
func validate(ctx context.Context, db *sql.DB, c *Candidate) error {
	var schema, table, kind string
	err := db.QueryRowContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		c.Schema, c.Table).Scan(&schema, &table, &kind)
	switch {
	case err == sql.ErrNoRows:
		c.Reason = "the table does not exist (or this account has no privileges on it)"
		return nil
	case err != nil:
		return fmt.Errorf("advise: read %s from information_schema.TABLES: %w", c.Name(), err)
	}
	c.Schema, c.Table = schema, table
	if kind != "BASE TABLE" {
		c.Reason = fmt.Sprintf("it is a %s, not a base table", strings.ToLower(kind))
		return nil
	}

	columns, err := tableColumns(ctx, db, schema, table)
	if err != nil {
		return err
	}
	lookup := func(name string) *column {
		for i := range columns {
			if strings.EqualFold(columns[i].name, name) {
				return &columns[i]
			}
		}
		return nil
	}
	pk, err := primaryKey(ctx, db, schema, table)
	if err != nil {
		return err
	}
	const need = "slotproxy needs a single-column integer primary key"
	switch {
	case len(pk) == 0:
		c.Reason = "it has no primary key; " + need
		return nil
	case len(pk) > 1:
		c.Reason = fmt.Sprintf("its primary key is composite, (%s); %s", strings.Join(pk, ", "), need)
		return nil
	case lookup(pk[0]) == nil:
		c.Reason = "its columns changed while being read; try again"
		return nil
	case !lookup(pk[0]).integer():
		c.Reason = fmt.Sprintf("its primary key %s is %s, not an integer; %s", pk[0], lookup(pk[0]).columnType, need)
		return nil
	}
	c.Key = pk[0]

	// Keep the statements that filter on the primary key.
	var kept []*Statement
	otherKeys := map[string]int{}
	var otherOrder []string
	for _, s := range c.Statements {
		if strings.EqualFold(s.Shape.Key, c.Key) {
			kept = append(kept, s)
			continue
		}
		k := s.Shape.Key
		if col := lookup(k); col != nil {
			k = col.name
		}
		if otherKeys[k] == 0 {
			otherOrder = append(otherOrder, k)
		}
		otherKeys[k]++
	}
	if len(kept) == 0 {
		c.Reason = fmt.Sprintf("its increments filter on %s, not on the primary key %s", strings.Join(otherOrder, ", "), c.Key)
		return nil
	}
	for _, k := range otherOrder {
		c.Notes = append(c.Notes, fmt.Sprintf("%d increment statement(s) filter on %s, not on the primary key; slotproxy leaves them alone",
			otherKeys[k], k))
	}
	if len(kept) < len(c.Statements) {
		c.Statements = kept
		c.Calls, c.LockTime, c.Latency, c.RowsAffected = 0, 0, 0, 0
		for _, s := range kept {
			c.Calls += s.Calls
			c.LockTime += s.LockTime
			c.Latency += s.Latency
			c.RowsAffected += s.RowsAffected
		}
	}

	// The counters: integer columns other than the key.
	var counters, rejected []string
	for _, s := range kept {
		for _, name := range s.Shape.Counters {
			col := lookup(name)
			switch {
			case col == nil:
				if !containsFold(rejected, name) {
					rejected = append(rejected, name)
					c.Notes = append(c.Notes, fmt.Sprintf("counter %s is not a column of the table; left out", name))
				}
			case strings.EqualFold(col.name, c.Key) || containsFold(counters, col.name) || containsFold(rejected, col.name):
			case !col.integer():
				rejected = append(rejected, col.name)
				c.Notes = append(c.Notes, fmt.Sprintf("counter %s is %s, not an integer column; left out", col.name, col.columnType))
			default:
				counters = append(counters, col.name)
			}
		}
	}
	if len(counters) == 0 {
		c.Reason = fmt.Sprintf("none of its incremented columns (%s) is an integer column", strings.Join(rejected, ", "))
		return nil
	}
	c.Counters = counters

	// What will keep slotproxy from rewriting some of the statements:
	// other columns assigned with the increments, unless they are
	// DATETIME or TIMESTAMP columns assigned a time (touch columns).
	var others, unsupported []string
	for _, s := range kept {
		for _, o := range s.Shape.Others {
			col := lookup(o)
			if col != nil && containsFold(s.Shape.Times, o) && col.temporal() && !containsFold(counters, col.name) && !strings.EqualFold(col.name, c.Key) {
				if !containsFold(c.Touch, col.name) {
					c.Touch = append(c.Touch, col.name)
				}
				continue
			}
			if !containsFold(others, o) {
				others = append(others, o)
			}
		}
		for _, u := range s.Shape.Unsupported {
			if !containsFold(unsupported, u) {
				unsupported = append(unsupported, u)
			}
		}
	}
	others = slices.DeleteFunc(others, func(o string) bool { return containsFold(c.Touch, o) })
	if len(c.Touch) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("increments also assign %s a time; listed under touch, they are written with the increments",
			strings.Join(c.Touch, ", ")))
	}
	if len(others) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("some increments also assign %s; slotproxy rewrites only statements that do nothing but increment counters, "+
			"so those still update the base row and keep contending", strings.Join(others, ", ")))
	}
	if len(unsupported) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("some increments use %s, which slotproxy does not rewrite", strings.Join(unsupported, " or ")))
	}
	return nil
}

// tableColumns reads the table's columns in table order.
func tableColumns(ctx context.Context, db *sql.DB, schema, table string) ([]column, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
		schema, table)
	if err != nil {
		return nil, fmt.Errorf("advise: read the columns of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var out []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.dataType, &c.columnType); err != nil {
			return nil, fmt.Errorf("advise: read the columns of %s.%s: %w", schema, table, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advise: read the columns of %s.%s: %w", schema, table, err)
	}
	return out, nil
}

// primaryKey reads the table's PRIMARY KEY columns in key order.
func primaryKey(ctx context.Context, db *sql.DB, schema, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
		schema, table)
	if err != nil {
		return nil, fmt.Errorf("advise: read the primary key of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("advise: read the primary key of %s.%s: %w", schema, table, err)
		}
		out = append(out, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advise: read the primary key of %s.%s: %w", schema, table, err)
	}
	return out, nil
}
