package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slotproxy/slotproxy/internal/yamlkeys"

	"gopkg.in/yaml.v3"
)

// Parse parses and checks data, the content of the rule file named file,
// which is used only in the Rule and in error messages. It returns the
// rule, with defaults filled in, or every problem found: a single *Error
// or several joined with errors.Join, sorted by line (see Errors). Parse
// cannot see other files, so it does not detect a table ruled twice; NewSet
// and LoadDir do.
func Parse(file string, data []byte) (*Rule, error) {
	r, errs := parse(file, data)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return r, nil
}

// keys are the keys a rule file may have.
var keys = []string{"bounds", "counters", "key", "max_staleness", "mode", "reads", "slots", "table", "touch"}

// required are the keys a rule file must have.
var required = []string{"table", "key", "counters"}

// parser gathers the problems of one file.
type parser struct {
	file string
	data []byte
	errs []*Error
}

// errorf records a problem on line.
func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// parse is Parse returning the problems as a list, sorted by line. The rule
// is nil if there are any.
func parse(file string, data []byte) (*Rule, []*Error) {
	p := &parser{file: file, data: data}
	r := p.rule()
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.errs
	}
	return r, nil
}

// rule decodes and checks the file.
func (p *parser) rule() *Rule {
	root := p.document()
	if root == nil {
		return nil
	}
	const want = "want a mapping with keys table, key and counters"
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		p.errorf(1, "empty rule file; %s", want)
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "%s, got %s", want, describe(root))
		return nil
	}

	// Find the keys, reporting unknown and repeated ones.
	keyLine := map[string]int{}
	values := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := yamlkeys.Resolve(root.Content[i]), yamlkeys.Resolve(root.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(k.Line, "want a key name, got %s", describe(k))
			continue
		}
		if !slices.Contains(keys, k.Value) {
			p.errorf(k.Line, "%s", unknownKey(k.Value))
			continue
		}
		if first, dup := keyLine[k.Value]; dup {
			p.errorf(k.Line, "duplicate key %q (first on line %d)", k.Value, first)
			continue
		}
		keyLine[k.Value] = k.Line
		values[k.Value] = v
	}
	for _, k := range required {
		if _, ok := keyLine[k]; !ok {
			p.errorf(root.Line, "missing required key %q", k)
		}
	}

	r := &Rule{
		File:         p.file,
		Line:         keyLine["table"],
		KeyLine:      keyLine["key"],
		CountersLine: keyLine["counters"],
		SlotsLine:    keyLine["slots"],
		ModeLine:     keyLine["mode"],
		TouchLine:    keyLine["touch"],
		ReadsLine:    keyLine["reads"],
		BoundsLine:   keyLine["bounds"],
		Slots:        DefaultSlots,
		Mode:         ModeActive,
		Reads:        ReadsExact,
	}
	r.MaxStalenessLine = keyLine["max_staleness"]
	before := len(p.errs)
	if v := values["table"]; v != nil {
		if s, ok := p.scalar(v, "table", "schema.table, such as app.repos"); ok {
			var err error
			if r.Schema, r.Table, err = splitTable(s); err != nil {
				p.errorf(v.Line, "table: %v", err)
			} else {
				p.errs = append(p.errs, r.checkTable(v.Line)...)
			}
		}
	}
	keyOK := false
	if v := values["key"]; v != nil {
		if v.Kind == yaml.SequenceNode {
			// key: [user_id, day]: a primary key of several columns.
			if cols, ok := p.columns(v, "key", "the primary key's columns, such as [user_id, day]"); ok && len(cols) == 0 {
				p.errorf(v.Line, "key: empty list; want the primary key's columns")
			} else if ok {
				for _, c := range cols {
					r.Keys = append(r.Keys, c.Name)
				}
				if len(r.Keys) == 1 {
					r.Key, r.Keys = r.Keys[0], nil
				}
				if e := r.checkKey(); e != nil {
					p.errs = append(p.errs, e...)
				} else {
					keyOK = true
				}
			}
		} else if s, ok := p.scalar(v, "key", "the primary key column, or a list of its columns"); ok {
			var err error
			if r.Key, err = parseColumn(s); err != nil {
				p.errorf(v.Line, "key: %v", err)
			} else if e := r.checkKey(); e != nil {
				p.errs = append(p.errs, e...)
			} else {
				keyOK = true
			}
		}
	}
	countersOK := false
	if v := values["counters"]; v != nil {
		var ok bool
		if r.Counters, ok = p.columns(v, "counters", "a list of counter columns, such as [downloads, stars]"); ok {
			before := len(p.errs)
			p.errs = append(p.errs, r.checkCounters(keyOK)...)
			countersOK = len(p.errs) == before
		}
	}
	if v := values["touch"]; v != nil && !isNull(v) {
		var ok bool
		if r.Touch, ok = p.columns(v, "touch", "a list of columns assigned together with increments, such as [updated_at]"); ok {
			p.errs = append(p.errs, r.checkTouch(keyOK, countersOK)...)
		}
	}
	if v := values["bounds"]; v != nil && !isNull(v) {
		p.bounds(v, r, countersOK)
	}
	if v := values["slots"]; v != nil && !isNull(v) {
		p.slots(v, r)
	}
	if v := values["mode"]; v != nil && !isNull(v) {
		if s, ok := p.scalar(v, "mode", ModeActive+" or "+ModeShadow); ok {
			r.Mode = s
			p.errs = append(p.errs, r.checkMode()...)
		}
	}
	if v := values["reads"]; v != nil && !isNull(v) {
		if s, ok := p.scalar(v, "reads", ReadsExact+" or "+ReadsRolledUp); ok {
			r.Reads = s
		}
	}
	readsBefore := len(p.errs)
	if v := values["max_staleness"]; v != nil && !isNull(v) {
		if s, ok := p.scalar(v, "max_staleness", "a duration, such as 10s or 1m"); ok {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil && strings.Trim(s, "0123456789") == "":
				p.errorf(v.Line, "max_staleness: %q has no unit; want a duration, such as %ss", s, s)
			case err != nil:
				p.errorf(v.Line, "max_staleness: %q is not a duration; want one such as 10s or 1m", s)
			default:
				r.MaxStaleness = d
			}
		}
	} else if r.Reads == ReadsRolledUp {
		r.MaxStaleness = DefaultMaxStaleness
	}
	if len(p.errs) == readsBefore {
		p.errs = append(p.errs, r.checkReads()...)
	}
	if len(p.errs) > before {
		return nil
	}
	return r
}

