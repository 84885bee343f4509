// Package catalog connects slotproxy's rules to the live database: it
// creates the slot tables and the record-type registry (Migrate), checks
// the rules against the schema and builds the rewriter's catalog from it
// (Load, NewRewriter), and rebuilds it after DDL (Reloader). It talks to the
// backend as the proxy's own admin account (Connect), with go-mysql's
// client.
//
// Each schema that has rules holds two tables of slotproxy's: the slot
// table (config.Config.SlotsTable, default slotted_counters) and the
// registry slotproxy_record_types, which numbers each ruled (table, counter
// column) pair; the number is the slot rows' record_type. Numbers are
// assigned on first sight, by Migrate or by Load, and never change.
package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// integerTypes are the DATA_TYPE values of MySQL's integer columns.
var integerTypes = map[string]bool{"tinyint": true, "smallint": true, "mediumint": true, "int": true, "bigint": true}

// column is one column of a table, from information_schema.COLUMNS.
type column struct {
	name       string
	dataType   string // DATA_TYPE, such as "bigint"
	columnType string // COLUMN_TYPE, such as "bigint(20) unsigned"
	extra      string // EXTRA, such as "on update current_timestamp()" or "STORED GENERATED"
	generation string // GENERATION_EXPRESSION of a generated column, else ""
	// required: NOT NULL with no default, not generated, not
	// AUTO_INCREMENT: an INSERT in strict mode must name it.
	required bool
	// charset and collation of a string column ("" for others and for
	// binary strings); octets its longest value's length in bytes.
	charset, collation string
	octets             int
}

// keyable reports whether c can be a column of a key that names records by
// an encoding (rewrite.KeyColumn): an integer, or a CHAR, VARCHAR, BINARY
// or VARBINARY column.
func (c *column) keyable() bool {
	switch strings.ToLower(c.dataType) {
	case "char", "varchar", "binary", "varbinary":
		return true
	}
	return c.integer()
}

// encodedLen is the longest encoding of c's values in a keyed record id.
func (c *column) encodedLen() int {
	if c.integer() {
		return 20 // -9223372036854775808
	}
	return 2 * c.octets
}

func (c *column) integer() bool { return integerTypes[strings.ToLower(c.dataType)] }

// charLength returns the length of a CHAR or VARCHAR column, in
// characters, from its COLUMN_TYPE (varchar(10)).
func (c *column) charLength() (int, bool) {
	switch strings.ToLower(c.dataType) {
	case "char", "varchar":
	default:
		return 0, false
	}
	i := strings.IndexByte(c.columnType, '(')
	j := strings.IndexByte(c.columnType, ')')
	if i < 0 || j < i {
		return 0, false
	}
	n, err := strconv.Atoi(c.columnType[i+1 : j])
	return n, err == nil
}

// checked reports whether a CHECK constraint of t may read column c.
func checked(t *table, c *column) bool {
	for _, chk := range t.checks {
		if mentions(chk.clause, c.name) {
			return true
		}
	}
	return false
}
func (c *column) unsigned() bool { return strings.Contains(strings.ToLower(c.columnType), "unsigned") }

// decimal returns the precision and scale of a DECIMAL column of at most
// 18 digits (a DECIMAL counter's: see rewrite.Counter.Precision).
func (c *column) decimal() (precision, scale int, ok bool) {
	if !strings.EqualFold(c.dataType, "decimal") {
		return 0, 0, false
	}
	// COLUMN_TYPE is decimal(P,S), possibly unsigned.
	i := strings.IndexByte(c.columnType, '(')
	j := strings.IndexByte(c.columnType, ')')
	if i < 0 || j < i {
		return 0, 0, false
	}
	ps, ss, _ := strings.Cut(c.columnType[i+1:j], ",")
	p, err1 := strconv.Atoi(strings.TrimSpace(ps))
	sc, err2 := strconv.Atoi(strings.TrimSpace(ss))
	if err1 != nil || err2 != nil || p < 1 || p > 18 || sc < 0 || sc > p {
		return 0, 0, false
	}
	return p, sc, true
}

// temporal reports whether c is a DATETIME or TIMESTAMP column (a touch
// column's types), with its fractional seconds precision.
func (c *column) temporal() (timestamp bool, fsp int, ok bool) {
	switch strings.ToLower(c.dataType) {
	case "datetime":
	case "timestamp":
		timestamp = true
	default:
		return false, 0, false
	}
	// COLUMN_TYPE is datetime or datetime(N).
	if i := strings.IndexByte(c.columnType, '('); i >= 0 {
		if j := strings.IndexByte(c.columnType[i:], ')'); j > 1 {
			n, err := strconv.Atoi(c.columnType[i+1 : i+j])
			if err != nil || n < 0 || n > 6 {
				return false, 0, false
			}
			fsp = n
		}
	}
	return timestamp, fsp, true
}

