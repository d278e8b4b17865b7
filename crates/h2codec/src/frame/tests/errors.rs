//! Every rule a frame can break: sizes, stream ids, padding, dependencies,
//! WINDOW_UPDATE and SETTINGS values.

use super::*;

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
