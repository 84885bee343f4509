package proxy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
