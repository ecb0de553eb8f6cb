package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/jobs"
)

// api is the intake HTTP API served in-process through the same
// constructors as `settle worker` (intake.NewService, intake.NewHandler,
// jobs.Inserter on an insert-only River client), so that intake is measured
// without River working the jobs it inserts.
type api struct {
	svc    *intake.Service
	srv    *http.Server
	base   string
	client *http.Client
}

func startAPI(pool *pgxpool.Pool, concurrency int) (*api, error) {
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return nil, fmt.Errorf("error creating the River client: %w", err)
	}
	// The worker's defaults: single requests share transactions, and the
	// settlements of one transaction share send jobs.
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: rc, SendBatch: jobs.DefaultSendBatch}, GroupCommit: intake.DefaultGroupCommit})
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.DiscardHandler)
	h := intake.NewHandler(intake.HandlerConfig{Service: svc, Logger: logger, MaxInflight: max(intake.DefaultMaxInflight, concurrency)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error listening: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return &api{svc: svc, srv: srv, base: "http://" + ln.Addr().String(), client: newHTTPClient(concurrency)}, nil
}

func (a *api) close() {
	a.client.CloseIdleConnections()
	_ = a.srv.Close()
}

func newHTTPClient(concurrency int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = concurrency * 2
	t.MaxIdleConnsPerHost = concurrency * 2
	return &http.Client{Transport: t, Timeout: time.Minute}
}

func newEvent(id string, n int) intake.Event {
	return intake.Event{SettlementID: id, AccountID: "acc-" + strconv.Itoa(n%997), AmountCents: int64(100 + n%100000),
		Currency: "EUR", Beneficiary: "DE89 3704 0044 0532 0130 00", EventID: "msg-" + id}
}

// post sends body to base+path and checks the status.
func post(ctx context.Context, c *http.Client, url string, body []byte, want int, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("error building request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("error posting to %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &statusError{url: url, status: resp.StatusCode, want: want, body: b}
	}
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			return fmt.Errorf("error decoding the answer of %s: %w", url, err)
		}
		return nil
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// statusError is an answer with another status than the one wanted.
type statusError struct {
	url          string
	status, want int
	body         []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("error posting to %s: status %d, want %d: %s", e.url, e.status, e.want, e.body)
}

// unavailable reports whether err is a 503: nothing was acknowledged, the
// producer delivers the batch again later.
func unavailable(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.status == http.StatusServiceUnavailable
}

// batchCounts is the part of a batch answer the benchmark checks.
type batchCounts struct {
	Counts map[string]int `json:"counts"`
}

// postBatch posts evs as one batch and checks that every event was created.
func postBatch(ctx context.Context, c *http.Client, base string, evs []intake.Event) error {
	body, err := json.Marshal(evs)
	if err != nil {
		return fmt.Errorf("error encoding batch: %w", err)
	}
	var bc batchCounts
	if err := post(ctx, c, base+"/v1/settlements/batch", body, http.StatusOK, &bc); err != nil {
		return err
	}
	if bc.Counts["created"] != len(evs) {
		return fmt.Errorf("error in batch: %v, want %d created", bc.Counts, len(evs))
	}
	return nil
}

// postBatchAgain posts evs as postBatch does and, while the answer is 503
// (the intakes of one hot account with --funds-check queue on its lock,
// and one that waited past the intake timeout is answered 503), delivers
// the batch again a moment later, as a producer does; every event must
// then be created or replayed.
func postBatchAgain(ctx context.Context, c *http.Client, base string, evs []intake.Event) error {
	body, err := json.Marshal(evs)
	if err != nil {
		return fmt.Errorf("error encoding batch: %w", err)
	}
	for attempt := 0; ; attempt++ {
		var bc batchCounts
		err := post(ctx, c, base+"/v1/settlements/batch", body, http.StatusOK, &bc)
		if unavailable(err) && attempt < 30 {
			select {
			case <-time.After(200 * time.Millisecond):
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err != nil {
			return err
		}
		if bc.Counts["created"]+bc.Counts["replayed"] != len(evs) {
			return fmt.Errorf("error in batch: %v, want %d created or replayed", bc.Counts, len(evs))
		}
		return nil
	}
}

// measureIntake measures the bare INSERT … COMMIT baseline, then single
// and batch intake through the API, each for cfg.Duration at
// cfg.Concurrency. Each loop runs on a pool of its own, closed before the
// next, so that the database's counts of the single loop are its own.
func measureIntake(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, trips *tripCounter, r *Result) error {
	if _, err := pool.Exec(ctx, "CREATE TABLE bench_bare (id text PRIMARY KEY, v bigint NOT NULL)"); err != nil {
		return fmt.Errorf("error creating the baseline table: %w", err)
	}
	size := max(20, cfg.Concurrency+4)
	bare, err := openMeasured(ctx, dbURL, "settle-bench-bare", size, nil)
	if err != nil {
		return err
	}
	n, el, err := loop(ctx, cfg.Concurrency, cfg.Duration, func(ctx context.Context, w, i int) (int, error) {
		err := pgx.BeginFunc(ctx, bare, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO bench_bare (id, v) VALUES ($1, $2)", fmt.Sprintf("bare-%d-%d", w, i), i)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("error in the INSERT … COMMIT baseline: %w", err)
		}
		return 1, nil
	})
	if err != nil {
		bare.Close()
		return err
	}
	r.InsertBaselinePerS = float64(n) / el.Seconds()
	cfg.Logf("insert_baseline_per_s %.1f", r.InsertBaselinePerS)
	if err := closeMeasured(ctx, bare, pool, "settle-bench-bare"); err != nil {
		return err
	}

	single, err := openMeasured(ctx, dbURL, "settle-bench-single", size, trips)
	if err != nil {
		return err
	}
	defer single.Close()
	a, err := startAPI(single, cfg.Concurrency)
	if err != nil {
		return err
	}
	postSingle := func(prefix string) func(ctx context.Context, w, i int) (int, error) {
		return func(ctx context.Context, w, i int) (int, error) {
			body, err := json.Marshal(newEvent(fmt.Sprintf("%s-%d-%d", prefix, w, i), i))
			if err != nil {
				return 0, err
			}
			return 1, post(ctx, a.client, a.base+"/v1/settlements", body, http.StatusCreated, nil)
		}
	}
	if err := warmUp(ctx, cfg, pool, postSingle("warm")); err != nil {
		a.close()
		return err
	}
	before, err := readCounters(ctx, pool)
	if err != nil {
		a.close()
		return fmt.Errorf("error reading the database's counters: %w", err)
	}
	trips0 := trips.load()
	n, el, err = loop(ctx, cfg.Concurrency, cfg.Duration, postSingle("single"))
	a.close()
	if err != nil {
		return err
	}
	r.IntakeSinglePerS = float64(n) / el.Seconds()
	r.RoundTripsPerEvent = float64(trips.load()-trips0) / float64(n)
	if err := closeMeasured(ctx, single, pool, "settle-bench-single"); err != nil {
		return err
	}
	after, err := readCounters(ctx, pool)
	if err != nil {
		return fmt.Errorf("error reading the database's counters: %w", err)
	}
	d := after.since(before, 0)
	r.CommitsPerEvent, r.RowsPerEvent = float64(d.commits)/float64(n), float64(d.rows)/float64(n)
	cfg.Logf("intake_single_per_s %.1f (round trips %.2f, commits %.2f, rows written %.2f per event)",
		r.IntakeSinglePerS, r.RoundTripsPerEvent, r.CommitsPerEvent, r.RowsPerEvent)

	batch, err := openMeasured(ctx, dbURL, "settle-bench-batch", size, trips)
	if err != nil {
		return err
	}
	defer batch.Close()
	a, err = startAPI(batch, cfg.Concurrency)
	if err != nil {
		return err
	}
	defer a.close()
	trips0 = trips.load()
	n, el, err = loop(ctx, cfg.Concurrency, cfg.Duration, func(ctx context.Context, w, i int) (int, error) {
		evs := make([]intake.Event, cfg.BatchSize)
		for k := range evs {
			evs[k] = newEvent(fmt.Sprintf("batch-%d-%d-%d", w, i, k), k)
		}
		return len(evs), postBatch(ctx, a.client, a.base, evs)
	})
	if err != nil {
		return err
	}
	r.IntakeBatchPerS = float64(n) / el.Seconds()
	r.RoundTripsPerBatchEvent = float64(trips.load()-trips0) / float64(n)
	cfg.Logf("intake_batch_per_s %.1f (round trips %.3f per event)", r.IntakeBatchPerS, r.RoundTripsPerBatchEvent)
	a.close()
	return measureSource(ctx, cfg, dbURL, r)
}

// IntakeWarmUp is how long the single loop runs, untimed, before its
// clock starts (at most a fifth of the loop's duration).
const IntakeWarmUp = time.Second

// warmUp runs fn from cfg.Concurrency goroutines for IntakeWarmUp, off the
// clock, then analyzes the benchmark's tables. The intake phase starts on
// a new database, and a prepared statement's generic plan, chosen on its
// sixth run on a connection, is then made for tables PostgreSQL believes
// to be a few pages: a sequential scan of settlements for every
// settlement_id = ANY($1), kept while the table grows until autovacuum's
// first ANALYZE, about a minute later (autovacuum_naptime). A deployment
// pays that in its first minute once; a loop of a few seconds would pay it
// throughout and measure an empty database's plans instead of a running
// one's. The ANALYZE makes PostgreSQL plan the statements again, for tables
// that hold rows.
func warmUp(ctx context.Context, cfg Config, pool *pgxpool.Pool, fn func(ctx context.Context, worker, i int) (int, error)) error {
	d := min(IntakeWarmUp, cfg.Duration/5)
	if _, _, err := loop(ctx, cfg.Concurrency, d, fn); err != nil {
		return fmt.Errorf("error warming up: %w", err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("error analyzing the benchmark's tables after the warm-up: %w", err)
	}
	return nil
}
