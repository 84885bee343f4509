package rewrite

import (
	"cmp"
	"strconv"
	"strings"
	"sync"
)

// Rewrite templates: statements that differ only in their integer literals
// (UPDATE … WHERE id = 5, … id = 6) share one parse. The first one is
// planned with every positive integer literal replaced by a sentinel number
// that cannot occur in the text; the plans are kept, and later statements of
// the same shape get the template's plans with the sentinels replaced by
// their own literals, and a fresh slot. Replacing digits by digits never
// changes how the statement tokenizes, and every plan decision that depends
// on an integer literal's value (zero deltas, LIMIT 0) keeps that literal in
// the template key (upserts, whose plans depend on their values' ranges,
// are not templated), so a template is exactly what planning the statement
// would produce.

const (
	templateCacheSize = 4096
	maxTemplateLits   = 64
	// sentinelBase is a 17-digit prefix; sentinel i is sentinelBase*1000+i.
	sentinelBase = 73924691358024
	// slotSentinel stands for the slot number in a template.
	slotSentinel = "73924691358023999"
)

type template struct {
	plans []Plan
	lits  int
}

type templateCache struct {
	mu sync.RWMutex
	m  map[string]*template
}

func sentinel(i int) string { return strconv.FormatInt(sentinelBase*1000+int64(i), 10) }

// templateKey returns the statement's shape (its text with positive integer
// literals replaced by '#', prefixed by the session state that affects
// planning) and the literals' text spans. ok is false when the statement is
// not worth or not safe to template.
func templateKey(sql string, sess Session, buf []byte, spans [][2]int) ([]byte, [][2]int, bool) {
	if strings.Contains(sql, "7392469135802") || len(sess.TempTables) > 0 {
		// A sentinel could collide; temporary tables change plans
		// without changing the key.
		return buf, spans, false
	}
	buf = append(buf[:0], sess.DB...)
	buf = append(buf, 0)
	if sess.ANSIQuotes {
		buf = append(buf, 'A')
	}
	if sess.NoBackslashEscapes {
		buf = append(buf, 'B')
	}
	buf = append(buf, 0)
	spans = spans[:0]
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '\'' || (c == '"' && !sess.ANSIQuotes):
			end := stringEnd(sql, i, !sess.NoBackslashEscapes)
			if end < 0 {
				return buf, spans, false
			}
			buf = append(buf, sql[i:end]...)
			i = end
		case c == '`' || (c == '"' && sess.ANSIQuotes):
			end := identEnd(sql, i, sess.ANSIQuotes)
			if end < 0 {
				return buf, spans, false
			}
			buf = append(buf, sql[i:end]...)
			i = end
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*', c == '#', c == '-' && strings.HasPrefix(sql[i:], "-- "):
			end := skipSpace(sql, i)
			if end == i { // executable comment or hint: keep scanning inside it
				buf = append(buf, c)
				i++
				continue
			}
			buf = append(buf, sql[i:end]...)
			i = end
		case '0' <= c && c <= '9':
			j := i
			for j < len(sql) && '0' <= sql[j] && sql[j] <= '9' {
				j++
			}
			prevIdent := i > 0 && (isIdentByte(sql[i-1]) || sql[i-1] == '.')
			nextIdent := j < len(sql) && (isIdentByte(sql[j]) || sql[j] == '.')
			if prevIdent || nextIdent || c == '0' || j-i > 18 {
				// Part of a name, a decimal, hex, a zero or too long: keep.
				for j < len(sql) && (isIdentByte(sql[j]) || sql[j] == '.') {
					j++
				}
				buf = append(buf, sql[i:j]...)
				i = j
				continue
			}
			if len(spans) == maxTemplateLits {
				return buf, spans, false
			}
			spans = append(spans, [2]int{i, j})
			buf = append(buf, '#')
			i = j
		case isIdentByte(c):
			j := i
			for j < len(sql) && isIdentByte(sql[j]) {
				j++
			}
			if j-i == len("duplicate") && strings.EqualFold(sql[i:j], "duplicate") {
				// An upsert: whether it is slotted depends on its
				// values (their columns' ranges), and its answer's
				// insert id on its key.
				return buf, spans, false
			}
			buf = append(buf, sql[i:j]...)
			i = j
		default:
			buf = append(buf, c)
			i++
		}
	}
	return buf, spans, len(spans) > 0
}

