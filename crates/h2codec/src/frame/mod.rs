//! Frames (RFC 9113 sections 4 and 6): the 9-byte frame head, a parser that borrows
//! frames straight out of the connection's read buffer, and writers that append frames
//! to its output buffer.
//!
//! What it is for: framing and every per-frame rule that needs nothing but the frame
//! itself (stream id 0 where forbidden, fixed lengths, padding, a stream that depends on
//! itself, a zero WINDOW_UPDATE, SETTINGS values), each reported with the error code
//! and the kind of error (connection or stream, RFC 9113 section 5.4) the RFC asks for.
//!
//! What it is not for: anything that needs connection state. Stream states, flow
//! control windows, what a SETTINGS frame changes, that CONTINUATION frames follow their
//! HEADERS without anything in between, and what a server does with a PUSH_PROMISE all
//! belong to the connection state machine that drives this module.
//!
//! How it fits: the connection reads into its buffer and calls [`parse`] until it gets
//! `Ok(None)` (read more) or an error; each frame borrows from the buffer, so nothing is
//! allocated per frame. Responses are written with [`begin_headers`], the HPACK encoder
//! appending its block, and [`finish_headers`], then [`write_data_head`] and the body
//! bytes, all into one `Vec<u8>` that goes to the socket.

mod error;
mod parse;
mod write;

#[cfg(test)]
mod tests;

pub use error::{FieldBlock, FrameError, FrameErrorKind, Scope};
pub use parse::{check_setting, parse, Frame, Priority, Settings};
pub use write::{
    begin_headers, finish_headers, write_data, write_data_head, write_goaway, write_headers,
    write_ping, write_ping_ack, write_rst_stream, write_settings, write_settings_ack,
    write_window_update,
};

use std::fmt;

/// The client connection preface (RFC 9113 section 3.4): these 24 bytes, then a SETTINGS
/// frame, open every HTTP/2 connection from the client side.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of the frame head that starts every frame (RFC 9113 section 4.1).
pub const HEAD_LEN: usize = 9;

/// Initial value of SETTINGS_MAX_FRAME_SIZE and the smallest value a peer may set
/// (RFC 9113 sections 4.2 and 6.5.2).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;

/// Largest value SETTINGS_MAX_FRAME_SIZE may take, 2^24-1: the most a 24-bit length
/// field can say (RFC 9113 section 6.5.2).
pub const MAX_FRAME_SIZE_LIMIT: u32 = (1 << 24) - 1;

/// Initial flow-control window of the connection and of every stream until
/// SETTINGS_INITIAL_WINDOW_SIZE changes it (RFC 9113 sections 6.5.2 and 6.9.2).
pub const DEFAULT_INITIAL_WINDOW_SIZE: u32 = 65_535;

/// Largest flow-control window, 2^31-1 (RFC 9113 section 6.9.1); also the largest
/// WINDOW_UPDATE increment and SETTINGS_INITIAL_WINDOW_SIZE.
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

/// Initial value of SETTINGS_HEADER_TABLE_SIZE (RFC 9113 section 6.5.2).
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4_096;

/// Stream ids are 31 bits; the top bit of the 32-bit field is reserved
/// (RFC 9113 section 4.1).
const STREAM_ID_MASK: u32 = 0x7fff_ffff;

/// Frame types (RFC 9113 section 6; the registry is section 11.2).
pub mod kind {
    /// DATA (RFC 9113 section 6.1).
    pub const DATA: u8 = 0x0;
    /// HEADERS (RFC 9113 section 6.2).
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (RFC 9113 section 6.3, deprecated but still parsed).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM (RFC 9113 section 6.4).
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS (RFC 9113 section 6.5).
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (RFC 9113 section 6.6).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING (RFC 9113 section 6.7).
    pub const PING: u8 = 0x6;
    /// GOAWAY (RFC 9113 section 6.8).
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE (RFC 9113 section 6.9).
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION (RFC 9113 section 6.10).
    pub const CONTINUATION: u8 = 0x9;

