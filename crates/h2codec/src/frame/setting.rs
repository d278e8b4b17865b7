//! SETTINGS parameter identifiers (RFC 9113 section 6.5.2 and the extensions that
//! define a value rule [`check_setting`](super::check_setting) enforces).

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
