//go:build unix

// Package testdb starts throwaway MariaDB or MySQL servers for Go tests.
//
// A server lives in a fresh temporary directory, listens only on 127.0.0.1
// on a free port, and is removed again by Stop. Test binaries normally use
// Main from TestMain, which starts one server per test binary and exposes it
// through Shared:
//
//	func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }
//
// Which server: Options.Flavor, or when that is empty the environment
// variable SLOTPROXY_TEST_SERVER: "mariadb" (the default) runs the system's
// mariadbd; "mysql" runs Oracle's mysqld from a Debian chroot
// (SLOTPROXY_MYSQL_CHROOT, default /var/lib/slotproxy/mysql-sid, built by
// scripts/deps.sh). A MySQL server runs chrooted: its directory is inside
// the chroot (Server.Dir is the host's path to it), and the host files that
// Options.ExtraArgs name (--ssl-cert=/tmp/...) are copied into it.
//
// The freshly installed data directory (the output of mariadb-install-db or
// mysqld --initialize-insecure) is cached, keyed by the server binary and
// version, so only the first test binary on a machine pays for the
// installation; later ones copy the cached template. Set
// SLOTPROXY_TESTDB_NOCACHE=1 (or Options.NoCache) to bypass the cache.
//
// A server that could not be started is an error, never a skip: the tests
// in this repository are meant to run against real servers. Run
// scripts/deps.sh to install them.
package testdb

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/dialect"
)

// Standard databases and accounts created by Setup. Every package that
// tests against a server uses these names.
const (
	// DBName is the database for slotproxy's own tests.
	DBName = "slotproxy_test"
	// DriverDBName is the database go-sql-driver's test suite expects.
	DriverDBName = "gotest"

	// User is the general test account: ALL PRIVILEGES on *.*, the
	// server's default authentication plugin (Server.DefaultAuthPlugin:
	// mysql_native_password on MariaDB, caching_sha2_password on MySQL).
	User     = "tester"
	Password = "tester-pass"

	// EdUser authenticates with MariaDB's ed25519 plugin and has ALL on
	// *.*. MariaDB only: Setup does not create it on MySQL.
	EdUser     = "ed"
	EdPassword = "ed-pass"

	// Sha2User authenticates with caching_sha2_password, named explicitly,
	// and has ALL on *.*. MySQL only: MariaDB 10.11 has no such plugin.
	Sha2User     = "sha2"
	Sha2Password = "sha2-pass"

	// DriverUser is the account for go-sql-driver's test suite: ALL
	// PRIVILEGES on *.* WITH GRANT OPTION, default authentication plugin.
	DriverUser     = "gotest"
	DriverPassword = "secret"
)

// Flavor is the kind of server: MariaDB or MySQL.
type Flavor string

const (
	// MariaDB is the system's mariadbd (Debian's mariadb-server).
	MariaDB Flavor = "mariadb"
	// MySQL is Oracle's mysqld, run in the chroot MySQLChroot.
	MySQL Flavor = "mysql"
)

// Environment variables read by testdb.
const (
	// EnvServer selects the flavour when Options.Flavor is empty:
	// "mariadb" (the default when unset) or "mysql".
	EnvServer = "SLOTPROXY_TEST_SERVER"
	// EnvMySQLChroot is the MySQL chroot's directory (default
	// DefaultMySQLChroot).
	EnvMySQLChroot = "SLOTPROXY_MYSQL_CHROOT"
	// DefaultMySQLChroot is where scripts/deps.sh builds the chroot.
	DefaultMySQLChroot = "/var/lib/slotproxy/mysql-sid"
)

// FlavorFromEnv returns the flavour SLOTPROXY_TEST_SERVER asks for:
// MariaDB when it is unset or empty, an error when it names neither.
func FlavorFromEnv() (Flavor, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvServer))); v {
	case "", string(MariaDB):
		return MariaDB, nil
	case string(MySQL):
		return MySQL, nil
	default:
		return "", fmt.Errorf("testdb: %s=%q: want %q or %q", EnvServer, v, MariaDB, MySQL)
	}
}

// MySQLChroot returns the MySQL chroot's directory: SLOTPROXY_MYSQL_CHROOT,
// or DefaultMySQLChroot.
func MySQLChroot() string {
	if d := os.Getenv(EnvMySQLChroot); d != "" {
		return filepath.Clean(d)
	}
	return DefaultMySQLChroot
}

