//! Frames written and parsed back, and frames no writer makes, built by hand.

use super::*;

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
