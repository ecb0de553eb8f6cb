package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/intake"
	"github.com/settle/settle/internal/cli"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/jobs"
	"github.com/settle/settle/source"
	sqssrc "github.com/settle/settle/source/sqs"
)

const lambdaDescription = `
Runs settle's intake as the handler of an AWS Lambda function with an SQS
trigger (DESIGN.md section 18): the serverless shape of --source sqs. Each
invocation's batch of messages, each holding one event (the JSON of POST
/v1/settlements), is recorded in one transaction with the batch endpoint's
semantics, as a worker records a fetched batch; events that can never be
accepted are kept in intake_rejects with source lambda and their MessageId
(settle reconcile rejects), and a message failing --source-max-failures times
for an unexpected reason is kept there as poison. The answer names in
batchItemFailures exactly the messages whose outcome did not commit (all of
them while the database is down), so only those come back.

Configure the trigger with FunctionResponseTypes=ReportBatchItemFailures:
without it Lambda deletes the whole batch whenever the function returns. Keep
the function's timeout under the queue's visibility timeout, and a batch at
most 1000 messages to keep one transaction per invocation (a larger one is
recorded 1000 at a time). Only intake runs here: sending to the bank, status
checks and returns need a long-running settle worker on the same database
(with or without --source). Run settle migrate before the first invocation.

DATABASE_URL is required (there is no embedded database in a function); use
a pooler such as RDS Proxy or PgBouncer when many instances run at once. The
binary can be the function's bootstrap itself (runtime provided.al2023): run
with no arguments inside Lambda (AWS_LAMBDA_RUNTIME_API set) it is settle
lambda. Every flag can also be set through SETTLE_<FLAG>
(SETTLE_ROUTE=USD=stripe).

Exit status: 2 when it cannot start (outside Lambda, bad flags, no database).`

// cmdLambda runs `settle lambda`.
func cmdLambda(ctx context.Context, args []string, s Stdio) int {
	fs := newFlagSet("lambda", "[flags]", lambdaDescription, s)
	var bankNames []string
	fs.Func("bank", "the bank connectors events are bound to, as the worker's --bank: "+connectorNames()+" (default settle); comma-separated or repeated", func(v string) error {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				bankNames = append(bankNames, name)
			}
		}
		return nil
	})
	var routes intake.Routes
	fs.Var(&routes, "route", "CURRENCY=BANK or default=BANK, as the worker's --route")
	var ceilings intake.MaxAmounts
	fs.Var(&ceilings, "max-amount", "CCY=N, as the worker's --max-amount")
	fundsCheck := fs.Bool("funds-check", false, "refuse a payout its account's available balance does not cover, as the worker's --funds-check (recorded as the receipt's outcome; the message is acknowledged)")
	replayHorizon := fs.Duration("replay-horizon", intake.DefaultReplayHorizon, "refuse events whose occurred_at is older than this (rejected)")
	pendingGrace := fs.Duration("pending-grace", time.Minute, "how long a new settlement waits for its send job before the worker's sweep checks it")
	maxFailures := fs.Int("source-max-failures", source.DefaultMaxFailures, "unexpected failures of a message, within one execution environment, after which it is rejected as poison")
	dbMaxConns := fs.Int("db-max-conns", 2, "connections in the database pool of one execution environment")
	logFormat := fs.String("log-format", "json", "log format: text, json or auto")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(s.Err, "settle lambda: %v\n", err)
		return exitError
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		return fail(errors.New("not inside AWS Lambda (AWS_LAMBDA_RUNTIME_API is unset): settle lambda is a function's handler; use settle worker --source sqs:QUEUE_URL to consume a queue from a server"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fail(fmt.Errorf("invalid --log-level %q", *logLevel))
	}
	logger, err := cli.NewLogger(s.Err, *logFormat, level)
	if err != nil {
		return fail(err)
	}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return fail(errors.New("DATABASE_URL is required: a function has no embedded database"))
	}
	db, err := database.Open(ctx, database.Config{URL: url, Pool: database.PoolOptions{MaxConns: int32(max(*dbMaxConns, 1)), ApplicationName: "settle-lambda"}})
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	pool := db.Pool
	h, err := newLambdaHandler(pool, lambdaOptions{banks: bankNames, routes: routes, ceilings: ceilings, fundsCheck: *fundsCheck, replayHorizon: *replayHorizon,
		pendingGrace: *pendingGrace, maxFailures: *maxFailures, logger: logger})
	if err != nil {
		return fail(err)
	}
	logger.Info("settle lambda: ready for SQS events", "banks", bankNames)
	lambda.StartWithOptions(h.Handle, lambda.WithContext(ctx))
	return exitOK
}

// lambdaOptions configure newLambdaHandler.
type lambdaOptions struct {
	banks         []string
	routes        intake.Routes
	ceilings      intake.MaxAmounts
	fundsCheck    bool
	replayHorizon time.Duration
	pendingGrace  time.Duration
	maxFailures   int
	logger        *slog.Logger
}

// newLambdaHandler assembles the handler on pool: the intake service (with
// River's insert-only client for the send jobs) as the worker builds it.
func newLambdaHandler(pool *pgxpool.Pool, o lambdaOptions) (*sqssrc.LambdaHandler, error) {
	if len(o.banks) == 0 {
		o.banks = []string{settle.Connector.Name}
	}
	known := connectors()
	var conns []bankclient.Connector
	for _, name := range o.banks {
		c, err := known.Lookup(name)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return nil, fmt.Errorf("error creating the River client: %w", err)
	}
	svc, err := intake.NewService(intake.Config{DB: pool, Jobs: jobs.Inserter{Client: client}, ReplayHorizon: o.replayHorizon,
		PendingGrace: o.pendingGrace, Banks: conns, Connectors: known, Routes: o.routes, MaxAmounts: o.ceilings, FundsCheck: o.fundsCheck})
	if err != nil {
		return nil, err
	}
	return sqssrc.NewLambdaHandler(sqssrc.LambdaConfig{Intake: svc, Logger: o.logger, MaxFailures: o.maxFailures, ReplayHorizon: o.replayHorizon})
}
