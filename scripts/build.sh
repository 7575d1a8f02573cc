#!/usr/bin/env bash
# Builds the release binary: static (CGO off), -trimpath, with the version,
# commit and modified flag stamped in through -ldflags -X (what
# `fencegate version` prints).
#
# Usage: scripts/build.sh [OUT]        # default OUT: .cache/dist/fencegate
# Environment:
#   VERSION  the version to stamp (default: `git describe --tags --dirty`, or
#            "dev" when the history has no tag)
#   GOOS, GOARCH  cross-compile as usual
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-$root/.cache/dist/fencegate}

commit=$(git rev-parse HEAD 2>/dev/null || true)
modified=false
if [ -n "$commit" ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  modified=true
fi
version=${VERSION:-$(git describe --tags --dirty 2>/dev/null || echo dev)}

ldflags="-s -w -X main.version=$version -X main.commit=${commit:-unknown} -X main.modified=$modified"
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/fencegate
echo "build.sh: $out ($version, commit ${commit:-unknown}, modified $modified)"
