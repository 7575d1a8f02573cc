#!/usr/bin/python3
"""A fencegate worker in Python with requests.

Takes a lease over the coordinator's HTTP API (or uses the one `fencegate
lease run` took: FENCING_TOKEN in the environment), writes through the
gateway with the lease's token, and releases the lease.

While it holds the lease it renews it every third of the TTL (a renewal
or two may fail and the lease still stands), and it checks before each
write that the lease is still its own: a worker that paused longer than
the TTL learns here that the lease is lost, and stops.

A stale refusal (409 stale_fencing_token) means a newer owner exists: the
write had no effect, and the worker stops. It must not retry with the same
token.

    requests_worker.py RESOURCE VALUE
    env: FENCEGATE_COORDINATOR (default http://127.0.0.1:8081)
         FENCEGATE_URL         (the gateway, default http://127.0.0.1:8080)
         FENCEGATE_OWNER       (default python-HOST-PID)
    exit: 0 written, 3 refused as stale (stopped), 1 other failure
"""
import os
import socket
import sys
import threading
import time

import requests

COORDINATOR = os.environ.get("FENCEGATE_COORDINATOR", "http://127.0.0.1:8081")
GATEWAY = os.environ.get("FENCEGATE_URL", "http://127.0.0.1:8080")
OWNER = os.environ.get("FENCEGATE_OWNER", "python-%s-%d" % (socket.gethostname(), os.getpid()))
EXIT_STALE = 3
TTL_SECONDS = 30


def coordinator(path, **body):
    r = requests.post(COORDINATOR + path, json=body, timeout=30)
    if r.status_code != 200:
        # Refusals are {"error": code, "message": ...}: lease_held, lease_lost, ...
        raise SystemExit("coordinator %s: %d %s" % (path, r.status_code, r.text.strip()))
    return r.json()


class Renewer(threading.Thread):
    """Renews the lease every TTL/3 until stopped. lost is set (and renewal
    ends) when the coordinator answers lease_lost, or when the TTL passed
    since the last renewal that succeeded: the lease must then be treated as
    gone, whatever the worker is doing."""

    def __init__(self, resource, token):
        super().__init__(daemon=True)
        self.resource, self.token = resource, token
        self.done = threading.Event()
        self.lost = None
        self.expires = time.monotonic() + TTL_SECONDS

    def run(self):
        while not self.done.wait(TTL_SECONDS / 3):
            try:
                r = requests.post(COORDINATOR + "/v1/leases/renew", timeout=TTL_SECONDS / 3,
                                  json={"resource": self.resource, "owner": OWNER, "token": self.token,
                                        "ttl": "%ds" % TTL_SECONDS})
            except requests.RequestException:
                r = None
            if r is not None and r.status_code == 200:
                self.expires = time.monotonic() + TTL_SECONDS
            elif r is not None and r.status_code == 409:
                self.lost = "lease lost: " + r.text.strip()
                return
            if time.monotonic() >= self.expires:
                self.lost = "lease expired: it could not be renewed in time"
                return

    def check(self):
        """Raises SystemExit if the lease is gone: call before each write."""
        if self.lost is None and time.monotonic() >= self.expires:
            self.lost = "lease expired: it could not be renewed in time"
        if self.lost is not None:
            raise SystemExit("%s; stopping" % self.lost)


def main(resource, value):
    token = os.environ.get("FENCING_TOKEN")
    lease = renewer = None
    if not token:
        lease = coordinator("/v1/leases/acquire", resource=resource, owner=OWNER, ttl="%ds" % TTL_SECONDS, wait="10s")
        token = str(lease["token"])
        renewer = Renewer(resource, lease["token"])
        renewer.start()
    try:
        if renewer is not None:
            renewer.check()
        r = requests.put(GATEWAY + resource, data=value.encode(), headers={"Fencing-Token": token}, timeout=30)
        if r.status_code == 409 and r.headers.get("Content-Type", "").startswith("application/json") \
                and r.json().get("error") == "stale_fencing_token":
            refusal = r.json()
            # A successful safety decision: stop the dependent work, leave
            # the resource to its current owner, do not retry.
            print("stale_fencing_token: token %s is older than %s on %s; stopping"
                  % (refusal["token"], refusal["highest"], refusal["resource"]), file=sys.stderr)
            return EXIT_STALE
        r.raise_for_status()
        print("written %s with token %s: %d" % (resource, token, r.status_code))
        return 0
    finally:
        if renewer is not None:
            renewer.done.set()
            renewer.join()
        if lease is not None:
            coordinator("/v1/leases/release", resource=resource, owner=OWNER, token=lease["token"])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
