package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	natssrc "github.com/settle/settle/source/nats"
)

// The demo's own stream, subject and consumer, made afresh for every run
// (the demo's database is too), and its short lease, so that a lease left
// to expire comes back within seconds.
const (
	sourceNATS   = "nats"
	demoStream   = "SETTLE_DEMO"
	demoSubject  = "settle.demo.requests"
	demoConsumer = "settle-demo"
	demoLease    = 3 * time.Second
	// heldMessages is how many messages the demo fetches itself and then
	// lets their lease expire.
	heldMessages = 10
)

// QueueReport is what happened on the queue (--source nats).
type QueueReport struct {
	// Published counts the messages published, each under a fresh id.
	Published int
	// Held counts the messages fetched by a consumer that never answered:
	// their lease expired and JetStream delivered them again.
	Held int
	// KilledBatch counts the events the first worker committed before it
	// was killed, before acknowledging them: JetStream delivered them
	// again, and they were replays.
	KilledBatch int
	// Pending and AwaitingAck are the consumer's at the end.
	Pending, AwaitingAck uint64
	// Redelivered is what JetStream counted as delivered more than once.
	Redelivered int
}

// natsWorkerArgs are the flags and environment of a worker consuming the
// demo's stream at url.
func natsWorkerArgs(url string) (args, env []string) {
	return []string{"--source", sourceNATS, "--source-stream", demoStream, "--source-subject", demoSubject,
			"--source-consumer", demoConsumer, "--source-lease", demoLease.String()},
		[]string{"NATS_URL=" + url}
}

// resetDemoStream deletes the demo's stream of an earlier run, if any.
func resetDemoStream(ctx context.Context, url string) error {
	nc, js, err := natssrc.ConnectJetStream(url, "settle-demo")
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := js.DeleteStream(ctx, demoStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("error removing the demo stream of an earlier run: %w", err)
	}
	return nil
}

// viaNATS sends the demo's events through JetStream, with redeliveries
// caused the real way: it publishes the first deliveries, fetches a few
// itself and lets their lease expire, runs a worker that is killed
// (SETTLE_CRASH_AT=source.after_commit) after committing its first batch
// and before acknowledging it, then starts the worker that stays (start)
// and publishes the producer's redeliveries and conflicts, each under a
// fresh message id. It returns the worker that stays.
func (o Options) viaNATS(ctx context.Context, rep *Report, stream Stream, pool *pgxpool.Pool, dbURL, bankURL, token, dir string,
	env []string, start func() (*workerproc.Proc, error), say func(string, ...any)) (*workerproc.Proc, error) {
	pub, err := natssrc.NewPublisher(ctx, o.NATSURL, demoStream, demoSubject)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	publish := func(lines [][]byte) error {
		for _, l := range lines {
			if _, err := pub.Publish(ctx, l, ""); err != nil {
				return err
			}
			rep.Queue.Published++
		}
		return nil
	}
	if err := publish(stream.First); err != nil {
		return nil, err
	}
	say("published %d first deliveries to %s, each under a fresh message id", len(stream.First), demoSubject)

	// A consumer that takes messages and never answers.
	held, err := natssrc.Open(ctx, natssrc.Config{URL: o.NATSURL, Stream: demoStream, Subject: demoSubject,
		Consumer: demoConsumer, AckWait: demoLease, Name: "settle-demo-silent"})
	if err != nil {
		return nil, err
	}
	msgs, err := held.Fetch(ctx, heldMessages)
	fetchedAt := time.Now()
	if err != nil {
		held.Close()
		return nil, err
	}
	rep.Queue.Held = len(msgs)
	say("a consumer fetched %d of them and went silent: no ack, no in-progress signal; their %s lease runs out", len(msgs), demoLease)

	// A worker killed after its first commit, before its ack.
	args, srcEnv := natsWorkerArgs(o.NATSURL)
	first, err := o.killedAfterCommit(ctx, pool, dbURL, bankURL, token, dir, append(append([]string{}, env...), srcEnv...), args...)
	if err != nil {
		held.Close()
		return nil, err
	}
	rep.Queue.KilledBatch = first.committed
	say("a worker (pid %d) took a batch, committed %d settlements, and was killed (SIGKILL) before acknowledging it",
		first.PID(), rep.Queue.KilledBatch)
	time.Sleep(time.Until(fetchedAt.Add(demoLease)))
	held.Close()

	w, err := start()
	if err != nil {
		return nil, err
	}
	say("  worker    %s (settle worker --source nats, pid %d, log %s)", w.URL(), w.PID(), w.LogPath())
	if err := publish(stream.Again); err != nil {
		return w, err
	}
	say("published the producer's %d redeliveries and conflicting events, each under a new message id", len(stream.Again))
	rep.Submit = submit.Summary{Lines: rep.Queue.Published}
	return w, nil
}

