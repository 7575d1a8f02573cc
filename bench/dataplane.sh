#!/usr/bin/env bash
# Data-plane speed of fencegate beside nginx and Go proxies, side by side in
# one run on one machine (docs/performance.md explains the figures):
#
#   nginx     nginx, 1 worker, keep-alive upstream (generated nginx.conf)
#   plain     a bare httputil.ReverseProxy (bench/cmd/plainproxy)
#   tuned     a tuned Go proxy: 32 KiB pooled buffers, large idle pool
#             (bench/cmd/tunedproxy)
#   repeated  fencegate local mode, PUT with a repeated token
#   advance   fencegate local mode, a new resource on every write (each a
#             durable advance before the forward)
#   stale     fencegate refusing a stale token (no upstream call, no disk)
#
# (fencegate with the HTTP/1.1 fast path unless FAST_PATH=false; it is off
# by default, docs/performance.md)
# all in front of the same fast upstream (bench/cmd/benchupstream), loaded by
# wrk with 1 thread, CONNS connections and 512-byte PUTs. Rounds alternate
# between the targets so drift (other load) hits all of them alike; the
# median round is reported, with each proxy process's CPU time per request
# (from /proc/PID/stat; steadier than req/s when other load shares the
# cores). Then, with bench/cmd/loadclient:
#
#   big       16 MiB PUTs through a fresh gateway vs straight to the
#             upstream (BIG_ROUNDS alternating rounds of BIG_RUNS bodies,
#             7 x 20; median, spread, and proxy and upstream CPU per
#             body), beside the same bodies through nginx (streaming,
#             256 KiB buffers) and the tuned Go proxy, so the goal can be
#             read against what other proxies reach on this machine; and
#             the gateway's RSS at 1 and 8 concurrent (and one 128 MiB
#             body: memory must not follow the body size)
#   distinct  DISTINCT distinct resources written through a fresh gateway,
#             and its RSS after (the fence cache is bounded)
#
# Usage: bench/dataplane.sh [seconds per run (10)] [rounds (3)] [connections (32)]
# Environment: KEEP_ALIVE_WRITES=false closes the upstream connection after
# every write (the route default; the bench upstream reads every body, so
# the measured route sets upstream.keep_alive_writes), DISTINCT=N (default 1000000; 0 skips), BIG=0 skips the
# large-body part, FENCEGATE=path runs that fencegate binary instead of
# this tree's (to compare versions). Needs wrk, nginx and curl (scripts/bench-deps.sh); perf,
# if present, counts the gateway's fdatasync calls when the gateway exposes
# no fsync metric.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-10}
rounds=${2:-3}
conns=${3:-32}
distinct=${DISTINCT:-1000000}
big=${BIG:-1}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
for t in wrk curl "$nginx"; do
  command -v "$t" >/dev/null || { echo "dataplane.sh: $t is missing (scripts/bench-deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d)
chmod 755 "$work" # nginx's worker may run as another user
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
echo "building..."
if [ -n "${FENCEGATE:-}" ]; then cp "$FENCEGATE" "$work/fencegate"; else go build -o "$work/fencegate" ./cmd/fencegate; fi
for c in benchupstream plainproxy tunedproxy loadclient; do go build -o "$work/$c" "./bench/cmd/$c"; done

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitport() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
up=$(port); ng=$(port); ngbig=$(port); plain=$(port); tuned=$(port)
"$work/benchupstream" -listen "127.0.0.1:$up" & pids+=($!)
uppid=$!
"$work/plainproxy" -listen "127.0.0.1:$plain" -upstream "http://127.0.0.1:$up" 2>/dev/null & pids+=($!)
plainpid=$!
"$work/tunedproxy" -listen "127.0.0.1:$tuned" -upstream "http://127.0.0.1:$up" 2>/dev/null & pids+=($!)
tunedpid=$!

# nginx with a prefix of its own: runs as any user, touches nothing outside.
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
  # Large bodies (the big part): streamed as fencegate streams them, not
  # spooled to disk first, with copy buffers of fencegate's 256 KiB step.
  server {
    listen 127.0.0.1:$ngbig;
    client_max_body_size 0;
    client_body_buffer_size 256k;
    proxy_request_buffering off;
    proxy_buffering off;
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

# startgw NAME: a fencegate on its own port and store; sets gw_port,
# gw_admin and gw_pid.
startgw() {
  gw_port=$(port); gw_admin=$(port)
  cat >"$work/$1.yaml" <<YAML
gateway:
  listen: 127.0.0.1:$gw_port
  fast_path: ${FAST_PATH:-true}
  routes:
    - name: bench
      match: {path_prefix: /}
      upstream: {url: "http://127.0.0.1:$up", keep_alive_writes: ${KEEP_ALIVE_WRITES:-true}}
      resource: "{path}"
store:
  embedded: {path: $work/$1.db}
admin: {listen: "127.0.0.1:$gw_admin"}
log: {level: error}
YAML
  "$work/fencegate" serve -c "$work/$1.yaml" & gw_pid=$!
  pids+=("$gw_pid")
  waitport "$gw_port"
}
startgw fencegate
gw=$gw_port admin=$gw_admin gwpid=$gw_pid
for p in $up $ng $plain $tuned; do waitport "$p"; done
ngworker=$(pgrep -P "$nginxpid" | head -1)
declare -A cpupid=([nginx]=$ngworker [plain]=$plainpid [tuned]=$tunedpid [repeated]=$gwpid [advance]=$gwpid [stale]=$gwpid)
# cputicks PID: user+system CPU of a process so far, in clock ticks.
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

body=$(head -c 512 /dev/zero | tr '\0' x)
cat >"$work/put.lua" <<LUA
wrk.method = "PUT"
wrk.body = "$body"
local tok = os.getenv("TOKEN")
if tok and tok ~= "" then wrk.headers["Fencing-Token"] = tok end
LUA
# A new resource on every request: /fresh/<round>/<n>.
cat >"$work/fresh.lua" <<LUA
local n = 0
local prefix = "/fresh/" .. os.getenv("ROUND") .. "/"
local headers = { ["Fencing-Token"] = "42" }
local body = "$body"
request = function()
  n = n + 1
  return wrk.format("PUT", prefix .. n, headers, body)
end
LUA
# The fence of /orders/7 at 42: repeated sends 42, stale 41.
curl -fsS -X PUT -H 'Fencing-Token: 42' --data x "http://127.0.0.1:$gw/orders/7" >/dev/null

# fsyncs of the gateway so far, from its fencegate_store_fsyncs_total
# metric; from a build without it, two per store commit (bbolt fdatasyncs
# the data pages, then the meta page; docs/storage.md); else perf's count of
# fdatasync/fsync calls (started by run below), else nothing.
fsync_metric() {
  curl -fsS "http://127.0.0.1:$admin/metrics" 2>/dev/null |
    awk '$1 ~ /^fencegate_store_fsyncs_total/ {y += $2; fy = 1}
         $1 ~ /^fencegate_store_commits_total/ {s += 2 * $2; f = 1}
         END {if (fy) printf "%d\n", y; else if (f) printf "%d\n", s}'
}

run() { # name url lua [token]
  local out="$work/$1.$r.txt" f0="" f1="" perfpid=""
  if [ "$1" = advance ]; then
    f0=$(fsync_metric)
    if [ -z "$f0" ] && command -v perf >/dev/null; then
      perf stat -x, -e syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync -p "$gwpid" -o "$work/perf.$r.txt" 2>/dev/null &
      perfpid=$!
    fi
  fi
  local c0 c1
  c0=$(cputicks "${cpupid[$1]}")
  ROUND=$r TOKEN=${4:-} wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$work/$3" "$2" >"$out"
  c1=$(cputicks "${cpupid[$1]}")
  local rps p99 reqs fs=- cpu
  rps=$(awk '/^Requests\/sec/ {print $2}' "$out")
  p99=$(awk '$1=="99%" {print $2}' "$out")
  reqs=$(awk '/requests in/ {print $1}' "$out")
  if grep -q "Non-2xx" "$out" && [ "$1" != stale ]; then echo "dataplane.sh: $1 had non-2xx answers:" >&2; cat "$out" >&2; exit 1; fi
  if [ "$1" = advance ]; then
    if [ -n "$f0" ]; then
      f1=$(fsync_metric); fs=$(( ${f1%.*} - ${f0%.*} ))
    elif [ -n "$perfpid" ]; then
      kill -INT "$perfpid"; wait "$perfpid" 2>/dev/null || true
      fs=$(awk -F, '/syscalls/ {s += $1} END {print s + 0}' "$work/perf.$r.txt")
    fi
  fi
  cpu=$(echo "($c1 - $c0) * 1000000 / $hz / $reqs" | bc -l)
  echo "$1 $rps $p99 $reqs $fs $cpu" >>"$work/results"
  printf '%-8s round %d: %10s req/s  p99 %8s  cpu %5.1f us/req' "$1" "$r" "$rps" "$p99" "$cpu"
  [ "$fs" != - ] && printf '  fsyncs %s (%.0f/s, %.1f writes/fsync)' "$fs" "$(echo "$fs / $secs" | bc -l)" "$(echo "$reqs / ($fs + 0.000001)" | bc -l)"
  echo
}

echo "load: $(uptime)"
for url in "http://127.0.0.1:$ng/orders/7" "http://127.0.0.1:$tuned/orders/7" "http://127.0.0.1:$gw/orders/7"; do
  TOKEN=42 wrk -t1 -c"$conns" -d2s -s "$work/put.lua" "$url" >/dev/null # warm-up
done
for r in $(seq "$rounds"); do
  run nginx "http://127.0.0.1:$ng/orders/7" put.lua 42
  run plain "http://127.0.0.1:$plain/orders/7" put.lua 42
  run tuned "http://127.0.0.1:$tuned/orders/7" put.lua 42
  run repeated "http://127.0.0.1:$gw/orders/7" put.lua 42
  run advance "http://127.0.0.1:$gw" fresh.lua
  run stale "http://127.0.0.1:$gw/orders/7" put.lua 41
done
echo "load: $(uptime)"
python3 - "$work/results" "$secs" <<'PY'
import sys, statistics
secs = float(sys.argv[2])
def ms(s):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * f
    return float(s)
rows = {}
for line in open(sys.argv[1]):
    name, rps, p99, reqs, fs, cpu = line.split()
    rows.setdefault(name, []).append((float(rps), ms(p99), int(reqs), fs, float(cpu)))
med = {}
for k, v in rows.items():
    v.sort()
    med[k] = v[len(v) // 2]
print()
print(f"median of {len(rows['nginx'])} rounds (by req/s); cpu: the proxy process's CPU per request, median over rounds")
cpu = {k: statistics.median(x[4] for x in v) for k, v in rows.items()}
for k in ("nginx", "plain", "tuned", "repeated", "advance", "stale"):
    rps, p99, reqs, fs, _ = med[k]
    extra = ""
    if k == "advance":
        if fs != "-" and int(fs) > 0:
            extra = f"   fsyncs/s {int(fs) / secs:.0f}   writes/fsync {reqs / int(fs):.1f}"
        else:
            extra = "   fsyncs n/a"
    print(f"  {k:9s} {rps:10.0f} req/s   p99 {p99:7.3f} ms   cpu {cpu[k]:6.1f} us/req{extra}")
r = lambda a, b: med[a][0] / med[b][0]
c = lambda a, b: cpu[b] / cpu[a]
print("ratios of req/s (and of CPU per request, inverted: > 1 means cheaper):")
print(f"repeated/nginx    {r('repeated', 'nginx'):.2f}x   cpu {c('repeated', 'nginx'):.2f}x   (goal >= 0.6)")
print(f"repeated/tuned    {r('repeated', 'tuned'):.2f}x   cpu {c('repeated', 'tuned'):.2f}x   (goal >= 1.2)")
print(f"repeated/plain    {r('repeated', 'plain'):.2f}x   p99 {med['repeated'][1]:.3f} vs {med['plain'][1]:.3f} ms (goal: no worse)")
print(f"advance/repeated  {r('advance', 'repeated'):.2f}x   cpu {c('advance', 'repeated'):.2f}x   (goal >= 0.8)")
print(f"stale/repeated    {r('stale', 'repeated'):.2f}x   cpu {c('stale', 'repeated'):.2f}x   (goal >= 2)")
PY

if [ "$big" != 0 ]; then
  bigrounds=${BIG_ROUNDS:-7} bigruns=${BIG_RUNS:-20}
  echo
  echo "large bodies (fresh gateways; MiB/s of 16 MiB PUTs, $bigrounds alternating rounds of $bigruns):"
  startgw big
  bigpid=$gw_pid bigport=$gw_port
  echo "  gateway RSS idle: $(awk '/VmRSS/ {print $2, $3}' /proc/$bigpid/status)"
  : >"$work/big"
  # bigrun NAME URL TOKEN PID: one round; the line carries the CPU ticks
  # of the proxy (PID, 0: none) and of the upstream.
  bigrun() {
    local p0=0 p1=0 u0 u1 out
    [ "$4" != 0 ] && p0=$(cputicks "$4")
    u0=$(cputicks "$uppid")
    out=$("$work/loadclient" -mode big -url "$2" -size $((16 << 20)) -runs "$bigruns" -token "$3")
    [ "$4" != 0 ] && p1=$(cputicks "$4")
    u1=$(cputicks "$uppid")
    echo "$1 $out proxy_ticks $((p1 - p0)) upstream_ticks $((u1 - u0))" >>"$work/big"
  }
  for r in $(seq "$bigrounds"); do
    bigrun direct "http://127.0.0.1:$up/big" "" 0
    bigrun gateway "http://127.0.0.1:$bigport/big" 42 "$bigpid"
    bigrun nginx "http://127.0.0.1:$ngbig/big" "" "$ngworker"
    bigrun tuned "http://127.0.0.1:$tuned/big" "" "$tunedpid"
  done
  python3 - "$work/big" "$hz" "$bigruns" <<'PY'
import sys, statistics
hz, runs = float(sys.argv[2]), int(sys.argv[3])
v, cpu = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    v.setdefault(f[0], []).append(float(f[2]))
    kv = dict(zip(f[1::2], f[2::2]))
    cpu.setdefault(f[0], []).append((int(kv["proxy_ticks"]), int(kv["upstream_ticks"])))
med = {k: statistics.median(x) for k, x in v.items()}
d = med["direct"]
for k in ("direct", "gateway", "nginx", "tuned"):
    ms = lambda i: 1000 * statistics.median(c[i] for c in cpu[k]) / hz / runs
    ratio = "" if k == "direct" else f"   /direct {med[k] / d:4.0%}"
    print(f"  {k:8s} {med[k]:7.1f} MiB/s (rounds {min(v[k]):.0f}-{max(v[k]):.0f}){ratio}"
          f"   CPU per body: proxy {ms(0):4.1f} ms, upstream {ms(1):4.1f} ms")
print(f"  gateway/direct {med['gateway'] / d:.0%} (goal >= 90%; medians); for reference, on the same"
      f" machine: nginx/direct {med['nginx'] / d:.0%}, tuned Go proxy/direct {med['tuned'] / d:.0%}")
PY
  for c in 1 8; do
    printf '  16 MiB x %d concurrent (40 bodies): %s\n' "$c" \
      "$("$work/loadclient" -mode big -url "http://127.0.0.1:$bigport/big" -size $((16 << 20)) -conc $c -runs 40 -token 42 -pid "$bigpid")"
  done
  printf '  128 MiB x 1 (4 bodies):             %s\n' \
    "$("$work/loadclient" -mode big -url "http://127.0.0.1:$bigport/big" -size $((128 << 20)) -conc 1 -runs 4 -token 42 -pid "$bigpid")"
  kill "$bigpid"
fi

if [ "$distinct" != 0 ]; then
  echo
  echo "distinct resources (a fresh gateway, fence.cache_entries default 100000):"
  startgw distinct
  echo "  gateway RSS idle: $(awk '/VmRSS/ {print $2, $3}' /proc/$gw_pid/status)"
  printf '  %d resources, 32 concurrent: %s\n' "$distinct" \
    "$("$work/loadclient" -mode distinct -url "http://127.0.0.1:$gw_port/d" -n "$distinct" -conc 32 -token 1 -pid "$gw_pid")"
  kill "$gw_pid"
fi
