//go:build unix

package testdb_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/slotproxy/slotproxy/internal/testcerts"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open(%q): %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func queryString(t *testing.T, db *sql.DB, query string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	if err := db.QueryRowContext(ctx, query).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s
}

func TestAccounts(t *testing.T) {
	s := testdb.Shared()
	type account struct{ user, pass, db, plugin string }
	accounts := []account{
		{s.RootUser, s.RootPassword, "", s.DefaultAuthPlugin()},
		{testdb.User, testdb.Password, testdb.DBName, s.DefaultAuthPlugin()},
		{testdb.DriverUser, testdb.DriverPassword, testdb.DriverDBName, s.DefaultAuthPlugin()},
	}
	// The plugin-specific account of each server; the other's does not
	// exist.
	only, missing := account{testdb.EdUser, testdb.EdPassword, testdb.DBName, "ed25519"}, testdb.Sha2User
	if s.IsMySQL() {
		only, missing = account{testdb.Sha2User, testdb.Sha2Password, testdb.DBName, "caching_sha2_password"}, testdb.EdUser
	}
	accounts = append(accounts, only)
	for _, tc := range accounts {
		t.Run(tc.user, func(t *testing.T) {
			db := openDB(t, s.DSN(tc.user, tc.pass, tc.db, ""))
			if got := queryString(t, db, "SELECT 1"); got != "1" {
				t.Fatalf("SELECT 1 = %q", got)
			}
			if got, want := queryString(t, db, "SELECT CURRENT_USER()"), tc.user+"@"; !strings.HasPrefix(got, want) {
				t.Errorf("CURRENT_USER() = %q, want prefix %q", got, want)
			}
			if got := queryString(t, db, "SELECT IFNULL(DATABASE(), '')"); got != tc.db {
				t.Errorf("DATABASE() = %q, want %q", got, tc.db)
			}
			// CURRENT_USER's host is '%' for the test accounts and 127.0.0.1 for root.
			host := queryString(t, db, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', -1)")
			plugin := queryString(t, db, "SELECT plugin FROM mysql.user WHERE user = '"+tc.user+"' AND host = '"+host+"'")
			if plugin != tc.plugin {
				t.Errorf("plugin = %q, want %q", plugin, tc.plugin)
			}
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		db := openDB(t, s.DSN(only.user, "nope", "", ""))
		if err := db.Ping(); err == nil || !strings.Contains(err.Error(), "1045") {
			t.Fatalf("Ping with wrong password: %v, want error 1045", err)
		}
	})
	t.Run("no "+missing, func(t *testing.T) {
		db := openDB(t, s.RootDSN("", ""))
		if n := queryString(t, db, "SELECT COUNT(*) FROM mysql.user WHERE user = '"+missing+"'"); n != "0" {
			t.Fatalf("%s exists on %s", missing, s.Flavor)
		}
	})
}

func TestFlavor(t *testing.T) {
	s := testdb.Shared()
	want, err := testdb.FlavorFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	db := openDB(t, s.RootDSN("", ""))
	version := queryString(t, db, "SELECT VERSION()")
	if s.Flavor != want || s.IsMySQL() != (want == testdb.MySQL) || s.IsMariaDB() != (want == testdb.MariaDB) {
		t.Fatalf("Flavor %q (IsMySQL %v), want %q from %s", s.Flavor, s.IsMySQL(), want, testdb.EnvServer)
	}
	if version != s.Version {
		t.Errorf("VERSION() = %q, Server.Version = %q", version, s.Version)
	}
	if d := s.Dialect(); d.IsMySQL() != s.IsMySQL() || d.IsMariaDB() != s.IsMariaDB() {
		t.Errorf("Dialect() = %v for a %s server", d, s.Flavor)
	}
	// The greeting announces the same version.
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 256)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || n < 6 {
		t.Fatalf("read greeting: %d bytes, %v", n, err)
	}
	// MariaDB's greeting prefixes "5.5.5-".
	end := strings.IndexByte(string(buf[5:n]), 0)
	if end < 0 || strings.TrimPrefix(string(buf[5:5+end]), "5.5.5-") != s.Version {
		t.Errorf("greeting %q does not announce %q", buf[5:n], s.Version)
	}
}

func TestFlavorFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want testdb.Flavor
		err  bool
	}{
		{"", testdb.MariaDB, false},
		{"mariadb", testdb.MariaDB, false},
		{"MySQL", testdb.MySQL, false},
		{"postgres", "", true},
	} {
		t.Setenv(testdb.EnvServer, tc.env)
		got, err := testdb.FlavorFromEnv()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s=%q: %q, %v", testdb.EnvServer, tc.env, got, err)
		}
	}
}

func TestDSN(t *testing.T) {
	s := testdb.Shared()
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q", s.Addr)
	}
	for params, want := range map[string]string{
		"":                "u:p@tcp(" + s.Addr + ")/d",
		"parseTime=true":  "u:p@tcp(" + s.Addr + ")/d?parseTime=true",
		"?parseTime=true": "u:p@tcp(" + s.Addr + ")/d?parseTime=true",
	} {
		if got := s.DSN("u", "p", "d", params); got != want {
			t.Errorf("DSN(params=%q) = %q, want %q", params, got, want)
		}
	}
	if got, want := s.DSN("u", "p", "", ""), "u:p@tcp("+s.Addr+")/"; got != want {
		t.Errorf("DSN without db = %q, want %q", got, want)
	}
}

