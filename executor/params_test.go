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

// TestExecutePacketWith: the slot goes in as one more parameter at its
// place (an unsigned BIGINT), the client's parameters keep their order,
// NULLs and types, and the packet reads back as the server would.
func TestExecutePacketWith(t *testing.T) {
	ep := execParams{
		n:      8,
		null:   []bool{false, true, false, false, false, false, false, true},
		types:  []byte{mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_NULL, 0, mysql.MYSQL_TYPE_VAR_STRING, 0, mysql.MYSQL_TYPE_TINY, 0x80, mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_NULL, 0},
		values: [][]byte{{1, 0, 0, 0, 0, 0, 0, 0}, nil, {2, 'h', 'i'}, {9}, {3, 0, 0, 0, 0, 0, 0, 0}, {4, 0, 0, 0, 0, 0, 0, 0}, {5, 0, 0, 0, 0, 0, 0, 0}, nil},
		long:   make([]bool, 8),
	}
	for _, at := range []int{0, 1, 7, 8} {
		pkt, err := ep.executePacketWith(11, at, 13)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseExecute(pkt, 9, nil, nil)
		if err != nil {
			t.Fatalf("at %d: %v", at, err)
		}
		for j := range 9 {
			i := j
			if j > at {
				i = j - 1
			}
			if j == at {
				if got.null[j] || got.types[2*j] != mysql.MYSQL_TYPE_LONGLONG || got.types[2*j+1] != 0x80 || string(got.values[j]) != string([]byte{13, 0, 0, 0, 0, 0, 0, 0}) {
					t.Fatalf("at %d: slot parameter %v % x % x", at, got.null[j], got.types[2*j:2*j+2], got.values[j])
				}
				continue
			}
			if got.null[j] != ep.null[i] || got.types[2*j] != ep.types[2*i] || got.types[2*j+1] != ep.types[2*i+1] || (!ep.null[i] && string(got.values[j]) != string(ep.values[i])) {
				t.Fatalf("at %d: parameter %d (client's %d) = %v % x % x, want %v % x % x", at, j, i,
					got.null[j], got.types[2*j:2*j+2], got.values[j], ep.null[i], ep.types[2*i:2*i+2], ep.values[i])
			}
		}
	}
	if _, err := ep.executePacketWith(11, 9, 0); err == nil {
		t.Fatal("slot parameter past the end accepted")
	}
}
