//! RFC 7541 Appendix C: the decoder byte for byte, the encoder through the decoder (and
//! byte for byte where its policy matches the examples').

use super::super::primitive::{decode_integer, encode_integer};
use super::*;

#[test]
fn c1_integers() {
    // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; C.1.3: 42 at an
    // octet boundary (8-bit prefix).
    for (value, prefix_bits, bytes) in [
        (10, 5, &[0x0a][..]),
        (1337, 5, &[0x1f, 0x9a, 0x0a][..]),
        (42, 8, &[0x2a][..]),
    ] {
        let mut out = Vec::new();
        encode_integer(&mut out, 0, prefix_bits, value);
        assert_eq!(out, bytes, "encoding {value}");
        let mut pos = 0;
        assert_eq!(decode_integer(bytes, &mut pos, prefix_bits), Ok(value));
        assert_eq!(pos, bytes.len());
    }
    // The prefix's other bits are the representation's and do not leak into the value.
    let mut pos = 0;
    assert_eq!(decode_integer(&[0xea], &mut pos, 5), Ok(10));
}

#[test]
fn integers_round_trip_at_every_prefix_and_boundary() {
    for prefix_bits in 1..=8 {
        let max = (1usize << prefix_bits) - 1;
        for value in [
            0,
            1,
            max - 1,
            max,
            max + 1,
            max + 127,
            max + 128,
            1 << 20,
            u32::MAX as usize,
        ] {
            let mut out = Vec::new();
            encode_integer(&mut out, 0, prefix_bits, value);
            let mut pos = 0;
            assert_eq!(decode_integer(&out, &mut pos, prefix_bits), Ok(value));
            assert_eq!(pos, out.len());
        }
    }
}

/// One example: a block, the fields it holds and the decoder's table after it.
struct Example {
    block: &'static str,
    fields: &'static [(&'static str, &'static str)],
    table: &'static [(&'static str, &'static str)],
    size: usize,
}

/// Decodes the examples in order on one decoder, checking fields, table and size.
fn decode_examples(table_size: usize, examples: &[Example]) {
    let mut decoder = Decoder::new(table_size);
    for (i, example) in examples.iter().enumerate() {
        let got = decode(&mut decoder, &hex(example.block)).unwrap();
        assert_eq!(got, super::fields(example.fields), "example {}", i + 1);
        assert_eq!(
            decoder_table(&decoder),
            super::fields(example.table),
            "example {}",
            i + 1
        );
        assert_eq!(decoder.table_size(), example.size, "example {}", i + 1);
    }
}

#[test]
fn c2_1_literal_with_indexing() {
    decode_examples(
        4096,
        &[Example {
            block: "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            fields: &[("custom-key", "custom-header")],
            table: &[("custom-key", "custom-header")],
            size: 55,
        }],
    );
}

#[test]
fn c2_2_literal_without_indexing() {
    decode_examples(
        4096,
        &[Example {
            block: "040c 2f73 616d 706c 652f 7061 7468",
            fields: &[(":path", "/sample/path")],
            table: &[],
            size: 0,
        }],
    );
}

#[test]
fn c2_3_literal_never_indexed() {
    decode_examples(
        4096,
        &[Example {
            block: "1008 7061 7373 776f 7264 0673 6563 7265 74",
            fields: &[("password", "secret")],
            table: &[],
            size: 0,
        }],
    );
}

#[test]
fn c2_4_indexed() {
    decode_examples(
        4096,
        &[Example {
            block: "82",
            fields: &[(":method", "GET")],
            table: &[],
            size: 0,
        }],
    );
}

const REQUEST_1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQUEST_2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQUEST_3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];
const REQUEST_TABLE_1: &[(&str, &str)] = &[(":authority", "www.example.com")];
const REQUEST_TABLE_2: &[(&str, &str)] = &[
    ("cache-control", "no-cache"),
    (":authority", "www.example.com"),
];
const REQUEST_TABLE_3: &[(&str, &str)] = &[
    ("custom-key", "custom-value"),
    ("cache-control", "no-cache"),
    (":authority", "www.example.com"),
];

