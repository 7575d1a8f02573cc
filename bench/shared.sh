#!/usr/bin/env bash
# Shared fence mode throughput: PUTs with a repeated token to 1,000 resources
# at random through two gateway replicas (each with its own pool, as two
# processes would have) over one PostgreSQL, the database round trips per
# write (counted by the fence), and pgbench running the same marker
# statements (one pipeline + COMMIT) against the same database, same
# machine, same run, before and after the gateways. Reports writes/s,
# roundtrips/write, pgbench_tps and %_of_pgbench.
#
# Usage: bench/shared.sh [writes (default 30000)] [clients (default 16)]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v pgbench >/dev/null || { echo "shared.sh: pgbench is missing (scripts/deps.sh installs postgresql)" >&2; exit 1; }
FENCEGATE_BENCH_CLIENTS=${2:-16} go test ./bench/shared/ -run '^$' -bench BenchmarkSharedRepeatedToken -benchtime "${1:-30000}x" -count 1