// table is one table of a schema as the server describes it.
type table struct {
	schema, name string
	kind         string   // TABLE_TYPE: "BASE TABLE", "VIEW", ...
	engine       string   // ENGINE ("" for a view)
	columns      []column // in ORDINAL_POSITION order
	primary      []string // PRIMARY KEY columns in key order; nil if none
	// primaryPrefix: the primary key indexes a prefix of a column.
	primaryPrefix bool
	// updateTriggers are the names of its BEFORE and AFTER UPDATE triggers.
	updateTriggers []string
	// insertTriggers: it has an INSERT trigger (BEFORE INSERT triggers fire
	// for an upsert that finds its row, too).
	insertTriggers bool
	// cascades describes its foreign keys that change its rows when the
	// referenced row changes (ON DELETE CASCADE, ON UPDATE CASCADE or SET
	// NULL/DEFAULT): "name (ON DELETE CASCADE)".
	cascades []string
	// checks are its CHECK constraints.
	checks []check
}

// column returns the column called name (ignoring case, as MySQL does), or
// nil.
func (t *table) column(name string) *column {
	for i := range t.columns {
		if strings.EqualFold(t.columns[i].name, name) {
			return &t.columns[i]
		}
	}
	return nil
}

// schema is what Load reads about one schema that has rules.
type schema struct {
	name   string
	exists bool
	tables []*table
}

// lookup returns the table called name: the one spelled exactly so, or
// else the only one whose name matches ignoring case. ambiguous is set when
// several match ignoring case and none exactly.
func (s *schema) lookup(name string) (t *table, ambiguous bool) {
	var folded []*table
	for _, t := range s.tables {
		if t.name == name {
			return t, false
		}
		if strings.EqualFold(t.name, name) {
			folded = append(folded, t)
		}
	}
	if len(folded) == 1 {
		return folded[0], false
	}
	return nil, len(folded) > 1
}

// Load checks set against the live schema and returns the rewriter's
// catalog for it. For each schema with rules it checks that the slot table
// slotsTable and the registry exist (Migrate creates them; and the keyed
// slot table when a rule's key is not one integer column), and for each
// rule that its table is a base table whose PRIMARY KEY is the rule's key
// (its columns integers or strings: see checkRule), and that every counter
// is an integer column.
// It registers the record types of counters that have none yet (so a new
// counter needs no migrate), and returns a catalog of the ruled tables with
// every column in table order plus the columns of every other table and
// view in those schemas.
//
// Every problem is reported, not just the first: as *rules.Error values
// ("FILE:LINE: MESSAGE", at the rule's table, key or counter line), joined
// with errors.Join and sorted by file and line. A missing slot table or
// registry is reported at the first rule of its schema. Other failures
// (the connection, a query) are returned on their own.
func Load(ctx context.Context, conn *client.Conn, set *rules.Set, slotsTable string) (*rewrite.Catalog, error) {
	cat, _, err := load(ctx, conn, set, slotsTable, false)
	return cat, err
}

// LoadDegrading is Load for a proxy that is running: a ruled table whose
// schema gained what slotted increments would go around (an UPDATE
// trigger, a column set ON UPDATE CURRENT_TIMESTAMP, a generated column of
// a counter, a cascading foreign key) is not refused, which would leave
// the proxy slotting it with the rules it had: its counters' increments run
// on the base row instead, after their records' slots are folded, so the
// server fires, moves and computes what it does directly. Each such
// problem is returned as a note (FILE:LINE: PROBLEM), to be logged.
func LoadDegrading(ctx context.Context, conn *client.Conn, set *rules.Set, slotsTable string) (*rewrite.Catalog, []string, error) {
	return load(ctx, conn, set, slotsTable, true)
}

