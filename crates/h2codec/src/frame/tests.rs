//! Tests of the frame layer: round trips, every error rule with a hand-made frame,
//! truncation, CONTINUATION splitting, and property tests over split points and
//! arbitrary bytes.

use super::*;

// ===== constants, Reason, Head =====

#[test]
fn preface_is_the_rfc_bytes() {
    // RFC 9113 section 3.4 gives the preface in hex.
    let hex = "505249202a20485454502f322e300d0a0d0a534d0d0a0d0a";
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(PREFACE.as_slice(), bytes);
}

#[test]
fn reason_codes_match_rfc_section_7() {
    let table = [
        (Reason::NO_ERROR, 0x0, "NO_ERROR"),
        (Reason::PROTOCOL_ERROR, 0x1, "PROTOCOL_ERROR"),
        (Reason::INTERNAL_ERROR, 0x2, "INTERNAL_ERROR"),
        (Reason::FLOW_CONTROL_ERROR, 0x3, "FLOW_CONTROL_ERROR"),
        (Reason::SETTINGS_TIMEOUT, 0x4, "SETTINGS_TIMEOUT"),
        (Reason::STREAM_CLOSED, 0x5, "STREAM_CLOSED"),
        (Reason::FRAME_SIZE_ERROR, 0x6, "FRAME_SIZE_ERROR"),
        (Reason::REFUSED_STREAM, 0x7, "REFUSED_STREAM"),
        (Reason::CANCEL, 0x8, "CANCEL"),
        (Reason::COMPRESSION_ERROR, 0x9, "COMPRESSION_ERROR"),
        (Reason::CONNECT_ERROR, 0xa, "CONNECT_ERROR"),
        (Reason::ENHANCE_YOUR_CALM, 0xb, "ENHANCE_YOUR_CALM"),
        (Reason::INADEQUATE_SECURITY, 0xc, "INADEQUATE_SECURITY"),
        (Reason::HTTP_1_1_REQUIRED, 0xd, "HTTP_1_1_REQUIRED"),
    ];
    for (reason, code, name) in table {
        assert_eq!(reason.0, code);
        assert_eq!(reason.to_string(), name);
        assert_eq!(format!("{reason:?}"), name);
    }
    assert_eq!(Reason(0xe).name(), None);
    assert_eq!(Reason(0xbeef).to_string(), "error code 0xbeef");
    assert_eq!(format!("{:?}", Reason(0xbeef)), "Reason(0xbeef)");
}

#[test]
fn head_round_trip() {
    let head = Head {
        len: 0xab_cdef,
        kind: 0x42,
        flags: 0xff,
        stream: 0x7fff_fffe,
    };
    let bytes = head.to_bytes();
    assert_eq!(
        bytes,
        [0xab, 0xcd, 0xef, 0x42, 0xff, 0x7f, 0xff, 0xff, 0xfe]
    );
    assert_eq!(Head::parse(&bytes), head);
    let mut out = vec![1];
    head.write(&mut out);
    assert_eq!(out[1..], bytes);
}

#[test]
fn head_parse_drops_reserved_bit() {
    // h2spec 4.1/3: "The endpoint MUST ignore the value of reserved field."
    let head = Head::parse(b"\x00\x00\x08\x06\x16\x80\x00\x00\x05");
    assert_eq!(head.stream, 5);
    assert_eq!(head.flags, 0x16);
}

#[test]
fn head_write_clears_reserved_bit() {
    let head = Head {
        len: 0,
        kind: kind::DATA,
        flags: 0,
        stream: 0x8000_0003,
    };
    assert_eq!(head.to_bytes()[5..], [0, 0, 0, 3]);
}

// ===== CONTINUATION splitting =====

const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

/// Splits written frames back into heads and payloads without the parser.
fn split_frames(mut buf: &[u8]) -> Vec<(Head, &[u8])> {
    let mut frames = Vec::new();
    while !buf.is_empty() {
        let head = Head::parse(buf.first_chunk().unwrap());
        let end = HEAD_LEN + head.len as usize;
        frames.push((head, &buf[HEAD_LEN..end]));
        buf = &buf[end..];
    }
    frames
}

/// Checks that `out` (after `prefix` bytes) is `block` as HEADERS + CONTINUATION frames
/// of at most `max` bytes, with the flags in the right places.
fn check_split(out: &[u8], prefix: usize, block: &[u8], end_stream: bool, max: usize) {
    let frames = split_frames(&out[prefix..]);
    let expected_frames = block.len().div_ceil(max).max(1);
    assert_eq!(
        frames.len(),
        expected_frames,
        "block of {} at max {max}",
        block.len()
    );
    let mut joined = Vec::new();
    for (i, (head, payload)) in frames.iter().enumerate() {
        let last = i + 1 == frames.len();
        assert_eq!(
            head.kind,
            if i == 0 {
                kind::HEADERS
            } else {
                kind::CONTINUATION
            }
        );
        assert_eq!(head.stream, 7);
        assert!(payload.len() <= max);
        assert_eq!(head.has(flag::END_HEADERS), last);
        assert_eq!(head.has(flag::END_STREAM), i == 0 && end_stream);
        assert_eq!(head.flags & !(flag::END_HEADERS | flag::END_STREAM), 0);
        if !last {
            assert_eq!(payload.len(), max, "only the last frame is short");
        }
        joined.extend_from_slice(payload);
    }
    assert_eq!(joined, block);
}

/// Both ways of writing HEADERS, after a prefix, checked and compared.
fn write_both_ways(block: &[u8], end_stream: bool, max_frame_size: u32, prefix: &[u8]) {
    let max = max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT) as usize;
    let mut direct = prefix.to_vec();
    write_headers(&mut direct, 7, block, end_stream, max_frame_size);
    check_split(&direct, prefix.len(), block, end_stream, max);

    let mut in_place = prefix.to_vec();
    let at = begin_headers(&mut in_place);
    assert_eq!(at, prefix.len());
    in_place.extend_from_slice(block);
    finish_headers(&mut in_place, at, 7, end_stream, max_frame_size);
    assert_eq!(
        in_place, direct,
        "finish_headers differs from write_headers"
    );
}

#[test]
fn continuation_split_at_multiples_of_max_frame_size_and_one_over() {
    let max = MAX as usize;
    let block: Vec<u8> = (0..3 * max + 1).map(|i| (i % 251) as u8).collect();
    for len in [
        0,
        1,
        max - 1,
        max,
        max + 1,
        2 * max - 1,
        2 * max,
        2 * max + 1,
        3 * max,
        3 * max + 1,
    ] {
        for end_stream in [false, true] {
            write_both_ways(&block[..len], end_stream, MAX, b"");
            write_both_ways(&block[..len], end_stream, MAX, b"earlier frame bytes");
        }
    }
}

