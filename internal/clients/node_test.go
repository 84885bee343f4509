package clients

import "testing"

// nodeClient is testdata/node/scenario.js with mysql2 from
// testdata/node/node_modules.
var nodeClient = clientSpec{
	what: "node mysql2",
	require: func(t *testing.T) {
		require(t, "node with mysql2 in internal/clients/testdata/node/node_modules (scripts/deps-clients.sh runs npm ci)",
			"node", "-e", `require("./node/node_modules/mysql2/promise")`)
	},
	cmd: func(t *testing.T, tg target, mode string) clientCmd {
		return clientCmd{argv: []string{"node", testdataPath(t, "node", "scenario.js")}, env: clientEnv(t, tg, mode),
			dir: testdataPath(t, "node")}
	},
}

// TestNodeMySQL2 runs the scenario with node's mysql2: query() (text
// protocol, client-side interpolation), execute() (server-side prepares,
// numbers sent as DOUBLE), and a pipelined burst of 600 statements in
// flight at once on one connection.
func TestNodeMySQL2(t *testing.T) {
	scenarioTest(t, nodeClient, "query", "execute", "pipelined")
}