// drainQueue waits until the demo's consumer has nothing pending and
// nothing awaiting acknowledgement, and reads what JetStream counted.
func (o Options) drainQueue(ctx context.Context, rep *Report) error {
	nc, js, err := natssrc.ConnectJetStream(o.NATSURL, "settle-demo")
	if err != nil {
		return err
	}
	defer nc.Close()
	return o.poll(ctx, "the queue to drain", func() (bool, string, error) {
		c, err := js.Consumer(ctx, demoStream, demoConsumer)
		if err != nil {
			return false, "", fmt.Errorf("error reading the demo consumer: %w", err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, "", fmt.Errorf("error reading the demo consumer: %w", err)
		}
		rep.Queue.Pending, rep.Queue.AwaitingAck, rep.Queue.Redelivered = info.NumPending, uint64(info.NumAckPending), info.NumRedelivered
		return info.NumPending == 0 && info.NumAckPending == 0,
			fmt.Sprintf("%d pending, %d awaiting ack", info.NumPending, info.NumAckPending), nil
	})
}

// readQueueOutcomes fills rep.Submit from the database: what the queue's
// events became (the HTTP answers a producer would have counted).
func readQueueOutcomes(ctx context.Context, pool *pgxpool.Pool, rep *Report) error {
	var created, replayed, conflict, rejects int
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM settlement_receipts),
		(SELECT coalesce(sum(replay_count), 0) FROM settlement_receipts),
		(SELECT count(*) FROM receipt_conflicts), (SELECT count(*) FROM intake_rejects)`).Scan(&created, &replayed, &conflict, &rejects)
	if err != nil {
		return fmt.Errorf("error reading the queue's outcomes: %w", err)
	}
	rep.Submit.Created, rep.Submit.Replayed, rep.Submit.Conflict, rep.Submit.Invalid = created, replayed, conflict, rejects
	return nil
}

// checkQueue adds the violations of the queue run: every event created
// once, every redelivery (the producer's and JetStream's) a replay, each
// conflict recorded, nothing rejected, the consumer drained.
func (r *Report) checkQueue() {
	fail := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	s := r.Submit
	if s.Created != r.Settlements || s.Invalid != 0 {
		fail("%d receipts and %d rejects for %d settlements; want one receipt each and no reject", s.Created, s.Invalid, r.Settlements)
	}
	// JetStream may deliver a message once more than planned (a lease
	// that ran out on a loaded machine): more replays, or a conflict
	// recorded twice, are harmless; fewer are not.
	if min := r.Redeliveries + r.Queue.KilledBatch; s.Replayed < min {
		fail("%d replays recorded; want at least %d (%d redelivered by the producer, %d by %s after the kill)",
			s.Replayed, min, r.Redeliveries, r.Queue.KilledBatch, r.words().broker)
	}
	if s.Conflict < r.Conflicts {
		fail("%d conflicts recorded, %d published", s.Conflict, r.Conflicts)
	}
	if r.Queue.Pending != 0 || r.Queue.AwaitingAck != 0 {
		fail("the consumer ends with %d pending and %d awaiting acknowledgement", r.Queue.Pending, r.Queue.AwaitingAck)
	}
}

// queueWords are how the report names a broker's parts.
type queueWords struct {
	broker, through, id, lease, ack, acked, end string
}

// words are the report's words for r's source.
func (r Report) words() queueWords {
	if r.source == sourceKafka {
		return queueWords{broker: "Kafka (kfake, the stand-in)", through: "Kafka's protocol (kfake, an in-process stand-in, not Kafka)",
			id: "its settlement_id as key", lease: "session", ack: "committing its offsets", acked: "committed",
			end: fmt.Sprintf("the group ends with %d records uncommitted", r.Queue.Pending)}
	}
	if r.source == sourceSQS {
		return queueWords{broker: "SQS", through: "Amazon SQS (moto_server, a local stand-in, not SQS itself)",
			id: "its own MessageId from SQS", lease: "visibility timeout", ack: "deleting", acked: "deleted",
			end: fmt.Sprintf("the queue ends with %d messages waiting, %d in flight", r.Queue.Pending, r.Queue.AwaitingAck)}
	}
	return queueWords{broker: "JetStream", through: "NATS JetStream", id: "a fresh message id", lease: "lease", ack: "acknowledging",
		acked: "acknowledged", end: fmt.Sprintf("the consumer ends with %d pending, %d awaiting ack", r.Queue.Pending, r.Queue.AwaitingAck)}
}

// printQueue explains the queue run.
func (r Report) printQueue(p func(string, ...any)) {
	q, w := r.Queue, r.words()
	p("  - The events came through %s: %d messages, each under %s, so the broker's own", w.through, q.Published, w.id)
	p("    deduplication played no part; settle decided by settlement_id alone.")
	p("  - %d messages were fetched by a consumer that never answered: their %s ran out and %s delivered", q.Held, w.lease, w.broker)
	p("    them again; they were recorded once, by the worker that got them next.")
	p("  - A worker committed a batch of %d settlements and was killed before %s it: %s delivered", q.KilledBatch, w.ack, w.broker)
	p("    the batch again and each event was a replay of its receipt (nothing created twice, nothing paid twice).")
	p("  - %d events were replays in all (%d redelivered by the producer, the rest by %s); %d conflicting",
		r.Submit.Replayed, r.Redeliveries, w.broker, r.Submit.Conflict)
	p("    payloads were recorded as conflicts (settle reconcile conflicts), never applied. Every message was")
	p("    %s only after its outcome committed: %s.", w.acked, w.end)
}
