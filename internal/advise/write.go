package advise

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/slotproxy/slotproxy/rules"
)

// FileName returns the rule file name for schema.table:
// "<schema>.<table>.yaml", with path separators and control characters
// replaced by '_'.
func FileName(schema, table string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '/' || r == '\\' || r == 0 || unicode.IsControl(r) {
				return '_'
			}
			return r
		}, s)
	}
	return clean(schema) + "." + clean(table) + ".yaml"
}

// WriteFiles writes the rule file of every candidate in rep to opts.Out
// (DefaultOut if empty), setting Candidate.File and Written. An existing
// file is left alone unless opts.Force. Every file is checked with
// rules.Parse before it is written.
func WriteFiles(rep *Report, opts Options) error {
	if len(rep.Candidates) == 0 {
		return nil
	}
	out := cmp.Or(opts.Out, DefaultOut)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("advise: %w", err)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	var errs []error
	for _, c := range rep.Candidates {
		path := filepath.Join(out, FileName(c.Schema, c.Table))
		c.File = path
		data, err := RenderRule(rep, c, now())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkRule(path, data, c); err != nil {
			errs = append(errs, err)
			continue
		}
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if !opts.Force {
			flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
		}
		f, err := os.OpenFile(path, flags, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue // Written stays false
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("advise: %w", err))
			continue
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("advise: write %s: %w", path, err))
			continue
		}
		c.Written = true
	}
	return errors.Join(errs...)
}

// checkRule parses data as rules.Parse does and checks that it says what c
// does.
func checkRule(path string, data []byte, c *Candidate) error {
	r, err := rules.Parse(path, data)
	if err != nil {
		return fmt.Errorf("advise: internal error: the rule written for %s does not parse: %w", c.Name(), err)
	}
	var counters, touch []string
	for _, rc := range r.Counters {
		counters = append(counters, rc.Name)
	}
	for _, rc := range r.Touch {
		touch = append(touch, rc.Name)
	}
	if r.Schema != c.Schema || r.Table != c.Table || r.Key != c.Key || !slices.Equal(counters, c.Counters) || !slices.Equal(touch, c.Touch) || r.Slots != c.Slots {
		return fmt.Errorf("advise: internal error: the rule written for %s reads back as %s key %s counters %v touch %v slots %d",
			c.Name(), r.Name(), r.Key, counters, touch, r.Slots)
	}
	return nil
}