#[test]
fn continuation_split_follows_a_larger_max_frame_size() {
    let block = vec![0xaa; 50_001];
    write_both_ways(&block, true, 25_000, b"x");
    let mut out = Vec::new();
    write_headers(&mut out, 7, &block, true, 25_000);
    assert_eq!(split_frames(&out).len(), 3);
    write_both_ways(&block, true, 50_001, b"");
}

#[test]
fn continuation_split_clamps_an_impossible_max_frame_size() {
    let block = vec![1; 20_000];
    // Below 16384 no peer may go, so 0 and 100 mean 16384.
    for max in [0, 100, 16_383] {
        let mut out = Vec::new();
        write_headers(&mut out, 7, &block, false, max);
        check_split(&out, 0, &block, false, 16_384);
        write_both_ways(&block, false, max, b"");
    }
}

#[test]
#[should_panic(expected = "finish_headers at 5 past the end")]
fn finish_headers_without_begin_panics() {
    let mut out = vec![0; 10];
    finish_headers(&mut out, 5, 1, false, MAX);
}

// ===== parsing =====

/// A frame built by hand: a head whose length is the payload's, then the payload.
fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Head {
        len: payload.len() as u32,
        kind,
        flags,
        stream,
    }
    .write(&mut out);
    out.extend_from_slice(payload);
    out
}

/// The one frame `buf` holds; it must use all of `buf`.
fn one(buf: &[u8]) -> Frame<'_> {
    match parse(buf, MAX) {
        Ok(Some((frame, used))) => {
            assert_eq!(
                used,
                buf.len(),
                "frame {frame:?} used {used} of {}",
                buf.len()
            );
            frame
        }
        other => panic!("expected one frame, got {other:?}"),
    }
}

/// The field block of the one HEADERS or PUSH_PROMISE frame in `buf`.
fn block_of(buf: &[u8]) -> Vec<u8> {
    match one(buf) {
        Frame::Headers { block, .. } | Frame::PushPromise { block, .. } => block.to_vec(),
        other => panic!("expected HEADERS or PUSH_PROMISE, got {other:?}"),
    }
}

