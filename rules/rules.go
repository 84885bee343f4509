// Package rules loads and validates slotproxy's rule files: which counter
// columns of which tables the proxy rewrites into slotted counter upserts.
//
// A rule directory holds one YAML file per table; every file whose name ends
// in .yaml or .yml is read, in name order. A file looks like:
//
//	table: app.repos          # schema.table; required
//	key: id                   # the primary key; required (several columns: key: [user_id, day])
//	counters: [downloads, stars]  # counter columns; required, at least one
//	slots: 100                # optional, 1 to 65535, default 100
//	mode: active              # optional: active (default) or shadow
//	touch: [updated_at]       # optional: columns assigned with increments
//	reads: exact              # optional: exact (default) or rolled_up
//	max_staleness: 10s        # optional, with reads: rolled_up (default 10s)
//	bounds:                   # optional: ranges slotted increments keep counters in
//	  stars: {min: 0, max: 100}
//
// Names are written bare, or backquoted to hold a '.', whitespace or a
// backquote (inside backquotes, a doubled backquote stands for one). YAML
// does not let a plain value start with a backquote, so quote such a value:
//
//	table: "`my.schema`.repos"
//
// The table must be schema-qualified. Unknown keys, duplicate keys, an empty
// or repeated counter, a counter that is a key column, a key column listed
// twice, and names MySQL would
// reject (empty, longer than 64 characters, containing NUL or characters
// outside the Basic Multilingual Plane, ending in a space) are all errors,
// reported as *Error values naming the file and line.
//
// Names match case-insensitively everywhere in this package: in Set.Lookup,
// Set.Counter and the duplicate checks. MySQL column names are
// case-insensitive; schema and table names are case-sensitive on most Unix
// servers (lower_case_table_names=0), but a rule set is a pre-filter for the
// rewriter, and matching more statements than strictly needed is the safe
// side. The flip side is that two tables whose names differ only in case
// cannot both have rules.
//
// The package is the bottom layer of slotproxy: it depends on nothing but the
// standard library and gopkg.in/yaml.v3. It does not consult the database,
// so it cannot check that the tables and columns exist or that the key is
// the table's primary key.
package rules

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Slot count bounds and default.
const (
	// DefaultSlots is Rule.Slots when a file has no slots key.
	DefaultSlots = 100
	// MinSlots and MaxSlots bound Rule.Slots.
	MinSlots = 1
	MaxSlots = 65535
)

// Modes, the values of Rule.Mode.
const (
	// ModeActive rewrites counter increments. It is the default.
	ModeActive = "active"
	// ModeShadow is reserved for a later feature; the package only
	// validates it.
	ModeShadow = "shadow"
)

// Read modes, the values of Rule.Reads.
const (
	// ReadsExact: a counter reads as its base value plus its slots, always.
	// It is the default.
	ReadsExact = "exact"
	// ReadsRolledUp: a plain SELECT reads the base value only, which the
	// roll-up keeps at most MaxStaleness behind the total; writes, guards,
	// locking reads and reads of the transaction's own increments stay
	// exact.
	ReadsRolledUp = "rolled_up"
)

// Staleness bounds and default of Rule.MaxStaleness.
const (
	DefaultMaxStaleness = 10 * time.Second
	MinMaxStaleness     = 100 * time.Millisecond
	MaxMaxStaleness     = 24 * time.Hour
)