func TestExec(t *testing.T) {
	s := testdb.Shared()
	err := s.Exec(
		"USE "+testdb.DBName,
		"CREATE TABLE exec_test (id INT PRIMARY KEY)",
		"INSERT INTO exec_test VALUES (1), (2)",
	)
	if err != nil {
		t.Fatal(err)
	}
	db := openDB(t, s.DSN(testdb.User, testdb.Password, testdb.DBName, ""))
	if got := queryString(t, db, "SELECT SUM(id) FROM exec_test"); got != "3" {
		t.Errorf("SUM = %q, want 3", got)
	}
	err = s.Exec("SELECT 1", "SELECT no_such_column")
	if err == nil || !strings.Contains(err.Error(), "no_such_column") {
		t.Fatalf("Exec with bad statement: %v, want error naming the statement", err)
	}
}

// TestKillRestart uses a private server so that the shared one stays up. It
// also checks that ExtraArgs apply, including flags naming host files.
func TestKillRestart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	// Server flags that name host files: for MySQL they are copied into
	// the chroot.
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key, err := certs.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := testdb.Start(testdb.Options{
		ExtraArgs: []string{"--performance-schema=ON", "--ssl-ca=" + ca, "--ssl-cert=" + cert, "--ssl-key=" + key},
		Logf:      t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Dir %s still exists after Stop (err=%v)", s.Dir, err)
		}
		if err := s.Stop(); err != nil {
			t.Errorf("second Stop: %v", err)
		}
	}()

	db := openDB(t, s.RootDSN("", ""))
	if got := queryString(t, db, "SELECT @@performance_schema"); got != "1" {
		t.Errorf("@@performance_schema = %q, want 1 (ExtraArgs not applied)", got)
	}
	// The server presents the test certificate, verified with the test CA.
	if err := mysql.RegisterTLSConfig("testdb-kill", certs.ClientTLS("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	defer mysql.DeregisterTLSConfig("testdb-kill")
	tlsDB := openDB(t, s.RootDSN("", "tls=testdb-kill"))
	var name, cipher string
	if err := tlsDB.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
		t.Errorf("TLS with the certificate from ExtraArgs: cipher %q, %v", cipher, err)
	}
	tlsDB.Close()
	if err := s.Exec(
		"CREATE DATABASE k",
		"CREATE TABLE k.t (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE=InnoDB",
		"INSERT INTO k.t VALUES (1, 'before')",
	); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if err := db.Ping(); err == nil {
		t.Fatal("Ping succeeded against a killed server")
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill of a killed server: %v", err)
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr {
		t.Fatalf("Addr changed across Restart: %s -> %s", addr, s.Addr)
	}
	if got := queryString(t, db, "SELECT v FROM k.t WHERE id = 1"); got != "before" {
		t.Fatalf("row after Kill+Restart = %q, want %q", got, "before")
	}

	// Restart of a running server shuts it down gracefully first.
	if err := s.Exec("INSERT INTO k.t VALUES (2, 'graceful')"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, db, "SELECT COUNT(*) FROM k.t"); got != "2" {
		t.Fatalf("rows after graceful Restart = %s, want 2", got)
	}
	db.Close()
}

// privateTempDir points TMPDIR at a fresh directory for this test, so that
// the template cache starts empty, and removes what the servers left there
// (for MySQL inside the chroot) when the test ends.
func privateTempDir(t *testing.T) {
	flavor, err := testdb.FlavorFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	outer := testdb.BaseDir(flavor)
	t.Setenv("TMPDIR", t.TempDir())
	if base := testdb.BaseDir(flavor); base != os.TempDir() {
		t.Cleanup(func() {
			os.RemoveAll(base)
			// and the directories made for it, up to the usual base
			for d := filepath.Dir(base); strings.HasPrefix(d, outer+"/"); d = filepath.Dir(d) {
				_ = os.Remove(d)
			}
		})
	}
}

// TestTemplateRace starts several servers at once with an empty template
// cache, so they race to build it.
func TestTemplateRace(t *testing.T) {
	privateTempDir(t)
	var wg sync.WaitGroup
	servers := make([]*testdb.Server, 3)
	errs := make([]error, len(servers))
	for i := range servers {
		wg.Go(func() { servers[i], errs[i] = testdb.Start(testdb.Options{Logf: t.Logf}) })
	}
	wg.Wait()
	for i, s := range servers {
		if errs[i] != nil {
			t.Errorf("server %d: %v", i, errs[i])
			continue
		}
		db := openDB(t, s.RootDSN("", ""))
		if got := queryString(t, db, "SELECT 1"); got != "1" {
			t.Errorf("server %d: SELECT 1 = %q", i, got)
		}
		db.Close()
		if err := s.Stop(); err != nil {
			t.Errorf("server %d: Stop: %v", i, err)
		}
	}
}

func TestStartFailure(t *testing.T) {
	privateTempDir(t)
	_, err := testdb.Start(testdb.Options{ExtraArgs: []string{"--no-such-option-xyz"}})
	if err == nil {
		t.Fatal("Start with a bad option succeeded")
	}
	// The error carries the server log tail, which names the problem.
	if !strings.Contains(err.Error(), "no-such-option-xyz") {
		t.Errorf("error does not include the server log tail: %v", err)
	}
	// Nothing but the template cache is left behind.
	flavor, _ := testdb.FlavorFromEnv()
	left, _ := filepath.Glob(filepath.Join(testdb.BaseDir(flavor), "slotproxy-testdb-run-*"))
	if len(left) != 0 {
		t.Errorf("server dirs left behind: %v", left)
	}
}

// TestRestartPortTaken checks that Restart reports a port taken while the
// server was down, and works again once the port is free.
func TestRestartPortTaken(t *testing.T) {
	s, err := testdb.Start(testdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Restart()
	l.Close()
	if err == nil || !strings.Contains(err.Error(), "could not bind") {
		t.Fatalf("Restart with port taken: %v, want bind error", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart after port was freed: %v", err)
	}
	if err := s.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
}
