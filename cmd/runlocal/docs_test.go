package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
