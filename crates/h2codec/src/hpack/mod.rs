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
mod huffman;
mod index;
mod names;
mod table;

#[cfg(test)]
mod tests;

pub use decoder::{DecodeError, Decoded, Decoder};
pub use encoder::{Block, Encoder};

/// A header block that breaks RFC 7541. Each one is a connection error of type
/// COMPRESSION_ERROR (RFC 9113 section 4.3): the peer's dynamic table and ours can no
/// longer be trusted to agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HpackError {
    /// An indexed field (section 6.1) with index 0, which names no entry.
    #[error("HPACK index 0 is not a valid index")]
    IndexZero,
    /// An index beyond the static table plus the dynamic table's current entries
    /// (section 2.3.3).
    #[error("HPACK index {index} is beyond the tables (61 static + {dynamic} dynamic entries)")]
    IndexOutOfRange {
        /// The index in the block.
        index: usize,
        /// How many entries the dynamic table held at that point.
        dynamic: usize,
    },
    /// An integer (section 5.1) above `u32::MAX` or with more than five continuation
    /// bytes: no length, index or table size in a sane block needs more.
    #[error("HPACK integer overflows or has too many continuation bytes")]
    IntegerOverflow,
    /// A string literal (section 5.2) whose length runs past the end of the block.
    #[error("HPACK string of {len} bytes runs past the end of the block ({left} bytes left)")]
    StringOverrun {
        /// The length the string claims.
        len: usize,
        /// The bytes left in the block after its length.
        left: usize,
    },
    /// The block ends inside an integer or before a representation's string.
    #[error("HPACK block ends inside a field representation")]
    Truncated,
    /// A Huffman string that contains the EOS symbol (section 5.2).
    #[error("HPACK Huffman string contains the EOS symbol")]
    HuffmanEos,
    /// A Huffman string with padding longer than 7 bits (section 5.2).
    #[error("HPACK Huffman padding is longer than 7 bits")]
    HuffmanPaddingTooLong,
    /// A Huffman string whose padding is not the most significant bits of EOS, i.e. not
    /// all ones (section 5.2).
    #[error("HPACK Huffman padding is not all ones")]
    HuffmanPaddingNotOnes,
    /// A dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE we allow
    /// (section 6.3).
    #[error("HPACK dynamic table size update to {size} exceeds the allowed {max}")]
    SizeUpdateTooLarge {
        /// The size the update asks for.
        size: usize,
        /// The largest size our setting allows.
        max: usize,
    },
    /// A dynamic table size update after the first field of the block; updates may only
    /// open a block (section 4.2).
    #[error("HPACK dynamic table size update after a field")]
    SizeUpdateAfterField,
    /// The first block after we lowered SETTINGS_HEADER_TABLE_SIZE below the table's
    /// size does not open with an update to at most the new limit (section 4.2).
    #[error("HPACK block lacks the dynamic table size update to at most {max} that our settings require")]
    SizeUpdateMissing {
        /// The smallest limit set since the last block.
        max: usize,
    },
}

/// Index of the first dynamic table entry in the HPACK index space (section 2.3.3).
const DYNAMIC_BASE: usize = table::STATIC_TABLE.len() + 1;

/// An integer above this is refused as an overflow; it is also the largest size a
/// SETTINGS value can carry.
const MAX_INTEGER: u64 = u32::MAX as u64;

/// Continuation bytes allowed after the prefix: five carry 35 bits, enough for any
/// `u32` (a table size from SETTINGS) even with a few redundant zero groups fewer.
const MAX_CONTINUATION_BYTES: usize = 5;

/// Reads an integer with an `prefix_bits`-bit prefix (section 5.1) at `*pos`, which the
/// caller has checked is inside `block`, and moves `*pos` past it.
fn decode_integer(block: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<usize, HpackError> {
    let mask = u8::MAX >> (8 - prefix_bits);
    let first = block[*pos] & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(mask);
    for shift in (0..MAX_CONTINUATION_BYTES as u32).map(|i| 7 * i) {
        let byte = *block.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        value += u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            if value > MAX_INTEGER {
                return Err(HpackError::IntegerOverflow);
            }
            return usize::try_from(value).map_err(|_| HpackError::IntegerOverflow);
        }
    }
    Err(HpackError::IntegerOverflow)
}

/// Appends `value` as an integer with a `prefix_bits`-bit prefix (section 5.1), the
/// prefix byte's other bits being `flags`.
#[inline]
fn encode_integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends a string literal (section 5.2), Huffman-coded only when that is shorter.
fn encode_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let huffman_len = huffman::encoded_len(bytes);
    if huffman_len < bytes.len() {
        encode_integer(out, 0x80, 7, huffman_len);
        out.reserve(huffman_len);
        huffman::encode(bytes, out);
    } else {
        encode_integer(out, 0, 7, bytes.len());
        out.extend_from_slice(bytes);
    }
}