/// The error parsing `buf` gives.
fn error(buf: &[u8]) -> FrameError {
    match parse(buf, MAX) {
        Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn connection_error(kind: FrameErrorKind, reason: Reason) -> FrameError {
    FrameError {
        kind,
        reason,
        scope: Scope::Connection,
    }
}

fn bad_length(frame_type: u8, len: u32) -> FrameError {
    connection_error(
        FrameErrorKind::BadLength { frame_type, len },
        Reason::FRAME_SIZE_ERROR,
    )
}

fn too_much_padding(frame_type: u8, pad: u8, len: u32) -> FrameError {
    connection_error(
        FrameErrorKind::TooMuchPadding {
            frame_type,
            pad,
            len,
        },
        Reason::PROTOCOL_ERROR,
    )
}

// ===== round trips: writer, then parser =====

#[test]
fn settings_round_trip() {
    let params = [
        (setting::HEADER_TABLE_SIZE, 0),
        (setting::ENABLE_PUSH, 0),
        (setting::MAX_CONCURRENT_STREAMS, 100),
        (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE),
        (setting::MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT),
        (setting::MAX_HEADER_LIST_SIZE, u32::MAX),
        (0xabcd, u32::MAX), // unknown: passed through
    ];
    let mut out = Vec::new();
    write_settings(&mut out, &params);
    assert_eq!(out.len(), HEAD_LEN + 6 * params.len());
    let Frame::Settings { ack, params: got } = one(&out) else {
        panic!("not SETTINGS");
    };
    assert!(!ack);
    assert_eq!(got.len(), params.len());
    assert_eq!(got.collect::<Vec<_>>(), params);
}

#[test]
fn settings_empty_and_ack_round_trip() {
    let mut out = Vec::new();
    write_settings(&mut out, &[]);
    write_settings_ack(&mut out);
    assert_eq!(
        out,
        b"\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x04\x01\x00\x00\x00\x00"
    );
    let (first, used) = parse(&out, MAX).unwrap().unwrap();
    assert_eq!(
        first,
        Frame::Settings {
            ack: false,
            params: Settings::new(&[])
        }
    );
    assert_eq!(
        one(&out[used..]),
        Frame::Settings {
            ack: true,
            params: Settings::new(&[])
        }
    );
}

#[test]
fn ping_round_trip() {
    let payload = *b"\x01\x02\x03\x04\x05\x06\x07\x08";
    let mut out = Vec::new();
    write_ping(&mut out, payload);
    assert_eq!(
        one(&out),
        Frame::Ping {
            ack: false,
            payload
        }
    );
    out.clear();
    write_ping_ack(&mut out, payload);
    assert_eq!(one(&out), Frame::Ping { ack: true, payload });
}

#[test]
fn goaway_round_trip() {
    let mut out = Vec::new();
    write_goaway(
        &mut out,
        0x7fff_ffff,
        Reason::ENHANCE_YOUR_CALM,
        b"too many resets",
    );
    assert_eq!(
        one(&out),
        Frame::GoAway {
            last_stream: 0x7fff_ffff,
            reason: Reason::ENHANCE_YOUR_CALM,
            debug: b"too many resets",
        }
    );
    out.clear();
    write_goaway(&mut out, 0, Reason::NO_ERROR, b"");
    assert_eq!(out.len(), HEAD_LEN + 8);
    assert_eq!(
        one(&out),
        Frame::GoAway {
            last_stream: 0,
            reason: Reason::NO_ERROR,
            debug: b"",
        }
    );
}

#[test]
fn goaway_debug_is_cut_to_fit_the_smallest_frame_size() {
    let debug = vec![b'x'; 20_000];
    let mut out = Vec::new();
    write_goaway(&mut out, 1, Reason::INTERNAL_ERROR, &debug);
    assert_eq!(out.len(), HEAD_LEN + DEFAULT_MAX_FRAME_SIZE as usize);
    let Frame::GoAway { debug: got, .. } = one(&out) else {
        panic!("not GOAWAY");
    };
    assert_eq!(got, &debug[..DEFAULT_MAX_FRAME_SIZE as usize - 8]);
}

#[test]
fn goaway_last_stream_reserved_bit_is_dropped() {
    let frame = raw(kind::GOAWAY, 0, 0, b"\x80\x00\x00\x07\x00\x00\x00\x00");
    assert_eq!(
        one(&frame),
        Frame::GoAway {
            last_stream: 7,
            reason: Reason::NO_ERROR,
            debug: b""
        }
    );
}

#[test]
fn rst_stream_round_trip_keeps_unknown_codes() {
    let mut out = Vec::new();
    write_rst_stream(&mut out, 3, Reason::CANCEL);
    assert_eq!(
        one(&out),
        Frame::RstStream {
            stream: 3,
            reason: Reason::CANCEL
        }
    );
    out.clear();
    write_rst_stream(&mut out, 5, Reason(0xdead_beef));
    assert_eq!(
        one(&out),
        Frame::RstStream {
            stream: 5,
            reason: Reason(0xdead_beef)
        }
    );
}

#[test]
fn window_update_round_trip() {
    let mut out = Vec::new();
    for (stream, increment) in [(0, 1), (1, MAX_WINDOW_SIZE), (0x7fff_ffff, 65_535)] {
        out.clear();
        write_window_update(&mut out, stream, increment);
        assert_eq!(one(&out), Frame::WindowUpdate { stream, increment });
    }
}

#[test]
fn window_update_reserved_bit_is_dropped() {
    let frame = raw(kind::WINDOW_UPDATE, 0, 1, b"\x80\x00\x00\x01");
    assert_eq!(
        one(&frame),
        Frame::WindowUpdate {
            stream: 1,
            increment: 1
        }
    );
}

#[test]
fn data_round_trip() {
    let mut out = Vec::new();
    write_data(&mut out, 1, b"hello", false);
    assert_eq!(
        one(&out),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"hello",
            flow_len: 5
        }
    );
    out.clear();
    write_data(&mut out, 3, b"", true);
    assert_eq!(
        one(&out),
        Frame::Data {
            stream: 3,
            end_stream: true,
            data: b"",
            flow_len: 0
        }
    );
}

#[test]
fn data_head_then_payload_appended_by_caller() {
    let body = vec![7u8; 16_384];
    let mut out = b"earlier frames".to_vec();
    write_data_head(&mut out, 9, body.len(), true);
    assert!(out.capacity() >= 14 + HEAD_LEN + body.len());
    out.extend_from_slice(&body);
    assert_eq!(
        one(&out[14..]),
        Frame::Data {
            stream: 9,
            end_stream: true,
            data: &body,
            flow_len: 16_384
        }
    );
}

#[test]
#[should_panic(expected = "DATA frame of 16777216 bytes")]
fn data_head_longer_than_24_bits_panics() {
    write_data_head(&mut Vec::new(), 1, 1 << 24, false);
}

#[test]
fn headers_round_trip() {
    let mut out = Vec::new();
    write_headers(&mut out, 1, b"\x82\x86\x84", true, MAX);
    assert_eq!(
        one(&out),
        Frame::Headers {
            stream: 1,
            end_stream: true,
            end_headers: true,
            priority: None,
            block: b"\x82\x86\x84"
        }
    );
    out.clear();
    let at = begin_headers(&mut out);
    out.extend_from_slice(b"\x88");
    finish_headers(&mut out, at, 5, false, MAX);
    assert_eq!(
        one(&out),
        Frame::Headers {
            stream: 5,
            end_stream: false,
            end_headers: true,
            priority: None,
            block: b"\x88"
        }
    );
}

// ===== frames no writer makes: built by hand =====

#[test]
fn padded_data() {
    // Pad Length 2, "abc", 2 bytes of padding.
    let frame = raw(
        kind::DATA,
        flag::PADDED | flag::END_STREAM,
        1,
        b"\x02abc\x00\x00",
    );
    assert_eq!(
        one(&frame),
        Frame::Data {
            stream: 1,
            end_stream: true,
            data: b"abc",
            flow_len: 6
        }
    );
}

#[test]
fn headers_with_priority_and_padding() {
    let mut payload = vec![3]; // Pad Length
    payload.extend_from_slice(b"\x80\x00\x00\x03\x0f"); // exclusive on 3, weight 15
    payload.extend_from_slice(b"\x82\x84");
    payload.extend_from_slice(b"\x00\x00\x00");
    let flags = flag::PADDED | flag::PRIORITY | flag::END_HEADERS;
    let frame = raw(kind::HEADERS, flags, 5, &payload);
    assert_eq!(
        one(&frame),
        Frame::Headers {
            stream: 5,
            end_stream: false,
            end_headers: true,
            priority: Some(Priority {
                dependency: 3,
                exclusive: true,
                weight: 15
            }),
            block: b"\x82\x84"
        }
    );
}

#[test]
fn headers_with_priority_only() {
    let frame = raw(
        kind::HEADERS,
        flag::PRIORITY,
        7,
        b"\x00\x00\x00\x00\xff\x82",
    );
    assert_eq!(
        one(&frame),
        Frame::Headers {
            stream: 7,
            end_stream: false,
            end_headers: false,
            priority: Some(Priority {
                dependency: 0,
                exclusive: false,
                weight: 255
            }),
            block: b"\x82"
        }
    );
}

#[test]
fn priority_frame() {
    let frame = raw(kind::PRIORITY, 0, 3, b"\x00\x00\x00\x01\x10");
    assert_eq!(
        one(&frame),
        Frame::Priority {
            stream: 3,
            priority: Priority {
                dependency: 1,
                exclusive: false,
                weight: 16
            }
        }
    );
}

#[test]
fn push_promise_frames() {
    let frame = raw(
        kind::PUSH_PROMISE,
        flag::END_HEADERS,
        1,
        b"\x80\x00\x00\x02\x82",
    );
    assert_eq!(
        one(&frame),
        Frame::PushPromise {
            stream: 1,
            promised: 2,
            end_headers: true,
            block: b"\x82"
        }
    );
    let frame = raw(
        kind::PUSH_PROMISE,
        flag::PADDED,
        1,
        b"\x01\x00\x00\x00\x04\x82\x00",
    );
    assert_eq!(
        one(&frame),
        Frame::PushPromise {
            stream: 1,
            promised: 4,
            end_headers: false,
            block: b"\x82"
        }
    );
}

#[test]
fn continuation_frame() {
    let frame = raw(kind::CONTINUATION, flag::END_HEADERS, 1, b"\x82\x86");
    assert_eq!(
        one(&frame),
        Frame::Continuation {
            stream: 1,
            end_headers: true,
            block: b"\x82\x86"
        }
    );
    // PADDED means nothing on CONTINUATION: the byte is part of the block.
    let frame = raw(kind::CONTINUATION, flag::PADDED, 1, b"\x01\x86");
    assert_eq!(
        one(&frame),
        Frame::Continuation {
            stream: 1,
            end_headers: false,
            block: b"\x01\x86"
        }
    );
}

#[test]
fn unknown_frame_type_is_skipped_whole() {
    // h2spec 4.1/1 and 5.5/1: type 0x16, 8 bytes, then a PING that must still be read.
    let mut buf = b"\x00\x00\x08\x16\x00\x00\x00\x00\x00".to_vec();
    buf.extend_from_slice(&[0; 8]);
    write_ping(&mut buf, [9; 8]);
    let (frame, used) = parse(&buf, MAX).unwrap().unwrap();
    assert_eq!(
        frame,
        Frame::Unknown {
            kind: 0x16,
            stream: 0
        }
    );
    assert_eq!(used, 17);
    assert_eq!(
        one(&buf[used..]),
        Frame::Ping {
            ack: false,
            payload: [9; 8]
        }
    );
    // Unknown types have no stream id rules.
    let frame = raw(0xff, 0xff, 7, b"");
    assert_eq!(
        one(&frame),
        Frame::Unknown {
            kind: 0xff,
            stream: 7
        }
    );
}

#[test]
fn undefined_flags_are_ignored() {
    // h2spec 4.1/2: PING with flags 0x16 (ACK clear).
    let mut buf = b"\x00\x00\x08\x06\x16\x00\x00\x00\x00".to_vec();
    buf.extend_from_slice(&[0; 8]);
    assert_eq!(
        one(&buf),
        Frame::Ping {
            ack: false,
            payload: [0; 8]
        }
    );
    // DATA with every flag but PADDED: PRIORITY and END_HEADERS mean nothing on it.
    let frame = raw(kind::DATA, !flag::PADDED, 1, b"x");
    assert_eq!(
        one(&frame),
        Frame::Data {
            stream: 1,
            end_stream: true,
            data: b"x",
            flow_len: 1
        }
    );
    // RST_STREAM, WINDOW_UPDATE and PRIORITY define no flags.
    let frame = raw(kind::RST_STREAM, 0xff, 1, b"\x00\x00\x00\x08");
    assert_eq!(
        one(&frame),
        Frame::RstStream {
            stream: 1,
            reason: Reason::CANCEL
        }
    );
}

// ===== errors: frame size =====

#[test]
fn frame_over_max_size_is_rejected_from_head_alone() {
    for kind in [
        kind::DATA,
        kind::HEADERS,
        kind::SETTINGS,
        kind::CONTINUATION,
        0x20,
    ] {
        let stream = u32::from(kind != kind::SETTINGS);
        let head = Head {
            len: MAX + 1,
            kind,
            flags: 0,
            stream,
        }
        .to_bytes();
        // Only the head has arrived: the error must not wait for 16 KiB of payload.
        assert_eq!(
            error(&head),
            connection_error(
                FrameErrorKind::TooLarge {
                    frame_type: kind,
                    len: MAX + 1,
                    max: MAX
                },
                Reason::FRAME_SIZE_ERROR
            )
        );
    }
    // Exactly the maximum is fine: wait for the payload.
    let head = Head {
        len: MAX,
        kind: kind::DATA,
        flags: 0,
        stream: 1,
    }
    .to_bytes();
    assert_eq!(parse(&head, MAX), Ok(None));
    // A larger advertised maximum lets it through.
    let mut frame = raw(kind::DATA, 0, 1, &vec![0; 20_000]);
    assert_eq!(
        error(&frame).kind,
        FrameErrorKind::TooLarge {
            frame_type: 0,
            len: 20_000,
            max: MAX
        }
    );
    assert!(parse(&frame, 20_000).unwrap().is_some());
    frame.truncate(HEAD_LEN);
    assert_eq!(
        parse(&frame, 19_999).unwrap_err().reason,
        Reason::FRAME_SIZE_ERROR
    );
}

#[test]
fn head_check_is_exposed_for_callers_that_read_heads_first() {
    let head = Head {
        len: 8,
        kind: kind::PING,
        flags: 0,
        stream: 1,
    };
    assert_eq!(
        head.check(MAX),
        Err(connection_error(
            FrameErrorKind::StreamNonZero {
                frame_type: kind::PING,
                stream: 1
            },
            Reason::PROTOCOL_ERROR
        ))
    );
    assert_eq!(Head { stream: 0, ..head }.check(MAX), Ok(()));
    assert_eq!(
        Head { stream: 0, ..head }.check(7).unwrap_err().reason,
        Reason::FRAME_SIZE_ERROR
    );
}

#[test]
fn fixed_lengths_are_connection_frame_size_errors() {
    let cases: &[(u8, u8, u32, usize)] = &[
        (kind::RST_STREAM, 0, 1, 3), // h2spec 6.4/3
        (kind::RST_STREAM, 0, 1, 5),
        (kind::PING, 0, 0, 6), // h2spec 6.7/4
        (kind::PING, 0, 0, 7),
        (kind::PING, 0, 0, 9),
        (kind::WINDOW_UPDATE, 0, 0, 3), // h2spec 6.9/3
        (kind::WINDOW_UPDATE, 0, 1, 5),
        (kind::SETTINGS, 0, 0, 3), // h2spec 6.5/3
        (kind::SETTINGS, 0, 0, 7),
        (kind::SETTINGS, flag::ACK, 0, 1), // h2spec 6.5/1
        (kind::SETTINGS, flag::ACK, 0, 6),
        (kind::GOAWAY, 0, 0, 0),
        (kind::GOAWAY, 0, 0, 7),
    ];
    for &(kind, flags, stream, len) in cases {
        let frame = raw(kind, flags, stream, &vec![0; len]);
        assert_eq!(
            error(&frame),
            bad_length(kind, len as u32),
            "{} {len}",
            kind::name(kind)
        );
        // Decided from the head: the payload need not have arrived.
        assert_eq!(error(&frame[..HEAD_LEN]), bad_length(kind, len as u32));
    }
}

#[test]
fn priority_with_wrong_length_is_stream_frame_size_error() {
    // h2spec 6.3/2: length 4.
    for payload in [&b"\x80\x00\x00\x01"[..], b"\x00\x00\x00\x01\x10\x00", b""] {
        let mut buf = raw(kind::PRIORITY, 0, 1, payload);
        // Reported only once the frame is whole, so the caller can skip it.
        for end in 0..buf.len() {
            assert_eq!(parse(&buf[..end], MAX), Ok(None));
        }
        let skip = buf.len();
        write_ping(&mut buf, [1; 8]);
        let e = error(&buf);
        assert_eq!(
            e,
            FrameError {
                kind: FrameErrorKind::BadLength {
                    frame_type: kind::PRIORITY,
                    len: payload.len() as u32
                },
                reason: Reason::FRAME_SIZE_ERROR,
                scope: Scope::Stream {
                    id: 1,
                    skip,
                    field_block: None
                },
            }
        );
        assert!(!e.is_connection_error());
        // After skipping, the next frame parses.
        assert_eq!(
            one(&buf[skip..]),
            Frame::Ping {
                ack: false,
                payload: [1; 8]
            }
        );
    }
}

#[test]
fn headers_too_short_for_its_fixed_fields() {
    let f = flag::PRIORITY;
    assert_eq!(
        error(&raw(kind::HEADERS, f, 1, &[0; 4])),
        bad_length(kind::HEADERS, 4)
    );
    let f = flag::PRIORITY | flag::PADDED;
    assert_eq!(
        error(&raw(kind::HEADERS, f, 1, &[0; 5])),
        bad_length(kind::HEADERS, 5)
    );
    // Pad Length 0 and the 5 priority bytes: just fits, empty block.
    assert_eq!(block_of(&raw(kind::HEADERS, f, 1, &[0; 6])), b"");
}

#[test]
fn padded_flag_with_empty_payload_has_no_pad_length() {
    for kind in [kind::DATA, kind::HEADERS] {
        assert_eq!(error(&raw(kind, flag::PADDED, 1, b"")), bad_length(kind, 0));
    }
}

#[test]
fn push_promise_too_short_for_promised_stream() {
    let t = kind::PUSH_PROMISE;
    assert_eq!(error(&raw(t, 0, 1, &[0; 3])), bad_length(t, 3));
    assert_eq!(error(&raw(t, flag::PADDED, 1, &[0; 4])), bad_length(t, 4));
    assert_eq!(block_of(&raw(t, 0, 1, b"\x00\x00\x00\x02")), b"");
}

// ===== errors: stream ids =====

#[test]
fn stream_zero_is_connection_protocol_error() {
    let cases: &[(u8, &[u8])] = &[
        (kind::DATA, b"test"),                     // h2spec 6.1/1
        (kind::HEADERS, b"\x82"),                  // h2spec 6.2/3
        (kind::PRIORITY, b"\x00\x00\x00\x01\x10"), // h2spec 6.3/1
        (kind::RST_STREAM, b"\x00\x00\x00\x08"),   // h2spec 6.4/1
        (kind::PUSH_PROMISE, b"\x00\x00\x00\x02"),
        (kind::CONTINUATION, b"\x82"), // h2spec 6.10/3
    ];
    for &(kind, payload) in cases {
        let expected = connection_error(
            FrameErrorKind::StreamZero { frame_type: kind },
            Reason::PROTOCOL_ERROR,
        );
        let frame = raw(kind, flag::END_HEADERS, 0, payload);
        assert_eq!(error(&frame), expected, "{}", kind::name(kind));
        assert_eq!(error(&frame[..HEAD_LEN]), expected);
    }
}

#[test]
fn stream_nonzero_is_connection_protocol_error() {
    let cases: &[(u8, &[u8])] = &[
        (kind::SETTINGS, b"\x00\x03\x00\x00\x00\x64"), // h2spec 6.5/2
        (kind::PING, &[0; 8]),                         // h2spec 6.7/3
        (kind::GOAWAY, &[0; 8]),                       // h2spec 6.8/1
    ];
    for &(kind, payload) in cases {
        let frame = raw(kind, 0, 1, payload);
        assert_eq!(
            error(&frame),
            connection_error(
                FrameErrorKind::StreamNonZero {
                    frame_type: kind,
                    stream: 1
                },
                Reason::PROTOCOL_ERROR
            ),
            "{}",
            kind::name(kind)
        );
    }
}

// ===== errors: padding =====

#[test]
fn data_padding_edge_cases() {
    // Payload of 6 bytes: Pad Length, then 5 bytes of data and padding.
    let data = |pad: u8| {
        let mut payload = vec![pad];
        payload.extend_from_slice(b"abcde");
        raw(kind::DATA, flag::PADDED, 1, &payload)
    };
    let frame = data(0);
    assert_eq!(
        one(&frame),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"abcde",
            flow_len: 6
        }
    );
    // Padding of payload length - 1: all of it but the Pad Length field; no data.
    let frame = data(5);
    assert_eq!(
        one(&frame),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"",
            flow_len: 6
        }
    );
    // Padding of payload length or more (RFC 9113 section 6.1).
    for pad in [6, 7, 255] {
        assert_eq!(error(&data(pad)), too_much_padding(kind::DATA, pad, 6));
    }
    // Only the Pad Length field, padding 0.
    assert_eq!(
        one(&raw(kind::DATA, flag::PADDED, 1, b"\x00")),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"",
            flow_len: 1
        }
    );
}

