//! Frame types (RFC 9113 section 6; the registry is section 11.2).

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
