#!/usr/bin/env bash
# A fencegate worker under `etcdctl lock`: etcd's lock is the lease, the
# lock key's create revision the fencing token (a route with
# token_source: {etcd: ...} verifies it). Run it as
#
#   etcdctl lock /fencegate/locks/orders/7 -- etcdctl-worker.sh /orders/7 VALUE
#
# where the lock name is the route's etcd prefix joined with the resource.
# etcdctl gives the command ETCD_LOCK_KEY (the lock key) and ETCD_LOCK_REV;
# the latter is the revision etcdctl last read, the key's create revision
# only when the lock was free, so the token is read from the key itself.
#   env: FENCEGATE_URL (gateway, default http://127.0.0.1:8080),
#        ETCDCTL_ENDPOINTS (etcdctl's own)
#   exit: 0 written, 3 refused as stale or as not the lock's holder (stopped:
#         never retry the same token), 1 other failure
set -euo pipefail
resource=$1 value=$2
gw=${FENCEGATE_URL:-http://127.0.0.1:8080}
: "${ETCD_LOCK_KEY:?run me under etcdctl lock NAME -- $0 RESOURCE VALUE}"

token=$(ETCDCTL_API=3 etcdctl get "$ETCD_LOCK_KEY" -w fields | sed -n 's/^"CreateRevision" : \([0-9]*\)$/\1/p')
if [ -z "$token" ]; then
  echo "lock key $ETCD_LOCK_KEY is gone: the lock was lost" >&2; exit 1
fi

body=$(mktemp)
status=$(curl -sS -o "$body" -w '%{http_code}' -X PUT -H "Fencing-Token: $token" --data-binary "$value" "$gw$resource")
case $status in
  2??) echo "written $resource with token $token: $status" ;;
  409)
    if grep -qE '"error":"(stale_fencing_token|not_lock_holder)"' "$body"; then
      # A successful safety decision: stop the dependent work, do not retry.
      echo "refused: $(cat "$body"); stopping" >&2
      rm -f "$body"; exit 3
    fi
    cat "$body" >&2; rm -f "$body"; exit 1 ;;
  *) cat "$body" >&2; rm -f "$body"; exit 1 ;;
esac
rm -f "$body"
