package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/slotproxy/slotproxy/internal/config"
)

// TestDocsLinks: every relative link of README.md, BENCHMARKS.md and
// docs/*.md names a file of the repository, and every #anchor a heading of
// that file (GitHub's anchors); the README stays a front door (at most 300
// lines, with the tested servers and the test suite's time); nothing points
// outside the repository.
func TestDocsLinks(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(repo, "README.md"), filepath.Join(repo, "BENCHMARKS.md")}, docs...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := stripCode(string(data))
		name, _ := filepath.Rel(repo, f)
		if strings.Contains(string(data), "shared/DESIGN") || strings.Contains(string(data), "DESIGN.md") {
			t.Errorf("%s refers to DESIGN.md, which is not in the repository", name)
		}
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if r, err := filepath.Rel(repo, dest); err != nil || strings.HasPrefix(r, "..") {
					t.Errorf("%s: link %q points outside the repository", name, target)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no such file", name, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			d, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(d))[anchor] {
				t.Errorf("%s: link %q: no heading with that anchor", name, target)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; keep it a front door (≤ 300) and move details into docs/", n)
	}
	for _, want := range []string{"## Tested servers", "| MariaDB | 10.11", "| MySQL   | 9.7", "the whole `make test` takes", "docs/tutorial.md", "docs/architecture.md"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

// stripCode removes fenced code blocks and inline code spans.
func stripCode(md string) string {
	md = regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(md, "")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(md, "")
}

// anchors returns the anchors GitHub gives the headings of md.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	punct := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	for _, m := range regexp.MustCompile(`(?m)^#+ (.*)$`).FindAllStringSubmatch(regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(md, ""), -1) {
		s := strings.ReplaceAll(punct.ReplaceAllString(strings.ToLower(strings.TrimSpace(strings.ReplaceAll(m[1], "`", ""))), ""), " ", "-")
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s = s + "-" + strconv.Itoa(n+1)
		} else {
			seen[s] = 0
		}
		out[s] = true
	}
	return out
}

