package rewrite

import (
	"testing"

	"github.com/pingcap/tidb/pkg/parser"
)

var (
	benchPassThrough = "SELECT id, name, email, created_at FROM users WHERE id = 42 AND deleted_at IS NULL ORDER BY created_at DESC LIMIT 10"
	benchIncrement   = "UPDATE repos SET downloads = downloads + 1 WHERE id = 12345"
	benchRead        = "SELECT downloads, name FROM repos WHERE id = 12345"
)

// BenchmarkPassThroughDecision is the cost every statement that names no
// ruled table pays: the pre-filter.
func BenchmarkPassThroughDecision(b *testing.B) {
	r := testRewriter(mariadb)
	b.ReportAllocs()
	for b.Loop() {
		if plans, _ := r.Rewrite(benchPassThrough, Session{DB: "app"}); plans != nil {
			b.Fatal("rewritten")
		}
	}
}

// BenchmarkParse is a full TiDB parse of the increment, the reference.
func BenchmarkParse(b *testing.B) {
	p := parser.New()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := p.Parse(benchIncrement, "", ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRewriteIncrement and BenchmarkRewriteRead rewrite ruled
// statements (parse + plan).
func BenchmarkRewriteIncrement(b *testing.B) {
	r := testRewriter(mariadb)
	b.ReportAllocs()
	for b.Loop() {
		if plans, err := r.Rewrite(benchIncrement, Session{DB: "app"}); err != nil || plans[0].Kind() != KindIncrement {
			b.Fatal(err)
		}
	}
}

func BenchmarkRewriteRead(b *testing.B) {
	r := testRewriter(mariadb)
	b.ReportAllocs()
	for b.Loop() {
		if plans, err := r.Rewrite(benchRead, Session{DB: "app"}); err != nil || plans[0].Kind() != KindRead {
			b.Fatal(err)
		}
	}
}
