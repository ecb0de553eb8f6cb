package submit_test

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/testsupport/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// noJobs stands in for River: these tests are about what intake answers.
type noJobs struct{}

func (noJobs) InsertSendTx(context.Context, pgx.Tx, []intake.SendJob) error { return nil }

// intakeAPI serves the real intake API on a database of its own.
func intakeAPI(t *testing.T) (string, *dbtest.DB) {
	t.Helper()
	db := dbtest.New(t)
	svc, err := intake.NewService(intake.Config{DB: db.Pool, Jobs: noJobs{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(intake.NewHandler(intake.HandlerConfig{Service: svc}))
	t.Cleanup(srv.Close)
	return srv.URL, db
}

// TestBatchGivesTheSameAnswersAsSingleEvents submits the known file with bad
// lines event by event and in batches of 1, 3 and 1000, each to a fresh
// database: every line gets the same outcome either way, because the batch
// endpoint has the single endpoint's semantics per event.
func TestBatchGivesTheSameAnswersAsSingleEvents(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/events.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	// A line holding an array of events is one bad line, never two
	// events, whether or not the lines travel in batches.
	data = append(data, `[{"settlement_id":"s-6","account_id":"acc-2","amount_cents":7,"currency":"USD","beneficiary":"Ken"},`+
		`{"settlement_id":"s-7","account_id":"acc-2","amount_cents":8,"currency":"USD","beneficiary":"Rob"}]`+"\n"...)
	run := func(batch int) (submit.Summary, map[int]submit.Outcome) {
		outcomes := map[int]submit.Outcome{}
		url, db := intakeAPI(t)
		sum, err := submit.Run(context.Background(), strings.NewReader(string(data)), submit.Options{
			URL: url, Concurrency: 1, Batch: batch,
			OnResult: func(r submit.Result) { outcomes[r.Line] = r.Outcome },
		})
		if err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		var smuggled int
		if err := db.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM settlements WHERE settlement_id IN ('s-6', 's-7')").Scan(&smuggled); err != nil {
			t.Fatal(err)
		}
		if smuggled != 0 {
			t.Errorf("batch %d: the events of an array line were applied", batch)
		}
		return sum, outcomes
	}
	single, want := run(0)
	if single.Created == 0 || single.Invalid == 0 || single.Conflict == 0 || single.Replayed == 0 {
		t.Fatalf("the file should exercise every outcome: %+v", single)
	}
	for _, batch := range []int{1, 3, 1000} {
		sum, got := run(batch)
		if sum.Lines != single.Lines || sum.Created != single.Created || sum.Replayed != single.Replayed ||
			sum.Conflict != single.Conflict || sum.Invalid != single.Invalid || sum.Errors != single.Errors {
			t.Errorf("batch %d: summary %+v, single events gave %+v", batch, sum, single)
		}
		for line, o := range want {
			if got[line] != o {
				t.Errorf("batch %d: line %d is %s, single events gave %s", batch, line, got[line], o)
			}
		}
	}
}

// TestBatchTooLargeIsRefused: the API takes at most 1000 events a batch.
func TestBatchTooLargeIsRefused(t *testing.T) {
	t.Parallel()
	_, err := submit.Run(context.Background(), strings.NewReader("{}\n"), submit.Options{URL: "http://127.0.0.1:1", Batch: submit.MaxBatch + 1})
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("err = %v", err)
	}
}