// RenderRule returns the rule file for c: the evidence as YAML comments,
// then the rule.
func RenderRule(rep *Report, c *Candidate, now time.Time) ([]byte, error) {
	if c.Key == "" || len(c.Counters) == 0 {
		return nil, fmt.Errorf("advise: %s has no validated key and counters", c.Name())
	}
	var b bytes.Buffer
	line := func(format string, args ...any) {
		s := strings.TrimRight(fmt.Sprintf(format, args...), " ")
		if s == "" {
			b.WriteString("#\n")
			return
		}
		b.WriteString("# " + s + "\n")
	}
	from := rep.Version
	if rep.Addr != "" {
		from += " at " + rep.Addr
	}
	line("Candidate slotproxy rule for %s, written by \"slotproxy advise\"", comment(c.Name()))
	line("on %s from %s.", now.UTC().Format("2006-01-02 15:04:05 UTC"), comment(from))
	line("Review it, move it into the rules directory, then run \"slotproxy migrate\".")

	if c.Calls > 0 || c.Latency > 0 {
		line("")
		var srcs []string
		for _, s := range c.Statements {
			if s.Source != SourceWaiting && !slices.Contains(srcs, s.Source) {
				srcs = append(srcs, s.Source)
			}
		}
		line("Evidence from %s", strings.Join(srcs, " and "))
		if rep.Uptime > 0 {
			line("(totals since the server started %s ago, or since they were last reset):", rep.Uptime.Round(time.Second))
		}
		line("  calls:          %d", c.Calls)
		line("  lock time:      %s ms, %s of all statements' lock time", ms(c.LockTime), pct(c.LockShare))
		avg := ""
		if c.Calls > 0 {
			avg = fmt.Sprintf(", avg %s ms per call", ms(c.Latency/time.Duration(c.Calls)))
		}
		line("  latency:        %s ms in all%s, %s of all statements' latency", ms(c.Latency), avg, pct(c.LatencyShare))
		line("  rows affected:  %d", c.RowsAffected)
		if rep.Flavor == MariaDB {
			line("  (MariaDB counts only table locks as lock time; row-lock waits are in the latency)")
		}
	} else {
		line("")
		line("No call counts: no digest or live prepared statement shows these increments.")
		if rep.Flavor == MariaDB {
			line("MariaDB does not digest prepared statements; those prepared and closed around")
			line("each execution (go-sql-driver without interpolateParams=true, for one) leave no")
			line("statistics at all. The lock waits below are the evidence.")
		}
	}
	line("")
	line("Statements:")
	for _, s := range c.Statements {
		switch s.Source {
		case SourceWaiting:
			line("  - seen waiting for a row lock, not in any digest:")
		default:
			avg := ""
			if s.Calls > 0 {
				avg = fmt.Sprintf(", avg %s ms", ms(s.Latency/time.Duration(s.Calls)))
			}
			where := ""
			if s.Schema != "" {
				where = ", default database " + comment(s.Schema)
			}
			kind := "digest"
			if s.Source == SourcePrepared {
				kind = "prepared statement"
			}
			line("  - %s: %d calls, lock %s ms, latency %s ms%s%s:", kind, s.Calls, ms(s.LockTime), ms(s.Latency), avg, where)
		}
		line("      %s", comment(s.Text))
	}

	line("")
	ws := c.Waits
	if rep.Samples == 0 {
		line("Lock waits: not sampled (no lock-wait source).")
	} else {
		src := ""
		for _, s := range rep.Sources {
			if s.Used && (s.Name == SourceLockWaits || s.Name == SourceDataLocks) {
				src = s.Name
			}
		}
		line("Lock waits (%s, %d samples every %s over %s):", src, rep.Samples, rep.Interval, rep.Watched.Round(time.Millisecond))
		if ws.Waits == 0 {
			line("  none seen on this table")
		} else {
			line("  transactions were waiting in %d of %d samples, %d waits in all", ws.Samples, rep.Samples, ws.Waits)
			line("  at most %d transactions waited for one row at once", ws.MaxWaiters)
			for i, r := range ws.Rows {
				if i == maxExamples {
					line("  ... and %d more rows", len(ws.Rows)-maxExamples)
					break
				}
				what := "row"
				if r.Index != "" || r.Key != "" {
					what = comment(strings.TrimSpace(r.Index + " " + r.Key))
				}
				line("  %s: %d waits, at most %d at once", what, r.Waits, r.MaxWaiters)
			}
			for _, t := range ws.Waiting {
				line("  waiting:  %s", comment(t))
			}
			for _, t := range ws.Blocking {
				line("  holding:  %s", comment(t))
			}
			for _, t := range ws.BlockingLastWrites {
				line("  holder's last write: %s", comment(t))
			}
		}
	}

	line("")
	line("slots: %d. %s", c.Slots, c.SlotsWhy)
	if len(c.Notes) > 0 {
		line("")
		line("Notes:")
		for _, n := range c.Notes {
			line("  - %s", comment(n))
		}
	}

	names := make([]string, len(c.Counters))
	for i, n := range c.Counters {
		names[i] = yamlScalar(ruleName(n))
	}
	fmt.Fprintf(&b, "table: %s\n", yamlScalar(ruleName(c.Schema)+"."+ruleName(c.Table)))
	fmt.Fprintf(&b, "key: %s\n", yamlScalar(ruleName(c.Key)))
	fmt.Fprintf(&b, "counters: [%s]\n", strings.Join(names, ", "))
	if len(c.Touch) > 0 {
		touch := make([]string, len(c.Touch))
		for i, n := range c.Touch {
			touch[i] = yamlScalar(ruleName(n))
		}
		fmt.Fprintf(&b, "touch: [%s]\n", strings.Join(touch, ", "))
	}
	fmt.Fprintf(&b, "slots: %d\n", c.Slots)
	return b.Bytes(), nil
}