// Rule is the validated content of one rule file. Rules held by a Set must
// not be modified.
type Rule struct {
	// File is the path the rule came from, as given to Parse, or the
	// directory given to LoadDir joined with the file name.
	File string
	// Line is the line of the table key.
	Line int
	// Schema and Table are the table's names, with any backquotes removed:
	// "`my.schema`.repos" gives Schema "my.schema" and Table "repos". Both
	// are valid MySQL names (see the package comment).
	Schema, Table string
	// Key is the table's primary key column, when the key is one column;
	// "" when it has several.
	Key string
	// Keys are the columns of a primary key of several, in file order
	// (key: [user_id, day]); nil for a key of one column (Key). See
	// KeyColumns.
	Keys []string
	// Counters are the counter columns, in file order; at least one, none
	// equal to Key or to each other (ignoring case).
	Counters []Counter
	// Slots is the number of slots per counter row, MinSlots to MaxSlots;
	// DefaultSlots when the file does not say.
	Slots int
	// Mode is ModeActive or ModeShadow; ModeActive when the file does not
	// say.
	Mode string
	// Touch are the touch columns, in file order (none when the file does
	// not say): columns such as updated_at that statements assign together
	// with an increment (Rails' touch, Laravel's and Sequelize's
	// increment()). The proxy slots them with the increment: each slot
	// keeps the greatest value assigned to it, and the column reads as the
	// greatest of its base value and its slots. None is the key, a counter
	// or listed twice.
	Touch []Column
	// Reads is ReadsExact or ReadsRolledUp; ReadsExact when the file does
	// not say.
	Reads string
	// MaxStaleness bounds how far behind its total a counter read in
	// ReadsRolledUp mode may be: the roll-up folds every record with slot
	// rows at least this often. DefaultMaxStaleness when the file does not
	// say; only set with ReadsRolledUp.
	MaxStaleness time.Duration
	// Bounds are the ranges the rule declares for some of its counters
	// (bounds: {attempts: {max: 100}}), in file order: slotted increments
	// keep such a counter's total within its bounds as within its column's
	// range, so that a condition the bounds imply (phpBB's WHERE
	// user_login_attempts < 100 with an increment of 1 and max: 100)
	// holds whenever a slotted increment succeeds. An increment that would
	// leave them runs on the base row, where the server decides: the
	// bounds are not a constraint, the column's range and CHECKs are.
	Bounds []Bound
	// KeyLine, CountersLine, SlotsLine, ModeLine, TouchLine, ReadsLine,
	// MaxStalenessLine and BoundsLine are the lines of those keys, for
	// later error messages; 0 for a key the file leaves out.
	KeyLine, CountersLine, SlotsLine, ModeLine, TouchLine, ReadsLine, MaxStalenessLine, BoundsLine int
}

// Bound is a range Rule.Bounds declares for a counter: Min and Max are
// whole numbers in decimal ("" where the file gives none), Min ≤ Max.
type Bound struct {
	Counter  string
	Min, Max string
	Line     int
}

// RolledUp reports whether the rule's plain reads see the rolled-up base
// value (Reads is ReadsRolledUp).
func (r *Rule) RolledUp() bool { return r.Reads == ReadsRolledUp }

// Column is a column a Rule lists: a counter, or a touch column.
type Column struct {
	// Name is the column name, with any backquotes removed.
	Name string
	// Line is the line the column is listed on.
	Line int
}

// Counter is one counter column of a Rule.
type Counter = Column

// Name returns the rule's table as a rule file would write it,
// schema.table, backquoting a name that holds a '.', whitespace or a
// backquote.
func (r *Rule) Name() string { return quoteName(r.Schema) + "." + quoteName(r.Table) }

// HasCounter reports whether column is one of r's counters, ignoring case.
func (r *Rule) HasCounter(column string) bool {
	for _, c := range r.Counters {
		if strings.EqualFold(c.Name, column) {
			return true
		}
	}
	return false
}

// where returns "FILE:LINE" for r, or as much of it as is known.
func (r *Rule) where() string {
	switch {
	case r.File != "" && r.Line > 0:
		return r.File + ":" + strconv.Itoa(r.Line)
	case r.File != "":
		return r.File
	case r.Line > 0:
		return "line " + strconv.Itoa(r.Line)
	default:
		return "an earlier rule"
	}
}

