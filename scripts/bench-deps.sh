#!/usr/bin/env bash
# Installs what the benchmarks in bench/ need beyond scripts/deps.sh:
# nginx (the reference proxy of bench/dataplane.sh; Debian's nginx-light, or
# nginx where -light is not packaged) and wrk. The test suite does not need
# them, and CI does not run benchmarks. Idempotent: does nothing when all is
# present. Needs root (or sudo) on Debian/Ubuntu.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -eq 0 ]; then
  echo "bench-deps.sh: all present (nginx, wrk, curl)"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "bench-deps.sh: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
pkgs=()
for p in "${missing[@]}"; do
  if [ "$p" = nginx ]; then
    # nginx-light has the proxy module and little else; newer Debian
    # releases fold it into nginx.
    if apt-cache show nginx-light >/dev/null 2>&1; then p=nginx-light; fi
  fi
  pkgs+=("$p")
done
echo "bench-deps.sh: installing ${pkgs[*]}"
$sudo apt-get install -y -q --no-install-recommends "${pkgs[@]}"
# The package may start a system nginx on port 80; the bench runs its own
# with a temporary prefix, so stop it (no init system in a container is fine).
if command -v service >/dev/null 2>&1; then $sudo service nginx stop >/dev/null 2>&1 || true; fi
