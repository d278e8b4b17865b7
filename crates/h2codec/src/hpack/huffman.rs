//! The HPACK Huffman code (RFC 7541 section 5.2 and Appendix B): length, encoding and a
//! strict decoder.
//!
//! The code is canonical (codes of one length are consecutive and ordered by symbol, and
//! each length's first code follows the previous length's last), which a compile-time check
//! below proves from the data. That lets the decoder work on a 64-bit bit buffer: a
//! 1024-entry table answers every code of up to 10 bits (all the letters, digits and
//! common punctuation of header values) with one load, and the longer codes are found by
//! comparing the next 32 bits with one left-aligned limit per length. Both tables are
//! built by `const fn` at compile time; decoding allocates nothing beyond the output's
//! reservation.

use super::error::HpackError;

// The code table below is RFC 7541 Appendix B, copied as data from the `h2` crate
// (h2-0.4.20, src/hpack/huffman/table.rs, `ENCODE_CODES` and `ENCODE_CODE_LENGTHS`,
// MIT licence, Copyright (c) 2017 h2 authors), with the EOS symbol (256) appended.

/// The code of each symbol, right-aligned; index 256 is EOS.
const CODES: [u32; 257] = [
    0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6, 0xfffffe7, 0xfffffe8,
    0xffffea, 0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb, 0xfffffec, 0xfffffed,
    0xfffffee, 0xfffffef, 0xffffff0, 0xffffff1, 0xffffff2, 0x3ffffffe, 0xffffff3, 0xffffff4,
    0xffffff5, 0xffffff6, 0xffffff7, 0xffffff8, 0xffffff9, 0xffffffa, 0xffffffb, 0x14, 0x3f8,
    0x3f9, 0xffa, 0x1ff9, 0x15, 0xf8, 0x7fa, 0x3fa, 0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18,
    0x0, 0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x5c, 0xfb, 0x7ffc, 0x20, 0xffb,
    0x3fc, 0x1ffa, 0x21, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0xfc, 0x73, 0xfd, 0x1ffb, 0x7fff0,
    0x1ffc, 0x3ffc, 0x22, 0x7ffd, 0x3, 0x23, 0x4, 0x24, 0x5, 0x25, 0x26, 0x27, 0x6, 0x74, 0x75,
    0x28, 0x29, 0x2a, 0x7, 0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7ffe,
    0x7fc, 0x3ffd, 0x1ffd, 0xffffffc, 0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8, 0x3fffd3, 0x3fffd4,
    0x3fffd5, 0x7fffd9, 0x3fffd6, 0x7fffda, 0x7fffdb, 0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb,
    0x7fffdf, 0xffffec, 0xffffed, 0x3fffd7, 0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3,
    0x7fffe4, 0x1fffdc, 0x3fffd8, 0x7fffe5, 0x3fffd9, 0x7fffe6, 0x7fffe7, 0xffffef, 0x3fffda,
    0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc, 0x7fffe8, 0x7fffe9, 0x1fffde, 0x7fffea, 0x3fffdd,
    0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb, 0x7fffec, 0x1fffe0, 0x1fffe1, 0x3fffe0,
    0x1fffe2, 0x7fffed, 0x3fffe1, 0x7fffee, 0x7fffef, 0xfffea, 0x3fffe2, 0x3fffe3, 0x3fffe4,
    0x7ffff0, 0x3fffe5, 0x3fffe6, 0x7ffff1, 0x3ffffe0, 0x3ffffe1, 0xfffeb, 0x7fff1, 0x3fffe7,
    0x7ffff2, 0x3fffe8, 0x1ffffec, 0x3ffffe2, 0x3ffffe3, 0x3ffffe4, 0x7ffffde, 0x7ffffdf,
    0x3ffffe5, 0xfffff1, 0x1ffffed, 0x7fff2, 0x1fffe3, 0x3ffffe6, 0x7ffffe0, 0x7ffffe1, 0x3ffffe7,
    0x7ffffe2, 0xfffff2, 0x1fffe4, 0x1fffe5, 0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4,
    0x7ffffe5, 0xfffec, 0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3,
    0x3fffea, 0x3fffeb, 0x1ffffee, 0x1ffffef, 0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4, 0x3ffffeb,
    0x7ffffe6, 0x3ffffec, 0x3ffffed, 0x7ffffe7, 0x7ffffe8, 0x7ffffe9, 0x7ffffea, 0x7ffffeb,
    0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee, 0x7ffffef, 0x7fffff0, 0x3ffffee, 0x3fffffff,
];

/// The length in bits of each symbol's code; index 256 is EOS.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The EOS symbol, which a decoder must refuse inside a string.
const EOS: u16 = 256;

/// The longest code in bits (EOS and a few control bytes).
const MAX_CODE_BITS: u32 = 30;

/// Codes up to this length are decoded with one load from [`SHORT`].
const PEEK_BITS: u32 = 10;

