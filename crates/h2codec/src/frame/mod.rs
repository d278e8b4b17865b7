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

mod constants;
mod error;
pub mod flag;
mod head;
pub mod kind;
mod parse;
mod reason;
pub mod setting;
mod write;

#[cfg(test)]
mod tests;

pub use constants::{
    DEFAULT_HEADER_TABLE_SIZE, DEFAULT_INITIAL_WINDOW_SIZE, DEFAULT_MAX_FRAME_SIZE,
    MAX_FRAME_SIZE_LIMIT, MAX_WINDOW_SIZE, PREFACE,
};
pub use error::{FieldBlock, FrameError, FrameErrorKind, Scope};
pub use head::{Head, HEAD_LEN};
pub use parse::{check_setting, parse, Frame, Priority, Settings};
pub use reason::Reason;
pub use write::{
    begin_headers, finish_headers, write_data, write_data_head, write_goaway, write_headers,
    write_ping, write_ping_ack, write_rst_stream, write_settings, write_settings_ack,
    write_window_update,
};