// scalar returns the single value v of key; want describes what belongs
// there. A null value or a list or mapping is a problem.
func (p *parser) scalar(v *yaml.Node, key, want string) (string, bool) {
	switch {
	case isNull(v):
		p.errorf(v.Line, "%s: no value; want %s", key, want)
		return "", false
	case v.Kind != yaml.ScalarNode:
		p.errorf(v.Line, "%s: want %s, got %s", key, want, describe(v))
		return "", false
	}
	return v.Value, true
}

// columns decodes the list of column names v under key; want describes
// what belongs there. An empty list is allowed here (counters: is
// checked for one later). ok reports whether every item is a well-formed name, and so whether the
// list may be judged further.
func (p *parser) columns(v *yaml.Node, key, want string) (cols []Column, ok bool) {
	if isNull(v) {
		p.errorf(v.Line, "%s: no value; want %s", key, want)
		return nil, false
	}
	if v.Kind != yaml.SequenceNode {
		p.errorf(v.Line, "%s: want %s, got %s", key, want, describe(v))
		return nil, false
	}
	ok = true
	for i, item := range v.Content {
		item = yamlkeys.Resolve(item)
		switch {
		case isNull(item):
			p.errorf(item.Line, "%s: item %d is empty; want a column name", key, i+1)
			ok = false
			continue
		case item.Kind != yaml.ScalarNode:
			p.errorf(item.Line, "%s: item %d: want a column name, got %s", key, i+1, describe(item))
			ok = false
			continue
		}
		name, err := parseColumn(item.Value)
		if err != nil {
			p.errorf(item.Line, "%s: %v", key, err)
			ok = false
			continue
		}
		cols = append(cols, Column{Name: name, Line: item.Line})
	}
	return cols, ok
}

