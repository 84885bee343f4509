// Package dialect is the one place that decides what differs between the
// backend servers slotproxy talks to: MariaDB and MySQL, by version.
//
// A Dialect is derived from the server version string of the backend's
// greeting (or SELECT VERSION(), which is the same string) with Parse.
// Everything that generates SQL or reads server tables and must differ per
// server asks a Dialect instead of looking at the version string itself:
// the rewriter (upsert form), roll-up (lock errors) and advise (lock-wait
// sources).
//
// Tested servers: MariaDB 10.11 and MySQL 9.7 (see the README's table).
// Other versions are decided from the servers' documentation.
package dialect

import (
	"strconv"
	"strings"
)

// Flavor is the server family.
type Flavor string

const (
	// Unknown is the flavour of a version string that names neither
	// family and does not parse as MySQL's "X.Y.Z".
	Unknown Flavor = ""
	// MariaDB servers announce "X.Y.Z-MariaDB…", possibly after a
	// "5.5.5-" prefix (MariaDB 10 and 11 on the wire).
	MariaDB Flavor = "MariaDB"
	// MySQL servers (Oracle's, Percona's) announce "X.Y.Z…".
	MySQL Flavor = "MySQL"
)

// Dialect describes one backend server. The zero value is an unknown
// server; its answers are the conservative ones (the forms both families
// accept).
type Dialect struct {
	// Flavor is the server family.
	Flavor Flavor
	// Version is the version string Parse was given.
	Version string
	// Major, Minor and Patch are the numeric version (for MariaDB without
	// the "5.5.5-" prefix); zero when it did not parse.
	Major, Minor, Patch int
}

// Parse derives the Dialect of a server from its version string, e.g.
// "10.11.14-MariaDB-0+deb12u2", "5.5.5-10.11.6-MariaDB" or "9.7.4-2". A
// version string without "MariaDB" whose numeric part parses is MySQL;
// anything else is Unknown.
func Parse(serverVersion string) Dialect {
	d := Dialect{Version: serverVersion}
	rest := serverVersion
	if strings.Contains(strings.ToLower(serverVersion), "mariadb") {
		d.Flavor = MariaDB
		rest = strings.TrimPrefix(rest, "5.5.5-")
	}
	var v [3]int
	for i := range v {
		n := 0
		for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
			n++
		}
		if n == 0 {
			return d
		}
		v[i], _ = strconv.Atoi(rest[:n])
		rest = rest[n:]
		if i < 2 {
			if !strings.HasPrefix(rest, ".") {
				return d
			}
			rest = rest[1:]
		}
	}
	d.Major, d.Minor, d.Patch = v[0], v[1], v[2]
	if d.Flavor == Unknown {
		d.Flavor = MySQL
	}
	return d
}

// String is the version string and what Parse made of it.
func (d Dialect) String() string {
	if d.Flavor == Unknown {
		return "unknown server " + strconv.Quote(d.Version)
	}
	return string(d.Flavor) + " " + strconv.Itoa(d.Major) + "." + strconv.Itoa(d.Minor) + "." + strconv.Itoa(d.Patch)
}

// IsMariaDB reports whether the server is MariaDB.
func (d Dialect) IsMariaDB() bool { return d.Flavor == MariaDB }

// IsMySQL reports whether the server is MySQL.
func (d Dialect) IsMySQL() bool { return d.Flavor == MySQL }

// AtLeast reports whether the numeric version is major.minor.patch or later.
func (d Dialect) AtLeast(major, minor, patch int) bool {
	switch {
	case d.Major != major:
		return d.Major > major
	case d.Minor != minor:
		return d.Minor > minor
	default:
		return d.Patch >= patch
	}
}

// UpsertRowAlias reports whether INSERT … ON DUPLICATE KEY UPDATE should
// name the new row with a row alias (INSERT … VALUES (…) AS `_new` ON
// DUPLICATE KEY UPDATE `count` = `t`.`count` + `_new`.`count`) instead of
// the VALUES() function: true for MySQL 8.0.20 and later, which deprecate
// VALUES() there (warning 1287 on every upsert). MariaDB has no row alias
// (VALUES() is its only form) and an Unknown server gets VALUES(), which
// every version of both accepts, warning or not.
func (d Dialect) UpsertRowAlias() bool {
	return d.Flavor == MySQL && d.AtLeast(8, 0, 20)
}

