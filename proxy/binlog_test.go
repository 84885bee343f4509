package proxy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/rollup"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestBinlogFormats: on a server with binary logging on, every statement
// form the proxy generates (slotted increments, folds, guarded writes,
// locking reads, upserts, REPLACE, deletes, the roll-up) runs under each
// binlog_format, STATEMENT, MIXED and ROW, and the totals are those of a
// plain table given the same statements directly.
func TestBinlogFormats(t *testing.T) {
	s, err := testdb.Start(testdb.Options{Logf: t.Logf, ExtraArgs: []string{"--log-bin=binlog", "--server-id=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	for _, schema := range []string{plainSchema, ruledSchema} {
		if err := s.Exec(append([]string{"CREATE DATABASE " + schema, "USE " + schema}, diffDDL...)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Exec("CREATE TABLE " + ruledSchema + `.slotted_counters (
		record_type SMALLINT UNSIGNED NOT NULL, record_id BIGINT NOT NULL, slot SMALLINT UNSIGNED NOT NULL,
		count BIGINT NOT NULL, PRIMARY KEY (record_type, record_id, slot)) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, func(c *proxy.Config) {
		c.Backend = s.Addr
		c.Rewriter = newRewriter(diffCatalog())
	})
	connect := func(addr, db string) *client.Conn {
		c, err := client.Connect(addr, s.RootUser, s.RootPassword, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	direct, proxied := connect(s.Addr, plainSchema), connect(p.addr, ruledSchema)
	admin := connect(s.Addr, ruledSchema)
	if r, err := admin.Execute("SELECT @@GLOBAL.log_bin"); err != nil {
		t.Fatal(err)
	} else if on, _ := r.GetInt(0, 0); on != 1 {
		t.Fatal("binary logging is off on the test server")
	}
	steps := []string{
		"UPDATE repos SET downloads = downloads + 1 WHERE id = 1",
		"UPDATE repos SET downloads = downloads + 2 WHERE id IN (1, 2)",
		"UPDATE repos SET stars = stars + 1 WHERE id = 3",
		"UPDATE repos SET downloads = 7 WHERE name = 'beta'",
		"BEGIN",
		"UPDATE repos SET downloads = downloads + 1 WHERE id = 1",
		"SELECT downloads FROM repos WHERE id = 1 FOR UPDATE",
		"UPDATE repos SET downloads = downloads * 2 WHERE id = 1",
		"COMMIT",
		"INSERT INTO repos (id, name) VALUES (9, 'new')",
		"UPDATE repos SET downloads = downloads + 5 WHERE id = 9",
		"INSERT INTO repos (id, name) VALUES (9, 'dup') ON DUPLICATE KEY UPDATE downloads = 0",
		"UPDATE repos SET downloads = downloads + 4 WHERE id = 4",
		"REPLACE INTO repos (id, name) VALUES (4, 'replaced')",
		"UPDATE repos SET downloads = downloads + 3 WHERE id = 3",
		"DELETE FROM repos WHERE id = 3",
		"UPDATE repos SET downloads = downloads + 1 WHERE id = 2",
	}
	for _, format := range []string{"STATEMENT", "MIXED", "ROW"} {
		for _, c := range []*client.Conn{direct, proxied, admin} {
			if _, err := c.Execute("SET SESSION binlog_format = '" + format + "'"); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range steps {
			_, derr := direct.Execute(q)
			_, perr := proxied.Execute(q)
			if (derr == nil) != (perr == nil) {
				t.Fatalf("%s: %q: direct %v, through the proxy %v", format, q, derr, perr)
			}
		}
		q := "SELECT id, name, downloads, stars FROM repos ORDER BY id"
		want := renderText(t, direct, q)
		if got := renderText(t, proxied, q); got != want {
			t.Fatalf("%s: totals through the proxy\n%s\ndirect\n%s", format, got, want)
		}
		// The roll-up folds under the same format; the totals stay.
		if _, err := rollup.Once(context.Background(), admin, diffCatalog(), rollup.Options{}); err != nil {
			t.Fatalf("%s: roll-up: %v", format, err)
		}
		if got := renderText(t, proxied, q); got != want {
			t.Fatalf("%s: totals after the roll-up\n%s\ndirect\n%s", format, got, want)
		}
		if got := renderText(t, admin, q); got != want {
			t.Fatalf("%s: base rows after the roll-up\n%s\nwant\n%s", format, got, want)
		}
		// Put back what the steps changed, for the next format.
		for _, c := range []*client.Conn{direct, admin} {
			for _, q := range []string{"DELETE FROM repos", diffDDL[2]} {
				if _, err := c.Execute(q); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := admin.Execute("DELETE FROM slotted_counters"); err != nil {
			t.Fatal(err)
		}
	}
}

// renderText runs q and renders its rows as text.
func renderText(t *testing.T, c *client.Conn, q string) string {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range r.Values {
		for j := range r.Values[i] {
			v, _ := r.GetString(i, j)
			b.WriteString(v + " ")
		}
		b.WriteString("\n")
	}
	return b.String()
}
