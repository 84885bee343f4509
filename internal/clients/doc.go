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
// The ORM tests (orm_test.go) are different: each runs one ORM's own
// counter increments (Django, SQLAlchemy, ActiveRecord, Laravel's query
// builder and Eloquent, Sequelize, node mysql2 execute(), JDBC prepared
// statements; programs in testdata/orm/) from several concurrent workers
// through a proxy that rules repos.downloads and repos.stars, then reads
// the totals back through the ORM. There is no direct run: the totals must
// equal the seeded values plus the increments that match their rows, and
// the server must have received slotted upserts, not UPDATEs of the base
// row. Wire taps on both sides of the proxy (wiretap_test.go) record what
// the ORM sent and what the server got; the tests log every statement
// shape with its fate. BenchmarkORMHotCounter (make bench-orm) measures the
// hot counter through Django and Sequelize, directly and through the
// proxy.
//
// The clients are required, never skipped: scripts/deps.sh (which runs
// scripts/deps-clients.sh) installs them. Run the tests with
//
//	go test -race ./internal/clients/
package clients