#[test]
fn data_invalid_pad_length_h2spec_6_1_3() {
    let mut buf = b"\x00\x00\x05\x00\x09\x00\x00\x00\x01".to_vec();
    buf.extend_from_slice(b"\x06\x54\x65\x73\x74");
    assert_eq!(error(&buf), too_much_padding(kind::DATA, 6, 5));
}

#[test]
fn headers_padding_edge_cases() {
    let block = b"\x82\x86\x84";
    // h2spec 6.2/4: frame length is the block plus 1, pad length the block plus 2.
    let mut buf = vec![0, 0, block.len() as u8 + 1, 1, 0x0d, 0, 0, 0, 1];
    buf.push(block.len() as u8 + 2);
    buf.extend_from_slice(block);
    assert_eq!(error(&buf), too_much_padding(kind::HEADERS, 5, 4));

    let headers = |flags: u8, pad: u8| {
        let mut payload = vec![pad];
        if flags & flag::PRIORITY != 0 {
            payload.extend_from_slice(b"\x00\x00\x00\x00\x00");
        }
        payload.extend_from_slice(block);
        raw(
            kind::HEADERS,
            flags | flag::PADDED | flag::END_HEADERS,
            1,
            &payload,
        )
    };
    for flags in [0, flag::PRIORITY] {
        let len = 1 + 3 + if flags == 0 { 0 } else { 5 };
        assert_eq!(block_of(&headers(flags, 0)), block);
        // Padding that takes the whole block: fine, empty block.
        assert_eq!(block_of(&headers(flags, 3)), b"");
        // One more byte of padding would overlap the fixed fields (or, without
        // PRIORITY, be as long as the payload).
        for pad in [4, len, 255] {
            assert_eq!(
                error(&headers(flags, pad)),
                too_much_padding(kind::HEADERS, pad, len.into())
            );
        }
    }
}

