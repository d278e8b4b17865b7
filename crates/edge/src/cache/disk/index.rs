//! The disk tier's index, in memory: every object on disk by key (its size, freshness,
//! surrogate keys and last use), the Vary markers, the order of last use for eviction,
//! and the requests counted toward `min_uses`. Workers and the disk threads share it
//! behind one lock held only for map operations, never for I/O.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use super::admission::Sketch;
use super::file::Header;

/// One object on disk.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// The request's key (the object's own when the response does not vary).
    pub(crate) base: String,
    pub(crate) size: u64,
    pub(crate) stored_ms: u64,
    pub(crate) useless_ms: u64,
    pub(crate) last_used_ms: u64,
    /// When its file was last checked whole (loaded) or written: a file modified since
    /// is not sent without checking its checksum again (`stream`).
    pub(crate) checked_ms: u64,
    /// Its place in the order of last use.
    tick: u64,
    pub(crate) tags: Box<[Box<str>]>,
    /// Its open file and head, kept since a hit sent it from its file (hot.rs).
    hot: Option<Arc<Hot>>,
}

/// What a hit on an object sent from its file needs, kept between hits (hot.rs).
pub(crate) struct Hot {
    pub(super) file: Arc<File>,
    /// Where the record starts in the file, its length and checksum.
    pub(super) header_len: u64,
    pub(super) record_len: u64,
    pub(super) record_crc: u32,
    /// The record's head (status, freshness, fields), as in the file.
    pub(super) head: Bytes,
    /// When the index last checked the file whole or wrote it.
    pub(super) checked_ms: Option<u64>,
}

impl Hot {
    /// The record's length (head and body).
    pub(super) fn record_len(&self) -> u64 {
        self.record_len
    }
}

impl std::fmt::Debug for Hot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hot")
            .field("record_len", &self.record_len)
            .finish_non_exhaustive()
    }
}

/// Why an object left the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// To keep the tier within `max_size`.
    Size,
    /// Not used for `inactive`, or of no use any more (past every window).
    Inactive,
    /// A purge, a purge by surrogate key or a ban.
    Invalidated,
    /// Its file was truncated, corrupted or could not be read.
    Corrupt,
}

/// Keys counted toward `min_uses` at most; past it the count starts again.
const MAX_COUNTED: usize = 100_000;

/// Objects indexed at most (the least recently used go first beyond it).
pub(crate) const MAX_OBJECTS: usize = 1 << 22;

/// Objects whose open file and head are kept ([`Index::set_hot`]) at most: as many
/// open files (the first kept is let go first beyond it).
pub(crate) const MAX_HOT: usize = 1024;

#[derive(Default)]
pub(crate) struct Index {
    objects: HashMap<String, Meta>,
    /// Base key: the Vary field names, until when the marker holds, and how many of
    /// its variants are indexed.
    vary: HashMap<String, (Arc<[String]>, u64, usize)>,
    /// Tick of last use: the object's key.
    order: BTreeMap<u64, String>,
    tick: u64,
    pub(crate) bytes: u64,
    /// Requests for keys not on disk, toward `min_uses`.
    uses: HashMap<String, u32>,
    /// Bumped by every invalidation: a write begun before one is not indexed.
    pub(crate) generation: u64,
    /// How often keys were asked for lately, for admission ([`Index::admits`]).
    sketch: Sketch,
    /// Objects with a kept file and head, and the keys in the order they were kept
    /// (a key may be there more than once, or no longer kept).
    hot_count: usize,
    hot_order: std::collections::VecDeque<String>,
}

/// Objects [`Index::admits`] compares a new object with at most (the ones it would
/// evict first).
const MAX_COMPARED: usize = 64;

impl Index {
    /// An empty index whose admission counts suit a tier of `max_bytes` (an object per
    /// 64 KiB).
    pub(crate) fn sized(max_bytes: u64) -> Index {
        Index {
            sketch: Sketch::new((max_bytes >> 16) as usize),
            ..Index::default()
        }
    }

    /// Counts a request for the object of `key`, toward admission.
    pub(crate) fn count_request(&mut self, key: &str) {
        self.sketch.count(key);
    }