#[test]
fn c3_requests_without_huffman() {
    decode_examples(
        4096,
        &[
            Example {
                block: "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                fields: REQUEST_1,
                table: REQUEST_TABLE_1,
                size: 57,
            },
            Example {
                block: "8286 84be 5808 6e6f 2d63 6163 6865",
                fields: REQUEST_2,
                table: REQUEST_TABLE_2,
                size: 110,
            },
            Example {
                block: "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
                fields: REQUEST_3,
                table: REQUEST_TABLE_3,
                size: 164,
            },
        ],
    );
}

const C4: [&str; 3] = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
];

#[test]
fn c4_requests_with_huffman() {
    decode_examples(
        4096,
        &[
            Example {
                block: C4[0],
                fields: REQUEST_1,
                table: REQUEST_TABLE_1,
                size: 57,
            },
            Example {
                block: C4[1],
                fields: REQUEST_2,
                table: REQUEST_TABLE_2,
                size: 110,
            },
            Example {
                block: C4[2],
                fields: REQUEST_3,
                table: REQUEST_TABLE_3,
                size: 164,
            },
        ],
    );
}

const DATE_1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE_2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION: &str = "https://www.example.com";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

const RESPONSE_1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", DATE_1),
    ("location", LOCATION),
];
const RESPONSE_2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", DATE_1),
    ("location", LOCATION),
];
const RESPONSE_3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", DATE_2),
    ("location", LOCATION),
    ("content-encoding", "gzip"),
    ("set-cookie", COOKIE),
];
const RESPONSE_TABLE_1: &[(&str, &str)] = &[
    ("location", LOCATION),
    ("date", DATE_1),
    ("cache-control", "private"),
    (":status", "302"),
];
const RESPONSE_TABLE_2: &[(&str, &str)] = &[
    (":status", "307"),
    ("location", LOCATION),
    ("date", DATE_1),
    ("cache-control", "private"),
];
const RESPONSE_TABLE_3: &[(&str, &str)] = &[
    ("set-cookie", COOKIE),
    ("content-encoding", "gzip"),
    ("date", DATE_2),
];

#[test]
fn c5_responses_without_huffman_evicting_at_256() {
    decode_examples(
        256,
        &[
            Example {
                block: "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 \
                        3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 \
                        7777 2e65 7861 6d70 6c65 2e63 6f6d",
                fields: RESPONSE_1,
                table: RESPONSE_TABLE_1,
                size: 222,
            },
            Example {
                block: "4803 3330 37c1 c0bf",
                fields: RESPONSE_2,
                table: RESPONSE_TABLE_2,
                size: 222,
            },
            Example {
                block: "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 \
                        3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a \
                        584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 \
                        3630 303b 2076 6572 7369 6f6e 3d31",
                fields: RESPONSE_3,
                table: RESPONSE_TABLE_3,
                size: 215,
            },
        ],
    );
}

const C6: [&str; 3] = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e \
     919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 \
     821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed \
     4ee5 b106 3d50 07",
];

#[test]
fn c6_responses_with_huffman_evicting_at_256() {
    decode_examples(
        256,
        &[
            Example {
                block: C6[0],
                fields: RESPONSE_1,
                table: RESPONSE_TABLE_1,
                size: 222,
            },
            Example {
                block: C6[1],
                fields: RESPONSE_2,
                table: RESPONSE_TABLE_2,
                size: 222,
            },
            Example {
                block: C6[2],
                fields: RESPONSE_3,
                table: RESPONSE_TABLE_3,
                size: 215,
            },
        ],
    );
}

#[test]
fn a_literal_may_name_the_entry_its_insertion_evicts() {
    // Section 4.4: with room for one entry, "x-name: 1" is inserted, then a literal with
    // incremental indexing names entry 62 (x-name) and, being inserted, evicts it.
    let mut decoder = Decoder::new(50);
    let block = [
        0x40, 0x06, b'x', b'-', b'n', b'a', b'm', b'e', 0x01, b'1', // x-name: 1
        0x7e, 0x03, b'2', b'2', b'2', // name 62, value "222"
    ];
    let got = decode(&mut decoder, &block).unwrap();
    assert_eq!(got, fields(&[("x-name", "1"), ("x-name", "222")]));
    assert_eq!(decoder_table(&decoder), fields(&[("x-name", "222")]));
    assert_eq!(decoder.table_size(), 41);
}

