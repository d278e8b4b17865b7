//! Slices (`[cache.disk] slice`, docs/cache.md "Slices"), as the tier keeps them: an
//! object fetched in slices is a head (its stored response with an empty body, marked
//! with [`MARKER`]) under its key, and each slice an object of its own under the key
//! and the slice's number, with the same request key (`base`) as the head, so that a
//! purge, a purge by surrogate key or a ban of the object removes its slices too. A
//! slice being written is read by every request that needs it meanwhile (the fills
//! under way are kept by key, [`Filling`]), so it is fetched once however many wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::fill::{DiskFill, FillReader};

/// The field that marks a head stored on disk as a sliced object's, with the slice's
/// size as value. Taken out when the head is read: never sent.
pub(crate) const MARKER: &[u8] = b"x-tessera-slice";

/// A sliced object, as a request that serves it needs it.
#[derive(Debug)]
pub(crate) struct Sliced {
    /// The request key, and the object's (a variant's when it varies).
    pub(crate) base: String,
    pub(crate) object_key: String,
    /// The bytes of a slice, and of the whole object.
    pub(crate) slice: u64,
    pub(crate) total: u64,
    /// The object's ETag, which every slice fetched must have.
    pub(crate) etag: Option<Bytes>,
}

impl Sliced {
    /// The key of slice `n`. A request target cannot hold `#`: no URL's key is one.
    pub(crate) fn key_of(&self, n: u64) -> String {
        format!("{}#slice={n}", self.object_key)
    }

    /// Where slice `n` starts in the object, and its length.
    pub(crate) fn bounds(&self, n: u64) -> (u64, u64) {
        let first = n * self.slice;
        (first, self.slice.min(self.total.saturating_sub(first)))
    }
}

/// A slice's fill: started by this request, which writes it, or one under way, which it
/// reads.
pub(crate) enum SliceFill {
    Started(DiskFill),
    Filling(FillReader),
}

/// The fills of slices under way, by key.
#[derive(Default, Clone)]
pub(crate) struct Filling(Arc<Mutex<HashMap<String, FillReader>>>);

impl Filling {
    pub(super) fn get(&self, key: &str) -> Option<FillReader> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// The fill of `key` under way, or the one `start` starts (found by the next
    /// lookups from now), in one step: two workers that find a slice missing at the same
    /// moment make one fill of it, not two.
    pub(super) fn get_or_start(
        &self,
        key: &str,
        start: impl FnOnce() -> Option<DiskFill>,
    ) -> Option<SliceFill> {
        let mut fills = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reader) = fills.get(key) {
            return Some(SliceFill::Filling(reader.clone()));
        }
        let fill = start()?;
        fills.insert(key.to_string(), fill.reader());
        Some(SliceFill::Started(fill))
    }

    /// The fill `reader` reads has ended: no longer found under `key` (unless a later
    /// fill of the key is).
    pub(super) fn ended(&self, key: &str, reader: &FillReader) {
        let mut fills = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if fills.get(key).is_some_and(|now| now.same(reader)) {
            fills.remove(key);
        }
    }
}