/// The canonical layout of the code, per code length `len` in 1..=30.
struct Canonical {
    /// The first (smallest) code of length `len`.
    first: [u32; 31],
    /// How many symbols have codes shorter than `len`: where they start in `sorted`.
    offset: [u16; 31],
    /// One past the largest code of length at most `len`, left-aligned in 32 bits. The
    /// code is complete, so `limit[30]` is 2^32.
    limit: [u64; 31],
    /// The symbols ordered by (code length, symbol).
    sorted: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut count = [0u32; 31];
    let mut symbol = 0;
    while symbol < 257 {
        count[LENGTHS[symbol] as usize] += 1;
        symbol += 1;
    }
    let mut layout = Canonical {
        first: [0; 31],
        offset: [0; 31],
        limit: [0; 31],
        sorted: [0; 257],
    };
    let mut code = 0u32;
    let mut before = 0u16;
    let mut len = 1;
    while len <= MAX_CODE_BITS as usize {
        code = (code + count[len - 1]) << 1;
        layout.first[len] = code;
        layout.offset[len] = before;
        layout.limit[len] = ((code + count[len]) as u64) << (32 - len);
        // The symbols of this length, in order, and a check that the RFC's codes are
        // exactly the canonical ones this layout decodes.
        let mut next = code;
        let mut symbol = 0;
        while symbol < 257 {
            if LENGTHS[symbol] as usize == len {
                assert!(
                    CODES[symbol] == next,
                    "the HPACK Huffman code is not canonical"
                );
                layout.sorted[before as usize] = symbol as u16;
                before += 1;
                next += 1;
            }
            symbol += 1;
        }
        len += 1;
    }
    assert!(
        layout.limit[30] == 1 << 32,
        "the HPACK Huffman code is not complete"
    );
    layout
}

const CANONICAL: Canonical = canonical();

/// For every `PEEK_BITS`-bit prefix: `(length << 8) | symbol` of the code it starts with
/// when that code is at most `PEEK_BITS` long, else 0.
const SHORT: [u16; 1 << PEEK_BITS] = short_table();

const fn short_table() -> [u16; 1 << PEEK_BITS] {
    let mut table = [0u16; 1 << PEEK_BITS];
    let mut symbol = 0;
    while symbol < 256 {
        let len = LENGTHS[symbol] as u32;
        if len <= PEEK_BITS {
            let start = (CODES[symbol] << (PEEK_BITS - len)) as usize;
            let mut i = 0;
            while i < 1 << (PEEK_BITS - len) {
                table[start + i] = ((len as u16) << 8) | symbol as u16;
                i += 1;
            }
        }
        symbol += 1;
    }
    table
}

/// The most bytes `len` bytes of Huffman code can decode to (the shortest code is 5 bits).
pub(crate) fn max_decoded_len(len: usize) -> usize {
    len / 5 * 8 + (len % 5) * 8 / 5
}

/// Decodes `src` and appends the bytes to `out`. Refuses EOS, padding longer than 7
/// bits and padding that is not all ones (RFC 7541 section 5.2). Reserves exactly
/// [`max_decoded_len`] bytes up front (a no-op once `out` is large enough) and allocates
/// nothing else.
pub(crate) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    // Room for the longest result, written by index and cut to length at the end:
    // cheaper per symbol than `push`.
    let start = out.len();
    out.reserve_exact(max_decoded_len(src.len()));
    out.resize(start + max_decoded_len(src.len()), 0);
    let result = decode_into(src, &mut out[start..]);
    let written = *result.as_ref().unwrap_or(&0);
    out.truncate(start + written);
    result.map(|_| ())
}

/// Decodes `src` into `dst`, which has room for [`max_decoded_len`] bytes; returns how
/// many it wrote.
fn decode_into(src: &[u8], dst: &mut [u8]) -> Result<usize, HpackError> {
    // The next bits, most significant first; below the `bits` valid ones are either
    // zeros or the true bits that follow (left there by a word refill), never garbage.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut pos = 0;
    let mut written = 0;
    loop {
        if bits < MAX_CODE_BITS {
            if let Some(word) = src.get(pos..pos + 8) {
                let word = u64::from_be_bytes(word.try_into().expect("8 bytes"));
                acc |= word >> bits;
                let whole = (63 - bits) / 8;
                pos += whole as usize;
                bits += whole * 8;
            } else {
                while bits <= 56 && pos < src.len() {
                    acc |= u64::from(src[pos]) << (56 - bits);
                    bits += 8;
                    pos += 1;
                }
            }
        }
        let short = SHORT[(acc >> (64 - PEEK_BITS)) as usize];
        let (symbol, len) = if short != 0 {
            (short & 0xff, u32::from(short >> 8))
        } else {
            // EOS is 30 bits long: only this path can meet it.
            let (symbol, len) = long_code(acc);
            if symbol == EOS && len <= bits {
                return Err(HpackError::HuffmanEos);
            }
            (symbol, len)
        };
        if len > bits {
            // Only possible at the end of `src`: what is left is padding or an error.
            break;
        }
        dst[written] = symbol as u8;
        written += 1;
        acc <<= len;
        bits -= len;
    }
    if bits > 7 {
        return Err(HpackError::HuffmanPaddingTooLong);
    }
    if bits > 0 && acc >> (64 - bits) != (1 << bits) - 1 {
        return Err(HpackError::HuffmanPaddingNotOnes);
    }
    Ok(written)
}

