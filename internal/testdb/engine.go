//go:build unix

package testdb

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// engine is what differs between the flavours: the binaries, where they
// run (a chroot for MySQL), how a data directory is installed and which
// flags the server gets.
type engine struct {
	flavor Flavor
	// root is the chroot directory the server runs in; "" for none.
	root string
	// server is the server binary as executed: a path inside root.
	server string
	// installDB is mariadb-install-db (MariaDB only; a host path).
	installDB string
	// versionOut is the output of "server --version".
	versionOut []byte
	// installArgs are added to the installation's command line, serverArgs
	// to every server start (before Options.ExtraArgs); bootstrapSQL runs
	// during the installation, so it is part of the cached template.
	installArgs, serverArgs []string
	bootstrapSQL            string
	// templateFiles are files every complete installation has (relative
	// to the data directory).
	templateFiles []string
}

// mariadbInstallArgs are passed to mariadb-install-db in addition to
// --datadir and --user. The InnoDB sizes match mariadbServerArgs so that the
// first start does not have to resize the redo log.
var mariadbInstallArgs = []string{
	"--no-defaults",
	"--auth-root-authentication-method=normal",
	"--skip-test-db",
	"--innodb-buffer-pool-size=64M",
	"--innodb-log-file-size=16M",
}

// mariadbServerArgs are the mariadbd flags common to every server; the
// per-server paths, the port and Options.ExtraArgs are added by launch.
var mariadbServerArgs = []string{
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

// mariadbBootstrapSQL runs inside mariadb-install-db (--extra-file). The
// bootstrap reader ends a statement at a line ending in ";", so compound
// statements must be on one line. The bootstrap server runs without grant
// tables; FLUSH PRIVILEGES loads them so that account statements work. It
// gives root a password for localhost (unix socket) and 127.0.0.1 and drops
// the root accounts that are unreachable here (::1 and the machine's host
// name, which --skip-name-resolve ignores with a warning on every start).
var mariadbBootstrapSQL = `FLUSH PRIVILEGES;
ALTER USER 'root'@'localhost' IDENTIFIED BY '` + rootPassword + `';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '` + rootPassword + `';
DROP USER IF EXISTS 'root'@'::1';
IF @current_hostname NOT IN ('localhost', '127.0.0.1', '::1') THEN EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS ''root''@', QUOTE(@current_hostname)); END IF;
`

// mysqlInstallArgs are passed to mysqld --initialize-insecure in addition
// to the paths. The InnoDB sizes match mysqlServerArgs.
var mysqlInstallArgs = []string{
	"--no-defaults",
	"--initialize-insecure",
	"--innodb-buffer-pool-size=64M",
	"--innodb-redo-log-capacity=32M",
	"--skip-log-bin",
}

// mysqlServerArgs are the mysqld flags common to every server, the same
// settings as mariadbServerArgs where MySQL has them. performance_schema
// stays at MySQL's default (ON), the X plugin is off, and secure-file-priv
// is empty (MariaDB's default) so that SELECT … INTO OUTFILE and LOAD DATA
// INFILE work as on MariaDB.
var mysqlServerArgs = []string{
	"--skip-name-resolve",
	"--innodb-buffer-pool-size=64M",
	"--innodb-redo-log-capacity=32M",
	"--skip-log-bin",
	"--innodb-flush-log-at-trx-commit=2",
	"--max-connections=2000",
	"--local-infile=1",
	"--max-allowed-packet=256M",
	"--mysqlx=OFF",
	"--secure-file-priv=",
}

// mysqlBootstrapSQL runs after mysqld --initialize-insecure (--init-file):
// root gets a password and an account for 127.0.0.1 (--skip-name-resolve
// makes 'root'@'localhost' reachable over the socket only).
var mysqlBootstrapSQL = `ALTER USER 'root'@'localhost' IDENTIFIED BY '` + rootPassword + `';
CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY '` + rootPassword + `';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
`

// newEngine finds the binaries of flavor and asks the server its version.
func newEngine(flavor Flavor) (*engine, error) {
	switch flavor {
	case MariaDB:
		mariadbd, err := findBinary("mariadbd", "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
		if err != nil {
			return nil, err
		}
		installDB, err := findBinary("mariadb-install-db", "/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts")
		if err != nil {
			return nil, err
		}
		out, err := exec.Command(mariadbd, "--version").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("testdb: %s --version: %w: %s", mariadbd, err, bytes.TrimSpace(out))
		}
		return &engine{
			flavor: MariaDB, server: mariadbd, installDB: installDB, versionOut: out,
			installArgs: mariadbInstallArgs, serverArgs: mariadbServerArgs, bootstrapSQL: mariadbBootstrapSQL,
			templateFiles: []string{"ibdata1", "ib_logfile0", "mysql_upgrade_info", "mysql/global_priv.MAI", "mysql/db.MAI"},
		}, nil
	case MySQL:
		root := MySQLChroot()
		const mysqld = "/usr/sbin/mysqld"
		if fi, err := os.Stat(filepath.Join(root, mysqld)); err != nil || fi.IsDir() {
			return nil, fmt.Errorf("testdb: no MySQL chroot: %s%s is missing; run scripts/deps.sh to build the chroot (or set %s)",
				root, mysqld, EnvMySQLChroot)
		}
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("testdb: running mysqld in the chroot %s needs root (CAP_SYS_CHROOT)", root)
		}
		cmd := exec.Command(mysqld, "--no-defaults", "--version")
		cmd.SysProcAttr = chrootSysProcAttr(root)
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("testdb: %s in chroot %s --version: %w: %s", mysqld, root, err, bytes.TrimSpace(out))
		}
		return &engine{
			flavor: MySQL, root: root, server: mysqld, versionOut: out,
			installArgs: mysqlInstallArgs, serverArgs: mysqlServerArgs, bootstrapSQL: mysqlBootstrapSQL,
			templateFiles: []string{"ibdata1", "mysql.ibd", "undo_001", "undo_002", "public_key.pem", "server-cert.pem"},
		}, nil
	default:
		return nil, fmt.Errorf("testdb: unknown flavour %q (want %q or %q)", flavor, MariaDB, MySQL)
	}
}

