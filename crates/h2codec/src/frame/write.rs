//! Writing frames into an output buffer (RFC 9113 section 6).
//!
//! Every writer appends to a `Vec<u8>` and allocates nothing beyond growing it. None
//! writes padding or priority fields: a server has no use for them.

use super::constants::{DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT};
use super::head::{Head, HEAD_LEN, STREAM_ID_MASK};
use super::reason::Reason;
use super::{flag, kind};

/// Appends a SETTINGS frame with `params`, `(identifier, value)` pairs, in order
/// (RFC 9113 section 6.5). At most 2730 pairs, so the frame fits the 16384 bytes every
/// peer accepts.
pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    let len = params.len() * 6;
    debug_assert!(
        len <= DEFAULT_MAX_FRAME_SIZE as usize,
        "{} settings",
        params.len()
    );
    out.reserve(HEAD_LEN + len);
    head(kind::SETTINGS, 0, 0, len).write(out);
    for &(id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a SETTINGS frame with the ACK flag, acknowledging the peer's SETTINGS
/// (RFC 9113 section 6.5.3).
pub fn write_settings_ack(out: &mut Vec<u8>) {
    head(kind::SETTINGS, flag::ACK, 0, 0).write(out);
}

/// Appends a PING frame with `payload` (RFC 9113 section 6.7), e.g. to measure the
/// round trip or check that an idle peer is alive.
pub fn write_ping(out: &mut Vec<u8>, payload: [u8; 8]) {
    head(kind::PING, 0, 0, 8).write(out);
    out.extend_from_slice(&payload);
}

/// Appends the answer to a PING: the ACK flag and the same `payload` (RFC 9113 section
/// 6.7).
pub fn write_ping_ack(out: &mut Vec<u8>, payload: [u8; 8]) {
    head(kind::PING, flag::ACK, 0, 8).write(out);
    out.extend_from_slice(&payload);
}

/// Appends a GOAWAY frame (RFC 9113 section 6.8). `debug` is cut to 16376 bytes so the
/// frame fits the 16384 bytes every peer accepts; it is only diagnostic data.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason, debug: &[u8]) {
    let debug = &debug[..debug.len().min(DEFAULT_MAX_FRAME_SIZE as usize - 8)];
    out.reserve(HEAD_LEN + 8 + debug.len());
    head(kind::GOAWAY, 0, 0, 8 + debug.len()).write(out);
    out.extend_from_slice(&(last_stream & STREAM_ID_MASK).to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends an RST_STREAM frame (RFC 9113 section 6.4). `stream` must not be 0.
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    debug_assert!(stream != 0);
    head(kind::RST_STREAM, 0, stream, 4).write(out);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// Appends a WINDOW_UPDATE frame (RFC 9113 section 6.9); `stream` 0 is the connection
/// window. `increment` must be 1..=2^31-1.
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!(increment != 0 && increment <= STREAM_ID_MASK, "{increment}");
    head(kind::WINDOW_UPDATE, 0, stream, 4).write(out);
    out.extend_from_slice(&(increment & STREAM_ID_MASK).to_be_bytes());
}

/// Appends the head of a DATA frame of `len` bytes (RFC 9113 section 6.1) and reserves
/// room for them; the caller appends exactly `len` bytes of data right after, so body
/// bytes are copied once, from wherever they are, into the output buffer.
///
/// `len` must not exceed the peer's SETTINGS_MAX_FRAME_SIZE nor the flow-control
/// windows; both are the caller's to track.
///
/// # Panics
///
/// If `len` does not fit the 24-bit length field, which would corrupt the stream.
pub fn write_data_head(out: &mut Vec<u8>, stream: u32, len: usize, end_stream: bool) {
    debug_assert!(stream != 0);
    assert!(
        len <= MAX_FRAME_SIZE_LIMIT as usize,
        "DATA frame of {len} bytes"
    );
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    out.reserve(HEAD_LEN + len);
    head(kind::DATA, flags, stream, len).write(out);
}

/// Appends a DATA frame carrying `data` (RFC 9113 section 6.1). As for
/// [`write_data_head`], `data` must fit the peer's frame size and windows.
///
/// # Panics
///
/// If `data` is longer than 2^24-1 bytes.
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    write_data_head(out, stream, data.len(), end_stream);
    out.extend_from_slice(data);
}

