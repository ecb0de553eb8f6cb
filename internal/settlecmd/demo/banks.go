package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/settle/settle/audit"
	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/internal/settlecmd/submit"
	"github.com/settle/settle/internal/settlecmd/workerproc"
)

// SeveralBanks are the banks `settle demo --bank a,b` can run at once: those
// whose fakebank needs no signing key of the demo's.
var SeveralBanks = []string{"settle", "stripe"}

// runBanks is Run for several banks at once (Options.Bank "settle,stripe"):
// one fakebank per bank, one worker serving them all (--bank settle,stripe,
// each bank's URL in its own SETTLE_BANK_<NAME>_URL), and one stream of
// events for all of them. The first bank's events name no bank and are
// bound by the worker's --route default=<first>; the others' name theirs in
// the event's bank field. Every settlement must end terminal, paid once at
// its own bank: each bank's books are checked against that bank's
// settlements alone.
func runBanks(ctx context.Context, o Options, names []string, faults fakebank.Faults, start time.Time) (Report, error) {
	for _, n := range names {
		if !slices.Contains(SeveralBanks, n) {
			return Report{}, fmt.Errorf("the demo of several banks runs %s, not %s", strings.Join(SeveralBanks, " and "), n)
		}
	}
	if o.Source != "" {
		return Report{}, errors.New("the demo of several banks takes its events through the API, not --source")
	}
	say := func(format string, args ...any) { fmt.Fprintf(o.Out, format+"\n", args...) }
	note := func(format string, args ...any) { fmt.Fprintf(o.Err, "settle demo: "+format+"\n", args...) }

	dbURL, where, pool, err := openDemoDB(ctx, o.DatabaseURL, note)
	if err != nil {
		return Report{}, err
	}
	defer pool.Close()

	type oneBank struct {
		name   string
		server *bankServer
		stream Stream
	}
	var banks []*oneBank
	defer func() {
		for _, b := range banks {
			if err := b.server.stop(); err != nil {
				note("error stopping the %s bank: %v", b.name, err)
			}
		}
	}()
	// Returns come back after the report would be read; the demo of one
	// bank waits for them and shows them.
	faults.ReturnRate, faults.ReturnAfterMS = 0, 0
	env := []string{}
	per := max(2, o.Events/len(names))
	rep := Report{source: o.Source}
	for i, name := range names {
		srv, err := startBank(o.Seed+int64(i), faults, name, nil)
		if err != nil {
			return Report{}, err
		}
		st := generate(name, "demo-"+name+"-", i > 0, per, o.Seed+int64(i), time.Now())
		banks = append(banks, &oneBank{name: name, server: srv, stream: st})
		env = append(env, "SETTLE_BANK_"+strings.ToUpper(name)+"_URL="+srv.url)
		rep.Events += st.Total()
		rep.Settlements += len(st.First)
		rep.Redeliveries += st.Redeliveries
		rep.Conflicts += st.Conflicts
	}

	dir, err := os.MkdirTemp("", "settle-demo-")
	if err != nil {
		return Report{}, fmt.Errorf("error creating the demo's log directory: %w", err)
	}
	token := randomToken()
	worker, err := workerproc.Start(ctx, workerproc.Options{
		Executable:  o.Executable,
		Name:        "the worker",
		DatabaseURL: dbURL,
		LogPath:     filepath.Join(dir, "worker.log"),
		Env:         append([]string{"SETTLE_API_TOKEN=" + token}, env...),
		Args: append([]string{"--bank", strings.Join(names, ","), "--route", "default=" + names[0]},
			workerFlags...),
		KeepSettleEnv: []string{"SETTLE_HOME", "SETTLE_PG_BINDIR"},
		DieWithParent: true,
	})
	if err != nil {
		return Report{}, err
	}
	defer func() {
		if err := worker.Stop(workerStopTimeout); err != nil {
			note("worker: %v (log: %s)", err, worker.LogPath())
		} else if rep.OK() && !o.Keep {
			_ = os.RemoveAll(dir)
		}
	}()

	say("settle demo: %d payout events for %d settlements at %d banks at once (%d redeliveries, %d conflicting), bank profile %q",
		rep.Events, rep.Settlements, len(names), rep.Redeliveries, rep.Conflicts, o.Faults)
	say("  database  %s", where)
	for i, b := range banks {
		how := "events name it in their \"bank\" field"
		if i == 0 {
			how = "events name no bank: --route default=" + b.name
		}
		say("  bank      %-7s %s (fakebank in-process, %s profile; %s)", b.name, b.server.url, b.name, how)
	}
	say("  worker    %s (settle worker --bank %s, pid %d, log %s)", worker.URL(), strings.Join(names, ","), worker.PID(), worker.LogPath())
	say("")

	// Every bank's first deliveries, interleaved, then every redelivery
	// and conflict.
	var first, again [][]byte
	for k := 0; ; k++ {
		more := false
		for _, b := range banks {
			if k < len(b.stream.First) {
				first, more = append(first, b.stream.First[k]), true
			}
		}
		if !more {
			break
		}
	}
	for _, b := range banks {
		again = append(again, b.stream.Again...)
	}
	bar := o.bar(rep.Events, "submitting")
	sopts := submit.Options{URL: worker.URL(), Token: token, Concurrency: 16, OnResult: func(submit.Result) { bar.Add(1) }}
	s1, err := submit.Run(ctx, bytes.NewReader(NDJSON(first)), sopts)
	if err != nil {
		return rep, fmt.Errorf("error submitting the events: %w", err)
	}
	s2, err := submit.Run(ctx, bytes.NewReader(NDJSON(again)), sopts)
	if err != nil {
		return rep, fmt.Errorf("error submitting the redeliveries: %w", err)
	}
	bar.Finish()
	rep.Submit = merge(s1, s2)
	say("submitted %d events through the API: %d created, %d replayed, %d conflict, %d invalid, %d without an answer",
		rep.Submit.Lines, rep.Submit.Created, rep.Submit.Replayed, rep.Submit.Conflict, rep.Submit.Invalid, rep.Submit.Errors)
	fail := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	if s := rep.Submit; s.Created != rep.Settlements || s.Replayed != rep.Redeliveries || s.Conflict != rep.Conflicts || s.Invalid != 0 || s.Errors != 0 {
		fail("submit counted %d created, %d replayed, %d conflict, %d invalid, %d errors; expected %d, %d, %d, 0, 0",
			s.Created, s.Replayed, s.Conflict, s.Invalid, s.Errors, rep.Settlements, rep.Redeliveries, rep.Conflicts)
	}
	if err := o.waitTerminal(ctx, pool, rep.Settlements); err != nil {
		if !errors.Is(err, errTimeout) {
			return rep, err
		}
		rep.Violations = append(rep.Violations, err.Error())
	}

	// Each bank: its settlements, its books, its reconciliation, and the
	// invariants checked against its books for its settlements alone.
	say("")
	say("%-8s %12s %10s %8s %9s %10s %9s %14s", "bank", "settlements", "confirmed", "failed", "returned", "payments", "matched", "discrepancies")
	for _, b := range banks {
		if err := b.server.bank.SetFaults(fakebank.Faults{SettleDelayMS: faults.SettleDelayMS}); err != nil {
			return rep, fmt.Errorf("error calming the %s bank: %w", b.name, err)
		}
		conn, err := o.Connectors.Lookup(b.name)
		if err != nil {
			return rep, err
		}
		client, err := conn.New(b.server.url, bankclient.Options{})
		if err != nil {
			return rep, err
		}
		var total, confirmed, failed, returned, wrong int64
		if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'confirmed'),
			count(*) FILTER (WHERE state = 'failed'), count(*) FILTER (WHERE state = 'returned'),
			count(*) FILTER (WHERE settlement_id NOT LIKE $2)
			FROM settlements WHERE bank = $1`, b.name, "demo-"+b.name+"-%").Scan(&total, &confirmed, &failed, &returned, &wrong); err != nil {
			return rep, fmt.Errorf("error counting the %s bank's settlements: %w", b.name, err)
		}
		if int(total) != len(b.stream.First) || wrong != 0 {
			fail("bank %s holds %d settlements (%d of another bank's stream), want %d", b.name, total, wrong, len(b.stream.First))
		}
		var br audit.BankReport
		counts, err := (&audit.BankReporter{DB: pool, Bank: client, BankName: b.name}).Run(ctx, &br)
		if err != nil {
			return rep, fmt.Errorf("error reconciling with the %s bank: %w", b.name, err)
		}
		if counts.Discrepancies() != 0 {
			fail("bank %s: %d discrepancies between the ledger and its books", b.name, counts.Discrepancies())
		}
		st := b.server.bank.Stats()
		if st.MaxPaymentsPerReference > 1 || st.MaxExecutionsPerKey > 1 {
			fail("bank %s paid a settlement more than once", b.name)
		}
		e := audit.Expect{First: map[string]audit.Payload{}, CheckBank: true, Recovered: true, Bank: b.name}
		for id, amount := range b.stream.Amounts {
			e.First[id] = audit.Payload{AmountCents: amount}
			e.Delivered = append(e.Delivered, id)
		}
		if e.Payments, err = bankclient.AllPayments(ctx, client); err != nil {
			return rep, fmt.Errorf("error reading the %s bank's books: %w", b.name, err)
		}
		v, err := audit.CheckInvariants(ctx, pool, e)
		if err != nil {
			return rep, err
		}
		rep.Violations = append(rep.Violations, v...)
		say("%-8s %12d %10d %8d %9d %10d %9d %14d", b.name, total, confirmed, failed, returned, counts.BankPayments,
			counts.ByClass[audit.ClassMatched], counts.Discrepancies())
	}

	// A few settlements of each bank, as settle reconcile list shows them.
	say("")
	say("each settlement's bank (a few of each; settle reconcile list --state confirmed --bank NAME shows them all):")
	rows, err := pool.Query(ctx, `SELECT settlement_id, bank, state, amount_cents, currency FROM (
		SELECT *, row_number() OVER (PARTITION BY bank ORDER BY settlement_id) AS k FROM settlements) s
		WHERE k <= 3 ORDER BY bank, settlement_id`)
	if err != nil {
		return rep, fmt.Errorf("error listing settlements: %w", err)
	}
	var id, bank, state, currency string
	var amount int64
	_, err = pgx.ForEachRow(rows, []any{&id, &bank, &state, &amount, &currency}, func() error {
		say("  %-18s bank %-7s %-10s %d %s (minor units)", id, bank, state, amount, currency)
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("error listing settlements: %w", err)
	}
	rep.Duration = time.Since(start)
	say("")
	if rep.OK() {
		say("every settlement paid exactly once, at its own bank; each bank's books hold its settlements only (%s)", rep.Duration.Round(time.Millisecond))
	} else {
		say("VIOLATIONS:")
		for _, v := range rep.Violations {
			say("  %s", v)
		}
	}
	if o.Keep {
		say("")
		say("Still running (Ctrl-C to stop):")
		say("  console    %s/console/   (user: your name, password: %s)", worker.URL(), token)
		for _, b := range banks {
			say("  reconcile  DATABASE_URL='%s' settle reconcile bank --bank %s --bank-url %s", dbURL, b.name, b.server.url)
		}
		<-ctx.Done()
	}
	return rep, nil
}
