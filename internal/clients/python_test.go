package clients

import "testing"

// python is Debian's interpreter, for which python3-pymysql and
// python3-mysqldb are installed (a pyenv python3 earlier in PATH has
// neither).
const python = "/usr/bin/python3"

// pythonTest runs testdata/python/scenario.py with driver in both
// autocommit modes.
func pythonTest(t *testing.T, driver, module, pkg string) {
	t.Parallel()
	require(t, driver+" for /usr/bin/python3 (Debian: "+pkg+")", python, "-c", "import "+module)
	script := testdataPath(t, "python", "scenario.py")
	scenarioTest(t, driver, []string{"autocommit", "no-autocommit"},
		func(t *testing.T, tg target, mode string) clientCmd {
			return clientCmd{argv: []string{python, script, module}, env: clientEnv(t, tg, mode)}
		})
}

// TestPyMySQL runs the scenario with PyMySQL, with autocommit on and with
// its default (off).
func TestPyMySQL(t *testing.T) { pythonTest(t, "PyMySQL", "pymysql", "python3-pymysql") }

// TestMySQLdb runs the scenario with mysqlclient (MySQLdb, on libmariadb),
// with autocommit on and with its default (off).
func TestMySQLdb(t *testing.T) { pythonTest(t, "mysqlclient", "MySQLdb", "python3-mysqldb") }
