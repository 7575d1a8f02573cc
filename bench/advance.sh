#!/usr/bin/env bash
# Advances against repeated tokens over real sockets: fencegate (local mode,
# embedded store) in front of a fast upstream, loaded by wrk with PUTs that
#   repeated  repeat token 42 on one resource (no store I/O)
#   advance   go to a new resource every time (each a durable advance: the
#             fence record is fsynced before the write is forwarded, I3)
# Rounds alternate. From the gateway's metrics it prints the store's commits
# per second (two fdatasyncs each) and writes per commit.
# BASE=/path/to/an/older/fencegate runs that binary alongside, for before/after.
#
# Usage: bench/advance.sh [seconds per run (default 10)] [rounds (default 3)] [connections (default 32)]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
secs=${1:-10}
rounds=${2:-3}
conns=${3:-32}
needs advance.sh wrk
build benchupstream
up=$(port)
"$work/benchupstream" -listen "127.0.0.1:$up" & pids+=($!)
targets=(new)
[ -n "${BASE:-}" ] && targets+=(base)
declare -A gwport admport
for t in "${targets[@]}"; do
  gwport[$t]=$(port); admport[$t]=$(port)
  mkdir -p "$work/$t"
  cat >"$work/$t/fencegate.yaml" <<YAML
gateway:
  listen: 127.0.0.1:${gwport[$t]}
  routes:
    - name: bench
      match: {path_prefix: /}
      upstream: {url: "http://127.0.0.1:$up"}
      resource: "{path}"
store:
  embedded: {path: $work/$t/fencegate.db}
admin: {listen: 127.0.0.1:${admport[$t]}}
log: {level: error}
YAML
  bin="$work/fencegate"
  [ "$t" = base ] && bin=$BASE
  "$bin" serve -c "$work/$t/fencegate.yaml" & pids+=($!)
done
for t in "${targets[@]}"; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/${gwport[$t]}) 2>/dev/null && break; sleep 0.05; done
  curl -fsS -X PUT -H 'Fencing-Token: 42' --data x "http://127.0.0.1:${gwport[$t]}/orders/7" >/dev/null
done

cat >"$work/put.lua" <<'LUA'
local n, prefix = 0, os.getenv("PREFIX")
request = function()
  local path = "/orders/7"
  if prefix and prefix ~= "" then n = n + 1; path = prefix .. n end
  return wrk.format("PUT", path, {["Fencing-Token"] = "42"}, '{"status":"shipped"}')
end
LUA

commits() { # target -> "commits changes" (0 0 without the metrics)
  curl -fsS "http://127.0.0.1:${admport[$1]}/metrics" 2>/dev/null | awk '
    /^fencegate_store_commits_total/ {c=$2} /^fencegate_store_commit_changes_total/ {n=$2}
    END {printf "%d %d\n", c, n}' || echo "0 0"
}
run() { # target kind round
  local prefix="" before after
  [ "$2" = advance ] && prefix="/new/$3/"
  before=$(commits "$1")
  PREFIX=$prefix wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$work/put.lua" "http://127.0.0.1:${gwport[$1]}" >"$work/$1.$2.$3.txt"
  after=$(commits "$1")
  local rps p99
  rps=$(awk '/^Requests\/sec/ {print $2}' "$work/$1.$2.$3.txt")
  p99=$(awk '$1=="99%" {print $2}' "$work/$1.$2.$3.txt")
  read -r c0 n0 <<<"$before"; read -r c1 n1 <<<"$after"
  echo "$1 $2 $rps $p99 $(( (c1 - c0) )) $(( (n1 - n0) ))" >>"$work/results"
  printf '%-4s %-8s round %d: %10s req/s  p99 %-8s commits %d\n' "$1" "$2" "$3" "$rps" "$p99" $(( c1 - c0 ))
}
for t in "${targets[@]}"; do
  PREFIX=/warm/ wrk -t1 -c"$conns" -d2s -s "$work/put.lua" "http://127.0.0.1:${gwport[$t]}" >/dev/null
done
for r in $(seq "$rounds"); do
  for t in "${targets[@]}"; do
    run "$t" repeated "$r"
    run "$t" advance "$r"
  done
done
python3 - "$work/results" "$secs" <<'PY'
import sys, statistics
secs = float(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    t, kind, rps, p99, commits, changes = line.split()
    rows.setdefault((t, kind), []).append((float(rps), int(commits), int(changes)))
print("\nmedian over rounds:")
for t in sorted({t for t, _ in rows}, key=lambda t: t != "new"):
    rep = statistics.median(r for r, _, _ in rows[(t, "repeated")])
    adv = statistics.median(r for r, _, _ in rows[(t, "advance")])
    c = statistics.median(c for _, c, _ in rows[(t, "advance")])
    n = statistics.median(n for _, _, n in rows[(t, "advance")])
    line = f"  {t:4s} repeated {rep:8.0f} req/s  advance {adv:8.0f} req/s  advance/repeated {adv / rep:.2f}"
    if c:
        line += f"  commits/s {c / secs:.0f}  fdatasyncs/s {2 * c / secs:.0f}  writes/commit {n / c:.1f}"
    print(line)
PY
