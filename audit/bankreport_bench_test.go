package audit

import (
	"context"
	"testing"

	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// countSink counts what a report streams and keeps nothing.
type countSink struct {
	counts BankCounts
	breaks map[Class]int64
}

func (s *countSink) Counts(c BankCounts) error {
	s.counts, s.breaks = c, map[Class]int64{}
	return nil
}

func (s *countSink) Break(b Break) error {
	s.breaks[b.Class]++
	return nil
}

// BenchmarkBankReport reconciles n settlements (one in ten still sent, the
// rest confirmed with their movements) against a computed statement of n
// settled payments, and reports the peak heap in use above the baseline:
//
//	go test ./audit/ -run XXX -bench BankReport -benchtime 1x
//
// The peak must not grow with n: compare n=10k with n=100k.
func BenchmarkBankReport(b *testing.B) {
	for _, bc := range []struct {
		name string
		n    int
	}{{"10k", 10_000}, {"100k", 100_000}} {
		b.Run(bc.name, func(b *testing.B) {
			db := dbtest.New(b)
			reporttest.SeedBulk(b, db, bc.n, 10)
			if _, err := db.Pool.Exec(context.Background(), "VACUUM ANALYZE settlements, ledger_movements"); err != nil {
				b.Fatal(err)
			}
			bank := &genBank{n: bc.n}
			var peak uint64
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var sink countSink
				stop := settletest.HeapPeak()
				_, err := (&BankReporter{DB: db.Pool, Bank: bank}).Run(context.Background(), &sink)
				peak = max(peak, stop())
				if err != nil {
					b.Fatal(err)
				}
				open := int64(bc.n+9) / 10
				if sink.counts.ByClass[ClassMatched] != int64(bc.n)-open || sink.breaks[ClassUnresolved] != open || sink.counts.Discrepancies() != 0 {
					b.Fatalf("counts %+v, streamed %+v", sink.counts, sink.breaks)
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(bc.n), "settlements")
		})
	}
}
