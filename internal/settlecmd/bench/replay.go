package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/intake"
)

// measureReplay times redeliveries of stored events through the API, one
// at a time (each sample twice; the second pass counts), with cfg.ReplayRows[0] and then cfg.ReplayRows[1] receipts
// (and settlements) in the tables. The sampled events are taken in through
// the API; the rest of the rows are filled directly with generate_series.
func measureReplay(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result) error {
	bulk, err := connectBulk(ctx, dbURL)
	if err != nil {
		return err
	}
	defer bulk.Close(context.WithoutCancel(ctx))
	a, err := startAPI(pool, 1)
	if err != nil {
		return err
	}
	defer a.close()
	bodies := make([][]byte, cfg.ReplaySamples)
	for b := 0; b < cfg.ReplaySamples; b += 1000 {
		evs := make([]intake.Event, min(1000, cfg.ReplaySamples-b))
		for k := range evs {
			evs[k] = newEvent(fmt.Sprintf("replay-%d", b+k), b+k)
			if bodies[b+k], err = json.Marshal(evs[k]); err != nil {
				return err
			}
		}
		if err := postBatch(ctx, a.client, a.base, evs); err != nil {
			return fmt.Errorf("error taking the replay samples in: %w", err)
		}
	}
	rows := cfg.ReplaySamples
	for i, want := range cfg.ReplayRows {
		t0 := time.Now()
		if err := fill(ctx, cfg, bulk, rows, want); err != nil {
			return err
		}
		cfg.Logf("replay: %d receipts in the table (filled in %s)", want, time.Since(t0).Round(time.Millisecond))
		rows = want
		// The first pass touches every sampled row once after the fill
		// (hint bits, full-page images after the checkpoint, cold index
		// pages); the next ones are reported.
		if _, _, err := replayLatency(ctx, a, bodies); err != nil {
			return err
		}
		p50, p99, err := replayPasses(ctx, a, bodies, replayPassCount)
		if err != nil {
			return err
		}
		if i == 0 {
			r.ReplayP50US1e4, r.ReplayP99US1e4 = p50, p99
		} else {
			r.ReplayP50US1e6, r.ReplayP99US1e6 = p50, p99
		}
		cfg.Logf("replay p50 %.0fµs p99 %.0fµs at %d receipts", p50, p99, want)
	}
	return nil
}

// fillChunk is how many rows one fill statement writes: small enough that a
// chunk finishes in seconds on a loaded machine, large enough that the
// statements cost nothing next to the rows.
const fillChunk = 100_000

// fill adds terminal settlements and their receipts until the tables hold
// want receipts (they hold have), then refreshes the planner's statistics.
// It works on a connection of its own without the pool's statement timeout
// (DESIGN.md section 9: filling large tables is not subject to it), in
// chunks of fillChunk rows, each its own transaction, and logs its progress,
// so a slow machine makes it slower, never makes it fail.
func fill(ctx context.Context, cfg Config, bulk *pgx.Conn, have, want int) error {
	if want <= have {
		return nil
	}
	now := time.Now()
	for from := have; from < want; from += fillChunk {
		to := min(from+fillChunk, want)
		_, err := bulk.Exec(ctx, `
			WITH s AS (
				INSERT INTO settlements (settlement_id, account_id, beneficiary, amount_cents, currency, state,
					bank_key, payload_hash, created_at, updated_at, bank)
				SELECT 'fill-' || g, 'acc-' || (g % 997), 'fill beneficiary', 100 + g % 100000, 'EUR', 'confirmed',
					'fill-key-' || g, 'sha256:' || encode(sha256(('fill-' || g)::bytea), 'hex'), $3, $3, 'settle'
				FROM generate_series($1::bigint, $2::bigint) AS g
				RETURNING settlement_id, payload_hash
			)
			INSERT INTO settlement_receipts (settlement_id, payload_hash, received_at)
			SELECT settlement_id, payload_hash, $3 FROM s`, from, to-1, now)
		if err != nil {
			return fmt.Errorf("error filling receipts %d to %d of %d: %w", from, to, want, err)
		}
		if to < want {
			cfg.Logf("replay: filled %d of %d receipts", to, want)
		}
	}
	if _, err := bulk.Exec(ctx, "VACUUM ANALYZE settlements, settlement_receipts"); err != nil {
		return fmt.Errorf("error analysing the filled tables: %w", err)
	}
	// Write the fill out now, so that the checkpoint it would trigger does
	// not land in the middle of the timed replays. It needs superuser or
	// pg_checkpoint (PostgreSQL 15); without them the replays take their
	// chance.
	_, _ = bulk.Exec(ctx, "CHECKPOINT")
	return nil
}

// connectBulk opens the connection of the bulk steps (fills, VACUUM,
// CHECKPOINT): no statement timeout, the server's default lock timeout.
func connectBulk(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	pc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("error parsing the database URL: %w", err)
	}
	pc.RuntimeParams["statement_timeout"] = "0"
	pc.RuntimeParams["application_name"] = "settle-bench-bulk"
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("error connecting for the bulk fill: %w", err)
	}
	return conn, nil
}

// replayPassCount is how many timed passes replayPasses takes the median
// of. One pass of 2,000 redeliveries (--quick) lasts about a second and a
// half, so its p99 is its 20 slowest: one stall of the machine of some
// milliseconds (a collection, another process) moved it by half in one
// run of six, with its p50 within 1 %.
const replayPassCount = 3

// replayPasses runs n passes of replayLatency and returns the median of
// their p50s and the median of their p99s.
func replayPasses(ctx context.Context, a *api, bodies [][]byte, n int) (p50, p99 float64, err error) {
	p50s, p99s := make([]float64, n), make([]float64, n)
	for i := range n {
		if p50s[i], p99s[i], err = replayLatency(ctx, a, bodies); err != nil {
			return 0, 0, err
		}
	}
	slices.Sort(p50s)
	slices.Sort(p99s)
	return p50s[n/2], p99s[n/2], nil
}

// replayLatency redelivers every body once, in random order, and returns
// the p50 and p99 latency in microseconds (after a short warm-up).
func replayLatency(ctx context.Context, a *api, bodies [][]byte) (p50, p99 float64, err error) {
	order := rand.Perm(len(bodies))
	warm := min(50, len(bodies)/10)
	lat := make([]float64, 0, len(bodies))
	for i, k := range order {
		t0 := time.Now()
		if err := post(ctx, a.client, a.base+"/v1/settlements", bodies[k], http.StatusOK, nil); err != nil {
			return 0, 0, fmt.Errorf("error redelivering: %w", err)
		}
		if i >= warm {
			lat = append(lat, float64(time.Since(t0).Microseconds()))
		}
	}
	slices.Sort(lat)
	return percentile(lat, 0.50), percentile(lat, 0.99), nil
}

// percentile returns the p-th quantile of sorted (nearest rank).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