// ruleName writes a schema, table or column name as a rule file does: bare
// unless it holds a '.', whitespace or a backquote.
func ruleName(name string) string {
	if name != "" && !strings.ContainsAny(name, ".`") && strings.IndexFunc(name, unicode.IsSpace) < 0 {
		return name
	}
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// plainRE matches values that YAML reads back as the same string unquoted.
var plainRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$.\-]*$`)

// yamlSpecial are the plain words YAML 1.1 or 1.2 readers take for
// something other than a string.
var yamlSpecial = map[string]bool{
	"true": true, "false": true, "yes": true, "no": true, "on": true, "off": true,
	"y": true, "n": true, "null": true, "~": true,
}

// yamlScalar writes s as a YAML scalar: plain when that reads back as the
// same string, double-quoted otherwise.
func yamlScalar(s string) string {
	if plainRE.MatchString(s) && !yamlSpecial[strings.ToLower(s)] {
		return s
	}
	return strconv.Quote(s)
}

// comment makes s safe for one comment line: valid UTF-8, no control
// characters, runs of blanks collapsed, at most 240 characters.
func comment(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(s); len(r) > 240 {
		s = string(r[:240]) + " ..."
	}
	return s
}

// ms formats d in milliseconds with three decimals.
func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }

// pct formats a fraction as a percentage.
func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// PrintSummary writes a summary of rep to w: the evidence sources, a table
// of candidates and their files, the unsuitable tables with reasons.
func PrintSummary(w io.Writer, rep *Report) {
	from := rep.Version
	if rep.Addr != "" {
		from += " at " + rep.Addr
	}
	fmt.Fprintf(w, "%s\n", from)
	fmt.Fprintf(w, "evidence:\n")
	for _, s := range rep.Sources {
		mark, note := "+", s.Note
		if !s.Used {
			mark = "-"
		}
		if s.Used && (s.Name == SourceLockWaits || s.Name == SourceDataLocks) {
			n := fmt.Sprintf("%d samples over %s", rep.Samples, rep.Watched.Round(time.Millisecond))
			if note != "" {
				n += "; " + note
			}
			note = n
		}
		if note != "" {
			note = ": " + note
		}
		fmt.Fprintf(w, "  %s %s%s\n", mark, s.Name, note)
	}
	fmt.Fprintln(w)
	if len(rep.Candidates) == 0 {
		fmt.Fprintf(w, "no hot counters found\n")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "TABLE\tCOUNTERS\tCALLS\tLOCK MS\tLATENCY MS\tWAITS\tSLOTS\tFILE\n")
		for _, c := range rep.Candidates {
			file := c.File
			if file != "" && !c.Written {
				file += " (exists; not overwritten)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", c.Name(), strings.Join(c.Counters, ", "), c.Calls,
				ms(c.LockTime), ms(c.Latency), c.Waits.Waits, c.Slots, file)
		}
		tw.Flush()
	}
	if len(rep.Unsuitable) > 0 {
		fmt.Fprintf(w, "\nunsuitable (no rule written):\n")
		for _, c := range rep.Unsuitable {
			fmt.Fprintf(w, "  %s (%d calls, %d lock waits): %s\n", c.Name(), c.Calls, c.Waits.Waits, c.Reason)
		}
	}
	if n := len(rep.Ignored); n > 0 {
		var names []string
		for _, c := range rep.Ignored {
			names = append(names, c.Name())
		}
		fmt.Fprintf(w, "\nignored (too few calls, no lock waits): %s\n", strings.Join(names, ", "))
	}
	if rep.Unparsed > 0 {
		fmt.Fprintf(w, "\n%d UPDATE statement text(s) could not be parsed (truncated digests, \"(...)\" lists) and were skipped\n", rep.Unparsed)
	}
	if rep.Unqualified > 0 {
		fmt.Fprintf(w, "\n%d increment statement(s) name no schema and ran without a default database; skipped\n", rep.Unqualified)
	}
}
