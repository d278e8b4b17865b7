//! Map keys: short byte strings stored inline, long ones on the heap.
//!
//! Tables keyed by `Box<[u8]>` pay two cache misses per lookup in a large table (the
//! bucket, then the key bytes it points to for the final compare). Client addresses and
//! most paths fit in 46 bytes, so their bytes sit in the bucket itself and a lookup costs
//! one. Hashing and equality are those of `[u8]`, so maps are queried with plain slices.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

const INLINE: usize = 46;

#[derive(Clone)]
pub(crate) enum Key {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl Deref for Key {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline(len, bytes) => &bytes[..*len as usize],
            Key::Heap(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for Key {
    #[inline]
    fn from(bytes: &[u8]) -> Key {
        if bytes.len() <= INLINE {
            let mut inline = [0; INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Key::Inline(bytes.len() as u8, inline)
        } else {
            Key::Heap(bytes.into())
        }
    }
}

impl Borrow<[u8]> for Key {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        **self == **other
    }
}

impl Eq for Key {}

/// Keeps the first `n` of `rows` in the order `cmp` gives them, without sorting the rest:
/// a report lists ten of tens of thousands of clients or URLs, and sorting them all was
/// a tenth of the report's instructions on a 100,000-line log.
pub(crate) fn first_n<T>(rows: &mut Vec<T>, n: usize, cmp: impl Fn(&T, &T) -> std::cmp::Ordering) {
    if n < rows.len() {
        if n > 0 {
            rows.select_nth_unstable_by(n - 1, &cmp);
        }
        rows.truncate(n);
    }
    rows.sort_unstable_by(cmp);
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn first_n_equals_sorting_everything_and_truncating() {
        let rows: Vec<(u64, u64)> = (0..500u64).map(|i| ((i * 7919) % 37, i)).collect();
        let cmp = |a: &(u64, u64), b: &(u64, u64)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        for n in [0, 1, 2, 10, 36, 37, 499, 500, 501, 10_000] {
            let mut all = rows.clone();
            all.sort_unstable_by(cmp);
            all.truncate(n);
            let mut some = rows.clone();
            first_n(&mut some, n, cmp);
            assert_eq!(some, all, "n = {n}");
        }
    }

    #[test]
    fn short_and_long_keys_hash_and_compare_as_their_bytes() {
        let state = foldhash::fast::FixedState::default();
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let key = Key::from(&bytes[..]);
            assert_eq!(&*key, &bytes[..]);
            assert_eq!(state.hash_one(&key), state.hash_one(&bytes[..]));
            assert_eq!(matches!(key, Key::Inline(..)), len <= INLINE);
        }
    }
}
