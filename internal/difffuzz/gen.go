package difffuzz

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
)

// Class is a statement class the generator can produce. Each class has a
// weight in Config.Weights; weight 0 turns it off.
type Class string

// The statement classes. Increments (the Inc classes) are what the proxy
// slots; the others are planned around them (reads with slots, guarded
// writes) or pass through.
const (
	IncKey      Class = "inc-key"      // UPDATE t SET c = c ± n WHERE id = k, n small
	IncRange    Class = "inc-range"    // the same with n near the column's range, so totals cross its ends
	IncIn       Class = "inc-in"       // ... WHERE id IN (k1, k2, ...)
	IncMulti    Class = "inc-multi"    // several counters in one SET
	IncPrepared Class = "inc-prepared" // UPDATE t SET c = c + ? WHERE id = ?, prepared
	IncSpelling Class = "inc-spelling" // COALESCE(c, 0) + n, IFNULL, n + c, parentheses, qualified names
	IncCond     Class = "inc-cond"     // WHERE id = k AND c < 100, AND c IS NOT NULL
	IncScan     Class = "inc-scan"     // WHERE on other columns: name = 'n1', id > k, name IS NULL, ...
	IncCase     Class = "inc-case"     // c = CASE id WHEN k1 THEN c + n1 ... END WHERE id IN (k1, ...)
	ReadPoint   Class = "read-point"   // SELECT id, c FROM t WHERE id = k (text or prepared)
	ReadStar    Class = "read-star"    // SELECT * FROM t ORDER BY id
	ReadAgg     Class = "read-agg"     // SUM, MAX, COUNT, GROUP BY
	ReadOrder   Class = "read-order"   // ORDER BY a counter
	ReadWhere   Class = "read-where"   // WHERE on a counter
	ReadJoin    Class = "read-join"    // two tables joined
	ReadSub     Class = "read-sub"     // subqueries
	ReadView    Class = "read-view"    // through the table's view
	ReadLock    Class = "read-lock"    // FOR UPDATE, LOCK IN SHARE MODE
	WriteAbs    Class = "write-abs"    // UPDATE t SET c = v
	Insert      Class = "insert"       // INSERT of new keys
	Reinsert    Class = "reinsert"     // INSERT of deleted keys
	Upsert      Class = "upsert"       // INSERT ... ON DUPLICATE KEY UPDATE c = c + 1
	Replace     Class = "replace"      // REPLACE
	DeleteKey   Class = "delete-key"   // DELETE ... WHERE id = k
	DeleteCond  Class = "delete-cond"  // DELETE ... WHERE <counter condition>
	Truncate    Class = "truncate"     // TRUNCATE TABLE
	ViewDDL     Class = "view-ddl"     // CREATE OR REPLACE VIEW, DROP VIEW
	TxBegin     Class = "tx-begin"     // BEGIN, START TRANSACTION
	TxCommit    Class = "tx-commit"    // COMMIT
	TxRollback  Class = "tx-rollback"  // ROLLBACK
	TxSavepoint Class = "tx-savepoint" // SAVEPOINT, ROLLBACK TO SAVEPOINT, RELEASE SAVEPOINT
	Autocommit  Class = "autocommit"   // SET autocommit = 0 / 1
	Isolation   Class = "isolation"    // SET SESSION TRANSACTION ISOLATION LEVEL ...
	SQLMode     Class = "sql-mode"     // SET SESSION sql_mode = '' / DEFAULT
	Warnings    Class = "warnings"     // SHOW WARNINGS
	RowCount    Class = "row-count"    // SELECT ROW_COUNT(), SET @n = ROW_COUNT()
	Multi       Class = "multi"        // several writes in one COM_QUERY
	MultiWarn   Class = "multi-warn"   // several writes and SHOW WARNINGS in one COM_QUERY
	MultiRead   Class = "multi-read"   // several statements in one COM_QUERY, reads among them
	Rollup      Class = "rollup"       // a roll-up pass of the ruled schema (no client statement)
)

// Classes is every class, in the order the generator draws them.
var Classes = []Class{
	IncKey, IncRange, IncIn, IncMulti, IncPrepared, IncSpelling, IncCond, IncScan, IncCase,
	ReadPoint, ReadStar, ReadAgg, ReadOrder, ReadWhere, ReadJoin, ReadSub, ReadView, ReadLock,
	WriteAbs, Insert, Reinsert, Upsert, Replace, DeleteKey, DeleteCond, Truncate, ViewDDL,
	TxBegin, TxCommit, TxRollback, TxSavepoint, Autocommit, Isolation, SQLMode, Warnings, RowCount, Multi, MultiWarn, MultiRead, Rollup,
}

