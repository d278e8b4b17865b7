#!/usr/bin/env python3
"""Writes the seed corpus of the HTTP/2 fuzz targets (fuzz/seeds/{hpack_decode,h2_frame,
h2_conn}/): small valid inputs in each target's input format (see the doc comment at the
top of each target), so the fuzzers start past the easy refusals.

    python3 fuzz/make_h2_seeds.py      # then commit fuzz/seeds/

hpack_decode gets the header blocks of RFC 7541 Appendix C, h2_frame one frame of every
type and a HEADERS block split over CONTINUATION, h2_conn a few short exchanges.
"""
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent

# RFC 7541 Appendix C: C.3 requests, C.4 the same with Huffman, C.5 responses (table of
# 256 bytes), C.6 the same with Huffman.
C3 = ["828684410f7777772e6578616d706c652e636f6d",
      "828684be58086e6f2d6361636865",
      "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"]
C4 = ["828684418cf1e3c2e5f23a6ba0ab90f4ff",
      "828684be5886a8eb10649cbf",
      "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"]
C5 = ["4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120"
      "474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
      "4803333037c1c0bf",
      "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738"
      "666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d33"
      "3630303b2076657273696f6e3d31"]
C6 = ["488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad1718"
      "63c78f0b97c8e9ae82ae43d3",
      "4883640effc1c0bf",
      "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7"
      "b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"]


def hpack_seed(table_size, blocks, list_limit=0):
    out = struct.pack(">HB", table_size, list_limit)
    for block in blocks:
        raw = bytes.fromhex(block)
        out += struct.pack(">HB", len(raw), 0) + raw
    return out


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def frames():
    block = bytes.fromhex(C3[0])
    return {
        "settings": frame(4, 0, 0, struct.pack(">HI", 3, 100) + struct.pack(">HI", 4, 65535)),
        "headers": frame(1, 0x5, 1, block),
        "headers_priority_padded": frame(1, 0x2c, 3, bytes([2]) + struct.pack(">IB", 1, 15) + block + b"\0\0"),
        "headers_continuation": frame(1, 0, 5, block[:6]) + frame(9, 4, 5, block[6:]),
        "data_padded": frame(0, 0x9, 1, bytes([3]) + b"hello" + b"\0\0\0"),
        "control": frame(4, 1, 0) + frame(6, 0, 0, b"12345678") + frame(8, 0, 0, struct.pack(">I", 1000))
        + frame(3, 0, 1, struct.pack(">I", 8)) + frame(2, 0, 3, struct.pack(">IB", 1, 255))
        + frame(7, 0, 0, struct.pack(">II", 1, 0) + b"bye") + frame(0xfa, 0, 1, b"?"),
        "push_promise": frame(5, 4, 1, struct.pack(">I", 2) + block),
    }


# h2_conn operations (see h2_conn.rs): 0 HEADERS, 1 CONTINUATION, 2 DATA, 13 write output,
# 14 respond, 15 send body, 16 release, 19 deliver. Stream byte 16 is stream 1, 17 is 3.
CONN = {
    "get": [0, 0, 16, 1, 0, 0, 19, 14, 0, 13, 255],
    "post": [1, 0, 16, 0, 1, 0, 2, 16, 1, 10, 19, 16, 0, 14, 0, 15, 0x80, 5, 19, 13, 255],
    "continuation": [0, 0, 17, 1 | 2 | (5 << 2), 0, 0, 1, 0, 19, 14, 8],
    "two_streams": [2, 0, 16, 1, 0, 0, 0, 17, 1, 1, 0, 19, 14, 0, 14, 1, 19],
    "settings_ping": [0, 3, 2, 4, 10, 1, 2, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 4, 19],
}


def main():
    seeds = {
        "hpack_decode": {"c3": hpack_seed(4096, C3), "c4": hpack_seed(4096, C4),
                         "c5": hpack_seed(256, C5), "c6": hpack_seed(256, C6)},
        "h2_frame": {name: b"\0" + data for name, data in frames().items()},
        "h2_conn": {name: bytes(ops) for name, ops in CONN.items()},
    }
    count = 0
    for target, files in seeds.items():
        out = HERE / "seeds" / target
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        for name, data in files.items():
            (out / name).write_bytes(data)
            count += 1
    print(f"wrote {count} seeds")


if __name__ == "__main__":
    main()
