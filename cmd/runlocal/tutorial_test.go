package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// TestTutorial runs docs/tutorial.md: its first shell block (make run) is
// this command, started here against the server of the test run's
// flavour (SLOTPROXY_TEST_SERVER), and every other ```sh block is run with
// bash, in order, from a directory where .local/run is that run's state,
// and must succeed (the blocks assert what they show, with test). The
// commands come from the file, so the tutorial cannot go stale.
func TestTutorial(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server; skipped with -short")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "tutorial.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(doc))
	if len(blocks) < 8 || strings.TrimSpace(blocks[0]) != "make run" {
		t.Fatalf("docs/tutorial.md: %d shell blocks, the first %q; want make run first", len(blocks), blocks[0])
	}

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	for _, pkg := range []string{"slotproxy", "runlocal"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, pkg), "./cmd/"+pkg)
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", pkg, err, out)
		}
	}
	flavor, err := testdb.FlavorFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(work, ".local", "run")
	var out bytes.Buffer
	run := exec.Command(filepath.Join(bin, "runlocal"), "--dir", state, "--slotproxy", filepath.Join(bin, "slotproxy"),
		"--server", string(flavor))
	run.Dir = repo // the example rule, as make run reads it
	run.Env = append(os.Environ(), "CONFIG=", "RULES=", "SERVER=")
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	defer func() {
		_ = run.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = run.Process.Kill()
			t.Error("make run did not stop within a minute of Ctrl-C")
		}
		if t.Failed() {
			t.Logf("make run's output:\n%s", out.String())
		}
	}()
	env := filepath.Join(state, "env")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(env); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("make run exited: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run not ready after 3 minutes:\n%s", out.String())
		}
	}
	for i, block := range blocks[1:] {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
		cmd.Dir = work
		got, err := cmd.CombinedOutput()
		t.Logf("block %d:\n%s\n---\n%s", i+2, block, got)
		if err != nil {
			t.Fatalf("docs/tutorial.md shell block %d failed: %v\n%s\n--- output:\n%s", i+2, err, block, got)
		}
	}
}

// shellBlocks returns the contents of the ```sh fenced blocks of a
// Markdown text, in order.
func shellBlocks(md string) []string {
	re := regexp.MustCompile("(?ms)^```sh\n(.*?)^```")
	var blocks []string
	for _, m := range re.FindAllStringSubmatch(md, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}