// decimalRE matches the whole numbers accepted for slots: decimal, without
// leading zeros, which YAML 1.1 readers would take for octal.
var decimalRE = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// integerRE matches the whole numbers accepted for bounds.
var integerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,19})$`)

// bounds decodes the mapping v, counter: {min: m, max: n}, into r.Bounds
// and checks that each names a counter of the rule (when countersOK)
// once, with a min no greater than its max.
func (p *parser) bounds(v *yaml.Node, r *Rule, countersOK bool) {
	const want = "a mapping of counters to their bounds, such as {attempts: {max: 100}}"
	if v.Kind != yaml.MappingNode {
		p.errorf(v.Line, "bounds: want %s, got %s", want, describe(v))
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, b := yamlkeys.Resolve(v.Content[i]), yamlkeys.Resolve(v.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(k.Line, "bounds: want a counter name, got %s", describe(k))
			continue
		}
		name, err := parseColumn(k.Value)
		if err != nil {
			p.errorf(k.Line, "bounds: %v", err)
			continue
		}
		bd := Bound{Counter: name, Line: k.Line}
		if b.Kind != yaml.MappingNode || len(b.Content) == 0 {
			got := describe(b)
			if b.Kind == yaml.MappingNode {
				got = "no bound"
			}
			p.errorf(b.Line, "bounds: %s: want {min: m, max: n} (either or both), got %s", name, got)
			continue
		}
		ok := true
		for j := 0; j+1 < len(b.Content); j += 2 {
			bk, bv := yamlkeys.Resolve(b.Content[j]), yamlkeys.Resolve(b.Content[j+1])
			var dst *string
			switch bk.Value {
			case "min":
				dst = &bd.Min
			case "max":
				dst = &bd.Max
			default:
				p.errorf(bk.Line, "bounds: %s: unknown key %q; want min or max", name, bk.Value)
				ok = false
				continue
			}
			if *dst != "" {
				p.errorf(bk.Line, "bounds: %s: %s given twice", name, bk.Value)
				ok = false
				continue
			}
			if bv.Kind != yaml.ScalarNode || bv.Tag == "!!str" || !integerRE.MatchString(bv.Value) {
				p.errorf(bv.Line, "bounds: %s: %s: want a whole number, got %s", name, bk.Value, describe(bv))
				ok = false
				continue
			}
			*dst = bv.Value
		}
		if !ok {
			continue
		}
		if bd.Min != "" && bd.Max != "" {
			lo, _ := new(big.Int).SetString(bd.Min, 10)
			hi, _ := new(big.Int).SetString(bd.Max, 10)
			if lo.Cmp(hi) > 0 {
				p.errorf(k.Line, "bounds: %s: min %s is above max %s", name, bd.Min, bd.Max)
				continue
			}
		}
		if j := slices.IndexFunc(r.Bounds, func(o Bound) bool { return strings.EqualFold(o.Counter, name) }); j >= 0 {
			p.errorf(k.Line, "bounds: %q is listed twice (first on line %d)", name, r.Bounds[j].Line)
			continue
		}
		if countersOK && !slices.ContainsFunc(r.Counters, func(c Counter) bool { return strings.EqualFold(c.Name, name) }) {
			p.errorf(k.Line, "bounds: %q is not one of the rule's counters", name)
			continue
		}
		r.Bounds = append(r.Bounds, bd)
	}
}

// slots decodes the slot count v into r.Slots and checks it.
func (p *parser) slots(v *yaml.Node, r *Rule) {
	want := fmt.Sprintf("a whole number from %d to %d", MinSlots, MaxSlots)
	s, ok := p.scalar(v, "slots", want)
	if !ok {
		return
	}
	// A quoted number is a string; a plain one too long for yaml.v3 to
	// take for an integer is a float, caught below as out of range.
	if v.Tag == "!!str" || !decimalRE.MatchString(s) {
		p.errorf(v.Line, "slots: want %s, got %s", want, describe(v))
		return
	}
	n, err := strconv.Atoi(s)
	if err != nil { // out of int's range
		p.errorf(v.Line, "slots: %s is out of range; want %d to %d", s, MinSlots, MaxSlots)
		return
	}
	r.Slots = n
	p.errs = append(p.errs, r.checkSlots()...)
}

// document parses p.data, which must hold one YAML document, and returns its
// top node, or nil after recording a problem. An empty file yields a null
// scalar.
func (p *parser) document() *yaml.Node {
	if !utf8.Valid(p.data) {
		i := 0
		for i < len(p.data) {
			r, size := utf8.DecodeRune(p.data[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		p.errorf(p.lineAt(i), "not valid UTF-8 (byte %d); rule files must be UTF-8", i+1)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(p.data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: 1}
	} else if err != nil {
		p.syntaxError(err)
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		p.errorf(max(next.Line, 1), "more than one YAML document; want one rule per file")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.syntaxError(err)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.errorf(max(doc.Line, 1), "not a YAML document")
		return nil
	}
	return yamlkeys.Resolve(doc.Content[0])
}

// lineAt returns the 1-based line holding byte offset i of p.data.
func (p *parser) lineAt(i int) int {
	return bytes.Count(p.data[:min(i, len(p.data))], []byte("\n")) + 1
}

// lines returns the number of lines in p.data, at least 1.
func (p *parser) lines() int {
	n := bytes.Count(p.data, []byte("\n"))
	if len(p.data) > 0 && p.data[len(p.data)-1] != '\n' {
		n++
	}
	return max(n, 1)
}

// unknownAnchorRE matches yaml.v3's error for an alias to an undefined
// anchor, which carries no line.
var unknownAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// syntaxError records a yaml.v3 decoding error with a 1-based line. yaml.v3
// leaves out "line N: " when N would be 1 (its marks are 0-based and 0
// means unknown), so a missing line means the first one, except for an
// unknown anchor, whose line is found by looking for the alias. A line past
// the end of the file (an error found at the end of the stream) becomes the
// last line.
func (p *parser) syntaxError(err error) {
	line, problem, ok := yamlkeys.Syntax(err)
	if !ok {
		p.errorf(1, "invalid YAML: %v", err)
		return
	}
	if a := unknownAnchorRE.FindStringSubmatch(problem); a != nil && line == 0 {
		if i := bytes.Index(p.data, []byte("*"+a[1])); i >= 0 {
			line = p.lineAt(i)
		}
	}
	line = min(max(line, 1), p.lines())
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: "invalid YAML: " + problem, err: err})
}

// unknownKey describes the unknown key name, suggesting the nearest known
// one or else listing them all.
func unknownKey(name string) string { return yamlkeys.Unknown(name, keys) }

// isNull reports whether n is a null value ("key:", "key: ~", "key: null").
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// describe names n for error messages: its kind, or a scalar's value.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	default:
		return "something else"
	}
}
