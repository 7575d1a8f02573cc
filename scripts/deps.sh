#!/usr/bin/env bash
# Installs the Debian packages the tests need, when missing: PostgreSQL (the
# server binaries, run by internal/testenv as the postgres user), wrk (load
# tests), procps (ps/pkill in scripts), iproute2 (ss), chromium (the
# console's browser tests, driven headless through chromedp),
# python3-werkzeug (the case-folding upstream of e2e/fence_bypass_test.go),
# curl (the README's Quickstart and examples/curl-worker.sh) and Debian's
# python3-requests and python3-boto3 (the Python workers in examples/,
# run with /usr/bin/python3). Idempotent: when everything is present it
# does nothing, not even apt-get update.
# Needs root (or sudo) on Debian/Ubuntu.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/goenv.sh"

missing=()
# PostgreSQL server binaries live in /usr/lib/postgresql/N/bin on Debian.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if ! id postgres >/dev/null 2>&1 && [[ ! " ${missing[*]} " == *" postgresql "* ]]; then
  missing+=(postgresql)
fi
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
# PgBouncer: shared fence mode behind a pooler (internal/testenv/pgbouncer.go).
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v ps >/dev/null 2>&1 || missing+=(procps)
command -v ss >/dev/null 2>&1 || missing+=(iproute2)
# Apache httpd with mod_dav: the real conditional-write HTTP server the
# `precondition: etag` tests run against (internal/testenv/apache.go).
[ -x /usr/sbin/apache2 ] || missing+=(apache2)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
/usr/bin/python3 -c 'import werkzeug' >/dev/null 2>&1 || missing+=(python3-werkzeug)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# /usr/bin/python3 explicitly: a pyenv or venv python earlier in PATH has
# its own site-packages.
/usr/bin/python3 -c 'import requests' >/dev/null 2>&1 || missing+=(python3-requests)
/usr/bin/python3 -c 'import boto3' >/dev/null 2>&1 || missing+=(python3-boto3)
# Ceph's s3-tests (e2e/s3tests, TestS3Conformance): pytest and the modules
# the vendored tests import.
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || missing+=(python3-pytest)
/usr/bin/python3 -c 'import munch' >/dev/null 2>&1 || missing+=(python3-munch)
/usr/bin/python3 -c 'import isodate' >/dev/null 2>&1 || missing+=(python3-isodate)
/usr/bin/python3 -c 'import dateutil' >/dev/null 2>&1 || missing+=(python3-dateutil)
/usr/bin/python3 -c 'import pytz' >/dev/null 2>&1 || missing+=(python3-tz)
# nginx with its DAV modules, and litmus (the WebDAV server test suite):
# WebDAV namespace operations through the gateway (internal/testenv/nginx.go,
# internal/testenv/litmus.go).
[ -x /usr/sbin/nginx ] || missing+=(nginx)
[ -e /usr/lib/nginx/modules/ngx_http_dav_ext_module.so ] || missing+=(libnginx-mod-http-dav-ext)
command -v litmus >/dev/null 2>&1 || missing+=(litmus)

# The lock services of the token_source tests: etcd (a three-member cluster,
# internal/testenv/etcd.go), etcdctl (examples/etcdctl-worker.sh) and
# ZooKeeper (internal/testenv/zookeeper.go, a Java server).
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)

# Node.js and npm: Azurite (the Azure Storage emulator, installed by
# scripts/tools.sh with npm ci) and the Node example worker
# (examples/node, @azure/storage-blob).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps.sh: all present (postgresql, pgbouncer, wrk, procps, iproute2, apache2, chromium, python3-werkzeug, curl, python3-requests, python3-boto3, python3-pytest, python3-munch, python3-isodate, python3-dateutil, python3-tz, etcd-server, etcd-client, zookeeper, nginx, libnginx-mod-http-dav-ext, litmus, nodejs, npm)"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps.sh: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
# The Debian package creates and starts a default cluster; the tests start
# their own throwaway clusters, so stop the default one to free its memory
# and port 5432 (ignore failures: there may be no init system in a container).
if [[ " ${missing[*]} " == *" postgresql "* ]]; then
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    for c in $(pg_lsclusters -h 2>/dev/null | awk '$4=="online"{print $1"/"$2}'); do
      $sudo pg_ctlcluster "${c%/*}" "${c#*/}" stop || true
    done
  fi
fi
# The pgbouncer package may start a system-wide instance; the tests start
# their own.
if [[ " ${missing[*]} " == *" pgbouncer "* ]] && command -v service >/dev/null 2>&1; then
  $sudo service pgbouncer stop >/dev/null 2>&1 || true
fi
echo "deps.sh: done"
