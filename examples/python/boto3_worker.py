#!/usr/bin/python3
"""A fencegate worker in Python with boto3, against an S3 route.

Takes the lease on BUCKET/KEY (the route's "{bucket}/{key}" resource) over
the coordinator's HTTP API, or uses FENCING_TOKEN from `fencegate lease
run`, and uploads the object through the gateway with the token in the
Fencing-Token header (added before signing, so the signature covers it).

While it holds the lease it renews it every third of the TTL and checks,
before the upload, that the lease is still its own (Renewer, as in
requests_worker.py).

A stale refusal (409, S3 error code stale_fencing_token) means a newer
owner exists: the upload had no effect, and the worker stops. It must not
retry with the same token (and boto3 must not retry it either: 409 is not
retried).

    boto3_worker.py BUCKET KEY VALUE
    env: FENCEGATE_COORDINATOR, FENCEGATE_URL (the gateway), FENCEGATE_OWNER,
         AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the worker's key from the
         route's s3.clients), FENCEGATE_TTL (lease seconds, default 30)
    exit: 0 written, 3 refused as stale (stopped), 4 lease lost (stopped),
          1 other failure
"""
import os
import socket
import sys
import threading
import time

import boto3
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

COORDINATOR = os.environ.get("FENCEGATE_COORDINATOR", "http://127.0.0.1:8081")
GATEWAY = os.environ.get("FENCEGATE_URL", "http://127.0.0.1:8080")
OWNER = os.environ.get("FENCEGATE_OWNER", "boto3-%s-%d" % (socket.gethostname(), os.getpid()))
EXIT_STALE, EXIT_LOST = 3, 4
TTL_SECONDS = float(os.environ.get("FENCEGATE_TTL", "30"))


def coordinator(path, **body):
    r = requests.post(COORDINATOR + path, json=body, timeout=30)
    if r.status_code != 200:
        raise SystemExit("coordinator %s: %d %s" % (path, r.status_code, r.text.strip()))
    return r.json()


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
        """Exits with EXIT_LOST if the lease is gone: call before each write."""
        if self.lost is None and time.monotonic() >= self.expires:
            self.lost = "lease expired: it could not be renewed in time"
        if self.lost is not None:
            print("%s; stopping" % self.lost, file=sys.stderr)
            raise SystemExit(EXIT_LOST)


def main(bucket, key, value):
    resource = bucket + "/" + key
    token = os.environ.get("FENCING_TOKEN")
    lease = renewer = None
    if not token:
        sent = time.monotonic()
        lease = coordinator("/v1/leases/acquire", resource=resource, owner=OWNER, ttl="%gs" % TTL_SECONDS, wait="10s")
        token = str(lease["token"])
        renewer = Renewer(resource, lease["token"], sent)
        renewer.start()
    s3 = boto3.client("s3", endpoint_url=GATEWAY, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def add_token(request, **_):
        request.headers["Fencing-Token"] = token

    s3.meta.events.register("before-sign.s3.*", add_token)
    try:
        if renewer is not None:
            renewer.check()
        s3.put_object(Bucket=bucket, Key=key, Body=value.encode())
        print("written %s with token %s" % (resource, token))
        return 0
    except ClientError as e:
        err = e.response.get("Error", {})
        if err.get("Code") == "stale_fencing_token":
            # A successful safety decision: stop, do not retry.
            print("stale_fencing_token: %s; stopping" % err.get("Message"), file=sys.stderr)
            return EXIT_STALE
        raise
    finally:
        if renewer is not None:
            renewer.done.set()
            renewer.join()
        if lease is not None and renewer.lost is None:
            coordinator("/v1/leases/release", resource=resource, owner=OWNER, token=lease["token"])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
