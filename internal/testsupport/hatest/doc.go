// Package hatest runs a pg_auto_failover formation on one machine for tests
// and demonstrations of settle's high availability (DESIGN.md section 17): a
// monitor and two PostgreSQL data nodes with synchronous replication, each
// driven by `pg_autoctl` in the foreground as a child process of the caller,
// on free loopback ports, in a temporary directory, as the unprivileged
// postgres user when running as root.
//
// The formation keeps pg_auto_failover's number_sync_standbys at 0, the only
// value it accepts with a single standby ("1" needs two): with the standby
// in replication quorum that makes the primary's synchronous_standby_names
// "ANY 1 (standby)", so a commit waits for the standby. The monitor checks
// health more often than by default (see monitorSettings), so a failover
// takes seconds rather than a minute.
//
// It can kill a node as a crashed machine dies (SIGKILL to its pg_autoctl and
// every process of its PostgreSQL server), restart it so that it rejoins as a
// standby, and wait, on the monitor's state (its pgautofailover schema,
// woken by the monitor's notifications), until a standby was promoted or a
// node is back as a synchronous standby.
//
// It owns only test machinery: nothing in settle's binaries may import it.
// Whatever happens, nothing it starts outlives its caller: Close stops the
// formation and removes its directory, and a watchdog process does the same
// if the caller dies first.
package hatest
