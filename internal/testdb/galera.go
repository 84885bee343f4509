package testdb

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// galeraProviders are where Debian's galera-4 puts the wsrep provider.
var galeraProviders = []string{"/usr/lib/galera/libgalera_smm.so", "/usr/lib/galera-4/libgalera_smm.so", "/usr/lib/libgalera_smm.so"}

// GaleraProvider returns the path of the Galera wsrep provider, or an error
// naming where it was looked for.
func GaleraProvider() (string, error) {
	for _, p := range galeraProviders {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("testdb: no Galera provider (install galera-4): looked for %s", strings.Join(galeraProviders, ", "))
}

// Cluster is a throwaway MariaDB Galera Cluster on loopback: every node a
// Server of its own (its own data directory, port and temp dir).
type Cluster struct {
	Nodes []*Server
}

// StartGalera starts a Galera cluster of n MariaDB nodes: the first
// bootstraps it, the others join it one at a time and receive its data by
// rsync (state snapshot transfer). opts apply to every node; Flavor must
// be MariaDB or empty.
//
// Node 1 weighs more in the quorum than the others together (pc.weight n
// against 1 each): whichever other nodes a test kills, node 1 stays in the
// primary component. With equal weights, two nodes left after a kill on a
// loaded machine sometimes split (one too slow to answer in time), each
// became non-primary, and they had not re-formed a primary component 20 s
// later: every statement failed with 1047.
func StartGalera(n int, opts Options) (*Cluster, error) {
	if opts.Flavor != "" && opts.Flavor != MariaDB {
		return nil, errors.New("testdb: Galera needs MariaDB")
	}
	opts.Flavor = MariaDB
	provider, err := GaleraProvider()
	if err != nil {
		return nil, err
	}
	// Each node: group communication, incremental and snapshot transfer
	// ports, all chosen before any node starts (every node names the
	// others' group communication ports).
	type ports struct{ gcomm, ist, sst int }
	ps := make([]ports, n)
	var peers []string
	for i := range ps {
		for _, p := range []*int{&ps[i].gcomm, &ps[i].ist, &ps[i].sst} {
			if *p, err = freePort(); err != nil {
				return nil, err
			}
		}
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(ps[i].gcomm))
	}
	c := &Cluster{}
	for i, p := range ps {
		o := opts
		weight := 1
		if i == 1 {
			weight = n
		}
		o.ExtraArgs = append([]string{
			"--wsrep-on=ON",
			"--wsrep-provider=" + provider,
			"--wsrep-cluster-name=slotproxy_test",
			"--wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
			"--wsrep-node-name=node" + strconv.Itoa(i),
			"--wsrep-node-address=127.0.0.1:" + strconv.Itoa(p.gcomm),
			"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(p.gcomm) +
				";ist.recv_addr=127.0.0.1:" + strconv.Itoa(p.ist) + ";gcache.size=32M;pc.wait_prim_timeout=PT30S" +
				// A node that stops answering is declared gone after 5s
				// (15s by default), so the others carry on sooner; not
				// sooner than that: on two loaded cores a node that is
				// only slow (seen at 2s) was suspected too, the two left
				// after a kill split, and neither stayed primary.
				";evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT5S;evs.inactive_timeout=PT7S" +
				";pc.weight=" + strconv.Itoa(weight),
			"--wsrep-sst-method=rsync",
			"--wsrep-sst-receive-address=127.0.0.1:" + strconv.Itoa(p.sst),
			"--binlog-format=ROW",
			"--innodb-autoinc-lock-mode=2",
		}, opts.ExtraArgs...)
		if i == 0 {
			o.ExtraArgs = append(o.ExtraArgs, "--wsrep-new-cluster")
		} else if os.Geteuid() == 0 {
			// rsync's daemon, which receives the snapshot, runs as nobody
			// when started by root (the SST script sets no uid).
			o.Prepare = giveToNobody
		}
		if o.StartTimeout <= 0 {
			o.StartTimeout = 2 * defaultStartTimeout
		}
		s, err := Start(o)
		if err != nil {
			if len(c.Nodes) > 0 {
				// The donor's side of a failed state transfer.
				err = fmt.Errorf("%w\n-- node 0 (donor), its state transfers:\n%s", err, c.Nodes[0].sstLog())
			}
			c.Stop()
			return nil, fmt.Errorf("testdb: Galera node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	return c, nil
}

// sstLog returns the lines of the server's log about state transfers.
func (s *Server) sstLog() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "SST") || strings.Contains(l, "rsync") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// giveToNobody hands the data directory under dir to the user nobody, the
// user rsync's daemon becomes when started by root (the SST script sets no
// uid), so that it can write the snapshot it receives; dir itself is
// opened for traversal. The server, as root, reads and writes it still.
func giveToNobody(dir string) error {
	u, err := user.Lookup("nobody")
	if err != nil {
		return err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(filepath.Join(dir, "data"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// Stop kills every node (a throwaway cluster needs no orderly goodbye,
// which a group takes seconds over) and removes their directories.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		errs = append(errs, c.Nodes[i].Kill(), c.Nodes[i].Stop())
	}
	return errors.Join(errs...)
}

// StartGroupReplication starts a MySQL Group Replication group of n members
// in multi-primary mode (the plugin of the MySQL chroot): the first
// bootstraps the group, the others join it one at a time and recover its
// data from the others' binary logs as root. opts apply to every member;
// Flavor must be MySQL or empty.
func StartGroupReplication(n int, opts Options) (*Cluster, error) {
	if opts.Flavor != "" && opts.Flavor != MySQL {
		return nil, errors.New("testdb: Group Replication needs MySQL")
	}
	opts.Flavor = MySQL
	var seeds []string
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
		seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(p))
	}
	c := &Cluster{}
	for i := range n {
		o := opts
		o.ExtraArgs = append([]string{
			"--server-id=" + strconv.Itoa(i+1),
			"--log-bin=binlog",
			"--gtid-mode=ON",
			"--enforce-gtid-consistency=ON",
			"--plugin-load-add=group_replication.so",
			"--group-replication-group-name=" + groupName,
			"--group-replication-local-address=" + seeds[i],
			"--group-replication-group-seeds=" + strings.Join(seeds, ","),
			"--group-replication-single-primary-mode=OFF",
			"--group-replication-enforce-update-everywhere-checks=ON",
			"--group-replication-start-on-boot=OFF",
			"--group-replication-recovery-get-public-key=ON",
			// A member that stops answering leaves the group as soon as
			// it is suspected (5 s), and does not try to come back.
			"--group-replication-member-expel-timeout=0",
			"--group-replication-autorejoin-tries=0",
			"--report-host=127.0.0.1",
		}, opts.ExtraArgs...)
		if o.StartTimeout <= 0 {
			o.StartTimeout = defaultStartTimeout
		}
		// Every member its own server_uuid (the template's auto.cnf, if
		// any, would give them one).
		o.Prepare = func(dir string) error {
			err := os.Remove(filepath.Join(dir, "data", "auto.cnf"))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		s, err := Start(o)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("testdb: Group Replication member %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, s)
		var stmts []string
		if i == 0 {
			stmts = []string{"SET GLOBAL group_replication_bootstrap_group = ON", "START GROUP_REPLICATION", "SET GLOBAL group_replication_bootstrap_group = OFF"}
		} else {
			stmts = []string{fmt.Sprintf("START GROUP_REPLICATION USER = '%s', PASSWORD = '%s'", s.RootUser, s.RootPassword)}
		}
		if err := s.Exec(stmts...); err != nil {
			c.Stop()
			return nil, fmt.Errorf("testdb: Group Replication member %d: %w\n%s", i, err, s.logTail())
		}
		// Recovered and ONLINE before the next one joins.
		if err := s.waitOnline(i+1, o.StartTimeout); err != nil {
			c.Stop()
			return nil, fmt.Errorf("testdb: Group Replication member %d: %w\n%s", i, err, s.logTail())
		}
	}
	return c, nil
}

// waitOnline waits until the server sees n ONLINE members in its group.
func (s *Server) waitOnline(n int, timeout time.Duration) error {
	db, err := s.open(s.RootUser, s.RootPassword, "", nil)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(timeout)
	for {
		var online int
		err := db.QueryRow("SELECT COUNT(*) FROM performance_schema.replication_group_members WHERE MEMBER_STATE = 'ONLINE'").Scan(&online)
		if err == nil && online >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d members ONLINE after %v (%v)", online, n, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// groupName names the test group (any UUID).
const groupName = "5b0c4f36-6f3e-4a43-9d4e-1c2a7f0e9a11"