// name is the server's family name for messages.
func (e *engine) name() string {
	if e.flavor == MySQL {
		return "MySQL"
	}
	return "MariaDB"
}

// hostServer is the server binary's path on the host.
func (e *engine) hostServer() string { return filepath.Join(e.root, e.server) }

// baseDir is the host directory that holds the servers' directories and the
// cached templates: os.TempDir(), inside the chroot for MySQL (the same
// path, so that TMPDIR keeps its meaning). It is created if needed.
func (e *engine) baseDir() (string, error) {
	if e.root == "" {
		return os.TempDir(), nil
	}
	d := filepath.Join(e.root, os.TempDir())
	if err := os.MkdirAll(d, 0o1777); err != nil {
		return "", fmt.Errorf("testdb: %w", err)
	}
	return d, nil
}

// inner returns the path under which the server sees the host path p.
func (e *engine) inner(p string) string {
	if e.root == "" {
		return p
	}
	rel, err := filepath.Rel(e.root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return p // outside the chroot: the server cannot see it
	}
	return "/" + rel
}

// command returns a command running the server binary with args, with its
// working directory dir (a host path).
func (e *engine) command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(e.server, args...)
	cmd.Dir = e.inner(dir)
	if e.root != "" {
		cmd.SysProcAttr = chrootSysProcAttr(e.root)
		// TMPDIR may name a host directory the chroot does not have.
		cmd.Env = append(os.Environ(), "TMPDIR=/tmp")
	} else {
		cmd.SysProcAttr = childSysProcAttr()
	}
	return cmd
}

// install creates a fresh data directory datadir (a host path, which must
// not exist) in the work directory work, running bootstrapSQL.
func (e *engine) install(work, datadir string) error {
	bootstrap := filepath.Join(work, "bootstrap.sql")
	if err := os.WriteFile(bootstrap, []byte(e.bootstrapSQL), 0o600); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	var cmd *exec.Cmd
	switch e.flavor {
	case MariaDB:
		args := append([]string(nil), e.installArgs...)
		args = append(args, "--datadir="+datadir, "--extra-file="+bootstrap)
		args = append(args, userArg()...)
		cmd = exec.Command(e.installDB, args...)
		// Make install-db bootstrap with the same mariadbd we will run.
		cmd.Env = append(os.Environ(), "MYSQLD_BOOTSTRAP="+e.server)
		cmd.Dir = work
	case MySQL:
		args := append([]string(nil), e.installArgs...)
		args = append(args, "--datadir="+e.inner(datadir), "--init-file="+e.inner(bootstrap),
			"--tmpdir="+e.inner(work), "--user=root")
		cmd = e.command(work, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testdb: installing a %s data directory (%s) failed: %w\n%s", e.name(), cmd, err, tailLines(out, 30))
	}
	if e.flavor == MySQL {
		// auto.cnf holds the server UUID: let each server make its own.
		if err := os.Remove(filepath.Join(datadir, "auto.cnf")); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("testdb: %w", err)
		}
	}
	return nil
}

// copyHostFiles returns args with every "--name=/path" whose path is a
// regular file outside the chroot replaced by a copy in dir (inside the
// chroot), so that a chrooted server can read it. Without a chroot it
// returns args unchanged.
func (e *engine) copyHostFiles(dir string, args []string) ([]string, error) {
	if e.root == "" {
		return args, nil
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		name, val, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "--") || !filepath.IsAbs(val) || e.inner(val) != val {
			continue
		}
		fi, err := os.Stat(val)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(val)
		if err != nil {
			return nil, fmt.Errorf("testdb: copy %s into the chroot: %w", val, err)
		}
		files := filepath.Join(dir, hostFilesDir)
		if err := os.MkdirAll(files, 0o700); err != nil {
			return nil, fmt.Errorf("testdb: %w", err)
		}
		dst := filepath.Join(files, fmt.Sprintf("%d-%s", i, filepath.Base(val)))
		if err := os.WriteFile(dst, data, fi.Mode().Perm()); err != nil {
			return nil, fmt.Errorf("testdb: copy %s into the chroot: %w", val, err)
		}
		out[i] = name + "=" + e.inner(dst)
	}
	return out, nil
}
