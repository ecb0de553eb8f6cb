package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/events"
	"github.com/settle/settle/inspect"
	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/settlement"
)

const eventsDescription = `
Inspects and redelivers the outcome events (DESIGN.md section 19): one per
transition, flag and receipt conflict, delivered by the workers to each
--events-url, at least once and in each settlement's order.

  settle events list [--settlement ID] [--undelivered] [--dead] [--json]
      the events, oldest first, with their delivery at each sink
  settle events redeliver EVENT_ID | --settlement ID | --dead
      queue events again at every sink (an operator action, recorded)
  settle events sinks [--json]
      every sink events were queued for: whether a worker relays to it,
      and its pending, dead and delivered counts
  settle events forget-sink URL [--force]
      the end of a sink taken out of every worker's --events-url: its
      pending and dead deliveries are dropped and nothing is queued for it
      any more (an operator action, recorded)`

func cmdEvents(ctx context.Context, args []string, s Stdio) int {
	return (&eventsCmd{s: s}).run(ctx, args)
}

// eventsCmd carries what the forms share. dbURL, when set, is used
// instead of DATABASE_URL or the embedded default (tests set it).
type eventsCmd struct {
	s     Stdio
	dbURL string
}

func (c *eventsCmd) run(ctx context.Context, args []string) int {
	return runForms(ctx, c.s, "events", eventsDescription, args, []subForm{
		{"list", c.list}, {"redeliver", c.redeliver}, {"sinks", c.sinks}, {"forget-sink", c.forgetSink},
	})
}

func (c *eventsCmd) open(ctx context.Context, form string) *pgxpool.Pool {
	s := c.s
	pool, err := connect(ctx, s, c.dbURL, database.PoolOptions{MaxConns: 2, ApplicationName: "settle events"})
	if err != nil {
		fmt.Fprintf(s.Err, "settle events %s: %v\n", form, err)
	}
	return pool
}

func (c *eventsCmd) list(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("events list", "[flags]", `
Lists outcome events, oldest first, with the state of their delivery at
each sink (pending, delivered, dead), the attempts made and the last HTTP
status. Exit 0 when it ran.`, s)
	var f events.Filter
	fs.StringVar(&f.SettlementID, "settlement", "", "only this settlement's events")
	fs.BoolVar(&f.Undelivered, "undelivered", false, "only events not yet delivered to every sink")
	fs.BoolVar(&f.Dead, "dead", false, "only events a sink gave up on (dead)")
	fs.IntVar(&f.Limit, "limit", 1000, "at most this many events")
	asJSON := fs.Bool("json", false, `print {"events":[{"event_id","settlement_id","type","created_at","deliveries":[{"sink","state","attempts","last_status"}]}],"count":n}`)
	_, code, done := parseAtMost(fs, args, 0)
	if done {
		return code
	}
	list, ok := query(ctx, fs, c.open, func(pool *pgxpool.Pool) ([]events.Listed, error) { return events.List(ctx, pool, f) })
	if !ok {
		return exitError
	}
	out := bufio.NewWriter(s.Out)
	defer out.Flush()
	if *asJSON {
		type delivery struct {
			Sink       string `json:"sink"`
			State      string `json:"state"`
			Attempts   int    `json:"attempts"`
			LastStatus *int   `json:"last_status"`
			LastError  string `json:"last_error,omitempty"`
		}
		type event struct {
			EventID      string     `json:"event_id"`
			SettlementID string     `json:"settlement_id"`
			Type         string     `json:"type"`
			CreatedAt    time.Time  `json:"created_at"`
			Deliveries   []delivery `json:"deliveries"`
		}
		evs := make([]event, len(list))
		for i, l := range list {
			evs[i] = event{EventID: l.EventID, SettlementID: l.SettlementID, Type: l.Type, CreatedAt: l.CreatedAt, Deliveries: []delivery{}}
			for _, d := range l.Deliveries {
				evs[i].Deliveries = append(evs[i].Deliveries, delivery{d.Sink, d.State, d.Attempts, d.LastStatus, d.LastError})
			}
		}
		enc := json.NewEncoder(out)
		if err := enc.Encode(map[string]any{"events": evs, "count": len(evs)}); err != nil {
			fmt.Fprintf(s.Err, "settle events list: %v\n", err)
			return exitError
		}
		return exitOK
	}
	tb := newBlockTable(out, "CREATED\tEVENT\tTYPE\tSINK\tSTATE\tATTEMPTS\tLAST")
	for _, l := range list {
		if len(l.Deliveries) == 0 {
			_ = tb.row("%s\t%s\t%s\t-\t-\t-\t-\n", l.CreatedAt.UTC().Format(time.RFC3339), l.EventID, l.Type)
			continue
		}
		for _, d := range l.Deliveries {
			last := "-"
			switch {
			case d.LastStatus != nil:
				last = fmt.Sprint(*d.LastStatus)
			case d.LastError != "":
				last = d.LastError
			}
			_ = tb.row("%s\t%s\t%s\t%s\t%s\t%d\t%s\n", l.CreatedAt.UTC().Format(time.RFC3339), l.EventID, l.Type, d.Sink, d.State, d.Attempts, last)
		}
	}
	if err := tb.flush(); err != nil {
		fmt.Fprintf(s.Err, "settle events list: %v\n", err)
		return exitError
	}
	fmt.Fprintf(out, "%d event(s)\n", len(list))
	return exitOK
}