#[test]
fn encoder_writes_the_c4_requests_byte_for_byte() {
    // Our policy indexes exactly what C.4 indexes and Huffman-codes exactly where it is
    // shorter, so the output is the RFC's.
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let requests = [REQUEST_1, REQUEST_2, REQUEST_3];
    for (i, (request, sizes)) in requests.iter().zip([57, 110, 164]).enumerate() {
        let list = super::fields(request);
        let block = encode(&mut encoder, &list);
        assert_eq!(block, hex(C4[i]), "C.4.{}", i + 1);
        assert_eq!(decode(&mut decoder, &block).unwrap(), list);
        assert_eq!(encoder.table_size(), sizes);
        assert_eq!(encoder_table(&encoder), decoder_table(&decoder));
    }
}

#[test]
fn encoder_writes_the_c6_responses_and_evicts_as_section_4_4_says() {
    let mut encoder = Encoder::new();
    encoder.set_max_table_size(256);
    let mut decoder = Decoder::new(256);
    let responses = [RESPONSE_1, RESPONSE_2, RESPONSE_3];

    // C.6.1, after the size update to 256 (3f e1 01) that opens the first block.
    let list = super::fields(responses[0]);
    let mut block = Vec::new();
    let mut response = encoder.response(302, &mut block);
    for (name, value) in &list[1..] {
        response.field(name, value);
    }
    response.finish();
    assert_eq!(block[..3], [0x3f, 0xe1, 0x01]);
    assert_eq!(block[3..], hex(C6[0]));
    assert_eq!(decode(&mut decoder, &block).unwrap(), list);
    assert_eq!(encoder_table(&encoder), super::fields(RESPONSE_TABLE_1));
    assert_eq!(encoder.table_size(), 222);

    // C.6.2: 307 is inserted and 302, the oldest, evicted; the rest are one byte each.
    // "307" is no shorter Huffman-coded, so we send it raw, as in C.5.2.
    let list = super::fields(responses[1]);
    let block = encode(&mut encoder, &list);
    assert_eq!(block, hex("4803 3330 37c1 c0bf"));
    assert_eq!(decode(&mut decoder, &block).unwrap(), list);
    assert_eq!(encoder_table(&encoder), super::fields(RESPONSE_TABLE_2));
    assert_eq!(encoder.table_size(), 222);

    // C.6.3: our policy differs in one field: set-cookie is never indexed (1f 28: index
    // 55 with a 4-bit prefix) where the RFC indexes it (77). So the table ends up with
    // date 20:13:22 (evicting cache-control 52 bytes: 222 - 52 + 65 = 235) and gzip
    // (evicting date 20:13:21: 235 - 65 + 52 = 222), and no cookie.
    let list = super::fields(responses[2]);
    let block = encode(&mut encoder, &list);
    let rfc = hex(C6[2]);
    let cookie = rfc.iter().position(|&b| b == 0x77).unwrap();
    let expected = [&rfc[..cookie], &[0x1f, 0x28], &rfc[cookie + 1..]].concat();
    assert_eq!(block, expected);
    assert_eq!(decode(&mut decoder, &block).unwrap(), list);
    assert_eq!(
        encoder_table(&encoder),
        super::fields(&[
            ("content-encoding", "gzip"),
            ("date", DATE_2),
            (":status", "307"),
            ("location", LOCATION),
        ])
    );
    assert_eq!(encoder.table_size(), 222);
    assert_eq!(encoder_table(&encoder), decoder_table(&decoder));
}

#[test]
fn encoder_table_mirrors_the_decoder_over_repeated_c5_responses() {
    // The C.5 responses again and out of order, so that entries are hit, evicted and
    // inserted again at 256 bytes: both sides' tables must stay identical.
    let mut encoder = Encoder::new();
    encoder.set_max_table_size(256);
    let mut decoder = Decoder::new(256);
    for response in [RESPONSE_1, RESPONSE_2, RESPONSE_3, RESPONSE_1, RESPONSE_3] {
        let list = super::fields(response);
        let block = encode(&mut encoder, &list);
        assert_eq!(decode(&mut decoder, &block).unwrap(), list);
        assert_eq!(encoder_table(&encoder), decoder_table(&decoder));
        assert_eq!(encoder.table_size(), decoder.table_size());
        assert!(encoder.table_size() <= 256);
    }
}