#[test]
fn push_promise_padding_edge_cases() {
    let frame = |pad: u8| {
        let mut payload = vec![pad, 0, 0, 0, 2];
        payload.extend_from_slice(b"\x82\x86");
        raw(kind::PUSH_PROMISE, flag::PADDED, 1, &payload)
    };
    let buf = frame(2);
    let Frame::PushPromise {
        block, promised, ..
    } = one(&buf)
    else {
        panic!("not PUSH_PROMISE");
    };
    assert_eq!((block, promised), (&b""[..], 2));
    for pad in [3, 6, 7] {
        assert_eq!(
            error(&frame(pad)),
            too_much_padding(kind::PUSH_PROMISE, pad, 7)
        );
    }
}

// ===== errors: dependencies, WINDOW_UPDATE, SETTINGS =====

#[test]
fn priority_frame_depending_on_itself_is_stream_error() {
    // h2spec 5.3.1/2
    let frame = raw(kind::PRIORITY, 0, 3, b"\x80\x00\x00\x03\x10");
    assert_eq!(
        error(&frame),
        FrameError {
            kind: FrameErrorKind::SelfDependency {
                frame_type: kind::PRIORITY,
                stream: 3
            },
            reason: Reason::PROTOCOL_ERROR,
            scope: Scope::Stream {
                id: 3,
                skip: 14,
                field_block: None
            },
        }
    );
}

