#!/usr/bin/env bash
# The checks every change must pass before the tests run (scripts/test.sh
# calls this first). Each one fails the build; fix what they find rather than
# silencing it.
#
#   gofmt      `gofmt -l` lists no file
#   vet        `go vet ./...` in the main module and the tools module
#   staticcheck  pinned in tools/go.mod, built by scripts/tools.sh into .cache/bin
#   tidy       `go mod tidy -diff` is empty for both modules
#
# govulncheck is not run: it needs the vulnerability database at vuln.go.dev,
# which this project's machines and CI cannot reach (only the Go module proxy
# is reachable, and it does not serve the database). Run
# `go run golang.org/x/vuln/cmd/govulncheck@latest ./...` on a machine that has
# internet access before a release.
#
# Usage: scripts/lint.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

step() {
  local name=$1; shift
  if "$@"; then
    echo "lint: $name ok"
  else
    echo "lint: $name FAILED" >&2
    return 1
  fi
}

gofmt_clean() {
  local files
  files=$(find . -path ./.cache -prune -o -name '*.go' -print | xargs gofmt -l)
  if [ -n "$files" ]; then
    echo "gofmt -l lists (run gofmt -w on them):" >&2
    echo "$files" >&2
    return 1
  fi
}

# toolpkgs lists the tools module's own packages (the image builder), if any.
toolpkgs() { (cd tools && go list ./... 2>/dev/null); }

vet() {
  go vet ./... || return 1
  [ -z "$(toolpkgs)" ] || (cd tools && go vet ./...)
}

staticcheck() {
  local bin="$root/.cache/bin/staticcheck"
  [ -x "$bin" ] || scripts/tools.sh staticcheck
  "$bin" ./... || return 1
  [ -z "$(toolpkgs)" ] || (cd tools && "$bin" ./...)
}

tidy() {
  go mod tidy -diff && (cd tools && go mod tidy -diff)
}

step gofmt gofmt_clean
step vet vet
step staticcheck staticcheck
step tidy tidy
