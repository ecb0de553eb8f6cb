package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie" // the obie connector, for --bank obie
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/obietest"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/crash"
	"github.com/settle/settle/internal/psu"
	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/reconcile"
	"github.com/settle/settle/statement/importer"
)

// obieTokenKey is the workers' token key (obie.EnvTokenKey).
const obieTokenKey = "ZTJlLXRva2VuLWtleS1vZi10aGlydHktdHdvLWJ5dGU="

// obieBeneficiary is a creditor account the obie connector can route.
const obieBeneficiary = "SortCodeAccountNumber:08080021325698:ACME Ltd"

// obieTarget is the UK Open Banking connector against the fakebank's obie
// profile, which verifies every request's x-jws-signature with the
// workers' key.
var obieTarget = target{name: "obie", beneficiary: obieBeneficiary, currency: "GBP", points: crash.ConsentPoints, start: startOBIE, authorise: true}

// accountHolder opens, for the rest of the test, the authorisation links
// the console of the worker at console() lists, as the account holders
// who were sent them do (the fakebank's page decides by itself).
func accountHolder(t *testing.T, console func() string) *psu.Holder {
	t.Helper()
	h := &psu.Holder{Console: console, Again: time.Second}
	t.Cleanup(psu.Start(h))
	return h
}

// startOBIE starts the fakebank's obie profile verifying signatures with a
// fresh key, and returns the workers' environment holding that key.
func startOBIE(t *testing.T, seed int64, faults fakebank.Faults) (*bank, []string) {
	t.Helper()
	key, path, _ := obietest.SigningKey(t)
	b := startBankOpts(t, fakebank.Options{Seed: seed, Faults: faults, Profile: "obie", JWSPublicKey: &key.PublicKey}, "obie")
	return b, []string{bankclient.EnvSigningKeyFile + "=" + path, bankclient.EnvToken + "=obie-e2e-token", obie.EnvTokenKey + "=" + obieTokenKey}
}

// TestCrashPointsOBIE is TestCrashPoints through the UK Open Banking
// connector, the consent step's own crash points included: a consent and a
// payment, each under its own key, a bank that looks payments up only by
// its own id and replays the current resource.
func TestCrashPointsOBIE(t *testing.T) {
	t.Parallel()
	crashPoints(t, obieTarget)
}

