"""A werkzeug upstream for fencegate's bypass tests (e2e/fence_bypass_test.go).

It behaves like the many real applications that trust whatever reaches them:
werkzeug upper-cases the request method ("put" is applied as PUT), honours
X-HTTP-Method-Override, and reads X-Tenant from the WSGI environ, where
X-Tenant and X_Tenant are one variable (HTTP_X_TENANT, comma-joined; the
last value wins; no X-Tenant means tenant "default"). Every write it applies is recorded; GET /_applied answers
the list as JSON.

Usage: python3 werkzeug_upstream.py PORT
"""
import json
import sys
import threading

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

applied = []
lock = threading.Lock()
READS = ("GET", "HEAD", "OPTIONS", "TRACE", "PROPFIND")


@Request.application
def app(request):
    if request.path == "/_applied" and request.method == "GET":
        with lock:
            return Response(json.dumps(applied), mimetype="application/json")
    method = request.method  # werkzeug folds REQUEST_METHOD to upper case
    override = request.headers.get("X-HTTP-Method-Override")
    if override:
        method = override.upper()
    if method in READS:
        return Response("read\n")
    tenant = request.environ.get("HTTP_X_TENANT", "default").split(",")[-1].strip()
    body = request.get_data(as_text=True)
    with lock:
        applied.append({
            "method": method,
            "sent": request.environ["REQUEST_METHOD"],
            "path": request.path,
            "tenant": tenant,
            "token": request.environ.get("HTTP_FENCING_TOKEN"),
            "body": body,
        })
    return Response("applied\n")


def main():
    srv = make_server("127.0.0.1", int(sys.argv[1]), app, threaded=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