/// The symbol and length of a code longer than `PEEK_BITS` at the top of `acc`.
#[inline(never)]
fn long_code(acc: u64) -> (u16, u32) {
    let next = acc >> 32;
    let mut len = PEEK_BITS as usize + 1;
    while next >= CANONICAL.limit[len] {
        len += 1;
    }
    let code = (next >> (32 - len)) as u32;
    let rank = (code - CANONICAL.first[len]) as usize;
    (
        CANONICAL.sorted[usize::from(CANONICAL.offset[len]) + rank],
        len as u32,
    )
}

/// The length in bytes of `src` Huffman-coded, padding included.
pub(crate) fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(LENGTHS[usize::from(b)]))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded, padded with the most significant bits of EOS (ones).
pub(crate) fn encode(src: &[u8], out: &mut Vec<u8>) {
    // The low `bits` bits of `acc` are pending output; fewer than 32 between symbols.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &byte in src {
        let len = u32::from(LENGTHS[usize::from(byte)]);
        acc = (acc << len) | u64::from(CODES[usize::from(byte)]);
        bits += len;
        if bits >= 32 {
            bits -= 32;
            out.extend_from_slice(&((acc >> bits) as u32).to_be_bytes());
        }
    }
    if bits % 8 != 0 {
        let pad = 8 - bits % 8;
        acc = (acc << pad) | ((1 << pad) - 1);
        bits += pad;
    }
    while bits >= 8 {
        bits -= 8;
        out.push((acc >> bits) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(src: &[u8]) -> Result<Vec<u8>, HpackError> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    fn encoded(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(src, &mut out);
        assert_eq!(out.len(), encoded_len(src));
        out
    }

    #[test]
    fn every_symbol_round_trips_alone_and_in_context() {
        for byte in 0..=255u8 {
            for src in [
                vec![byte],
                vec![byte; 9],
                vec![b'a', byte, b'0', byte, byte],
            ] {
                let code = encoded(&src);
                assert_eq!(decoded(&code).unwrap(), src, "byte {byte:#04x}");
            }
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decoded(&encoded(&all)).unwrap(), all);
        let mut reversed = all.clone();
        reversed.reverse();
        assert_eq!(decoded(&encoded(&reversed)).unwrap(), reversed);
    }

    #[test]
    fn matches_the_rfc_examples() {
        // RFC 7541 C.4.1 and C.6.1.
        let code = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(encoded(b"www.example.com"), code);
        assert_eq!(decoded(&code).unwrap(), b"www.example.com");
        let code = [0x64, 0x0e, 0xff];
        assert_eq!(encoded(b"307"), code);
        assert_eq!(decoded(&code).unwrap(), b"307");
        assert_eq!(encoded(b""), b"");
        assert_eq!(decoded(b"").unwrap(), b"");
    }

    #[test]
    fn max_decoded_len_is_the_all_zeros_expansion() {
        for len in 0..100 {
            let src = vec![b'0'; len];
            let code = encoded(&src);
            assert!(max_decoded_len(code.len()) >= len);
            assert!(max_decoded_len(code.len()) < len + 2);
        }
    }

    #[test]
    fn refuses_eos() {
        // EOS alone: 30 ones, then 2 bits of padding.
        assert_eq!(
            decoded(&[0xff, 0xff, 0xff, 0xff]),
            Err(HpackError::HuffmanEos)
        );
        // 'a' (00011) then EOS then padding: 5 + 30 + 5 bits.
        let bits: u64 = (0b00011 << 35) | (0x3fff_ffff << 5) | 0b11111;
        assert_eq!(
            decoded(&bits.to_be_bytes()[3..]),
            Err(HpackError::HuffmanEos)
        );
    }

    #[test]
    fn refuses_padding_longer_than_seven_bits() {
        // "a" is 5 bits; a whole extra byte of ones is 11 bits of padding.
        assert_eq!(
            decoded(&[0x1f, 0xff]),
            Err(HpackError::HuffmanPaddingTooLong)
        );
        // Eight ones alone.
        assert_eq!(decoded(&[0xff]), Err(HpackError::HuffmanPaddingTooLong));
        // 24 ones: the start of EOS, but a full three bytes of it.
        assert_eq!(
            decoded(&[0xff, 0xff, 0xff]),
            Err(HpackError::HuffmanPaddingTooLong)
        );
    }

    #[test]
    fn refuses_padding_that_is_not_all_ones() {
        // "a" (00011) then 110.
        assert_eq!(decoded(&[0x1e]), Err(HpackError::HuffmanPaddingNotOnes));
        // '0' (00000) then 000: seven zero bits decode '0' and leave two zero bits.
        assert_eq!(decoded(&[0x00]), Err(HpackError::HuffmanPaddingNotOnes));
        // "307" correctly padded is 64 0e ff; a zero in the padding is refused.
        assert_eq!(
            decoded(&[0x64, 0x0e, 0xfd]),
            Err(HpackError::HuffmanPaddingNotOnes)
        );
    }
}
