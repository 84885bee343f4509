package difffuzz_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/difffuzz"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }

// Environment variables of TestDiffFuzz.
const (
	// envSeed: the run's seed (sequence i uses seed+i); default the time.
	envSeed = "DIFFFUZZ_SEED"
	// envDuration: a long run of that duration (e.g. 30m) that goes on
	// after a difference and reports every distinct one; default the
	// bounded run (boundedDuration or boundedSequences, whichever first,
	// stopping at the first difference).
	envDuration = "DIFFFUZZ_DURATION"
	// envSequences bounds the number of sequences.
	envSequences = "DIFFFUZZ_SEQUENCES"
	// envStepTimeout: a step not answered by then is blocked (default 1s).
	envStepTimeout = "DIFFFUZZ_STEP_TIMEOUT"
	// envShrink: the time budget to shrink one difference (default 2m).
	envShrink = "DIFFFUZZ_SHRINK"
	// envAll=1 enables the classes difffuzz.KnownDifferences excludes.
	envAll = "DIFFFUZZ_ALL"
)

const (
	boundedDuration  = 60 * time.Second
	boundedSequences = 100
)

// testEnv is the fuzzer's environment on the shared test server.
func testEnv(t *testing.T) *difffuzz.Env {
	server := testdb.Shared()
	return &difffuzz.Env{
		Addr: server.Addr, Version: server.Version,
		RootUser: server.RootUser, RootPassword: server.RootPassword,
		User: testdb.User, Password: testdb.Password,
		Prefix:          "difffuzz",
		StepTimeout:     envDurationOr(t, envStepTimeout, time.Second),
		LockWaitTimeout: 2,
		HangTimeout:     60 * time.Second,
		Logger:          debugLogger(),
	}
}

// debugLogger logs the proxy's debug lines (every statement it sends the
// server, among them) to standard error when DIFFFUZZ_DEBUG=1, else
// nothing.
func debugLogger() *slog.Logger {
	if os.Getenv("DIFFFUZZ_DEBUG") != "1" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestReproducers runs every difference the fuzzer found and printed
// (testdata/reproducers/SERVER-SEED-KIND.txt, found on SERVER with seed
// SEED) again, as the fuzzer ran it, on the run's server: none may differ
// any more.
func TestReproducers(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "reproducers", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no reproducers: %v", err)
	}
	env := testEnv(t)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			seq, out := runFile(t, env, f)
			if out.Diff != nil {
				t.Errorf("differs again:\n%s", difffuzz.Reproducer(env, seq, out))
			}
		})
	}
}

// TestDocumentedDifferences runs the fuzzer's findings that limits.md
// documents ("Waits and deadlocks"; testdata/documented): each must still
// be recognised as documented (the run stops there, with no difference),
// and one that no longer differs at all belongs in testdata/reproducers.
func TestDocumentedDifferences(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "documented", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no documented differences: %v", err)
	}
	env := testEnv(t)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			seq, out := runFile(t, env, f)
			switch {
			case out.Diff != nil:
				t.Errorf("differs, and not as documented:\n%s", difffuzz.Reproducer(env, seq, out))
			case len(out.Documented) == 0:
				t.Logf("no longer differs on %s: move %s to testdata/reproducers", testdb.Shared().Flavor, f)
			default:
				t.Logf("documented: %v", out.Documented)
			}
		})
	}
}

// runFile runs the reproducer in file f again, as the fuzzer ran it.
func runFile(t *testing.T, env *difffuzz.Env, f string) (*difffuzz.Sequence, *difffuzz.Outcome) {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := difffuzz.ParseReproducer(string(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := difffuzz.Run(t.Context(), env, seq)
	if err != nil {
		t.Fatal(err)
	}
	return seq, out
}

// TestDiffFuzz runs generated sequences directly and through the proxy and
// fails with a shrunk reproducer for each difference.
func TestDiffFuzz(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
	}
	long := os.Getenv(envDuration) != ""
	duration := envDurationOr(t, envDuration, boundedDuration)
	sequences := boundedSequences
	if long {
		sequences = 1 << 30
	}
	if v := os.Getenv(envSequences); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSequences, v, err)
		}
		sequences = n
	}
	cfg := difffuzz.DefaultConfig()
	if os.Getenv(envAll) != "1" {
		cfg = difffuzz.Bounded(cfg)
	}
	server := testdb.Shared()
	env := testEnv(t)
	shrinkBudget := envDurationOr(t, envShrink, 2*time.Minute)
	t.Logf("seed %d (%s=%d), server %s %s, duration %v, at most %d sequences, excluded classes %v, interleaved transactions %v",
		seed, envSeed, seed, server.Flavor, server.Version, duration, sequences, difffuzz.Excluded(), cfg.Interleave)

	deadline := time.Now().Add(duration)
	var (
		executed, runs int
		refused        = map[string]int{}
		refusedExample = map[string]string{}
		documented     = map[string]int{}
		found          = map[string]bool{}
	)
	for i := 0; i < sequences && time.Now().Before(deadline); i++ {
		seq := difffuzz.Generate(seed+int64(i), cfg)
		out, err := difffuzz.Run(t.Context(), env, seq)
		if err != nil {
			t.Fatalf("sequence seed %d: %v", seed+int64(i), err)
		}
		runs++
		executed += out.Executed
		for _, r := range out.Refused {
			refused[r.Reason]++
			refusedExample[r.Reason] = r.Step.SQL
		}
		for _, d := range out.Documented {
			documented[d]++
		}
		if out.Stopped != "" {
			documented["sequence stopped: "+out.Stopped]++
		}
		if out.Diff == nil {
			continue
		}
		key := out.Diff.Kind + " " + classOf(seq, out.Diff)
		if found[key] {
			t.Logf("sequence seed %d: again a %s difference (%s), not shrunk", seq.Seed, out.Diff.Kind, classOf(seq, out.Diff))
			continue
		}
		found[key] = true
		t.Logf("sequence seed %d: %s difference at step %d; shrinking (budget %v)", seq.Seed, out.Diff.Kind, out.Diff.Step+1, shrinkBudget)
		small, smallOut := difffuzz.Shrink(t.Context(), env, seq, out, shrinkBudget, t.Logf)
		t.Errorf("difference (%s):\n%s", key, difffuzz.Reproducer(env, small, smallOut))
		if !long {
			break
		}
	}
	t.Logf("%d sequences, %d statements executed on each side (%d refused), seed %d", runs, executed, total(refused), seed)
	for _, reason := range sortedKeys(refused) {
		t.Logf("refused %4d × %s (e.g. %s)", refused[reason], reason, refusedExample[reason])
	}
	for _, d := range sortedKeys(documented) {
		t.Logf("documented %4d × %s", documented[d], d)
	}
	if runs > 0 && executed == 0 {
		t.Fatal("no statement was executed")
	}
}

// classOf names the class of the step a difference is at ("end" for the
// checks at the end of a sequence).
func classOf(seq *difffuzz.Sequence, d *difffuzz.Difference) string {
	if d.Step < 0 {
		return "end"
	}
	return string(seq.Steps[d.Step].Class)
}

func envDurationOr(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	return keys
}
