//! The encoder's indexing policy, its size updates and its memory, each checked through
//! the bytes it writes and a decoder reading them.

use super::*;

/// Encodes a response and decodes it, checking the round trip; returns the block.
fn respond(
    encoder: &mut Encoder,
    decoder: &mut Decoder,
    status: u16,
    list: &[(&str, &str)],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut block = encoder.response(status, &mut out);
    for (name, value) in list {
        block.field(name.as_bytes(), value.as_bytes());
    }
    block.finish();
    let mut expected = fields(&[(":status", &status.to_string())]);
    expected.extend(fields(list));
    assert_eq!(decode(decoder, &out).unwrap(), expected);
    assert_eq!(encoder_table(encoder), decoder_table(decoder));
    check_index(encoder);
    out
}

#[test]
fn static_status_codes_are_one_byte() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    for (status, byte) in [
        (200, 0x88),
        (204, 0x89),
        (206, 0x8a),
        (304, 0x8b),
        (400, 0x8c),
        (404, 0x8d),
        (500, 0x8e),
    ] {
        assert_eq!(respond(&mut encoder, &mut decoder, status, &[]), [byte]);
    }
    assert_eq!(encoder.table_size(), 0);
}

#[test]
fn other_status_codes_are_indexed_and_then_one_byte() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    // 301: literal with incremental indexing, name :status (8), "301" Huffman-coded.
    assert_eq!(
        respond(&mut encoder, &mut decoder, 301, &[]),
        [0x48, 0x82, 0x64, 0x01]
    );
    assert_eq!(respond(&mut encoder, &mut decoder, 301, &[]), [0xbe]);
    // "403" is no shorter Huffman-coded: 0x48, then 3 raw bytes.
    assert_eq!(
        respond(&mut encoder, &mut decoder, 403, &[]),
        [0x48, 0x03, b'4', b'0', b'3']
    );
    assert_eq!(respond(&mut encoder, &mut decoder, 301, &[]), [0xbf]);
    assert_eq!(respond(&mut encoder, &mut decoder, 403, &[]), [0xbe]);
    assert!(respond(&mut encoder, &mut decoder, 999, &[]).len() <= 5);
    assert!(respond(&mut encoder, &mut decoder, 100, &[]).len() <= 5);
    assert_eq!(respond(&mut encoder, &mut decoder, 999, &[]), [0xbf]);
}

const STATIC_SITE: &[(&str, &str)] = &[
    ("content-type", "text/html; charset=utf-8"),
    ("server", "tessera"),
    ("cache-control", "public, max-age=3600"),
    ("vary", "accept-encoding"),
    ("accept-ranges", "bytes"),
    ("etag", "\"5f3a-1b2c\""),
    ("last-modified", "Tue, 15 Nov 1994 12:45:26 GMT"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("strict-transport-security", "max-age=63072000"),
];

#[test]
fn repeated_response_fields_become_one_byte_each() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let first = respond(&mut encoder, &mut decoder, 200, STATIC_SITE);
    assert!(first.len() > 100);
    assert_eq!(encoder_table(&encoder).len(), STATIC_SITE.len());
    for _ in 0..3 {
        let again = respond(&mut encoder, &mut decoder, 200, STATIC_SITE);
        assert_eq!(again.len(), 1 + STATIC_SITE.len(), "{again:02x?}");
        assert!(again[1..].iter().all(|&b| b >= 0xbe));
    }
}

#[test]
fn per_response_values_use_their_static_name_without_indexing() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    // content-length is 28: 4-bit prefix 15, then 13. "1234" Huffman-coded is 3 bytes.
    let block = respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("content-length", "1234")],
    );
    assert_eq!(block[1..3], [0x0f, 0x0d]);
    assert_eq!(block.len(), 1 + 2 + 1 + 3);
    respond(
        &mut encoder,
        &mut decoder,
        206,
        &[("content-range", "bytes 0-9/100"), ("age", "12")],
    );
    assert_eq!(encoder.table_size(), 0);
    // Again: still not indexed, still not one byte.
    let block = respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("content-length", "1234")],
    );
    assert_eq!(block.len(), 7);
}