    /// The RFC's name of a frame type, or "unknown" (for error messages and logs).
    pub fn name(kind: u8) -> &'static str {
        match kind {
            DATA => "DATA",
            HEADERS => "HEADERS",
            PRIORITY => "PRIORITY",
            RST_STREAM => "RST_STREAM",
            SETTINGS => "SETTINGS",
            PUSH_PROMISE => "PUSH_PROMISE",
            PING => "PING",
            GOAWAY => "GOAWAY",
            WINDOW_UPDATE => "WINDOW_UPDATE",
            CONTINUATION => "CONTINUATION",
            _ => "unknown",
        }
    }
}

/// Frame flags (RFC 9113 section 6). A flag means something only on the frame types
/// listed; on any other type it is ignored (section 4.1).
pub mod flag {
    /// END_STREAM on DATA and HEADERS (RFC 9113 sections 6.1 and 6.2).
    pub const END_STREAM: u8 = 0x1;
    /// ACK on SETTINGS and PING (RFC 9113 sections 6.5 and 6.7).
    pub const ACK: u8 = 0x1;
    /// END_HEADERS on HEADERS, PUSH_PROMISE and CONTINUATION (RFC 9113 sections 6.2,
    /// 6.6 and 6.10).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED on DATA, HEADERS and PUSH_PROMISE (RFC 9113 sections 6.1, 6.2 and 6.6).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY on HEADERS (RFC 9113 section 6.2).
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameter identifiers (RFC 9113 section 6.5.2 and the extensions that
/// define a value rule [`check_setting`] enforces).
pub mod setting {
    /// SETTINGS_HEADER_TABLE_SIZE (RFC 9113 section 6.5.2). Default 4096.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH (RFC 9113 section 6.5.2): 0 or 1. Default 1.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 section 6.5.2). Default unlimited.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE (RFC 9113 section 6.5.2): at most 2^31-1.
    /// Default 65535.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE (RFC 9113 section 6.5.2): 16384..=16777215.
    /// Default 16384.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 section 6.5.2). Default unlimited.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 section 3): 0 or 1. Default 0.
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
    /// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218 section 2.1): 0 or 1. Default 0.
    pub const NO_RFC7540_PRIORITIES: u16 = 0x9;
}

/// An HTTP/2 error code (RFC 9113 section 7), as carried by RST_STREAM and GOAWAY.
///
/// A plain number: codes this crate does not know are kept as they are, because a peer
/// may send any value and unknown codes must not trigger special behavior (section 7).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// Not the result of an error, e.g. a graceful GOAWAY.
    pub const NO_ERROR: Reason = Reason(0x0);
    /// An unspecific protocol error.
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    /// An unexpected internal error.
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    /// The peer violated the flow-control protocol.
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    /// A SETTINGS frame was not acknowledged in time.
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    /// A frame arrived after the stream was half-closed.
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    /// A frame had an invalid size.
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    /// The stream was refused before any application processing.
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Reason = Reason(0x8);
    /// The header compression context could not be maintained.
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    /// The connection of a CONNECT request was reset or closed abnormally.
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    /// The peer behaves in a way that might be generating excessive load.
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    /// The transport does not meet minimum security requirements.
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    /// The peer must use HTTP/1.1 instead.
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);

    /// The RFC's name for a known code, `None` for any other.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => return None,
        })
    }
}

/// Shows the RFC's name (`PROTOCOL_ERROR`), or the number in hex for unknown codes.
impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "error code {:#x}", self.0),
        }
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Reason({:#x})", self.0),
        }
    }
}

/// The 9-byte head of every frame (RFC 9113 section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length, 24 bits; the head's 9 bytes are not counted.
    pub len: u32,
    /// Frame type, see [`kind`].
    pub kind: u8,
    /// Flags, see [`flag`]; undefined flags are kept here and ignored by [`parse`].
    pub flags: u8,
    /// Stream id, 31 bits; 0 is the connection.
    pub stream: u32,
}

impl Head {
    /// Reads a head. The reserved bit in front of the stream id is dropped, as receivers
    /// must ignore it (RFC 9113 section 4.1).
    pub fn parse(bytes: &[u8; HEAD_LEN]) -> Head {
        Head {
            len: u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            kind: bytes[3],
            flags: bytes[4],
            stream: be32(&bytes[5..]) & STREAM_ID_MASK,
        }
    }

