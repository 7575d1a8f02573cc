#!/usr/bin/env bash
# The checks every change must pass before the tests run (scripts/test.sh
# calls this first). Each one fails the build; fix what they find rather than
# silencing it.
#
#   gofmt      `gofmt -l` lists no file
#   vet        `go vet ./...` in the main module and the tools module
#   staticcheck  pinned in tools/go.mod, built by scripts/tools.sh into .cache/bin
#   tidy       `go mod tidy -diff` is empty for every module (main, tools, tools/helm, tools/fakegcs, tools/etcd)
#   vulncheck  govulncheck (pinned in tools/go.mod), offline: vuln.go.dev is
#              not reachable from this project's machines, so the database is
#              the data/osv directory of the golang.org/x/vulndb module at
#              $vulndb_version below, fetched through the Go module proxy
#              (govulncheck reads a directory of OSV entries with -db file://).
#              A called vulnerability fails, in a required module or in the
#              standard library (the toolchain is go.mod's, exported by
#              scripts/goenv.sh). GOVULNCHECK_WARN_STDLIB=1 reports the
#              standard library's as warnings only (a local run on an older Go).
#              To see newer advisories, bump vulndb_version to
#              `go list -m golang.org/x/vulndb@latest`.
#
# Usage: scripts/lint.sh
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"
vulndb_version=v0.0.0-20261105234957-e22db6528018
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
  go mod tidy -diff && (cd tools && go mod tidy -diff) && (cd tools/helm && go mod tidy -diff) && (cd tools/fakegcs && go mod tidy -diff) && (cd tools/etcd && go mod tidy -diff)
}

vulncheck() {
  local bin="$root/.cache/bin/govulncheck" dir tmp
  [ -x "$bin" ] || scripts/tools.sh govulncheck
  # Outside any module, so neither go.mod nor go.sum is touched.
  tmp=$(mktemp -d)
  dir=$(cd "$tmp" && go mod download -json "golang.org/x/vulndb@$vulndb_version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rmdir "$tmp"
  if [ ! -d "$dir/data/osv" ]; then
    echo "vulncheck: golang.org/x/vulndb@$vulndb_version has no data/osv (dir '$dir')" >&2
    return 1
  fi
  "$bin" -db "file://$dir/data/osv" -format json ./... |
    (cd tools && go run ./vulnreport ${GOVULNCHECK_WARN_STDLIB:+-warn-stdlib})
}

# toolchain: go.mod's go line is the one place the Go version is kept;
# scripts read it from there (scripts/goenv.sh). The files a person pastes
# from or a builder runs without the scripts must name it literally, and
# must name go.mod's: .ci/run and the README's command blocks
# (GOTOOLCHAIN=goX), the Dockerfile's build stage (golang:X).
toolchain() {
  local v f
  v=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
  for f in .ci/run README.md; do
    grep -q "GOTOOLCHAIN=go$v\b" "$f" || { echo "$f does not name GOTOOLCHAIN=go$v (go.mod's go line)" >&2; return 1; }
    if grep -o 'GOTOOLCHAIN=go[0-9.]*' "$f" | grep -vqx "GOTOOLCHAIN=go$v"; then
      echo "$f names a GOTOOLCHAIN other than go$v (go.mod's go line)" >&2; return 1
    fi
  done
  grep -q "golang:$v " deploy/Dockerfile || { echo "deploy/Dockerfile does not build with golang:$v (go.mod's go line)" >&2; return 1; }
}

step toolchain toolchain
step gofmt gofmt_clean
step vet vet
step staticcheck staticcheck
step tidy tidy
step vulncheck vulncheck
