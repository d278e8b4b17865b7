"""An HTTP/3 client for the tests (aioquic, installed by scripts/test.sh).

Usage: python3 h3client.py SPEC.json   (prints a JSON report on stdout)

SPEC: {"port": N, "server_name": "localhost", "ca": PATH or null (no verification),
       "connections": 1, "requests": [{"method", "path", "authority", "headers": [[k, v]],
       "body": TEXT, "content_length": TEXT (instead of the body's)}],
       "partial_heads": N (streams whose head never comes whole; the report's
       "partial_closed" counts those the server closed), "stall": false (take 16 KiB of
       each response and no more: a client that stopped reading), "overrun_streams": false, "timeout": 30, "hold": 0,
       "zero_rtt": false}
or a load loop: {"port", "server_name", "load_seconds": S, "path", "expect": BODY}
for S seconds, two tasks with a new connection per request and two on kept connections
(a new one after GOAWAY, and a request the server rejected unprocessed, H3_REQUEST_REJECTED,
sent again, as RFC 9114 section 4.1.1 lets a client): {"ok", "failed", "errors"}.
or {"port", "amplification": true, "seconds": S}: a client's first datagram alone, then
what the server sends back in S seconds: {"sent", "received", "sizes"}.
Every connection sends every request, all at once (concurrent streams), then stays open
`hold` seconds more. With `overrun_streams` the client ignores the server's stream limit
(a misbehaving client). With `zero_rtt` a first connection gets a session ticket, and
each connection then resumes with it, sending its requests in 0-RTT data.
The report: {"connections": [{"responses": [{"status", "headers", "length", "sha256",
"body" (latin-1 text, when at most 1 MiB), "reset"}], "error", "terminated",
"early_data_accepted"}]}.
"""