func (c *eventsCmd) redeliver(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("events redeliver", "EVENT_ID | --settlement ID | --dead", `
Queues outcome events again at every sink the workers deliver to: their
deliveries become pending, due now, with a fresh retry window (a receiver
deduplicating by webhook-id ignores what it already has). One event by
its id, every event of a settlement, or every delivery marked dead. It is
an operator action, recorded on each settlement's story with --operator.`, s)
	var t events.Target
	fs.StringVar(&t.SettlementID, "settlement", "", "every event of this settlement")
	fs.BoolVar(&t.Dead, "dead", false, "every delivery marked dead")
	operator := fs.String("operator", os.Getenv("USER"), "your name, recorded with the action (default $USER)")
	pos, code, done := parseAtMost(fs, args, 1)
	if done {
		return code
	}
	if len(pos) == 1 {
		t.EventID = pos[0]
	}
	if strings.TrimSpace(*operator) == "" {
		*operator = "cli"
	}
	pool := c.open(ctx, "redeliver")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	what := "every dead delivery"
	switch {
	case t.EventID != "":
		what = "event " + t.EventID
	case t.SettlementID != "":
		what = "every event of the settlement"
	}
	now := time.Now()
	settlements, n, code := recordEach(ctx, s, pool, "redeliver",
		inspect.OperatorAction{Operator: *operator, Action: inspect.OperatorRedeliver, Detail: "redeliver " + what, OK: true, At: now},
		"%d deliveries queued again", func(tx pgx.Tx) ([]events.Redelivered, error) { return events.Redeliver(ctx, tx, t, now) },
		func(r events.Redelivered) (string, int) { return r.SettlementID, r.Deliveries })
	if code != exitOK {
		return code
	}
	fmt.Fprintf(s.Out, "%d deliveries of %d settlement(s) queued again\n", n, settlements)
	return exitOK
}

