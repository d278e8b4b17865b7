#!/usr/bin/env python3
"""The origin for bench/cache-policy.sh. Objects are named by the last segment of the
path (so /plain/obj1k, /keyed/obj1k and /obj1k are the same object):

  obj1k    1024 bytes, Cache-Control: max-age=3600, ETag "v1", Last-Modified
  obj1m    1 MiB (1048576 bytes), the same fields
  reach    "reach N" (N: the requests for that path so far), max-age=3600
  reval    1,000,000 bytes, Cache-Control: max-age=1, ETag "r1", Last-Modified; a
           request with If-None-Match "r1" gets a 304 with the same fields and no body
  stats    JSON: bytes sent (status line, fields and body) and requests, per full path

HTTP/1.1 keep-alive, one thread per connection (ThreadingHTTPServer).

usage: cache-policy-origin.py PORT
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
LAST_MODIFIED = "Sat, 28 Nov 2026 12:00:00 GMT"
BODIES = {
    "obj1k": b"a" * 1024,
    "obj1m": bytes(i % 251 for i in range(1 << 20)),
    "reval": b"r" * 1_000_000,
}
sent = {}
requests = {}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        name = path.rsplit("/", 1)[-1]
        with lock:
            requests[path] = requests.get(path, 0) + 1
            n = requests[path]
        fields = []
        status = "200 OK"
        if name == "stats":
            body = json.dumps({"bytes": sent, "requests": requests}).encode()
            fields.append("Content-Type: application/json")
        elif name == "reach":
            body = b"reach %d" % n
            fields.append("Cache-Control: max-age=3600")
        elif name == "reval":
            fields += ["Cache-Control: max-age=1", 'ETag: "r1"', "Last-Modified: " + LAST_MODIFIED]
            if self.headers.get("If-None-Match") == '"r1"':
                status, body = "304 Not Modified", None
            else:
                body = BODIES[name]
        elif name in BODIES:
            body = BODIES[name]
            fields += ["Cache-Control: max-age=3600", 'ETag: "v1"', "Last-Modified: " + LAST_MODIFIED]
            fields.append("Content-Type: application/octet-stream")
        else:
            status, body = "404 Not Found", b"no such object\n"
        if body is not None:
            fields.append("Content-Length: %d" % len(body))
        head = ("HTTP/1.1 %s\r\n%s\r\n\r\n" % (status, "\r\n".join(fields))).encode()
        raw = head + (body or b"")
        if name != "stats":
            with lock:
                sent[path] = sent.get(path, 0) + len(raw)
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
