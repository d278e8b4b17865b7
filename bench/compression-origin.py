#!/usr/bin/env python3
"""The origin for bench/compression.sh.

  /cached/page         an ESI template (Surrogate-Control: content="ESI/1.0", max-age=3600)
                       of PARTS includes; assembled, it is exactly PAGE's bytes
  /cached/frag/I       the I-th of PARTS equal slices of PAGE, max-age=3600
  /uncached/page       the same page from 3 includes, no-store
  /uncached/frag/I     the I-th of 3 slices, after DELAY_MS, no-store

HTTP/1.1 keep-alive, a thread per connection (so slow fragments sleep side by side).

usage: compression-origin.py PORT PAGE PARTS DELAY_MS
"""
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, PAGE, PARTS, DELAY_MS = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
BODY = open(PAGE, "rb").read()


def slices(n):
    step = -(-len(BODY) // n)
    return [BODY[i * step:(i + 1) * step] for i in range(n)]


FRAGS = {"cached": slices(PARTS), "uncached": slices(3)}
TEMPLATES = {
    f: b"".join(b'<esi:include src="/%s/frag/%d"/>' % (f.encode(), i) for i in range(len(parts)))
    for f, parts in FRAGS.items()
}
CACHE = {"cached": "max-age=3600", "uncached": "no-store"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        flavour = parts[0] if parts else ""
        if flavour not in FRAGS:
            return self.answer(404, b"not found\n", "no-store", False)
        if parts[1:] == ["page"]:
            return self.answer(200, TEMPLATES[flavour], CACHE[flavour], True)
        if len(parts) == 3 and parts[1] == "frag" and parts[2].isdigit():
            if flavour == "uncached":
                time.sleep(DELAY_MS / 1000)
            i = int(parts[2])
            if i < len(FRAGS[flavour]):
                return self.answer(200, FRAGS[flavour][i], CACHE[flavour], False)
        self.answer(404, b"not found\n", "no-store", False)

    def answer(self, status, body, cache_control, esi):
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache_control)
        if esi:
            self.send_header("Surrogate-Control", 'content="ESI/1.0"')
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    # The default backlog of 5 drops connections when a proxy opens one per fragment.
    request_queue_size = 128
    daemon_threads = True


Server(("127.0.0.1", PORT), Handler).serve_forever()
