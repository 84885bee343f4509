package clients

import "testing"

// connectorJ is the MariaDB Connector/J 2.x jar of Debian's libmariadb-java.
const connectorJ = "/usr/share/java/mariadb-java-client.jar"

// javaClient is testdata/java/Scenario.java, run as a single-file program
// with Connector/J on the class path.
var javaClient = clientSpec{
	what: "Connector/J",
	require: func(t *testing.T) {
		require(t, "Java (a JDK) with MariaDB Connector/J 2.x (Debian: default-jdk-headless libmariadb-java)",
			"java", "-XX:-UsePerfData", "-cp", connectorJ, "java/Probe.java")
	},
	cmd: func(t *testing.T, tg target, mode string) clientCmd {
		return clientCmd{
			// A small, quickly started JVM: the programs are short. No
			// perf data file (/tmp/hsperfdata_USER/PID): JVMs of the two
			// servers' suites, run side by side, met on one such file and
			// the JVM's warning about it reached the output compared.
			argv: []string{"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
				"-cp", connectorJ, testdataPath(t, "java", "Scenario.java")},
			env: clientEnv(t, tg, mode),
		}
	},
}

// TestConnectorJ runs the scenario with MariaDB Connector/J: Statement,
// and PreparedStatement with server-side (useServerPrepStmts=true) and
// client-side prepares. The transcript has ResultSetMetaData's column type
// names and the classes getObject() returns.
func TestConnectorJ(t *testing.T) {
	scenarioTest(t, javaClient, "statement", "server-prepared", "client-prepared")
}

// TestConnectorJBatch runs executeBatch() of 1,000 rows with Connector/J:
// prepared increments of the ruled table (in autocommit, in a committed and
// in a rolled-back transaction), prepared inserts into a plain table, a
// Statement batch, a batch with a failing row, then the totals. Once with
// useServerPrepStmts=true (the driver pipelines COM_STMT_EXECUTEs) and once
// with rewriteBatchedStatements=true.
func TestConnectorJBatch(t *testing.T) {
	scenarioTest(t, javaClient, "batch-server-prepared", "batch-rewrite")
}
