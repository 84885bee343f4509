package proxy_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestGoSQLDriverSuite runs go-sql-driver/mysql's own test suite (from the
// module cache, at the version this module requires) directly against the
// shared server (MariaDB or MySQL) and then through the proxy: every test
// that passes directly must pass through the proxy.
//
// TestConnectorReturnsTimeout is always skipped: it dials a public address,
// and our machines may send traffic only to loopback.
func TestGoSQLDriverSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the driver's whole suite twice; skipped with -short")
	}
	dir := copyDriverModule(t)
	// TLS on both hops: the suite's TestTLS checks the cipher the server
	// sees. The plaintext backend hop is covered by the other tests.
	p := startProxy(t, func(c *proxy.Config) {
		c.ClientTLS = certs.ServerTLS()
		c.BackendTLS = &tls.Config{RootCAs: certs.CA.Pool(), ServerName: "127.0.0.1"}
	})

	direct := runDriverSuite(t, dir, testdb.Shared().Addr)
	proxied := runDriverSuite(t, dir, p.addr)

	var passDirect, regressions, alsoFailing []string
	for name, res := range direct {
		switch {
		case res == "pass":
			passDirect = append(passDirect, name)
			if proxied[name] != "pass" {
				regressions = append(regressions, name+" ("+proxied[name]+")")
			}
		case res == "fail":
			alsoFailing = append(alsoFailing, name)
		}
	}
	sort.Strings(regressions)
	sort.Strings(alsoFailing)
	var skipped []string
	for name, res := range direct {
		if res == "skip" {
			skipped = append(skipped, name)
		}
	}
	sort.Strings(skipped)
	t.Logf("go-sql-driver suite against %s %s: %d tests; %d pass directly; %d pass through the proxy; skipped directly: %v",
		testdb.Shared().Flavor, testdb.Shared().Version, len(direct), len(passDirect), count(proxied, "pass"), skipped)
	t.Logf("failing directly as well (environment): %v", alsoFailing)
	if len(passDirect) < 100 {
		t.Fatalf("only %d driver tests passed directly: the suite did not really run", len(passDirect))
	}
	if len(regressions) > 0 {
		t.Fatalf("pass directly but not through the proxy: %s", strings.Join(regressions, ", "))
	}
}

func count(m map[string]string, v string) int {
	n := 0
	for _, x := range m {
		if x == v {
			n++
		}
	}
	return n
}

// copyDriverModule copies the driver's module source into a writable temp
// directory so its tests can build there.
func copyDriverModule(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/go-sql-driver/mysql").Output()
	if err != nil {
		t.Fatalf("locate go-sql-driver/mysql in the module cache: %v", err)
	}
	src := strings.TrimSpace(string(out))
	dst := filepath.Join(t.TempDir(), "mysql")
	if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copy driver module: %v: %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "u+w", dst).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v: %s", err, out)
	}
	return dst
}

// runDriverSuite runs the driver's tests against addr and returns each
// test's outcome (pass, fail, skip) by name.
func runDriverSuite(t *testing.T, dir, addr string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "test", "-count=1", "-json", "-skip", "^TestConnectorReturnsTimeout$", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"MYSQL_TEST_USER="+testdb.DriverUser,
		"MYSQL_TEST_PASS="+testdb.DriverPassword,
		"MYSQL_TEST_PROT=tcp",
		"MYSQL_TEST_ADDR="+addr,
		"MYSQL_TEST_DBNAME="+testdb.DriverDBName,
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // a failing suite exits non-zero; the JSON says which tests
	results := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct{ Action, Test string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			results[ev.Test] = ev.Action
		}
	}
	if len(results) == 0 {
		t.Fatalf("driver suite against %s produced no results: %s", addr, stderr.String())
	}
	return results
}
