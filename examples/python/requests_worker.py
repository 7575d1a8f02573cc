#!/usr/bin/python3
"""A fencegate worker in Python with requests.

Takes a lease over the coordinator's HTTP API (or uses the one `fencegate
lease run` took: FENCING_TOKEN in the environment), writes through the
gateway with the lease's token, and releases the lease.

While it holds the lease it renews it every third of the TTL (a renewal
or two may fail and the lease still stands), and it checks before each
write that the lease is still its own. The lease is lost when the
coordinator answers a renewal with 409 lease_lost (another worker may hold
it now), or when a TTL has passed since the last renewal that succeeded
was sent (the coordinator could not be reached, or the worker was paused):
the worker then stops with exit 4 and writes nothing more.

A stale refusal (409 stale_fencing_token) means a newer owner exists: the
write had no effect, and the worker stops. It must not retry with the same
token.

    requests_worker.py RESOURCE VALUE
    requests_worker.py RESOURCE -     (writes each line of stdin in turn)
    env: FENCEGATE_COORDINATOR (default http://127.0.0.1:8081)
         FENCEGATE_URL         (the gateway, default http://127.0.0.1:8080)
         FENCEGATE_OWNER       (default python-HOST-PID)
         FENCEGATE_TTL         (lease time in seconds, default 30)
    exit: 0 written, 3 refused as stale (stopped), 4 lease lost (stopped),
          1 other failure
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
EXIT_STALE, EXIT_LOST = 3, 4
TTL_SECONDS = float(os.environ.get("FENCEGATE_TTL", "30"))


def coordinator(path, **body):
    r = requests.post(COORDINATOR + path, json=body, timeout=30)
    if r.status_code != 200:
        # Refusals are {"error": code, "message": ...}: lease_held, lease_lost, ...
        raise SystemExit("coordinator %s: %d %s" % (path, r.status_code, r.text.strip()))
    return r.json()


class LeaseLost(Exception):
    pass


class Renewer(threading.Thread):
    """Renews the lease every TTL/3 until stopped. lost is set (and renewal
    ends) when the coordinator answers lease_lost, or when the TTL passed
    since the last renewal that succeeded: the lease must then be treated as
    gone, whatever the worker is doing. Times are taken before a request is
    sent: the coordinator's expiry is at least that late, never earlier."""

    def __init__(self, resource, token, sent):
        super().__init__(daemon=True)
        self.resource, self.token = resource, token
        self.done = threading.Event()
        self.lost = None
        self.expires = sent + TTL_SECONDS

    def run(self):
        while not self.done.wait(TTL_SECONDS / 3):
            sent = time.monotonic()
            try:
                r = requests.post(COORDINATOR + "/v1/leases/renew", timeout=TTL_SECONDS / 3,
                                  json={"resource": self.resource, "owner": OWNER, "token": self.token,
                                        "ttl": "%gs" % TTL_SECONDS})
            except requests.RequestException:
                r = None
            if r is not None and r.status_code == 200:
                self.expires = sent + TTL_SECONDS
            elif r is not None and r.status_code == 409:
                self.lost = "lease lost: " + r.text.strip()
                return
            if time.monotonic() >= self.expires:
                self.lost = "lease expired: it could not be renewed in time"
                return

    def check(self):
        """Raises LeaseLost if the lease is gone: call before each write."""
        if self.lost is None and time.monotonic() >= self.expires:
            self.lost = "lease expired: it could not be renewed in time"
        if self.lost is not None:
            raise LeaseLost(self.lost)


def values(arg):
    if arg != "-":
        yield arg
        return
    for line in sys.stdin:
        yield line.rstrip("\n")


def main(resource, value):
    token = os.environ.get("FENCING_TOKEN")
    lease = renewer = None
    if not token:
        sent = time.monotonic()
        lease = coordinator("/v1/leases/acquire", resource=resource, owner=OWNER, ttl="%gs" % TTL_SECONDS, wait="10s")
        token = str(lease["token"])
        renewer = Renewer(resource, lease["token"], sent)
        renewer.start()
    try:
        for v in values(value):
            if renewer is not None:
                renewer.check()
            r = requests.put(GATEWAY + resource, data=v.encode(), headers={"Fencing-Token": token}, timeout=30)
            if r.status_code == 409 and r.headers.get("Content-Type", "").startswith("application/json") \
                    and r.json().get("error") == "stale_fencing_token":
                refusal = r.json()
                # A successful safety decision: stop the dependent work, leave
                # the resource to its current owner, do not retry.
                print("stale_fencing_token: token %s is older than %s on %s; stopping"
                      % (refusal["token"], refusal["highest"], refusal["resource"]), file=sys.stderr)
                return EXIT_STALE
            r.raise_for_status()
            print("written %s with token %s: %d" % (resource, token, r.status_code), flush=True)
        return 0
    except LeaseLost as e:
        print("%s; stopping" % e, file=sys.stderr)
        return EXIT_LOST
    finally:
        if renewer is not None:
            renewer.done.set()
            renewer.join()
        if lease is not None and renewer.lost is None:
            try:
                coordinator("/v1/leases/release", resource=resource, owner=OWNER, token=lease["token"])
            except SystemExit as e:
                # The lease then expires by itself; the exit status stays
                # the outcome of the writes.
                print(e, file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
