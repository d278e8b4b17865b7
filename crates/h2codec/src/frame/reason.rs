//! HTTP/2 error codes (RFC 9113 section 7), as RST_STREAM and GOAWAY carry them.

use std::fmt;

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
