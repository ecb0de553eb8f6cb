package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	kafkasrc "github.com/settle/settle/source/kafka"
)

// The demo's Kafka: kfake, an in-process stand-in for Kafka speaking its
// wire protocol (not Kafka), with one topic of three partitions, and the
// workers' short session, so that a killed worker's partitions come back
// within seconds.
const (
	sourceKafka     = "kafka"
	demoTopic       = "settle.demo.requests"
	demoPartitions  = 3
	demoKafkaLease  = 3 * time.Second
	demoKafkaClient = "settle-demo"
)

// kafkaDemo is the demo's kfake cluster.
type kafkaDemo struct {
	c    *kfake.Cluster
	spec string
	cl   *kgo.Client
	adm  *kadm.Client
}

// startKafka starts kfake on 127.0.0.1 with the demo's topic.
func startKafka() (*kafkaDemo, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(demoPartitions, demoTopic),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		return nil, fmt.Errorf("error starting kfake, the stand-in for Kafka: %w", err)
	}
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ClientID(demoKafkaClient))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("error creating the kafka client: %w", err)
	}
	return &kafkaDemo{c: c, spec: "kafka://" + addrs[0] + "/" + demoTopic, cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (k *kafkaDemo) close() {
	k.cl.Close()
	k.c.Close()
}

// kafkaWorkerArgs are the flags of a worker consuming the demo's topic.
func (k *kafkaDemo) workerArgs() []string {
	return []string{"--source", k.spec, "--source-lease", demoKafkaLease.String()}
}

// viaKafka sends the demo's events through Kafka's protocol, with
// redeliveries caused the real way: it produces the first deliveries
// (keyed by settlement_id), runs a worker that is killed
// (SETTLE_CRASH_AT=source.after_commit) after committing its first batch
// and before committing its offsets, so the group keeps the dead member
// until its session runs out and then hands its partitions on from the
// last committed offset; then it starts the worker that stays (start) and
// produces the producer's redeliveries and conflicts. It returns the
// worker that stays.
func (o Options) viaKafka(ctx context.Context, k *kafkaDemo, rep *Report, stream Stream, pool *pgxpool.Pool, dbURL, bankURL, token, dir string,
	env []string, start func() (*workerproc.Proc, error), say func(string, ...any)) (*workerproc.Proc, error) {
	pub, err := kafkasrc.NewPublisher(ctx, []string{k.c.ListenAddrs()[0]}, demoTopic, demoKafkaClient)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	publish := func(lines [][]byte) error {
		for _, l := range lines {
			if _, err := pub.PublishEvent(ctx, l); err != nil {
				return err
			}
			rep.Queue.Published++
		}
		return nil
	}
	if err := publish(stream.First); err != nil {
		return nil, err
	}
	say("produced %d first deliveries to topic %s, each keyed by its settlement_id", len(stream.First), demoTopic)

	first, err := o.killedAfterCommit(ctx, pool, dbURL, bankURL, token, dir, env, k.workerArgs()...)
	if err != nil {
		return nil, err
	}
	rep.Queue.KilledBatch = first.committed
	say("a worker (pid %d) took a batch, committed %d settlements, and was killed (SIGKILL) before committing its offsets;",
		first.PID(), rep.Queue.KilledBatch)
	say("  the group keeps it as a member until its %s session runs out, then hands its partitions on", demoKafkaLease)

	w, err := start()
	if err != nil {
		return nil, err
	}
	say("  worker    %s (settle worker --source %s, pid %d, log %s)", w.URL(), k.spec, w.PID(), w.LogPath())
	if err := publish(stream.Again); err != nil {
		return w, err
	}
	say("produced the producer's %d redeliveries and conflicting events", len(stream.Again))
	rep.Submit = submit.Summary{Lines: rep.Queue.Published}
	return w, nil
}

// drainKafka waits until the group has committed every partition to its
// end; what is left uncommitted is the report's Pending.
func (o Options) drainKafka(ctx context.Context, k *kafkaDemo, rep *Report) error {
	return o.poll(ctx, "the topic to drain", func() (bool, string, error) {
		ends, err := k.adm.ListEndOffsets(ctx, demoTopic)
		if err != nil {
			return false, "", fmt.Errorf("error reading the demo topic: %w", err)
		}
		committed, err := k.adm.FetchOffsetsForTopics(ctx, kafkasrc.DefaultGroup, demoTopic)
		if err != nil {
			return false, "", fmt.Errorf("error reading the demo group: %w", err)
		}
		var left uint64
		ends.Each(func(end kadm.ListedOffset) {
			at := int64(0)
			if c, ok := committed.Lookup(demoTopic, end.Partition); ok && c.Err == nil && c.At > 0 {
				at = c.At
			}
			if end.Offset > at {
				left += uint64(end.Offset - at)
			}
		})
		rep.Queue.Pending = left
		return left == 0, fmt.Sprintf("%d records not committed", left), nil
	})
}

// printKafka explains the Kafka run.
func (r Report) printKafka(p func(string, ...any)) {
	q := r.Queue
	p("  - The events came through Kafka's protocol, to kfake: an in-process stand-in for Kafka from the authors")
	p("    of the client settle uses, not Kafka. %d records, each keyed by its settlement_id; Kafka has no", q.Published)
	p("    message id, and settle decided by settlement_id alone.")
	p("  - A worker committed a batch of %d settlements and was killed before committing its offsets: once its", q.KilledBatch)
	p("    session ran out the group handed its partitions on from the last committed offset, and each event of")
	p("    the batch came again and was a replay of its receipt (nothing created twice, nothing paid twice).")
	p("  - %d events were replays in all (%d redelivered by the producer, the rest by Kafka); %d conflicting",
		r.Submit.Replayed, r.Redeliveries, r.Submit.Conflict)
	p("    payloads were recorded as conflicts (settle reconcile conflicts), never applied. A partition's offset")
	p("    was committed only up to the last record whose outcome committed: the group ends with %d records", q.Pending)
	p("    uncommitted.")
}