const (
	rootUser     = "root"
	rootPassword = "slotproxy-root"

	// startTimeout bounds how long Start and Restart wait for the server to
	// answer SELECT as root.
	defaultStartTimeout = 60 * time.Second
	// stopTimeout bounds a graceful shutdown before Stop falls back to SIGKILL.
	stopTimeout = 30 * time.Second
	// portAttempts is how many free ports Start tries when the server fails
	// to bind (another process grabbed the port between probe and bind).
	portAttempts = 5

	runDirPrefix   = "slotproxy-testdb-run-"
	templatePrefix = "slotproxy-testdb-tmpl-"
	ownerFile      = "owner.pid"
	logFile        = "server.log"
	socketFile     = "mysqld.sock"
	// hostFilesDir (in a MySQL server's Dir) holds the copies of the host
	// files that ExtraArgs name.
	hostFilesDir = "hostfiles"
)

// errPortInUse marks a start attempt that failed because the TCP port was
// taken; Start retries those on another port.
var errPortInUse = errors.New("port already in use")

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Flavor is the server to run; empty means the one SLOTPROXY_TEST_SERVER
	// names (see FlavorFromEnv).
	Flavor Flavor
	// ExtraArgs are appended to the server's command line after the default
	// flags, so they can override them (e.g. "--performance-schema=ON").
	// For MySQL, an argument "--name=/path" naming a host file outside the
	// chroot gets the path of a copy inside it.
	ExtraArgs []string
	// Logf, if set, receives progress messages (timings, cache use).
	Logf func(format string, args ...any)
	// StartTimeout bounds the wait for the server to accept queries on
	// Start and Restart. Zero means 60s.
	StartTimeout time.Duration
	// NoCache disables the cached data directory template and always
	// installs a data directory. The environment variable
	// SLOTPROXY_TESTDB_NOCACHE=1 has the same effect.
	NoCache bool
	// Prepare, if set, is called with the server's directory (Dir) once
	// its data directory (Dir/data) is in place, before the server first
	// starts.
	Prepare func(dir string) error
}

// Server is a running (or stopped) throwaway MariaDB or MySQL. Its exported
// fields are fixed for the server's lifetime, across Kill and Restart.
// Methods are safe for concurrent use.
type Server struct {
	// Flavor is the kind of server.
	Flavor Flavor
	// Addr is the TCP address, "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port; it stays the same across Restart.
	Port int
	// Dir is the server's private directory, as the host sees it (inside
	// the chroot for MySQL): data directory (Dir/data), unix socket, temp
	// dir and the server's output log (Dir/server.log). Stop removes it.
	Dir string
	// Socket is the unix socket path, as the host sees it (for MySQL the
	// server binds the shorter path inside the chroot; the host's path
	// may exceed the 107 bytes a client can connect to).
	Socket string
	// RootUser and RootPassword log in as the superuser over TCP from
	// 127.0.0.1 and over the unix socket.
	RootUser, RootPassword string
	// Version is the server's version string, as SELECT VERSION() and the
	// greeting report it (MariaDB's greeting prefixes "5.5.5-"), e.g.
	// "10.11.14-MariaDB-0+deb12u2" or "9.7.4-2".
	Version string

	opts    Options
	eng     *engine
	args    []string // ExtraArgs, with host files copied into the chroot
	logPath string

	mu      sync.Mutex
	proc    *process // nil when not running
	stopped bool     // Stop was called; the directory is gone
}

// IsMySQL reports whether the server is MySQL.
func (s *Server) IsMySQL() bool { return s.Flavor == MySQL }

// IsMariaDB reports whether the server is MariaDB.
func (s *Server) IsMariaDB() bool { return s.Flavor == MariaDB }

// Dialect is what the product code makes of the server's version string.
func (s *Server) Dialect() dialect.Dialect { return dialect.Parse(s.Version) }

// DefaultAuthPlugin is the authentication plugin of accounts created
// without naming one, such as User and DriverUser: mysql_native_password on
// MariaDB, caching_sha2_password on MySQL.
func (s *Server) DefaultAuthPlugin() string {
	if s.IsMySQL() {
		return "caching_sha2_password"
	}
	return "mysql_native_password"
}

