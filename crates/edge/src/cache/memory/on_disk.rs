//! The disk tier seen from the cache (docs/cache.md, "Disk tier"): a memory miss asks
//! the disk before Redis; an object read back goes into memory when it fits there, and
//! invalidations that concern memory concern the disk the same way (`disk`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{variant_key, Cache, Slot};
use crate::cache::disk::fill::{DiskFill, Done};
use crate::cache::disk::slices::{Sliced, MARKER};
use crate::cache::lookup::Field;
use crate::cache::{Entry, FlightGuard, Landing};
use crate::clock::now_ms;
use bytes::Bytes;

impl Cache {
    /// The object on disk for `key` and these request fields, fresh or not (the caller
    /// decides, as for a memory object); `None` when there is none, it is past use, a
    /// ban concerns it, or an invalidation came while it was read. One that fits in
    /// memory is copied there; a fresh one too large for memory comes with its body left
    /// on disk, to be sent as it is read ([`Entry::on_disk`]).
    pub(crate) async fn lookup_disk(
        &self,
        key: &str,
        field: Field<'_>,
        now: u64,
    ) -> Option<Arc<Entry>> {
        let disk = self.disk.as_ref()?;
        let generation = disk.generation();
        let vary = disk.vary_of(key, now);
        let object_key = match &vary {
            Some((names, _)) => variant_key(key, names, field),
            None => key.to_string(),
        };
        let stored_ms = disk.find(&object_key, key, now)?;
        if self.bans.pending() && self.bans.bans(&object_key, stored_ms) {
            disk.invalidate(|k, _| k == object_key);
            return None;
        }
        let memory_limit = self.config.max_object_size as u64;
        let mut entry = disk.read(&object_key, now, memory_limit).await?;
        if disk.generation() != generation || entry.useless(now) {
            return None;
        }
        if let Some(slice) = sliced_head(&mut entry) {
            // The head of an object fetched in slices: served from its slices.
            let length = entry.headers.get(b"content-length").unwrap_or_default();
            let total = std::str::from_utf8(length).ok()?.trim().parse().ok()?;
            let etag = entry.headers.get(b"etag").map(Bytes::copy_from_slice);
            let (base, object_key) = (key.to_string(), object_key);
            entry.sliced = Some(Arc::new(Sliced {
                base,
                object_key,
                slice,
                total,
                etag,
            }));
            entry.stored_ms.store(stored_ms, Ordering::Release);
            return Some(Arc::new(entry));
        }
        let entry = Arc::new(entry);
        if entry.on_disk.is_some() || entry.weight > memory_limit {
            // Served from this copy and let go; `stored_ms` for the bans.
            entry.stored_ms.store(stored_ms, Ordering::Release);
            return Some(entry);
        }
        if let Some((names, until)) = vary {
            self.mem.insert(key.to_string(), Slot::Vary(names, until));
        }
        self.store(object_key, entry.clone());
        crate::metrics::stored();
        Some(entry)
    }

    /// The disk tier, when there is one.
    pub(crate) fn disk(&self) -> Option<&crate::cache::disk::DiskTier> {
        self.disk.as_ref()
    }

