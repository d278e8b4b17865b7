//! Copies of short-lived bytes (a request's target and field values, its authority and
//! cache key) that must outlive the buffer they were read into, without an allocation
//! per copy. (An upstream response's fields are copied into a `handler::FieldList`,
//! whose buffers are those of a head the worker sent before.)
//!
//! Written by hand because the proxy path is hot (issue 26: no heap allocation per
//! proxied request): each worker copies into one block, and every copy is a
//! [`Bytes`] sharing that block's count, so a copy costs a `memcpy` and an increment.
//! When a block is full, the worker goes on in one of its few blocks that no copy is
//! left of (the steady state: a block's copies are a few dozen requests', done by the
//! time the worker comes back to it); only when every one is still in use does it start
//! a new block, and the one it replaces goes with its last copy.
//!
//! A copy keeps its whole block alive, so what may be kept long is not copied here: a
//! request with a body (its client decides how long the body takes) gets a copy of its
//! own ([`own_with`]), and the cache copies what it stores (`Entry::new`). Blocks are
//! small (16 KiB) so that a copy kept alive while an upstream takes its time holds
//! little besides itself.

use std::cell::RefCell;
use std::ops::Deref;

use bytes::{Bytes, BytesMut};

/// A block's size: a few dozen requests' heads.
const BLOCK: usize = 16 * 1024;
/// Blocks a worker keeps.
const BLOCKS: usize = 8;

/// A worker's blocks: the one being filled first.
struct Blocks {
    blocks: [BytesMut; BLOCKS],
    /// The block a new one replaces next (round robin among the full ones).
    next: usize,
}

thread_local! {
    static BLOCKS_IN_USE: RefCell<Blocks> = RefCell::new(Blocks {
        blocks: Default::default(),
        next: 1,
    });
}

impl Blocks {
    /// Makes the first block one with room for `len` bytes.
    fn room(&mut self, len: usize) {
        if self.blocks[0].capacity() >= len || self.blocks[0].try_reclaim(BLOCK) {
            return;
        }
        for i in 1..BLOCKS {
            if self.blocks[i].try_reclaim(BLOCK) {
                self.blocks.swap(0, i);
                return;
            }
        }
        // Every block still has copies alive: start another. Split once, so that the
        // block's count exists before the first copy is taken from it (the copies then
        // never allocate one).
        let mut fresh = BytesMut::with_capacity(BLOCK);
        drop(fresh.split());
        let full = std::mem::replace(&mut self.blocks[0], fresh);
        self.blocks[self.next] = full;
        self.next = self.next % (BLOCKS - 1) + 1;
    }
}

/// `bytes`, copied into this worker's block (or on its own when it is larger than a
/// block, or when the block is busy).
pub(crate) fn copy(bytes: &[u8]) -> Bytes {
    copy_with(bytes.len(), |out| out.extend_from_slice(bytes))
}

/// `len` bytes written by `write`, copied as by [`copy`].
pub(crate) fn copy_with(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    if len > BLOCK / 4 {
        return own_with(len, write);
    }
    let mut write = Some(write);
    let copied = BLOCKS_IN_USE.try_with(|blocks| {
        let mut blocks = blocks.try_borrow_mut().ok()?;
        blocks.room(len);
        let block = &mut blocks.blocks[0];
        (write.take()?)(block);
        Some(block.split().freeze())
    });
    match copied {
        Ok(Some(bytes)) => bytes,
        _ => own_with(len, write.expect("taken only when the copy is made")),
    }
}

/// `len` bytes written by `write`, in an allocation of their own: a copy that may be kept
/// long.
pub(crate) fn own_with(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut own = BytesMut::with_capacity(len);
    write(&mut own);
    own.freeze()
}

/// UTF-8 text in a [`Bytes`] (a target, an authority, a cache key): cloned and sliced
/// without copying.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Text(Bytes);

/// Hashed as its `str` (not as `Bytes`, which hashes differently), as `Borrow<str>`
/// requires.
impl std::hash::Hash for Text {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Text {
    /// `s`, copied into this worker's block.
    pub(crate) fn copy(s: &str) -> Text {
        Text(copy(s.as_bytes()))
    }

    /// `bytes` if it is UTF-8.
    pub(crate) fn from_utf8(bytes: Bytes) -> Option<Text> {
        std::str::from_utf8(&bytes).ok()?;
        Some(Text(bytes))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: made only from `str`s and checked UTF-8 (the constructors above), and
        // never sliced.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(Bytes::from(s))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_share_a_block_and_reclaim_it() {
        let a = copy(b"hello");
        let b = copy(b"world");
        assert_eq!((&a[..], &b[..]), (&b"hello"[..], &b"world"[..]));
        // Adjacent in one block.
        assert_eq!(a.as_ptr() as usize + 5, b.as_ptr() as usize);
        let first = a.as_ptr();
        drop((a, b));
        // Filling the block past its end with no copy alive starts over at its start.
        let mut last = copy(&[1; 1000]);
        for _ in 0..BLOCK / 1000 + 1 {
            last = copy(&[1; 1000]);
        }
        drop(last);
        let mut again = copy(&[2; 1000]);
        for _ in 0..BLOCK / 1000 + 1 {
            again = copy(&[2; 1000]);
            if again.as_ptr() == first {
                break;
            }
        }
        assert_eq!(again.as_ptr(), first);
    }

    #[test]
    fn a_block_kept_alive_is_left_to_its_copies() {
        let kept = copy(b"kept");
        let mut last = Bytes::new();
        for i in 0..BLOCK / 100 + 2 {
            last = copy(&[i as u8; 100]);
        }
        assert_eq!(&kept[..], b"kept");
        assert_eq!(last.len(), 100);
        let big = copy(&vec![7; BLOCK]);
        assert_eq!(big.len(), BLOCK);
    }

    #[test]
    fn text_is_checked_utf8() {
        let t = Text::copy("Example.com");
        assert_eq!(t, "Example.com");
        assert_eq!(Text::from_utf8(Bytes::from_static(b"\xff")), None);
        assert_eq!(Text::from("x".to_string()).as_str(), "x");
    }
}
