package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

// cleanSeed is a seed of the default range whose run breaks no invariant
// and ends with confirmed and failed settlements and a recorded conflict.
const cleanSeed = 3

// TestCheckerCatchesPlantedViolations proves the checker can fail: each
// case replays a clean seed, plants one violation in the database or the
// bank's books, and expects the checker to name it.
func TestCheckerCatchesPlantedViolations(t *testing.T) {
	t.Parallel()
	type target struct{ confirmed, failed, conflicted string }
	for _, tc := range []struct {
		name  string
		plant func(ctx context.Context, t *testing.T, r *run, tx pgx.Tx, g target)
		want  string
	}{
		{"second payment at the bank", func(_ context.Context, _ *testing.T, r *run, _ pgx.Tx, g target) {
			ev := r.first[g.confirmed]
			r.bank.plant(bankclient.KeyFor(g.confirmed), bankclient.PaymentRequest{AmountCents: ev.AmountCents, Currency: ev.Currency,
				DebtorAccount: ev.AccountID, CreditorAccount: ev.Beneficiary, Reference: g.confirmed}, bankclient.StatusSettled)
		}, "PAID 2 TIMES"},
		{"bank settled a failed settlement", func(_ context.Context, _ *testing.T, r *run, _ pgx.Tx, g target) {
			ev := r.first[g.failed]
			r.bank.plant(bankclient.KeyFor(g.failed), bankclient.PaymentRequest{AmountCents: ev.AmountCents, Currency: ev.Currency,
				DebtorAccount: ev.AccountID, CreditorAccount: ev.Beneficiary, Reference: g.failed}, bankclient.StatusSettled)
		}, "failed but the bank settled"},
		{"movement for a failed settlement", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency)
				SELECT settlement_id, account_id, amount_cents, currency FROM settlements WHERE settlement_id = $1`, g.failed)
		}, "failed with 1 ledger movement"},
		{"movement deleted", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `SET LOCAL session_replication_role = replica`)
			exec(ctx, t, tx, `DELETE FROM ledger_movements WHERE settlement_id = $1`, g.confirmed)
		}, "confirmed with 0 ledger movement(s)"},
		{"movement amount changed", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `SET LOCAL session_replication_role = replica`)
			exec(ctx, t, tx, `UPDATE ledger_movements SET amount_cents = amount_cents + 1 WHERE settlement_id = $1`, g.confirmed)
		}, "differs from the settlement's"},
		{"reversal of a confirmed settlement", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
				SELECT settlement_id, 'reversal', account_id, amount_cents, currency FROM settlements WHERE settlement_id = $1`, g.confirmed)
		}, "confirmed with 2 ledger movement(s) (payout+reversal), want payout"},
		{"settlement payload changed", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `UPDATE settlements SET beneficiary = beneficiary || '-x' WHERE settlement_id = $1`, g.failed)
		}, "first payload was"},
		{"confirmed without a settled payment", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
				VALUES ($1, 'failed', 'confirmed', 'planted', now())`, g.failed)
			exec(ctx, t, tx, `UPDATE settlements SET state = 'confirmed' WHERE settlement_id = $1`, g.failed)
			exec(ctx, t, tx, `INSERT INTO ledger_movements (settlement_id, account_id, amount_cents, currency)
				SELECT settlement_id, account_id, amount_cents, currency FROM settlements WHERE settlement_id = $1`, g.failed)
		}, "confirmed but the bank holds no settled payment"},
		{"forbidden transition", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
				VALUES ($1, 'failed', 'failed', 'planted', now())`, g.failed)
		}, "is not allowed"},
		{"state without its transition", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `UPDATE settlements SET state = 'sent' WHERE settlement_id = $1`, g.failed)
		}, "but the last transition went to failed"},
		{"open after recovery", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state, bank_key, payload_hash)
				VALUES ('zz', 'a', 'b', 1, 'EUR', 'pending', 'k-zz', 'h')`)
			exec(ctx, t, tx, `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
				VALUES ('zz', NULL, 'pending', 'planted', now())`)
		}, "still pending after recovery"},
		{"conflict not recorded", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `DELETE FROM receipt_conflicts WHERE settlement_id = $1`, g.conflicted)
		}, "answered 409"},
		{"payout posting deleted", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `SET LOCAL session_replication_role = replica`)
			exec(ctx, t, tx, `DELETE FROM ledger_postings WHERE settlement_id = $1`, g.confirmed)
		}, "ledger: confirmed with posting(s) none"},
		{"posting amount changed", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `SET LOCAL session_replication_role = replica`)
			exec(ctx, t, tx, `UPDATE ledger_postings SET amount_minor = amount_minor + 1 WHERE settlement_id = $1`, g.confirmed)
		}, "(not of its account, amount and currency)"},
		{"hold outlives a failed settlement", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `UPDATE ledger_holds SET state = 'held', closed_at = NULL WHERE settlement_id = $1`, g.failed)
		}, "failed with posting(s) none and hold held"},
		{"kept balance drifted", func(ctx context.Context, t *testing.T, _ *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `UPDATE ledger_balances b SET posted_minor = posted_minor + 1
				FROM settlements s WHERE s.settlement_id = $1 AND b.account_id = s.account_id AND b.currency = s.currency
				AND b.shard = (SELECT min(shard) FROM ledger_balances m WHERE m.account_id = s.account_id AND m.currency = s.currency)`, g.confirmed)
		}, "balances sum to 1, not 0"},
		{"POST past the key TTL", func(ctx context.Context, t *testing.T, r *run, tx pgx.Tx, g target) {
			exec(ctx, t, tx, `INSERT INTO bank_attempts (settlement_id, op, bank_key, started_at)
				SELECT settlement_id, 'send', bank_key, first_attempt_at + $2::float8 * interval '1 second'
				FROM settlements WHERE settlement_id = $1`, g.confirmed, r.engineTTL.Seconds())
		}, "POST past the key TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t)
			r, err := simulate(ctx, db.Pool, Config{Seed: cleanSeed, Bank: CapabilitySets[0].Name})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.res.Violations) > 0 {
				t.Fatalf("seed %d is not clean:\n%s", cleanSeed, r.res.Report())
			}
			var g target
			if err := db.Pool.QueryRow(ctx, `SELECT
				(SELECT min(settlement_id) FROM settlements WHERE state = 'confirmed'),
				(SELECT min(settlement_id) FROM settlements WHERE state = 'failed'),
				(SELECT min(settlement_id) FROM receipt_conflicts)`).Scan(&g.confirmed, &g.failed, &g.conflicted); err != nil {
				t.Fatalf("seed %d lacks a confirmed, a failed or a conflicted settlement: %v", cleanSeed, err)
			}
			err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				tc.plant(ctx, t, r, tx, g)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := audit.CheckInvariants(ctx, db.Pool, r.expect())
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range got {
				if strings.Contains(v, tc.want) {
					return
				}
			}
			t.Errorf("checker missed the planted violation (want %q), found: %q", tc.want, got)
		})
	}
}

func exec(ctx context.Context, t *testing.T, tx pgx.Tx, sql string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("error planting: %v", err)
	}
}

// TestDeterminism replays one seed twice: the same schedule, the same
// engine answers, the same bank.
func TestDeterminism(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var traces [2]string
	for i := range traces {
		db := dbtest.New(t)
		res, err := Run(ctx, db.Pool, Config{Seed: 42})
		if err != nil {
			t.Fatal(err)
		}
		traces[i] = strings.Join(res.Trace, "\n") + strings.Join(res.BankLog, "\n")
	}
	if traces[0] != traces[1] {
		a, b := strings.Split(traces[0], "\n"), strings.Split(traces[1], "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("seed 42 diverged at line %d:\n%s\n%s", i, a[i], b[i])
			}
		}
		t.Fatalf("seed 42 diverged in length: %d vs %d lines", len(a), len(b))
	}
}

// returnTargets are the settlements of a clean return schedule the return
// plants act on.
type returnTargets struct{ returned, confirmed, partial string }

// cleanReturnSeed returns the first seed whose return schedule at the
// by-key bank is clean and ends with a settlement returned, one confirmed
// whose payment stands, and one confirmed whose payment came back in part,
// with the run and its database.
func cleanReturnSeed(ctx context.Context, t *testing.T) (*run, *dbtest.DB, returnTargets) {
	t.Helper()
	db := dbtest.New(t)
	for seed := uint64(1); seed <= 60; seed++ {
		if err := truncate(ctx, db.Pool); err != nil {
			t.Fatal(err)
		}
		r, err := simulate(ctx, db.Pool, Config{Seed: seed, Settlements: 8, Returns: true, Bank: CapabilitySets[0].Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.res.Violations) > 0 {
			t.Fatalf("seed %d is not clean:\n%s", seed, r.res.Report())
		}
		partial := map[string]bool{}
		for _, ret := range r.bank.ReturnsBooked() {
			partial[ret.Reference] = !ret.Full
		}
		var g returnTargets
		rows, err := db.Pool.Query(ctx, `SELECT settlement_id, state FROM settlements ORDER BY settlement_id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				t.Fatal(err)
			}
			_, came := partial[id]
			switch {
			case state == "returned" && g.returned == "":
				g.returned = id
			case state == "confirmed" && partial[id] && g.partial == "":
				g.partial = id
			case state == "confirmed" && !came && g.confirmed == "":
				g.confirmed = id
			}
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if g.returned != "" && g.confirmed != "" && g.partial != "" {
			return r, db, g
		}
	}
	t.Fatal("no seed of 1..60 ends with a returned, a confirmed and a partly returned settlement")
	return nil, nil, returnTargets{}
}

