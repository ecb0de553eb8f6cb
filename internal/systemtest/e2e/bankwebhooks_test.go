package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/settletest"
)

// The bank's pushes end to end (issue 33 part 2): a real worker process,
// the fakebank pushing each status change to the worker's
// /v1/bank/webhooks/{connector}, signed as its profile's bank signs.

// TestBankWebhooksResolveWithoutPolling: with the worker's status checks an
// hour apart, nothing but the bank's pushes can settle anything within the
// test; every settlement ends confirmed or returned (lost answers
// included: their payment's pushes name them), each exactly once, and
// forged or replayed pushes change nothing.
func TestBankWebhooksResolveWithoutPolling(t *testing.T) {
	t.Parallel()
	for _, tg := range []target{
		{name: settle.Connector.Name, beneficiary: "bene-%04d"},
		{name: "stripe", beneficiary: "ba_wh%04d"},
	} {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			bankWebhooks(t, tg, fakebank.Faults{
				DropResponseRate: 0.15, LatencyMaxMS: 10, SettleDelayMS: 200,
				ReturnRate: 0.2, ReturnAfterMS: 300,
				WebhookDuplicateRate: 0.3, WebhookDelayMaxMS: 200,
			}, "--check-interval", "1h", "--max-check-interval", "1h")
		})
	}
}

// TestBankWebhooksLostAndRepeated: a third of the pushes never come and a
// third come twice, late and out of order; polling (at its usual pace)
// settles what the lost pushes did not, and nothing is paid or booked
// twice.
func TestBankWebhooksLostAndRepeated(t *testing.T) {
	t.Parallel()
	bankWebhooks(t, target{name: settle.Connector.Name, beneficiary: "bene-%04d"}, fakebank.Faults{
		DropResponseRate: 0.15, StatusErrorRate: 0.1, LatencyMaxMS: 10, SettleDelayMS: 200,
		ReturnRate: 0.2, ReturnAfterMS: 300,
		WebhookLossRate: 0.3, WebhookDuplicateRate: 0.3, WebhookDelayMaxMS: 500,
	})
}

