//! Parsing frames out of a read buffer (RFC 9113 sections 4 and 6).

use super::constants::{DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT, MAX_WINDOW_SIZE};
use super::error::{FieldBlock, FrameError, FrameErrorKind};
use super::head::{be32, Head, HEAD_LEN, STREAM_ID_MASK};
use super::reason::Reason;
use super::{flag, kind, setting};
use std::fmt;

/// One frame, borrowing its payload from the buffer it was parsed from.
///
/// Padding is removed and undefined flags are dropped. Rules that need connection state
/// (stream states, flow control, CONTINUATION sequencing) are the caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA (RFC 9113 section 6.1).
    Data {
        /// Stream id, never 0.
        stream: u32,
        /// END_STREAM flag.
        end_stream: bool,
        /// The data, padding removed.
        data: &'a [u8],
        /// The whole payload length, Pad Length field and padding included: what the
        /// frame counts against flow control (section 6.9).
        flow_len: u32,
    },
    /// HEADERS (RFC 9113 section 6.2).
    Headers {
        /// Stream id, never 0.
        stream: u32,
        /// END_STREAM flag.
        end_stream: bool,
        /// END_HEADERS flag; if clear, CONTINUATION frames follow.
        end_headers: bool,
        /// The priority fields, present with the PRIORITY flag. Never a dependency on
        /// the stream itself: that is a stream error.
        priority: Option<Priority>,
        /// The field block fragment, padding and priority fields removed.
        block: &'a [u8],
    },
    /// PRIORITY (RFC 9113 section 6.3; deprecated, parsed so it can be ignored).
    Priority {
        /// Stream id, never 0.
        stream: u32,
        /// The priority fields, never a dependency on `stream` itself.
        priority: Priority,
    },
    /// RST_STREAM (RFC 9113 section 6.4).
    RstStream {
        /// Stream id, never 0.
        stream: u32,
        /// Error code, any value.
        reason: Reason,
    },
    /// SETTINGS (RFC 9113 section 6.5).
    Settings {
        /// ACK flag; an ACK has no parameters.
        ack: bool,
        /// The parameters, each value already checked by [`check_setting`].
        params: Settings<'a>,
    },
    /// PUSH_PROMISE (RFC 9113 section 6.6). Clients must not send it, so a server treats
    /// it as a connection PROTOCOL_ERROR (section 8.4); that is the caller's decision.
    PushPromise {
        /// Stream id, never 0.
        stream: u32,
        /// The promised stream id, reserved bit dropped.
        promised: u32,
        /// END_HEADERS flag; if clear, CONTINUATION frames follow.
        end_headers: bool,
        /// The field block fragment, padding removed.
        block: &'a [u8],
    },
    /// PING (RFC 9113 section 6.7).
    Ping {
        /// ACK flag.
        ack: bool,
        /// The opaque data to echo back.
        payload: [u8; 8],
    },
    /// GOAWAY (RFC 9113 section 6.8).
    GoAway {
        /// Last stream id, reserved bit dropped.
        last_stream: u32,
        /// Error code, any value.
        reason: Reason,
        /// Additional debug data, opaque.
        debug: &'a [u8],
    },
    /// WINDOW_UPDATE (RFC 9113 section 6.9).
    WindowUpdate {
        /// Stream id; 0 is the connection window.
        stream: u32,
        /// 1..=2^31-1, reserved bit dropped. Whether it overflows the window is the
        /// caller's to check.
        increment: u32,
    },
    /// CONTINUATION (RFC 9113 section 6.10).
    Continuation {
        /// Stream id, never 0.
        stream: u32,
        /// END_HEADERS flag.
        end_headers: bool,
        /// The field block fragment.
        block: &'a [u8],
    },
    /// A frame type this crate does not know; its payload has been skipped. The caller
    /// must ignore it (RFC 9113 section 5.5), except in the middle of a field block,
    /// where any frame but CONTINUATION is a connection error (section 6.10).
    Unknown {
        /// Frame type.
        kind: u8,
        /// Stream id.
        stream: u32,
    },
}

/// The priority fields of HEADERS and PRIORITY frames (RFC 9113 sections 5.3 and 6.3,
/// deprecated by RFC 9113 but still on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The stream this one depends on, reserved bit dropped.
    pub dependency: u32,
    /// The E flag: the dependency is exclusive.
    pub exclusive: bool,
    /// Weight as on the wire, 0..=255; the weight it means is one more.
    pub weight: u8,
}

impl Priority {
    fn parse(bytes: &[u8]) -> Priority {
        let word = be32(bytes);
        Priority {
            dependency: word & STREAM_ID_MASK,
            exclusive: word & !STREAM_ID_MASK != 0,
            weight: bytes[4],
        }
    }
}