func load(ctx context.Context, conn *client.Conn, set *rules.Set, slotsTable string, degrade bool) (*rewrite.Catalog, []string, error) {
	groups := bySchema(set)
	schemas, err := describe(ctx, conn, groups)
	if err != nil {
		return nil, nil, err
	}
	var (
		problems []*rules.Error
		notes    []string
		tables   = make([][]*rewrite.Table, len(groups)) // per schema
		others   = map[string][]string{}
	)
	for i, g := range groups {
		s := schemas[i]
		checkSchema(s, g.rules, slotsTable, &problems)
		ruled := map[*table]bool{}
		var keyed []*rules.Rule // rules of tables with keyed record ids
		for _, r := range g.rules {
			var bypass []*rules.Error
			side := &problems
			if degrade {
				side = &bypass
			}
			if t := checkRule(s, r, slotsTable, &problems, side); t != nil {
				ruled[t] = true
				nt := newTable(t, r, slotsTable)
				for _, b := range bypass {
					notes = append(notes, b.Error()+"; until then its increments run on the base row")
					for j := range nt.Counters {
						nt.Counters[j].BaseOnly = append(nt.Counters[j].BaseOnly, b.Msg)
					}
				}
				tables[i] = append(tables[i], nt)
				if nt.Keyed() {
					keyed = append(keyed, r)
				}
			}
		}
		if len(keyed) > 0 {
			checkKeyedSlots(s, keyed, slotsTable, &problems)
		}
		for _, t := range s.tables {
			if ruled[t] || strings.EqualFold(t.name, slotsTable) || strings.EqualFold(t.name, slotsTable+rewrite.KeyedSlotsSuffix) ||
				strings.EqualFold(t.name, RecordTypesTable) {
				continue
			}
			names := make([]string, len(t.columns))
			for j, c := range t.columns {
				names[j] = c.name
			}
			others[t.schema+"."+t.name] = names
		}
	}
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b *rules.Error) int {
			return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
		})
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p
		}
		return nil, nil, errors.Join(errs...)
	}
	// Register record types only once everything checks out, so that a
	// typo in a rule does not leave a registry entry behind.
	var all []*rewrite.Table
	for i, s := range schemas {
		if err := assignTypes(ctx, conn, s.name, tables[i]); err != nil {
			return nil, nil, err
		}
		all = append(all, tables[i]...)
	}
	if err := fillUniqueKeys(ctx, conn, all); err != nil {
		return nil, nil, err
	}
	boundNotes, err := verifyBounds(ctx, conn, all)
	if err != nil {
		return nil, nil, err
	}
	cat := rewrite.NewCatalog(all, others)
	cat.BoundsNotInForce = boundNotes
	if err := addViews(ctx, conn, cat, schemas); err != nil {
		return nil, nil, err
	}
	// With lower_case_table_names 1 or 2 the server compares table names
	// case-insensitively, and so must the rewriter.
	if r, err := conn.Execute("SELECT @@lower_case_table_names"); err == nil {
		if n, err := r.GetInt(0, 0); err == nil && n != 0 {
			cat.FoldCase = true
		}
	}
	return cat, notes, nil
}

// verifyBounds puts in force the bounds rules declare for counters of
// tables (rules.Rule.Bounds) only where the slot rows already written keep
// them (rewrite.Table.BoundsViolationsSQL): rows written before the rule
// declared them may hold more than a bounded slot would, and a condition
// the bounds imply would then be decided on a total they do not hold.
// Elsewhere the counter's bounds are dropped, with a note saying so (the
// catalog's BoundsNotInForce), until a reload after its records are
// folded.
func verifyBounds(ctx context.Context, conn *client.Conn, tables []*rewrite.Table) ([]string, error) {
	var notes []string
	for _, t := range tables {
		for i := range t.Counters {
			c := &t.Counters[i]
			if c.BoundMin == "" && c.BoundMax == "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := conn.Execute(t.BoundsViolationsSQL(c))
			if err != nil {
				return nil, fmt.Errorf("catalog: checking the slot rows of %s.%s against its bounds: %w", t.Qualified(), c.Name, err)
			}
			n, err := r.GetInt(0, 0)
			if err != nil {
				return nil, fmt.Errorf("catalog: checking the slot rows of %s.%s against its bounds: %w", t.Qualified(), c.Name, err)
			}
			if n > 0 {
				notes = append(notes, fmt.Sprintf("bounds of %s.%s not in force: %d of its slot rows hold more than its bounds allow (written without them); "+
					"fold the table (slotproxy rollup --once --all) once every proxy has the rule, then reload", t.Qualified(), c.Name, n))
				c.BoundMin, c.BoundMax = "", ""
			}
		}
	}
	return notes, nil
}

