//! The field names a server writes in most responses, recognised in any case and
//! prepared at compile time: lower case, hashed, their static table index looked up.
//!
//! Why: a response head written for HTTP/1 spells its names `Content-Type`, and the
//! encoder wants `content-type`, its hash and its static index. Lower-casing, hashing and
//! probing the static names for each of a response's half-dozen fields cost more than
//! encoding them once they are in the dynamic table (issue 20's perf profile of a small
//! file over HTTP/2: a quarter of the encoder's time). Recognising one of these names is
//! a length test and two masked word compares.

use super::table::{const_hash, const_static_name, NAME_SEED};

/// A name prepared at compile time.
#[derive(Debug)]
pub(crate) struct Known {
    /// The name in lower case, as HTTP/2 sends it.
    pub(crate) lower: &'static [u8],
    /// Its hash, seeded with [`NAME_SEED`].
    pub(crate) hash: u64,
    /// The lowest static table index with this name.
    pub(crate) static_index: Option<usize>,
    /// `lower` as little-endian words at offsets 0 and `len - 8` (names of 8 bytes or
    /// more), with masks that fold case: 0x20 over each letter, so `word | mask` equals
    /// the lower-case word exactly when the name matches in any case. Shorter names keep
    /// their bytes in the low end of the first word and mask.
    first: (u64, u64),
    last: (u64, u64),
}

const fn word_at(bytes: &[u8], at: usize, len: usize) -> (u64, u64) {
    let mut word = 0u64;
    let mut mask = 0u64;
    let mut i = 0;
    while i < len {
        let b = bytes[at + i];
        word |= (b as u64) << (8 * i);
        if b.is_ascii_lowercase() {
            mask |= 0x20 << (8 * i);
        }
        i += 1;
    }
    (word, mask)
}

const fn known(lower: &'static [u8]) -> Known {
    let n = lower.len();
    let (first, last) = if n >= 8 {
        (word_at(lower, 0, 8), word_at(lower, n - 8, 8))
    } else {
        (word_at(lower, 0, n), (0, 0))
    };
    let static_index = const_static_name(lower);
    Known {
        lower,
        hash: const_hash(NAME_SEED, lower),
        static_index: if static_index == 0 {
            None
        } else {
            Some(static_index)
        },
        first,
        last,
    }
}

/// Longest name recognised (keeps the word compares within two words).
const MAX_LEN: usize = 16;

/// The names, each at most [`MAX_LEN`] bytes and of letters and `-` only.
static KNOWN: [Known; 17] = [
    known(b"age"),
    known(b"via"),
    known(b"date"),
    known(b"etag"),
    known(b"vary"),
    known(b"server"),
    known(b"expires"),
    known(b"location"),
    known(b"set-cookie"),
    known(b"content-type"),
    known(b"accept-ranges"),
    known(b"cache-control"),
    known(b"content-range"),
    known(b"last-modified"),
    known(b"content-length"),
    known(b"content-encoding"),
    known(b"content-language"),
];

fn load(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The prepared name `name` is, in any case; `None` for every other name.
#[inline]
pub(crate) fn recognize(name: &[u8]) -> Option<&'static Known> {
    let n = name.len();
    if !(3..=MAX_LEN).contains(&n) {
        return None;
    }
    let matches = |k: &Known| {
        if k.lower.len() != n {
            return false;
        }
        if n >= 8 {
            load(name, 0) | k.first.1 == k.first.0 && load(name, n - 8) | k.last.1 == k.last.0
        } else {
            let mut word = 0u64;
            for (i, &b) in name.iter().enumerate() {
                word |= u64::from(b) << (8 * i);
            }
            word | k.first.1 == k.first.0
        }
    };
    // The candidates of this length: KNOWN is sorted by length.
    let candidates = match n {
        3 => &KNOWN[0..2],
        4 => &KNOWN[2..5],
        6 => &KNOWN[5..6],
        7 => &KNOWN[6..7],
        8 => &KNOWN[7..8],
        10 => &KNOWN[8..9],
        12 => &KNOWN[9..10],
        13 => &KNOWN[10..14],
        14 => &KNOWN[14..15],
        16 => &KNOWN[15..17],
        _ => return None,
    };
    candidates.iter().find(|k| matches(k))
}

#[cfg(test)]
mod tests {
    use super::super::table::{hash, static_name};
    use super::*;

    #[test]
    fn every_known_name_is_prepared_as_the_encoder_would_at_run_time() {
        for (i, k) in KNOWN.iter().enumerate() {
            assert!(k.lower.len() <= MAX_LEN);
            assert!(k.lower.iter().all(|&b| b.is_ascii_lowercase() || b == b'-'));
            assert_eq!(k.hash, hash(NAME_SEED, k.lower), "{:?}", k.lower);
            assert_eq!(k.static_index, static_name(k.lower, k.hash));
            if i > 0 {
                assert!(
                    KNOWN[i - 1].lower.len() <= k.lower.len(),
                    "sorted by length"
                );
            }
            assert!(std::ptr::eq(recognize(k.lower).unwrap(), k));
        }
    }

    #[test]
    fn names_are_recognised_in_any_case_and_nothing_else_is() {
        let k = recognize(b"Content-Type").unwrap();
        assert_eq!(k.lower, b"content-type");
        assert_eq!(
            recognize(b"CONTENT-LENGTH").unwrap().lower,
            b"content-length"
        );
        assert_eq!(recognize(b"ETag").unwrap().lower, b"etag");
        assert_eq!(recognize(b"aGe").unwrap().lower, b"age");
        for other in [
            &b"content_type"[..],
            b"content-typ",
            b"content-typex",
            b"x-cache",
            b"",
            b"ag",
            b"dat\xe5",
            b"content-types-and-more",
            // '-' is not folded: 0x0d | 0x20 is '-', which must not match.
            b"content\rtype",
            b"Content-Encodinf",
            b"Last-Modified\0",
        ] {
            assert!(recognize(other).is_none(), "{other:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn recognition_is_case_folding_equality(name in proptest::collection::vec(proptest::num::u8::ANY, 0..20), pick in 0usize..17, flips in proptest::num::u32::ANY) {
            // A known name with some letters upper-cased is recognised as itself.
            let k = &KNOWN[pick];
            let varied: Vec<u8> = k.lower.iter().enumerate()
                .map(|(i, &b)| if flips >> (i % 32) & 1 == 1 { b.to_ascii_uppercase() } else { b })
                .collect();
            proptest::prop_assert!(std::ptr::eq(recognize(&varied).unwrap(), k));
            // A near miss (one byte changed: to CR, '_', a byte past ASCII, or by one)
            // is not.
            let mut near = k.lower.to_vec();
            let at = flips as usize % near.len();
            near[at] = [b'\r', b'_', 0xc1, near[at].wrapping_add(1), near[at] - 1][name.len() % 5];
            proptest::prop_assert!(recognize(&near).is_none(), "{:?}", near);
            // Any bytes are recognised exactly when they equal a known name ignoring
            // ASCII case.
            let expected = KNOWN.iter().find(|k| k.lower.eq_ignore_ascii_case(&name));
            proptest::prop_assert_eq!(recognize(&name).map(|k| k.lower), expected.map(|k| k.lower));
        }
    }
}