// TestKeyTTLOBIEStatementsResolve: the answer to the payment is lost and
// the first check comes after --bank-key-ttl, when a replay could pay
// twice. Open Banking can be asked neither by key nor by reference and has
// no list: no safe question is left, so the settlement is flagged, never
// resent. The bank's statement, imported, then resolves it: the payment it
// made is booked once. A payment that never reached the bank is not on the
// statement: it stays flagged.
func TestKeyTTLOBIEStatementsResolve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults fakebank.Faults
		paid   bool
	}{
		{"lost answer", fakebank.Faults{DropResponseRate: 1}, true},
		{"never arrived", fakebank.Faults{FailBeforeRate: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			// The consent is created without faults and authorised a
			// second later; the payment's faults are set once the consent
			// is stored, so they hit the payment alone.
			tc.faults.KeyTTLMS, tc.faults.ConsentDelayMS = 1500, 1000
			b, env := startOBIE(t, 5, fakebank.Faults{KeyTTLMS: 1500, ConsentDelayMS: 1000})
			flags := append(workerFlags(b.url), "--bank", "obie", "--bank-attempts", "1",
				"--bank-key-ttl", "1s", "--check-interval", "3s", "--max-check-interval", "3s")
			w := startWorker(t, "w", db.URL, env, flags...)
			accountHolder(t, w.URL)
			ev := intake.Event{SettlementID: "ttl-obie-1", AccountID: "acc", AmountCents: 777, Currency: "GBP", Beneficiary: obieBeneficiary}
			if code, err := post(w.URL(), ev); err != nil || code != http.StatusCreated {
				t.Fatalf("post = %d, %v", code, err)
			}
			ctx := context.Background()
			waitFor(t, "the consent stored", func() bool {
				var consent *string
				_ = db.Pool.QueryRow(ctx, `SELECT bank_consent_id FROM settlements WHERE settlement_id = $1`, ev.SettlementID).Scan(&consent)
				return consent != nil
			})
			if err := b.SetFaults(tc.faults); err != nil {
				t.Fatal(err)
			}
			var state, reason string
			waitFor(t, "the settlement flagged", func() bool {
				_ = db.Pool.QueryRow(ctx, `SELECT state, coalesce(investigation_reason, '') FROM settlements WHERE settlement_id = $1`,
					ev.SettlementID).Scan(&state, &reason)
				return reason != ""
			})
			if state != "uncertain" || reason != reconcile.ReasonNoSafeQuestion {
				t.Errorf("state %s flagged %q, want uncertain flagged %s", state, reason, reconcile.ReasonNoSafeQuestion)
			}
			var posts int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM bank_attempts WHERE settlement_id = $1 AND op IN ('send', 'replay')`, ev.SettlementID).Scan(&posts); err != nil {
				t.Fatal(err)
			}
			if st := b.Stats(); posts != 1 || st.MaxExecutionsPerKey > 1 || st.MaxPaymentsPerReference > 1 || b.posts.Load() != 1 {
				t.Errorf("%d payment requests recorded, %d received, bank %+v: want one", posts, b.posts.Load(), st)
			}

			// The operator imports the bank's statement of the day.
			data, err := b.RenderStatement(time.Now().UTC(), fakebank.FormatCamt053, 0)
			if tc.paid && err != nil {
				t.Fatal(err)
			}
			if err == nil {
				im := &importer.StatementImporter{DB: db.Pool, Returns: &reconcile.Resolver{DB: db.Pool}, Accounts: []string{fakebank.OBIEDebtorAccount}}
				if _, err := im.Import(ctx, "camt053.xml", bytes.NewReader(data)); err != nil {
					t.Fatal(err)
				}
			}
			_ = db.Pool.QueryRow(ctx, `SELECT state, coalesce(investigation_reason, '') FROM settlements WHERE settlement_id = $1`,
				ev.SettlementID).Scan(&state, &reason)
			if tc.paid && (state != "confirmed" || reason != "") {
				t.Errorf("after the statement: %s flagged %q, want confirmed", state, reason)
			}
			if !tc.paid && (state != "uncertain" || reason != reconcile.ReasonNoSafeQuestion) {
				t.Errorf("after the statement: %s flagged %q, want still uncertain, flagged", state, reason)
			}
			checkInvariants(t, db, b, map[string]int64{ev.SettlementID: ev.AmountCents})
		})
	}
}

// TestReconcileBankOBIENeedsStatements: Open Banking has no list of
// payments, so `settle reconcile bank --bank obie` says so in one line and
// exits 2; with --statements it works from the imported statements (here:
// a settlement paid, the bank's camt.053 imported, the report clean).
func TestReconcileBankOBIENeedsStatements(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	bin := bintest.Build(t)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, append([]string{"reconcile", "bank", "--bank", "obie"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, stdout.String(), stderr.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), stdout.String(), stderr.String()
		}
		t.Fatal(err)
		return 0, "", ""
	}
	code, _, stderr := run()
	if code != 2 {
		t.Fatalf("reconcile bank --bank obie: exit %d, want 2", code)
	}
	if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; lines != 1 || !strings.Contains(stderr, "--statements") {
		t.Errorf("stderr %q: want one line naming --statements", stderr)
	}

	b, env := startOBIE(t, 9, fakebank.Faults{})
	w := startWorker(t, "w", db.URL, env, append(workerFlags(b.url), "--bank", "obie")...)
	accountHolder(t, w.URL)
	ev := intake.Event{SettlementID: "rec-obie-1", AccountID: "acc", AmountCents: 1999, Currency: "GBP", Beneficiary: obieBeneficiary}
	if code, err := post(w.URL(), ev); err != nil || code != http.StatusCreated {
		t.Fatalf("post = %d, %v", code, err)
	}
	waitAllTerminal(t, db, 1)
	data, err := b.RenderStatement(time.Now().UTC(), fakebank.FormatCamt053, 0)
	if err != nil {
		t.Fatal(err)
	}
	im := &importer.StatementImporter{DB: db.Pool, Returns: &reconcile.Resolver{DB: db.Pool}, Accounts: []string{fakebank.OBIEDebtorAccount}}
	if _, err := im.Import(context.Background(), "camt053.xml", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run("--statements", "--json")
	if code != 0 || !strings.Contains(stdout, `"matched":1`) {
		t.Errorf("reconcile bank --bank obie --statements: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
