//! Map keys: short byte strings stored inline, long ones on the heap.
//!
//! Tables keyed by `Box<[u8]>` pay two cache misses per lookup in a large table (the
//! bucket, then the key bytes it points to for the final compare). Client addresses and
//! most paths fit in 46 bytes, so their bytes sit in the bucket itself and a lookup costs
//! one. Hashing and equality are those of `[u8]`, so maps can be queried with plain
//! slices; the hot loops query with [`Probe`], which compares inline instead of calling
//! `memcmp`.

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

/// A slice to look a [`Key`] up with: hashes as the slice does, and compares with
/// [`eq_bytes`], because a `memcmp` call per lookup, four lookups per line, was a
/// twelfth of `logs report`'s time in profiles.
#[derive(Clone, Copy)]
pub(crate) struct Probe<'a>(pub(crate) &'a [u8]);

impl Hash for Probe<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl hashbrown::Equivalent<Key> for Probe<'_> {
    #[inline]
    fn equivalent(&self, key: &Key) -> bool {
        eq_bytes(self.0, key)
    }
}

impl From<&Probe<'_>> for Key {
    #[inline]
    fn from(probe: &Probe<'_>) -> Key {
        Key::from(probe.0)
    }
}

/// `a == b`, inline: 16 bytes at a time, the last (overlapping) 16, 8 or 4 bytes
/// compared as one integer, so short keys cost a few instructions and no call.
#[inline(always)]
pub(crate) fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    fn word<const W: usize>(s: &[u8], at: usize) -> [u8; W] {
        s[at..at + W].try_into().expect("W bytes")
    }
    match n {
        16.. => {
            let mut i = 0;
            while i + 16 < n {
                if u128::from_ne_bytes(word(a, i)) != u128::from_ne_bytes(word(b, i)) {
                    return false;
                }
                i += 16;
            }
            u128::from_ne_bytes(word(a, n - 16)) == u128::from_ne_bytes(word(b, n - 16))
        }
        8.. => {
            u64::from_ne_bytes(word(a, 0)) == u64::from_ne_bytes(word(b, 0))
                && u64::from_ne_bytes(word(a, n - 8)) == u64::from_ne_bytes(word(b, n - 8))
        }
        4.. => {
            u32::from_ne_bytes(word(a, 0)) == u32::from_ne_bytes(word(b, 0))
                && u32::from_ne_bytes(word(a, n - 4)) == u32::from_ne_bytes(word(b, n - 4))
        }
        _ => a == b,
    }
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
    fn short_and_long_keys_hash_and_compare_as_their_bytes() {
        let state = foldhash::fast::FixedState::default();
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let key = Key::from(&bytes[..]);
            assert_eq!(&*key, &bytes[..]);
            assert_eq!(state.hash_one(&key), state.hash_one(&bytes[..]));
            assert_eq!(matches!(key, Key::Inline(..)), len <= INLINE);
            assert_eq!(state.hash_one(Probe(&bytes)), state.hash_one(&key));
        }
    }

    #[test]
    fn eq_bytes_agrees_with_slice_equality() {
        // Every length up to 70 (each branch and the overlapping tails), differing at
        // every position, and unequal lengths.
        for len in 0..70usize {
            let a: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            assert!(eq_bytes(&a, &a.clone()));
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!eq_bytes(&a, &b), "len {len}, differs at {at}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!eq_bytes(&a, &longer));
        }
    }
}