/// Appends a HEADERS frame carrying the field block `block` (RFC 9113 section 6.2),
/// followed by as many CONTINUATION frames (section 6.10) as it takes to keep each
/// frame within `max_frame_size`, the peer's SETTINGS_MAX_FRAME_SIZE. END_STREAM goes
/// on the HEADERS frame, END_HEADERS on the last frame.
///
/// A `max_frame_size` outside 16384..=16777215 is clamped into that range: no peer may
/// set another value ([`check_setting`](super::check_setting)).
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    debug_assert!(stream != 0);
    let max = clamp_frame_size(max_frame_size);
    let continuations = block.len().saturating_sub(1) / max;
    out.reserve(block.len() + HEAD_LEN * (1 + continuations));

    let (first, mut rest) = block.split_at(block.len().min(max));
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.is_empty() {
        flags |= flag::END_HEADERS;
    }
    head(kind::HEADERS, flags, stream, first.len()).write(out);
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (fragment, after) = rest.split_at(rest.len().min(max));
        rest = after;
        let flags = if rest.is_empty() {
            flag::END_HEADERS
        } else {
            0
        };
        head(kind::CONTINUATION, flags, stream, fragment.len()).write(out);
        out.extend_from_slice(fragment);
    }
}

/// Starts a HEADERS frame whose field block is encoded in place: reserves the 9 bytes
/// of its head at the end of `out` and returns where they are. Append the field block
/// (the HPACK encoder writes into `out`), then call [`finish_headers`] with the
/// returned offset.
pub fn begin_headers(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; HEAD_LEN]);
    at
}

/// Finishes a HEADERS frame started by [`begin_headers`] at offset `at`: everything in
/// `out` after its reserved head is the field block. Writes the head and, when the block
/// is longer than `max_frame_size` (the peer's SETTINGS_MAX_FRAME_SIZE, clamped as in
/// [`write_headers`]), splits it into HEADERS and CONTINUATION frames by moving the
/// fragments up to make room for their heads. The result is byte for byte what
/// [`write_headers`] writes.
///
/// Response heads over 16 KiB are rare, so the memmove of the split costs nothing in
/// the common case, where nothing moves at all.
///
/// # Panics
///
/// If `out` is shorter than `at` plus the reserved 9 bytes.
pub fn finish_headers(
    out: &mut Vec<u8>,
    at: usize,
    stream: u32,
    end_stream: bool,
    max_frame_size: u32,
) {
    debug_assert!(stream != 0);
    assert!(
        out.len() >= at + HEAD_LEN,
        "finish_headers at {at} past the end of a {}-byte buffer",
        out.len()
    );
    let max = clamp_frame_size(max_frame_size);
    let block_start = at + HEAD_LEN;
    let block_len = out.len() - block_start;
    let end_stream = if end_stream { flag::END_STREAM } else { 0 };
    if block_len <= max {
        let flags = end_stream | flag::END_HEADERS;
        out[at..block_start]
            .copy_from_slice(&head(kind::HEADERS, flags, stream, block_len).to_bytes());
        return;
    }

    // Fragment i (0 is the HEADERS frame's) starts at block_start + i * max and moves
    // up by i heads. Going from the last fragment down, each moves once and only over
    // bytes already moved or its own.
    let continuations = (block_len - 1) / max;
    out.resize(out.len() + continuations * HEAD_LEN, 0);
    for i in (1..=continuations).rev() {
        let from = block_start + i * max;
        let len = max.min(block_len - i * max);
        let to = from + i * HEAD_LEN;
        out.copy_within(from..from + len, to);
        let flags = if i == continuations {
            flag::END_HEADERS
        } else {
            0
        };
        out[to - HEAD_LEN..to]
            .copy_from_slice(&head(kind::CONTINUATION, flags, stream, len).to_bytes());
    }
    out[at..block_start].copy_from_slice(&head(kind::HEADERS, end_stream, stream, max).to_bytes());
}

fn head(kind: u8, flags: u8, stream: u32, len: usize) -> Head {
    Head {
        len: len as u32,
        kind,
        flags,
        stream,
    }
}

fn clamp_frame_size(max_frame_size: u32) -> usize {
    max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT) as usize
}