    /// Whether a new object of `size` bytes under `key` may be written (TinyLFU,
    /// `admission`): when it fits beside what is indexed within `max_bytes`, or was
    /// asked for at least as often as each of the least recently used objects it would
    /// evict (the first [`MAX_COMPARED`] of them).
    pub(crate) fn admits(&self, key: &str, size: u64, max_bytes: u64) -> bool {
        if self.objects.contains_key(key) || self.bytes + size <= max_bytes {
            return true;
        }
        let wanted = self.sketch.frequency(key);
        let mut freed = 0;
        for (_, victim) in self.order.iter().take(MAX_COMPARED) {
            if self.sketch.frequency(victim) > wanted {
                return false;
            }
            freed += self.objects.get(victim).map_or(0, |m| m.size);
            if self.bytes - freed + size <= max_bytes {
                break;
            }
        }
        true
    }

    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// The Vary names of `key`, when its marker holds at `now`.
    pub(crate) fn vary_of(&self, key: &str, now: u64) -> Option<(Arc<[String]>, u64)> {
        self.vary
            .get(key)
            .filter(|(_, until, _)| now < *until)
            .map(|(names, until, _)| (names.clone(), *until))
    }

    /// The object under `key`, marked used at `now`.
    pub(crate) fn touch(&mut self, key: &str, now: u64) -> Option<Meta> {
        let meta = self.objects.get_mut(key)?;
        self.order.remove(&meta.tick);
        self.tick += 1;
        meta.tick = self.tick;
        meta.last_used_ms = now;
        self.order.insert(self.tick, key.to_string());
        Some(meta.clone())
    }

    /// Counts a request for `key`, not on disk; whether it now has `min_uses`.
    pub(crate) fn count_use(&mut self, key: &str, min_uses: u32) -> bool {
        if min_uses <= 1 {
            return true;
        }
        if self.uses.len() >= MAX_COUNTED && !self.uses.contains_key(key) {
            self.uses.clear();
        }
        let n = self.uses.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n >= min_uses
    }

    /// Whether an object for request key `base` may be written under `key`: asked for
    /// `min_uses` times, or on disk already (a refresh replaces it).
    pub(crate) fn admitted(&self, base: &str, key: &str, min_uses: u32) -> bool {
        min_uses <= 1
            || self.objects.contains_key(key)
            || self.uses.get(base).is_some_and(|n| *n >= min_uses)
    }

    /// Adds (or replaces) the object of `header`, of `size` bytes on disk. With
    /// `only_new`, an object already indexed under its key stays (the loader's case: a
    /// fill since the start is newer). Whether it was added.
    pub(crate) fn insert(&mut self, header: &Header, size: u64, now: u64, only_new: bool) -> bool {
        if only_new && self.objects.contains_key(&header.key) {
            return false;
        }
        self.remove(&header.key);
        self.uses.remove(&header.base);
        if !header.vary.is_empty() && header.base != header.key {
            let names: Arc<[String]> = header.vary.clone().into();
            let marker = self
                .vary
                .entry(header.base.clone())
                .or_insert_with(|| (names.clone(), 0, 0));
            marker.0 = names;
            marker.1 = marker.1.max(header.vary_until);
            marker.2 += 1;
        }
        self.tick += 1;
        self.order.insert(self.tick, header.key.clone());
        self.bytes += size;
        self.objects.insert(
            header.key.clone(),
            Meta {
                base: header.base.clone(),
                size,
                stored_ms: header.stored_ms,
                useless_ms: header.useless_ms,
                last_used_ms: now,
                checked_ms: now,
                tick: self.tick,
                tags: header.tags.clone().into(),
                hot: None,
            },
        );
        true
    }

    /// The kept file and head of `key` (hot.rs), when there are.
    pub(crate) fn hot(&self, key: &str) -> Option<Arc<Hot>> {
        self.objects.get(key)?.hot.clone()
    }

