#!/usr/bin/env python3
"""Writes the fuzz seed corpus (fuzz/seeds/<target>/) from the attack table in
crates/cli/tests/serve/smuggling.rs, so the fuzzers start from every known attack and
mutate from there. Each seed is the attack followed by a valid pipelined request.

    python3 fuzz/make_seeds.py      # then commit fuzz/seeds/

Seeds for `parse_request` start with one byte that picks the piece size the chunked
decoder is fed in; `differential` seeds are the raw bytes.

The response targets (`parse_response`, `differential_response`) get the origin answers
in RESPONSES below, each starting with one byte whose low bit says whether the request
was HEAD: framings, interim responses, smuggling attempts, and the heads of issue 52
(bare LF line endings, HTTP/1.0, status lines without a reason, 204/304 with a body).
"""
import ast
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
TABLE = HERE.parent / "crates/cli/tests/serve/smuggling.rs"
FOLLOW_UP = b"GET /canary.txt HTTP/1.1\r\nHost: t\r\n\r\n"
CHUNKED_HEAD = b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
BYTES = r'b"(?:[^"\\]|\\.)*"'


def literal(rust: str) -> bytes:
    # A Rust byte string is a Python one, except that a backslash-newline also eats the
    # next line's indentation.
    return ast.literal_eval(re.sub(r"\\\n\s*", "", rust))


def seeds():
    src = TABLE.read_text()
    # refused! { name: b"..." => status; }  and  chunked_body_refused! { name: b"..."; }
    for name, lit, arrow in re.findall(r"(\w+):\s*(" + BYTES + r")\s*(=>|;)", src, re.S):
        raw = literal(lit)
        yield name, (raw if arrow == "=>" else CHUNKED_HEAD + raw) + FOLLOW_UP
    # assert_answered(b"...", ...) inputs: valid but odd.
    for i, lit in enumerate(re.findall(r"assert_answered\(\s*(" + BYTES + ")", src, re.S)):
        yield f"answered_{i}", literal(lit) + FOLLOW_UP
    # Plain pipelines, so the fuzzers also know what "valid" looks like.
    yield "pipeline", (
        b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
        b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"
        b"GET /d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + FOLLOW_UP
    )


RESPONSES = {
    "chunked": b'\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX: y\r\n\r\n'
    b'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\n\r\n',
    "close": b"\x00HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nto the end",
    "dup": b"\x00HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "head": b"\x01HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    "interim": b"\x00HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "keepalive10": b"\x00HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"
    b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "length": b"\x00HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 204 No Content\r\n\r\n",
    "smuggle": b"\x00HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # Issue 52: Varnish's e00007 and e00014 origins, and the other heads real origins send.
    "lf_http10_close": b"\x00HTTP/1.0 200 OK\nConnection: close\n\n<esi:include src=\"/a\"/> to the close",
    "lf_length_keepalive": b"\x00HTTP/1.1 200 OK\nContent-Length: 5\n\nhello"
    b"HTTP/1.1 200 OK\nContent-Length: 3\n\nbye",
    "lf_mixed": b"\x00HTTP/1.1 200 OK\r\nX-A: b\nContent-Length: 2\n\r\nok"
    b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\r\n\n2\r\nok\r\n0\r\n\r\n",
    "lf_chunked": b"\x00HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\r\nhello\r\n0\r\n\r\n",
    "lf_interim": b"\x00HTTP/1.1 100 Continue\n\nHTTP/1.1 103 Early Hints\nLink: </a>\n\n"
    b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
    "lf_no_reason": b"\x00HTTP/1.1 200\nContent-Length: 2\n\nokHTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n",
    "lf_leading_zeros_dup": b"\x00HTTP/1.1 200 OK\nContent-Length: 5\nContent-Length: 005\n\nhello",
    "lf_bodiless_with_body": b"\x00HTTP/1.1 204 No Content\nContent-Length: 5\n\nhello"
    b"HTTP/1.1 304 Not Modified\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
    "lf_head_request": b"\x01HTTP/1.1 200 OK\nContent-Length: 5\n\nHTTP/1.1 200 OK\nContent-Length: 0\n\n",
    "lf_http10_chunked": b"\x00HTTP/1.0 200 OK\nConnection: keep-alive\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
    "lf_truncated": b"\x00HTTP/1.1 200 OK\nContent-Length: 100\n\nonly this",
    # Refused: a bare CR, obs-fold, whitespace before the colon, conflicting framing.
    "bare_cr": b"\x00HTTP/1.1 200 OK\rContent-Length: 5\r\n\r\nhello",
    "lf_obs_fold": b"\x00HTTP/1.1 200 OK\nX-A: b\n c\nContent-Length: 5\n\nhello",
    "lf_space_before_colon": b"\x00HTTP/1.1 200 OK\nContent-Length : 5\n\nhello",
    "lf_smuggle": b"\x00HTTP/1.1 200 OK\nContent-Length: 3\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
}


def main():
    count = 0
    for target, prefix in (("parse_request", b"\x03"), ("differential", b"")):
        out = HERE / "seeds" / target
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        for name, data in seeds():
            (out / name).write_bytes(prefix + data)
            count += 1
    for target in ("parse_response", "differential_response"):
        out = HERE / "seeds" / target
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        for name, data in RESPONSES.items():
            (out / name).write_bytes(data)
            count += 1
    print(f"wrote {count} seeds")


if __name__ == "__main__":
    main()
