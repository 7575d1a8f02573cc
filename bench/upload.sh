#!/usr/bin/env bash
# Object-store uploads through a gateway route against the same store
# directly, side by side in one run (e2e BenchmarkUpload): 4 KiB and
# 16 MiB objects with each store's official client, for S3 (VersityGW),
# GCS (fake-gcs-server) and Azure (Azurite). docs/performance.md explains
# the figures; "%_of_direct" is the gateway's throughput as a percentage of
# direct's (direct time / gateway time; 100 = as fast as direct).
# "T-store-cpu-µs/object" and "T-client-cpu-µs/object" are the store's and
# the clients' CPU per object of each target T: direct and the gateway ask
# the same of both, or the comparison is not fair.
#
# The output is go test's benchmark format, ready for benchstat:
#
#   bench/upload.sh > old.txt; ...; bench/upload.sh > new.txt; benchstat old.txt new.txt
#
# Usage: bench/upload.sh [count (default 5)] [rounds per count (default 10)] [stores, e.g. "gcs|azure" (default s3|gcs|azure)]
# UPLOADBENCH_BEFORE=PATH adds another fencegate binary as the target
# "before" (before/after in one run); UPLOADBENCH_FAST=1 adds the target
# "fast", the same route with gateway.fast_path: true; UPLOADBENCH_PLAIN=1
# adds "plain", direct's client through bench/cmd/plainproxy (a bare
# httputil.ReverseProxy with the gateway's relay transport, -keep-host for
# S3) in front of the same store: what one plain Go HTTP hop costs
# ("plain-cpu-µs/object" is the proxy's CPU); UPLOADBENCH_RAW=1 adds
# "raw", the same through bench/cmd/rawproxy (a Go hop without net/http's
# server and transport, one goroutine per connection); UPLOADBENCH_NGINX=1 adds
# "nginx", the same through nginx (one process, kept connections, bodies
# streamed): a hop that is not Go's;
# UPLOADBENCH_BEFORE_ENV="GOMAXPROCS=1 GOGC=400" runs "before" (this tree's
# build unless UPLOADBENCH_BEFORE names another) with those settings. The
# load average is printed first: other work on the machine slows every
# target alike but widens the spread.
# With a count above 1, benchstat's medians of every figure end the output.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
count=${1:-5}
rounds=${2:-10}
stores=${3:-s3|gcs|azure}
cd "$root"
echo "# $(date -u +%FT%TZ) $(git describe --always --dirty 2>/dev/null || echo '?') load:$(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test ./e2e -run '^$' -bench "^BenchmarkUpload\$/^($stores)\$/" -benchtime "${rounds}x" -count "$count" -timeout 60m | tee "$out"
echo "# $(date -u +%FT%TZ) load:$(cut -d' ' -f1-3 /proc/loadavg)"
# The medians over the counts (and their spread), as comment lines that a
# later benchstat of this output skips.
bs=$(command -v benchstat || echo "$root/.cache/bin/benchstat")
if [ "$count" -gt 1 ] && [ -x "$bs" ]; then
  "$bs" "$out" | sed 's/^/# /'
fi
