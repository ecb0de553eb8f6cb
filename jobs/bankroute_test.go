package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// TestWrongBankJobRefused: a job whose settlement belongs to another bank
// than its queue's is refused loudly (an error log line, the metric) and
// moved to that bank's queue, and nothing reaches any bank; a job left on
// the queue of before banks had their own is moved to its bank's queue and
// worked there.
func TestWrongBankJobRefused(t *testing.T) {
	t.Parallel()
	logs := &settletest.Buffer{}
	m := metrics.NewUnregistered()
	b := setup(t, fakebank.Faults{}, false, func(d *Deps) {
		d.Resolver.BankName = "settle"
		d.Metrics = m
		d.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	ctx := context.Background()
	// A stripe settlement, which no worker here serves.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, next_check_at, bank)
		VALUES ('other', 'acc', 'ba_1Other', 700, 'USD', 'pending', $1, 'sha256:00', now() + interval '1 hour', 'stripe')`,
		bankclient.KeyFor("other")); err != nil {
		t.Fatal(err)
	}
	// Its jobs, on settle's queue by mistake.
	for _, args := range []river.JobArgs{SendInstructionArgs{SettlementID: "other"}, ReconcileSettlementArgs{SettlementID: "other"}} {
		if _, err := b.client.Insert(ctx, args, &river.InsertOpts{Queue: QueueFor("settle")}); err != nil {
			t.Fatal(err)
		}
	}
	// A settle settlement whose send job waits on the old shared queue.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash, next_check_at, bank)
		VALUES ('legacy', 'acc', 'bene', 800, 'EUR', 'pending', $1, 'sha256:00', now() + interval '1 hour', 'settle')`,
		bankclient.KeyFor("legacy")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Insert(ctx, SendInstructionArgs{SettlementID: "legacy"}, nil); err != nil {
		t.Fatal(err)
	}
	b.start(t)

	settletest.Wait(t, "the wrong-bank jobs moved to stripe's queue and the legacy job worked", func() (bool, string) {
		var moved, left int
		var legacy string
		if err := b.db.Pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE queue = 'bank_stripe' AND state = 'available'),
			count(*) FILTER (WHERE queue = 'bank_settle' AND state <> 'completed' AND args->>'settlement_id' = 'other')
			FROM river_job`).Scan(&moved, &left); err != nil {
			t.Fatal(err)
		}
		if err := b.db.Pool.QueryRow(ctx, "SELECT state FROM settlements WHERE settlement_id = 'legacy'").Scan(&legacy); err != nil {
			t.Fatal(err)
		}
		return moved == 2 && left == 0 && legacy == "confirmed", fmt.Sprintf("moved %d, left %d, legacy %s", moved, left, legacy)
	})

	var state string
	var attempts int
	if err := b.db.Pool.QueryRow(ctx, `SELECT state, (SELECT count(*) FROM bank_attempts WHERE settlement_id = 'other')
		FROM settlements WHERE settlement_id = 'other'`).Scan(&state, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != "pending" || attempts != 0 {
		t.Fatalf("the other bank's settlement: %s with %d bank attempts, want pending with none", state, attempts)
	}
	if st := b.bank.Stats(); st.Payments != 1 {
		t.Fatalf("the bank holds %d payments, want 1 (legacy's alone)", st.Payments)
	}
	if n := counterValue(t, m, "settle"); n != 2 {
		t.Fatalf("settle_wrong_bank_jobs_total{bank=settle} = %d, want 2", n)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"job refused: its settlement belongs to another bank`) ||
		!strings.Contains(logs.String(), `"settlement_bank":"stripe"`) {
		t.Fatalf("no loud refusal in the logs:\n%s", logs)
	}
}

func counterValue(t *testing.T, m *metrics.Metrics, bank string) int {
	t.Helper()
	return int(testutil.ToFloat64(m.WrongBankJobs.WithLabelValues(bank)))
}
