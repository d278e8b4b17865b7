#!/usr/bin/env python3
"""Opens N idle HTTP/2 connections to a server and reports its resident memory before and
after (bench/http2-memory.sh).

Each connection sends the preface and an empty SETTINGS frame (over TLS with ALPN h2, or
in cleartext with prior knowledge), reads the server's SETTINGS and acknowledges them,
then stays open and silent. Prints "KIB_BEFORE KIB_AFTER OPENED".

usage: http2-idle.py PID PORT N tls|h2c
"""
import socket
import ssl
import sys
import time

pid, port, n, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"


def rss_kib():
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS")


context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
context.set_alpn_protocols(["h2"])

before = rss_kib()
held = []
for _ in range(n):
    raw = socket.create_connection(("127.0.0.1", port))
    conn = context.wrap_socket(raw, server_hostname="localhost") if mode == "tls" else raw
    if mode == "tls" and conn.selected_alpn_protocol() != "h2":
        raise SystemExit(f"ALPN chose {conn.selected_alpn_protocol()!r}, not h2")
    conn.sendall(PREFACE + SETTINGS)
    if not conn.recv(4096):
        raise SystemExit("closed by the server")
    conn.sendall(SETTINGS_ACK)
    held.append(conn)
time.sleep(2)
print(before, rss_kib(), len(held))
