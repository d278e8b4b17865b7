//! Truncation at every byte, and property tests over split points and arbitrary
//! bytes.

use super::split::{split_frames, write_both_ways};
use super::*;

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
