//! Tests of the frame layer: round trips, every error rule with a hand-made frame,
//! truncation, CONTINUATION splitting, and property tests over split points and
//! arbitrary bytes.

use super::*;

mod errors;
mod head;
mod props;
mod round_trip;
mod split;

/// The frame size tests use unless they say otherwise.
const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

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
