// Package jobs holds settle's River job args and workers: thin adapters that
// carry a settlement through intake, the bank and reconciliation
// (send_instruction, reconcile_settlement), and the periodic maintenance
// (sweep, retention), plus the River configuration a worker process runs
// ([NewRiverConfig]).
//
// A worker decides nothing itself: the state machine and the reconcile
// package do. Every worker is safe to run twice (River is at-least-once).
// Jobs must never change settlements.state (statemachine does, through
// reconcile), never call the bank except through reconcile.Resolver, never
// deduplicate in process memory, and never report a job complete before its
// effect commits: where the effect is a database write, the job completes
// in the same transaction (river.JobCompleteTx).
package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/settlement"
)

// Queue names.
const (
	// QueueBank is where the jobs that call the bank went before each bank
	// had a queue of its own (and where one inserted without a queue still
	// goes): every worker takes them and moves each to its bank's queue.
	QueueBank = "bank"
	// QueueMaintenance runs the sweep and retention.
	QueueMaintenance = "maintenance"
	// QueueBankPrefix starts the name of a bank's queue: bank_<name>
	// (QueueFor). Only the workers of that bank fetch it, so a worker never
	// takes another bank's work, and a slow bank never holds back another.
	QueueBankPrefix = "bank_"
)

// QueueFor is the queue of bank's jobs (send, reconcile).
func QueueFor(bank string) string { return QueueBankPrefix + bank }

// BankOfQueue is the bank whose queue queue is, if it is one.
func BankOfQueue(queue string) (string, bool) {
	bank, ok := strings.CutPrefix(queue, QueueBankPrefix)
	return bank, ok && bank != ""
}

// SendInstructionArgs sends a settlement's payment instruction to the bank.
// Intake inserts it in the transaction that creates the settlement.
type SendInstructionArgs struct {
	SettlementID string `json:"settlement_id"`
}

// Kind is the River job kind.
func (SendInstructionArgs) Kind() string { return "send_instruction" }

// InsertOpts puts the job on the bank queue.
func (SendInstructionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueBank}
}

// SendBatchArgs sends the payment instructions of several settlements of
// one bank: what SendInstructionArgs does for each, with one job for all.
// Intake inserts it, on the queue of their bank, in the transaction that
// creates them, when one intake creates several settlements of a bank
// (Inserter.SendBatch). Its worker claims them together (their claims share
// transactions), calls the bank for them concurrently within the bank
// concurrency, and records each answer as a send_instruction would, so a
// settlement of a batch keeps every rule and crash point of one sent alone:
// a crash between its claim and its outcome leaves it to the lost-answer
// path, and a batch run again sends only what is still claimable.
type SendBatchArgs struct {
	SettlementIDs []string `json:"settlement_ids"`
}

// Kind is the River job kind.
func (SendBatchArgs) Kind() string { return "send_batch" }

// InsertOpts puts the job on the bank queue.
func (SendBatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueBank}
}

// MaxSendBatch is the most settlements one send_batch job carries.
const MaxSendBatch = 100

// DefaultSendBatch is the settlements a worker's intake puts in one send job
// (settle worker --send-batch).
const DefaultSendBatch = MaxSendBatch

// ReconcileSettlementArgs asks the bank for a settlement's status by key and
// applies the answer.
type ReconcileSettlementArgs struct {
	// SettlementID alone makes the job unique (when inserted unique).
	SettlementID string `json:"settlement_id" river:"unique"`
	// NotBefore, when set, is when the check is due: a job worked earlier
	// snoozes until then. The send worker inserts its follow-up check
	// available at once with NotBefore rather than scheduled, because
	// River promotes scheduled jobs only from the elected leader, and a
	// dead leader would delay every first check by its leadership TTL;
	// a short snooze is made available without the leader.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Hint marks a check a webhook asked for: it asks once and ends, never
	// snoozing into the settlement's next scheduled check (which its own
	// job, or the sweep, keeps), so a later hint never rides on a check
	// scheduled for later.
	Hint bool `json:"hint,omitempty"`
	// Sweep marks a check the sweep took over: its transitions record the
	// sweep as their source (a hint's record the webhook, any other the
	// worker).
	Sweep bool `json:"sweep,omitempty"`
	// Redirect marks a hint the account holder's redirect asked for (their
	// return from their bank after authorising a consent): its transitions
	// record the redirect as their source rather than the webhook.
	Redirect bool `json:"redirect,omitempty"`
}

// Kind is the River job kind.
func (ReconcileSettlementArgs) Kind() string { return "reconcile_settlement" }

// source is who asked for the check, which its transitions record.
func (a ReconcileSettlementArgs) source() settlement.Source {
	switch {
	case a.Redirect:
		return settlement.SourceRedirect
	case a.Hint:
		return settlement.SourceWebhook
	case a.Sweep:
		return settlement.SourceSweep
	}
	return settlement.SourceWorker
}

// InsertOpts puts the job on the bank queue.
func (ReconcileSettlementArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueBank}
}