#[test]
fn headers_depending_on_itself_is_stream_error_with_its_field_block() {
    // h2spec 5.3.1/1, without and with padding and END_HEADERS.
    for (flags, payload) in [
        (flag::END_HEADERS, &b"\x00\x00\x00\x01\x10\x82\x86"[..]),
        (flag::PADDED, b"\x01\x00\x00\x00\x01\x10\x82\x86\x00"),
    ] {
        let mut buf = b"prefix".to_vec();
        buf.extend_from_slice(&raw(kind::HEADERS, flags | flag::PRIORITY, 1, payload));
        let e = parse(&buf[6..], MAX).unwrap_err();
        let Scope::Stream {
            id,
            skip,
            field_block: Some(field_block),
        } = e.scope
        else {
            panic!("not a stream error with a field block: {e:?}");
        };
        assert_eq!((id, skip), (1, buf.len() - 6));
        assert_eq!(&buf[6..][field_block.start..field_block.end], b"\x82\x86");
        assert_eq!(field_block.end_headers, flags & flag::END_HEADERS != 0);
        assert_eq!(e.reason, Reason::PROTOCOL_ERROR);
        assert_eq!(
            e.kind,
            FrameErrorKind::SelfDependency {
                frame_type: kind::HEADERS,
                stream: 1
            }
        );
    }
}

#[test]
fn zero_window_increment() {
    // h2spec 6.9/2: on a stream, a stream error.
    let frame = raw(kind::WINDOW_UPDATE, 0, 1, &[0; 4]);
    assert_eq!(
        error(&frame),
        FrameError {
            kind: FrameErrorKind::ZeroIncrement { stream: 1 },
            reason: Reason::PROTOCOL_ERROR,
            scope: Scope::Stream {
                id: 1,
                skip: 13,
                field_block: None
            },
        }
    );
    // h2spec 6.9/1: on the connection, a connection error.
    let frame = raw(kind::WINDOW_UPDATE, 0, 0, &[0; 4]);
    assert_eq!(
        error(&frame),
        connection_error(
            FrameErrorKind::ZeroIncrement { stream: 0 },
            Reason::PROTOCOL_ERROR
        )
    );
    // Only the reserved bit set: still an increment of 0.
    let frame = raw(kind::WINDOW_UPDATE, 0, 0, b"\x80\x00\x00\x00");
    assert_eq!(
        error(&frame).kind,
        FrameErrorKind::ZeroIncrement { stream: 0 }
    );
}

#[test]
fn setting_values() {
    let ok = [
        (setting::ENABLE_PUSH, 0),
        (setting::ENABLE_PUSH, 1),
        (setting::INITIAL_WINDOW_SIZE, 0),
        (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE),
        (setting::MAX_FRAME_SIZE, 16_384),
        (setting::MAX_FRAME_SIZE, 16_777_215),
        (setting::ENABLE_CONNECT_PROTOCOL, 1),
        (setting::NO_RFC7540_PRIORITIES, 1),
        (setting::HEADER_TABLE_SIZE, u32::MAX),
        (setting::MAX_CONCURRENT_STREAMS, u32::MAX),
        (setting::MAX_HEADER_LIST_SIZE, u32::MAX),
        (0x7, u32::MAX),
        (0xffff, u32::MAX),
    ];
    for (id, value) in ok {
        assert_eq!(check_setting(id, value), Ok(()), "{id} = {value}");
    }
    let bad = [
        (setting::ENABLE_PUSH, 2, Reason::PROTOCOL_ERROR), // h2spec 6.5.2/1
        (setting::ENABLE_PUSH, u32::MAX, Reason::PROTOCOL_ERROR),
        (
            setting::INITIAL_WINDOW_SIZE,
            1 << 31,
            Reason::FLOW_CONTROL_ERROR,
        ), // h2spec 6.5.2/2
        (
            setting::INITIAL_WINDOW_SIZE,
            u32::MAX,
            Reason::FLOW_CONTROL_ERROR,
        ),
        (setting::MAX_FRAME_SIZE, 16_383, Reason::PROTOCOL_ERROR), // h2spec 6.5.2/3
        (setting::MAX_FRAME_SIZE, 0, Reason::PROTOCOL_ERROR),
        (setting::MAX_FRAME_SIZE, 16_777_216, Reason::PROTOCOL_ERROR), // h2spec 6.5.2/4
        (setting::ENABLE_CONNECT_PROTOCOL, 2, Reason::PROTOCOL_ERROR),
        (setting::NO_RFC7540_PRIORITIES, 2, Reason::PROTOCOL_ERROR),
    ];
    for (id, value, reason) in bad {
        let expected = connection_error(FrameErrorKind::BadSetting { id, value }, reason);
        assert_eq!(check_setting(id, value), Err(expected));
        // And inside a SETTINGS frame, after a valid parameter.
        let mut frame = Vec::new();
        write_settings(
            &mut frame,
            &[(setting::MAX_CONCURRENT_STREAMS, 10), (id, value)],
        );
        assert_eq!(error(&frame), expected);
    }
}

#[test]
fn stream_error_can_be_skipped_and_parsing_continues() {
    let mut buf = raw(kind::WINDOW_UPDATE, 0, 3, &[0; 4]);
    write_data(&mut buf, 3, b"after", true);
    let Scope::Stream { skip, .. } = error(&buf).scope else {
        panic!("not a stream error");
    };
    assert_eq!(
        one(&buf[skip..]),
        Frame::Data {
            stream: 3,
            end_stream: true,
            data: b"after",
            flow_len: 5
        }
    );
}

#[test]
fn error_messages_say_what_and_where() {
    let e = error(&raw(kind::DATA, 0, 0, b""));
    assert_eq!(
        e.to_string(),
        "connection error PROTOCOL_ERROR: DATA frame on stream 0"
    );
    let e = error(&raw(kind::PRIORITY, 0, 5, b"\x00\x00\x00\x05\x00"));
    assert_eq!(
        e.to_string(),
        "stream error on stream 5 PROTOCOL_ERROR: PRIORITY frame makes stream 5 depend on itself"
    );
    assert_eq!(
        check_setting(setting::INITIAL_WINDOW_SIZE, 1 << 31)
            .unwrap_err()
            .to_string(),
        "connection error FLOW_CONTROL_ERROR: invalid value 2147483648 for setting 0x4"
    );
}

#[test]
fn split_headers_parse_back() {
    let block: Vec<u8> = (0..40_000).map(|i| i as u8).collect();
    let mut out = Vec::new();
    let at = begin_headers(&mut out);
    out.extend_from_slice(&block);
    finish_headers(&mut out, at, 9, true, MAX);
    let mut rest = &out[..];
    let mut joined = Vec::new();
    let mut frames = 0;
    while let Some((frame, used)) = parse(rest, MAX).unwrap() {
        match frame {
            Frame::Headers {
                stream: 9,
                end_stream: true,
                end_headers: false,
                priority: None,
                block,
            } => joined.extend_from_slice(block),
            Frame::Continuation {
                stream: 9,
                end_headers,
                block,
            } => {
                assert_eq!(end_headers, used == rest.len());
                joined.extend_from_slice(block);
            }
            other => panic!("unexpected {other:?}"),
        }
        frames += 1;
        rest = &rest[used..];
    }
    assert_eq!(frames, 3);
    assert_eq!(joined, block);
}

