#!/usr/bin/env bash
# Fails when the test suite left processes running: fencegate builds of
# testenv.BuildBinary (/tmp/fencegate-bin-*) and the pinned test servers
# under .cache/. Every test stops what it started (t.Cleanup); a process
# still here after `go test` returned is a test that claimed to stop or
# restart something and did not (a second `serve` started beside a running
# one kept the store and the ports, and the first ran on for an hour).
set -euo pipefail
# A server killed by Pdeathsig as `go test` exited may take a moment to go.
for _ in 1 2 3 4 5; do
  left=$(pgrep -af '^([^ ]*node )?[^ ]*(/fencegate-bin-[^ /]*/|/\.cache/(bin|azurite)/)' || true)
  [ -z "$left" ] && break
  sleep 1
done
if [ -n "$left" ]; then
  echo "leftovers.sh: processes the tests left running:" >&2
  echo "$left" >&2
  exit 1
fi
echo "leftovers.sh: no test process left running"