    /// Starts writing to disk, as its body arrives, an object for `key` too large for
    /// memory: `head` is the stored response but its body, of `body_len` bytes. The
    /// object, its body read from the file as it is written, comes back with the fill.
    /// The flight's waiters (`guard`) get the object at once, its body read from the
    /// file as it is written (and broken off if the fill fails). `None` when the disk
    /// tier does not take it (the waiters told so).
    pub(crate) fn start_fill(
        &self,
        key: &str,
        field: Field<'_>,
        (head, body_len): (Entry, u64),
        guard: Option<FlightGuard>,
    ) -> Option<(DiskFill, Arc<Entry>)> {
        let disk = self.disk.as_ref().filter(|_| head.disk)?;
        let now = now_ms();
        let (names, until, object_key) = placed(key, field, &head, now);
        // The flight ends with the fill: until then the requests for the key get the
        // object as it is written; after it, they find it on disk (or fetch it again).
        let guard = Arc::new(std::sync::Mutex::new(guard));
        let ended = guard.clone();
        let done: Done = Box::new(move |_| {
            drop(ended.lock().unwrap_or_else(|e| e.into_inner()).take());
        });
        let fill = disk.start_fill(
            (key, &object_key),
            (&names, until),
            (&head, body_len),
            now,
            done,
        )?;
        let entry = Arc::new(head.with_body_on_disk(fill.filling_body(object_key)));
        if let Some(guard) = guard.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            guard.land_early(Landing::Stored(entry.clone()));
        }
        Some((fill, entry))
    }

    /// Writes to disk the head of an object for `key` fetched in slices (`head`: the
    /// stored response but its body; `slice` and `total` bytes), and gives the object as
    /// it is served, from its slices; the flight's waiters (`guard`) get it too. `None`
    /// when the disk tier does not take the route's objects.
    pub(crate) fn start_sliced(
        &self,
        key: &str,
        field: Field<'_>,
        head: &Entry,
        (slice, total): (u64, u64),
        guard: Option<FlightGuard>,
    ) -> Option<Arc<Entry>> {
        let disk = self.disk.as_ref().filter(|_| head.disk)?;
        let now = now_ms();
        let (names, until, object_key) = placed(key, field, head, now);
        let mut marked = head.headers.clone();
        marked.insert(MARKER, slice.to_string().as_bytes());
        let stored = Arc::new(head.head_with(marked));
        disk.write((key, &object_key), (&names, until), stored, now);
        let mut entry = head.head_with(head.headers.clone());
        entry.sliced = Some(Arc::new(Sliced {
            base: key.to_string(),
            object_key,
            slice,
            total,
            etag: head.headers.get(b"etag").map(Bytes::copy_from_slice),
        }));
        let entry = Arc::new(entry);
        if let Some(guard) = guard {
            guard.land(Landing::Stored(entry.clone()));
        }
        Some(entry)
    }

    /// Removes from disk the objects with one of the surrogate `keys`; how many.
    pub(super) fn purge_keys_on_disk(&self, keys: &[&str]) -> usize {
        self.disk.as_ref().map_or(0, |d| {
            d.invalidate(|_, m| m.tags.iter().any(|t| keys.contains(&&**t)))
        })
    }

    /// Removes from disk the object of URL `key` and its variants; how many.
    pub(super) fn purge_on_disk(&self, key: &str) -> usize {
        self.disk.as_ref().map_or(0, |d| d.purge(key))
    }

    /// Removes from disk what `banned` says (a key and when it was stored); how many.
    pub(super) fn ban_on_disk(&self, banned: impl Fn(&str, u64) -> bool) -> usize {
        self.disk
            .as_ref()
            .map_or(0, |d| d.invalidate(|k, m| banned(k, m.stored_ms)))
    }
}

/// The slice size of a sliced object's head read from disk (its marker taken out).
fn sliced_head(entry: &mut Entry) -> Option<u64> {
    let slice = std::str::from_utf8(entry.headers.get(MARKER)?)
        .ok()?
        .parse()
        .ok()?;
    entry.headers.remove(MARKER);
    Some(slice)
}

/// Where an object for `key` goes on disk: the Vary names of its `head` and until when
/// they hold, and the object's own key (its variant's, when it varies).
fn placed(key: &str, field: Field<'_>, head: &Entry, now: u64) -> (Vec<String>, u64, String) {
    let names: Vec<String> = crate::cache::freshness::vary_names(&head.headers).collect();
    let until = now.saturating_add(head.remaining_secs(now).saturating_mul(1000));
    let object_key = if names.is_empty() {
        key.to_string()
    } else {
        variant_key(key, &names, field)
    };
    (names, until, object_key)
}
