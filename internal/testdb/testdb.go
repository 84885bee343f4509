//go:build unix

// Package testdb starts throwaway MariaDB servers for Go tests.
//
// A server lives in a fresh temporary directory under os.TempDir, listens
// only on 127.0.0.1 on a free port, and is removed again by Stop. Test
// binaries normally use Main from TestMain, which starts one server per
// test binary and exposes it through Shared:
//
//	func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }
//
// The freshly installed data directory (the output of mariadb-install-db)
// is cached in os.TempDir, keyed by the mariadbd binary and version, so
// only the first test binary on a machine pays for mariadb-install-db;
// later ones copy the cached template. Set SLOTPROXY_TESTDB_NOCACHE=1 (or
// Options.NoCache) to bypass the cache.
//
// A server that could not be started is an error, never a skip: the tests
// in this repository are meant to run against a real MariaDB. Run
// scripts/deps.sh to install one.
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
)

// Standard databases and accounts created by Setup. Every package that
// tests against MariaDB uses these names.
const (
	// DBName is the database for slotproxy's own tests.
	DBName = "slotproxy_test"
	// DriverDBName is the database go-sql-driver's test suite expects.
	DriverDBName = "gotest"

	// NativeUser authenticates with mysql_native_password and has ALL on *.*.
	NativeUser     = "native"
	NativePassword = "native-pass"

	// EdUser authenticates with MariaDB's ed25519 plugin and has ALL on *.*.
	EdUser     = "ed"
	EdPassword = "ed-pass"

	// DriverUser is the account for go-sql-driver's test suite: ALL
	// PRIVILEGES on *.* WITH GRANT OPTION, default authentication plugin.
	DriverUser     = "gotest"
	DriverPassword = "secret"
)

const (
	rootUser     = "root"
	rootPassword = "slotproxy-root"

	// startTimeout bounds how long Start and Restart wait for the server to
	// answer SELECT as root.
	defaultStartTimeout = 60 * time.Second
	// stopTimeout bounds a graceful shutdown before Stop falls back to SIGKILL.
	stopTimeout = 30 * time.Second
	// portAttempts is how many free ports Start tries when mariadbd fails to
	// bind (another process grabbed the port between probe and bind).
	portAttempts = 5

	runDirPrefix   = "slotproxy-testdb-run-"
	templatePrefix = "slotproxy-testdb-tmpl-"
	ownerFile      = "owner.pid"
	logFile        = "mariadbd.log"
	socketFile     = "mysqld.sock"
)

// installArgs are passed to mariadb-install-db in addition to --datadir and
// --user. The InnoDB sizes match serverArgs so that the first start does not
// have to resize the redo log.
var installArgs = []string{
	"--no-defaults",
	"--auth-root-authentication-method=normal",
	"--skip-test-db",
	"--innodb-buffer-pool-size=64M",
	"--innodb-log-file-size=16M",
}

// serverArgs are the mariadbd flags common to every server; the per-server
// paths, the port and Options.ExtraArgs are added by Start.
var serverArgs = []string{
	"--skip-name-resolve",
	"--innodb-buffer-pool-size=64M",
	"--innodb-log-file-size=16M",
	"--skip-log-bin",
	"--innodb-flush-log-at-trx-commit=2",
	"--max-connections=2000",
	"--local-infile=1",
	"--max-allowed-packet=256M",
	"--plugin-load-add=auth_ed25519",
}

// bootstrapSQL runs inside mariadb-install-db (--extra-file), so it is part
// of the cached template. The bootstrap reader ends a statement at a line
// ending in ";", so compound statements must be on one line. The bootstrap
// server runs without grant tables;
// FLUSH PRIVILEGES loads them so that account statements work. It gives
// root a password for localhost (unix socket) and 127.0.0.1 and drops the
// root accounts that are unreachable here (::1 and the machine's host name,
// which --skip-name-resolve ignores with a warning on every start).
var bootstrapSQL = `FLUSH PRIVILEGES;
ALTER USER 'root'@'localhost' IDENTIFIED BY '` + rootPassword + `';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '` + rootPassword + `';
DROP USER IF EXISTS 'root'@'::1';
IF @current_hostname NOT IN ('localhost', '127.0.0.1', '::1') THEN EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS ''root''@', QUOTE(@current_hostname)); END IF;
`

