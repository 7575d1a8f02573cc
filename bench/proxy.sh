#!/usr/bin/env bash
# Proxy overhead of the fence check, side by side in one run on one machine:
#   plain     a bare httputil.ReverseProxy (bench/cmd/plainproxy)
#   fenced    fencegate on the embedded store, PUT with a repeated token
#   stale     fencegate refusing a stale token (no upstream call, no disk)
# all in front of the same fast upstream (bench/cmd/benchupstream), loaded by
# wrk. Rounds alternate between the targets so drift hits all of them alike.
#
# Usage: bench/proxy.sh [seconds per run (default 10)] [rounds (default 3)] [connections (default 32)]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
secs=${1:-10}
rounds=${2:-3}
conns=${3:-32}
needs proxy.sh wrk
build benchupstream plainproxy
up=$(port); plain=$(port); gw=$(port)
"$work/benchupstream" -listen "127.0.0.1:$up" & pids+=($!)
"$work/plainproxy" -listen "127.0.0.1:$plain" -upstream "http://127.0.0.1:$up" 2>/dev/null & pids+=($!)
cat >"$work/fencegate.yaml" <<YAML
gateway:
  listen: 127.0.0.1:$gw
  routes:
    - name: bench
      match: {path_prefix: /}
      upstream: {url: "http://127.0.0.1:$up"}
      resource: "{path}"
store:
  embedded: {path: $work/fencegate.db}
admin: {listen: ""}
log: {level: error}
YAML
"$work/fencegate" serve -c "$work/fencegate.yaml" & pids+=($!)
for p in $up $plain $gw; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.05; done
done

cat >"$work/put.lua" <<'LUA'
wrk.method = "PUT"
wrk.body = "{\"status\":\"shipped\"}"
local tok = os.getenv("TOKEN")
if tok and tok ~= "" then wrk.headers["Fencing-Token"] = tok end
LUA
# Establish the fence at 42 so the fenced run repeats a token and the stale
# run (41) is refused.
curl -fsS -X PUT -H 'Fencing-Token: 42' --data x "http://127.0.0.1:$gw/orders/7" >/dev/null

run() { # name url token
  TOKEN=$3 wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$work/put.lua" "$2" >"$work/$1.$r.txt"
  local rps p99
  rps=$(awk '/^Requests\/sec/ {print $2}' "$work/$1.$r.txt")
  p99=$(awk '$1=="99%" {print $2}' "$work/$1.$r.txt")
  echo "$1 $rps $p99" >>"$work/results"
  printf '%-7s round %d: %10s req/s  p99 %s\n' "$1" "$r" "$rps" "$p99"
}
TOKEN=42 wrk -t1 -c"$conns" -d2s -s "$work/put.lua" "http://127.0.0.1:$gw/orders/7" >/dev/null # warm-up
for r in $(seq "$rounds"); do
  run plain "http://127.0.0.1:$plain/orders/7" 42
  run fenced "http://127.0.0.1:$gw/orders/7" 42
  run stale "http://127.0.0.1:$gw/orders/7" 41
done
python3 - "$work/results" <<'PY'
import sys, statistics
def ms(s):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if s.endswith(unit) and (unit != "s" or not s.endswith(("us", "ms"))):
            return float(s[: -len(unit)]) * f
    return float(s)
rows = {}
for line in open(sys.argv[1]):
    name, rps, p99 = line.split()
    rows.setdefault(name, []).append((float(rps), ms(p99)))
med = {k: (statistics.median(r for r, _ in v), statistics.median(p for _, p in v)) for k, v in rows.items()}
print()
print("median over rounds:")
for k in ("plain", "fenced", "stale"):
    print(f"  {k:7s} {med[k][0]:10.0f} req/s   p99 {med[k][1]:.3f} ms")
print(f"fenced/plain throughput: {med['fenced'][0] / med['plain'][0]:.1%}   p99 added: {med['fenced'][1] - med['plain'][1]:+.3f} ms")
print(f"stale/fenced throughput: {med['stale'][0] / med['fenced'][0]:.2f}x (a refusal costs less than a forward when > 1)")
PY
