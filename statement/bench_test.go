package statement

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
)

// camtGenerator streams a camt.053 of n entries, each with one TxDtls,
// that balances, without holding it: benchmarks read a million entries
// (a few hundred MB) from it, and no big file is committed.
type camtGenerator struct {
	n, i           int
	opening, close int64
	stage          int
	scratch, buf   []byte
}

func newCamtGenerator(n int) *camtGenerator {
	g := &camtGenerator{n: n, opening: 1_000_000, scratch: make([]byte, 0, 4096)}
	g.close = g.opening
	for i := range n {
		if amt := genAmount(i); i%2 == 0 {
			g.close += amt
		} else {
			g.close -= amt
		}
	}
	return g
}

func genAmount(i int) int64 { return int64(i%100_000) + 1 }

// appendDecimal writes minor units with two decimals.
func appendDecimal(b []byte, v int64) []byte {
	b = strconv.AppendInt(b, v/100, 10)
	b = append(b, '.', byte('0'+v%100/10), byte('0'+v%10))
	return b
}

func appendBal(b []byte, typ string, v int64) []byte {
	ind := "CRDT"
	if v < 0 {
		ind, v = "DBIT", -v
	}
	b = append(b, "      <Bal><Tp><CdOrPrtry><Cd>"+typ+"</Cd></CdOrPrtry></Tp><Amt Ccy=\"EUR\">"...)
	b = appendDecimal(b, v)
	return append(b, "</Amt><CdtDbtInd>"+ind+"</CdtDbtInd><Dt><Dt>2024-03-01</Dt></Dt></Bal>\n"...)
}

func (g *camtGenerator) Read(p []byte) (int, error) {
	for len(g.buf) == 0 {
		b := g.scratch[:0]
		switch {
		case g.stage == 0:
			b = append(b, `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02">
  <BkToCstmrStmt>
    <GrpHdr><MsgId>BENCH</MsgId><CreDtTm>2024-03-01T06:00:00</CreDtTm></GrpHdr>
    <Stmt>
      <Id>BENCH-1</Id>
      <Acct><Id><IBAN>NL91ABNA0417164300</IBAN></Id><Ccy>EUR</Ccy></Acct>
`...)
			b = appendBal(b, "OPBD", g.opening)
			b = appendBal(b, "CLBD", g.close)
			g.stage = 1
		case g.i < g.n:
			i, amt, ind := g.i, genAmount(g.i), "CRDT"
			if i%2 == 1 {
				ind = "DBIT"
			}
			b = append(b, "      <Ntry><NtryRef>"...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, "</NtryRef><Amt Ccy=\"EUR\">"...)
			b = appendDecimal(b, amt)
			b = append(b, "</Amt><CdtDbtInd>"+ind+"</CdtDbtInd><Sts>BOOK</Sts><BookgDt><Dt>2024-03-01</Dt></BookgDt><ValDt><Dt>2024-03-01</Dt></ValDt><AcctSvcrRef>B"...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, "</AcctSvcrRef>\n        <BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>RCDT</Cd><SubFmlyCd>ESCT</SubFmlyCd></Fmly></Domn></BkTxCd>\n        <NtryDtls><TxDtls><Refs><EndToEndId>settle-"...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, "</EndToEndId></Refs><AmtDtls><TxAmt><Amt Ccy=\"EUR\">"...)
			b = appendDecimal(b, amt)
			b = append(b, "</Amt></TxAmt></AmtDtls><RltdPties><Cdtr><Nm>Payee Name</Nm></Cdtr><CdtrAcct><Id><IBAN>DE89370400440532013000</IBAN></Id></CdtrAcct></RltdPties><RmtInf><Ustrd>payout</Ustrd></RmtInf></TxDtls></NtryDtls>\n      </Ntry>\n"...)
			g.i++
		case g.stage == 1:
			b = append(b, "    </Stmt>\n  </BkToCstmrStmt>\n</Document>\n"...)
			g.stage = 2
		default:
			return 0, io.EOF
		}
		g.scratch, g.buf = b, b
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	return n, nil
}

// heapPeak samples the heap and keeps the highest values seen: peak is
// the heap's objects, live and not yet swept (what the process holds; it
// depends on how far the collector lags behind), live what the last
// collection found reachable (what the code retains).
type heapPeak struct {
	sample     []metrics.Sample
	peak, live uint64
}

func newHeapPeak() *heapPeak {
	runtime.GC()
	h := &heapPeak{sample: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}}
	h.measure()
	return h
}

