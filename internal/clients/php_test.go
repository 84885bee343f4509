package clients

import "testing"

// TestPHP runs the scenario with PHP's mysqlnd drivers: mysqli with text
// queries and with prepared statements, and PDO_MYSQL with native
// (ATTR_EMULATE_PREPARES=false) and emulated prepares.
func TestPHP(t *testing.T) {
	t.Parallel()
	require(t, "PHP with mysqli and pdo_mysql (Debian: php-cli php-mysql)",
		"php", "-r", `exit(extension_loaded("mysqli") && extension_loaded("pdo_mysql") ? 0 : 1);`)
	script := testdataPath(t, "php", "scenario.php")
	scenarioTest(t, "php", []string{"mysqli-text", "mysqli-prepared", "pdo-native", "pdo-emulated"},
		func(t *testing.T, tg target, mode string) clientCmd {
			return clientCmd{argv: []string{"php", script}, env: clientEnv(t, tg, mode)}
		})
}