// ===== truncation =====

/// Every frame in `buf`, as their Debug text (so frames from different buffers compare),
/// parsed until `Ok(None)`; panics on an error.
fn parse_all(mut buf: &[u8]) -> Vec<String> {
    let mut frames = Vec::new();
    while let Some((frame, used)) = parse(buf, MAX).unwrap() {
        frames.push(format!("{frame:?}"));
        buf = &buf[used..];
    }
    frames
}

/// One of every frame type, valid, some with padding and priority.
fn every_frame_type() -> Vec<u8> {
    let mut buf = Vec::new();
    write_settings(
        &mut buf,
        &[(setting::MAX_CONCURRENT_STREAMS, 100), (0x99, 1)],
    );
    write_settings_ack(&mut buf);
    write_headers(&mut buf, 1, &[0x82; 40], false, MAX);
    buf.extend(raw(
        kind::HEADERS,
        flag::PADDED | flag::PRIORITY,
        3,
        b"\x02\x00\x00\x00\x01\x07\x82\x00\x00",
    ));
    buf.extend(raw(kind::CONTINUATION, flag::END_HEADERS, 3, b"\x86"));
    buf.extend(raw(kind::PRIORITY, 0, 5, b"\x00\x00\x00\x03\x01"));
    write_data(&mut buf, 1, b"body", false);
    buf.extend(raw(
        kind::DATA,
        flag::PADDED | flag::END_STREAM,
        1,
        b"\x03xy\x00\x00\x00",
    ));
    write_rst_stream(&mut buf, 3, Reason::CANCEL);
    buf.extend(raw(
        kind::PUSH_PROMISE,
        flag::END_HEADERS,
        1,
        b"\x00\x00\x00\x02\x82",
    ));
    write_ping(&mut buf, [1; 8]);
    write_ping_ack(&mut buf, [2; 8]);
    write_window_update(&mut buf, 0, 1000);
    buf.extend(raw(0x42, 0, 0, b"unknown"));
    write_goaway(&mut buf, 5, Reason::NO_ERROR, b"bye");
    buf
}

#[test]
fn every_truncation_point_waits_for_more() {
    let buf = every_frame_type();
    let whole = parse_all(&buf);
    assert_eq!(whole.len(), 15);
    let ends: Vec<usize> = split_frames(&buf)
        .iter()
        .scan(0, |end, (head, _)| {
            *end += HEAD_LEN + head.len as usize;
            Some(*end)
        })
        .collect();
    for cut in 0..=buf.len() {
        // parse_all panics on any error; each prefix gives the frames wholly in it.
        let frames = parse_all(&buf[..cut]);
        let complete = ends.iter().filter(|&&end| end <= cut).count();
        assert_eq!(frames, whole[..complete], "cut at {cut}");
    }
}

// ===== properties =====

use proptest::prelude::*;

/// A valid frame, for generating streams of them.
#[derive(Debug, Clone)]
enum Spec {
    Data {
        stream: u32,
        data: Vec<u8>,
        pad: Option<u8>,
        end_stream: bool,
    },
    Headers {
        stream: u32,
        block: Vec<u8>,
        pad: Option<u8>,
        priority: Option<(u32, bool, u8)>,
        flags: u8,
    },
    Priority {
        stream: u32,
        dependency: u32,
        weight: u8,
    },
    RstStream {
        stream: u32,
        reason: u32,
    },
    Settings {
        params: Vec<(u16, u32)>,
    },
    SettingsAck,
    PushPromise {
        stream: u32,
        promised: u32,
        block: Vec<u8>,
        pad: Option<u8>,
    },
    Ping {
        ack: bool,
        payload: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        reason: u32,
        debug: Vec<u8>,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        block: Vec<u8>,
        end_headers: bool,
    },
    Unknown {
        kind: u8,
        stream: u32,
        payload: Vec<u8>,
    },
}