// errPortInUse marks a start attempt that failed because the TCP port was
// taken; Start retries those on another port.
var errPortInUse = errors.New("port already in use")

// Options configure Start. The zero value is ready to use.
type Options struct {
	// ExtraArgs are appended to the mariadbd command line after the default
	// flags, so they can override them (e.g. "--performance-schema=ON").
	ExtraArgs []string
	// Logf, if set, receives progress messages (timings, cache use).
	Logf func(format string, args ...any)
	// StartTimeout bounds the wait for the server to accept queries on
	// Start and Restart. Zero means 60s.
	StartTimeout time.Duration
	// NoCache disables the cached data directory template and always runs
	// mariadb-install-db. The environment variable SLOTPROXY_TESTDB_NOCACHE=1
	// has the same effect.
	NoCache bool
}

// Server is a running (or stopped) throwaway MariaDB. Its exported fields
// are fixed for the server's lifetime, across Kill and Restart. Methods are
// safe for concurrent use.
type Server struct {
	// Addr is the TCP address, "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port; it stays the same across Restart.
	Port int
	// Dir is the server's private directory: data directory (Dir/data),
	// unix socket, temp dir and the mariadbd output log (Dir/mariadbd.log).
	// Stop removes it.
	Dir string
	// Socket is the unix socket path.
	Socket string
	// RootUser and RootPassword log in as the superuser over TCP from
	// 127.0.0.1 and over the unix socket.
	RootUser, RootPassword string
	// Version is mariadbd's version string, e.g. "10.11.19-MariaDB-0+deb12u1".
	Version string

	opts     Options
	mariadbd string
	logPath  string

	mu      sync.Mutex
	proc    *process // nil when not running
	stopped bool     // Stop was called; the directory is gone
}

// process is one mariadbd incarnation.
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