// TestDocsMetrics: every metric the proxy and serve register (a Name:
// "slotproxy_…" in the source) is in docs/operations.md's tables, and every
// metric those tables list exists.
func TestDocsMetrics(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	def := regexp.MustCompile(`Name:\s+"(slotproxy_[a-z_]+)"`)
	for _, dir := range []string{"proxy", "cmd/slotproxy", "executor"} {
		files, _ := filepath.Glob(filepath.Join(repo, dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range def.FindAllStringSubmatch(string(data), -1) {
				registered[m[1]] = true
			}
		}
	}
	if len(registered) < 10 {
		t.Fatalf("found %d metric definitions: the pattern is stale", len(registered))
	}
	data, err := os.ReadFile(filepath.Join(repo, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| `(slotproxy_[a-z_]+)")
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		documented[m[1]] = true
	}
	for name := range registered {
		if !documented[name] {
			t.Errorf("metric %s is not in docs/operations.md's tables", name)
		}
	}
	for name := range documented {
		if !registered[name] {
			t.Errorf("docs/operations.md lists %s, which nothing registers", name)
		}
	}
}

// configKeys returns the dotted key of every leaf of config.Config (the
// struct's field names in snake case: Backend.TLS.MinVersion is
// backend.tls.min_version) with its value in Default().
func configKeys() map[string]any {
	out := map[string]any{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			key := prefix + snake(f.Name)
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct {
				walk(key+".", fv)
				continue
			}
			out[key] = fv.Interface()
		}
	}
	walk("", reflect.ValueOf(*config.Default()))
	return out
}

// snake turns a Go field name into the configuration's spelling:
// MinVersion min_version, TLS tls, ServerName server_name.
func snake(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		upper := r >= 'A' && r <= 'Z'
		if upper && i > 0 && (rs[i-1] >= 'a' && rs[i-1] <= 'z' || i+1 < len(rs) && rs[i+1] >= 'a' && rs[i+1] <= 'z') {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// yamlWith renders a configuration with listen and backend.address set and
// the dotted key set to the scalar text value (as written in YAML).
func yamlWith(key, value string) string {
	type node struct {
		children map[string]*node
		value    string
	}
	root := &node{children: map[string]*node{}}
	set := func(path []string, v string) {
		n := root
		for _, p := range path {
			c := n.children[p]
			if c == nil {
				c = &node{children: map[string]*node{}}
				n.children[p] = c
			}
			n = c
		}
		n.value = v
	}
	set([]string{"listen"}, "127.0.0.1:3307")
	set([]string{"backend", "address"}, "127.0.0.1:3306")
	if key != "" {
		set(strings.Split(key, "."), value)
	}
	var b strings.Builder
	var write func(n *node, indent string)
	write = func(n *node, indent string) {
		keys := make([]string, 0, len(n.children))
		for k := range n.children {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := n.children[k]
			if len(c.children) == 0 {
				fmt.Fprintf(&b, "%s%s: %s\n", indent, k, c.value)
				continue
			}
			fmt.Fprintf(&b, "%s%s:\n", indent, k)
			write(c, indent+"  ")
		}
	}
	write(root, "")
	return b.String()
}

// TestDocsConfiguration: docs/configuration.md's configuration reference
// documents every key the code has, and no other, and each key's default
// as the code has it: a file that sets the key to its documented default
// loads into the same configuration as one that leaves it out. config.yaml,
// whose values are the defaults by its own word, loads into the defaults
// (with its listen and backend).
func TestDocsConfiguration(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(repo, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "## Configuration reference")
	end := strings.Index(text, "## Counter rules")
	if start < 0 || end < start {
		t.Fatal("docs/configuration.md: no Configuration reference section")
	}
	code := configKeys()
	if len(code) < 25 {
		t.Fatalf("found %d configuration keys: the reflection is stale", len(code))
	}
	row := regexp.MustCompile("(?m)^\\| (`[a-z_.]+`(?:, `[a-z_.]+`)*) \\| ([^|]*) \\|")
	span := regexp.MustCompile("`([^`]*)`")
	documented := map[string]bool{}
	dir := t.TempDir()
	load := func(name, content string) *config.Config {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatalf("%s:\n%s: %v", name, content, err)
		}
		return c
	}
	base := load("base.yaml", yamlWith("", ""))
	for _, m := range row.FindAllStringSubmatch(text[start:end], -1) {
		def := strings.TrimSpace(m[2])
		for _, k := range span.FindAllStringSubmatch(m[1], -1) {
			key := k[1]
			documented[key] = true
			if _, ok := code[key]; !ok {
				// A mapping documented as a whole (backend: its short form).
				isPrefix := false
				for c := range code {
					isPrefix = isPrefix || strings.HasPrefix(c, key+".")
				}
				if !isPrefix {
					t.Errorf("docs/configuration.md documents %s, which the configuration does not have", key)
				}
				continue
			}
			if strings.HasPrefix(def, "none") {
				if v := fmt.Sprint(code[key]); v != "" {
					t.Errorf("%s: documented without a default, but the code's is %q", key, v)
				}
				continue
			}
			d := span.FindStringSubmatch(def)
			if d == nil {
				t.Errorf("%s: default %q is not a value in backquotes", key, def)
				continue
			}
			got := load("with.yaml", yamlWith(key, d[1]))
			if !reflect.DeepEqual(got, base) {
				t.Errorf("%s: the documented default %s is not the code's (%v)", key, d[1], code[key])
			}
		}
	}
	for key := range code {
		if !documented[key] {
			t.Errorf("the configuration key %s is not in docs/configuration.md's reference", key)
		}
	}
	// config.yaml shows the defaults.
	example, err := config.Load(filepath.Join(repo, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Listen, want.Backend.Address = example.Listen, example.Backend.Address
	want.Admin.Password = example.Admin.Password // from the environment, if set
	if !reflect.DeepEqual(example, want) {
		t.Errorf("config.yaml's values are not the defaults:\n got %+v\nwant %+v", *example, *want)
	}
	for key := range code {
		leaf := key[strings.LastIndex(key, ".")+1:]
		if !regexp.MustCompile(`(?m)^\s*#?\s*` + regexp.QuoteMeta(leaf) + `:`).MatchString(mustRead(t, filepath.Join(repo, "config.yaml"))) {
			t.Errorf("config.yaml, the annotated example with every key, lacks %s", key)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDocsFuzzTargets: docs/security.md names every fuzz target of the
// Makefile's FUZZ_TARGETS, each with its own package ("`Name` … in
// `./pkg`", the first package named after it).
func TestDocsFuzzTargets(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mk := mustRead(t, filepath.Join(repo, "Makefile"))
	m := regexp.MustCompile(`FUZZ_TARGETS := \\\n((?:.*\\\n)*.*)\n`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no FUZZ_TARGETS")
	}
	targets := strings.Fields(strings.ReplaceAll(m[1], "\\", " "))
	if len(targets) < 5 {
		t.Fatalf("Makefile: FUZZ_TARGETS %q: the pattern is stale", targets)
	}
	sec := mustRead(t, filepath.Join(repo, "docs", "security.md"))
	start := strings.Index(sec, "**Fuzzing.**")
	if start < 0 {
		t.Fatal("docs/security.md has no **Fuzzing.** paragraph")
	}
	sec = sec[start:]
	for _, tg := range targets {
		pkg, name, _ := strings.Cut(tg, ":")
		i := strings.Index(sec, "`"+name+"`")
		if i < 0 {
			t.Errorf("docs/security.md does not name the fuzz target %s", name)
			continue
		}
		in := regexp.MustCompile("in\\s+`(\\./[a-z/]+)`").FindStringSubmatch(sec[i:])
		if in == nil || in[1] != pkg {
			t.Errorf("docs/security.md puts %s in %v, the Makefile in %s", name, in, pkg)
		}
	}
}
