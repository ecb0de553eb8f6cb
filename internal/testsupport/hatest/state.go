package hatest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// NodeState is one data node as the monitor sees it (a row of
// pgautofailover.node, what `pg_autoctl show state --json` prints).
type NodeState struct {
	Name string
	// Reported is the state the node's pg_autoctl last reported; Goal
	// (pg_autoctl's "assigned state") the one the monitor wants it in.
	Reported, Goal string
	// Health is the monitor's health check: 1 good, 0 bad, -1 unknown.
	Health int
}

// State is every data node of the formation as the monitor sees it.
type State []NodeState

// Of returns n's state, or the zero NodeState when the monitor does not
// know it.
func (s State) Of(n *Node) NodeState {
	for _, ns := range s {
		if ns.Name == n.Name {
			return ns
		}
	}
	return NodeState{}
}

// Is reports whether n reported state and is assigned it too (the
// transition is done).
func (s State) Is(n *Node, state string) bool {
	ns := s.Of(n)
	return ns.Reported == state && ns.Goal == state
}

// String is the state as one line: node1 primary, node2 secondary→catchingup.
func (s State) String() string {
	parts := make([]string, len(s))
	for i, ns := range s {
		st := ns.Reported
		if ns.Goal != ns.Reported {
			st += "→" + ns.Goal
		}
		if ns.Health == 0 {
			st += " (unhealthy)"
		}
		parts[i] = ns.Name + " " + st
	}
	return strings.Join(parts, ", ")
}

// primaryStates are the states in which a node is the writable primary:
// single (no standby registered), wait_primary (its standby is away, so
// it commits without one), primary (with a synchronous standby).
var primaryStates = []string{"single", "wait_primary", "primary"}

// Primary returns the node the monitor holds as primary (done with its
// transition), or nil.
func (s State) Primary(f *Formation) *Node {
	for _, n := range f.Nodes {
		for _, st := range primaryStates {
			if s.Is(n, st) {
				return n
			}
		}
	}
	return nil
}

// State reads the formation's state from the monitor.
func (f *Formation) State(ctx context.Context) (State, error) {
	conn, err := pgx.Connect(ctx, f.monitorURL)
	if err != nil {
		return nil, fmt.Errorf("error connecting to the monitor: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT nodename, reportedstate::text, goalstate::text, health
		FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, fmt.Errorf("error reading the monitor's state: %w", err)
	}
	s, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
		var ns NodeState
		err := r.Scan(&ns.Name, &ns.Reported, &ns.Goal, &ns.Health)
		return ns, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading the monitor's state: %w", err)
	}
	return State(s), nil
}

// Primary returns the current primary according to the monitor, or nil
// when there is none (during a failover).
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	s, err := f.State(ctx)
	if err != nil {
		return nil, err
	}
	return s.Primary(f), nil
}

// Wait waits until cond holds for the monitor's state, re-reading it on
// every notification the monitor sends about a state change (and at least
// every half second), and returns that state; the error says how far it got
// when ctx ends first.
func (f *Formation) Wait(ctx context.Context, what string, cond func(State) bool) (State, error) {
	var last State
	var lastErr error
	for {
		s, err := f.State(ctx)
		if err == nil && cond(s) {
			return s, nil
		}
		if err == nil {
			last = s
		} else {
			lastErr = err
		}
		for _, n := range append([]*Node{f.Monitor}, f.Nodes...) {
			if n.crashed() {
				return nil, fmt.Errorf("error waiting for %s: the pg_autoctl of %s exited; see %s (last state: %v)", what, n.Name, n.LogPath(), last)
			}
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return nil, fmt.Errorf("error waiting for %s: %w (last state: %v; last error: %w)", what, ctx.Err(), last, lastErr)
			}
			return nil, fmt.Errorf("error waiting for %s: %w (last state: %v)", what, ctx.Err(), last)
		case <-f.changed:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// WaitPromoted waits until a node other than old is the primary (in
// wait_primary or primary: promoted, accepting writes) and returns it.
func (f *Formation) WaitPromoted(ctx context.Context, old *Node) (*Node, error) {
	s, err := f.Wait(ctx, "a primary other than "+old.Name, func(s State) bool {
		p := s.Primary(f)
		return p != nil && p != old
	})
	if err != nil {
		return nil, err
	}
	return s.Primary(f), nil
}

// WaitSecondary waits until n is a secondary and the other node a primary
// with it as synchronous standby again (state primary, not wait_primary),
// and returns that primary.
func (f *Formation) WaitSecondary(ctx context.Context, n *Node) (*Node, error) {
	s, err := f.Wait(ctx, n.Name+" back as the synchronous standby", func(s State) bool {
		p := s.Primary(f)
		return p != nil && p != n && s.Is(p, "primary") && s.Is(n, "secondary")
	})
	if err != nil {
		return nil, err
	}
	return s.Primary(f), nil
}

// waitMonitor waits until the monitor answers with its schema in place.
func (f *Formation) waitMonitor(ctx context.Context) error {
	var lastErr error
	for {
		conn, err := pgx.Connect(ctx, f.monitorURL)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1 FROM pgautofailover.node LIMIT 1")
			conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}
		lastErr = err
		if !f.Monitor.Running() {
			return fmt.Errorf("the monitor's pg_autoctl exited; see %s", f.Monitor.LogPath())
		}
		if sleepCtx(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("error waiting for the monitor: %w (last error: %w); see %s", ctx.Err(), lastErr, f.Monitor.LogPath())
		}
	}
}

// listen LISTENs to the monitor's state notifications until ctx ends and
// signals f.changed on each; it reconnects after an error.
func (f *Formation) listen(ctx context.Context) {
	defer close(f.listenDone)
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, f.monitorURL)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN state"); err == nil {
				for {
					if _, err = conn.WaitForNotification(ctx); err != nil {
						break
					}
					select {
					case f.changed <- struct{}{}:
					default:
					}
				}
			}
			conn.Close(context.WithoutCancel(ctx))
		}
		_ = sleepCtx(ctx, 500*time.Millisecond)
	}
}