// process is one server incarnation.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // result of Wait; valid after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start installs a fresh data directory and starts the server on a free
// 127.0.0.1 port. It returns once SELECT works as root over TCP. On error
// nothing is left running and the directory is removed; the error includes
// the tail of the server log. The caller must call Stop.
func Start(opts Options) (*Server, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if os.Getenv("SLOTPROXY_TESTDB_NOCACHE") == "1" {
		opts.NoCache = true
	}
	if opts.Flavor == "" {
		f, err := FlavorFromEnv()
		if err != nil {
			return nil, err
		}
		opts.Flavor = f
	}
	eng, err := newEngine(opts.Flavor)
	if err != nil {
		return nil, err
	}
	base, err := eng.baseDir()
	if err != nil {
		return nil, err
	}
	sweepStaleDirs(base, opts.Logf)

	dir, err := os.MkdirTemp(base, runDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testdb: create server dir: %w", err)
	}
	s := &Server{
		Flavor:       opts.Flavor,
		Dir:          dir,
		Socket:       filepath.Join(dir, socketFile),
		RootUser:     rootUser,
		RootPassword: rootPassword,
		Version:      parseVersion(string(eng.versionOut)),
		opts:         opts,
		eng:          eng,
		logPath:      filepath.Join(dir, logFile),
	}
	if err := s.start(base); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(base string) error {
	if err := os.WriteFile(filepath.Join(s.Dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	// sun_path is 108 bytes on Linux and 104 on macOS. What counts is the
	// path the server binds (inside the chroot for MySQL).
	if sock := s.eng.inner(s.Socket); len(sock) > 100 {
		return fmt.Errorf("testdb: unix socket path %q is too long; set TMPDIR to a shorter directory", sock)
	}
	if err := os.Mkdir(filepath.Join(s.Dir, "tmp"), 0o700); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	args, err := s.eng.copyHostFiles(s.Dir, s.opts.ExtraArgs)
	if err != nil {
		return err
	}
	s.args = args

	t0 := time.Now()
	how, err := s.prepareDatadir(base)
	if err != nil {
		return err
	}
	if s.opts.Prepare != nil {
		if err := s.opts.Prepare(s.Dir); err != nil {
			return fmt.Errorf("testdb: preparing %s: %w", s.Dir, err)
		}
	}
	prepared := time.Since(t0)

	t1 := time.Now()
	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		lastErr = s.launch()
		if lastErr == nil {
			s.opts.Logf("testdb: %s %s ready at %s (datadir %s in %s, server start %s)",
				s.eng.name(), s.Version, s.Addr, how, prepared.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
			return nil
		}
		if !errors.Is(lastErr, errPortInUse) {
			return lastErr
		}
		s.opts.Logf("testdb: port %d taken, retrying on another port", port)
	}
	return lastErr
}

// prepareDatadir fills s.Dir/data with a pristine installation, from the
// template cache in base if possible. It reports how ("copied from cache"
// or "installed").
func (s *Server) prepareDatadir(base string) (string, error) {
	datadir := filepath.Join(s.Dir, "data")
	if s.opts.NoCache {
		if err := s.installDatadir(base, datadir); err != nil {
			return "", err
		}
		return "installed", nil
	}
	tmpl, created, err := s.template(base)
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-a", tmpl, datadir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("testdb: copy datadir template %s: %w: %s", tmpl, err, bytes.TrimSpace(out))
	}
	if created {
		return "installed into cache and copied", nil
	}
	return "copied from cache", nil
}

// template returns the cached pristine data directory for this server
// binary, creating it in base if needed. Creation is serialized across
// processes by an exclusive flock on a lock file next to the template; a
// published template is never modified, so copying it needs no lock.
func (s *Server) template(base string) (dir string, created bool, err error) {
	key := templateKey(s.eng)
	final := filepath.Join(base, templatePrefix+key)
	datadir := filepath.Join(final, "data")
	if s.templateComplete(datadir) {
		return datadir, false, nil
	}

	lock, err := os.OpenFile(final+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", false, fmt.Errorf("testdb: open template lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", false, fmt.Errorf("testdb: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	if s.templateComplete(datadir) { // another process built it while we waited
		return datadir, false, nil
	}
	if err := os.RemoveAll(final); err != nil { // incomplete leftover
		return "", false, fmt.Errorf("testdb: remove broken template: %w", err)
	}
	staging, err := os.MkdirTemp(base, templatePrefix+key+".staging-")
	if err != nil {
		return "", false, fmt.Errorf("testdb: %w", err)
	}
	defer os.RemoveAll(staging) // no-op after a successful rename
	if err := s.installDatadir(base, filepath.Join(staging, "data")); err != nil {
		return "", false, err
	}
	if err := os.Rename(staging, final); err != nil {
		return "", false, fmt.Errorf("testdb: publish template: %w", err)
	}
	return datadir, true, nil
}

// templateComplete is a cheap sanity check that a template was fully
// installed and has not been partly removed by a tmp cleaner.
func (s *Server) templateComplete(datadir string) bool {
	for _, f := range s.eng.templateFiles {
		if _, err := os.Stat(filepath.Join(datadir, f)); err != nil {
			return false
		}
	}
	return true
}

// templateKey identifies a template: the flavour, the binaries (path, size,
// mtime), the server version and everything that goes into the
// installation.
func templateKey(e *engine) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", e.flavor, e.root)
	for _, bin := range []string{e.hostServer(), e.installDB} {
		if bin == "" {
			continue
		}
		fmt.Fprintf(h, "%s\n", bin)
		if fi, err := os.Stat(bin); err == nil {
			fmt.Fprintf(h, "%d %d\n", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	h.Write(e.versionOut)
	fmt.Fprintf(h, "%q\n%s\nuid=%d\n", e.installArgs, e.bootstrapSQL, os.Geteuid())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// installDatadir installs a fresh data directory datadir (which must not
// exist), working in a temporary directory in base.
func (s *Server) installDatadir(base, datadir string) error {
	t0 := time.Now()
	work, err := os.MkdirTemp(base, "slotproxy-testdb-install-")
	if err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	defer os.RemoveAll(work)
	if err := s.eng.install(work, datadir); err != nil {
		return err
	}
	s.opts.Logf("testdb: installing a %s data directory took %s", s.eng.name(), time.Since(t0).Round(time.Millisecond))
	return nil
}

// launch starts the server on s.Port with the existing data directory and
// waits until it is ready. On error the process is gone; the error wraps
// errPortInUse if the port could not be bound.
func (s *Server) launch() error {
	in := s.eng.inner
	args := []string{
		"--no-defaults",
		"--datadir=" + in(filepath.Join(s.Dir, "data")),
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--socket=" + in(s.Socket),
		"--pid-file=" + in(filepath.Join(s.Dir, "mysqld.pid")),
		"--tmpdir=" + in(filepath.Join(s.Dir, "tmp")),
	}
	if s.IsMySQL() {
		args = append(args, "--user=root")
	} else {
		args = append(args, userArg()...)
	}
	args = append(args, s.eng.serverArgs...)
	args = append(args, s.args...)

	p, err := s.spawn(args)
	if err != nil {
		return err
	}
	if err := s.waitReady(p); err != nil {
		killAndWait(p)
		return err
	}
	s.proc = p
	return nil
}

// spawn starts the server with its output appended to the server log.
func (s *Server) spawn(args []string) (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testdb: open server log: %w", err)
	}
	fmt.Fprintf(logf, "%s%s %s\n", logMarker, s.eng.server, strings.Join(args, " "))

	cmd := s.eng.command(s.Dir, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	p := &process{cmd: cmd, done: make(chan struct{})}

	started := make(chan error, 1)
	go func() {
		defer logf.Close()
		// On Linux the child gets SIGKILL when the *thread* that forked it
		// exits (Pdeathsig). Fork from a locked thread and keep it until the
		// child has been reaped; the locked thread exits with this goroutine.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("testdb: start %s: %w", s.eng.server, err)
	}
	return p, nil
}

// waitReady polls until root can run a query over TCP on s.Addr and the
// answering server is this one (its socket is s.Socket), the process exits,
// or the start timeout passes.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(s.opts.StartTimeout)
	var lastErr error
	for {
		if p.exited() {
			return s.exitError(p)
		}
		lastErr = s.probeWhileRunning(p)
		if lastErr == nil {
			return nil
		}
		if errors.Is(lastErr, errPortInUse) {
			return lastErr
		}
		if s.bindFailed() {
			// The server says so before it has shut down (MySQL takes
			// seconds to); launch kills it.
			return fmt.Errorf("testdb: %s could not bind %s: %w", s.eng.name(), s.Addr, errPortInUse)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testdb: %s on %s not ready after %s: %w\n%s",
				s.eng.name(), s.Addr, s.opts.StartTimeout, lastErr, s.logTail())
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probeWhileRunning runs one probe, abandoning it after 2s or as soon as p
// exits (a port holder that accepts but never speaks would otherwise stall
// the probe while our server has already died of the bind error).
func (s *Server) probeWhileRunning(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				cancel()
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				// Our server cannot bind the port, and whoever holds
				// it does not answer.
				if s.bindFailed() {
					cancel()
					return
				}
			}
		}
	}()
	return s.probe(ctx)
}

// probe checks that root can query the server on s.Addr and that it is
// this server.
func (s *Server) probe(ctx context.Context) error {
	// Connections cut short by a starting server make the driver log
	// "[mysql] unexpected EOF"; the probe reports errors itself.
	db, err := s.open(s.RootUser, s.RootPassword, "", log.New(io.Discard, "", 0))
	if err != nil {
		return err
	}
	defer db.Close()
	var sock string
	if err := db.QueryRowContext(ctx, "SELECT @@socket").Scan(&sock); err != nil {
		return err
	}
	if sock != s.eng.inner(s.Socket) {
		// Another test binary's server won the race for this port.
		return fmt.Errorf("%w: %s is served by another server (socket %s)", errPortInUse, s.Addr, sock)
	}
	return nil
}

// bindFailed reports whether the latest server incarnation logged that it
// could not bind its TCP port.
func (s *Server) bindFailed() bool {
	cur := s.currentLog()
	return strings.Contains(cur, "Address already in use") || strings.Contains(cur, "Bind on TCP/IP port")
}

// exitError describes an unexpected exit of p during startup.
func (s *Server) exitError(p *process) error {
	if s.bindFailed() {
		return fmt.Errorf("testdb: %s could not bind %s: %w", s.eng.name(), s.Addr, errPortInUse)
	}
	return fmt.Errorf("testdb: %s exited during startup (%v):\n%s", s.eng.name(), p.err, s.logTail())
}

// logMarker starts the output of each server incarnation in the log.
const logMarker = "==== testdb: "

// readLogEnd returns up to the last 64 KiB of the server log.
func (s *Server) readLogEnd() ([]byte, error) {
	f, err := os.Open(s.logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const max = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

// currentLog returns the log output of the latest server incarnation.
func (s *Server) currentLog() string {
	b, _ := s.readLogEnd()
	if i := bytes.LastIndex(b, []byte(logMarker)); i >= 0 {
		b = b[i:]
	}
	return string(b)
}

// logTail returns the last lines of the server log, for error messages.
func (s *Server) logTail() string {
	b, err := s.readLogEnd()
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	return "--- tail of " + s.logPath + " ---\n" + tailLines(b, 30)
}

// Stop shuts the server down gracefully (SIGTERM, SIGKILL after 30s),
// waits for it to exit and removes Dir. It is safe to call on a killed
// server and more than once; after Stop the Server cannot be restarted.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	err := s.shutdownLocked()
	if rmErr := os.RemoveAll(s.Dir); rmErr != nil && err == nil {
		err = fmt.Errorf("testdb: remove %s: %w", s.Dir, rmErr)
	}
	return err
}

// shutdownLocked stops the running process, if any, gracefully.
func (s *Server) shutdownLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.exited() {
		killAndWait(p)
		return fmt.Errorf("testdb: signal %s: %w", s.eng.name(), err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("testdb: %s shutdown: %w\n%s", s.eng.name(), p.err, s.logTail())
		}
		return nil
	case <-time.After(stopTimeout):
		killAndWait(p)
		return fmt.Errorf("testdb: %s did not shut down within %s; killed\n%s", s.eng.name(), stopTimeout, s.logTail())
	}
}

// Kill sends SIGKILL to the server and waits for it to exit, simulating a
// crash. The data directory and port are kept for Restart. Kill is a no-op
// if the server is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	killAndWait(s.proc)
	s.proc = nil
	return nil
}

func killAndWait(p *process) {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Restart starts the server again on the same port with the same data
// directory (running crash recovery after Kill). A running server is first
// shut down gracefully. Restart fails if the port has been taken by another
// process in the meantime.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("testdb: Restart after Stop")
	}
	if err := s.shutdownLocked(); err != nil {
		return err
	}
	t0 := time.Now()
	var err error
	// A port freed by a killed server can be bound again at once, but
	// retry briefly in case the kernel is slow to release it.
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.launch(); !errors.Is(err, errPortInUse) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("testdb: restart on %s: %w", s.Addr, err)
	}
	s.opts.Logf("testdb: %s restarted at %s in %s", s.eng.name(), s.Addr, time.Since(t0).Round(time.Millisecond))
	return nil
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// DSN returns a go-sql-driver DSN for user over TCP to s.Addr:
// "user:pass@tcp(127.0.0.1:port)/db?params". params is a URL query string
// such as "parseTime=true&multiStatements=true" (a leading "?" is allowed)
// and may be empty, as may db.
func (s *Server) DSN(user, pass, db, params string) string {
	return formatDSN(user, pass, s.Addr, db, params)
}

// RootDSN returns DSN(RootUser, RootPassword, db, params).
func (s *Server) RootDSN(db, params string) string {
	return s.DSN(s.RootUser, s.RootPassword, db, params)
}

func formatDSN(user, pass, addr, db, params string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, pass, "tcp", addr, db
	dsn := cfg.FormatDSN()
	if params = strings.TrimPrefix(params, "?"); params != "" {
		dsn += "?" + params
	}
	return dsn
}

// open returns a *sql.DB for user with short dial and I/O timeouts. A nil
// logger keeps the driver's default.
func (s *Server) open(user, pass, db string, logger mysql.Logger) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	if logger != nil {
		cfg.Logger = logger
	}
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, pass, "tcp", s.Addr, db
	cfg.Timeout = 2 * time.Second
	cfg.ReadTimeout = 60 * time.Second
	cfg.WriteTimeout = 60 * time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("testdb: %w", err)
	}
	return sql.OpenDB(conn), nil
}