// Returning reports whether INSERT, REPLACE and DELETE accept a RETURNING
// clause: MariaDB 10.5 and later. MySQL has none.
func (d Dialect) Returning() bool {
	return d.Flavor == MariaDB && d.AtLeast(10, 5, 0)
}

// ExecuteImmediate reports whether EXECUTE IMMEDIATE exists: MariaDB 10.2
// and later. MySQL has none.
func (d Dialect) ExecuteImmediate() bool {
	return d.Flavor == MariaDB && d.AtLeast(10, 2, 0)
}

// RowAlias reports whether INSERT … VALUES (…) AS alias exists: MySQL
// 8.0.19 and later. MariaDB has none; of an Unknown server it is not
// known (false).
func (d Dialect) RowAlias() bool {
	return d.Flavor == MySQL && d.AtLeast(8, 0, 19)
}

// IsolationVariable is the system variable holding the session's
// transaction isolation level: transaction_isolation on MySQL (8.0 removed
// tx_isolation) and on MariaDB 11.1 and later; tx_isolation on older
// MariaDB, which has only that name. An Unknown server is taken for MySQL,
// as elsewhere.
func (d Dialect) IsolationVariable() string {
	if d.Flavor == MariaDB && !d.AtLeast(11, 1, 0) {
		return "tx_isolation"
	}
	return "transaction_isolation"
}

// TableStatement reports whether the TABLE t statement exists: MySQL
// 8.0.19 and later. MariaDB has none (a syntax error).
func (d Dialect) TableStatement() bool {
	return d.Flavor == MySQL && d.AtLeast(8, 0, 19)
}

// LockWaitSource names where the server lists the InnoDB lock waits going
// on.
type LockWaitSource int

const (
	// InnoDBLockWaits is information_schema.INNODB_LOCK_WAITS (with
	// INNODB_LOCKS where it exists): MariaDB, MySQL before 8.0.1.
	InnoDBLockWaits LockWaitSource = iota
	// DataLockWaits is performance_schema.data_lock_waits with
	// data_locks: MySQL 8.0.1 and later, which removed the former.
	DataLockWaits
)

// LockWaits returns where the server lists lock waits. An Unknown server
// is taken for MySQL 8 or later (a server that does not announce MariaDB).
func (d Dialect) LockWaits() LockWaitSource {
	switch {
	case d.Flavor == MariaDB:
		return InnoDBLockWaits
	case d.Flavor == MySQL && !d.AtLeast(8, 0, 1):
		return InnoDBLockWaits
	default:
		return DataLockWaits
	}
}

// Error codes of a lock that could not be taken at once.
const (
	// ErrLockNowait is MySQL's ER_LOCK_NOWAIT, for FOR UPDATE NOWAIT.
	ErrLockNowait = 3572
	// ErrLockWaitTimeout is ER_LOCK_WAIT_TIMEOUT; MariaDB also reports it
	// for FOR UPDATE NOWAIT.
	ErrLockWaitTimeout = 1205
)

// LockNowaitError returns the error code with which SELECT … FOR UPDATE
// NOWAIT reports a row locked by another transaction: 1205 on MariaDB,
// 3572 on MySQL (and an Unknown server).
func (d Dialect) LockNowaitError() uint16 {
	if d.Flavor == MariaDB {
		return ErrLockWaitTimeout
	}
	return ErrLockNowait
}

// AnswersShortNoReplyCommand reports whether the server answers, with ERR
// 1835 (malformed packet), a COM_STMT_CLOSE or COM_STMT_SEND_LONG_DATA too
// short to name a statement (and a parameter), commands it otherwise never
// answers: MySQL does, MariaDB does not. cmd is the command byte and
// length the payload's length, command byte included.
func (d Dialect) AnswersShortNoReplyCommand(cmd byte, length int) bool {
	if d.Flavor != MySQL {
		return false
	}
	switch cmd {
	case 0x19: // COM_STMT_CLOSE: command, statement id (4)
		return length < 5
	case 0x18: // COM_STMT_SEND_LONG_DATA: command, statement id (4), parameter (2)
		return length < 7
	}
	return false
}
