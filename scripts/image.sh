#!/usr/bin/env bash
# Builds fencegate's container image without a container engine (none is
# installed on this project's machines, and no base image can be pulled):
# scripts/build.sh makes the static linux binary for each architecture
# (amd64 and arm64) with version and commit stamped in, and tools/ociimage
# (go-containerregistry, pinned in tools/go.mod) puts each, an /etc/passwd
# entry for the unprivileged user (uid 65532) and the host's CA
# certificates into one layer on an empty (scratch) base, with
# deploy/Dockerfile's user, entrypoint, command, ports, environment and OCI
# labels, and the images into one multi-architecture index tagged with the
# version. The output is an OCI archive:
#   skopeo copy --all oci-archive:FILE docker://REGISTRY/fencegate:VERSION
# (or `podman load -i FILE`, `docker load -i FILE`).
#
# Usage: scripts/image.sh [OUT]        # default OUT: .cache/fencegate-image.tar
#        scripts/image.sh --check [OUT] # build, then run the image test
#                                      # (tools/ociimage: index, config, contents,
#                                      # `fencegate version` from the image)
# Environment: VERSION (default as scripts/build.sh), ARCHS (default "amd64 arm64").
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
out=${1:-$root/.cache/fencegate-image.tar}
case $out in /*) ;; *) out=$PWD/$out ;; esac

export VERSION=${VERSION:-$(git describe --tags --dirty 2>/dev/null || echo dev)}
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
archs=${ARCHS:-amd64 arm64}
# Reproducible: the files and the image carry the commit's time.
created=$(git log -1 --format=%ct 2>/dev/null || echo 0)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bins=()
for a in $archs; do
  GOOS=linux GOARCH=$a scripts/build.sh "$work/fencegate-$a"
  bins+=(-binary "$a=$work/fencegate-$a")
done
(cd tools && go run ./ociimage "${bins[@]}" -version "$VERSION" -commit "$commit" \
  -created "$created" -out "$out")

if [ $check = 1 ]; then
  (cd tools && FENCEGATE_IMAGE="$out" FENCEGATE_IMAGE_VERSION="$VERSION" FENCEGATE_IMAGE_COMMIT="$commit" \
    go test -count=1 ./ociimage/)
fi
