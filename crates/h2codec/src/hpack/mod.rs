//! HPACK, HTTP/2 header compression (RFC 7541): a [`Decoder`] for request header blocks
//! and an [`Encoder`] for response header blocks.
//!
//! What it is for: turning one complete header block (HEADERS plus its CONTINUATIONs,
//! already joined by the frame layer) into borrowed `(name, value)` pairs, and turning a
//! response head into a block, without allocating per field. What it is not for: header
//! validation (pseudo-header order, forbidden connection headers, case) belongs to the
//! caller, which sees every field through the decoder's callback; framing, splitting a
//! block into frames and SETTINGS handling belong to the connection, which calls
//! [`Decoder::set_max_table_size`] and [`Encoder::set_max_table_size`] when a
//! SETTINGS_HEADER_TABLE_SIZE takes effect.
//!
//! How it fits: one decoder and one encoder per connection, each owning its dynamic
//! table (section 2.3.2), whose memory is bounded by the table size its side allows (see
//! [`Decoder`] and [`Encoder`] for the exact bounds). Every [`HpackError`] is a connection
//! error of type COMPRESSION_ERROR (RFC 9113 section 4.3): after one, the decoder's
//! table no longer matches the peer's and the connection must end with GOAWAY.

mod decoder;
mod encoder;
mod error;
mod huffman;
mod index;
mod names;
mod primitive;
mod table;

#[cfg(test)]
mod tests;

pub use decoder::{DecodeError, Decoded, Decoder};
pub use encoder::{Block, Encoder};
pub use error::HpackError;