// bankWebhooks submits settlements to a worker whose bank pushes its status
// changes, waits until every one is terminal and every payment the bank
// returned is booked returned, and checks the invariants.
func bankWebhooks(t *testing.T, tg target, faults fakebank.Faults, extra ...string) {
	if testing.Short() {
		t.Skip("multi-process end-to-end test")
	}
	const n = 24
	db := dbtest.New(t)
	secret := "whsec_e2e_" + tg.name
	b := startBankOpts(t, fakebank.Options{Seed: 33, Faults: faults, Profile: tg.name}, tg.name)
	flags := append(append(workerFlags(b.url), "--bank", tg.name), extra...)
	w := startWorker(t, "w0", db.URL, []string{bankclient.EnvWebhookSecret + "=" + secret}, flags...)
	hookURL := w.URL() + "/v1/bank/webhooks/" + tg.name
	if err := b.SetWebhook(hookURL, secret); err != nil {
		t.Fatal(err)
	}

	// Forged and replayed pushes are refused and change nothing.
	forged := []byte(`{"type":"payment.settled","payment":{"id":"pay_000000000001","reference":"wh-0000"}}`)
	header := settle.SignatureHeader
	if tg.name == "stripe" {
		header = stripe.SignatureHeader
	}
	for what, sig := range map[string]string{
		"forged":   bankhttp.SignHMAC(forged, "not-the-secret", time.Now()),
		"replayed": bankhttp.SignHMAC(forged, secret, time.Now().Add(-time.Hour)),
	} {
		req, _ := http.NewRequest(http.MethodPost, hookURL, bytes.NewReader(forged))
		req.Header.Set(header, sig)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a %s push answered %d, want 400", what, resp.StatusCode)
		}
	}

	want := make(map[string]int64, n)
	start := time.Now()
	for i := range n {
		ev := intake.Event{
			SettlementID: fmt.Sprintf("wh-%04d", i), AccountID: fmt.Sprintf("acc-%d", i%5),
			AmountCents: int64(1000 + i), Currency: "EUR", Beneficiary: fmt.Sprintf(tg.beneficiary, i),
		}
		want[ev.SettlementID] = ev.AmountCents
		if st, err := post(w.URL(), ev); err != nil || st != http.StatusCreated {
			t.Fatalf("%s: %d %v", ev.SettlementID, st, err)
		}
	}
	books := b.books(t)
	ctx := context.Background()
	settled := func(what string) {
		t.Helper()
		settletest.Wait(t, what, func() (bool, string) {
			var terminal, confirmedBack int
			ps, err := bankclient.AllPayments(ctx, books)
			if err != nil {
				return false, err.Error()
			}
			back := backAtBank(ps)
			// Returns come ReturnAfterMS after settlement: wait until every
			// payment is past the time its return would have come.
			window := time.Duration(faults.SettleDelayMS+faults.ReturnAfterMS+faults.WebhookDelayMaxMS)*time.Millisecond + time.Second
			young := 0
			for _, p := range ps {
				if time.Since(p.CreatedAt) < window {
					young++
				}
			}
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('confirmed', 'failed', 'returned')),
				count(*) FILTER (WHERE state = 'confirmed' AND coalesce(bank_reference, settlement_id) = ANY($1))
				FROM settlements`, back).Scan(&terminal, &confirmedBack); err != nil {
				t.Fatal(err)
			}
			state := fmt.Sprintf("%d of %d terminal, %d returns at the bank not booked yet, %d payments younger than %s", terminal, n, confirmedBack, young, window)
			rows, err := db.Pool.Query(ctx, `SELECT settlement_id || ' ' || state || ' ' || coalesce(investigation_reason, '') || ' next ' || coalesce(next_check_at::text, '-')
				FROM settlements WHERE state NOT IN ('confirmed', 'failed', 'returned') ORDER BY settlement_id LIMIT 5`)
			if err == nil {
				if open, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil && len(open) > 0 {
					state += "; open: " + strings.Join(open, ", ")
					id, _, _ := strings.Cut(open[0], " ")
					rows, err := db.Pool.Query(ctx, `SELECT id || ' ' || state || ' ' || args::text || ' ' || coalesce(unique_key::text, '-') || ' ' || coalesce(errors::text, '')
						FROM river_job WHERE args->>'settlement_id' = $1 ORDER BY id`, id)
					if err == nil {
						if js, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
							state += "; its jobs: " + strings.Join(js, " | ")
						}
					}
				}
			}
			return terminal == n && confirmedBack == 0 && young == 0, state
		})
	}
	settled("every settlement terminal and every return booked")
	// A few more returns, made now by the bank's back office: only their
	// push can book them before the next scheduled check.
	rows, err := db.Pool.Query(ctx, `SELECT bank_payment_id FROM settlements WHERE state = 'confirmed' ORDER BY settlement_id LIMIT 2`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := b.Return(id, ""); err != nil {
			t.Fatal(err)
		}
	}
	settled("the back office's returns booked")
	var returned int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlements WHERE state = 'returned'`).Scan(&returned); err != nil {
		t.Fatal(err)
	}
	st := b.WebhookStats()
	t.Logf("%d settlements terminal after %s, %d returned; the bank pushed %d changes (%d lost, %d twice) in %d attempts",
		n, time.Since(start).Round(time.Millisecond), returned, st.Events, st.Lost, st.Duplicated, st.Attempts)
	if returned < len(ids) || len(ids) == 0 || st.Delivered == 0 {
		t.Errorf("want returns booked and pushes delivered: %d returned, %+v", returned, st)
	}
	if faults.WebhookLossRate > 0 && st.Lost == 0 {
		t.Errorf("no push was lost at a loss rate of %g: %+v", faults.WebhookLossRate, st)
	}
	checkInvariants(t, db, b, want)
}

// backAtBank returns the references of the payments that came back after
// they settled: returned, or (Stripe) a paid payout reported failed with
// the return's reason.
func backAtBank(ps []bankclient.Payment) []string {
	refs := []string{}
	for _, p := range ps {
		if p.Status == bankclient.StatusReturned || (p.Status == bankclient.StatusFailed && bytes.Contains([]byte(p.FailureReason), []byte("returned"))) {
			refs = append(refs, p.Reference)
		}
	}
	return refs
}