// recordEach runs do, an operator action, in one transaction, and
// records a on the story of each settlement do returns: of says its id
// and how many deliveries the action changed, which result words. A
// failure is one line of form on s.Err, and its exit code exitFindings
// for an unknown settlement, exitError otherwise; else the code is exitOK
// with the number of settlements and of their deliveries.
func recordEach[T any](ctx context.Context, s Stdio, pool *pgxpool.Pool, form string, a inspect.OperatorAction, result string,
	do func(tx pgx.Tx) ([]T, error), of func(T) (settlementID string, deliveries int)) (settlements, deliveries, code int) {
	var done []T
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if done, err = do(tx); err != nil {
			return err
		}
		for _, d := range done {
			var n int
			a.SettlementID, n = of(d)
			a.Result = fmt.Sprintf(result, n)
			if _, err := inspect.RecordAction(ctx, tx, a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(s.Err, "settle events %s: %v\n", form, err)
		if errors.Is(err, settlement.ErrNotFound) {
			return 0, 0, exitFindings
		}
		return 0, 0, exitError
	}
	for _, d := range done {
		_, n := of(d)
		deliveries += n
	}
	return len(done), deliveries, exitOK
}

func (c *eventsCmd) sinks(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("events sinks", "[--json]", `
Lists every sink outcome events were queued for, with when a worker last
registered it (workers do every 30s while they relay to it), whether one
still does, and its deliveries: pending, dead, delivered, and the age of
the oldest pending. A sink no worker relays to any more keeps its pending
deliveries (and the settle_events_pending metrics count them) until it is
configured again or forgotten (settle events forget-sink). Exit 0 when it
ran.`, s)
	asJSON := fs.Bool("json", false, `print {"sinks":[{"sink","created_at","seen_at","relayed","forgotten_at","forgotten_by","pending","dead","delivered","oldest_pending"}],"count":n}`)
	_, code, done := parseAtMost(fs, args, 0)
	if done {
		return code
	}
	list, ok := query(ctx, fs, c.open, func(pool *pgxpool.Pool) ([]events.SinkInfo, error) { return events.Sinks(ctx, pool) })
	if !ok {
		return exitError
	}
	now := time.Now()
	out := bufio.NewWriter(s.Out)
	defer out.Flush()
	if *asJSON {
		type sink struct {
			events.SinkInfo
			Relayed bool `json:"relayed"`
		}
		l := make([]sink, len(list))
		for i, k := range list {
			l[i] = sink{k, k.Relayed(now, events.SinkIdle)}
		}
		if err := json.NewEncoder(out).Encode(map[string]any{"sinks": l, "count": len(l)}); err != nil {
			fmt.Fprintf(s.Err, "settle events sinks: %v\n", err)
			return exitError
		}
		return exitOK
	}
	tb := newBlockTable(out, "SINK\tRELAYED\tPENDING\tDEAD\tDELIVERED\tOLDEST PENDING")
	for _, k := range list {
		relayed := "yes"
		switch {
		case k.ForgottenAt != nil:
			relayed = fmt.Sprintf("forgotten by %s at %s", k.ForgottenBy, k.ForgottenAt.UTC().Format(time.RFC3339))
		case k.SeenAt == nil:
			relayed = "never registered"
		case !k.Relayed(now, events.SinkIdle):
			relayed = fmt.Sprintf("no (by no worker since %s)", k.SeenAt.UTC().Format(time.RFC3339))
		}
		oldest := "-"
		if k.OldestPending != nil {
			oldest = now.Sub(*k.OldestPending).Round(time.Second).String()
		}
		_ = tb.row("%s\t%s\t%d\t%d\t%d\t%s\n", k.Sink, relayed, k.Pending, k.Dead, k.Delivered, oldest)
	}
	if err := tb.flush(); err != nil {
		fmt.Fprintf(s.Err, "settle events sinks: %v\n", err)
		return exitError
	}
	fmt.Fprintf(out, "%d sink(s)\n", len(list))
	return exitOK
}

func (c *eventsCmd) forgetSink(ctx context.Context, args []string) int {
	s := c.s
	fs := newFlagSet("events forget-sink", "URL [--force]", `
Ends a sink taken out of every worker's --events-url (or --events-publish):
its pending and dead deliveries are dropped (their attempts stay on each
settlement's story), nothing is queued for it from now on, and the events
delivered there may be pruned. Without it they would wait for ever and
hold the settle_events_pending metrics up. Refused while a worker still
registers the sink (within the last 2m) unless --force; a worker started
later with it configured takes it back, and says so. URL is the sink as
settle events sinks prints it. It is an operator action, recorded on each
settlement that had an undelivered event there, with --operator.`, s)
	force := fs.Bool("force", false, "forget it even though a worker registered it within the last 2m")
	operator := fs.String("operator", os.Getenv("USER"), "your name, recorded with the action (default $USER)")
	pos, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(s.Err, "settle events forget-sink: want one sink (as settle events sinks prints it), got %q\n", pos)
		return exitError
	}
	if strings.TrimSpace(*operator) == "" {
		*operator = "cli"
	}
	sink := pos[0]
	pool := c.open(ctx, "forget-sink")
	if pool == nil {
		return exitError
	}
	defer pool.Close()
	now := time.Now()
	settlements, n, code := recordEach(ctx, s, pool, "forget-sink",
		inspect.OperatorAction{Operator: *operator, Action: inspect.OperatorForgetSink, Detail: "forget sink " + sink, OK: true, At: now},
		"%d undelivered deliveries dropped", func(tx pgx.Tx) ([]events.Forgotten, error) {
			return events.ForgetSink(ctx, tx, sink, *operator, now, *force)
		}, func(f events.Forgotten) (string, int) { return f.SettlementID, f.Deliveries })
	if code != exitOK {
		return code
	}
	fmt.Fprintf(s.Out, "sink %s forgotten: %d undelivered deliveries of %d settlement(s) dropped\n", sink, n, settlements)
	return exitOK
}