// Inserter inserts settle's jobs inside a caller's transaction. Intake uses
// it (through a small interface of its own) so the settlement, its receipt
// and its first job commit together.
type Inserter struct {
	Client *river.Client[pgx.Tx]
	// SendBatch is the most new settlements of one bank that share a
	// send_batch job (at most MaxSendBatch). 0 or 1: a send_instruction job
	// per settlement, which is also what a batch of one gets (and what a
	// worker of before send_batch existed can work: see README, upgrading).
	SendBatch int
}

// InsertSendTx inserts the send jobs of new settlements in tx: with
// SendBatch above 1, one send_batch job per SendBatch settlements of a
// bank, in the order given; else, and for a settlement alone of its bank,
// one send_instruction job per settlement.
func (in Inserter) InsertSendTx(ctx context.Context, tx pgx.Tx, sends []intake.SendJob) error {
	if len(sends) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, 0, len(sends))
	for _, chunk := range sendChunks(sends, min(in.SendBatch, MaxSendBatch)) {
		opts := &river.InsertOpts{Queue: QueueFor(chunk[0].Bank)}
		if len(chunk) == 1 {
			params = append(params, river.InsertManyParams{Args: SendInstructionArgs{SettlementID: chunk[0].SettlementID}, InsertOpts: opts})
			continue
		}
		ids := make([]string, len(chunk))
		for i, j := range chunk {
			ids[i] = j.SettlementID
		}
		params = append(params, river.InsertManyParams{Args: SendBatchArgs{SettlementIDs: ids}, InsertOpts: opts})
	}
	// A few jobs go in one INSERT statement (one round trip); many go by
	// COPY, which costs two round trips (the COPY, then its data and end)
	// and a goroutine whatever the number.
	var err error
	if len(params) <= copyJobsFrom {
		_, err = in.Client.InsertManyTx(ctx, tx, params)
	} else {
		_, err = in.Client.InsertManyFastTx(ctx, tx, params)
	}
	if err != nil {
		return fmt.Errorf("error inserting send jobs: %w", err)
	}
	return nil
}

// copyJobsFrom is the fewest send jobs InsertSendTx inserts by COPY.
const copyJobsFrom = 64

// sendChunks splits sends by bank (banks in the order they first appear,
// settlements in theirs) into chunks of at most size (one each when size is
// below 2).
func sendChunks(sends []intake.SendJob, size int) [][]intake.SendJob {
	size = max(size, 1)
	var banks []string
	byBank := map[string][]intake.SendJob{}
	for _, j := range sends {
		if _, ok := byBank[j.Bank]; !ok {
			banks = append(banks, j.Bank)
		}
		byBank[j.Bank] = append(byBank[j.Bank], j)
	}
	var chunks [][]intake.SendJob
	for _, bank := range banks {
		for c := range slices.Chunk(byBank[bank], size) {
			chunks = append(chunks, c)
		}
	}
	return chunks
}

// CheckNow makes the bank be asked about settlementID after now, on the
// queue of its bank: a webhook's hint. A hint check not yet started rides
// along (it will ask after this hint came, so a burst of hints costs one
// check); otherwise a new one is inserted, even when one is running, for
// that one may have asked before the news. Two hints racing may insert two
// checks; a check too many is harmless, a check too few loses news.
//
// River's unique jobs cannot say this: uniqueness must include the running
// state, and a finished job reads as running until River's completer has
// recorded it.
func (in Inserter) CheckNow(ctx context.Context, settlementID, bank string) error {
	return in.checkNow(ctx, ReconcileSettlementArgs{SettlementID: settlementID, Hint: true}, bank)
}

// CheckRedirect is CheckNow for the account holder's redirect: the hint
// it inserts records settlement.SourceRedirect. A hint already waiting,
// the webhook's or another redirect's, takes it along with its own source.
func (in Inserter) CheckRedirect(ctx context.Context, settlementID, bank string) error {
	return in.checkNow(ctx, ReconcileSettlementArgs{SettlementID: settlementID, Hint: true, Redirect: true}, bank)
}

// checkNow inserts the hint args on bank's queue unless one waits.
func (in Inserter) checkNow(ctx context.Context, args ReconcileSettlementArgs, bank string) error {
	settlementID := args.SettlementID
	var waiting bool
	err := in.Client.Driver().GetExecutor().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job
		WHERE kind = $1 AND state = 'available' AND args @> jsonb_build_object('settlement_id', $2::text, 'hint', true))`,
		ReconcileSettlementArgs{}.Kind(), settlementID).Scan(&waiting)
	if err != nil {
		return fmt.Errorf("error looking for a waiting check of %s: %w", settlementID, err)
	}
	if waiting {
		return nil
	}
	if _, err := in.Client.Insert(ctx, args, &river.InsertOpts{Queue: QueueFor(bank)}); err != nil {
		return fmt.Errorf("error inserting reconcile_settlement for %s: %w", settlementID, err)
	}
	return nil
}
