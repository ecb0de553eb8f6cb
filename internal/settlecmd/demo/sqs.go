package demo

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/workerproc"
	sqssrc "github.com/settle/settle/source/sqs"
)

// sourceSQS is the demo's --source sqs.
const sourceSQS = "sqs"

// SQSQueue is the queue of a demo run through SQS.
type SQSQueue struct {
	// URL is the queue's URL; Client reaches it.
	URL    string
	Client *awssqs.Client
	// Env is what a worker needs in its environment to reach it (endpoint,
	// region, credentials).
	Env []string
	// Describe says what serves the queue, for the report.
	Describe string
}

// workerArgs are the flags and environment of a worker consuming q.
func (q SQSQueue) workerArgs() (args, env []string) {
	return []string{"--source", "sqs:" + q.URL, "--source-lease", demoLease.String()}, q.Env
}

// viaSQS sends the demo's events through SQS as viaNATS does through
// JetStream: the first deliveries; a consumer that receives a few and
// lets their visibility timeout run out; a worker killed after committing
// its first batch and before deleting it; then the worker that stays and
// the producer's redeliveries and conflicts, each a message of its own.
func (o Options) viaSQS(ctx context.Context, rep *Report, stream Stream, pool *pgxpool.Pool, dbURL, bankURL, token, dir string,
	env []string, start func() (*workerproc.Proc, error), say func(string, ...any)) (*workerproc.Proc, error) {
	pub, err := sqssrc.NewPublisher(ctx, o.SQS.URL, o.SQS.Client)
	if err != nil {
		return nil, err
	}
	publish := func(lines [][]byte) error {
		for i := 0; i < len(lines); i += sqssrc.MaxReceive {
			part := lines[i:min(i+sqssrc.MaxReceive, len(lines))]
			if _, err := pub.PublishBatch(ctx, part); err != nil {
				return err
			}
			rep.Queue.Published += len(part)
		}
		return nil
	}
	if err := publish(stream.First); err != nil {
		return nil, err
	}
	say("sent %d first deliveries to the queue (SQS names each message itself)", len(stream.First))

	held, err := sqssrc.Open(ctx, sqssrc.Config{QueueURL: o.SQS.URL, Client: o.SQS.Client, Visibility: demoLease})
	if err != nil {
		return nil, err
	}
	defer held.Close()
	msgs, err := held.Fetch(ctx, heldMessages)
	fetchedAt := time.Now()
	if err != nil {
		return nil, err
	}
	rep.Queue.Held = len(msgs)
	say("a consumer received %d of them and went silent: no delete, no visibility change; their %s visibility timeout runs out", len(msgs), demoLease)

	args, srcEnv := o.SQS.workerArgs()
	first, err := o.killedAfterCommit(ctx, pool, dbURL, bankURL, token, dir, append(append([]string{}, env...), srcEnv...), args...)
	if err != nil {
		return nil, err
	}
	rep.Queue.KilledBatch = first.committed
	say("a worker (pid %d) received a batch, committed %d settlements, and was killed (SIGKILL) before deleting it",
		first.PID(), rep.Queue.KilledBatch)
	time.Sleep(time.Until(fetchedAt.Add(demoLease)))

	w, err := start()
	if err != nil {
		return nil, err
	}
	say("  worker    %s (settle worker --source sqs:…, pid %d, log %s)", w.URL(), w.PID(), w.LogPath())
	if err := publish(stream.Again); err != nil {
		return w, err
	}
	say("sent the producer's %d redeliveries and conflicting events, each a message of its own", len(stream.Again))
	rep.Submit = submit.Summary{Lines: rep.Queue.Published}
	return w, nil
}

// drainSQS waits until the demo's queue holds nothing, waiting or in
// flight: every message deleted.
func (o Options) drainSQS(ctx context.Context, rep *Report) error {
	return o.poll(ctx, "the queue to drain", func() (bool, string, error) {
		out, err := o.SQS.Client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(o.SQS.URL),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
		if err != nil {
			return false, "", fmt.Errorf("error reading the demo queue: %w", err)
		}
		num := func(n types.QueueAttributeName) uint64 {
			v, _ := strconv.ParseUint(out.Attributes[string(n)], 10, 64)
			return v
		}
		rep.Queue.Pending = num(types.QueueAttributeNameApproximateNumberOfMessages) + num(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
		rep.Queue.AwaitingAck = num(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
		return rep.Queue.Pending == 0 && rep.Queue.AwaitingAck == 0,
			fmt.Sprintf("%d waiting, %d in flight", rep.Queue.Pending, rep.Queue.AwaitingAck), nil
	})
}
