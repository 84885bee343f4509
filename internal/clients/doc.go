// Package clients tests slotproxy with real MySQL client programs instead of
// Go drivers, which forgive packets that other clients reject.
//
// The package has no code of its own: its tests start a throwaway server
// (internal/testdb) and, per test, an in-process proxy whose rewriter rules
// the counters of one schema. Each test then runs one client program twice,
// at the same time: directly against the server on a plain schema, and
// through the proxy on a ruled schema with identical tables. The program
// prints a canonical transcript of what its client library reports for
// every statement (column names and types, values, affected rows, insert
// id, warning count, errors with SQLSTATE and message). The direct run is
// the oracle: the transcripts must be equal, or the test fails with a diff.
//
// The clients are PHP (mysqli and PDO_MYSQL on mysqlnd), MariaDB
// Connector/J 2.x, PyMySQL and mysqlclient (MySQLdb, on libmariadb), node
// mysql2, and the mariadb command-line client; a last test pipelines raw
// protocol packets from Go. The programs live in testdata/, and the
// statements most of them run are in testdata/scenario.tsv.
//
// The clients are required, never skipped: scripts/deps.sh (which runs
// scripts/deps-clients.sh) installs them. Run the tests with
//
//	go test -race ./internal/clients/
package clients
