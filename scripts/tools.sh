#!/usr/bin/env bash
# Builds the pinned test servers (versitygw, toxiproxy, pebble, fake-gcs-server,
# etcd and etcdctl, jaeger, benchstat; Azurite with npm), helm (for the chart's tests)
# and the linters (staticcheck, govulncheck) from the tools module into
# .cache/bin/. A binary is rebuilt only when it is
# missing or when the go.mod/go.sum pinning it (or the Go version) changed; the
# hash is kept in .cache/bin/.<name>.stamp.
#
# Usage: scripts/tools.sh            # every tool (jaeger last: ~8 min on 2 cores)
#        scripts/tools.sh versitygw pebble staticcheck
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="$root/.cache/bin"
mkdir -p "$bin"

# name|module dir (relative to repo root)|package. Order matters: jaeger is the
# slow one, so it comes last.
tools=(
  "staticcheck|tools|honnef.co/go/tools/cmd/staticcheck"
  "govulncheck|tools|golang.org/x/vuln/cmd/govulncheck"
  "versitygw|tools|github.com/versity/versitygw/cmd/versitygw"
  "toxiproxy-server|tools|github.com/Shopify/toxiproxy/v2/cmd/server"
  "pebble|tools|github.com/letsencrypt/pebble/v2/cmd/pebble"
  "benchstat|tools|golang.org/x/perf/cmd/benchstat"
  "fake-gcs-server|tools/fakegcs|github.com/fsouza/fake-gcs-server"
  # Its own module, pinned to the etcd release the client in go.mod speaks
  # (3.7.3): internal/testenv.Etcd runs it before Debian's older etcd-server.
  # ~30s and ~8s of a first build on 2 cores.
  "etcd|tools/etcd|go.etcd.io/etcd/server/v3"
  "etcdctl|tools/etcd|go.etcd.io/etcd/etcdctl/v3"
  # Its own module: helm needs newer k8s.io modules than jaeger's.
  "helm|tools/helm|helm.sh/helm/v4/cmd/helm"
  "jaeger|tools|github.com/jaegertracing/jaeger/cmd/jaeger"
  # npm, not Go: Azurite and @azure/storage-blob, pinned in
  # tools/azurite/package-lock.json (see the end of this file).
  "azurite|tools/azurite|npm"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do
    # "toxiproxy" selects toxiproxy-server.
    [ "$w" = "$1" ] || [ "$w-server" = "$1" ] && return 0
  done
  return 1
}

if [ ${#want[@]} -gt 0 ]; then
  for w in "${want[@]}"; do
    found=0
    for t in "${tools[@]}"; do
      n=${t%%|*}
      { [ "$w" = "$n" ] || [ "$w-server" = "$n" ]; } && found=1
    done
    [ $found = 1 ] || { echo "tools.sh: unknown tool $w" >&2; exit 2; }
  done
fi

goversion=$(go env GOVERSION)
for t in "${tools[@]}"; do
  IFS='|' read -r name moddir pkg <<<"$t"
  selected "$name" || continue
  [ "$pkg" = npm ] && continue
  dir="$root/$moddir"
  stamp="$bin/.$name.stamp"
  hash=$(cat "$dir/go.mod" "$dir/go.sum" <(echo "$pkg $goversion") | sha256sum | cut -d' ' -f1)
  if [ -x "$bin/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
    echo "tools.sh: $name up to date"
    continue
  fi
  echo "tools.sh: building $name ($pkg, module $moddir) ..."
  start=$SECONDS
  (cd "$dir" && go build -trimpath -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$hash" >"$stamp"
  echo "tools.sh: built $name in $((SECONDS - start))s"
done

# Azurite (the Azure Storage emulator) and the Azure Storage Blob SDK for
# JavaScript (the Node example worker), installed with `npm ci` from
# tools/azurite's lockfile into .cache/azurite; .cache/bin/azurite-blob
# runs the emulator, and tests find the SDK in .cache/azurite/node_modules.
if selected azurite; then
  dir="$root/tools/azurite"
  dest="$root/.cache/azurite"
  stamp="$bin/.azurite.stamp"
  hash=$(cat "$dir/package.json" "$dir/package-lock.json" <(node --version) | sha256sum | cut -d' ' -f1)
  if [ -x "$dest/node_modules/.bin/azurite-blob" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
    echo "tools.sh: azurite up to date"
  else
    echo "tools.sh: installing azurite and @azure/storage-blob (npm ci, tools/azurite) ..."
    start=$SECONDS
    rm -rf "$dest"
    mkdir -p "$dest"
    cp "$dir/package.json" "$dir/package-lock.json" "$dest/"
    (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error)
    # Relative: .cache may be reached through a worktree's symlink.
    ln -sfn ../azurite/node_modules/.bin/azurite-blob "$bin/azurite-blob"
    echo "$hash" >"$stamp"
    echo "tools.sh: installed azurite in $((SECONDS - start))s"
  fi
fi
