#!/usr/bin/env bash
# The failover story, for a person to watch: a pg_auto_failover formation
# on this machine (a monitor and two PostgreSQL nodes replicating
# synchronously), two settle workers connected with a multi-host
# DATABASE_URL, a producer streaming events (and redelivering) against a
# faulty bank. The primary's machine is killed mid-stream (SIGKILL for its
# pg_autoctl and its PostgreSQL server), the monitor promotes the standby,
# the stream goes on; the old primary rejoins as the standby, and the new
# primary is killed too. Every second a line shows what the producer, the
# workers' /readyz and the monitor see; the numbers come at the end: the time
# without a primary and the 503 answers of each failover, events lost
# (must be 0) and the exactly-once invariants. It is internal/systemtest/failovertest's
# TestFailover, run verbosely. Exit status 0 when every invariant holds.
#
#   scripts/failover-demo.sh                   # two failovers, 20 events/s
#   scripts/failover-demo.sh -count 4 -rate 40 -logs /tmp/failover-logs
#
# Needs the PostgreSQL server and pg_auto_failover (Debian:
# apt-get install postgresql postgresql-15-auto-failover pg-auto-failover-cli).
# As root, PostgreSQL runs as the postgres user. Takes about a minute and a
# half; nothing is left running or on disk afterwards (-logs keeps the logs).
set -euo pipefail
cd "$(dirname "$0")/.."

count=2 rate=20 logs=
while [ $# -gt 0 ]; do
	case "$1" in
	-count) count=$2; shift 2 ;;
	-rate) rate=$2; shift 2 ;;
	-logs) logs=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "failover-demo: unknown argument $1 (see -h)" >&2; exit 2 ;;
	esac
done
if ! command -v pg_autoctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_autoctl >/dev/null 2>&1; then
	echo "failover-demo: pg_autoctl not found: apt-get install postgresql-15-auto-failover pg-auto-failover-cli" >&2
	exit 2
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
# CI=1: a missing pg_auto_failover fails instead of skipping.
CI=1 go test ./internal/systemtest/failovertest -run '^TestFailover$' -count=1 -v -timeout 15m \
	-failover.watch -failover.count "$count" -failover.rate "$rate" ${logs:+-failover.logs "$logs"} |
	sed -u -e 's/^    [a-z_]*\.go:[0-9]*: //' | tee "$out" || status=$?

echo
echo "== the numbers"
grep -E '^failover [0-9]+: ' "$out" | sort -u || true
grep -E ' acknowledged events lost' "$out" || true
if [ "$status" = 0 ]; then
	echo "every invariant held: nothing acknowledged was lost, nothing was paid twice"
else
	echo "FAILED (see above)"
fi
[ -z "$logs" ] || echo "logs of the nodes and the workers: $logs"
exit "$status"
