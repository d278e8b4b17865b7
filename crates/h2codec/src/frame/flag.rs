//! Frame flags (RFC 9113 section 6). A flag means something only on the frame types
//! listed; on any other type it is ignored (section 4.1).

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
