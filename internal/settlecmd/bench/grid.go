package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/fakebank"
)

// GridCell is one run of the grid: e2e_per_s with one intake batch size
// and one worker bank concurrency.
type GridCell struct {
	BatchSize             int     `json:"batch_size"`
	BankConcurrency       int     `json:"bank_concurrency"`
	E2EPerS               float64 `json:"e2e_per_s"`
	CommitsPerSettlement  float64 `json:"commits_per_settlement"`
	WALBytesPerSettlement float64 `json:"wal_bytes_per_settlement"`
	ConfirmP99MS          float64 `json:"e2e_confirm_p99_ms"`
}

// Default axes of the grid.
var (
	DefaultGridBatchSizes      = []int{10, 100, 1000}
	DefaultGridBankConcurrency = []int{16, 100}
)

// measureGrid pays cfg.E2ESettlements settlements through the worker
// for each intake batch size of cfg.GridBatchSizes and each bank
// concurrency of cfg.GridBankConcurrency (the worker's send setting),
// the bank at zero latency.
func measureGrid(ctx context.Context, cfg Config, pool *pgxpool.Pool, dbURL string, r *Result) error {
	for _, batch := range cfg.GridBatchSizes {
		for _, conc := range cfg.GridBankConcurrency {
			c := cfg
			c.BatchSize, c.BankConcurrency = batch, conc
			run, err := runE2E(ctx, c, pool, dbURL, fakebank.Faults{}, cfg.E2ESettlements, fmt.Sprintf("grid-%d-%d", batch, conc))
			if err != nil {
				return fmt.Errorf("grid cell batch %d, bank concurrency %d: %w", batch, conc, err)
			}
			cell := GridCell{BatchSize: batch, BankConcurrency: conc, E2EPerS: run.perS, CommitsPerSettlement: run.commits,
				WALBytesPerSettlement: run.cost.walBytes, ConfirmP99MS: ms(run.cost.p99)}
			r.Grid = append(r.Grid, cell)
			cfg.Logf("grid: batch %d, bank concurrency %d: e2e_per_s %.1f, commits %.2f, WAL %.0f bytes per settlement, p99 %.0f ms",
				batch, conc, cell.E2EPerS, cell.CommitsPerSettlement, cell.WALBytesPerSettlement, cell.ConfirmP99MS)
			if err := truncate(ctx, pool); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteGrid writes the grid as a Markdown table (for BENCHMARKS.md), with
// each cell's e2e_per_s against insert_baseline_per_s / 3 when the run
// measured it.
func (r *Result) WriteGrid(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "| intake batch | bank concurrency | e2e_per_s | / (insert_baseline_per_s / 3) | commits / settlement | WAL bytes / settlement | confirm p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|\n"); err != nil {
		return err
	}
	for _, c := range r.Grid {
		if _, err := fmt.Fprintf(w, "| %d | %d | %.1f | %.2f | %.2f | %.0f | %.0f |\n", c.BatchSize, c.BankConcurrency, c.E2EPerS,
			ratio(c.E2EPerS, r.InsertBaselinePerS/3), c.CommitsPerSettlement, c.WALBytesPerSettlement, c.ConfirmP99MS); err != nil {
			return err
		}
	}
	return nil
}