// Exec runs the statements in order as root on a single connection (so
// USE and session variables carry over) and stops at the first error,
// which names the failing statement.
func (s *Server) Exec(stmts ...string) error {
	db, err := s.open(s.RootUser, s.RootPassword, "", nil)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("testdb: connect as root to %s: %w", s.Addr, err)
	}
	defer conn.Close()
	for _, stmt := range stmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("testdb: exec %q: %w", stmt, err)
		}
	}
	return nil
}

// Setup creates the standard test databases and accounts (see the
// constants): on both servers DBName, DriverDBName, User and DriverUser;
// on MariaDB also EdUser, on MySQL also Sha2User. It is idempotent and
// suitable as the setup argument of Main.
func Setup(s *Server) error {
	stmts := []string{
		"CREATE DATABASE IF NOT EXISTS " + quoteIdent(DBName),
		"CREATE DATABASE IF NOT EXISTS " + quoteIdent(DriverDBName),
	}
	// account creates user@'%' anew with ALL PRIVILEGES on *.*; via is
	// the authentication clause before the password.
	account := func(user, via, pass, grantOption string) {
		u := quoteString(user) + "@'%'"
		stmts = append(stmts,
			"DROP USER IF EXISTS "+u,
			fmt.Sprintf("CREATE USER %s IDENTIFIED %s %s", u, via, pass),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO %s%s", u, grantOption))
	}
	account(User, "BY", quoteString(Password), "")
	account(DriverUser, "BY", quoteString(DriverPassword), " WITH GRANT OPTION")
	switch s.Flavor {
	case MariaDB:
		account(EdUser, "VIA ed25519 USING", "PASSWORD("+quoteString(EdPassword)+")", "")
	case MySQL:
		account(Sha2User, "WITH caching_sha2_password BY", quoteString(Sha2Password), "")
	}
	return s.Exec(stmts...)
}

// Seq returns a table expression for a FROM clause that yields the integers
// 1 to n, in order, in a column named seq, on MariaDB and MySQL alike: the
// portable spelling of MariaDB's seq_1_to_n (MySQL has no Sequence engine).
// It is named seq_1_to_n.
func Seq(n int) string {
	if n < 1 {
		n = 1
	}
	return fmt.Sprintf("JSON_TABLE(CONCAT('[', REPEAT('0,', %d), '0]'), '$[*]' COLUMNS (seq FOR ORDINALITY)) AS seq_1_to_%d", n-1, n)
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

var shared *Server

// Shared returns the server started by Main. It panics if Main is not in
// use (that is a bug in the test binary, not an environment problem).
func Shared() *Server {
	if shared == nil {
		panic("testdb.Shared: no server; call testdb.Main from TestMain")
	}
	return shared
}

// Main is the body of a TestMain: it starts one server for the test binary
// (see Shared), runs setup on it if non-nil, runs the tests, stops the
// server and exits with the tests' code. If the server cannot be started or
// set up it prints why and exits 1; it never skips.
func Main(m *testing.M, setup func(*Server) error) {
	os.Exit(Run(m, Options{}, setup))
}

// Run is Main with start options, returning the exit code instead of
// exiting so that TestMain can clean up its own resources first:
//
//	code := testdb.Run(m, testdb.Options{ExtraArgs: args}, testdb.Setup)
//	cleanup()
//	os.Exit(code)
//
// opts.Logf defaults to printing to stderr (go test shows it only for
// failing packages or with -v).
func Run(m *testing.M, opts Options, setup func(*Server) error) int {
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	s, err := Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: testdb: cannot start a %s server for the tests: %v\n"+
			"These tests need a real server (MariaDB: mariadbd and mariadb-install-db; MySQL: the chroot %s); "+
			"run scripts/deps.sh to install them.\n", flavorName(opts.Flavor), err, MySQLChroot())
		return 1
	}
	shared = s
	if setup != nil {
		if err := setup(s); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: testdb: setup: %v\n", err)
			if err := s.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "testdb: %v\n", err)
			}
			return 1
		}
	}
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: testdb: stop server: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// sweepStaleDirs removes server directories in base left behind by test
// binaries that died without Stop (killed, timed out). Their server was
// killed with them (Pdeathsig on Linux).
func sweepStaleDirs(base string, logf func(string, ...any)) {
	// Template staging and install work dirs of interrupted installs.
	for _, pat := range []string{templatePrefix + "*.staging-*", "slotproxy-testdb-install-*"} {
		matches, _ := filepath.Glob(filepath.Join(base, pat))
		for _, dir := range matches {
			if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(dir)
			}
		}
	}
	matches, _ := filepath.Glob(filepath.Join(base, runDirPrefix+"*"))
	for _, dir := range matches {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			// Being created right now, or very broken: only old ones.
			if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(dir)
			}
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			logf("testdb: removed stale %s (owner pid %d is gone)", dir, pid)
		}
	}
}