import asyncio
import hashlib
import json
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.buffer import Buffer, BufferReadError
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import (
    ConnectionTerminated,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}
        self.terminated = None
        # aioquic holds a response to HEAD to its Content-Length as if it had content
        # (RFC 9110 section 9.3.2 says it has none): not checked for HEAD's streams.
        self.head_streams = set()
        check = self.h3._check_content_length

        def check_unless_head(stream):
            if stream.stream_id not in self.head_streams:
                check(stream)

        self.h3._check_content_length = check_unless_head
        # aioquic reads GOAWAY and drops it: the server's control stream is read here
        # too, for the GOAWAY's stream id, so that a load loop knows which requests the
        # server did not process.
        self.goaway = None
        self.uni = {}
        # Streams opened with a head that never ends ("partial_head"), and those of them
        # the server closed (STOP_SENDING, a reset or its end of the stream).
        self.partial = set()
        self.partial_closed = set()

    def partial_head(self):
        """Opens a request stream and sends the start of a HEADERS frame that claims 100
        bytes and brings 5: a head that never comes whole."""
        stream_id = self._quic.get_next_available_stream_id()
        self.partial.add(stream_id)
        self._quic.send_stream_data(stream_id, b"\x01\x40\x64abcde", end_stream=False)
        self.transmit()

    def request(self, req, port):
        stream_id = self._quic.get_next_available_stream_id()
        authority = req.get("authority") or f"localhost:{port}"
        body = req.get("body")
        headers = [
            (b":method", req.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", req.get("path", "/").encode()),
        ] + [(k.encode(), v.encode()) for k, v in req.get("headers", [])]
        if req.get("method") == "HEAD":
            self.head_streams.add(stream_id)
        if body is not None:
            # "content_length" sends another length than the body's (a malformed request).
            length = req.get("content_length", str(len(body.encode("latin-1"))))
            headers.append((b"content-length", length.encode()))
        self.h3.send_headers(stream_id, headers, end_stream=body is None)
        if body is not None:
            self.h3.send_data(stream_id, body.encode("latin-1"), end_stream=True)
        done = self._loop.create_future()
        self.streams[stream_id] = {
            "headers": [],
            "status": None,
            "body": bytearray(),
            "done": done,
            "reset": False,
            "reset_code": None,
        }
        self.transmit()
        return done

    def read_control(self, stream_id, data):
        buf = self.uni.setdefault(stream_id, bytearray())
        buf += data
        b = Buffer(data=bytes(buf))
        try:
            if b.pull_uint_var() != 0:  # not the control stream
                return
            while True:
                frame_type = b.pull_uint_var()
                payload = b.pull_bytes(b.pull_uint_var())
                if frame_type == 0x7:
                    self.goaway = Buffer(data=payload).pull_uint_var()
        except BufferReadError:
            pass

    def quic_event_received(self, event):
        stream_id = getattr(event, "stream_id", None)
        if stream_id in self.partial:
            ended = isinstance(event, StreamDataReceived) and event.end_stream
            if ended or isinstance(event, (StopSendingReceived, StreamReset)):
                self.partial_closed.add(stream_id)
            return
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            self.read_control(event.stream_id, event.data)
        if isinstance(event, ConnectionTerminated):
            self.terminated = {"code": event.error_code, "reason": event.reason_phrase}
            for s in self.streams.values():
                if not s["done"].done():
                    s["done"].set_result(None)
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            s = self.streams[event.stream_id]
            s["reset"] = True
            s["reset_code"] = event.error_code
            if not s["done"].done():
                s["done"].set_result(None)
        for h3_event in self.h3.handle_event(event):
            s = self.streams.get(getattr(h3_event, "stream_id", None))
            if s is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                for k, v in h3_event.headers:
                    if k == b":status":
                        s["status"] = int(v)
                    else:
                        s["headers"].append([k.decode(), v.decode("latin-1")])
            elif isinstance(h3_event, DataReceived):
                s["body"] += h3_event.data
            if getattr(h3_event, "stream_ended", False) and not s["done"].done():
                s["done"].set_result(None)


def report(s):
    body = bytes(s["body"])
    out = {
        "status": s["status"],
        "headers": s["headers"],
        "length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "reset": s["reset"],
    }
    if len(body) <= 1 << 20:
        out["body"] = body.decode("latin-1")
    return out


async def one(spec, ticket=None, tickets=None):
    config = QuicConfiguration(alpn_protocols=H3_ALPN, is_client=True)
    config.session_ticket = ticket
    config.server_name = spec.get("server_name", "localhost")
    if spec.get("ca"):
        config.load_verify_locations(spec["ca"])
    else:
        config.verify_mode = ssl.CERT_NONE
    config.max_stream_data = 16384 if spec.get("stall") else 1 << 24
    config.max_data = 1 << 26
    result = {"responses": [], "error": None}
    try:
        async with connect(
            "127.0.0.1",
            spec["port"],
            configuration=config,
            create_protocol=Client,
            session_ticket_handler=tickets.append if tickets is not None else None,
            wait_connected=ticket is None,
        ) as client:
            if spec.get("stall"):
                # Take nothing more than the first window: no MAX_STREAM_DATA is sent, as
                # a client that stopped reading sends none.
                client._quic._write_stream_limits = lambda *args, **kwargs: None
            if spec.get("overrun_streams"):
                # Pretend the server gave credit for many more streams than it did.
                client._quic._remote_max_streams_bidi = 1 << 20
            for _ in range(spec.get("partial_heads", 0)):
                client.partial_head()
            waits = [client.request(r, spec["port"]) for r in spec["requests"]]
            await asyncio.wait_for(asyncio.gather(*waits), spec.get("timeout", 30))
            result["responses"] = [report(s) for s in client.streams.values()]
            result["early_data_accepted"] = client._quic.tls.early_data_accepted
            await asyncio.sleep(spec.get("hold", 0))
            result["terminated"] = client.terminated
            result["partial_closed"] = len(client.partial_closed)
    except Exception as e:  # the report says what failed
        result["error"] = f"{type(e).__name__}: {e}"
    return result


H3_REQUEST_REJECTED = 0x10B


async def close(held):
    try:
        await asyncio.wait_for(held[0].__aexit__(None, None, None), 5)
    except Exception:  # a connection the server already dropped: nothing to close
        pass


async def load_task(spec, keep, deadline, count):
    loop = asyncio.get_running_loop()
    held = None
    while loop.time() < deadline:
        try:
            if held is None or held[1].goaway is not None or held[1].terminated:
                if held is not None:
                    await close(held)
                config = QuicConfiguration(alpn_protocols=H3_ALPN, is_client=True)
                config.server_name = spec.get("server_name", "localhost")
                config.verify_mode = ssl.CERT_NONE
                manager = connect("127.0.0.1", spec["port"], configuration=config,
                                  create_protocol=Client)
                held = (manager, await asyncio.wait_for(manager.__aenter__(), 10))
            client = held[1]
            await asyncio.wait_for(client.request({"path": spec["path"]}, spec["port"]), 10)
            stream_id, s = list(client.streams.items())[-1]
            # Not processed, says the server (a reset, or a GOAWAY below its id): sent
            # again on a new connection.
            rejected = s["reset_code"] == H3_REQUEST_REJECTED
            beyond = s["status"] is None and client.goaway is not None and stream_id >= client.goaway
            if rejected or beyond:
                client.terminated = client.terminated or {"code": "goaway"}
                continue
            if s["status"] != 200 or bytes(s["body"]) != spec["expect"].encode():
                raise RuntimeError(f"status {s['status']} body {bytes(s['body'])[:40]!r} "
                                   f"reset {s['reset_code']} closed {client.terminated} "
                                   f"stream {stream_id} goaway {client.goaway} keep {keep}")
            count["ok"] += 1
        except Exception as e:
            count["failed"] += 1
            if len(count["errors"]) < 5:
                count["errors"].append(f"{type(e).__name__}: {e}")
            if held is not None:
                held[1].terminated = held[1].terminated or {"code": -1}
        if not keep and held is not None:
            await close(held)
            held = None
    if held is not None:
        await close(held)


async def load(spec):
    count = {"ok": 0, "failed": 0, "errors": []}
    deadline = asyncio.get_running_loop().time() + spec["load_seconds"]
    await asyncio.gather(*(load_task(spec, keep, deadline, count)
                           for keep in [False, True, False, True]))
    print(json.dumps(count))


def amplification(spec):
    """Sends a client's first Initial datagram alone, acknowledges nothing, and counts
    what the server sends back to the unproven address within `seconds`."""
    import socket
    import time

    from aioquic.quic.connection import QuicConnection

    config = QuicConfiguration(alpn_protocols=H3_ALPN, is_client=True)
    config.server_name = "localhost"
    config.verify_mode = ssl.CERT_NONE
    quic = QuicConnection(configuration=config)
    addr = ("127.0.0.1", spec["port"])
    quic.connect(addr, now=time.time())
    first = quic.datagrams_to_send(now=time.time())[0][0]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.sendto(first, addr)
    sock.settimeout(0.2)
    received = 0
    sizes = []
    deadline = time.time() + spec["seconds"]
    while time.time() < deadline:
        try:
            got = sock.recv(65536)
            received += len(got)
            sizes.append(len(got))
        except socket.timeout:
            pass
    print(json.dumps({"sent": len(first), "received": received, "sizes": sizes}))


async def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if "amplification" in spec:
        amplification(spec)
        return
    if "load_seconds" in spec:
        await load(spec)
        return
    ticket = None
    if spec.get("zero_rtt"):
        tickets = []
        await one({**spec, "requests": [{"path": "/"}]}, tickets=tickets)
        await asyncio.sleep(0.2)
        ticket = tickets[-1] if tickets else None
    runs = [one(spec, ticket) for _ in range(spec.get("connections", 1))]
    print(json.dumps({"connections": await asyncio.gather(*runs)}))


asyncio.run(main())