// stringEnd returns the end of the string literal starting at i.
func stringEnd(sql string, i int, backslash bool) int {
	q := sql[i]
	for j := i + 1; j < len(sql); j++ {
		switch {
		case backslash && sql[j] == '\\':
			j++
		case sql[j] == q:
			if j+1 < len(sql) && sql[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return -1
}

func (c *templateCache) get(key []byte) *template {
	c.mu.RLock()
	t := c.m[string(key)]
	c.mu.RUnlock()
	return t
}

func (c *templateCache) put(key []byte, t *template) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*template{}
	}
	if len(c.m) >= templateCacheSize {
		for k := range c.m { // forget an arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[string(key)] = t
	c.mu.Unlock()
}

// instantiate returns the template's plans with the sentinels replaced by
// the statement's literals and the slot sentinel by a fresh slot.
func (t *template) instantiate(sql string, spans [][2]int, slot func(*Table) int) []Plan {
	lits := make([]string, len(spans))
	for i, s := range spans {
		lits[i] = sql[s[0]:s[1]]
	}
	out := make([]Plan, len(t.plans))
	for i, p := range t.plans {
		slotText := ""
		if _, ok := p.Op.(*Increment); ok && p.Table != nil {
			slotText = strconv.Itoa(slot(p.Table))
		}
		_ = p.mapSQL(func(s string) (string, error) { return substitute(s, lits, slotText), nil }) // substitute cannot fail
		if inc, ok := p.Op.(*Increment); ok && slotText != "" && inc.Slot >= 0 {
			inc.Slot, _ = strconv.Atoi(slotText) // p.Op is mapSQL's copy
		}
		out[i] = p
	}
	return out
}

// maskInts replaces the integer literals of s that a template would take
// as parameters by '#'.
func maskInts(s string, sess Session) string {
	key, _, _ := templateKey(s, Session{ANSIQuotes: sess.ANSIQuotes, NoBackslashEscapes: sess.NoBackslashEscapes}, nil, nil)
	if i := strings.IndexByte(string(key), 0); i >= 0 {
		if j := strings.IndexByte(string(key[i+1:]), 0); j >= 0 {
			return string(key[i+1+j+1:])
		}
	}
	return s
}

// maskSentinels replaces the literal sentinels in s by '#', so that a
// template's text after them does not depend on the literals.
func maskSentinels(s string) string {
	const prefix = "73924691358"
	if !strings.Contains(s, prefix) {
		return s
	}
	var b strings.Builder
	for {
		k := strings.Index(s, prefix)
		if k < 0 || k+17 > len(s) {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:k])
		b.WriteByte('#')
		s = s[k+17:]
	}
}

// substitute replaces every sentinel in s.
func substitute(s string, lits []string, slot string) string {
	const prefix = "73924691358"
	if !strings.Contains(s, prefix) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		k := strings.Index(s, prefix)
		if k < 0 || k+17 > len(s) {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:k])
		tok := s[k : k+17]
		if tok == slotSentinel {
			b.WriteString(slot)
		} else if n, err := strconv.Atoi(tok[14:]); err == nil && tok[:14] == strconv.FormatInt(sentinelBase, 10) && n < len(lits) {
			b.WriteString(lits[n])
		} else {
			b.WriteString(tok)
		}
		s = s[k+17:]
	}
}

// SlotSentinelSQL returns the increment plan p's SQL planned again with a
// sentinel for its slot, written once (Session.slotColumn): the same text for two plans of one statement
// that differ only in the slot they picked (a prepared statement's plan
// before and after a catalog reload, say).
func (r *Rewriter) SlotSentinelSQL(p Plan, sess Session) (string, bool) {
	if _, ok := p.Op.(*Increment); !ok {
		return "", false
	}
	slot, _ := strconv.Atoi(slotSentinel)
	sess.slotColumn = true
	plans, err := r.rewrite(p.Original, sess, func(int) int { return slot })
	if err != nil || len(plans) != 1 {
		return "", false
	}
	inc, ok := plans[0].Op.(*Increment)
	if !ok {
		return "", false
	}
	return cmp.Or(inc.Sorted, inc.SQL), true
}

// SlotParam returns the slotted upsert of increment plan p (planned for
// sess) with its slot as a parameter, so that each execution of a prepared
// increment can pick its own slot: sql takes the client's parameters and
// one more, the slot, at index param. ok is false when that is not one
// upsert with one slot (the plan's own SQL, with the slot it was planned
// with, serves instead).
func (r *Rewriter) SlotParam(p Plan, sess Session) (sql string, param int, ok bool) {
	if _, ok := p.Op.(*Increment); !ok || sess.Charset != "" && !strings.EqualFold(sess.Charset, "utf8mb4") && !strings.EqualFold(sess.Charset, "utf8mb3") && !strings.EqualFold(sess.Charset, "utf8") {
		return "", 0, false
	}
	s, ok := r.SlotSentinelSQL(p, sess)
	if !ok {
		return "", 0, false
	}
	i := strings.Index(s, slotSentinel)
	if i < 0 || strings.Count(s, slotSentinel) != 1 {
		return "", 0, false
	}
	toks, ok := lex(s[:i], sess)
	if !ok {
		return "", 0, false
	}
	for _, t := range toks {
		if t.kind == tokPunct && s[t.start] == '?' {
			param++
		}
	}
	return s[:i] + "?" + s[i+len(slotSentinel):], param, true
}
