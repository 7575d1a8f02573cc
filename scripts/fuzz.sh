#!/usr/bin/env bash
# Runs every fuzz target of the repository for a fixed time. The targets
# compare the hand-written pieces on the security boundary with what they
# stand in for (net/http's server and client, aws-sdk-go-v2's signer, a
# checksummed log, the stores' reading of a request); their seed corpora
# (inline f.Add seeds and testdata/fuzz/<Target>/) run in the normal test
# suite, so a crasher found here and committed under testdata/fuzz stays a
# regression test. scripts/test.sh runs this after the tests, 5s a target.
#
# Usage: scripts/fuzz.sh [duration] [target-regexp]
#   duration   per target, as go test -fuzztime takes it (default 10s)
#   target     only the targets whose name matches (default all)
# FUZZ_TIMEOUT (default 10m) bounds each run, seeds included: set it above
# the duration for long runs (scripts/fuzz.sh 10m FuzzS3Oracle with
# FUZZ_TIMEOUT=20m).
#
# The targets are found, not listed: every `func FuzzX(f *testing.F)` in a
# _test.go file of the main module (outside testdata and .cache), so a new
# target runs without anyone adding it here. Go fuzzes one target per
# invocation, so each gets its own run. One worker each (FUZZ_PARALLEL to
# change): the differential targets start servers, and cores are shared.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

duration=${1:-10s}
only=${2:-}
parallel=${FUZZ_PARALLEL:-1}

# "./pkg FuzzName" per target, in a stable order. Nested modules (a go.mod
# below the root, such as tools/) are left out: go test runs the main
# module's packages.
mapfile -t targets < <(
  grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
    grep -v -e '/testdata/' -e '^\./\.cache/' -e '^\./tools/' |
    sed -E 's#^(.*)/[^/]+_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' |
    sort -u
)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzz target found" >&2
  exit 1
fi

# One instrumented test binary per package (go test -c -fuzz), run once
# per target in the package's directory, as go test runs it: the corpus in
# testdata/fuzz/<Target> is read there and a failing input written there,
# the generated corpus kept in go's cache. Building once per package, not
# per target, saves a link per target.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=$(go env GOCACHE)/fuzz
failed=()
ran=0
start=$SECONDS
built=""
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then
    continue
  fi
  bin="$work/$(echo "$pkg" | tr '/.' '__').test"
  if [[ " $built " != *" $pkg "* ]]; then
    if ! go test -c -fuzz "^${name}\$" -o "$bin" "$pkg"; then
      failed+=("$pkg (build)")
      continue
    fi
    built="$built $pkg"
  fi
  echo "== $name ($pkg) for $duration"
  ran=$((ran + 1))
  importpath=$(go list "$pkg")
  if ! (cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$duration" \
    -test.parallel "$parallel" -test.timeout "${FUZZ_TIMEOUT:-10m}" -test.paniconexit0 -test.fuzzcachedir "$cache/$importpath"); then
    failed+=("$name ($pkg)")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]} (the failing input is under the package's testdata/fuzz/)" >&2
  exit 1
fi
echo "fuzz.sh: $ran targets ran for $duration each without a failure ($((SECONDS - start))s)"