// IsIncrement reports whether c generates counter increments the proxy
// slots (which, by design, do not wait for each other).
func (c Class) IsIncrement() bool { return strings.HasPrefix(string(c), "inc-") }

// Config is what the generator produces: the weight of each class and the
// length of a sequence.
type Config struct {
	// Weights of the classes; a class missing or at 0 is never generated.
	Weights map[Class]int
	// MinConns and MaxConns bound the number of connection pairs.
	MinConns, MaxConns int
	// MinSteps and MaxSteps bound the number of steps of a sequence.
	MinSteps, MaxSteps int
	// Interleave lets a connection run while another one has a
	// transaction open (lock waits, deadlocks). When false, the generator
	// ends a connection's transaction (COMMIT) before it moves to another
	// connection, so transactions never overlap.
	Interleave bool
	// IsolationInTx lets SET SESSION TRANSACTION ISOLATION LEVEL run
	// while the connection's transaction is open (it applies to the next
	// one). When false, the generator commits first.
	IsolationInTx bool
	// RepeatWarnings lets SHOW WARNINGS follow SHOW WARNINGS on one
	// connection. When false, the second one is not generated.
	RepeatWarnings bool
}

// DefaultConfig has every class enabled.
func DefaultConfig() Config {
	return Config{
		Weights: map[Class]int{
			IncKey: 10, IncRange: 3, IncIn: 4, IncMulti: 3, IncPrepared: 5, IncSpelling: 3, IncCond: 3, IncScan: 3, IncCase: 2,
			ReadPoint: 5, ReadStar: 4, ReadAgg: 3, ReadOrder: 2, ReadWhere: 3, ReadJoin: 2, ReadSub: 2, ReadView: 2, ReadLock: 2,
			WriteAbs: 3, Insert: 3, Reinsert: 2, Upsert: 3, Replace: 2, DeleteKey: 2, DeleteCond: 1, Truncate: 1, ViewDDL: 1,
			TxBegin: 5, TxCommit: 3, TxRollback: 2, TxSavepoint: 2, Autocommit: 1, Isolation: 2, SQLMode: 1, Warnings: 2, RowCount: 2, Multi: 2, MultiWarn: 2, MultiRead: 2, Rollup: 2,
		},
		MinConns: 2, MaxConns: 4,
		MinSteps: 30, MaxSteps: 70,
		Interleave: true, IsolationInTx: true, RepeatWarnings: true,
	}
}

// Without returns a copy of c with the classes turned off.
func (c Config) Without(classes ...Class) Config {
	w := make(map[Class]int, len(c.Weights))
	for k, v := range c.Weights {
		if !slices.Contains(classes, k) {
			w[k] = v
		}
	}
	c.Weights = w
	return c
}

// Step is one statement of a sequence, on one connection pair.
type Step struct {
	Conn  int
	Class Class
	SQL   string
	// Args, when non-nil, make the step a prepared statement (go-mysql
	// prepares when Execute gets arguments).
	Args []any
	// Multi: SQL is several statements in one COM_QUERY.
	Multi bool
}

// String is the step as a reproducer prints it.
func (s Step) String() string {
	out := fmt.Sprintf("[c%d] %s", s.Conn, s.SQL)
	if s.Class == Rollup {
		out = fmt.Sprintf("[admin] -- roll-up pass of the ruled schema")
	}
	if s.Args != nil {
		// A string parameter quoted (a key of a string key), others as
		// they are.
		args := make([]string, len(s.Args))
		for i, a := range s.Args {
			if str, ok := a.(string); ok {
				args[i] = "'" + str + "'"
			} else {
				args[i] = fmt.Sprint(a)
			}
		}
		out += "  -- prepared, args [" + strings.Join(args, " ") + "]"
	}
	if s.Multi {
		out += "  -- one COM_QUERY (multi-statement)"
	}
	return out
}

// Sequence is a generated test case: a schema, a number of connection
// pairs and the steps.
type Sequence struct {
	Seed   int64
	Schema *Schema
	Conns  int
	Steps  []Step
}

