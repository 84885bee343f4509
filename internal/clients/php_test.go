package clients

import "testing"

// phpClient is testdata/php/scenario.php: mysqli and PDO_MYSQL on mysqlnd.
var phpClient = clientSpec{
	what: "php",
	require: func(t *testing.T) {
		require(t, "PHP with mysqli and pdo_mysql (Debian: php-cli php-mysql)",
			"php", "-r", `exit(extension_loaded("mysqli") && extension_loaded("pdo_mysql") ? 0 : 1);`)
	},
	cmd: func(t *testing.T, tg target, mode string) clientCmd {
		return clientCmd{argv: []string{"php", testdataPath(t, "php", "scenario.php")}, env: clientEnv(t, tg, mode)}
	},
}

// TestPHP runs the scenario with PHP's mysqlnd drivers: mysqli with text
// queries and with prepared statements, and PDO_MYSQL with native
// (ATTR_EMULATE_PREPARES=false) and emulated prepares.
func TestPHP(t *testing.T) {
	scenarioTest(t, phpClient, "mysqli-text", "mysqli-prepared", "pdo-native", "pdo-emulated")
}
