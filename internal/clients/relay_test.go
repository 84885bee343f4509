package clients

import "testing"

// TestRelay runs one or two modes of every client program through a proxy
// that rewrites nothing (no rules), on the plain schema's twin. The relay
// must be invisible too; when a client fails here and in its own test,
// the bug is in the relay, not in the rewrite.
func TestRelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec clientSpec
		mode string
	}{
		{phpClient, "mysqli-prepared"},
		{phpClient, "pdo-native"},
		{javaClient, "server-prepared"},
		{javaClient, "batch-server-prepared"},
		{pymysqlClient, "autocommit"},
		{mysqldbClient, "autocommit"},
		{nodeClient, "execute"},
		{nodeClient, "pipelined"},
	} {
		t.Run(c.spec.what+"/"+c.mode, func(t *testing.T) {
			t.Parallel()
			c.spec.require(t)
			runScenario(t, newRelayEnv(t), c.spec, c.mode)
		})
	}
	t.Run("raw-pipeline", func(t *testing.T) {
		t.Parallel()
		comparePipelines(t, newRelayEnv(t))
	})
}
