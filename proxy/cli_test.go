package proxy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// mariadbCLI runs the mariadb command-line client against addr and returns
// its combined output.
func mariadbCLI(t *testing.T, addr, user, pass string, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("mariadb")
	if err != nil {
		t.Fatal("the mariadb client is required (scripts/deps.sh installs it): ", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	full := append([]string{"--no-defaults", "--protocol=TCP", "-h", host, "-P", port, "-u", user, "-p" + pass, "--batch"}, args...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	return string(out), err
}

func TestMariaDBClient(t *testing.T) {
	p := startProxy(t, nil)
	direct := testdb.Shared().Addr

	infile := filepath.Join(t.TempDir(), "rows.csv")
	var csv strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&csv, "%d,row %d\n", i, i)
	}
	if err := os.WriteFile(infile, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"DROP TABLE IF EXISTS cli_rows",
		"CREATE TABLE cli_rows (id INT PRIMARY KEY, v VARCHAR(20))",
		"LOAD DATA LOCAL INFILE '" + infile + "' INTO TABLE cli_rows FIELDS TERMINATED BY ','",
		"SELECT COUNT(*), SUM(id), MAX(v) FROM cli_rows",
		"SELECT 1 AS one; SELECT 'two' AS two",
		"SHOW WARNINGS",
		"SELECT * FROM cli_rows WHERE id < 3",
		"SELECT CURRENT_USER()",
	}, ";\n") + ";"
	pUser, pPass, _ := pluginAccount()
	for _, u := range [][2]string{{testdb.User, testdb.Password}, {pUser, pPass}} {
		want, err := mariadbCLI(t, direct, u[0], u[1], "--local-infile=1", testdb.DBName, "-e", script)
		if err != nil {
			t.Fatalf("direct: %v\n%s", err, want)
		}
		got, err := mariadbCLI(t, p.addr, u[0], u[1], "--local-infile=1", testdb.DBName, "-e", script)
		if err != nil {
			t.Fatalf("through the proxy: %v\n%s", err, got)
		}
		if got != want {
			t.Fatalf("mariadb output differs for %s\nproxy:\n%s\ndirect:\n%s", u[0], got, want)
		}
		if !strings.Contains(got, "1000\t499500") {
			t.Fatalf("LOAD DATA LOCAL did not load the client's file:\n%s", got)
		}
	}
	out, err := mariadbCLI(t, p.addr, testdb.User, "wrong", "-e", "SELECT 1")
	if err == nil || !strings.Contains(out, "ERROR 1045") {
		t.Fatalf("wrong password: %v\n%s", err, out)
	}
}

func TestMariaDBClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca, _, _, err := certs.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	withTLS := startProxy(t, func(c *proxy.Config) { c.ClientTLS = certs.ServerTLS() })
	out, err := mariadbCLI(t, withTLS.addr, testdb.User, testdb.Password,
		"--ssl", "--ssl-ca="+ca, "--ssl-verify-server-cert", "-e", "status")
	if err != nil {
		t.Fatalf("mariadb --ssl-verify-server-cert through a TLS proxy: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Cipher in use") {
		t.Fatalf("no TLS in the client's status:\n%s", out)
	}
	// Without a certificate the proxy offers no TLS: a client that demands
	// it refuses to go on in plaintext.
	plain := startProxy(t, nil)
	out, err = mariadbCLI(t, plain.addr, testdb.User, testdb.Password,
		"--ssl", "--ssl-ca="+ca, "--ssl-verify-server-cert", "-e", "SELECT 'leaked'")
	if err == nil || strings.Contains(out, "leaked") {
		t.Fatalf("client demanding TLS was served in plaintext: %v\n%s", err, out)
	}
}

