//! HPACK's primitive types (RFC 7541 section 5): prefixed integers and string literals.

use super::error::HpackError;
use super::huffman;

/// An integer above this is refused as an overflow; it is also the largest size a
/// SETTINGS value can carry.
const MAX_INTEGER: u64 = u32::MAX as u64;

/// Continuation bytes allowed after the prefix: five carry 35 bits, enough for any
/// `u32` (a table size from SETTINGS) even with a few redundant zero groups fewer.
const MAX_CONTINUATION_BYTES: usize = 5;

/// Reads an integer with an `prefix_bits`-bit prefix (section 5.1) at `*pos`, which the
/// caller has checked is inside `block`, and moves `*pos` past it.
pub(super) fn decode_integer(
    block: &[u8],
    pos: &mut usize,
    prefix_bits: u32,
) -> Result<usize, HpackError> {
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
pub(super) fn encode_integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, value: usize) {
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
pub(super) fn encode_string(out: &mut Vec<u8>, bytes: &[u8]) {
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