#[test]
fn sensitive_fields_are_never_indexed() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    for _ in 0..2 {
        let block = respond(
            &mut encoder,
            &mut decoder,
            200,
            &[("set-cookie", "session=abc123")],
        );
        // set-cookie is 55: never indexed (0001), 4-bit prefix 15, then 40.
        assert_eq!(block[1..3], [0x1f, 0x28]);
        let block = respond(
            &mut encoder,
            &mut decoder,
            200,
            &[("authorization", "Bearer x")],
        );
        assert_eq!(block[1..3], [0x1f, 0x08]);
        let block = respond(&mut encoder, &mut decoder, 200, &[("cookie", "a=b")]);
        assert_eq!(block[1..3], [0x1f, 0x11]);
    }
    assert_eq!(encoder.table_size(), 0);

    // Chosen by the caller: a new name as a literal, never indexed (0x10), even though
    // the same field is in the table.
    respond(&mut encoder, &mut decoder, 200, &[("x-token", "abc")]);
    assert_eq!(encoder_table(&encoder), fields(&[("x-token", "abc")]));
    let never = |encoder: &mut Encoder, decoder: &mut Decoder, name: &str, value: &str| {
        let mut out = Vec::new();
        encoder
            .block(&mut out)
            .field_never_indexed(name.as_bytes(), value.as_bytes());
        assert_eq!(decode(decoder, &out).unwrap(), fields(&[(name, value)]));
        out
    };
    assert_eq!(
        never(&mut encoder, &mut decoder, "x-api-key", "secret")[0],
        0x10
    );
    // The name's index (dynamic 62: 15 + 47, then etag's 34: 15 + 19) with the N bit.
    assert_eq!(
        never(&mut encoder, &mut decoder, "x-token", "abc")[..2],
        [0x1f, 0x2f]
    );
    assert_eq!(
        never(&mut encoder, &mut decoder, "etag", "\"1\"")[..2],
        [0x1f, 0x13]
    );
    assert_eq!(encoder_table(&encoder), fields(&[("x-token", "abc")]));
}

#[test]
fn a_name_whose_values_never_repeat_stops_being_indexed() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    // The first value is indexed.
    respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("x-request-id", "id-0001")],
    );
    let size = encoder.table_size();
    // The first was never reused, so the next values are not indexed: literal without
    // indexing with the dynamic name (62: 15 + 47).
    for id in ["id-0002", "id-0003", "id-0004"] {
        let block = respond(&mut encoder, &mut decoder, 200, &[("x-request-id", id)]);
        assert_eq!(block[1..3], [0x0f, 0x2f]);
        assert_eq!(encoder.table_size(), size);
    }
    // Once an indexed value pays off, the next new value is indexed again.
    assert_eq!(
        respond(
            &mut encoder,
            &mut decoder,
            200,
            &[("x-request-id", "id-0001")]
        ),
        [0x88, 0xbe]
    );
    respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("x-request-id", "id-0005")],
    );
    assert_eq!(
        encoder_table(&encoder),
        fields(&[("x-request-id", "id-0005"), ("x-request-id", "id-0001")])
    );
    assert_eq!(
        respond(
            &mut encoder,
            &mut decoder,
            200,
            &[("x-request-id", "id-0005")]
        ),
        [0x88, 0xbe]
    );
}

#[test]
fn date_is_indexed_once_per_second_on_a_busy_connection() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let mut longer = 0;
    for second in 0..200 {
        let date = format!(
            "Mon, 21 Oct 2013 20:{:02}:{:02} GMT",
            second / 60,
            second % 60
        );
        let first = respond(
            &mut encoder,
            &mut decoder,
            200,
            &[("server", "tessera"), ("date", &date)],
        );
        assert!(first.len() > 3);
        for _ in 0..5 {
            let next = respond(
                &mut encoder,
                &mut decoder,
                200,
                &[("server", "tessera"), ("date", &date)],
            );
            // FIFO eviction: once per turnover of the table (about 60 dates), the
            // oldest entry, server, is evicted and inserted again.
            if next.len() != 3 {
                longer += 1;
            }
        }
    }
    assert!(longer <= 4, "{longer} responses were not 3 bytes");
    assert!(encoder.table_size() <= 4096);
}

#[test]
fn fields_too_large_for_the_table_are_not_indexed() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    respond(&mut encoder, &mut decoder, 200, &[("server", "tessera")]);
    let big = "x".repeat(3100); // 3 KB + 32: more than 3/4 of 4096
    respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("content-security-policy", &big)],
    );
    let huge = "y".repeat(10_000);
    respond(&mut encoder, &mut decoder, 200, &[("x-huge", &huge)]);
    assert_eq!(encoder_table(&encoder), fields(&[("server", "tessera")]));
    // Up to 3/4 of the table is indexed, and evicts what it must.
    let large = "z".repeat(3000);
    respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("content-security-policy", &large)],
    );
    assert_eq!(encoder_table(&encoder)[0].1.len(), 3000);
    let again = respond(
        &mut encoder,
        &mut decoder,
        200,
        &[("content-security-policy", &large)],
    );
    assert_eq!(again, [0x88, 0xbe]);
}

