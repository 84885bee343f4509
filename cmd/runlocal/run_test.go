package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// lockedBuffer is a bytes.Buffer safe for a process's output and a test
// reading it at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startRun builds slotproxy and runlocal and starts runlocal as make run
// does, in a process group of its own as a shell's foreground job, with
// its state in a temporary directory. It returns once the run is ready
// (its env file written).
func startRun(t *testing.T) (run *exec.Cmd, state string, out *lockedBuffer, exited chan error) {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	for _, pkg := range []string{"slotproxy", "runlocal"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, pkg), "./cmd/"+pkg)
		build.Dir = repo
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", pkg, err, b)
		}
	}
	flavor, err := testdb.FlavorFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	state = filepath.Join(work, ".local", "run")
	out = &lockedBuffer{}
	// Any free ports: the two servers' runs of this test, side by side,
	// would both find 3307 and 9307 free and one fail to bind them.
	run = exec.Command(filepath.Join(bin, "runlocal"), "--dir", state, "--slotproxy", filepath.Join(bin, "slotproxy"),
		"--server", string(flavor), "--port", "0", "--metrics-port", "0")
	run.Dir = repo
	run.Env = append(os.Environ(), "CONFIG=", "RULES=", "SERVER=")
	run.Stdout, run.Stderr = out, out
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("make run's output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(state, "env")); err == nil {
			return run, state, out, exited
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
}

// servePID is the pid of the run's slotproxy.
func servePID(t *testing.T, state string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "slotproxy.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestRunCtrlC: Ctrl-C in the terminal (SIGINT to the whole foreground
// process group) stops make run cleanly: slotproxy gets one signal (no
// "second signal: closing connections now"), so a statement in flight
// finishes and gets its result; slotproxy logs its clean stop, and the run
// exits 0 with slotproxy and the server gone.
func TestRunCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server; skipped with -short")
	}
	run, state, out, exited := startRun(t)
	pid := servePID(t, state)
	// A statement in flight through the proxy (the app() function of the
	// run's env file, as in the tutorial).
	sleep := exec.Command("bash", "-c", ". "+filepath.Join(state, "env")+" && app -N -e 'SELECT SLEEP(2)'")
	var sleepOut bytes.Buffer
	sleep.Stdout, sleep.Stderr = &sleepOut, &sleepOut
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if err := syscall.Kill(-run.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := sleep.Wait(); err != nil || strings.TrimSpace(sleepOut.String()) != "0" {
		t.Errorf("the statement in flight at Ctrl-C: %v, output %q; want its result 0", err, sleepOut.String())
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("make run after Ctrl-C: %v\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("make run did not stop within a minute of Ctrl-C:\n%s", out.String())
	}
	text := out.String()
	if strings.Contains(text, "second signal") {
		t.Errorf("Ctrl-C reached slotproxy twice:\n%s", text)
	}
	if !strings.Contains(text, "msg=stopped") {
		t.Errorf("slotproxy did not log a clean stop:\n%s", text)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("slotproxy (pid %d) still runs after make run ended", pid)
	}
}

// TestRunServerDies: when the run's database server stops on its own, make
// run notices within seconds, stops slotproxy, says so and exits non-zero,
// instead of leaving slotproxy logging failed roll-ups.
func TestRunServerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server; skipped with -short")
	}
	_, state, out, exited := startRun(t)
	pid := servePID(t, state)
	// The root() function of the run's env file, as the tutorial uses it.
	shutdown := exec.Command("bash", "-c", ". "+filepath.Join(state, "env")+" && root -e SHUTDOWN")
	if b, err := shutdown.CombinedOutput(); err != nil {
		t.Fatalf("SHUTDOWN: %v\n%s", err, b)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatalf("make run exited 0 after its server stopped:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("make run still running 30 s after its server stopped:\n%s", out.String())
	}
	if text := out.String(); !strings.Contains(text, "server of this run stopped") || !strings.Contains(text, "slotproxy stopped too") {
		t.Errorf("make run did not say why it stopped:\n%s", text)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("slotproxy (pid %d) still runs after make run ended", pid)
	}
}

// TestMakeTargetsInstall: make run and make demo install only what they
// need (no client libraries or ORMs; no MySQL chroot unless SERVER=mysql)
// and let scripts/deps.sh show what it does (its output is not thrown
// away); make test installs everything.
func TestMakeTargetsInstall(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the deps.sh command line
	}{
		{[]string{"run"}, "scripts/deps.sh --no-mysql --no-clients"},
		{[]string{"run", "SERVER=mysql"}, "scripts/deps.sh --no-clients"},
		{[]string{"demo"}, "scripts/deps.sh --no-mysql --no-clients"},
		{[]string{"test"}, "scripts/deps.sh"},
	} {
		out, err := exec.Command("make", append([]string{"-C", "../..", "-n", "--no-print-directory"}, tc.args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", tc.args, err, out)
		}
		var deps []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "scripts/deps.sh") {
				deps = append(deps, line)
			}
		}
		if len(deps) != 1 {
			t.Errorf("make %v runs scripts/deps.sh %d times: %q", tc.args, len(deps), deps)
			continue
		}
		line := deps[0]
		if strings.Contains(line, "/dev/null") {
			t.Errorf("make %v hides what scripts/deps.sh installs: %s", tc.args, line)
		}
		// The deps.sh invocation, up to the next command.
		cmd := line[strings.Index(line, "scripts/deps.sh"):]
		if i := strings.IndexAny(cmd, ";&|"); i >= 0 {
			cmd = cmd[:i]
		}
		if got := strings.Join(strings.Fields(cmd), " "); got != tc.want {
			t.Errorf("make %v runs %q, want %q", tc.args, got, tc.want)
		}
	}
}
