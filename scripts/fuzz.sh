#!/usr/bin/env bash
# Runs each fuzz target for a while. The targets compare the hand-written
# pieces on the security boundary with what they stand in for (net/http's
# server and client, aws-sdk-go-v2's signer, a checksummed log); their seed
# corpora (inline f.Add seeds and testdata/fuzz/<Target>/) run in the
# normal test suite, so a crasher found here and committed under
# testdata/fuzz stays a regression test.
#
# Usage: scripts/fuzz.sh [duration] [target-regexp]
#   duration   per target, as go test -fuzztime takes it (default 1m)
#   target     only the targets whose name matches (default all)
#
# Runs one target at a time with one worker (FUZZ_PARALLEL to change): the
# differential targets start servers and a machine's cores are shared.
# Add a target by adding its line to TARGETS: "package FuzzName".
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

TARGETS=(
  "./internal/workerserver FuzzMatchesNetHTTP"        # workerserver against net/http's http.Server
  "./adapters/upstreamconn FuzzTransportMatchesStd"        # the upstream client against http.Transport
  "./adapters/s3 FuzzSigV4Verify"                # SDK-signed requests verify; changed ones do not
  "./adapters/s3 FuzzUpstreamSignerMatchesSDK"   # the upstream signer against the SDK's
  "./adapters/bolt FuzzDecodeRecord"            # advance-log records: no panic, no record failing its checksum
  "./adapters/bolt FuzzSegment"
  "./adapters/s3 FuzzParseDeleteObjects"
  "./adapters/s3 FuzzQueryHas"
  "./gateway FuzzMethod"
  "./gateway FuzzHopHeaders"
  "./resource FuzzCleanPath"
  ". FuzzParseToken"
)

duration=${1:-1m}
only=${2:-}
parallel=${FUZZ_PARALLEL:-1}
failed=()
for t in "${TARGETS[@]}"; do
  read -r pkg name <<<"$t"
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then
    continue
  fi
  echo "== $name ($pkg) for $duration"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$duration" -parallel "$parallel" "$pkg"; then
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]} (the failing input is under the package's testdata/fuzz/)" >&2
  exit 1
fi
echo "fuzz.sh: every target ran for $duration without a failure"
