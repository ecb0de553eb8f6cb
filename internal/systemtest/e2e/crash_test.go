package e2e

import (
	"context"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/ledger"
)

// TestCrashPoints kills a worker subprocess at each crash point, restarts
// it, redelivers the event, and checks the settlement ends terminal with
// exactly one movement if confirmed (none otherwise) and that the bank paid
// it at most once.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	crashPoints(t, target{name: settle.Connector.Name, beneficiary: "bene-1"})
}

// TestCrashPointsStripe is TestCrashPoints through the Stripe connector
// and the fakebank's stripe profile: a bank that looks payouts up only by
// its own id and replays the original response.
func TestCrashPointsStripe(t *testing.T) {
	t.Parallel()
	crashPoints(t, target{name: "stripe", beneficiary: "ba_1CrashTest"})
}

// TestCrashPointsFundsCheck is TestCrashPoints with --funds-check on and
// the paying account credited with exactly the payout's amount: at every
// crash point the redelivery is accepted (the hold of the first delivery,
// if it committed, is the receipt's, not a second claim on the money), the
// payout is paid once, and the account ends with nothing posted, held or
// available (the checker's ledger rules hold too).
func TestCrashPointsFundsCheck(t *testing.T) {
	t.Parallel()
	crashPoints(t, target{name: settle.Connector.Name, beneficiary: "bene-1", fundsCheck: true})
}

// target is a bank connector the end-to-end tests run against.
type target struct {
	name        string
	beneficiary string
	// fundsCheck runs the workers with --funds-check, the paying account
	// credited with the payout's amount first.
	fundsCheck bool
	// currency is the settlements' (default EUR).
	currency string
	// points are crash points beyond crash.Points (the consent step's).
	points []string
	// start starts the fakebank with faults and returns it with the
	// environment the workers need (its credentials); nil: startBankAs.
	start func(t *testing.T, seed int64, faults fakebank.Faults) (*bank, []string)
	// authorise: each payment waits for its account holder's
	// authorisation, given through the console's links (accountHolder).
	authorise bool
}

func (tg target) bank(t *testing.T, seed int64, faults fakebank.Faults) (*bank, []string) {
	t.Helper()
	if tg.start != nil {
		return tg.start(t, seed, faults)
	}
	return startBankAs(t, seed, faults, tg.name), nil
}

func (tg target) cur() string {
	if tg.currency == "" {
		return "EUR"
	}
	return tg.currency
}

// crashPoints runs the crash points against the bank of tg.
func crashPoints(t *testing.T, tg target) {
	for _, point := range append(append([]string(nil), crash.Points...), tg.points...) {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			// The settle delay makes the confirmation happen in a
			// reconcile_settlement job, after the send (and the consent
			// delay, where there is one, a consent check before it).
			b, env := tg.bank(t, 1, fakebank.Faults{SettleDelayMS: 300, ConsentDelayMS: 300})
			flags := append(workerFlags(b.url), "--bank", tg.name)
			ev := intake.Event{SettlementID: "crash-" + point, AccountID: "acc-1", AmountCents: 4242, Currency: tg.cur(), Beneficiary: tg.beneficiary, EventID: "first"}
			if tg.fundsCheck {
				flags = append(flags, "--funds-check")
			}

			w1 := startWorker(t, "w1", db.URL, append([]string{"SETTLE_CRASH_AT=" + point}, env...), flags...)
			if tg.fundsCheck {
				if _, err := ledger.Credit(context.Background(), db.Pool, ledger.CreditRequest{AccountID: ev.AccountID,
					AmountMinor: ev.AmountCents, Currency: ev.Currency, Ref: "wire-" + point}); err != nil {
					t.Fatal(err)
				}
			}
			var console atomic.Value // the live worker's URL
			console.Store(w1.URL())
			if tg.authorise {
				accountHolder(t, func() string { return console.Load().(string) })
			}
			code, err := post(w1.URL(), ev)
			// The worker may die before answering (intake points): the
			// producer then redelivers.
			if err == nil && code != http.StatusCreated {
				t.Fatalf("first delivery answered %d", code)
			}
			if ps := waitExit(t, w1, 2*time.Minute); !workerproc.KilledBySIGKILL(ps) {
				t.Fatalf("w1 did not die by SIGKILL at %s: %v", point, ps)
			}

			w2 := startWorker(t, "w2", db.URL, env, flags...)
			console.Store(w2.URL())
			ev.EventID = "redelivery"
			code, err = post(w2.URL(), ev)
			if err != nil || (code != http.StatusOK && code != http.StatusCreated) {
				t.Fatalf("redelivery = %d, %v", code, err)
			}
			waitAllTerminal(t, db, 1)
			checkInvariants(t, db, b, map[string]int64{ev.SettlementID: ev.AmountCents})

			var state string
			var movements, receipts int
			if err := db.Pool.QueryRow(context.Background(), `SELECT state,
				(SELECT count(*) FROM ledger_movements), (SELECT count(*) FROM settlement_receipts) FROM settlements`).
				Scan(&state, &movements, &receipts); err != nil {
				t.Fatal(err)
			}
			st := b.Stats()
			if state != "confirmed" || movements != 1 || receipts != 1 || st.MaxPaymentsPerReference != 1 {
				t.Errorf("after crash at %s: state %s, %d movements, %d receipts, bank %+v", point, state, movements, receipts, st)
			}
			if tg.fundsCheck {
				bs, err := ledger.Balances(context.Background(), db.Pool, ev.AccountID)
				if err != nil || len(bs) != 1 || bs[0].Posted != 0 || bs[0].Held != 0 || bs[0].Available != 0 {
					t.Errorf("after crash at %s: balances %+v, %v; want nothing posted, held or available", point, bs, err)
				}
			}

			// The restarted worker also stops gracefully.
			if err := w2.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if ps := waitExit(t, w2, time.Minute); ps.ExitCode() != 0 {
				t.Errorf("w2 exited %d on SIGTERM", ps.ExitCode())
			}
		})
	}
}
