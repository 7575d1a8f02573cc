#!/usr/bin/env bash
# Telemetry overhead on the gateway's request path: no observer at all vs
# telemetry off (the default wiring: metrics only) vs tracing on (OTLP/HTTP
# to a loopback collector). Prints benchstat's comparison by mode.
#
# Usage: bench/telemetry.sh [count (default 10)] [benchtime (default 1s)]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
count=${1:-10}
benchtime=${2:-1s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cd "$root"
go test -run '^$' -bench 'BenchmarkGatewayTelemetry' -benchtime "$benchtime" -count "$count" ./bench/ | tee "$out"
benchstat=.cache/bin/benchstat
[ -x "$benchstat" ] || benchstat=$(command -v benchstat || true)
if [ -z "$benchstat" ]; then
  echo "telemetry.sh: benchstat not found (scripts/tools.sh benchstat builds it)" >&2
  exit 0
fi
"$benchstat" -col /mode "$out"
