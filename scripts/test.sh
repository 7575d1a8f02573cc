#!/usr/bin/env bash
# The test command: installs missing Debian packages, builds the pinned test
# servers and linter, runs the lint steps (scripts/lint.sh: gofmt -l, go vet,
# staticcheck, go mod tidy -diff, govulncheck against a pinned offline copy of
# the vulnerability database), and runs every test tier of the
# main module with the race detector, then every fuzz target for FUZZTIME
# (default 5s) each (scripts/fuzz.sh). With CI unset, a test whose component is missing is skipped; with
# CI=true it fails (internal/testenv decides).
#
# Usage: scripts/test.sh [extra go test args, e.g. -run TestFence]
set -euo pipefail
# go.mod's toolchain (the machine's Go is older); an explicit GOTOOLCHAIN in
# the environment wins.
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

phase() {
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*"
  if "$@"; then
    echo "=== $name: ok in $((SECONDS - start))s"
  else
    local rc=$?
    echo "=== $name: FAILED (exit $rc) after $((SECONDS - start))s"
    exit "$rc"
  fi
}

total=$SECONDS
phase deps scripts/deps.sh
phase tools scripts/tools.sh
phase lint scripts/lint.sh
phase test go test -race -count=1 -timeout 60m "$@" ./...
phase leftovers scripts/leftovers.sh
# Every fuzz target for a fixed time, not only its seeds (scripts/fuzz.sh;
# 14 targets at 10s each took 256s on a loaded 2-core machine, builds included).
phase fuzz scripts/fuzz.sh "${FUZZTIME:-5s}"
# The container image, built without a container engine, and its test
# (tools/ociimage: config, contents, `fencegate version` run from it).
phase image scripts/image.sh --check
echo "=== all ok in $((SECONDS - total))s"
