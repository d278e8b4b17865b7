//! Fuzzes the HTTP/2 frame parser (`h2codec::frame::parse`) the way a connection drives
//! it: bytes arrive in pieces, and after each piece every whole frame in the buffer is
//! parsed, a stream error's frame skipped, a connection error ends it. Besides "never
//! panics", it checks:
//!
//! - a frame uses at least its 9-byte head and no more than the buffer holds, and a
//!   stream error skips no more than that (its field block inside what it skips);
//! - what the parser says about a prefix of the bytes (a frame, or an error) is what it
//!   says about all of them: where the pieces split makes no difference;
//! - a frame with a writer (DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY,
//!   WINDOW_UPDATE), written back, parses to the same frame (padding and priority
//!   fields, which no writer writes, aside); a HEADERS block written with
//!   `begin_headers`/`finish_headers` is byte for byte what `write_headers` writes.
//!
//! Input: one byte that picks the SETTINGS_MAX_FRAME_SIZE we advertised (low 2 bits) and
//! seeds the sizes of the pieces (1 to 32 bytes), then the bytes.

#![no_main]

use h2codec::frame::{self, Frame, Scope, DEFAULT_MAX_FRAME_SIZE, HEAD_LEN, MAX_FRAME_SIZE_LIMIT};
use libfuzzer_sys::fuzz_target;

const MAX_FRAME_SIZES: [u32; 4] = [
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_FRAME_SIZE + 1,
    65_535,
    MAX_FRAME_SIZE_LIMIT,
];

fuzz_target!(|data: &[u8]| {
    let Some((&config, input)) = data.split_first() else {
        return;
    };
    let max = MAX_FRAME_SIZES[usize::from(config & 3)];
    let mut piece = Pieces(u32::from(config) | 0x100);
    // The buffer is always `input[consumed..fed]`: what arrived and was not yet parsed.
    let mut consumed = 0;
    let mut fed = 0;
    loop {
        loop {
            let buf = &input[consumed..fed];
            let parsed = frame::parse(buf, max);
            match &parsed {
                Ok(None) => break,
                Ok(Some((frame, used))) => {
                    assert!(
                        *used >= HEAD_LEN && *used <= buf.len(),
                        "used {used} of {}",
                        buf.len()
                    );
                    round_trip(frame, max);
                }
                Err(e) => {
                    if let Scope::Stream {
                        skip, field_block, ..
                    } = e.scope
                    {
                        assert!(
                            skip >= HEAD_LEN && skip <= buf.len(),
                            "skip {skip} of {}",
                            buf.len()
                        );
                        if let Some(block) = field_block {
                            assert!(block.start <= block.end && block.end <= skip);
                        }
                    }
                }
            }
            // Whatever more bytes follow, the answer for these is the same.
            assert_eq!(frame::parse(&input[consumed..], max), parsed);
            consumed += match parsed {
                Ok(None) => unreachable!(),
                Ok(Some((_, used))) => used,
                Err(e) => match e.scope {
                    Scope::Stream { skip, .. } => skip,
                    Scope::Connection => return,
                },
            };
        }
        if fed == input.len() {
            return;
        }
        fed = (fed + piece.next()).min(input.len());
    }
});

/// Sizes of the pieces the bytes arrive in, 1 to 32, from a xorshift generator.
struct Pieces(u32);

impl Pieces {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        1 + (self.0 % 32) as usize
    }
}

/// Writes `frame` back with its writer, if it has one, and checks that it parses to the
/// same frame.
fn round_trip(frame: &Frame<'_>, max: u32) {
    let mut out = Vec::new();
    let expected = match *frame {
        Frame::Data {
            stream,
            end_stream,
            data,
            ..
        } => {
            frame::write_data(&mut out, stream, data, end_stream);
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len: data.len() as u32,
            }
        }
        Frame::Headers {
            stream,
            end_stream,
            block,
            ..
        } => return headers_round_trip(stream, end_stream, block),
        Frame::RstStream { stream, reason } => {
            frame::write_rst_stream(&mut out, stream, reason);
            frame.clone()
        }
        Frame::Settings { ack: true, .. } => {
            frame::write_settings_ack(&mut out);
            frame.clone()
        }
        Frame::Settings {
            ack: false,
            ref params,
        } => {
            let params: Vec<(u16, u32)> = params.clone().collect();
            // The writer keeps a frame within the 16384 bytes every peer accepts.
            if params.len() * 6 > DEFAULT_MAX_FRAME_SIZE as usize {
                return;
            }
            frame::write_settings(&mut out, &params);
            frame.clone()
        }
        Frame::Ping { ack, payload } => {
            match ack {
                true => frame::write_ping_ack(&mut out, payload),
                false => frame::write_ping(&mut out, payload),
            }
            frame.clone()
        }
        Frame::GoAway {
            last_stream,
            reason,
            debug,
        } => {
            // The writer cuts debug data to fit 16384 bytes.
            if 8 + debug.len() > DEFAULT_MAX_FRAME_SIZE as usize {
                return;
            }
            frame::write_goaway(&mut out, last_stream, reason, debug);
            frame.clone()
        }
        Frame::WindowUpdate { stream, increment } => {
            frame::write_window_update(&mut out, stream, increment);
            frame.clone()
        }
        Frame::Priority { .. }
        | Frame::PushPromise { .. }
        | Frame::Continuation { .. }
        | Frame::Unknown { .. } => return,
    };
    assert_eq!(
        frame::parse(&out, max),
        Ok(Some((expected, out.len()))),
        "{frame:?} written back"
    );
}

/// A HEADERS frame's block written back in frames of at most 16384 bytes: a HEADERS
/// frame and as many CONTINUATION frames as that takes, whose blocks join to `block`.
fn headers_round_trip(stream: u32, end_stream: bool, block: &[u8]) {
    let mut out = Vec::new();
    frame::write_headers(&mut out, stream, block, end_stream, DEFAULT_MAX_FRAME_SIZE);
    let mut in_place = Vec::new();
    let at = frame::begin_headers(&mut in_place);
    in_place.extend_from_slice(block);
    frame::finish_headers(
        &mut in_place,
        at,
        stream,
        end_stream,
        DEFAULT_MAX_FRAME_SIZE,
    );
    assert_eq!(in_place, out, "finish_headers differs from write_headers");

    let mut joined = Vec::new();
    let mut rest = &out[..];
    let mut first = true;
    loop {
        let (frame, used) = frame::parse(rest, DEFAULT_MAX_FRAME_SIZE)
            .expect("a written HEADERS frame is refused")
            .expect("a written HEADERS frame is incomplete");
        rest = &rest[used..];
        let end_headers = match frame {
            Frame::Headers {
                stream: s,
                end_stream: e,
                end_headers,
                priority: None,
                block,
            } if first && s == stream && e == end_stream => {
                joined.extend_from_slice(block);
                end_headers
            }
            Frame::Continuation {
                stream: s,
                end_headers,
                block,
            } if !first && s == stream => {
                joined.extend_from_slice(block);
                end_headers
            }
            other => panic!("{other:?} where the HEADERS block went on"),
        };
        first = false;
        if end_headers {
            break;
        }
    }
    assert!(rest.is_empty(), "bytes after END_HEADERS");
    assert_eq!(joined, block);
}
