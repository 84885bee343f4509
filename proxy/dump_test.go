package proxy_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
)

// TestDumpRestoreThroughProxy: a logical backup taken and restored through
// the proxy keeps every total. The dump of the slot table and the registry
// is refused (the dump of the ruled table already holds the totals, so
// restoring both would count every slot twice); with them left out the
// dump holds exact totals, and restoring it (DROP TABLE, CREATE TABLE,
// INSERT) clears the slots of the dropped table, so that the restored rows
// start from their dumped totals and nothing is inherited.
func TestDumpRestoreThroughProxy(t *testing.T) {
	const schema = "dump_ruled"
	ddl := []string{
		"CREATE TABLE repos (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT '', downloads INT NOT NULL DEFAULT 0)",
		"INSERT INTO repos (id, name, downloads) VALUES (1, 'a', 10), (2, 'b', 0), (3, 'c', 4)",
	}
	cat := loadedSetup(t, "dump_plain", schema, ddl, "table: "+schema+".repos\nkey: id\ncounters: [downloads]\nslots: 8\n")
	p := startProxy(t, func(c *proxy.Config) { c.Rewriter = newRewriter(cat) })
	c, err := client.Connect(p.addr, testdb.User, testdb.Password, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	total := func(via *client.Conn) string {
		t.Helper()
		r, err := via.Execute("SELECT GROUP_CONCAT(id, '=', downloads ORDER BY id) FROM repos")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := r.GetString(0, 0)
		return s
	}
	for range 7 {
		for _, id := range []string{"1", "2"} {
			if _, err := c.Execute("UPDATE repos SET downloads = downloads + 1 WHERE id = " + id); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := total(c)
	if before != "1=17,2=7,3=4" {
		t.Fatalf("totals before the dump %q", before)
	}
	admin := touchAdmin(t)
	if _, err := admin.Execute("SELECT 1 FROM " + schema + ".slotted_counters LIMIT 1"); err != nil {
		t.Fatal(err)
	}

	dump, err := exec.LookPath("mariadb-dump")
	if err != nil {
		t.Fatal("mariadb-dump is required (scripts/deps.sh installs it): ", err)
	}
	run := func(bin string, stdin string, args ...string) (string, error) {
		t.Helper()
		host, port, _ := net.SplitHostPort(p.addr)
		full := append([]string{"--no-defaults", "--protocol=TCP", "-h", host, "-P", port, "-u", testdb.User, "-p" + testdb.Password}, args...)
		cmd := exec.Command(bin, full...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &stderr
		err := cmd.Run()
		if err != nil {
			return out.String() + stderr.String(), err
		}
		return out.String(), nil
	}
	common := []string{"--single-transaction", "--skip-triggers", "--no-tablespaces", "--skip-comments"}
	out, err := run(dump, "", append(common, schema)...)
	if err == nil || !strings.Contains(out, "1235") || !strings.Contains(out, "--ignore-table="+schema+".slotted_counters") {
		t.Fatalf("a dump of the slot table was not refused with guidance: %v\n%s", err, out)
	}
	out, err = run(dump, "", append(common, "--ignore-table="+schema+".slotted_counters", "--ignore-table="+schema+".slotproxy_record_types", schema)...)
	if err != nil {
		t.Fatalf("mariadb-dump through the proxy: %v\n%s", err, out)
	}
	if !strings.Contains(out, "(1,'a',17)") || !strings.Contains(out, "(2,'b',7)") {
		t.Fatalf("the dump does not hold the totals:\n%s", out)
	}

	// More increments after the dump: the restore must bring back the
	// dumped totals, not add the slots left since.
	if _, err := c.Execute("UPDATE repos SET downloads = downloads + 5 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	cli, err := exec.LookPath("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := run(cli, out, schema); err != nil {
		t.Fatalf("restore through the proxy: %v\n%s", err, res)
	}
	if got := total(c); got != before {
		t.Fatalf("totals after the restore through the proxy %q, dumped %q", got, before)
	}
	r, err := admin.Execute("SELECT COUNT(*) FROM " + schema + ".slotted_counters")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.GetInt(0, 0); n != 0 {
		t.Fatalf("%d slot rows left after the ruled table was dropped and restored", n)
	}
	// And the counters go on from there.
	if _, err := c.Execute("UPDATE repos SET downloads = downloads + 1 WHERE id = 3"); err != nil {
		t.Fatal(err)
	}
	if got := total(c); got != "1=17,2=7,3=5" {
		t.Fatalf("totals after an increment on the restored table %q", got)
	}
}
