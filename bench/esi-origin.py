#!/usr/bin/env python3
"""The origin for bench/esi.sh: one ESI page with N fragments, in two flavours.

  /uncached/page     ESI page (Surrogate-Control: content="ESI/1.0"), Cache-Control: no-store,
                     with <esi:include src="/uncached/frag/I"/> for I in 1..N
  /uncached/frag/I   sleeps DELAY_MS, then a small body; Cache-Control: no-store
  /cached/page       the same page, Cache-Control: max-age=3600, including /cached/frag/I
  /cached/frag/I     a small body at once; Cache-Control: max-age=3600
  /count             how many requests the origin has answered (not counting /count), so
                     the bench can tell how many origin requests a proxied page cost

HTTP/1.1 keep-alive, one thread per connection (ThreadingHTTPServer), so the proxies'
fragment fetches sleep side by side and the origin never serialises them itself.

usage: esi-origin.py PORT FRAGMENTS DELAY_MS
"""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, FRAGMENTS, DELAY_MS = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])


def page(flavour):
    parts = [b"<!DOCTYPE html>\n<html><head><title>ESI bench</title></head><body>\n"]
    for i in range(1, FRAGMENTS + 1):
        parts.append(b'<div><esi:include src="/%s/frag/%d"/></div>\n' % (flavour.encode(), i))
    parts.append(b"</body></html>\n")
    return b"".join(parts)


PAGES = {f: page(f) for f in ("uncached", "cached")}
CACHE_CONTROL = {"uncached": "no-store", "cached": "max-age=3600"}
served = 0
served_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body go out in two writes; without TCP_NODELAY the body could wait for a
    # delayed ACK (up to 40 ms on Linux) and swamp the 50 ms being measured.
    disable_nagle_algorithm = True

    def do_GET(self):
        global served
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if parts == ["count"]:
            return self.answer(200, b"%d\n" % served, "no-store")
        with served_lock:
            served += 1
        flavour = parts[0] if parts else ""
        if flavour not in PAGES:
            return self.answer(404, b"not found\n", "no-store")
        if parts[1:] == ["page"]:
            return self.answer(200, PAGES[flavour], CACHE_CONTROL[flavour], esi=True)
        if len(parts) == 3 and parts[1] == "frag" and parts[2].isdigit():
            if flavour == "uncached":
                time.sleep(DELAY_MS / 1000)
            body = b"<p>fragment %s: %s</p>" % (parts[2].encode(), b"x" * 64)
            return self.answer(200, body, CACHE_CONTROL[flavour])
        return self.answer(404, b"not found\n", "no-store")

    def answer(self, status, body, cache_control, esi=False):
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
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # wrk resets its connections when it stops; that is not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


Server(("127.0.0.1", PORT), Handler).serve_forever()
