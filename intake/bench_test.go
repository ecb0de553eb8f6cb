package intake_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/jobs"
)

func BenchmarkCanonicalHash(b *testing.B) {
	ev := intake.Event{SettlementID: "order-000123", AccountID: "acc-42", AmountCents: 12345, Currency: "EUR", Beneficiary: "DE89 3704 0044 0532 0130 00"}
	b.ReportAllocs()
	for b.Loop() {
		_ = intake.CanonicalHash(ev)
	}
}

func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"settlement_id":"order-000123","account_id":"acc-42","amount_cents":12345,"currency":"EUR",` +
		`"beneficiary":"DE89 3704 0044 0532 0130 00","occurred_at":"2026-01-02T03:04:05Z","event_id":"msg-9"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := intake.DecodeEvent(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIntakeTx measures one new event through the receipt transaction,
// a replay, a batch of 100 new events and, for comparison on the same
// database, a bare one-row INSERT + COMMIT.
func BenchmarkIntakeTx(b *testing.B) {
	db := dbtest.New(b)
	ctx := context.Background()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := intake.NewService(intake.Config{DB: db.Pool, Jobs: jobs.Inserter{Client: client}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("intake", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			ev := intake.Event{SettlementID: "bench-" + strconv.Itoa(i), AccountID: "acc", AmountCents: 100, Currency: "EUR", Beneficiary: "ben"}
			res, err := svc.Submit(ctx, ev)
			if err != nil || res.Replayed {
				b.Fatalf("%v %v", res, err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		ev := intake.Event{SettlementID: "bench-1", AccountID: "acc", AmountCents: 100, Currency: "EUR", Beneficiary: "ben"}
		for b.Loop() {
			if res, err := svc.Submit(ctx, ev); err != nil || !res.Replayed {
				b.Fatalf("%v %v", res, err)
			}
		}
	})
	b.Run("batch_100", func(b *testing.B) {
		i := 0
		evs := make([]intake.Event, 100)
		for b.Loop() {
			i++
			for k := range evs {
				evs[k] = intake.Event{SettlementID: "batch-" + strconv.Itoa(i) + "-" + strconv.Itoa(k), AccountID: "acc", AmountCents: 100, Currency: "EUR", Beneficiary: "ben"}
			}
			outs, err := svc.SubmitBatch(ctx, evs)
			if err != nil || outs[0].Err != nil || outs[0].Result.Replayed {
				b.Fatalf("%v %v", outs[0], err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
	})
	b.Run("bare_insert_commit", func(b *testing.B) {
		if _, err := db.Pool.Exec(ctx, "CREATE TABLE bench_bare (id text PRIMARY KEY, v bigint NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			i++
			if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO bench_bare (id, v) VALUES ($1, $2)", "bare-"+strconv.Itoa(i), i)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
