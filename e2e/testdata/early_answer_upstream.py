"""An upstream that answers writes without reading their bodies.

Python's http.server on HTTP/1.1 keep-alive connections: PUT and DELETE are
answered at once and the request body is left unread, so the server takes
the body's bytes for its next request on the connection, as many small
services do. Every request it acts on is recorded (method, path, the
Fencing-Token and X-Worker headers, as received, and whether the connection
was to close); GET /_applied answers the list as JSON. Answers to writes name
the request they answer ("PUT /orders/a") and keep the upstream's own header
spelling (x-amz-meta-foo, lower case), which GET /_raw also shows.

With ignore-close it also ignores a client's Connection: close and reads
the next request anyway.

Usage: python3 early_answer_upstream.py PORT [ignore-close]
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

applied = []
lock = threading.Lock()
IGNORE_CLOSE = sys.argv[2:] == ["ignore-close"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, body, extra=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def record(self):
        with lock:
            applied.append({
                "method": self.command,
                "path": self.path,
                "token": self.headers.get("Fencing-Token"),
                "worker": self.headers.get("X-Worker"),
                "close": (self.headers.get("Connection") or "").lower() == "close",
            })

    def write(self):
        # The body is never read: the early answer.
        self.record()
        self.answer(200, "%s %s" % (self.command, self.path))
        if IGNORE_CLOSE:
            self.close_connection = False

    do_PUT = write
    do_DELETE = write
    do_POST = write

    def do_GET(self):
        if self.path == "/_applied":
            with lock:
                self.answer(200, json.dumps(applied), [("Cache-Control", "no-store")])
            return
        # Header names as a store sends them, case included.
        self.answer(200, "read %s" % self.path, [
            ("x-amz-meta-foo", "bar"),
            ("ETag", '"abc"'),
            ("x-Mixed-CASE", "1"),
            ("Last-Modified", "Sun, 06 Dec 2026 00:00:00 GMT"),
        ])


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