// Generate makes the sequence of seed under cfg.
func Generate(seed int64, cfg Config) *Sequence {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15))
	s := GenSchema(r)
	g := &gen{r: r, s: s, cfg: cfg, keys: map[string]*keySet{}, conns: cfg.MinConns + r.IntN(cfg.MaxConns-cfg.MinConns+1)}
	for _, t := range s.Tables {
		ks := &keySet{next: int64(len(t.Rows) + 1)}
		for i := range t.Rows {
			ks.live = append(ks.live, int64(i+1))
		}
		g.keys[t.Name] = ks
	}
	seq := &Sequence{Seed: seed, Schema: s, Conns: g.conns}
	n := cfg.MinSteps + r.IntN(cfg.MaxSteps-cfg.MinSteps+1)
	var classes []Class
	var weights []int
	for _, c := range Classes {
		if w := cfg.Weights[c]; w > 0 {
			classes = append(classes, c)
			weights = append(weights, w)
		}
	}
	if len(classes) == 0 {
		return seq
	}
	g.tx = make([]txState, g.conns)
	for range n {
		if r.IntN(10) >= 6 {
			next := r.IntN(g.conns)
			if next != g.conn && !cfg.Interleave && g.tx[g.conn].open() {
				seq.Steps = append(seq.Steps, Step{Conn: g.conn, Class: TxCommit, SQL: "COMMIT"})
				g.tx[g.conn].inTx = false
			}
			g.conn = next
		}
		c := classes[pickWeighted(r, weights)]
		if c == Isolation && !cfg.IsolationInTx && g.tx[g.conn].open() {
			seq.Steps = append(seq.Steps, Step{Conn: g.conn, Class: TxCommit, SQL: "COMMIT"})
			g.tx[g.conn].inTx = false
		}
		if c == Warnings && !cfg.RepeatWarnings && g.tx[g.conn].last == Warnings {
			continue
		}
		st := g.step(c)
		st.Conn, st.Class = g.conn, c
		g.tx[g.conn].track(st)
		seq.Steps = append(seq.Steps, st)
	}
	return seq
}

// txState is the generator's idea of a connection's transaction.
type txState struct {
	inTx          bool // BEGIN or START TRANSACTION ran
	autocommitOff bool // SET autocommit = 0 ran
	last          Class
}

// open reports whether the connection may hold a transaction's locks.
func (t *txState) open() bool { return t.inTx || t.autocommitOff }

func (t *txState) track(st Step) {
	t.last = st.Class
	switch {
	case st.SQL == "BEGIN" || st.SQL == "START TRANSACTION":
		t.inTx = true
	case st.SQL == "COMMIT" || st.SQL == "ROLLBACK" || st.Class == Truncate || st.Class == ViewDDL:
		t.inTx = false
	case st.SQL == "SET autocommit = 0":
		t.autocommitOff = true
	case st.SQL == "SET autocommit = 1":
		// Commits only a transaction that autocommit = 0 opened; one
		// opened by BEGIN stays open.
		if t.autocommitOff {
			t.inTx = false
		}
		t.autocommitOff = false
	}
}

// keySet is the generator's rough idea of a table's keys (statements may
// fail; it only steers the choice towards keys that matter).
type keySet struct {
	live    []int64
	deleted []int64
	next    int64
}

type gen struct {
	r     *rand.Rand
	s     *Schema
	cfg   Config
	keys  map[string]*keySet
	conns int
	conn  int
	tx    []txState
}

func (g *gen) table() *Table { return pick(g.r, g.s.Tables) }

func (g *gen) counter(t *Table) *Column { return pick(g.r, t.Counters) }

// key is mostly an existing key, sometimes a deleted or missing one.
func (g *gen) key(t *Table) int64 {
	ks := g.keys[t.Name]
	switch n := g.r.IntN(10); {
	case n < 7 && len(ks.live) > 0:
		return pick(g.r, ks.live)
	case n < 9 && len(ks.deleted) > 0:
		return pick(g.r, ks.deleted)
	default:
		return ks.next + int64(g.r.IntN(3))
	}
}