// TestCheckerCatchesPlantedReturnViolations proves the checker can fail on
// returns (DESIGN.md section 15): each case replays a clean return
// schedule, plants one violation and expects the checker to name it.
func TestCheckerCatchesPlantedReturnViolations(t *testing.T) {
	t.Parallel()
	toReturned := func(ctx context.Context, t *testing.T, tx pgx.Tx, id string) {
		exec(ctx, t, tx, `INSERT INTO settlement_transitions (settlement_id, from_state, to_state, reason, at)
			VALUES ($1, 'confirmed', 'returned', 'planted', now())`, id)
		exec(ctx, t, tx, `UPDATE settlements SET state = 'returned', needs_investigation = false, investigation_reason = NULL
			WHERE settlement_id = $1`, id)
		exec(ctx, t, tx, `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
			SELECT settlement_id, 'reversal', account_id, amount_cents, currency FROM settlements WHERE settlement_id = $1`, id)
	}
	for _, tc := range []struct {
		name  string
		plant func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets)
		want  string
	}{
		{"second reversal", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			exec(ctx, t, tx, `ALTER TABLE ledger_movements DROP CONSTRAINT ledger_movements_settlement_id_kind_key`)
			exec(ctx, t, tx, `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
				SELECT settlement_id, 'reversal', account_id, amount_cents, currency FROM settlements WHERE settlement_id = $1`, g.returned)
		}, "returned with 3 ledger movement(s) (payout+reversal×2), want payout+reversal"},
		{"reversal deleted", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			exec(ctx, t, tx, `SET LOCAL session_replication_role = replica`)
			exec(ctx, t, tx, `DELETE FROM ledger_movements WHERE settlement_id = $1 AND kind = 'reversal'`, g.returned)
		}, "returned with 1 ledger movement(s) (payout), want payout+reversal"},
		{"returned without its transition", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			exec(ctx, t, tx, `UPDATE settlements SET state = 'returned' WHERE settlement_id = $1`, g.confirmed)
			exec(ctx, t, tx, `INSERT INTO ledger_movements (settlement_id, kind, account_id, amount_cents, currency)
				SELECT settlement_id, 'reversal', account_id, amount_cents, currency FROM settlements WHERE settlement_id = $1`, g.confirmed)
		}, "state returned but the last transition went to confirmed"},
		{"returned while the bank holds it settled", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			toReturned(ctx, t, tx, g.confirmed)
		}, "returned but the bank holds its payment as settled"},
		{"a return never booked", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			exec(ctx, t, tx, `SET LOCAL session_replication_role = replica`)
			exec(ctx, t, tx, `DELETE FROM ledger_movements WHERE settlement_id = $1 AND kind = 'reversal'`, g.returned)
			exec(ctx, t, tx, `DELETE FROM settlement_transitions WHERE settlement_id = $1 AND to_state = 'returned'`, g.returned)
			exec(ctx, t, tx, `UPDATE settlements SET state = 'confirmed' WHERE settlement_id = $1`, g.returned)
		}, "confirmed but the bank holds no settled payment"},
		{"partial return booked in full", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			toReturned(ctx, t, tx, g.partial)
		}, "the bank returned part of its payment, but it is returned"},
		{"partial return left unflagged", func(ctx context.Context, t *testing.T, tx pgx.Tx, g returnTargets) {
			exec(ctx, t, tx, `UPDATE settlements SET needs_investigation = false, investigation_reason = NULL WHERE settlement_id = $1`, g.partial)
		}, "the bank returned part of its payment, but it is confirmed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r, db, g := cleanReturnSeed(ctx, t)
			if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				tc.plant(ctx, t, tx, g)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got, err := audit.CheckInvariants(ctx, db.Pool, r.expect())
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range got {
				if strings.Contains(v, tc.want) {
					return
				}
			}
			t.Errorf("checker missed the planted violation (want %q), found: %q", tc.want, got)
		})
	}
}