// addViews gives cat the definitions of the views of the ruled schemas,
// so that writes through views over ruled tables are refused.
func addViews(ctx context.Context, conn *client.Conn, cat *rewrite.Catalog, schemas []*schema) error {
	var names []any
	for _, s := range schemas {
		if s.exists && !slices.Contains(names, any(s.name)) {
			names = append(names, s.name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := exec(ctx, conn, "SELECT TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA IN (?"+
		strings.Repeat(", ?", len(names)-1)+")", names...)
	if err != nil {
		return fmt.Errorf("reading the views: %w", err)
	}
	defs := map[string]string{}
	for _, row := range rows {
		defs[row[0]+"."+row[1]] = row[2]
	}
	cat.AddViews(defs)
	return nil
}

// newTable is the rewriter's view of the checked table t ruled by r.
func newTable(t *table, r *rules.Rule, slotsTable string) *rewrite.Table {
	rt := &rewrite.Table{
		Schema:     t.schema,
		Name:       t.name,
		SlotsTable: slotsTable,
		Slots:      r.Slots,
		Shadow:     r.Mode == rules.ModeShadow,
	}
	if t.keyed() {
		rt.SlotsTable = slotsTable + rewrite.KeyedSlotsSuffix
		for _, k := range t.primary {
			c := t.column(k)
			rt.KeyColumns = append(rt.KeyColumns, rewrite.KeyColumn{
				Name:      c.name,
				Integer:   c.integer(),
				Unsigned:  c.unsigned(),
				Char:      strings.EqualFold(c.dataType, "char"),
				Charset:   c.charset,
				Collation: c.collation,
			})
		}
	} else {
		rt.Key = t.primary[0]
	}
	if r.RolledUp() {
		rt.RolledUp, rt.MaxStaleness = true, r.MaxStaleness
	}
	rt.Inserted = rewrite.Inserted{Trigger: t.insertTriggers, IntRanges: map[string][2]string{}}
	for _, c := range t.columns {
		rt.Columns = append(rt.Columns, c.name)
		if c.required {
			rt.Inserted.Required = append(rt.Inserted.Required, c.name)
		}
		if strings.EqualFold(c.name, rt.Key) && strings.Contains(strings.ToLower(c.extra), "auto_increment") {
			rt.Inserted.KeyAutoIncrement = true
		}
		if c.integer() && c.generation == "" {
			if rg := rangeOf(t, &c); len(rg.baseOnly) == 0 {
				rt.Inserted.IntRanges[strings.ToLower(c.name)] = [2]string{rg.lo.String(), rg.hi.String()}
			}
		}
		if n, ok := c.charLength(); ok && c.generation == "" && !checked(t, &c) {
			if rt.Inserted.StrLens == nil {
				rt.Inserted.StrLens = map[string]int{}
			}
			rt.Inserted.StrLens[strings.ToLower(c.name)] = n
		}
	}
	for _, rc := range r.Counters {
		c := t.column(rc.Name)
		if p, sc, ok := c.decimal(); ok {
			// Units of 10^-sc: ±(10^p - 1), and CHECK constraints that
			// read it left to the base row.
			top := new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil), big.NewInt(1))
			lo := new(big.Int).Neg(top)
			if c.unsigned() {
				lo = big.NewInt(0)
			}
			var baseOnly []string
			for _, chk := range t.checks {
				if mentions(chk.clause, c.name) {
					baseOnly = append(baseOnly, "CHECK constraint "+chk.name+" may read "+c.name+", a DECIMAL counter (only integer counters' CHECK bounds are kept by slots)")
				}
			}
			rt.Counters = append(rt.Counters, rewrite.Counter{Name: c.name, Precision: p, Scale: sc, Min: lo.String(), Max: top.String(), BaseOnly: baseOnly})
			continue
		}
		rg := rangeOf(t, c)
		ctr := rewrite.Counter{
			Name:     c.name,
			Unsigned: c.unsigned() && strings.EqualFold(c.dataType, "bigint"),
			Min:      rg.lo.String(),
			Max:      rg.hi.String(),
			BaseOnly: rg.baseOnly,
		}
		if i := slices.IndexFunc(r.Bounds, func(b rules.Bound) bool { return strings.EqualFold(b.Counter, rc.Name) }); i >= 0 {
			// Within the range (checkRule refuses bounds beyond it).
			ctr.BoundMin, ctr.BoundMax = r.Bounds[i].Min, r.Bounds[i].Max
		}
		rt.Counters = append(rt.Counters, ctr)
	}
	for _, rc := range r.Touch {
		c := t.column(rc.Name)
		timestamp, fsp, temporal := c.temporal()
		if !temporal {
			// An integer (a Unix time): its range, CHECK bounds included;
			// of a BIGINT, the part a slot holds (times from 0 on).
			rg := rangeOf(t, c)
			lo, hi := rg.lo, rg.hi
			if strings.EqualFold(c.dataType, "bigint") {
				if lo.Sign() < 0 {
					lo = big.NewInt(0)
				}
				if top := big.NewInt(math.MaxInt64 - 1); hi.Cmp(top) > 0 {
					hi = top
				}
			}
			rt.Counters = append(rt.Counters, rewrite.Counter{Name: c.name, Touch: true, Integer: true, Min: lo.String(), Max: hi.String(),
				Unsigned: c.unsigned() && strings.EqualFold(c.dataType, "bigint")})
			continue
		}
		rt.Counters = append(rt.Counters, rewrite.Counter{Name: c.name, Touch: true, Timestamp: timestamp, FSP: fsp})
	}
	return rt
}

// assignTypes fills in the record types of the counters of tables, which
// are in schema, registering those that have none.
func assignTypes(ctx context.Context, conn *client.Conn, schema string, tables []*rewrite.Table) error {
	var want []pair
	for _, t := range tables {
		for _, c := range t.Counters {
			want = append(want, pair{strings.ToLower(t.Name), strings.ToLower(c.Name)})
		}
	}
	types, err := register(ctx, conn, schema, want)
	if err != nil {
		return err
	}
	for _, t := range tables {
		for i := range t.Counters {
			c := &t.Counters[i]
			c.RecordType = types[pair{strings.ToLower(t.Name), strings.ToLower(c.Name)}]
		}
	}
	return nil
}

// checkSchema checks that s exists and holds a slot table and a registry
// of the right shape, reporting problems at the first of its rules, rs.
func checkSchema(s *schema, rs []*rules.Rule, slotsTable string, problems *[]*rules.Error) {
	first := rs[0]
	for _, r := range rs[1:] {
		if cmp.Or(cmp.Compare(r.File, first.File), cmp.Compare(r.Line, first.Line)) < 0 {
			first = r
		}
	}
	report := func(format string, args ...any) {
		*problems = append(*problems, &rules.Error{File: first.File, Line: first.Line, Msg: "table: " + fmt.Sprintf(format, args...)})
	}
	if !s.exists {
		// Each rule reports its table missing; say why once.
		report("schema %s does not exist (or the admin user has no privileges on it)", quoteName(s.name))
		return
	}
	slots, _ := s.lookup(slotsTable)
	registry, _ := s.lookup(RecordTypesTable)
	switch {
	case slots == nil && registry == nil:
		report("schema %s has no slot table %s and no record-type registry %s; run slotproxy migrate to create them",
			quoteName(s.name), slotsTable, RecordTypesTable)
		return
	case slots == nil:
		report("schema %s has no slot table %s; run slotproxy migrate to create it", quoteName(s.name), slotsTable)
	case registry == nil:
		report("schema %s has no record-type registry %s; run slotproxy migrate to create it", quoteName(s.name), RecordTypesTable)
		return
	}
	if slots != nil && !hasShape(slots, []string{"record_type", "record_id", "slot"}, "count") {
		report("%s.%s is not a slot table (want integer columns record_type, record_id, slot and count, with PRIMARY KEY (record_type, record_id, slot)); "+
			"drop it and run slotproxy migrate, or set slots_table to another name", quoteName(s.name), quoteName(slots.name))
	}
	if !hasShape(registry, []string{"record_type"}) || registry.column("table_name") == nil || registry.column("column_name") == nil {
		report("%s.%s is not slotproxy's record-type registry (want columns record_type, table_name and column_name, with PRIMARY KEY (record_type))",
			quoteName(s.name), quoteName(registry.name))
	}
}

// checkKeyedSlots checks that s holds the keyed slot table of the rules
// keyed (rules of tables whose records have keyed record ids), reporting
// problems at the first of them.
func checkKeyedSlots(s *schema, keyed []*rules.Rule, slotsTable string, problems *[]*rules.Error) {
	first := keyed[0]
	name := slotsTable + rewrite.KeyedSlotsSuffix
	report := func(format string, args ...any) {
		*problems = append(*problems, &rules.Error{File: first.File, Line: first.KeyLine, Msg: "key: " + fmt.Sprintf(format, args...)})
	}
	if len(name) > 64 {
		report("the keyed slot table's name %s is longer than 64 characters; set slots_table to a shorter name", name)
		return
	}
	t, _ := s.lookup(name)
	if t == nil {
		report("schema %s has no keyed slot table %s (for tables whose key is not one integer column); run slotproxy migrate to create it",
			quoteName(s.name), name)
		return
	}
	id := t.column("record_id")
	ints := !slices.ContainsFunc([]string{"record_type", "slot", "count"}, func(n string) bool { return t.column(n) == nil || !t.column(n).integer() })
	if t.kind != "BASE TABLE" || !ints || !slices.EqualFunc(t.primary, []string{"record_type", "record_id", "slot"}, strings.EqualFold) ||
		id == nil || !strings.EqualFold(id.dataType, "varbinary") || id.octets < rewrite.KeyedIDBytes {
		report("%s.%s is not a keyed slot table (want integer columns record_type, slot and count, record_id VARBINARY(%d), with PRIMARY KEY (record_type, record_id, slot)); "+
			"drop it and run slotproxy migrate, or set slots_table to another name", quoteName(s.name), quoteName(name), rewrite.KeyedIDBytes)
	}
}

// keyed reports whether t's records are named by an encoding of their key
// (rewrite.Table.KeyColumns): its primary key is not one integer column.
func (t *table) keyed() bool {
	return len(t.primary) != 1 || t.column(t.primary[0]) == nil || !t.column(t.primary[0]).integer()
}

// keyText is a rule's key for messages: "id" or "[a, b]".
func keyText(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return "[" + strings.Join(keys, ", ") + "]"
}

// hasShape reports whether t is a base table whose primary key is the
// integer columns key, in order, and which has the integer columns more.
func hasShape(t *table, key []string, more ...string) bool {
	if t.kind != "BASE TABLE" || len(t.primary) != len(key) {
		return false
	}
	for i, k := range key {
		if !strings.EqualFold(t.primary[i], k) {
			return false
		}
	}
	for _, name := range append(key, more...) {
		if c := t.column(name); c == nil || !c.integer() {
			return false
		}
	}
	return true
}

// checkRule checks r against s and returns its table, or nil after
// reporting what is wrong.
// Problems of the table's side effects (checkSideEffects) go to side,
// which may be problems itself; they do not make it return nil.
func checkRule(s *schema, r *rules.Rule, slotsTable string, problems, side *[]*rules.Error) *table {
	ok := true
	report := func(line int, format string, args ...any) {
		*problems = append(*problems, &rules.Error{File: r.File, Line: line, Msg: fmt.Sprintf(format, args...)})
		ok = false
	}
	name := r.Name()
	if strings.EqualFold(r.Table, slotsTable) || strings.EqualFold(r.Table, RecordTypesTable) {
		report(r.Line, "table: %s is slotproxy's own table; it cannot have rules", name)
		return nil
	}
	t, ambiguous := s.lookup(r.Table)
	switch {
	case ambiguous:
		report(r.Line, "table: %s matches several tables that differ only in case; write the name exactly", name)
		return nil
	case t == nil && s.exists:
		report(r.Line, "table: %s does not exist (or the admin user has no privileges on it)", name)
		return nil
	case t == nil:
		report(r.Line, "table: %s does not exist", name)
		return nil
	case t.kind != "BASE TABLE":
		report(r.Line, "table: %s is a %s, not a base table", name, strings.ToLower(t.kind))
		return nil
	}

	pk := t.primary
	keys := r.KeyColumns()
	switch {
	case len(pk) == 0:
		report(r.KeyLine, "key: %s has no primary key; the key must be its primary key", name)
	case slices.ContainsFunc(pk, func(k string) bool { return t.column(k) == nil }): // dropped between the queries
		report(r.KeyLine, "key: %s changed while being read; try again", name)
	case len(pk) != len(keys) || slices.ContainsFunc(keys, func(k string) bool {
		return !slices.ContainsFunc(pk, func(p string) bool { return strings.EqualFold(p, k) })
	}):
		report(r.KeyLine, "key: %s is not the primary key of %s (PRIMARY KEY is (%s))", keyText(keys), name, strings.Join(pk, ", "))
	case len(pk) == 1 && t.column(pk[0]).integer():
		// One integer column: the record id is its value.
	case t.primaryPrefix:
		report(r.KeyLine, "key: %s's primary key (%s) indexes a prefix of a column; slotproxy needs a key of whole columns", name, strings.Join(pk, ", "))
	default:
		width := len(pk) - 1
		for _, k := range pk {
			c := t.column(k)
			if !c.keyable() {
				report(r.KeyLine, "key: %s.%s is %s; a key column must be an integer, CHAR, VARCHAR, BINARY or VARBINARY column", name, c.name, c.columnType)
			}
			width += c.encodedLen()
		}
		if width > rewrite.KeyedIDBytes {
			report(r.KeyLine, "key: %s's primary key (%s) may take %d bytes in a record id; slotproxy's keyed slot table takes %d at most",
				name, strings.Join(pk, ", "), width, rewrite.KeyedIDBytes)
		}
	}
	for _, rc := range r.Counters {
		c := t.column(rc.Name)
		switch {
		case c == nil:
			report(rc.Line, "counters: %s has no column %s", name, rc.Name)
		case !c.integer() && strings.EqualFold(c.dataType, "decimal"):
			if _, _, ok := c.decimal(); !ok {
				report(rc.Line, "counters: %s.%s is %s: a DECIMAL counter may have at most 18 digits (its slots count units of its last digit in a BIGINT)", name, c.name, c.columnType)
			}
		case !c.integer():
			report(rc.Line, "counters: %s.%s is %s, not an integer column", name, c.name, c.columnType)
		}
	}
	for _, b := range r.Bounds {
		c := t.column(b.Counter)
		if t.keyed() {
			report(b.Line, "bounds: %s is not keyed by one integer column; bounds are for tables that are", name)
			break
		}
		if c == nil || !c.integer() {
			if c != nil {
				report(b.Line, "bounds: %s.%s is %s; bounds are for integer counters", name, c.name, c.columnType)
			}
			continue
		}
		rg := rangeOf(t, c)
		for _, v := range []string{b.Min, b.Max} {
			if n, ok := new(big.Int).SetString(v, 10); ok && (n.Cmp(rg.lo) < 0 || n.Cmp(rg.hi) > 0) {
				report(b.Line, "bounds: %s of %s.%s is beyond the values the column holds (%s to %s, CHECK constraints included)", v, name, c.name, rg.lo, rg.hi)
			}
		}
	}
	for _, rc := range r.Touch {
		c := t.column(rc.Name)
		if c == nil {
			report(rc.Line, "touch: %s has no column %s", name, rc.Name)
		} else if _, _, ok := c.temporal(); ok {
		} else if !c.integer() {
			report(rc.Line, "touch: %s.%s is %s; a touch column must be DATETIME, TIMESTAMP or an integer type (a Unix time)", name, c.name, c.columnType)
		} else if rg := rangeOf(t, c); len(rg.baseOnly) > 0 {
			report(rc.Line, "touch: %s.%s: %s", name, c.name, strings.Join(rg.baseOnly, "; "))
		}
	}
	if r.Mode != rules.ModeShadow {
		n := len(*side)
		checkSideEffects(t, r, func(line int, format string, args ...any) {
			*side = append(*side, &rules.Error{File: r.File, Line: line, Msg: fmt.Sprintf(format, args...)})
		})
		if side == problems && len(*side) > n {
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return t
}

// checkSideEffects reports what the server does to a ruled table's rows on
// an UPDATE that a slotted increment (which writes the slot table, not the
// row) would silently skip, or that would leave slot rows behind: UPDATE
// triggers, ON UPDATE CURRENT_TIMESTAMP columns, generated columns computed
// from a counter, and foreign keys that cascade into the table.
func checkSideEffects(t *table, r *rules.Rule, report func(line int, format string, args ...any)) {
	name := r.Name()
	if t.engine != "" && !strings.EqualFold(t.engine, "InnoDB") {
		report(r.Line, "table: %s uses the %s storage engine, which keeps an increment whose transaction rolls back and mixes with the slot table's InnoDB in one statement "+
			"(MySQL warns 6414); a slotted increment would be rolled back with its transaction; ALTER TABLE %s ENGINE=InnoDB, or use mode: shadow", name, t.engine, name)
	}
	for _, tr := range t.updateTriggers {
		report(r.Line, "table: %s has the UPDATE trigger %s, which fires on every increment directly but would fire only on roll-up through slotproxy; "+
			"drop the trigger (or move its work into the application), or use mode: shadow", name, tr)
	}
	for _, c := range t.columns {
		if strings.Contains(strings.ToLower(c.extra), "on update") {
			report(r.Line, "table: %s.%s is set ON UPDATE CURRENT_TIMESTAMP, which every increment moves directly but a slotted increment (which does not update the row) would not; "+
				"drop ON UPDATE from the column (ORMs that set it themselves keep working, see touch:), or use mode: shadow", name, c.name)
		}
		if c.generation == "" {
			continue
		}
		for _, rc := range r.Counters {
			if mentionsColumn(c.generation, rc.Name) {
				report(rc.Line, "counters: %s.%s is generated from the counter %s and would read the base value only (the slots are not in the row); "+
					"drop the generated column or compute it in the query, or use mode: shadow", name, c.name, rc.Name)
			}
		}
	}
	for _, fk := range t.cascades {
		report(r.Line, "table: %s has the foreign key %s, which changes or deletes its rows behind slotproxy's back (their slot rows would stay); "+
			"make it RESTRICT, or use mode: shadow", name, fk)
	}
}

// mentionsColumn reports whether the SQL expression expr names column
// (backquoted or bare, any case).
func mentionsColumn(expr, column string) bool {
	e, c := strings.ToLower(expr), strings.ToLower(column)
	if strings.Contains(e, "`"+c+"`") {
		return true
	}
	for i := 0; ; {
		j := strings.Index(e[i:], c)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(c)
		before := start == 0 || !isNameByte(e[start-1])
		after := end == len(e) || !isNameByte(e[end])
		if before && after {
			return true
		}
		i = start + 1
	}
}

func isNameByte(b byte) bool {
	return b == '_' || b == '$' || b == '`' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || b >= 0x80
}

// quoteName writes a schema or table name as a rule file would: bare
// unless it holds a '.', whitespace or a backquote.
func quoteName(s string) string {
	if s != "" && !strings.ContainsAny(s, ".` \t\n\r") {
		return s
	}
	return quoteIdent(s)
}

// describe reads the tables, columns and primary keys of the schemas of
// groups from information_schema, in groups order.
//
// A schema is the one spelled exactly as in the rules or, failing that,
// the only one whose name matches ignoring case (for servers with
// lower_case_table_names set). schema.name is then the server's spelling.
func describe(ctx context.Context, conn *client.Conn, groups []schemaRules) ([]*schema, error) {
	out := make([]*schema, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	names := make([]any, len(groups))
	for i, g := range groups {
		out[i] = &schema{name: g.schema}
		names[i] = g.schema
	}
	in := "(?" + strings.Repeat(", ?", len(names)-1) + ")"

	rows, err := exec(ctx, conn, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN "+in, names...)
	if err != nil {
		return nil, fmt.Errorf("reading the schema: %w", err)
	}
	real := make([]string, len(rows))
	for i, row := range rows {
		real[i] = row[0]
	}
	byReal := map[string]*schema{} // the server's schema name → what we read of it
	for i, s := range out {
		if slices.Contains(real, s.name) {
			s.exists = true
		} else if j := slices.IndexFunc(real, func(r string) bool { return strings.EqualFold(r, s.name) }); j >= 0 &&
			!slices.ContainsFunc(real[j+1:], func(r string) bool { return strings.EqualFold(r, s.name) }) {
			s.name, s.exists = real[j], true
		}
		if !s.exists {
			continue
		}
		if prev := byReal[s.name]; prev != nil {
			out[i] = prev // two spellings of one schema
		} else {
			byReal[s.name] = s
		}
	}
	if len(byReal) == 0 {
		return out, nil
	}
	names = names[:0]
	for name := range byReal {
		names = append(names, name)
	}
	in = "(?" + strings.Repeat(", ?", len(names)-1) + ")"

	tables := map[[2]string]*table{}
	rows, err = exec(ctx, conn, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, COALESCE(ENGINE, '') FROM information_schema.TABLES WHERE TABLE_SCHEMA IN "+in+
		" ORDER BY TABLE_SCHEMA, TABLE_NAME", names...)
	if err != nil {
		return nil, fmt.Errorf("reading the schema: %w", err)
	}
	for _, row := range rows {
		s := byReal[row[0]]
		if s == nil {
			continue
		}
		t := &table{schema: row[0], name: row[1], kind: row[2], engine: row[3]}
		if t.kind == "SYSTEM VERSIONED" { // MariaDB's base table with history
			t.kind = "BASE TABLE"
		}
		s.tables = append(s.tables, t)
		tables[[2]string{row[0], row[1]}] = t
	}

	rows, err = exec(ctx, conn, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, EXTRA, COALESCE(GENERATION_EXPRESSION, ''), "+
		"IS_NULLABLE = 'NO' AND COLUMN_DEFAULT IS NULL, COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, ''), COALESCE(CHARACTER_OCTET_LENGTH, 0) "+
		"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN "+in+" ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION", names...)
	if err != nil {
		return nil, fmt.Errorf("reading the schema: %w", err)
	}
	for _, row := range rows {
		if t := tables[[2]string{row[0], row[1]}]; t != nil {
			c := column{name: row[2], dataType: row[3], columnType: row[4], extra: row[5], generation: row[6], charset: row[8], collation: row[9]}
			c.octets, _ = strconv.Atoi(row[10])
			extra := strings.ToLower(c.extra)
			c.required = row[7] == "1" && c.generation == "" && !strings.Contains(extra, "generated") && !strings.Contains(extra, "auto_increment")
			t.columns = append(t.columns, c)
		}
	}

	rows, err = exec(ctx, conn, "SELECT EVENT_OBJECT_SCHEMA, EVENT_OBJECT_TABLE, TRIGGER_NAME, EVENT_MANIPULATION FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA IN "+in+
		" AND EVENT_MANIPULATION IN ('UPDATE', 'INSERT') ORDER BY TRIGGER_NAME", names...)
	if err != nil {
		return nil, fmt.Errorf("reading the schema's triggers: %w", err)
	}
	for _, row := range rows {
		if t := tables[[2]string{row[0], row[1]}]; t != nil {
			if row[3] == "INSERT" {
				t.insertTriggers = true
			} else {
				t.updateTriggers = append(t.updateTriggers, row[2])
			}
		}
	}

	rows, err = exec(ctx, conn, "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, DELETE_RULE, UPDATE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS "+
		"WHERE CONSTRAINT_SCHEMA IN "+in+" ORDER BY CONSTRAINT_NAME", names...)
	if err != nil {
		return nil, fmt.Errorf("reading the schema's foreign keys: %w", err)
	}
	for _, row := range rows {
		t := tables[[2]string{row[0], row[1]}]
		if t == nil {
			continue
		}
		var on []string
		if row[3] != "RESTRICT" && row[3] != "NO ACTION" {
			on = append(on, "ON DELETE "+row[3])
		}
		if row[4] != "RESTRICT" && row[4] != "NO ACTION" {
			on = append(on, "ON UPDATE "+row[4])
		}
		if on != nil {
			t.cascades = append(t.cascades, row[2]+" ("+strings.Join(on, ", ")+")")
		}
	}

	if err := readChecks(ctx, conn, in, names, tables); err != nil {
		return nil, err
	}

	rows, err = exec(ctx, conn, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, SUB_PART IS NOT NULL FROM information_schema.STATISTICS WHERE TABLE_SCHEMA IN "+in+
		" AND INDEX_NAME = 'PRIMARY' ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX", names...)
	if err != nil {
		return nil, fmt.Errorf("reading the schema: %w", err)
	}
	for _, row := range rows {
		if t := tables[[2]string{row[0], row[1]}]; t != nil {
			t.primary = append(t.primary, row[2])
			t.primaryPrefix = t.primaryPrefix || row[3] == "1"
		}
	}
	return out, nil
}