func (h *heapPeak) measure() {
	metrics.Read(h.sample)
	h.peak = max(h.peak, h.sample[0].Value.Uint64())
	h.live = max(h.live, h.sample[1].Value.Uint64())
}

// counter is a Handler that keeps nothing: what a streaming import does
// between database writes.
type counter struct {
	entries  int
	balanced bool
	heap     *heapPeak
}

func (c *counter) Entry(_ *Statement, _ Entry) error {
	c.entries++
	if c.entries%1000 == 0 {
		c.heap.measure()
	}
	return nil
}

func (c *counter) EndStatement(st *Statement) error {
	c.balanced = st.Balanced != nil && *st.Balanced
	return nil
}

// scanCamt is the baseline: a bare encoding/xml token scan that builds
// nothing.
func scanCamt(r io.Reader, heap *heapPeak) (tokens int, err error) {
	d := xml.NewDecoder(r)
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return tokens, nil
		}
		if err != nil {
			return tokens, err
		}
		tokens++
		if tokens%20000 == 0 {
			heap.measure()
		}
	}
}

func parseCamt(n int, heap *heapPeak) (*counter, error) {
	d, err := NewDecoder("bench.xml", newCamtGenerator(n))
	if err != nil {
		return nil, err
	}
	c := &counter{heap: heap}
	err = d.Decode(c)
	heap.measure()
	return c, err
}

// BenchmarkCamt053 streams a generated camt.053 of 10^4 and 10^6 entries
// through Decoder and, as its baseline from the same run, through a bare
// encoding/xml token scan of the same bytes. It reports entries/s, the
// peak and the live heap of each, and the parse/scan speed ratio.
//
//	go test -run '^$' -bench Camt053 -benchtime 1x ./statement/
func BenchmarkCamt053(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			var parseTime, scanTime time.Duration
			var parsePeak, scanPeak, parseLive, scanLive uint64
			for b.Loop() {
				heap := newHeapPeak()
				start := time.Now()
				if _, err := scanCamt(newCamtGenerator(n), heap); err != nil {
					b.Fatal(err)
				}
				scanTime += time.Since(start)
				scanPeak, scanLive = max(scanPeak, heap.peak), max(scanLive, heap.live)

				heap = newHeapPeak()
				start = time.Now()
				c, err := parseCamt(n, heap)
				if err != nil {
					b.Fatal(err)
				}
				parseTime += time.Since(start)
				parsePeak, parseLive = max(parsePeak, heap.peak), max(parseLive, heap.live)
				if c.entries != n || !c.balanced {
					b.Fatalf("parsed %d entries (balanced %v), want %d balanced", c.entries, c.balanced, n)
				}
			}
			runs := float64(b.N) * float64(n)
			b.ReportMetric(runs/parseTime.Seconds(), "entries/s")
			b.ReportMetric(runs/scanTime.Seconds(), "scan-entries/s")
			b.ReportMetric(scanTime.Seconds()/parseTime.Seconds(), "parse/scan")
			b.ReportMetric(float64(parsePeak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(scanPeak)/(1<<20), "scan-peak-heap-MB")
			b.ReportMetric(float64(parseLive)/(1<<20), "live-heap-MB")
			b.ReportMetric(float64(scanLive)/(1<<20), "scan-live-heap-MB")
		})
	}
}

// TestGeneratedCamt checks the benchmark's generator: its file parses,
// entry for entry, and balances.
func TestGeneratedCamt(t *testing.T) {
	t.Parallel()
	c, err := parseCamt(2000, newHeapPeak())
	if err != nil {
		t.Fatal(err)
	}
	if c.entries != 2000 || !c.balanced {
		t.Errorf("%d entries, balanced %v", c.entries, c.balanced)
	}
	tokens, err := scanCamt(newCamtGenerator(2000), newHeapPeak())
	if err != nil || tokens < 2000*40 {
		t.Errorf("scan: %d tokens, %v", tokens, err)
	}
}