    /// The head as bytes, with the reserved bit clear as senders must leave it (RFC 9113
    /// section 4.1). `len` must fit in 24 bits; only its low 24 bits are written.
    pub fn to_bytes(&self) -> [u8; HEAD_LEN] {
        debug_assert!(
            self.len <= MAX_FRAME_SIZE_LIMIT,
            "frame length {}",
            self.len
        );
        let [_, l0, l1, l2] = self.len.to_be_bytes();
        let [s0, s1, s2, s3] = (self.stream & STREAM_ID_MASK).to_be_bytes();
        [l0, l1, l2, self.kind, self.flags, s0, s1, s2, s3]
    }

    /// Appends the head to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// Whether every bit of `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag == flag
    }

    /// Checks every rule that the head alone decides, before any payload is read:
    /// the length against `max_frame_size` (the SETTINGS_MAX_FRAME_SIZE this endpoint
    /// advertised), stream id 0 where it is forbidden or required, and the lengths fixed
    /// or bounded by the frame type whose violation is a connection error. All errors it
    /// returns are connection errors; [`parse`] calls it first.
    ///
    /// Checking the length here, from 9 bytes, is what keeps a peer from making the
    /// connection buffer up to 16 MiB of a frame it is going to reject anyway.
    pub fn check(&self, max_frame_size: u32) -> Result<(), FrameError> {
        use FrameErrorKind::*;

        if self.len > max_frame_size {
            // RFC 9113 section 4.2 allows a stream error for an oversized frame that does
            // not change connection state (DATA), but then this layer would have to skip
            // bytes it has not yet received; a connection error is always allowed.
            return Err(FrameError::connection(
                TooLarge {
                    frame_type: self.kind,
                    len: self.len,
                    max: max_frame_size,
                },
                Reason::FRAME_SIZE_ERROR,
            ));
        }
        let len = self.len;
        let frame_type = self.kind;
        let bad_length = Err(FrameError::connection(
            BadLength { frame_type, len },
            Reason::FRAME_SIZE_ERROR,
        ));
        match self.kind {
            kind::DATA
            | kind::HEADERS
            | kind::PRIORITY
            | kind::RST_STREAM
            | kind::PUSH_PROMISE
            | kind::CONTINUATION
                if self.stream == 0 =>
            {
                // Sections 6.1, 6.2, 6.3, 6.4, 6.6 and 6.10.
                Err(FrameError::connection(
                    StreamZero { frame_type },
                    Reason::PROTOCOL_ERROR,
                ))
            }
            kind::SETTINGS | kind::PING | kind::GOAWAY if self.stream != 0 => {
                // Sections 6.5, 6.7 and 6.8.
                Err(FrameError::connection(
                    StreamNonZero {
                        frame_type,
                        stream: self.stream,
                    },
                    Reason::PROTOCOL_ERROR,
                ))
            }
            // The mandatory fields (Pad Length, priority fields, Promised Stream ID) must
            // fit, or the frame is "too small to contain mandatory frame data" (section
            // 4.2); a connection error because these frames carry a field block.
            kind::DATA | kind::HEADERS | kind::PUSH_PROMISE if len < self.fixed_len() => bad_length,
            // Section 6.4.
            kind::RST_STREAM if len != 4 => bad_length,
            // Section 6.5: an ACK carries nothing, other SETTINGS whole 6-byte entries.
            kind::SETTINGS if (self.has(flag::ACK) && len != 0) || len % 6 != 0 => bad_length,
            // Section 6.7.
            kind::PING if len != 8 => bad_length,
            // Section 6.8: last stream id and error code are mandatory.
            kind::GOAWAY if len < 8 => bad_length,
            // Section 6.9.
            kind::WINDOW_UPDATE if len != 4 => bad_length,
            // A PRIORITY frame of the wrong length is a stream error (section 6.3), which
            // `parse` reports once the whole frame is buffered so it can say what to skip.
            _ => Ok(()),
        }
    }

    /// Length of the fields before the data or field block of a DATA, HEADERS or
    /// PUSH_PROMISE frame: Pad Length, the priority fields, the promised stream id.
    fn fixed_len(&self) -> u32 {
        let pad_length = u32::from(self.has(flag::PADDED));
        match self.kind {
            kind::HEADERS if self.has(flag::PRIORITY) => pad_length + 5,
            kind::PUSH_PROMISE => pad_length + 4,
            _ => pad_length,
        }
    }
}

/// A big-endian u32 from the first 4 bytes of `bytes`.
fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}
