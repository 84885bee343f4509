package clients

import "testing"

// python is Debian's interpreter, for which python3-pymysql and
// python3-mysqldb are installed (a pyenv python3 earlier in PATH has
// neither).
const python = "/usr/bin/python3"

// pythonClient is testdata/python/scenario.py with the DB-API driver
// module (pymysql or MySQLdb) from the Debian package pkg.
func pythonClient(what, module, pkg string) clientSpec {
	return clientSpec{
		what: what,
		require: func(t *testing.T) {
			require(t, what+" for /usr/bin/python3 (Debian: "+pkg+")", python, "-c", "import "+module)
		},
		cmd: func(t *testing.T, tg target, mode string) clientCmd {
			return clientCmd{argv: []string{python, testdataPath(t, "python", "scenario.py"), module}, env: clientEnv(t, tg, mode)}
		},
	}
}

var (
	pymysqlClient = pythonClient("PyMySQL", "pymysql", "python3-pymysql")
	mysqldbClient = pythonClient("mysqlclient", "MySQLdb", "python3-mysqldb")
)

// TestPyMySQL runs the scenario with PyMySQL, with autocommit on and with
// its default (off).
func TestPyMySQL(t *testing.T) { scenarioTest(t, pymysqlClient, "autocommit", "no-autocommit") }

// TestMySQLdb runs the scenario with mysqlclient (MySQLdb, on libmariadb),
// with autocommit on and with its default (off).
func TestMySQLdb(t *testing.T) { scenarioTest(t, mysqldbClient, "autocommit", "no-autocommit") }
