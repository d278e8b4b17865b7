//! Fixed values of the protocol (RFC 9113): the client preface, and the defaults and
//! limits of frame sizes, flow-control windows and the header table.

/// The client connection preface (RFC 9113 section 3.4): these 24 bytes, then a SETTINGS
/// frame, open every HTTP/2 connection from the client side.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