func (g *gen) keys2(t *Table) []int64 {
	n := 2 + g.r.IntN(2)
	var out []int64
	for range n {
		k := g.key(t)
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// delta is an increment's amount: small, or near the column's range.
func (g *gen) delta(c *Column, big bool) *big.Int {
	if !big {
		return newInt(int64(1 + g.r.IntN(3)))
	}
	lo, hi := c.Type.Range()
	span := new(bigInt).Sub(hi, lo)
	switch g.r.IntN(4) {
	case 0:
		return hi
	case 1:
		return new(bigInt).Rsh(span, 1)
	case 2:
		return new(bigInt).Sub(hi, newInt(int64(g.r.IntN(3))))
	default:
		return span
	}
}

type bigInt = big.Int

func newInt(v int64) *big.Int { return big.NewInt(v) }

// arg is v as a prepared statement parameter.
func arg(v *big.Int) any {
	if v.IsInt64() {
		return v.Int64()
	}
	return v.Uint64()
}

func (g *gen) incExpr(c *Column, n *big.Int) string {
	d := n.String()
	if c.Type.Decimal() && g.r.IntN(3) == 0 {
		// A fraction: cents, or finer than the column (which rounds it).
		d += pick(g.r, []string{".5", ".25", ".01", ".005"})
	}
	if g.r.IntN(3) == 0 {
		return fmt.Sprintf("%s = %s - %s", c.Name, c.Name, d)
	}
	return fmt.Sprintf("%s = %s + %s", c.Name, c.Name, d)
}

// keyList is a list of two or three keys of t, as its statements name
// them.
func (g *gen) keyList(t *Table) string {
	var s []string
	for _, k := range g.keys2(t) {
		s = append(s, t.KeyLiteral(k))
	}
	return strings.Join(s, ", ")
}

func (g *gen) step(c Class) Step {
	t := g.table()
	col := g.counter(t)
	switch c {
	case IncKey:
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s WHERE id = %s", t.Name, g.incExpr(col, g.delta(col, false)), t.KeyLiteral(g.key(t)))}
	case IncRange:
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s WHERE id = %s", t.Name, g.incExpr(col, g.delta(col, true)), t.KeyLiteral(g.key(t)))}
	case IncIn:
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s WHERE id IN (%s)", t.Name, g.incExpr(col, g.delta(col, g.r.IntN(4) == 0)), g.keyList(t))}
	case IncMulti:
		var sets []string
		for _, cc := range t.Counters {
			if len(sets) == 0 || g.r.IntN(2) == 0 {
				sets = append(sets, g.incExpr(cc, g.delta(cc, g.r.IntN(5) == 0)))
			}
		}
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s WHERE id = %s", t.Name, strings.Join(sets, ", "), t.KeyLiteral(g.key(t)))}
	case IncPrepared:
		n := g.delta(col, g.r.IntN(4) == 0)
		if g.r.IntN(3) == 0 {
			return Step{SQL: fmt.Sprintf("UPDATE %s SET %s = %s + ? WHERE id IN (?, ?)", t.Name, col.Name, col.Name), Args: []any{arg(n), t.KeyArg(g.key(t)), t.KeyArg(g.key(t))}}
		}
		op := pick(g.r, []string{"+", "-"})
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s = %s %s ? WHERE id = ?", t.Name, col.Name, col.Name, op), Args: []any{arg(n), t.KeyArg(g.key(t))}}
	case IncSpelling:
		n := g.delta(col, false)
		form := pick(g.r, []string{
			"`%[1]s`.`%[2]s` = COALESCE(`%[1]s`.`%[2]s`, 0) + %[3]s",
			"%[2]s = IFNULL(%[2]s, 0) + %[3]s",
			"%[2]s = %[3]s + %[2]s",
			"%[2]s = (%[1]s.%[2]s + %[3]s)",
			"`%[2]s`=`%[2]s`+ %[3]s",
		})
		set := fmt.Sprintf(form, t.Name, col.Name, n)
		return Step{SQL: fmt.Sprintf("UPDATE `%s` SET %s WHERE `%s`.`id` = %s", t.Name, set, t.Name, t.KeyLiteral(g.key(t)))}
	case IncCond:
		cond := pick(g.r, []string{col.Name + " < 100", col.Name + " IS NOT NULL", col.Name + " > 0", "name IS NULL",
			"0 < " + col.Name, col.Name + " >= 2", col.Name + " <= 1000000"})
		if !t.HasName && strings.HasPrefix(cond, "name") {
			cond = col.Name + " IS NOT NULL"
		}
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s WHERE id = %s AND %s", t.Name, g.incExpr(col, g.delta(col, false)), t.KeyLiteral(g.key(t)), cond)}
	case IncScan:
		k1, k2 := t.KeyLiteral(g.key(t)), t.KeyLiteral(g.key(t))
		conds := []string{"id > " + k1, "id BETWEEN " + k1 + " AND " + k2, "NOT (id = " + k1 + ") AND " + col.Name + " IS NOT NULL",
			"id <> " + k1 + " OR id < " + k2}
		if t.HasName {
			n1, n2 := fmt.Sprintf("'n%d'", g.key(t)), fmt.Sprintf("'n%d'", g.key(t))
			conds = append(conds, "name = "+n1, "name IN ("+n1+", "+n2+")", "name IS NULL", "name <> "+n1+" AND id <= "+k2,
				"name = 0") // a conversion: on the base rows
		}
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s WHERE %s", t.Name, g.incExpr(col, g.delta(col, g.r.IntN(5) == 0)), pick(g.r, conds))}
	case IncCase:
		keys := g.keys2(t)
		var whens, in []string
		for _, k := range keys {
			d := g.delta(col, g.r.IntN(6) == 0)
			if g.r.IntN(8) == 0 {
				d = newInt(0) // a branch that changes nothing: on the base rows
			}
			op := pick(g.r, []string{"+", "-"})
			whens = append(whens, fmt.Sprintf("WHEN %s THEN %s %s %s", t.KeyLiteral(k), col.Name, op, d))
			in = append(in, t.KeyLiteral(k))
		}
		if g.r.IntN(5) == 0 {
			in = append(in, t.KeyLiteral(g.key(t))) // a row may take the ELSE
		}
		els := pick(g.r, []string{" ELSE " + col.Name, ""})
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s = CASE id %s%s END WHERE id IN (%s)", t.Name, col.Name, strings.Join(whens, " "), els, strings.Join(in, ", "))}
	case ReadPoint:
		if g.r.IntN(2) == 0 {
			return Step{SQL: fmt.Sprintf("SELECT id, %s FROM %s WHERE id = ?", col.Name, t.Name), Args: []any{t.KeyArg(g.key(t))}}
		}
		return Step{SQL: fmt.Sprintf("SELECT %s, id FROM %s WHERE id = %s", col.Name, t.Name, t.KeyLiteral(g.key(t)))}
	case ReadStar:
		if g.r.IntN(3) == 0 {
			return Step{SQL: fmt.Sprintf("SELECT * FROM %s WHERE id IN (%s) ORDER BY id", t.Name, g.keyList(t))}
		}
		return Step{SQL: fmt.Sprintf("SELECT * FROM %s ORDER BY id", t.Name)}
	case ReadAgg:
		return Step{SQL: pick(g.r, []string{
			fmt.Sprintf("SELECT SUM(%[1]s), MAX(%[1]s), MIN(%[1]s), COUNT(%[1]s), COUNT(*) FROM %[2]s", col.Name, t.Name),
			fmt.Sprintf("SELECT id %% 2 AS g, SUM(%[1]s) AS s, MAX(%[1]s), COUNT(*) FROM %[2]s GROUP BY id %% 2 ORDER BY g", col.Name, t.Name),
			fmt.Sprintf("SELECT %[1]s, COUNT(*) FROM %[2]s GROUP BY %[1]s ORDER BY %[1]s", col.Name, t.Name),
			fmt.Sprintf("SELECT AVG(%[1]s), SUM(%[1]s) + 1 FROM %[2]s WHERE id <= %[3]s", col.Name, t.Name, t.KeyLiteral(g.key(t))),
		})}
	case ReadOrder:
		return Step{SQL: fmt.Sprintf("SELECT id, %[1]s FROM %[2]s ORDER BY %[1]s %[3]s, id LIMIT %[4]d", col.Name, t.Name, pick(g.r, []string{"ASC", "DESC"}), 1+g.r.IntN(4))}
	case ReadWhere:
		return Step{SQL: pick(g.r, []string{
			fmt.Sprintf("SELECT id, %[1]s FROM %[2]s WHERE %[1]s > %[3]d ORDER BY id", col.Name, t.Name, g.r.IntN(10)),
			fmt.Sprintf("SELECT id FROM %[2]s WHERE %[1]s IS NULL ORDER BY id", col.Name, t.Name),
			fmt.Sprintf("SELECT id, %[1]s FROM %[2]s WHERE %[1]s BETWEEN 0 AND 100 ORDER BY id", col.Name, t.Name),
			fmt.Sprintf("SELECT COUNT(*) FROM %[2]s WHERE %[1]s = %[3]d", col.Name, t.Name, g.r.IntN(5)),
		})}
	case ReadJoin:
		u := g.table()
		uc := g.counter(u)
		return Step{SQL: fmt.Sprintf("SELECT a.id, a.%s, b.%s FROM %s a JOIN %s b ON a.id = b.id ORDER BY a.id", col.Name, uc.Name, t.Name, u.Name)}
	case ReadSub:
		u := g.table()
		uc := g.counter(u)
		return Step{SQL: pick(g.r, []string{
			fmt.Sprintf("SELECT id FROM %[2]s WHERE %[1]s = (SELECT MAX(%[1]s) FROM %[2]s) ORDER BY id", col.Name, t.Name),
			fmt.Sprintf("SELECT (SELECT SUM(%[1]s) FROM %[2]s) AS s", col.Name, t.Name),
			fmt.Sprintf("SELECT id, %s FROM %s WHERE id IN (SELECT id FROM %s WHERE %s > 0) ORDER BY id", col.Name, t.Name, u.Name, uc.Name),
			fmt.Sprintf("SELECT x.id, x.%[1]s FROM (SELECT id, %[1]s FROM %[2]s) x ORDER BY x.id", col.Name, t.Name),
		})}
	case ReadView:
		return Step{SQL: pick(g.r, []string{
			fmt.Sprintf("SELECT * FROM %s ORDER BY id", t.View()),
			fmt.Sprintf("SELECT SUM(%s) FROM %s", t.Counters[0].Name, t.View()),
			fmt.Sprintf("SELECT * FROM %s WHERE id = %s", t.View(), t.KeyLiteral(g.key(t))),
		})}
	case ReadLock:
		return Step{SQL: fmt.Sprintf("SELECT id, %s FROM %s WHERE id = %s %s", col.Name, t.Name, t.KeyLiteral(g.key(t)), pick(g.r, []string{"FOR UPDATE", "LOCK IN SHARE MODE"}))}
	case WriteAbs:
		lo, hi := col.Bounds()
		v := nearValue(g.r, lo, hi)
		if g.r.IntN(8) == 0 {
			return Step{SQL: fmt.Sprintf("UPDATE %s SET %s = %s", t.Name, col.Name, v)}
		}
		return Step{SQL: fmt.Sprintf("UPDATE %s SET %s = %s WHERE id = %s", t.Name, col.Name, v, t.KeyLiteral(g.key(t)))}
	case Insert:
		ks := g.keys[t.Name]
		k := ks.next
		ks.next++
		ks.live = append(ks.live, k)
		return Step{SQL: g.insertSQL("INSERT INTO", t, col, k)}
	case Reinsert:
		ks := g.keys[t.Name]
		k := g.key(t)
		if len(ks.deleted) > 0 {
			k = pick(g.r, ks.deleted)
		}
		return Step{SQL: g.insertSQL("INSERT INTO", t, col, k)}
	case Upsert:
		if t.AutoInc && g.r.IntN(2) == 0 {
			// The key left to AUTO_INCREMENT, the row named by its
			// unique name (Magento's search popularity).
			lo, hi := col.Bounds()
			return Step{SQL: fmt.Sprintf("INSERT INTO %s (name, %s) VALUES ('n%d', %s) ON DUPLICATE KEY UPDATE %s = %s + 1",
				t.Name, col.Name, 1+g.r.IntN(8), nearValue(g.r, lo, hi), col.Name, col.Name)}
		}
		if g.r.IntN(3) == 0 {
			// Prepared, as Go's and Node's drivers send it.
			lo, hi := col.Bounds()
			return Step{SQL: fmt.Sprintf("INSERT INTO %s (id, %s) VALUES (?, ?) ON DUPLICATE KEY UPDATE %s = %s + ?", t.Name, col.Name, col.Name, col.Name),
				Args: []any{t.KeyArg(g.key(t)), arg(nearValue(g.r, lo, hi)), arg(g.delta(col, false))}}
		}
		return Step{SQL: g.insertSQL("INSERT INTO", t, col, g.key(t)) + fmt.Sprintf(" ON DUPLICATE KEY UPDATE %s = %s + 1", col.Name, col.Name)}
	case Replace:
		return Step{SQL: g.insertSQL("REPLACE INTO", t, col, g.key(t))}
	case DeleteKey:
		k := g.key(t)
		ks := g.keys[t.Name]
		if i := slices.Index(ks.live, k); i >= 0 {
			ks.live = slices.Delete(ks.live, i, i+1)
			ks.deleted = append(ks.deleted, k)
		}
		return Step{SQL: fmt.Sprintf("DELETE FROM %s WHERE id = %s", t.Name, t.KeyLiteral(k))}
	case DeleteCond:
		return Step{SQL: fmt.Sprintf("DELETE FROM %s WHERE %s %s", t.Name, col.Name, pick(g.r, []string{"> 10", "< 0", "IS NULL", "= 0"}))}
	case Truncate:
		ks := g.keys[t.Name]
		ks.deleted = append(ks.deleted, ks.live...)
		ks.live = nil
		return Step{SQL: "TRUNCATE TABLE " + t.Name}
	case ViewDDL:
		if g.r.IntN(3) == 0 {
			return Step{SQL: "DROP VIEW IF EXISTS " + t.View()}
		}
		return Step{SQL: fmt.Sprintf("CREATE OR REPLACE VIEW %s AS SELECT id, %s FROM %s", t.View(), t.Counters[0].Name, t.Name)}
	case TxBegin:
		return Step{SQL: pick(g.r, []string{"BEGIN", "START TRANSACTION"})}
	case TxCommit:
		return Step{SQL: "COMMIT"}
	case TxRollback:
		return Step{SQL: "ROLLBACK"}
	case TxSavepoint:
		return Step{SQL: pick(g.r, []string{"SAVEPOINT sp1", "SAVEPOINT sp1", "ROLLBACK TO SAVEPOINT sp1", "RELEASE SAVEPOINT sp1"})}
	case Autocommit:
		return Step{SQL: pick(g.r, []string{"SET autocommit = 0", "SET autocommit = 1"})}
	case Isolation:
		return Step{SQL: "SET SESSION TRANSACTION ISOLATION LEVEL " + pick(g.r, []string{"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE", "READ UNCOMMITTED"})}
	case SQLMode:
		return Step{SQL: pick(g.r, []string{"SET SESSION sql_mode = ''", "SET SESSION sql_mode = DEFAULT"})}
	case Warnings:
		return Step{SQL: "SHOW WARNINGS"}
	case RowCount:
		return Step{SQL: pick(g.r, []string{"SELECT ROW_COUNT()", "SELECT ROW_COUNT()", "SELECT ROW_COUNT() AS n, ROW_COUNT() + 1"})}
	case Multi, MultiWarn, MultiRead:
		subs := []Class{IncKey, IncRange, WriteAbs, Insert, DeleteKey}
		if c != Multi {
			subs = append(subs, Warnings, RowCount)
		}
		if c == MultiRead {
			subs = append(subs, ReadPoint, ReadStar, ReadAgg)
		}
		var parts []string
		for range 2 + g.r.IntN(2) {
			sub := pick(g.r, subs)
			if g.cfg.Weights[sub] == 0 {
				sub = IncKey
			}
			st := g.step(sub)
			for st.Args != nil {
				st = g.step(sub)
			}
			parts = append(parts, st.SQL)
		}
		if c == MultiRead {
			parts[g.r.IntN(len(parts))] = g.step(ReadStar).SQL
		}
		return Step{SQL: strings.Join(parts, "; "), Multi: true}
	case Rollup:
		return Step{}
	}
	panic(fmt.Sprintf("difffuzz: no generator for class %q", c))
}

// insertSQL is verb (INSERT INTO, REPLACE INTO) of one row with key k and
// a value for col (and sometimes a name, which may collide with the unique
// key).
func (g *gen) insertSQL(verb string, t *Table, col *Column, k int64) string {
	lo, hi := col.Bounds()
	cols := []string{"id", col.Name}
	vals := []string{t.KeyLiteral(k), nearValue(g.r, lo, hi).String()}
	if t.HasName && g.r.IntN(2) == 0 {
		cols = append(cols, "name")
		vals = append(vals, fmt.Sprintf("'n%d'", 1+g.r.IntN(8)))
	}
	return fmt.Sprintf("%s %s (%s) VALUES (%s)", verb, t.Name, strings.Join(cols, ", "), strings.Join(vals, ", "))
}