#[test]
fn strings_are_huffman_coded_only_when_shorter() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    // Lower-case text is shorter coded: server (54) with indexing, "hello" in 4 bytes.
    let block = respond(&mut encoder, &mut decoder, 200, &[("server", "hello")]);
    assert_eq!(block[1..3], [0x76, 0x84]);
    // Bytes above 0x7f have long codes, so they are sent raw. ("server" again with a new
    // value while the first was never reused: without indexing, 15 + 39.)
    let raw = [0xc3u8, 0xa9, 0xc3, 0xa9];
    let mut out = Vec::new();
    encoder.block(&mut out).field(b"server", &raw);
    assert_eq!(out, [0x0f, 0x27, 0x04, 0xc3, 0xa9, 0xc3, 0xa9]);
    assert_eq!(
        decode(&mut decoder, &out).unwrap(),
        vec![(b"server".to_vec(), raw.to_vec())]
    );
}

#[test]
fn size_updates_open_the_next_block() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    respond(&mut encoder, &mut decoder, 200, STATIC_SITE);

    // Lowered, then raised, between blocks: the minimum, then the final size.
    encoder.set_max_table_size(0);
    decoder.set_max_table_size(0);
    assert_eq!(encoder.table_size(), 0);
    encoder.set_max_table_size(4096);
    decoder.set_max_table_size(4096);
    let block = respond(&mut encoder, &mut decoder, 200, &[]);
    assert_eq!(block, [0x20, 0x3f, 0xe1, 0x1f, 0x88]);
    // Only once.
    assert_eq!(respond(&mut encoder, &mut decoder, 200, &[]), [0x88]);

    // Lowered: one update, and the table evicts down to it.
    respond(&mut encoder, &mut decoder, 200, STATIC_SITE);
    encoder.set_max_table_size(100);
    decoder.set_max_table_size(100);
    assert!(encoder.table_size() <= 100);
    let block = respond(&mut encoder, &mut decoder, 200, &[]);
    assert_eq!(block, [0x3f, 0x45, 0x88]);

    // Raised past the encoder's limit: the table grows to the limit only.
    encoder.set_max_table_size(1 << 20);
    decoder.set_max_table_size(1 << 20);
    let block = respond(&mut encoder, &mut decoder, 200, &[]);
    assert_eq!(block, [0x3f, 0xe1, 0x1f, 0x88]);
    assert_eq!(encoder.table_max_size(), 4096);

    // A change that leaves the size as it is writes nothing.
    encoder.set_max_table_size(8192);
    assert_eq!(respond(&mut encoder, &mut decoder, 200, &[]), [0x88]);

    // Trailers blocks carry updates too.
    encoder.set_max_table_size(50);
    decoder.set_max_table_size(50);
    let mut out = Vec::new();
    encoder.block(&mut out).finish();
    assert_eq!(out, [0x3f, 0x13]);
    assert_eq!(decode(&mut decoder, &out).unwrap(), Fields::new());
}

#[test]
fn a_limit_below_the_initial_size_is_announced_in_the_first_block() {
    let mut encoder = Encoder::with_limit(256);
    let mut decoder = Decoder::new(4096);
    let block = respond(&mut encoder, &mut decoder, 200, &[]);
    assert_eq!(block, [0x3f, 0xe1, 0x01, 0x88]);
    assert_eq!(decoder.table_max_size(), 256);
}

#[test]
fn memory_stays_within_the_limit_as_entries_churn() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let mut out = Vec::new();
    for i in 0..3000 {
        out.clear();
        let mut block = encoder.response(200, &mut out);
        block.field(b"server", b"tessera");
        // Values that repeat, some large, so that entries are indexed, hit and evicted.
        let etag = format!("\"{}\"", i % 97);
        block.field(b"etag", etag.as_bytes());
        block.field(
            format!("x-h{}", i % 5).as_bytes(),
            &vec![b'v'; 100 * (i % 7)],
        );
        block.finish();
        decode(&mut decoder, &out).unwrap();
        let (table, index) = encoder.parts();
        assert!(table.heap_bytes() <= 2 * 4096 + 2 * (4096 / 32) * 20);
        assert!(index.heap_bytes() <= 512 * 4);
    }
    assert_eq!(encoder_table(&encoder), decoder_table(&decoder));
    check_index(&encoder);
}