// Start installs a fresh data directory and starts mariadbd on a free
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

	mariadbd, err := findBinary("mariadbd", "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
	if err != nil {
		return nil, err
	}
	installDB, err := findBinary("mariadb-install-db", "/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts")
	if err != nil {
		return nil, err
	}
	versionOut, err := exec.Command(mariadbd, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("testdb: %s --version: %w: %s", mariadbd, err, bytes.TrimSpace(versionOut))
	}

	sweepStaleDirs(opts.Logf)

	dir, err := os.MkdirTemp("", runDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testdb: create server dir: %w", err)
	}
	s := &Server{
		Dir:          dir,
		Socket:       filepath.Join(dir, socketFile),
		RootUser:     rootUser,
		RootPassword: rootPassword,
		Version:      parseVersion(string(versionOut)),
		opts:         opts,
		mariadbd:     mariadbd,
		logPath:      filepath.Join(dir, logFile),
	}
	if err := s.start(installDB, versionOut); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(installDB string, versionOut []byte) error {
	if err := os.WriteFile(filepath.Join(s.Dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	// sun_path is 108 bytes on Linux and 104 on macOS.
	if len(s.Socket) > 100 {
		return fmt.Errorf("testdb: unix socket path %q is too long; set TMPDIR to a shorter directory", s.Socket)
	}
	if err := os.Mkdir(filepath.Join(s.Dir, "tmp"), 0o700); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}

	t0 := time.Now()
	how, err := s.prepareDatadir(installDB, versionOut)
	if err != nil {
		return err
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
			s.opts.Logf("testdb: MariaDB %s ready at %s (datadir %s in %s, server start %s)",
				s.Version, s.Addr, how, prepared.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
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
// template cache if possible. It reports how ("copied from cache" or
// "installed").
func (s *Server) prepareDatadir(installDB string, versionOut []byte) (string, error) {
	datadir := filepath.Join(s.Dir, "data")
	if s.opts.NoCache {
		if err := s.installDatadir(installDB, datadir); err != nil {
			return "", err
		}
		return "installed", nil
	}
	tmpl, created, err := s.template(installDB, versionOut)
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

// template returns the cached pristine data directory for this mariadbd,
// creating it if needed. Creation is serialized across processes by an
// exclusive flock on a lock file next to the template; a published template
// is never modified, so copying it needs no lock.
func (s *Server) template(installDB string, versionOut []byte) (dir string, created bool, err error) {
	key := templateKey(s.mariadbd, installDB, versionOut)
	final := filepath.Join(os.TempDir(), templatePrefix+key)
	datadir := filepath.Join(final, "data")
	if templateComplete(datadir) {
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

	if templateComplete(datadir) { // another process built it while we waited
		return datadir, false, nil
	}
	if err := os.RemoveAll(final); err != nil { // incomplete leftover
		return "", false, fmt.Errorf("testdb: remove broken template: %w", err)
	}
	staging, err := os.MkdirTemp("", templatePrefix+key+".staging-")
	if err != nil {
		return "", false, fmt.Errorf("testdb: %w", err)
	}
	defer os.RemoveAll(staging) // no-op after a successful rename
	if err := s.installDatadir(installDB, filepath.Join(staging, "data")); err != nil {
		return "", false, err
	}
	if err := os.Rename(staging, final); err != nil {
		return "", false, fmt.Errorf("testdb: publish template: %w", err)
	}
	return datadir, true, nil
}

// templateComplete is a cheap sanity check that a template was fully
// installed and has not been partly removed by a tmp cleaner.
func templateComplete(datadir string) bool {
	for _, f := range []string{"ibdata1", "ib_logfile0", "mysql_upgrade_info", "mysql/global_priv.MAI", "mysql/db.MAI"} {
		if _, err := os.Stat(filepath.Join(datadir, f)); err != nil {
			return false
		}
	}
	return true
}

// templateKey identifies a template: the binaries (path, size, mtime), the
// server version and everything that goes into the installation.
func templateKey(mariadbd, installDB string, versionOut []byte) string {
	h := sha256.New()
	for _, bin := range []string{mariadbd, installDB} {
		fmt.Fprintf(h, "%s\n", bin)
		if fi, err := os.Stat(bin); err == nil {
			fmt.Fprintf(h, "%d %d\n", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	h.Write(versionOut)
	fmt.Fprintf(h, "%q\n%s\nuid=%d\n", installArgs, bootstrapSQL, os.Geteuid())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// installDatadir runs mariadb-install-db into datadir (which must not exist).
func (s *Server) installDatadir(installDB, datadir string) error {
	t0 := time.Now()
	work, err := os.MkdirTemp("", "slotproxy-testdb-install-")
	if err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	defer os.RemoveAll(work)
	extra := filepath.Join(work, "bootstrap.sql")
	if err := os.WriteFile(extra, []byte(bootstrapSQL), 0o600); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	args := append([]string(nil), installArgs...)
	args = append(args, "--datadir="+datadir, "--extra-file="+extra)
	args = append(args, userArg()...)
	cmd := exec.Command(installDB, args...)
	// Make install-db bootstrap with the same mariadbd we will run.
	cmd.Env = append(os.Environ(), "MYSQLD_BOOTSTRAP="+s.mariadbd)
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testdb: %s failed: %w\n%s", installDB, err, tailLines(out, 30))
	}
	s.opts.Logf("testdb: mariadb-install-db took %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// launch starts mariadbd on s.Port with the existing data directory and
// waits until it is ready. On error the process is gone; the error wraps
// errPortInUse if the port could not be bound.
func (s *Server) launch() error {
	args := []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(s.Dir, "data"),
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--socket=" + s.Socket,
		"--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"),
		"--tmpdir=" + filepath.Join(s.Dir, "tmp"),
	}
	args = append(args, userArg()...)
	args = append(args, serverArgs...)
	args = append(args, s.opts.ExtraArgs...)

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

// spawn starts mariadbd with its output appended to the server log.
func (s *Server) spawn(args []string) (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testdb: open server log: %w", err)
	}
	fmt.Fprintf(logf, "%s%s %s\n", logMarker, s.mariadbd, strings.Join(args, " "))

	cmd := exec.Command(s.mariadbd, args...)
	cmd.Dir = s.Dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = childSysProcAttr()
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
		return nil, fmt.Errorf("testdb: start %s: %w", s.mariadbd, err)
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
		if time.Now().After(deadline) {
			return fmt.Errorf("testdb: mariadbd on %s not ready after %s: %w\n%s",
				s.Addr, s.opts.StartTimeout, lastErr, s.logTail())
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probeWhileRunning runs one probe, abandoning it after 2s or as soon as p
// exits (a port holder that accepts but never speaks would otherwise stall
// the probe while our mariadbd has already died of the bind error).
func (s *Server) probeWhileRunning(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
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
	if sock != s.Socket {
		// Another test binary's server won the race for this port.
		return fmt.Errorf("%w: %s is served by another MariaDB (socket %s)", errPortInUse, s.Addr, sock)
	}
	return nil
}

// exitError describes an unexpected exit of p during startup.
func (s *Server) exitError(p *process) error {
	if cur := s.currentLog(); strings.Contains(cur, "Address already in use") || strings.Contains(cur, "Bind on TCP/IP port") {
		return fmt.Errorf("testdb: mariadbd could not bind %s: %w", s.Addr, errPortInUse)
	}
	return fmt.Errorf("testdb: mariadbd exited during startup (%v):\n%s", p.err, s.logTail())
}

// logMarker starts the output of each mariadbd incarnation in the log.
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

// currentLog returns the log output of the latest mariadbd incarnation.
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
		return fmt.Errorf("testdb: signal mariadbd: %w", err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("testdb: mariadbd shutdown: %w\n%s", p.err, s.logTail())
		}
		return nil
	case <-time.After(stopTimeout):
		killAndWait(p)
		return fmt.Errorf("testdb: mariadbd did not shut down within %s; killed\n%s", stopTimeout, s.logTail())
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
	s.opts.Logf("testdb: MariaDB restarted at %s in %s", s.Addr, time.Since(t0).Round(time.Millisecond))
	return nil
}

// Running reports whether the mariadbd process is alive.
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
// constants). It is idempotent and suitable as the setup argument of Main.
func Setup(s *Server) error {
	return s.Exec(
		"CREATE DATABASE IF NOT EXISTS "+quoteIdent(DBName),
		"CREATE DATABASE IF NOT EXISTS "+quoteIdent(DriverDBName),
		fmt.Sprintf("CREATE OR REPLACE USER %s@'%%' IDENTIFIED VIA mysql_native_password USING PASSWORD(%s)",
			quoteString(NativeUser), quoteString(NativePassword)),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO %s@'%%'", quoteString(NativeUser)),
		fmt.Sprintf("CREATE OR REPLACE USER %s@'%%' IDENTIFIED VIA ed25519 USING PASSWORD(%s)",
			quoteString(EdUser), quoteString(EdPassword)),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO %s@'%%'", quoteString(EdUser)),
		fmt.Sprintf("CREATE OR REPLACE USER %s@'%%' IDENTIFIED BY %s",
			quoteString(DriverUser), quoteString(DriverPassword)),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION", quoteString(DriverUser)),
	)
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
		fmt.Fprintf(os.Stderr, "FAIL: testdb: cannot start a MariaDB server for the tests: %v\n"+
			"These tests need mariadbd and mariadb-install-db; run scripts/deps.sh to install them.\n", err)
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

// sweepStaleDirs removes server directories left behind by test binaries
// that died without Stop (killed, timed out). Their mariadbd was killed
// with them (Pdeathsig on Linux).
func sweepStaleDirs(logf func(string, ...any)) {
	// Template staging and install work dirs of interrupted installs.
	for _, pat := range []string{templatePrefix + "*.staging-*", "slotproxy-testdb-install-*"} {
		matches, _ := filepath.Glob(filepath.Join(os.TempDir(), pat))
		for _, dir := range matches {
			if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(dir)
			}
		}
	}
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPrefix+"*"))
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

// userArg returns --user=root when running as root: mariadbd refuses to
// run as root otherwise. As another user the flag is unnecessary.
func userArg() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// freePort returns a currently free TCP port on 127.0.0.1. Another process
// may take it before mariadbd binds it; callers retry.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testdb: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// parseVersion extracts "10.11.19-MariaDB-..." from "mariadbd  Ver 10.11.19-MariaDB-... for ...".
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
