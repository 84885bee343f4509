// Package cluster tells where the proxy's backend stands in a multi-primary
// cluster (MariaDB Galera Cluster, MySQL Group Replication), so that proxies
// in front of different nodes pick disjoint slots (see
// executor.SlotPartition).
package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Node is the backend's place in its cluster.
type Node struct {
	// Kind is KindGalera, KindGroupReplication or KindSingle.
	Kind string
	// Size is the number of nodes that accept writes now (1 for a single
	// server), Index the backend's place among them, 0 to Size-1.
	Size, Index int
}

// Kinds of Node.
const (
	KindSingle           = "single server"
	KindGalera           = "Galera"
	KindGroupReplication = "Group Replication"
)

func (n Node) String() string {
	if n.Kind == KindSingle {
		return n.Kind
	}
	return fmt.Sprintf("%s node %d of %d", n.Kind, n.Index, n.Size)
}

// Conn is what Detect needs of a connection (go-mysql's client.Conn).
type Conn interface {
	Execute(command string, args ...any) (*mysql.Result, error)
}

// Detect asks the backend of conn where it stands: on Galera, from
// wsrep_cluster_size and wsrep_local_index (a node that has not joined a
// primary component is an error); in a Group Replication group, from the
// ONLINE members ordered by MEMBER_ID and this server's server_uuid among
// them; else a single server.
func Detect(conn Conn) (Node, error) {
	if n, ok, err := galera(conn); ok || err != nil {
		return n, err
	}
	if n, ok, err := groupReplication(conn); ok || err != nil {
		return n, err
	}
	return Node{Kind: KindSingle, Size: 1}, nil
}

// galera reads wsrep's status. ok is false when wsrep is off or absent.
func galera(conn Conn) (Node, bool, error) {
	r, err := conn.Execute("SHOW GLOBAL VARIABLES LIKE 'wsrep\\_on'")
	if err != nil || len(r.Values) == 0 {
		return Node{}, false, nil // MySQL: no such variable
	}
	if on, _ := r.GetString(0, 1); !strings.EqualFold(on, "ON") {
		return Node{}, false, nil
	}
	r, err = conn.Execute("SHOW GLOBAL STATUS WHERE `Variable_name` IN ('wsrep_cluster_size', 'wsrep_local_index', 'wsrep_cluster_status')")
	if err != nil {
		return Node{}, true, fmt.Errorf("reading wsrep status: %w", err)
	}
	status := map[string]string{}
	for i := range r.Values {
		k, _ := r.GetString(i, 0)
		v, _ := r.GetString(i, 1)
		status[strings.ToLower(k)] = v
	}
	if s := status["wsrep_cluster_status"]; !strings.EqualFold(s, "Primary") {
		return Node{}, true, fmt.Errorf("Galera node not in a primary component (wsrep_cluster_status %q)", s)
	}
	size, err1 := strconv.Atoi(status["wsrep_cluster_size"])
	index, err2 := strconv.Atoi(status["wsrep_local_index"])
	if err := errors.Join(err1, err2); err != nil || size < 1 || index < 0 || index >= size {
		return Node{}, true, fmt.Errorf("Galera status: wsrep_cluster_size %q, wsrep_local_index %q", status["wsrep_cluster_size"], status["wsrep_local_index"])
	}
	return Node{Kind: KindGalera, Size: size, Index: index}, true, nil
}

// groupReplication reads the group's members. ok is false when the server
// is not an ONLINE member of a group (or has no such table: MariaDB).
func groupReplication(conn Conn) (Node, bool, error) {
	r, err := conn.Execute("SELECT `MEMBER_ID` = @@server_uuid FROM `performance_schema`.`replication_group_members` WHERE `MEMBER_STATE` = 'ONLINE' ORDER BY `MEMBER_ID`")
	if err != nil {
		return Node{}, false, nil
	}
	index := -1
	for i := range r.Values {
		if me, _ := r.GetInt(i, 0); me == 1 {
			index = i
		}
	}
	if index < 0 {
		return Node{}, false, nil // not in a group, or not ONLINE in it
	}
	return Node{Kind: KindGroupReplication, Size: len(r.Values), Index: index}, true, nil
}
