package executor

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestCanonicalInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"0", true}, {"1", true}, {"-1", true}, {"42", true},
		{"9223372036854775807", true}, {"-9223372036854775808", true}, {"18446744073709551615", true},
		{"", false}, {"-", false}, {"-0", false}, {"01", false}, {"00", false}, {"+1", false},
		{" 1", false}, {"1 ", false}, {"1abc", false}, {"1e0", false}, {"0x31", false}, {"1.0", false},
		{"18446744073709551616", false}, {"-9223372036854775809", false}, {"1\x00", false},
	} {
		if got := canonicalInt([]byte(tc.in)); got != tc.want {
			t.Errorf("canonicalInt(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestIntParamKeptLongData: a key sent as long data is usable when the proxy
// kept it, and is inlined when the proxy runs its own statement with it.
func TestIntParamKeptLongData(t *testing.T) {
	ep := execParams{
		n:        2,
		null:     []bool{false, false},
		types:    []byte{mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_LONGLONG, 0},
		values:   [][]byte{{5, 0, 0, 0, 0, 0, 0, 0}, nil},
		long:     []bool{false, true},
		longVals: [][]byte{nil, []byte("7")},
	}
	if v, ok := ep.intParam(1); !ok || v != "7" {
		t.Fatalf("intParam(1) = %q, %v; want 7", v, ok)
	}
	pkt, err := ep.executePacket(9, []int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{mysql.COM_STMT_EXECUTE, 9, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1,
		mysql.MYSQL_TYPE_STRING, 0, mysql.MYSQL_TYPE_LONGLONG, 0, 1, '7', 5, 0, 0, 0, 0, 0, 0, 0}
	if string(pkt) != string(want) {
		t.Fatalf("executePacket = % x\nwant             % x", pkt, want)
	}
	ep.longVals[1] = nil // too long to keep
	if _, ok := ep.intParam(1); ok {
		t.Fatal("intParam of long data not kept")
	}
	if _, err := ep.executePacket(9, []int{1}); err == nil {
		t.Fatal("executePacket with long data not kept")
	}
}
