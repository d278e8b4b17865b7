//! The 9-byte frame head (RFC 9113 section 4.1) and the checks it alone decides.

use super::constants::MAX_FRAME_SIZE_LIMIT;
use super::error::{FrameError, FrameErrorKind};
use super::reason::Reason;
use super::{flag, kind};

/// Length of the frame head that starts every frame (RFC 9113 section 4.1).
pub const HEAD_LEN: usize = 9;

/// Stream ids are 31 bits; the top bit of the 32-bit field is reserved
/// (RFC 9113 section 4.1).
pub(super) const STREAM_ID_MASK: u32 = 0x7fff_ffff;

/// The 9-byte head of every frame (RFC 9113 section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length, 24 bits; the head's 9 bytes are not counted.
    pub len: u32,
    /// Frame type, see [`kind`].
    pub kind: u8,
    /// Flags, see [`flag`]; undefined flags are kept here and ignored by [`parse`](super::parse).
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
    /// returns are connection errors; [`parse`](super::parse) calls it first.
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
    pub(super) fn fixed_len(&self) -> u32 {
        let pad_length = u32::from(self.has(flag::PADDED));
        match self.kind {
            kind::HEADERS if self.has(flag::PRIORITY) => pad_length + 5,
            kind::PUSH_PROMISE => pad_length + 4,
            _ => pad_length,
        }
    }
}

/// A big-endian u32 from the first 4 bytes of `bytes`.
pub(super) fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}
