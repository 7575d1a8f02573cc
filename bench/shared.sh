#!/usr/bin/env bash
# Shared fence mode figures, each against its baseline in the same run:
#
#  1. BenchmarkSharedRepeatedToken: 0 ms upstream, PUTs with a repeated
#     token to 1,000 resources through two replicas; writes/s, database
#     round trips per write (all, and those a write waits for), and pgbench
#     running the same marker statements (try-lock and re-read pipelined,
#     then the unlock) before and after: %_of_pgbench.
#  2. BenchmarkSharedSlowUpstream: 50 ms upstream, 256 connections: two
#     shared replicas together against one local gateway (%_of_local),
#     non-2xx answers, and the most database connections of one replica.
#  3. BenchmarkSharedAdvance: every write advances its fence; writes/s and
#     round trips per write.
#  4. BenchmarkSharedPair, side by side in one run: database statements per
#     fenced write at 64 writers (pg_stat_statements, all clients); two
#     shared replicas against one local gateway at 0 ms (64 resources, each
#     with its own lease and a repeated token, 3 alternating rounds,
#     medians) and at 50 ms (256 writers; connections per replica; 2,000
#     in flight); the latency added at a constant rate (vegeta, p50/p99:
#     direct, local, shared; FENCEGATE_BENCH_RATE req/s, default 500).
#  5. BenchmarkSharedEtcd (BENCH=Etcd; not in the default run): two shared
#     replicas on a three-member etcd cluster against one local gateway at
#     0 ms (64 writers) and 50 ms (256 writers), etcd requests per write
#     counted by the replicas and from etcd's /metrics (proposals committed,
#     gRPC calls handled), the cores each side used (this process: load
#     generator, gateways, upstream; each etcd member's own process, from
#     /proc/PID/stat; the rest of the machine: whatever else runs) and
#     the CPU per write of each (_us/write); etcd's counters per write
#     (gRPC calls by method, MVCC operations, WAL fsyncs) printed per
#     phase; advances: writes/s, p50/p99, requests per write.
#     BenchmarkSharedEtcdSize (BENCH=EtcdSize): etcd's database size per
#     million fences.
#  6. BenchmarkSharedStores (BENCH=Stores; not in the default run): the
#     side by side of issue 44 in one run: one local gateway, two shared
#     replicas on PostgreSQL, two on a three-member etcd cluster, the same
#     workload (0 ms, 64 writers; 50 ms, 256 writers): writes/s and ratio
#     to local, requests and the store's own counts per write
#     (statements; raft proposals, gRPC calls), CPU per write of this
#     process and of the store's processes (PostgreSQL's postmaster and
#     backends, the etcd members), the rest of the machine's cores (other
#     jobs); then advances on each store: writes/s, p50/p99.
#
# BENCH=Pair (or any -bench pattern) runs only that part.
# Usage: bench/shared.sh [writes for 1 (default 30000)] [clients for 1 and 3 (default 16)]
# FENCEGATE_BENCH_SECONDS (default 10) is the length of each side of 2 and 3.
# FENCEGATE_BENCH_KEEP_ALIVE=1 sets upstream.keep_alive_writes on every
# route (local and shared alike); FENCEGATE_BENCH_MARKER_LINGER (a Go
# duration, negative: none) overrides the marker sessions' linger;
# FENCEGATE_BENCH_MARKER_IDLE (a Go duration) how long an idle etcd marker
# is kept (BENCH=Etcd). FENCEGATE_BENCH_CPUPROFILE=base writes a CPU
# profile of each phase, labelled by side (go tool pprof -tags: load,
# upstream, gateway, etcdclient); FENCEGATE_BENCH_ETCD_PPROF=dir starts the
# members with --enable-pprof and profiles each during the shared phases;
# FENCEGATE_BENCH_ETCD_LEADER=1 points both replicas at the leader only.
# Every benchmark with repeated tokens (PostgreSQL and etcd) writes its
# resources at random, each through one replica, and warms each shared
# side (its writes for 2 s, unmeasured) just before its phase;
# FENCEGATE_BENCH_COLD=1: no warm-up; FENCEGATE_BENCH_STRIDE=1 writes the
# resources in the bursts of the old path function (a marker taken again
# in 7 writes). FENCEGATE_BENCH_ETCD_COLD and _ETCD_STRIDE still work.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v pgbench >/dev/null || { echo "shared.sh: pgbench is missing (scripts/deps.sh installs postgresql)" >&2; exit 1; }
export FENCEGATE_BENCH_CLIENTS=${2:-16}
if [ -n "${BENCH:-}" ]; then
  go test ./bench/shared/ -run '^$' -bench "BenchmarkShared$BENCH" -benchtime 1x -count 1 -timeout 30m
  exit
fi
go test ./bench/shared/ -run '^$' -bench BenchmarkSharedRepeatedToken -benchtime "${1:-30000}x" -count 1
go test ./bench/shared/ -run '^$' -bench 'BenchmarkSharedSlowUpstream|BenchmarkSharedAdvance|BenchmarkSharedPair' -benchtime 1x -count 1 -timeout 30m
