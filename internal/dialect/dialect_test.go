package dialect

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		version             string
		flavor              Flavor
		major, minor, patch int
	}{
		{"10.11.14-MariaDB-0+deb12u2", MariaDB, 10, 11, 14},
		{"5.5.5-10.11.19-MariaDB-0+deb12u1", MariaDB, 10, 11, 19},
		{"11.4.2-MariaDB-log", MariaDB, 11, 4, 2},
		{"9.7.4-2", MySQL, 9, 7, 4},
		{"8.0.36-0ubuntu0.22.04.1", MySQL, 8, 0, 36},
		{"8.4.0", MySQL, 8, 4, 0},
		{"5.7.44-log", MySQL, 5, 7, 44},
		{"", Unknown, 0, 0, 0},
		{"garbage", Unknown, 0, 0, 0},
		{"8", Unknown, 0, 0, 0},
		{"8.0.x", Unknown, 0, 0, 0},
		{"MariaDB", MariaDB, 0, 0, 0},
	} {
		d := Parse(tc.version)
		if d.Flavor != tc.flavor || d.Major != tc.major || d.Minor != tc.minor || d.Patch != tc.patch || d.Version != tc.version {
			t.Errorf("Parse(%q) = %+v, want %s %d.%d.%d", tc.version, d, tc.flavor, tc.major, tc.minor, tc.patch)
		}
	}
}

// TestDecisions is the table of what differs between the servers.
func TestDecisions(t *testing.T) {
	type row struct {
		rowAlias, returning, executeImmediate bool
		lockWaits                             LockWaitSource
		nowait                                uint16
		isolation                             string
	}
	for _, tc := range []struct {
		version string
		want    row
	}{
		{"10.11.14-MariaDB-0+deb12u2", row{false, true, true, InnoDBLockWaits, 1205, "tx_isolation"}},
		{"11.4.2-MariaDB", row{false, true, true, InnoDBLockWaits, 1205, "transaction_isolation"}},
		{"5.5.5-10.4.34-MariaDB", row{false, false, true, InnoDBLockWaits, 1205, "tx_isolation"}},
		{"10.1.48-MariaDB", row{false, false, false, InnoDBLockWaits, 1205, "tx_isolation"}},
		{"9.7.4-2", row{true, false, false, DataLockWaits, 3572, "transaction_isolation"}},
		{"8.4.3", row{true, false, false, DataLockWaits, 3572, "transaction_isolation"}},
		{"8.0.20", row{true, false, false, DataLockWaits, 3572, "transaction_isolation"}},
		{"8.0.19-log", row{false, false, false, DataLockWaits, 3572, "transaction_isolation"}},
		{"5.7.44", row{false, false, false, InnoDBLockWaits, 3572, "transaction_isolation"}},
		{"garbage", row{false, false, false, DataLockWaits, 3572, "transaction_isolation"}},
	} {
		d := Parse(tc.version)
		got := row{d.UpsertRowAlias(), d.Returning(), d.ExecuteImmediate(), d.LockWaits(), d.LockNowaitError(), d.IsolationVariable()}
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.version, got, tc.want)
		}
	}
}

func TestAtLeast(t *testing.T) {
	d := Parse("8.0.20")
	for _, tc := range []struct {
		a, b, c int
		want    bool
	}{
		{8, 0, 20, true}, {8, 0, 19, true}, {8, 0, 21, false}, {7, 9, 99, true}, {8, 1, 0, false}, {9, 0, 0, false},
	} {
		if got := d.AtLeast(tc.a, tc.b, tc.c); got != tc.want {
			t.Errorf("8.0.20 AtLeast(%d.%d.%d) = %v", tc.a, tc.b, tc.c, got)
		}
	}
}
