"""An upstream that reads write bodies, except when a precondition answers.

Python's http.server on HTTP/1.1 keep-alive connections, as a small
service with conditional writes: a PUT whose If-None-Match names the
stored ETag (or * for a key that exists) is answered 304 Not Modified, and
one whose If-Match does not is answered 412, both from the headers alone,
the body left unread (the conditional shortcut). Every other write reads
its body, stores it and answers 200 with the new ETag and a body naming
the request ("PUT /orders/a"). An unread body is thus taken for the next
request on the connection, unless the client asked to close it.

Every write it applies is recorded (method, path, the Fencing-Token and
X-Worker headers, whether the connection was to close); GET /_applied
answers the list as JSON.

Modes (further arguments), each another refusal answered from the head
alone, the body unread:
  auth      a PUT without "Authorization: Bearer probe" is answered 401;
  notfound  a PUT of a path more than two segments deep is answered 404
            (no such route);
  redirect  a PUT of a path with // is answered 301 to the cleaned path.

Usage: python3 conditional_upstream.py PORT [auth] [notfound] [redirect]
"""
import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

applied = []
etags = {}
lock = threading.Lock()
MODES = set(sys.argv[2:])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, body, extra=()):
        data = body.encode()
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        if status != 304:
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if status != 304:
            self.wfile.write(data)

    def do_PUT(self):
        # Refusals from the head alone: the body unread.
        if "auth" in MODES and self.headers.get("Authorization") != "Bearer probe":
            self.answer(401, "unauthorized")
            return
        if "notfound" in MODES and len([p for p in self.path.split("/") if p]) > 2:
            self.answer(404, "no such route")
            return
        if "redirect" in MODES and "//" in self.path:
            self.answer(301, "moved", [("Location", self.path.replace("//", "/"))])
            return
        with lock:
            etag = etags.get(self.path)
        inm = self.headers.get("If-None-Match")
        im = self.headers.get("If-Match")
        if inm is not None and etag is not None and inm.strip() in ("*", etag):
            self.answer(304, "", [("ETag", etag)])  # body unread
            return
        if im is not None and im.strip() not in ("*", etag):
            self.answer(412, "precondition failed")  # body unread
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        etag = '"%s"' % hashlib.sha1(body).hexdigest()
        with lock:
            etags[self.path] = etag
            applied.append({
                "method": self.command,
                "path": self.path,
                "token": self.headers.get("Fencing-Token"),
                "worker": self.headers.get("X-Worker"),
                "close": (self.headers.get("Connection") or "").lower() == "close",
            })
        self.answer(200, "%s %s" % (self.command, self.path), [("ETag", etag)])

    def do_GET(self):
        if self.path == "/_applied":
            with lock:
                self.answer(200, json.dumps(applied), [("Cache-Control", "no-store")])
            return
        self.answer(404, "not found")


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
