package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/cluster"
	"github.com/slotproxy/slotproxy/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m, testdb.Setup) }

// TestDetectSingle: the test server, on its own, is one part of one.
func TestDetectSingle(t *testing.T) {
	db := testdb.Shared()
	conn, err := client.Connect(db.Addr, db.RootUser, db.RootPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := cluster.Detect(conn)
	if err != nil {
		t.Fatal(err)
	}
	if n != (cluster.Node{Kind: cluster.KindSingle, Size: 1}) {
		t.Errorf("Detect on a single %s = %+v", db.Flavor, n)
	}
}

// fakeConn answers Detect's queries as a cluster node would. (Neither test
// server is a cluster member; TestDetectSingle runs Detect on both.)
type fakeConn struct {
	wsrepOn string            // "" when the variable does not exist
	status  map[string]string // wsrep status variables
	members []bool            // ONLINE group members by MEMBER_ID: is it this server; nil: no such table
}

func (f *fakeConn) Execute(q string, _ ...any) (*mysql.Result, error) {
	rows := func(names []string, values [][]any) (*mysql.Result, error) {
		rs, err := mysql.BuildSimpleTextResultset(names, values)
		if err != nil {
			return nil, err
		}
		for _, row := range rs.RowDatas { // as a client reads them
			v, err := row.ParseText(rs.Fields, nil)
			if err != nil {
				return nil, err
			}
			rs.Values = append(rs.Values, v)
		}
		return &mysql.Result{Resultset: rs}, nil
	}
	switch {
	case strings.Contains(q, "VARIABLES LIKE 'wsrep"):
		if f.wsrepOn == "" {
			return rows([]string{"Variable_name", "Value"}, nil)
		}
		return rows([]string{"Variable_name", "Value"}, [][]any{{"wsrep_on", f.wsrepOn}})
	case strings.HasPrefix(q, "SHOW GLOBAL STATUS"):
		var v [][]any
		for k, s := range f.status {
			v = append(v, []any{k, s})
		}
		return rows([]string{"Variable_name", "Value"}, v)
	case strings.Contains(q, "replication_group_members"):
		if f.members == nil {
			return nil, &mysql.MyError{Code: 1146, Message: "Table 'performance_schema.replication_group_members' doesn't exist"}
		}
		var v [][]any
		for _, me := range f.members {
			n := int64(0)
			if me {
				n = 1
			}
			v = append(v, []any{n})
		}
		return rows([]string{"me"}, v)
	}
	return nil, fmt.Errorf("unexpected query %q", q)
}

func TestDetectClusters(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn *fakeConn
		want cluster.Node
		err  string
	}{
		{"Galera node 2 of 3", &fakeConn{wsrepOn: "ON", status: map[string]string{"wsrep_cluster_size": "3", "wsrep_local_index": "2", "wsrep_cluster_status": "Primary"}},
			cluster.Node{Kind: cluster.KindGalera, Size: 3, Index: 2}, ""},
		{"Galera node outside a primary component", &fakeConn{wsrepOn: "ON", status: map[string]string{"wsrep_cluster_size": "1", "wsrep_local_index": "0", "wsrep_cluster_status": "non-Primary"}},
			cluster.Node{}, `not in a primary component`},
		{"wsrep off (MariaDB without Galera)", &fakeConn{wsrepOn: "OFF", members: nil},
			cluster.Node{Kind: cluster.KindSingle, Size: 1}, ""},
		{"Group Replication member 1 of 3", &fakeConn{members: []bool{false, true, false}},
			cluster.Node{Kind: cluster.KindGroupReplication, Size: 3, Index: 1}, ""},
		{"not an ONLINE group member", &fakeConn{members: []bool{false, false}},
			cluster.Node{Kind: cluster.KindSingle, Size: 1}, ""},
		{"MySQL without a group", &fakeConn{members: []bool{}},
			cluster.Node{Kind: cluster.KindSingle, Size: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cluster.Detect(tc.conn)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Detect = %+v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Detect = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
