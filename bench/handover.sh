#!/usr/bin/env bash
# The HTTP/1.1 fast path (gateway.fast_path, on by default) against net/http
# alone (fast_path: false), both in the shipped default route configuration
# (keep_alive_writes off, embedded store), on the hand-over workload: 64
# connections write 64 resources, and every N writes to a resource its lease
# passes to a new owner (the token goes up by one: one durable advance).
# Rounds alternate between the two gateways so other load hits both alike;
# per round: req/s, p99, the gateway's CPU per request (from /proc), and the
# writes refused as stale at a hand-over (an older owner's write that
# arrived after the newer token: expected, and the same for both).
#
# Usage: bench/handover.sh [seconds per run (default 5)] [rounds (default 3)] [N values (default "1 10 100")]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
secs=${1:-5}
rounds=${2:-3}
ns=${3:-1 10 100}
needs handover.sh wrk
build benchupstream

up=$(port)
"$work/benchupstream" -listen "127.0.0.1:$up" & pids+=($!)
declare -A gwport gwpid
for t in fastpath nethttp; do
  gwport[$t]=$(port)
  cat >"$work/$t.yaml" <<YAML
gateway:
  listen: 127.0.0.1:${gwport[$t]}
  fast_path: $([ "$t" = fastpath ] && echo true || echo false)
  routes:
    - name: bench
      match: {path_prefix: /}
      upstream: {url: "http://127.0.0.1:$up"}
      resource: "{path}"
store:
  embedded: {path: $work/$t.db}
admin: {listen: "127.0.0.1:$(port)"}
log: {level: error}
YAML
  "$work/fencegate" serve -c "$work/$t.yaml" & gwpid[$t]=$!
  pids+=("${gwpid[$t]}")
  waitport "${gwport[$t]}"
done
waitport "$up"
hz=$(getconf CLK_TCK)
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# Request k writes /r<round>/<k mod 64> with token k/64/N + 1: every
# resource gets a new owner every N of its writes.
cat >"$work/handover.lua" <<'LUA'
local k = 0
local n = tonumber(os.getenv("N"))
local prefix = "/r" .. os.getenv("ROUND") .. "-" .. os.getenv("N") .. "/"
local body = string.rep("x", 512)
request = function()
  local r = k % 64
  local tok = math.floor(k / 64 / n) + 1
  k = k + 1
  return wrk.format("PUT", prefix .. r, { ["Fencing-Token"] = tostring(tok) }, body)
end
LUA
printf '%-4s %-9s %5s %10s %9s %9s %8s\n' N gateway round req/s p99 cpu-us stale
for n in $ns; do
  for r in $(seq "$rounds"); do
    for t in fastpath nethttp; do
      out="$work/$t.$n.$r.txt"
      c0=$(cputicks "${gwpid[$t]}")
      N=$n ROUND=$r wrk -t1 -c64 -d"${secs}s" --latency -s "$work/handover.lua" "http://127.0.0.1:${gwport[$t]}" >"$out"
      c1=$(cputicks "${gwpid[$t]}")
      rps=$(awk '/^Requests\/sec/ {print $2}' "$out")
      p99=$(awk '$1=="99%" {print $2}' "$out")
      reqs=$(awk '/requests in/ {print $1}' "$out")
      stale=$(awk '/Non-2xx/ {print $NF}' "$out"); stale=${stale:-0}
      cpu=$(echo "($c1 - $c0) * 1000000 / $hz / $reqs" | bc -l)
      printf '%-4s %-9s %5s %10s %9s %9.1f %8s\n' "$n" "$t" "$r" "$rps" "$p99" "$cpu" "$stale"
      echo "$n $t $rps $cpu" >>"$work/results"
    done
  done
done
echo "median per N: fast path / net/http (req/s ratio; CPU per request ratio)"
for n in $ns; do
  med() { awk -v n="$n" -v t="$1" -v c="$2" '$1==n && $2==t {print $c}' "$work/results" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  printf 'N=%-4s %.2fx req/s  %.2fx cpu/req\n' "$n" "$(echo "$(med fastpath 3) / $(med nethttp 3)" | bc -l)" "$(echo "$(med fastpath 4) / $(med nethttp 4)" | bc -l)"
done