fn stream_id() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..10, 1u32..=0x7fff_ffff]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// `dependency`, or 0 if it is `stream` itself: that is an error, tested by hand.
fn not_on_itself(stream: u32, dependency: u32) -> u32 {
    if dependency & 0x7fff_ffff == stream {
        0
    } else {
        dependency
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let setting_param = (0u16..12, any::<u32>()).prop_map(|(id, value)| {
        // Keep values valid: invalid ones are tested by hand above.
        let value = match check_setting(id, value) {
            Ok(()) => value,
            Err(_) if id == setting::MAX_FRAME_SIZE => DEFAULT_MAX_FRAME_SIZE,
            Err(_) => 0,
        };
        (id, value)
    });
    prop_oneof![
        (stream_id(), bytes(64), any::<Option<u8>>(), any::<bool>()).prop_map(
            |(stream, data, pad, end_stream)| Spec::Data {
                stream,
                data,
                pad,
                end_stream
            }
        ),
        (
            stream_id(),
            bytes(64),
            any::<Option<u8>>(),
            any::<Option<(u32, bool, u8)>>(),
            any::<u8>()
        )
            .prop_map(|(stream, block, pad, priority, flags)| Spec::Headers {
                stream,
                block,
                pad,
                priority: priority.map(|(dep, e, w)| (
                    not_on_itself(stream, dep & 0x7fff_ffff),
                    e,
                    w
                )),
                flags,
            }),
        (stream_id(), any::<u32>(), any::<u8>()).prop_map(|(stream, dependency, weight)| {
            Spec::Priority {
                stream,
                dependency: not_on_itself(stream, dependency),
                weight,
            }
        }),
        (stream_id(), any::<u32>()).prop_map(|(stream, reason)| Spec::RstStream { stream, reason }),
        proptest::collection::vec(setting_param, 0..8).prop_map(|params| Spec::Settings { params }),
        Just(Spec::SettingsAck),
        (stream_id(), any::<u32>(), bytes(64), any::<Option<u8>>()).prop_map(
            |(stream, promised, block, pad)| Spec::PushPromise {
                stream,
                promised,
                block,
                pad
            }
        ),
        (any::<bool>(), any::<[u8; 8]>()).prop_map(|(ack, payload)| Spec::Ping { ack, payload }),
        (any::<u32>(), any::<u32>(), bytes(32)).prop_map(|(last_stream, reason, debug)| {
            Spec::GoAway {
                last_stream,
                reason,
                debug,
            }
        }),
        (0u32..5, 1u32..=MAX_WINDOW_SIZE)
            .prop_map(|(stream, increment)| Spec::WindowUpdate { stream, increment }),
        (stream_id(), bytes(64), any::<bool>()).prop_map(|(stream, block, end_headers)| {
            Spec::Continuation {
                stream,
                block,
                end_headers,
            }
        }),
        (10u8.., 0u32..5, bytes(32)).prop_map(|(kind, stream, payload)| Spec::Unknown {
            kind,
            stream,
            payload
        }),
    ]
}

/// Payload with padding: Pad Length, `fixed` and `body`, then `pad` zero bytes.
fn padded(pad: Option<u8>, fixed: &[u8], body: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend(pad);
    payload.extend_from_slice(fixed);
    payload.extend_from_slice(body);
    payload.resize(payload.len() + usize::from(pad.unwrap_or(0)), 0);
    payload
}

fn pad_flag(pad: Option<u8>) -> u8 {
    if pad.is_some() {
        flag::PADDED
    } else {
        0
    }
}

fn build(spec: &Spec, out: &mut Vec<u8>) {
    match spec {
        Spec::Data {
            stream,
            data,
            pad: None,
            end_stream,
        } => write_data(out, *stream, data, *end_stream),
        Spec::Data {
            stream,
            data,
            pad,
            end_stream,
        } => {
            let flags = pad_flag(*pad) | if *end_stream { flag::END_STREAM } else { 0 };
            out.extend(raw(kind::DATA, flags, *stream, &padded(*pad, b"", data)));
        }
        Spec::Headers {
            stream,
            block,
            pad,
            priority,
            flags,
        } => {
            let mut fixed = Vec::new();
            let mut flags = flags & !(flag::PADDED | flag::PRIORITY) | pad_flag(*pad);
            if let Some((dependency, exclusive, weight)) = priority {
                flags |= flag::PRIORITY;
                fixed.extend_from_slice(
                    &(dependency | if *exclusive { 1 << 31 } else { 0 }).to_be_bytes(),
                );
                fixed.push(*weight);
            }
            out.extend(raw(
                kind::HEADERS,
                flags,
                *stream,
                &padded(*pad, &fixed, block),
            ));
        }
        Spec::Priority {
            stream,
            dependency,
            weight,
        } => {
            let mut payload = dependency.to_be_bytes().to_vec();
            payload.push(*weight);
            out.extend(raw(kind::PRIORITY, 0, *stream, &payload));
        }
        Spec::RstStream { stream, reason } => write_rst_stream(out, *stream, Reason(*reason)),
        Spec::Settings { params } => write_settings(out, params),
        Spec::SettingsAck => write_settings_ack(out),
        Spec::PushPromise {
            stream,
            promised,
            block,
            pad,
        } => {
            let payload = padded(*pad, &promised.to_be_bytes(), block);
            out.extend(raw(kind::PUSH_PROMISE, pad_flag(*pad), *stream, &payload));
        }
        Spec::Ping {
            ack: false,
            payload,
        } => write_ping(out, *payload),
        Spec::Ping { ack: true, payload } => write_ping_ack(out, *payload),
        Spec::GoAway {
            last_stream,
            reason,
            debug,
        } => write_goaway(out, *last_stream, Reason(*reason), debug),
        Spec::WindowUpdate { stream, increment } => write_window_update(out, *stream, *increment),
        Spec::Continuation {
            stream,
            block,
            end_headers,
        } => {
            let flags = if *end_headers { flag::END_HEADERS } else { 0 };
            out.extend(raw(kind::CONTINUATION, flags, *stream, block));
        }
        Spec::Unknown {
            kind,
            stream,
            payload,
        } => out.extend(raw(*kind, 0, *stream, payload)),
    }
}

/// Parses `buf` frame by frame, skipping stream errors, until it needs more or hits a
/// connection error; checks the parser's promises about the byte counts on the way.
fn parse_through(mut buf: &[u8], max_frame_size: u32) {
    loop {
        match parse(buf, max_frame_size) {
            Ok(None) => return,
            Ok(Some((_, used))) => {
                assert!((HEAD_LEN..=buf.len()).contains(&used));
                buf = &buf[used..];
            }
            Err(FrameError {
                scope: Scope::Connection,
                ..
            }) => return,
            Err(FrameError {
                scope: Scope::Stream {
                    skip, field_block, ..
                },
                ..
            }) => {
                assert!((HEAD_LEN..=buf.len()).contains(&skip));
                if let Some(block) = field_block {
                    assert!(block.start <= block.end && block.end <= skip);
                }
                buf = &buf[skip..];
            }
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        buf in bytes(512),
        max_frame_size in prop_oneof![Just(MAX), 0u32..100, any::<u32>()],
    ) {
        parse_through(&buf, max_frame_size);
    }

    #[test]
    fn frame_shaped_garbage_never_panics(
        frames in proptest::collection::vec((0u8..12, any::<u8>(), 0u32..4, bytes(48)), 0..8),
    ) {
        // Heads that agree with their payloads but with random types, flags and
        // contents, so the payload rules (padding, lengths, priorities) get exercised.
        let mut buf = Vec::new();
        for (kind, flags, stream, payload) in &frames {
            buf.extend(raw(*kind, *flags, *stream, payload));
        }
        parse_through(&buf, MAX);
    }

    #[test]
    fn any_split_parses_to_the_same_frames(
        specs in proptest::collection::vec(spec(), 0..10),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut whole = Vec::new();
        for spec in &specs {
            build(spec, &mut whole);
        }
        let expected = parse_all(&whole);
        prop_assert_eq!(expected.len(), specs.len());

        // Feed `whole` in chunks cut at random points, parsing after each like a
        // connection does and dropping what it consumed.
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(whole.len() + 1)).collect();
        cuts.push(whole.len());
        cuts.sort_unstable();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        let mut fed = 0;
        for cut in cuts {
            buf.extend_from_slice(&whole[fed..cut]);
            fed = cut;
            while let Some((frame, used)) = parse(&buf, MAX).unwrap() {
                got.push(format!("{frame:?}"));
                buf.drain(..used);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn padded_data_round_trip(data in bytes(300), pad in any::<u8>(), end_stream in any::<bool>()) {
        let frame = raw(
            kind::DATA,
            flag::PADDED | if end_stream { flag::END_STREAM } else { 0 },
            1,
            &padded(Some(pad), b"", &data),
        );
        prop_assert_eq!(
            one(&frame),
            Frame::Data {
                stream: 1,
                end_stream,
                data: &data,
                flow_len: (1 + data.len() + usize::from(pad)) as u32,
            }
        );
    }

    #[test]
    fn headers_split_round_trip(
        len in prop_oneof![0usize..100, 16_000usize..50_000],
        max_frame_size in prop_oneof![Just(MAX), 16_384u32..20_000],
        end_stream in any::<bool>(),
        prefix in bytes(20),
    ) {
        let block: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        write_both_ways(&block, end_stream, max_frame_size, &prefix);
    }
}
