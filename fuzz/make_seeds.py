#!/usr/bin/env python3
"""Writes the fuzz seed corpus (fuzz/seeds/<target>/) from the attack table in
crates/cli/tests/serve/smuggling.rs, so the fuzzers start from every known attack and
mutate from there. Each seed is the attack followed by a valid pipelined request.

    python3 fuzz/make_seeds.py      # then commit fuzz/seeds/

Seeds for `parse_request` start with one byte that picks the piece size the chunked
decoder is fed in; `differential` seeds are the raw bytes.
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
    print(f"wrote {count} seeds")


if __name__ == "__main__":
    main()
