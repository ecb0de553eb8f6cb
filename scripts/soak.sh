#!/usr/bin/env bash
# Soak test: two settle workers, fakebank with faults and a steady event
# stream for a while (default 10 minutes), sampling goroutines, RSS, open
# file descriptors, threads, database connections and River's queue depth;
# fails (exit 1) when one grows without bound or an invariant breaks.
# Not part of `go test ./...`.
#
#   scripts/soak.sh                      # 10 minutes, 20 events/s
#   scripts/soak.sh -duration 5m -rate 10 -json /tmp/soak.json
#
# Flags are those of internal/systemtest/soak (go run ./internal/systemtest/soak -h).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/settle" ./cmd/settle
go build -o "$dir/soak" ./internal/systemtest/soak
"$dir/soak" -bin "$dir/settle" "$@"
