package importer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/settle/settle/internal/testsupport/camttest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/reporttest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// writeBenchCamt writes a camt.053 of n entries to a file: batches of ten
// payouts, every tenth batch's details for settlements bulk-<i> that
// exist (seedBulk), the others for references no settlement has.
func writeBenchCamt(tb testing.TB, n int) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "bench.xml")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	var entries []camttest.Entry
	for i := 0; i < n; i++ {
		ref := fmt.Sprintf("unknown-%d", i)
		if i%10 == 0 {
			ref = fmt.Sprintf("bulk-%d", i)
		}
		entries = append(entries, camttest.Debit(fmt.Sprintf("E%d", i), ref, int64(100+i)))
	}
	if _, err := w.Write(camttest.Camt053(fmt.Sprintf("bench-%d", n), camttest.Stmt{Account: "acc-1", Opening: 1 << 50, Entries: entries})); err != nil {
		tb.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkStatementImport imports a camt.053 of n entries (one detail
// each, one in ten matching a settlement, the rest unmatched) into a fresh
// database: lines/s and the heap the import adds at its peak.
//
//	go test ./statement/importer/ -run '^$' -bench StatementImport -benchtime 1x
func BenchmarkStatementImport(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			path := writeBenchCamt(b, n)
			var total time.Duration
			var peak uint64
			for b.Loop() {
				b.StopTimer()
				db := dbtest.New(b)
				reporttest.SeedBulk(b, db, n, 0)
				b.StartTimer()
				stop := settletest.HeapPeak()
				start := time.Now()
				res, err := (&StatementImporter{DB: db.Pool, Accounts: []string{"acc-1"}}).ImportFile(context.Background(), path)
				total += time.Since(start)
				peak = max(peak, stop())
				if err != nil {
					b.Fatal(err)
				}
				if res.Lines != int64(n) || res.Matched != int64(n/10) {
					b.Fatalf("%d lines, %d matched", res.Lines, res.Matched)
				}
			}
			b.ReportMetric(float64(b.N)*float64(n)/total.Seconds(), "lines/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		})
	}
}