/// The parameters of a SETTINGS frame (RFC 9113 section 6.5.1): an iterator of
/// `(identifier, value)` pairs in the order sent.
///
/// Identifiers this crate does not know are passed through for the caller to ignore
/// (section 6.5.2). Values of known identifiers have passed [`check_setting`].
#[derive(Clone, PartialEq, Eq)]
pub struct Settings<'a> {
    bytes: &'a [u8],
}

impl<'a> Settings<'a> {
    /// `bytes` must be whole 6-byte entries; a partial entry at the end is not yielded.
    pub(crate) fn new(bytes: &'a [u8]) -> Settings<'a> {
        Settings { bytes }
    }

    /// The parameters as on the wire, 6 bytes each.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl Iterator for Settings<'_> {
    type Item = (u16, u32);

    fn next(&mut self) -> Option<(u16, u32)> {
        let (entry, rest) = self.bytes.split_first_chunk::<6>()?;
        self.bytes = rest;
        Some((u16::from_be_bytes([entry[0], entry[1]]), be32(&entry[2..])))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = self.bytes.len() / 6;
        (len, Some(len))
    }
}

impl ExactSizeIterator for Settings<'_> {}

impl fmt::Debug for Settings<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

/// Parses the frame at the start of `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold the whole frame (read more and call
/// again), otherwise the frame and how many bytes of `buf` it used, head included.
///
/// `max_frame_size` is the SETTINGS_MAX_FRAME_SIZE this endpoint advertised (16384
/// until the peer has acknowledged a larger one). A longer frame is a connection
/// FRAME_SIZE_ERROR, reported as soon as its 9-byte head is in `buf`: the payload is
/// never waited for, so a peer cannot make the connection buffer more than
/// `max_frame_size` bytes of one frame.
///
/// Errors (RFC 9113 sections 4.2, 5.4 and 6), see [`FrameErrorKind`] for the full list:
/// connection errors come as soon as the bytes that show them are in `buf` (so the
/// head's, from the head alone); stream errors only once the whole frame is, so the
/// caller can skip it. Either way the error for a given frame does not depend on how
/// much of it has arrived, only on its bytes.
pub fn parse(buf: &[u8], max_frame_size: u32) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(head) = buf.first_chunk::<HEAD_LEN>() else {
        return Ok(None);
    };
    let head = Head::parse(head);
    head.check(max_frame_size)?;
    let end = HEAD_LEN + head.len as usize;
    let Some(payload) = buf.get(HEAD_LEN..end) else {
        return Ok(None);
    };
    let frame = parse_payload(head, payload)?;
    Ok(Some((frame, end)))
}

/// The frame in `payload`, whose head has passed [`Head::check`].
fn parse_payload(head: Head, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
    let stream = head.stream;
    Ok(match head.kind {
        kind::DATA => Frame::Data {
            stream,
            end_stream: head.has(flag::END_STREAM),
            data: unpad(&head, payload)?,
            flow_len: head.len,
        },
        kind::HEADERS => {
            let body = unpad(&head, payload)?;
            let (priority, block) = if head.has(flag::PRIORITY) {
                let priority = Priority::parse(body);
                if priority.dependency == stream {
                    let start = HEAD_LEN + usize::from(head.has(flag::PADDED)) + 5;
                    let field_block = FieldBlock {
                        start,
                        end: start + body.len() - 5,
                        end_headers: head.has(flag::END_HEADERS),
                    };
                    return Err(self_dependency(&head, Some(field_block)));
                }
                (Some(priority), &body[5..])
            } else {
                (None, body)
            };
            Frame::Headers {
                stream,
                end_stream: head.has(flag::END_STREAM),
                end_headers: head.has(flag::END_HEADERS),
                priority,
                block,
            }
        }
        kind::PRIORITY => {
            if payload.len() != 5 {
                return Err(FrameError::stream(
                    FrameErrorKind::BadLength {
                        frame_type: head.kind,
                        len: head.len,
                    },
                    Reason::FRAME_SIZE_ERROR,
                    stream,
                    HEAD_LEN + payload.len(),
                    None,
                ));
            }
            let priority = Priority::parse(payload);
            if priority.dependency == stream {
                return Err(self_dependency(&head, None));
            }
            Frame::Priority { stream, priority }
        }
        kind::RST_STREAM => Frame::RstStream {
            stream,
            reason: Reason(be32(payload)),
        },
        kind::SETTINGS => {
            let params = Settings::new(payload);
            for (id, value) in params.clone() {
                check_setting(id, value)?;
            }
            Frame::Settings {
                ack: head.has(flag::ACK),
                params,
            }
        }
        kind::PUSH_PROMISE => {
            let body = unpad(&head, payload)?;
            Frame::PushPromise {
                stream,
                promised: be32(body) & STREAM_ID_MASK,
                end_headers: head.has(flag::END_HEADERS),
                block: &body[4..],
            }
        }
        kind::PING => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(payload);
            Frame::Ping {
                ack: head.has(flag::ACK),
                payload: bytes,
            }
        }
        kind::GOAWAY => Frame::GoAway {
            last_stream: be32(payload) & STREAM_ID_MASK,
            reason: Reason(be32(&payload[4..])),
            debug: &payload[8..],
        },
        kind::WINDOW_UPDATE => {
            // The top bit is reserved (section 6.9): an increment of 0x8000_0000 is 0.
            let increment = be32(payload) & STREAM_ID_MASK;
            if increment == 0 {
                let error = FrameErrorKind::ZeroIncrement { stream };
                return Err(if stream == 0 {
                    FrameError::connection(error, Reason::PROTOCOL_ERROR)
                } else {
                    let skip = HEAD_LEN + payload.len();
                    FrameError::stream(error, Reason::PROTOCOL_ERROR, stream, skip, None)
                });
            }
            Frame::WindowUpdate { stream, increment }
        }
        kind::CONTINUATION => Frame::Continuation {
            stream,
            end_headers: head.has(flag::END_HEADERS),
            block: payload,
        },
        other => Frame::Unknown {
            kind: other,
            stream,
        },
    })
}

