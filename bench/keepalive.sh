#!/usr/bin/env bash
# What a write's upstream connection costs, side by side in one run on one
# machine (docs/performance.md, "Kept connections"):
#
#   nginx     nginx, 1 worker, keep-alive upstream (generated nginx.conf)
#   plain     a bare httputil.ReverseProxy (bench/cmd/plainproxy)
#   default   fencegate, a plain-http route as configured by default: every
#             write goes with Connection: close on a connection of its own
#   keep      the same gateway, a route with upstream.keep_alive_writes
#   h2c       the same gateway, a route with upstream.h2c (HTTP/2 over
#             cleartext, prior knowledge)
#
# all in front of one fast upstream (bench/cmd/benchupstream, HTTP/1.1 and
# h2c on one port), loaded by wrk with 1 thread, CONNS connections and
# 512-byte PUTs with a repeated token. The three fencegate routes are one
# process (the routes differ only in their upstream options). Rounds
# alternate between the targets so drift hits all of them alike; the median
# round is reported, with each proxy's CPU time per request (from
# /proc/PID/stat: steadier than req/s when other load shares the cores) and
# the upstream's (a connection per write costs the upstream too).
#
# Usage: bench/keepalive.sh [seconds per run (8)] [rounds (3)] [connections (32)]
# Environment: PERF=1 (or PERF=keep, PERF=h2c) records the gateway with
# perf during one more run of the default route (or that one) and prints
# where its time went. FENCEGATE=path runs that
# binary instead of this tree's.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-8}
rounds=${2:-3}
conns=${3:-32}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
for t in wrk curl "$nginx"; do
  command -v "$t" >/dev/null || { echo "keepalive.sh: $t is missing (scripts/bench-deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP_WORK:-}" ] && cp "$work/perf.data" "$KEEP_WORK" 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
echo "building..."
if [ -n "${FENCEGATE:-}" ]; then cp "$FENCEGATE" "$work/fencegate"; else go build -o "$work/fencegate" ./cmd/fencegate; fi
for c in benchupstream plainproxy; do go build -o "$work/$c" "./bench/cmd/$c"; done

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitport() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
up=$(port); ng=$(port); plain=$(port); gw=$(port)
"$work/benchupstream" -listen "127.0.0.1:$up" & pids+=($!)
uppid=$!
"$work/plainproxy" -listen "127.0.0.1:$plain" -upstream "http://127.0.0.1:$up" 2>/dev/null & pids+=($!)
plainpid=$!

mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
$( [ "$(id -u)" -eq 0 ] && echo "user root root;" )
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream bench { server 127.0.0.1:$up; keepalive 256; }
  server {
    listen 127.0.0.1:$ng;
    location / {
      proxy_pass http://bench;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
"$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log" & pids+=($!)
nginxpid=$!

cat >"$work/fencegate.yaml" <<YAML
gateway:
  listen: 127.0.0.1:$gw
  routes:
    - name: default
      match: {path_prefix: /d/}
      upstream: {url: "http://127.0.0.1:$up"}
      resource: "{path}"
    - name: keep
      match: {path_prefix: /k/}
      upstream: {url: "http://127.0.0.1:$up", keep_alive_writes: true}
      resource: "{path}"
    - name: h2c
      match: {path_prefix: /h/}
      upstream: {url: "http://127.0.0.1:$up", h2c: true}
      resource: "{path}"
store:
  embedded: {path: $work/fencegate.db}
admin: {listen: ""}
log: {level: error}
YAML
"$work/fencegate" serve -c "$work/fencegate.yaml" & pids+=($!)
gwpid=$!
for p in $up $ng $plain $gw; do waitport "$p"; done
ngworker=$(pgrep -P "$nginxpid" | head -1)
declare -A cpupid=([nginx]=$ngworker [plain]=$plainpid [default]=$gwpid [keep]=$gwpid [h2c]=$gwpid)
declare -A url=([nginx]="http://127.0.0.1:$ng/orders/7" [plain]="http://127.0.0.1:$plain/orders/7"
  [default]="http://127.0.0.1:$gw/d/orders/7" [keep]="http://127.0.0.1:$gw/k/orders/7" [h2c]="http://127.0.0.1:$gw/h/orders/7")
targets="nginx plain default keep h2c"
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

body=$(head -c 512 /dev/zero | tr '\0' x)
cat >"$work/put.lua" <<LUA
wrk.method = "PUT"
wrk.body = "$body"
wrk.headers["Fencing-Token"] = "42"
LUA
for r in d k h; do curl -fsS -X PUT -H 'Fencing-Token: 42' --data x "http://127.0.0.1:$gw/$r/orders/7" >/dev/null; done

run() { # name
  local out="$work/$1.$r.txt" c0 c1 u0 u1
  c0=$(cputicks "${cpupid[$1]}"); u0=$(cputicks "$uppid")
  wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$work/put.lua" "${url[$1]}" >"$out"
  c1=$(cputicks "${cpupid[$1]}"); u1=$(cputicks "$uppid")
  if grep -q "Non-2xx\|Socket errors" "$out"; then echo "keepalive.sh: $1 had errors:" >&2; cat "$out" >&2; exit 1; fi
  local rps p99 reqs cpu upcpu
  rps=$(awk '/^Requests\/sec/ {print $2}' "$out")
  p99=$(awk '$1=="99%" {print $2}' "$out")
  reqs=$(awk '/requests in/ {print $1}' "$out")
  cpu=$(echo "($c1 - $c0) * 1000000 / $hz / $reqs" | bc -l)
  upcpu=$(echo "($u1 - $u0) * 1000000 / $hz / $reqs" | bc -l)
  echo "$1 $rps $p99 $cpu $upcpu" >>"$work/results"
  printf '%-8s round %d: %10s req/s  p99 %8s  cpu %5.1f us/req  upstream cpu %5.1f us/req\n' "$1" "$r" "$rps" "$p99" "$cpu" "$upcpu"
}

echo "load: $(uptime)"
for t in $targets; do wrk -t1 -c"$conns" -d2s -s "$work/put.lua" "${url[$t]}" >/dev/null; done # warm-up
for r in $(seq "$rounds"); do
  for t in $targets; do run "$t"; done
done
echo "load: $(uptime)"
python3 - "$work/results" <<'PY'
import sys, statistics
def ms(s):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * f
    return float(s)
rows = {}
for line in open(sys.argv[1]):
    name, rps, p99, cpu, up = line.split()
    rows.setdefault(name, []).append((float(rps), ms(p99), float(cpu), float(up)))
med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
cpu = {k: statistics.median(x[2] for x in v) for k, v in rows.items()}
upc = {k: statistics.median(x[3] for x in v) for k, v in rows.items()}
print()
print(f"median of {len(rows['plain'])} rounds (by req/s); cpu: the proxy's, and the upstream's, CPU per request (medians)")
for k in ("nginx", "plain", "default", "keep", "h2c"):
    rps, p99, _, _ = med[k]
    print(f"  {k:8s} {rps:10.0f} req/s   p99 {p99:7.3f} ms   cpu {cpu[k]:6.1f} us/req   upstream {upc[k]:5.1f} us/req")
print("ratios of req/s (cpu: CPU per request inverted, > 1 means cheaper):")
for k in ("default", "keep", "h2c"):
    print(f"  {k:8s} /plain {med[k][0] / med['plain'][0]:.2f}x (cpu {cpu['plain'] / cpu[k]:.2f}x)"
          f"   /nginx {med[k][0] / med['nginx'][0]:.2f}x (cpu {cpu['nginx'] / cpu[k]:.2f}x)")
PY

if [ "${PERF:-0}" != 0 ] && command -v perf >/dev/null; then
  pt=default
  case "$PERF" in keep|h2c) pt=$PERF ;; esac
  echo
  echo "where the $pt route's time goes (perf, gateway process, one run):"
  perf record -q -g -o "$work/perf.data" -p "$gwpid" -- sleep "$secs" >/dev/null 2>&1 &
  perfpid=$!
  wrk -t1 -c"$conns" -d"${secs}s" -s "$work/put.lua" "${url[$pt]}" >/dev/null
  wait "$perfpid" || true
  # Inclusive shares (children) of the frames that tell the story: the
  # gateway's forward, the upstream client (dial, close, HTTP/2), the
  # kernel's connect and close, the runtime's scheduler and GC.
  perf report -q -i "$work/perf.data" --children -g none --sort symbol --stdio 2>/dev/null |
    sed 's/[ -]*$//' |
    grep -E 'Gateway\)\.forward$|upstreamconn\.\(\*(Transport|leanConn)\)\.[a-zA-Z]+$|DialContext$|syscall\.(connect|Close)$|__sys_connect$|__x64_sys_close$|inet_release$|http2[A-Za-z]*\)\.[a-zA-Z]+$|runtime\.(mcall|gcBgMarkWorker|mallocgc|futex)$|setsockopt$' |
    head -40
fi
