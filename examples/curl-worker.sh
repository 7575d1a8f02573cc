#!/usr/bin/env bash
# A fencegate worker in shell with curl: take a lease over the coordinator
# API (or use FENCING_TOKEN from `fencegate lease run`), write through the
# gateway, release.
#
#   curl-worker.sh RESOURCE VALUE
#   env: FENCEGATE_COORDINATOR (default http://127.0.0.1:8081),
#        FENCEGATE_URL (gateway, default http://127.0.0.1:8080), FENCEGATE_OWNER
#   exit: 0 written, 3 refused as stale (stopped: never retry the same token), 1 other failure
set -euo pipefail
resource=$1 value=$2
coord=${FENCEGATE_COORDINATOR:-http://127.0.0.1:8081}
gw=${FENCEGATE_URL:-http://127.0.0.1:8080}
owner=${FENCEGATE_OWNER:-curl-$(hostname)-$$}

token=${FENCING_TOKEN:-}
if [ -z "$token" ]; then
  lease=$(curl -sS -f -X POST -H 'Content-Type: application/json' \
    --data "{\"resource\":\"$resource\",\"owner\":\"$owner\",\"ttl\":\"30s\",\"wait\":\"10s\"}" "$coord/v1/leases/acquire")
  token=$(printf '%s' "$lease" | sed -n 's/.*"token":\([0-9]*\).*/\1/p')
  trap 'curl -sS -o /dev/null -X POST -H "Content-Type: application/json" --data "{\"resource\":\"$resource\",\"owner\":\"$owner\",\"token\":$token}" "$coord/v1/leases/release"' EXIT
fi

body=$(mktemp)
status=$(curl -sS -o "$body" -w '%{http_code}' -X PUT -H "Fencing-Token: $token" --data-binary "$value" "$gw$resource")
case $status in
  2??) echo "written $resource with token $token: $status" ;;
  409)
    if grep -q '"error":"stale_fencing_token"' "$body"; then
      # A successful safety decision: stop the dependent work, do not retry.
      echo "stale_fencing_token: $(cat "$body"); stopping" >&2
      rm -f "$body"; exit 3
    fi
    cat "$body" >&2; rm -f "$body"; exit 1 ;;
  *) cat "$body" >&2; rm -f "$body"; exit 1 ;;
esac
rm -f "$body"