// errAt returns an *Error in r's file.
func (r *Rule) errAt(line int, format string, args ...any) *Error {
	return &Error{File: r.File, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// checkTable checks the table names; line is where to report a problem.
func (r *Rule) checkTable(line int) []*Error {
	var errs []*Error
	if err := checkName("schema name", r.Schema); err != nil {
		errs = append(errs, r.errAt(line, "table: %v", err))
	}
	if err := checkName("table name", r.Table); err != nil {
		errs = append(errs, r.errAt(line, "table: %v", err))
	}
	return errs
}

// checkKey checks the key column names, and that none repeats.
func (r *Rule) checkKey() []*Error {
	keys := r.KeyColumns()
	if len(keys) == 0 {
		return []*Error{r.errAt(r.KeyLine, "key: empty list; want the primary key's columns")}
	}
	for i, k := range keys {
		if err := checkName("column name", k); err != nil {
			return []*Error{r.errAt(r.KeyLine, "key: %v", err)}
		}
		for _, o := range keys[:i] {
			if strings.EqualFold(o, k) {
				return []*Error{r.errAt(r.KeyLine, "key: %q is listed twice", k)}
			}
		}
	}
	return nil
}

// KeyColumns are the key's columns: [Key], or Keys.
func (r *Rule) KeyColumns() []string {
	if len(r.Keys) == 0 {
		return []string{r.Key}
	}
	return r.Keys
}

// keyColumnNoun is "the key column", or "a key column" of a key of several.
func (r *Rule) keyColumnNoun() string {
	if len(r.KeyColumns()) > 1 {
		return "a key column"
	}
	return "the key column"
}

// IsKey reports whether col is one of the key's columns (ignoring case).
func (r *Rule) IsKey(col string) bool {
	for _, k := range r.KeyColumns() {
		if strings.EqualFold(k, col) {
			return true
		}
	}
	return false
}

// checkCounters checks the counter names, that none repeats, and, if
// withKey, that none is the key.
func (r *Rule) checkCounters(withKey bool) []*Error {
	if len(r.Counters) == 0 {
		return []*Error{r.errAt(r.CountersLine, "counters: empty list; want at least one counter column")}
	}
	var errs []*Error
	seen := make(map[string]int, len(r.Counters)) // folded name → index
	for i, c := range r.Counters {
		if err := checkName("column name", c.Name); err != nil {
			errs = append(errs, r.errAt(c.Line, "counters: %v", err))
			continue
		}
		if withKey && r.IsKey(c.Name) {
			errs = append(errs, r.errAt(c.Line, "counters: %q is %s, it cannot also be a counter", c.Name, r.keyColumnNoun()))
			continue
		}
		if j, dup := seen[fold(c.Name)]; dup {
			first := r.Counters[j]
			if first.Line > 0 {
				errs = append(errs, r.errAt(c.Line, "counters: %q is listed twice (first as %q on line %d)", c.Name, first.Name, first.Line))
			} else {
				errs = append(errs, r.errAt(c.Line, "counters: %q is listed twice (first as %q)", c.Name, first.Name))
			}
			continue
		}
		seen[fold(c.Name)] = i
	}
	return errs
}

// checkTouch checks the touch column names, that none repeats and, if
// withKey and withCounters, that none is the key or a counter.
func (r *Rule) checkTouch(withKey, withCounters bool) []*Error {
	var errs []*Error
	seen := make(map[string]int, len(r.Touch))
	for i, c := range r.Touch {
		if err := checkName("column name", c.Name); err != nil {
			errs = append(errs, r.errAt(c.Line, "touch: %v", err))
			continue
		}
		if withKey && r.IsKey(c.Name) {
			errs = append(errs, r.errAt(c.Line, "touch: %q is %s, it cannot also be a touch column", c.Name, r.keyColumnNoun()))
			continue
		}
		if withCounters && r.HasCounter(c.Name) {
			errs = append(errs, r.errAt(c.Line, "touch: %q is a counter, it cannot also be a touch column", c.Name))
			continue
		}
		if j, dup := seen[fold(c.Name)]; dup {
			errs = append(errs, r.errAt(c.Line, "touch: %q is listed twice (first as %q on line %d)", c.Name, r.Touch[j].Name, r.Touch[j].Line))
			continue
		}
		seen[fold(c.Name)] = i
	}
	return errs
}

// Slotted lists the columns whose values the proxy keeps in slots, each
// with a record type: the counters, then the touch columns.
func (r *Rule) Slotted() []Column {
	return append(append([]Column(nil), r.Counters...), r.Touch...)
}

// HasTouch reports whether column is one of r's touch columns, ignoring
// case.
func (r *Rule) HasTouch(column string) bool {
	for _, c := range r.Touch {
		if strings.EqualFold(c.Name, column) {
			return true
		}
	}
	return false
}

// checkSlots checks the slot count's range.
func (r *Rule) checkSlots() []*Error {
	if r.Slots < MinSlots || r.Slots > MaxSlots {
		return []*Error{r.errAt(r.SlotsLine, "slots: %d is out of range; want %d to %d", r.Slots, MinSlots, MaxSlots)}
	}
	return nil
}

// checkMode checks the mode.
func (r *Rule) checkMode() []*Error {
	if r.Mode != ModeActive && r.Mode != ModeShadow {
		return []*Error{r.errAt(r.ModeLine, "mode: unknown mode %q (want %s or %s)", r.Mode, ModeActive, ModeShadow)}
	}
	return nil
}

// checkReads checks the read mode and its staleness bound.
func (r *Rule) checkReads() []*Error {
	switch r.Reads {
	case "", ReadsExact:
		if r.MaxStalenessLine != 0 {
			return []*Error{r.errAt(r.MaxStalenessLine, "max_staleness: only with reads: %s (reads are %s)", ReadsRolledUp, ReadsExact)}
		}
	case ReadsRolledUp:
		if r.MaxStaleness < MinMaxStaleness || r.MaxStaleness > MaxMaxStaleness {
			return []*Error{r.errAt(cmp.Or(r.MaxStalenessLine, r.ReadsLine), "max_staleness: %v is out of range (want %v to %v)", r.MaxStaleness, MinMaxStaleness, MaxMaxStaleness)}
		}
	default:
		e := r.errAt(r.ReadsLine, "reads: unknown read mode %q (want %s or %s)", r.Reads, ReadsExact, ReadsRolledUp)
		if strings.EqualFold(strings.NewReplacer("-", "_", " ", "_").Replace(r.Reads), ReadsRolledUp) || strings.EqualFold(r.Reads, "rolledup") {
			e = r.errAt(r.ReadsLine, "reads: unknown read mode %q; did you mean %s?", r.Reads, ReadsRolledUp)
		}
		return []*Error{e}
	}
	return nil
}

// check runs every check on r.
func (r *Rule) check() []*Error {
	var errs []*Error
	errs = append(errs, r.checkTable(r.Line)...)
	errs = append(errs, r.checkKey()...)
	errs = append(errs, r.checkCounters(true)...)
	errs = append(errs, r.checkSlots()...)
	errs = append(errs, r.checkMode()...)
	errs = append(errs, r.checkReads()...)
	return errs
}

// tableKey identifies a table under fold.
type tableKey struct{ schema, table string }

// entry is a Set's index entry for one table.
type entry struct {
	rule     *Rule
	counters map[string]struct{} // folded counter names
}

// Set is a validated collection of rules, at most one per table. It is
// immutable once built and safe for concurrent use. A nil *Set is empty.
type Set struct {
	rules   []*Rule // sorted by Schema, then Table
	byTable map[tableKey]*entry
}

// NewSet checks rules and returns a Set of them. Each rule gets every check
// Parse makes on the values (names, counters, slots, mode), so hand-built
// rules are held to the same standard; a zero Slots or empty Mode takes the default. Two rules
// for the same table (ignoring case) are an error reported at the later one,
// naming the file and line of the first. NewSet copies the rules, so the
// caller may go on using them; the Set's rules are the copies.
//
// On failure NewSet returns a nil Set and the problems, a single *Error or
// several joined with errors.Join, in argument order (see Errors).
func NewSet(rules ...*Rule) (*Set, error) {
	var errs []*Error
	s := &Set{byTable: make(map[tableKey]*entry, len(rules))}
	for i, in := range rules {
		if in == nil {
			errs = append(errs, &Error{Msg: fmt.Sprintf("rule %d of %d is nil", i+1, len(rules))})
			continue
		}
		r := *in
		r.Counters = slices.Clone(in.Counters)
		if r.Slots == 0 {
			r.Slots = DefaultSlots
		}
		if r.Mode == "" {
			r.Mode = ModeActive
		}
		if e := r.check(); len(e) > 0 {
			errs = append(errs, e...)
			continue
		}
		if e := s.add(&r); e != nil {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, join(errs)
	}
	s.sort()
	return s, nil
}

// add indexes the valid rule r, or reports that its table already has one.
func (s *Set) add(r *Rule) *Error {
	k := tableKey{fold(r.Schema), fold(r.Table)}
	if prev, dup := s.byTable[k]; dup {
		p := prev.rule
		if p.Schema == r.Schema && p.Table == r.Table {
			return r.errAt(r.Line, "table: %s is already ruled by %s", r.Name(), p.where())
		}
		return r.errAt(r.Line, "table: %s is already ruled by %s (as %s; table names match ignoring case)", r.Name(), p.where(), p.Name())
	}
	e := &entry{rule: r, counters: make(map[string]struct{}, len(r.Counters))}
	for _, c := range r.Counters {
		e.counters[fold(c.Name)] = struct{}{}
	}
	s.byTable[k] = e
	s.rules = append(s.rules, r)
	return nil
}

// sort puts s.rules in Rules order.
func (s *Set) sort() {
	slices.SortFunc(s.rules, func(a, b *Rule) int {
		return cmp.Or(strings.Compare(a.Schema, b.Schema), strings.Compare(a.Table, b.Table))
	})
}

// Rules returns the rules sorted by Schema, then Table (comparing bytes). The
// slice is the caller's; the rules it points to must not be modified.
func (s *Set) Rules() []*Rule {
	if s == nil {
		return nil
	}
	return slices.Clone(s.rules)
}

// Len returns the number of rules, which is the number of tables ruled.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Lookup returns the rule for the table schema.table, or nil if there is
// none. schema and table are bare names (no backquotes) and match ignoring
// case; see the package comment for why. The rule must not be modified.
// Lookup does not allocate for names already in lower case.
func (s *Set) Lookup(schema, table string) *Rule {
	if e := s.entry(schema, table); e != nil {
		return e.rule
	}
	return nil
}

// Counter reports whether column is a counter column of the rule for
// schema.table. All three are bare names and match ignoring case.
func (s *Set) Counter(schema, table, column string) bool {
	e := s.entry(schema, table)
	if e == nil {
		return false
	}
	_, ok := e.counters[fold(column)]
	return ok
}

// entry returns the index entry for schema.table, or nil.
func (s *Set) entry(schema, table string) *entry {
	if s == nil || len(s.byTable) == 0 {
		return nil
	}
	return s.byTable[tableKey{fold(schema), fold(table)}]
}

// LoadDir parses every rule file in dir, those whose names end in .yaml or
// .yml, in name order, and returns a Set of them. Names starting with a '.'
// are skipped (editor lock files; the ..data links of a Kubernetes ConfigMap
// volume), as are subdirectories. A directory with no rule files gives an
// empty Set; a directory that cannot be read is an error wrapping the
// operating system's (errors.Is(err, fs.ErrNotExist) for a missing one).
//
// Every problem in every file is reported, not just the first: on failure
// LoadDir returns a nil Set and the problems, a single *Error or several
// joined with errors.Join (one per line), sorted by file, then line (see
// Errors). A table ruled by two files is reported at the later file, naming
// the earlier.
func LoadDir(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading rule directory: %w", err)
	}
	var (
		errs  []*Error
		rules []*Rule
	)
	for _, de := range entries {
		name := de.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		if !de.Type().IsRegular() {
			// A directory, or a link or other special file: see what it
			// leads to.
			fi, err := os.Stat(path)
			if err != nil {
				errs = append(errs, readError(path, err))
				continue
			}
			if fi.IsDir() {
				continue
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, readError(path, err))
			continue
		}
		r, perrs := parse(path, data)
		errs = append(errs, perrs...)
		if r != nil {
			rules = append(rules, r)
		}
	}
	s := &Set{byTable: make(map[tableKey]*entry, len(rules))}
	for _, r := range rules {
		if e := s.add(r); e != nil {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, join(errs)
	}
	s.sort()
	return s, nil
}

// readError reports a file that cannot be read.
func readError(path string, err error) *Error {
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	return &Error{File: path, Msg: "cannot read: " + cause.Error(), err: err}
}
