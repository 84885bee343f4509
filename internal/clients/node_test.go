package clients

import "testing"

// TestNodeMySQL2 runs the scenario with node's mysql2: query() (text
// protocol, client-side interpolation), execute() (server-side prepares,
// numbers sent as DOUBLE), and a pipelined burst of 600 statements in
// flight at once on one connection.
func TestNodeMySQL2(t *testing.T) {
	t.Parallel()
	require(t, "node with mysql2 in internal/clients/testdata/node/node_modules (scripts/deps-clients.sh runs npm ci)",
		"node", "-e", `require("./node/node_modules/mysql2/promise")`)
	script := testdataPath(t, "node", "scenario.js")
	scenarioTest(t, "node mysql2", []string{"query", "execute", "pipelined"},
		func(t *testing.T, tg target, mode string) clientCmd {
			return clientCmd{argv: []string{"node", script}, env: clientEnv(t, tg, mode), dir: testdataPath(t, "node")}
		})
}