// ServerVersion returns the version string of flavour f's server binary
// (for MySQL, the chroot's mysqld), as Server.Version would be, without
// starting a server.
func ServerVersion(f Flavor) (string, error) {
	e, err := newEngine(f)
	if err != nil {
		return "", err
	}
	return parseVersion(string(e.versionOut)), nil
}

// BaseDir returns the host directory under which servers of flavour f keep
// their directories and cached templates: os.TempDir() for MariaDB, the
// same path inside the chroot for MySQL.
func BaseDir(f Flavor) string {
	if f == MySQL {
		return filepath.Join(MySQLChroot(), os.TempDir())
	}
	return os.TempDir()
}

// flavorName is f for messages; empty means the environment's choice.
func flavorName(f Flavor) string {
	if f == "" {
		if env, err := FlavorFromEnv(); err == nil {
			f = env
		}
	}
	if f == MySQL {
		return "MySQL"
	}
	return "MariaDB"
}

// findBinary looks name up in PATH, then in the given directories.
func findBinary(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("testdb: %s not found in PATH or %s; run scripts/deps.sh (Debian: apt-get install mariadb-server)",
		name, strings.Join(dirs, ", "))
}

// userArg returns --user=root when running as root: the server refuses to
// run as root otherwise. As another user the flag is unnecessary.
func userArg() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// freePort returns a currently free TCP port on 127.0.0.1. Another process
// may take it before the server binds it; callers retry.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testdb: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// parseVersion extracts "10.11.19-MariaDB-..." from "mariadbd  Ver
// 10.11.19-MariaDB-... for ..." and "9.7.4-2" from "/usr/sbin/mysqld  Ver
// 9.7.4-2 for Linux on x86_64 ((Debian))".
func parseVersion(out string) string {
	f := strings.Fields(out)
	for i, w := range f {
		if w == "Ver" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return strings.TrimSpace(out)
}

// tailLines returns the last n lines of b.
func tailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