/// The payload of a DATA, HEADERS or PUSH_PROMISE frame without the Pad Length field
/// and the padding. [`Head::check`] has made sure the fixed fields fit.
///
/// The padding must fit in what is left after the fixed fields (Pad Length, and the
/// priority fields or promised stream id): "padding that is the length of the payload
/// or greater" is a connection PROTOCOL_ERROR (RFC 9113 sections 6.1, 6.2, 6.6), and
/// padding that overlaps the fixed fields is treated the same way, as nghttp2 does.
fn unpad<'a>(head: &Head, payload: &'a [u8]) -> Result<&'a [u8], FrameError> {
    if !head.has(flag::PADDED) {
        return Ok(payload);
    }
    let pad = payload[0];
    let body = &payload[1..];
    let fixed = head.fixed_len() as usize - 1;
    match body.len().checked_sub(fixed + usize::from(pad)) {
        Some(len) => Ok(&body[..fixed + len]),
        None => Err(FrameError::connection(
            FrameErrorKind::TooMuchPadding {
                frame_type: head.kind,
                pad,
                len: head.len,
            },
            Reason::PROTOCOL_ERROR,
        )),
    }
}

fn self_dependency(head: &Head, field_block: Option<FieldBlock>) -> FrameError {
    FrameError::stream(
        FrameErrorKind::SelfDependency {
            frame_type: head.kind,
            stream: head.stream,
        },
        Reason::PROTOCOL_ERROR,
        head.stream,
        HEAD_LEN + head.len as usize,
        field_block,
    )
}

/// Checks a SETTINGS value against its identifier's range (RFC 9113 section 6.5.2).
/// [`parse`] already does this for every parameter of every SETTINGS frame; it is
/// public for values from elsewhere (the HTTP2-Settings header of an h2c upgrade).
///
/// Every failure is a connection error:
/// - SETTINGS_ENABLE_PUSH other than 0 or 1: PROTOCOL_ERROR;
/// - SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1: FLOW_CONTROL_ERROR;
/// - SETTINGS_MAX_FRAME_SIZE outside 16384..=16777215: PROTOCOL_ERROR;
/// - SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 section 3) and
///   SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218 section 2.1) other than 0 or 1:
///   PROTOCOL_ERROR.
///
/// Other identifiers, known or not, take any value.
pub fn check_setting(id: u16, value: u32) -> Result<(), FrameError> {
    let reason = match id {
        setting::ENABLE_PUSH
        | setting::ENABLE_CONNECT_PROTOCOL
        | setting::NO_RFC7540_PRIORITIES
            if value > 1 =>
        {
            Reason::PROTOCOL_ERROR
        }
        setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW_SIZE => Reason::FLOW_CONTROL_ERROR,
        setting::MAX_FRAME_SIZE
            if !(DEFAULT_MAX_FRAME_SIZE..=MAX_FRAME_SIZE_LIMIT).contains(&value) =>
        {
            Reason::PROTOCOL_ERROR
        }
        _ => return Ok(()),
    };
    Err(FrameError::connection(
        FrameErrorKind::BadSetting { id, value },
        reason,
    ))
}
