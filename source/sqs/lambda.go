package sqs

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/metrics"
	"github.com/settle/settle/source"
)

// LambdaKind is the source kind of `settle lambda` in intake_rejects and
// the metrics: an SQS message that reached settle through a Lambda
// function's SQS trigger rather than through its own receive.
const LambdaKind = "lambda"

// LambdaConfig configures a LambdaHandler. Intake is required.
type LambdaConfig struct {
	Intake source.Intake
	// Metrics receives the source metrics (default: registered nowhere).
	Metrics *metrics.Metrics
	// Logger receives the handler's logs (default: discarded).
	Logger *slog.Logger
	// MaxFailures is how many unexpected failures of a message, counted
	// while the function's execution environment lives, make it poison
	// (default source.DefaultMaxFailures).
	MaxFailures int
	// ReplayHorizon is the intake's replay horizon (default
	// intake.DefaultReplayHorizon).
	ReplayHorizon time.Duration
	// Now is the clock of received_at (default time.Now).
	Now func() time.Time
}

// LambdaHandler is the intake of an AWS Lambda function with an SQS
// trigger (`settle lambda`): the engine loop's record-commit-acknowledge
// over the records of one invocation instead of a receive. It is a plain
// function of an SQS event, usable without the Lambda runtime.
type LambdaHandler struct {
	loop *source.Loop
}

// NewLambdaHandler returns the handler for cfg.
func NewLambdaHandler(cfg LambdaConfig) (*LambdaHandler, error) {
	if cfg.Intake == nil {
		return nil, errors.New("error creating the lambda handler: Intake is required")
	}
	l, err := source.NewLoop(source.Config{
		Source: invocation{}, Intake: cfg.Intake, Metrics: cfg.Metrics, Logger: cfg.Logger,
		MaxFailures: cfg.MaxFailures, ReplayHorizon: cfg.ReplayHorizon, Now: cfg.Now,
		// A message given back is only named among the batch item
		// failures: Lambda returns it to the queue, whose visibility
		// timeout is the delay.
		RetryDelay: time.Second,
		// One transaction per invocation's batch (DESIGN.md section 18).
		Parallel: 1,
	})
	if err != nil {
		return nil, err
	}
	return &LambdaHandler{loop: l}, nil
}

// delivery is one record of an invocation; the loop's acknowledgement
// marks it committed.
type delivery struct{ committed bool }

// Handle records the event's messages as the loop records a fetched
// batch: in one transaction with the batch endpoint's semantics (a batch
// over intake.MaxBatch, which a trigger's batching window allows, in one
// transaction per intake.MaxBatch), rejects in intake_rejects with source
// lambda and the MessageId as transport id. It answers batchItemFailures
// naming exactly the messages whose outcome did not commit (all of them
// while the database is down), so that only those come back; the function's
// SQS trigger must report batch item failures
// (FunctionResponseTypes=ReportBatchItemFailures), or Lambda deletes the
// whole batch when the function returns. It never returns an error.
func (h *LambdaHandler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	msgs := make([]source.Message, len(ev.Records))
	for i, r := range ev.Records {
		msgs[i] = source.Message{TransportID: r.MessageId, Data: []byte(r.Body), Deliveries: 1, Handle: &delivery{}}
		if n, err := strconv.Atoi(r.Attributes["ApproximateReceiveCount"]); err == nil && n > 0 {
			msgs[i].Deliveries = n
		}
	}
	for i := 0; i < len(msgs); i += intake.MaxBatch {
		h.loop.Handle(ctx, msgs[i:min(i+intake.MaxBatch, len(msgs))])
	}
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	for _, m := range msgs {
		if !m.Handle.(*delivery).committed {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.TransportID})
		}
	}
	return resp, nil
}

// invocation is the Source the handler's loop acknowledges to: nothing is
// fetched (the records come with the invocation), an acknowledgement marks
// the messages committed, and a message given back is left unmarked.
type invocation struct{}

func (invocation) Kind() string { return LambdaKind }

func (invocation) Fetch(context.Context, int) ([]source.Message, error) { return nil, nil }

// Extend does nothing: the trigger received the messages and owns their
// visibility; the function's timeout must stay under the queue's
// visibility timeout.
func (invocation) Extend(context.Context, []source.Message) error { return nil }

func (invocation) Ack(_ context.Context, msgs []source.Message) error {
	for _, m := range msgs {
		if d, ok := m.Handle.(*delivery); ok {
			d.committed = true
		}
	}
	return nil
}

func (invocation) GiveBack(context.Context, []source.Message, time.Duration) error { return nil }

func (invocation) Lag(context.Context) (int64, error) { return 0, nil }

func (invocation) Retention(context.Context) (time.Duration, error) { return 0, nil }

func (invocation) Close() error { return nil }
