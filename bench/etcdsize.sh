#!/usr/bin/env bash
# What shared fence records cost etcd, per million fences: database size,
# etcd's memory, bytes per superseded version until compaction, and after
# compaction and defragmentation (bench/etcdsize/size_test.go). Runs the
# etcd of scripts/tools.sh etcd (3.7.3) if built, else the one on PATH.
#
# Usage: bench/etcdsize.sh [fences (default 1000000)]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
FENCEGATE_BENCH_KEYS=${1:-1000000} go test -run '^$' -bench EtcdFenceSize -benchtime 1x -timeout 30m ./bench/etcdsize/
