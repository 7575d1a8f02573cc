#!/usr/bin/env bash
# Lease coordinator throughput and latency on PostgreSQL, beside pgbench
# running the same SQL (adapters/postgres AcquireRaiseSQL or AcquireSQL and
# the fence's advance, ReleaseSQL, NotifySQL, RenewSQL) on the same database
# in the same run; prints the ratio to pgbench (goal: at least 70%) and the
# CPU per op of each process (load generator, coordinator, PostgreSQL, rest).
# The HTTP runners call the code of `fencegate serve` (coordinator only) in a
# process of its own. See bench/cmd/leasebench for what each runner measures.
#
# Uses DATABASE_URL if set (a database is created on that server and dropped
# afterwards); otherwise starts a throwaway cluster the way internal/testenv
# does (initdb as the postgres user into /tmp, 127.0.0.1 only, fsync on,
# synchronous_commit on) and removes it at exit.
#
# Usage: bench/coordinator.sh [seconds per run (default 10)] [clients (default 16)] [rounds (default 3)]
# LEASEBENCH_FLAGS adds flags of bench/cmd/leasebench: "-mode local" (fence on
# issuance as a transaction of its own, the path before the acquire statement
# raised the fence; default shared), "-coordprofile /tmp/coord.out" (CPU
# profile of the coordinator process), "-cpuprofile /tmp/cpu.out" (of the
# load generator).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-10}
clients=${2:-16}
rounds=${3:-3}

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
pgbench=${bin:+$bin/}pgbench
command -v "$pgbench" >/dev/null || { echo "coordinator.sh: pgbench is missing (scripts/deps.sh installs postgresql)" >&2; exit 1; }

work=$(mktemp -d /tmp/fencegate-bench-XXXXXX)
cleanup() {
  if [ -f "$work/data/postmaster.pid" ]; then
    as_pg "$bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ -z "${DATABASE_URL:-}" ]; then
  [ -n "$bin" ] || { echo "coordinator.sh: PostgreSQL is missing (scripts/deps.sh) and DATABASE_URL is not set" >&2; exit 1; }
  [ "$(id -u)" = 0 ] && chown postgres "$work"
  as_pg "$bin/initdb" -D "$work/data" -U postgres -A trust -E UTF8 --no-locale --no-sync >"$work/initdb.log"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  as_pg "$bin/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w \
    -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work -c max_connections=200 -c fsync=on -c synchronous_commit=on" \
    start >/dev/null
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "coordinator.sh: throwaway PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port"
fi
cd "$root"
go build -o "$work/leasebench" ./bench/cmd/leasebench
"$work/leasebench" -url "$DATABASE_URL" -clients "$clients" -duration "${secs}s" -rounds "$rounds" -pgbench "$pgbench" ${LEASEBENCH_FLAGS:-}
