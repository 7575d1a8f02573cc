# Sourced by the bench scripts: the toolchain, a work directory removed at
# exit with every process started into pids, free ports, and the builds.
# Sets root (the repository) and work, and cds to root.
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cd "$root"
# needs NAME TOOL...: fails with NAME's message when a tool is missing.
needs() { local who=$1; shift; for t in "$@"; do command -v "$t" >/dev/null || { echo "$who: $t is missing (scripts/deps.sh installs it)" >&2; exit 1; }; done; }
# build NAME...: fencegate (or $FENCEGATE when set) and bench/cmd/NAME into $work.
build() {
  if [ -n "${FENCEGATE:-}" ]; then cp "$FENCEGATE" "$work/fencegate"; else go build -o "$work/fencegate" ./cmd/fencegate; fi
  for c in "$@"; do go build -o "$work/$c" "./bench/cmd/$c"; done
}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitport() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
