#!/usr/bin/env bash
# What a crash of a gateway on a local fence costs the writes that follow
# it, against a clean restart side by side in one run (bench/crash,
# BenchmarkCrashRecovery; issue 42's figure): p50/p99 of the first writes
# after (a) SIGTERM and start, (b) kill -9 with nothing in flight for the
# last second, (c) kill -9 with a write in flight, and each as a ratio to
# (a) in the same round. After (c), new resources and repeated tokens go at
# once and an advance waits for the route's timeout + 1 s (4 s here).
# docs/performance.md explains the figures.
#
# Usage: bench/crash.sh [rounds (default 3)] [count (default 1)]
# STORES: the local-fence stores, "embedded" (default), "postgres-local"
# or "embedded|postgres-local" (fence mode local on PostgreSQL; testenv
# starts a throwaway cluster, or uses DATABASE_URL's server).
# CRASHBENCH_WRITES: first writes measured per restart (default 100; then
# half as many advances). FENCEGATE=PATH: another build of fencegate (say
# main before a change; one without fencegate_recovery_wait_seconds shows
# waits -1). The date, commit and load average open and close the output.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-3}
count=${2:-1}
stores=${STORES:-embedded}
stamp() { echo "# $(date -u +%FT%TZ) $(git describe --always --dirty 2>/dev/null || echo '?') load:$(cut -d' ' -f1-3 /proc/loadavg)"; }
stamp
go test ./bench/crash -v -run '^$' -bench "^BenchmarkCrashRecovery\$/^($stores)\$" -benchtime "${rounds}x" -count "$count" -timeout 30m
stamp
