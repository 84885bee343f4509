package clients

import (
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// requireCLI fails the test unless the mariadb command-line client is
// installed.
func requireCLI(t *testing.T) {
	t.Helper()
	require(t, "the mariadb command-line client (Debian: mariadb-client)", "mariadb", "--version")
}

// cliArgs are the arguments of the mariadb client for addr as the client
// account, without reading any option file.
func cliArgs(host, port string, extra ...string) []string {
	return append([]string{"mariadb", "--no-defaults", "--protocol=TCP", "-h", host, "-P", port,
		"-u", clientUser, "-p" + clientPassword}, extra...)
}

// TestMariaDBCLI runs testdata/cli/script.sql (increments, reads, a
// server-side PREPARE/EXECUTE, transactions, errors and warnings) with the
// mariadb client in table format, echoing each statement (-vvv), going on
// after errors (--force) and showing warnings after each statement. The
// output through the proxy must equal the direct output byte for byte,
// except for the elapsed times the client prints ("(0.001 sec)").
// The column-type-info mode adds --column-type-info, the client's
// rendering of every column definition.
func TestMariaDBCLI(t *testing.T) {
	t.Parallel()
	requireCLI(t)
	script, err := os.ReadFile(testdataPath(t, "cli", "script.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"table", "column-type-info"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			direct, proxied := e.runBoth(func(tg target) clientCmd {
				args := cliArgs(tg.host, tg.port, "--force", "--show-warnings", "-vvv", "--skip-pager")
				if mode == "column-type-info" {
					args = append(args, "--column-type-info")
				}
				return clientCmd{argv: append(args, tg.db), stdin: string(script)}
			})
			// --force makes the client exit 1 after the script's errors;
			// what matters is that it exits the same way both times.
			if direct.killed != nil || direct.stdout == "" {
				t.Fatalf("mariadb directly against the server %s\nstderr:\n%s", direct.describe(), direct.stderr)
			}
			if proxied.killed != nil || exitCode(proxied) != exitCode(direct) {
				t.Errorf("mariadb through the proxy %s; directly it %s", proxied.describe(), direct.describe())
			}
			want, got := cliTiming.ReplaceAllString(direct.stdout, "(T sec)"), cliTiming.ReplaceAllString(proxied.stdout, "(T sec)")
			if got != want {
				t.Errorf("mariadb's output differs through the proxy (-direct +proxy):\n%s", lineDiff(want, got))
			}
			if proxied.stderr != direct.stderr {
				t.Errorf("mariadb's error output differs through the proxy (-direct +proxy):\n%s", lineDiff(direct.stderr, proxied.stderr))
			}
		})
	}
}

// cliTiming matches the elapsed time the mariadb client prints after a
// statement; it is the only part of the output that may differ.
var cliTiming = regexp.MustCompile(`\(\d+\.\d+ sec\)`)

// exitCode is the exit status of a finished run, or -1.
func exitCode(r result) int {
	if r.err == nil {
		return 0
	}
	if ee, ok := r.err.(interface{ ExitCode() int }); ok {
		return ee.ExitCode()
	}
	return -1
}

// cliError matches the mariadb client's rendering of an error.
var cliError = regexp.MustCompile(`ERROR (\d+) \(([0-9A-Z]{5})\)(?: at line \d+)?: (.*)`)

// TestMariaDBCLIBackendDown starts a proxy whose backend address has
// nothing listening and connects with the mariadb client. There is no
// direct run to compare with (directly the client itself reports 2003):
// the client must print the proxy's own message, with an error code in
// the server's range (1000-1999 or 3000 and up). A code in the client
// range (2000-2999) in the ERR packet makes libmariadb report 2027
// "Received malformed packet" instead, hiding the message.
func TestMariaDBCLIBackendDown(t *testing.T) {
	t.Parallel()
	requireCLI(t)
	// A port that was just free and is closed again: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, dead, nil)
	host, port, _ := net.SplitHostPort(p.addr)
	for _, args := range [][]string{
		cliArgs(host, port, "-e", "SELECT 1"),
		cliArgs(host, port, testdb.DBName, "-e", "SELECT 1"),
	} {
		r := runClient(t.Context(), clientCmd{argv: args})
		if r.killed != nil {
			t.Fatalf("mariadb %s", r.describe())
		}
		output := strings.TrimSpace(r.stdout + r.stderr)
		if r.err == nil {
			t.Fatalf("mariadb connected through a proxy whose backend is down:\n%s", output)
		}
		m := cliError.FindStringSubmatch(output)
		if m == nil {
			t.Fatalf("mariadb printed no error line:\n%s", output)
		}
		code, _ := strconv.Atoi(m[1])
		if code >= 2000 && code < 3000 {
			t.Errorf("mariadb shows a client-range error code %d through the proxy, not the proxy's own error:\n%s", code, output)
		}
		if !strings.Contains(m[3], "slotproxy") {
			t.Errorf("mariadb does not show the proxy's message (want one naming slotproxy):\n%s", output)
		}
	}
}
