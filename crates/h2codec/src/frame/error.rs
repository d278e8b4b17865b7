//! Errors of the frame layer: which rule a frame broke, the error code to send, and
//! whether it ends the connection or only a stream (RFC 9113 section 5.4).

use super::kind;
use super::reason::Reason;
use std::fmt;

/// A frame broke a rule of RFC 9113. Says what to do about it: `scope` is the kind of
/// error the RFC asks for and `reason` the code to send with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{scope} {reason}: {kind}")]
pub struct FrameError {
    /// Which rule was broken.
    pub kind: FrameErrorKind,
    /// The error code for GOAWAY or RST_STREAM (RFC 9113 section 7).
    pub reason: Reason,
    /// Connection or stream error.
    pub scope: Scope,
}

impl FrameError {
    pub(crate) fn connection(kind: FrameErrorKind, reason: Reason) -> FrameError {
        FrameError {
            kind,
            reason,
            scope: Scope::Connection,
        }
    }

    pub(crate) fn stream(
        kind: FrameErrorKind,
        reason: Reason,
        id: u32,
        skip: usize,
        field_block: Option<FieldBlock>,
    ) -> FrameError {
        FrameError {
            kind,
            reason,
            scope: Scope::Stream {
                id,
                skip,
                field_block,
            },
        }
    }

    /// Whether the connection has to end (GOAWAY with `reason`, then close).
    pub fn is_connection_error(&self) -> bool {
        self.scope == Scope::Connection
    }
}

/// The kind of error a broken rule calls for (RFC 9113 section 5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A connection error (section 5.4.1): send GOAWAY with the reason and close. The
    /// buffer is not parsed any further, so nothing is said about where the frame ends.
    Connection,
    /// A stream error (section 5.4.2): send RST_STREAM with the reason on stream `id`,
    /// drop the `skip` bytes of the frame (always whole and in the buffer: [`parse`]
    /// reports stream errors only once the frame has fully arrived) and go on.
    ///
    /// The connection may still turn it into a connection error, e.g. when the stream
    /// is idle and an RST_STREAM on it would itself be a protocol error.
    ///
    /// [`parse`]: super::parse
    Stream {
        /// The stream the error is on.
        id: u32,
        /// Length of the whole frame, head included.
        skip: usize,
        /// Set when the frame is a HEADERS frame: its field block must still go through
        /// the HPACK decoder (and so must any CONTINUATION frames that follow, up to
        /// END_HEADERS), or the peer's and our compression state drift apart (RFC 9113
        /// section 4.3).
        field_block: Option<FieldBlock>,
    },
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Connection => f.write_str("connection error"),
            Scope::Stream { id, .. } => write!(f, "stream error on stream {id}"),
        }
    }
}

/// Where the field block of a HEADERS frame that caused a stream error lies in the
/// buffer given to [`parse`](super::parse): `buf[start..end]`, padding and priority
/// fields already removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldBlock {
    /// Offset of the block's first byte.
    pub start: usize,
    /// Offset just past the block's last byte.
    pub end: usize,
    /// Whether the frame had END_HEADERS; if not, CONTINUATION frames follow.
    pub end_headers: bool,
}

/// Which rule a frame broke. Frame types are given as numbers, see
/// [`kind`](super::kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameErrorKind {
    /// Longer than the SETTINGS_MAX_FRAME_SIZE we advertised (RFC 9113 section 4.2).
    /// Connection FRAME_SIZE_ERROR.
    #[error("{} frame of {len} bytes is over the maximum frame size {max}",
        kind::name(*.frame_type))]
    TooLarge {
        /// Frame type.
        frame_type: u8,
        /// Payload length.
        len: u32,
        /// The limit it broke.
        max: u32,
    },
    /// A frame type that belongs to a stream came on stream 0 (DATA, HEADERS, PRIORITY,
    /// RST_STREAM, PUSH_PROMISE, CONTINUATION; RFC 9113 section 6). Connection
    /// PROTOCOL_ERROR.
    #[error("{} frame on stream 0", kind::name(*.frame_type))]
    StreamZero {
        /// Frame type.
        frame_type: u8,
    },
    /// A frame type that belongs to the connection came on a stream (SETTINGS, PING,
    /// GOAWAY; RFC 9113 sections 6.5, 6.7, 6.8). Connection PROTOCOL_ERROR.
    #[error("{} frame on stream {stream}, not 0", kind::name(*.frame_type))]
    StreamNonZero {
        /// Frame type.
        frame_type: u8,
        /// The stream id it came with.
        stream: u32,
    },
    /// A length the frame type does not allow (RFC 9113 sections 4.2 and 6). Connection
    /// FRAME_SIZE_ERROR, but a stream FRAME_SIZE_ERROR for PRIORITY (section 6.3).
    #[error("{} frame with invalid length {len}", kind::name(*.frame_type))]
    BadLength {
        /// Frame type.
        frame_type: u8,
        /// Payload length.
        len: u32,
    },
    /// Padding that does not fit in the payload (RFC 9113 sections 6.1, 6.2, 6.6).
    /// Connection PROTOCOL_ERROR.
    #[error("{} frame with {pad} bytes of padding in a {len}-byte payload",
        kind::name(*.frame_type))]
    TooMuchPadding {
        /// Frame type.
        frame_type: u8,
        /// The Pad Length field.
        pad: u8,
        /// Payload length.
        len: u32,
    },
    /// A HEADERS or PRIORITY frame makes its stream depend on itself (RFC 9113 section
    /// 5.3.1). Stream PROTOCOL_ERROR.
    #[error("{} frame makes stream {stream} depend on itself", kind::name(*.frame_type))]
    SelfDependency {
        /// Frame type.
        frame_type: u8,
        /// The stream.
        stream: u32,
    },
    /// A WINDOW_UPDATE with an increment of 0 (RFC 9113 section 6.9). PROTOCOL_ERROR:
    /// a stream error on a stream, a connection error on stream 0.
    #[error("WINDOW_UPDATE with increment 0 on stream {stream}")]
    ZeroIncrement {
        /// The stream, 0 for the connection.
        stream: u32,
    },
    /// A SETTINGS value out of its range (RFC 9113 section 6.5.2). Connection
    /// PROTOCOL_ERROR, or FLOW_CONTROL_ERROR for SETTINGS_INITIAL_WINDOW_SIZE.
    #[error("invalid value {value} for setting {id:#x}")]
    BadSetting {
        /// Setting identifier.
        id: u16,
        /// The value.
        value: u32,
    },
}