// mysqlCLI runs Oracle's mysql command-line client, from the MySQL chroot
// (testdb.MySQLChroot, built by scripts/deps.sh), against addr and returns
// its combined output. Paths in args are the chroot's.
func mysqlCLI(t *testing.T, addr, user, pass string, args ...string) (string, error) {
	t.Helper()
	root := testdb.MySQLChroot()
	if _, err := os.Stat(filepath.Join(root, "usr/bin/mysql")); err != nil {
		t.Fatalf("Oracle's mysql client is required: %v (scripts/deps.sh builds the chroot %s)", err, root)
	}
	host, port, _ := net.SplitHostPort(addr)
	full := append([]string{"--no-defaults", "--protocol=TCP", "-h", host, "-P", port, "-u", user, "-p" + pass,
		"--get-server-public-key", "--batch"}, args...)
	cmd := exec.Command("/usr/bin/mysql", full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// chrootTempDir returns a fresh directory inside the MySQL chroot, as the
// host sees it and as the chroot's programs see it.
func chrootTempDir(t *testing.T) (host, inner string) {
	t.Helper()
	root := testdb.MySQLChroot()
	host, err := os.MkdirTemp(filepath.Join(root, "tmp"), "slotproxy-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	return host, strings.TrimPrefix(host, root)
}

// TestMySQLClient runs Oracle's mysql client (9.7, libmysqlclient) through
// the proxy and directly with the same script, and compares the output:
// caching_sha2_password logins (full authentication over plaintext with
// the server's key), LOCAL INFILE, multi-statement queries, a wrong
// password, and TLS from the client verified against the test CA.
func TestMySQLClient(t *testing.T) {
	p := startProxy(t, nil)
	direct := testdb.Shared().Addr
	host, inner := chrootTempDir(t)
	var csv strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&csv, "%d,row %d\n", i, i)
	}
	if err := os.WriteFile(filepath.Join(host, "rows.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := certs.WriteFiles(host); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"DROP TABLE IF EXISTS cli_rows_mysql",
		"CREATE TABLE cli_rows_mysql (id INT PRIMARY KEY, v VARCHAR(20))",
		"LOAD DATA LOCAL INFILE '" + inner + "/rows.csv' INTO TABLE cli_rows_mysql FIELDS TERMINATED BY ','",
		"SELECT COUNT(*), SUM(id), MAX(v) FROM cli_rows_mysql",
		"SELECT 1 AS one; SELECT 'two' AS two",
		"SHOW WARNINGS",
		"SELECT * FROM cli_rows_mysql WHERE id < 3",
		"SELECT CURRENT_USER()",
	}, ";\n") + ";"
	if testdb.Shared().IsMySQL() {
		// The server's cache is empty: the first logins are full
		// authentications.
		if err := testdb.Shared().Exec("FLUSH PRIVILEGES"); err != nil {
			t.Fatal(err)
		}
	}
	pUser, pPass, _ := pluginAccount()
	for _, u := range []struct {
		user, pass string
		works      bool // else the same failure both ways
	}{
		{testdb.User, testdb.Password, true},
		// Oracle's client has no client_ed25519 (MariaDB's ed25519
		// account): it fails with 2059, directly and through the proxy.
		{pUser, pPass, testdb.Shared().IsMySQL()},
	} {
		got, gotErr := mysqlCLI(t, p.addr, u.user, u.pass, "--local-infile=1", testdb.DBName, "-e", script)
		want, wantErr := mysqlCLI(t, direct, u.user, u.pass, "--local-infile=1", testdb.DBName, "-e", script)
		if got != want || (gotErr == nil) != (wantErr == nil) || (gotErr == nil) != u.works {
			t.Fatalf("mysql as %s (want it to work: %v)\nproxy (%v):\n%s\ndirect (%v):\n%s", u.user, u.works, gotErr, got, wantErr, want)
		}
		if u.works && !strings.Contains(got, "1000\t499500") {
			t.Fatalf("LOAD DATA LOCAL did not load the client's file:\n%s", got)
		}
	}
	got, err := mysqlCLI(t, p.addr, testdb.User, "wrong", "-e", "SELECT 1")
	want, _ := mysqlCLI(t, direct, testdb.User, "wrong", "-e", "SELECT 1")
	if err == nil || !strings.Contains(got, "ERROR 1045") || got != want {
		t.Fatalf("wrong password: %v\nproxy:\n%s\ndirect:\n%s", err, got, want)
	}

	withTLS := startProxy(t, func(c *proxy.Config) { c.ClientTLS = certs.ServerTLS() })
	out, err := mysqlCLI(t, withTLS.addr, testdb.User, testdb.Password,
		"--ssl-mode=VERIFY_CA", "--ssl-ca="+inner+"/ca.pem", "--commands", "-e", `\s`)
	if err != nil {
		t.Fatalf("mysql --ssl-mode=VERIFY_CA through a TLS proxy: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Cipher in use") {
		t.Fatalf("no TLS in the client's status:\n%s", out)
	}
	// Without a certificate the proxy offers no TLS: a client that
	// requires it refuses to go on in plaintext.
	out, err = mysqlCLI(t, p.addr, testdb.User, testdb.Password, "--ssl-mode=REQUIRED", "-e", "SELECT 'leaked'")
	if err == nil || strings.Contains(out, "leaked") {
		t.Fatalf("client requiring TLS was served in plaintext: %v\n%s", err, out)
	}
}