    /// Keeps the file and head of the object under `key`, when it is still the one
    /// stored at `stored_ms`; beyond [`MAX_HOT`], the first kept is let go.
    pub(crate) fn set_hot(&mut self, key: &str, stored_ms: u64, hot: Arc<Hot>) {
        let Some(meta) = self.objects.get_mut(key) else {
            return;
        };
        if meta.stored_ms != stored_ms || meta.hot.is_some() {
            return;
        }
        meta.hot = Some(hot);
        self.hot_count += 1;
        self.hot_order.push_back(key.to_string());
        while self.hot_count > MAX_HOT {
            let Some(first) = self.hot_order.pop_front() else {
                break;
            };
            if let Some(meta) = self.objects.get_mut(&first) {
                if meta.hot.take().is_some() {
                    self.hot_count -= 1;
                }
            }
        }
        if self.hot_order.len() > 4 * MAX_HOT {
            // Keys no longer kept pile up when objects come and go: keep the live ones.
            let objects = &self.objects;
            self.hot_order
                .retain(|k| objects.get(k).is_some_and(|m| m.hot.is_some()));
        }
    }

    /// When the file of `key` was last checked whole or written.
    pub(crate) fn checked_at(&self, key: &str) -> Option<u64> {
        self.objects.get(key).map(|m| m.checked_ms)
    }

    /// Takes `key` out; its metadata if it was in.
    pub(crate) fn remove(&mut self, key: &str) -> Option<Meta> {
        let meta = self.objects.remove(key)?;
        self.order.remove(&meta.tick);
        self.forget(key, &meta);
        Some(meta)
    }

    /// Counts out an object taken out of `objects` (its bytes, its variant).
    fn forget(&mut self, key: &str, meta: &Meta) {
        self.bytes -= meta.size;
        if meta.hot.is_some() {
            self.hot_count -= 1;
        }
        if meta.base != key {
            if let Some(marker) = self.vary.get_mut(&meta.base) {
                marker.2 -= 1;
                if marker.2 == 0 {
                    self.vary.remove(&meta.base);
                }
            }
        }
    }

    /// The least recently used objects to remove so that the index holds `max_bytes`
    /// and [`MAX_OBJECTS`] at most, taken out.
    pub(crate) fn over(&mut self, max_bytes: u64) -> Vec<String> {
        let mut gone = Vec::new();
        while self.bytes > max_bytes || self.objects.len() > MAX_OBJECTS {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(meta) = self.objects.remove(&key) {
                self.forget(&key, &meta);
            }
            gone.push(key);
        }
        gone
    }

    /// Takes out every object `gone` says must go; their keys.
    pub(crate) fn remove_where(&mut self, gone: impl Fn(&str, &Meta) -> bool) -> Vec<String> {
        let keys: Vec<String> = self
            .objects
            .iter()
            .filter(|(k, m)| gone(k, m))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.remove(k);
        }
        keys
    }

    /// An invalidation happened: writes begun before it are not indexed.
    pub(crate) fn invalidated(&mut self) {
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(key: &str) -> Header {
        Header {
            key: key.into(),
            base: key.into(),
            vary: Vec::new(),
            vary_until: 0,
            stored_ms: 0,
            useless_ms: u64::MAX,
            tags: Vec::new(),
            record_len: 0,
            record_crc: 0,
            pad: 0,
        }
    }

    #[test]
    fn the_least_recently_used_go_first() {
        let mut index = Index::default();
        for k in ["a", "b", "c"] {
            index.insert(&header(k), 10, 0, false);
        }
        index.touch("a", 1);
        assert_eq!(index.over(20), vec!["b".to_string()]);
        assert_eq!(index.bytes, 20);
        assert!(index.touch("b", 2).is_none());
        assert_eq!(index.over(10), vec!["c".to_string()]);
    }

    #[test]
    fn min_uses_counts_requests() {
        let mut index = Index::default();
        assert!(!index.count_use("k", 2));
        assert!(!index.admitted("k", "k", 2));
        assert!(index.count_use("k", 2));
        assert!(index.admitted("k", "k", 2));
        index.insert(&header("k"), 1, 0, false);
        // Counted no more, but on disk: a refresh is written.
        assert!(index.admitted("k", "k", 2));
        index.remove("k");
        assert!(!index.admitted("k", "k", 2));
        assert!(index.admitted("other", "other", 1));
    }

    #[test]
    fn the_loader_does_not_replace_a_newer_fill() {
        let mut index = Index::default();
        assert!(index.insert(&header("k"), 5, 0, false));
        assert!(!index.insert(&header("k"), 7, 0, true));
        assert_eq!(index.bytes, 5);
    }
}
