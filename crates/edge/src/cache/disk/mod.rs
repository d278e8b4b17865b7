//! The disk tier (`[cache.disk]`): this node's objects in files, between the memory
//! tier and Redis, kept across restarts.
//!
//! - **Files.** One per object, named by a hash of its key, under two levels of
//!   directories (`file`), written under `tmp/` and renamed into place once whole.
//! - **Index.** Keys, sizes, freshness, surrogate keys and last use, in memory (`index`):
//!   a lookup that the index does not know costs no I/O. A background thread (`loader`)
//!   rebuilds it at start from the files, at `loader_rate` files a second, checking each
//!   one's lengths and checksums; meanwhile keys not yet loaded are misses.
//! - **I/O.** Workers never touch a file: reads and writes run on the tier's threads
//!   (`tessera-disk`), and a read's result comes back through a channel that wakes the
//!   worker's loop. A read or write that finds the queue full (1,024) is a miss, or a
//!   write not made. An object too large for memory is sent as it is read, a chunk at a
//!   time (`stream`), and written as it passes to the client that asked for it, the
//!   others reading it as it is written (`fill`). With `slice`, an object is kept as
//!   a head and slices, each an object of its own (`slices`, and `crate::slices` for
//!   the fetching).
//! - **Eviction.** The least recently used beyond `max_size`; an object not used for
//!   `inactive`, or past every window it could be served in; admission after `min_uses`
//!   requests, and of an object that would evict others only when asked for at least as
//!   often as they were (TinyLFU, `admission`); a full disk (`ENOSPC`) stops writes for [`FULL_PAUSE`] without failing
//!   a request.

mod admission;
mod file;
pub(crate) mod fill;
mod hot;
mod index;
mod loader;
mod shared;
pub(crate) mod slices;
pub(crate) mod stream;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::config::DiskSettings;
use super::entry::Entry;
use crate::error::ConfigError;
use file::{Header, Refused};
pub(crate) use index::Gone;
use index::Meta;
use shared::{Counters, Queue, Shared};

/// How long a request waits for a read before it counts as a miss.
const READ_WAIT: Duration = Duration::from_secs(10);

/// Counters of the disk tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskTierStats {
    /// Objects on disk (indexed).
    pub objects: usize,
    /// Their bytes (files, headers included).
    pub bytes: u64,
    /// `max_size`.
    pub capacity: u64,
    /// Lookups answered from disk.
    pub hits: u64,
    /// Lookups for keys not on disk.
    pub misses: u64,
    /// Objects written.
    pub fills: u64,
    /// Writes that failed (an I/O error, a full disk) or were not made (queue full).
    pub fill_errors: u64,
    /// New objects not written because they were asked for less often than those they
    /// would have evicted (admission).
    pub fill_rejected: u64,
    /// Objects removed by reason.
    pub evicted_size: u64,
    pub evicted_inactive: u64,
    pub evicted_invalidated: u64,
    /// Files dropped because they were truncated or corrupted.
    pub dropped_corrupt: u64,
    /// Files the loader has read since start.
    pub loader_files: u64,
    /// Whether the loader has read every file.
    pub loaded: bool,
    /// Whether writes are paused because the disk is full.
    pub full: bool,
}

pub(crate) struct DiskTier {
    shared: Arc<Shared>,
    queue: Queue,
    /// The fills of slices under way (`slices`).
    filling: slices::Filling,
}

impl DiskTier {
    /// Makes the directories, and starts the I/O threads and the loader.
    pub(crate) fn start(settings: DiskSettings) -> Result<DiskTier, ConfigError> {
        let root = settings.path.clone();
        std::fs::create_dir_all(file::temp_dir(&root)).map_err(|e| {
            ConfigError::Invalid(format!(
                "`cache.disk.path`: cannot make {}: {e}",
                root.display()
            ))
        })?;
        let shared = Arc::new(Shared {
            index: Mutex::new(index::Index::sized(settings.max_size)),
            settings,
            counters: Counters::default(),
            loaded: AtomicBool::new(false),
            full_until: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            temp_seq: AtomicU64::new(0),
            pending_bytes: AtomicU64::new(0),
        });
        let (jobs, rx) = mpsc::channel::<shared::Job>();
        let rx = Arc::new(Mutex::new(rx));
        let spawn_failed =
            |e: std::io::Error| ConfigError::Invalid(format!("cache.disk: no thread: {e}"));
        for i in 0..shared.settings.io_threads {
            let (rx, shared) = (rx.clone(), shared.clone());
            std::thread::Builder::new()
                .name(format!("tessera-disk-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match job {
                        Ok(job) => job(&shared),
                        Err(_) => return,
                    }
                })
                .map_err(spawn_failed)?;
        }
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("tessera-disk-loader".into())
            .spawn(move || loader::run(weak, root))
            .map_err(spawn_failed)?;
        let queue = Queue::new(shared.clone(), jobs);
        Ok(DiskTier {
            shared,
            queue,
            filling: slices::Filling::default(),
        })
    }

    pub(crate) fn max_object_size(&self) -> u64 {
        self.shared.settings.max_object_size
    }

    /// Removes the files of `keys`, always queued (a purged file must not come back at
    /// the next start).
    fn unlink(&self, keys: Vec<String>) {
        if !keys.is_empty() {
            self.queue.always(move |s: &Shared| s.unlink(&keys));
        }
    }

    /// The Vary field names of `key` on disk and until when they hold, when its marker
    /// holds at `now`.
    pub(crate) fn vary_of(&self, key: &str, now: u64) -> Option<(Arc<[String]>, u64)> {
        self.shared.index().vary_of(key, now)
    }

    /// Bumped by every invalidation: a read begun before one that ends after it is not
    /// served.
    pub(crate) fn generation(&self) -> u64 {
        self.shared.index().generation
    }

    /// Whether the object of `object_key` (for request key `base`) is on disk and of
    /// use at `now` (marked used); when it is not, the request is counted toward
    /// `min_uses`. Its time of storing when it is.
    pub(crate) fn find(&self, object_key: &str, base: &str, now: u64) -> Option<u64> {
        let mut index = self.shared.index();
        index.count_request(object_key);
        match index.touch(object_key, now) {
            Some(meta) if self.shared.expired(&meta, now) => {
                index.remove(object_key);
                index.count_use(base, self.shared.settings.min_uses);
                drop(index);
                self.shared.count_gone(Gone::Inactive, 1);
                self.unlink(vec![object_key.to_string()]);
            }
            Some(meta) => return Some(meta.stored_ms),
            None => {
                index.count_use(base, self.shared.settings.min_uses);
            }
        }
        self.shared.counters.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Reads the object of `key` on an I/O thread; a file found truncated or corrupted
    /// is dropped, and any failure is a miss. A fresh object whose body is larger than
    /// `stream_above` bytes is read but for its body, which is sent as it is read
    /// ([`Entry::on_disk`]).
    pub(crate) async fn read(&self, key: &str, now: u64, stream_above: u64) -> Option<Entry> {
        // Hit again: made from what the last hit kept, on this thread (hot.rs), when its
        // pages are still cached. A cold one is looked up as a new one, on a thread:
        // bench/disk-cache.sh PART=cold measured the kept files of cold objects at x0.76-0.90
        // nginx's requests/s, and the same build without them at x1.38.
        let kept = self.shared.index().hot(key);
        let kept = kept.filter(|k| k.record_len() > stream_above);
        let cached = kept.as_deref().and_then(hot::body_cached);
        if let (Some(kept), Some(cached)) = (kept, cached) {
            let max = self.shared.settings.max_object_size as usize;
            if let Some(mut entry) = hot::entry(&self.queue, key, &kept, now, max) {
                // The region just checked is not checked again when it is sent.
                entry.on_disk = entry.on_disk.map(|d| d.cached_first(cached));
                self.shared.counters.hits.fetch_add(1, Ordering::Relaxed);
                return Some(entry);
            }
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let owned = key.to_string();
        let queue = self.queue.clone();
        let queued = self.queue.bounded(move |s: &Shared| {
            let _ = reply.send(read_on_thread(s, &queue, &owned, now, stream_above));
        });
        let found = match queued {
            true => match evloop::time::timeout(READ_WAIT, answer).await {
                Ok(Ok(found)) => found,
                _ => None,
            },
            false => None,
        };
        let counter = match found {
            Some(_) => &self.shared.counters.hits,
            None => &self.shared.counters.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Writes `entry` under `key` (a variant of `base` varying on `vary` until
    /// `vary_until` when `vary` is not empty) in the background, when it is admitted:
    /// small enough, asked for `min_uses` times, and the disk not full.
    pub(crate) fn write(
        &self,
        (base, key): (&str, &str),
        (vary, vary_until): (&[String], u64),
        entry: Arc<Entry>,
        now: u64,
    ) {
        let s = &self.shared;
        let Some((generation, header)) =
            self.admit((base, key), (vary, vary_until), (&entry, entry.weight), now)
        else {
            return;
        };
        // The objects waiting to be written are held in memory: at most a budget of them.
        let weight = entry.weight;
        let budget = s.write_budget();
        let pending = &s.pending_bytes;
        if pending.fetch_add(weight, Ordering::AcqRel) + weight > budget {
            pending.fetch_sub(weight, Ordering::AcqRel);
            s.counters.fill_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let queued = self.queue.bounded(move |s: &Shared| {
            write_on_thread(s, header, &entry, generation);
            drop(entry);
            s.pending_bytes.fetch_sub(weight, Ordering::AcqRel);
        });
        if !queued {
            pending.fetch_sub(weight, Ordering::AcqRel);
            s.counters.fill_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Starts writing the object whose head (status, fields, freshness) is `head` and
    /// body `body_len` bytes as the body passes through ([`fill::DiskFill`]), under
    /// `key` (a variant of `base` when `vary` is not empty), when it is admitted as
    /// [`DiskTier::write`] says; `done` is called once it ends.
    pub(crate) fn start_fill(
        &self,
        (base, key): (&str, &str),
        (vary, vary_until): (&[String], u64),
        (head, body_len): (&Entry, u64),
        now: u64,
        done: fill::Done,
    ) -> Option<fill::DiskFill> {
        let weight = head.weight + body_len;
        let (generation, header) =
            self.admit((base, key), (vary, vary_until), (head, weight), now)?;
        let mut record_head = bytes::BytesMut::new();
        head.encode_head(&mut record_head, body_len);
        let at = (generation, done);
        Some(fill::DiskFill::start(
            &self.queue,
            header,
            record_head.freeze(),
            body_len,
            at,
        ))
    }

    /// Whether an object of `weight` bytes whose head is `entry` may be written under
    /// `key` (a variant of `base` varying on `vary` until `vary_until`): small enough,
    /// the disk not full, asked for `min_uses` times, and let in by admission. Then the
    /// index's generation and the file's header.
    fn admit(
        &self,
        (base, key): (&str, &str),
        (vary, vary_until): (&[String], u64),
        (entry, weight): (&Entry, u64),
        now: u64,
    ) -> Option<(u64, Header)> {
        let s = &self.shared;
        if weight > s.settings.max_object_size || s.full_until.load(Ordering::Relaxed) > now {
            return None;
        }
        let generation = {
            let index = s.index();
            if !index.admitted(base, key, s.settings.min_uses) {
                return None;
            }
            if !index.admits(key, weight, s.settings.max_size) {
                s.counters.rejected.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            index.generation
        };
        let header = Header {
            key: key.to_string(),
            base: base.to_string(),
            vary: vary.to_vec(),
            vary_until,
            stored_ms: now,
            useless_ms: entry.useless_at(),
            tags: entry.keys.to_vec(),
            record_len: 0,
            record_crc: 0,
            pad: 0,
        };
        Some((generation, header))
    }

    /// Removes what `gone` says must go, for an invalidation; how many objects.
    pub(crate) fn invalidate(&self, gone: impl Fn(&str, &Meta) -> bool) -> usize {
        let keys = {
            let mut index = self.shared.index();
            index.invalidated();
            index.remove_where(gone)
        };
        let n = keys.len();
        self.shared.count_gone(Gone::Invalidated, n);
        self.unlink(keys);
        n
    }

    /// Removes `key` and its variants.
    pub(crate) fn purge(&self, key: &str) -> usize {
        self.invalidate(|k, m| k == key || m.base == key)
    }

    /// Counters and sizes now.
    pub(crate) fn stats(&self) -> DiskTierStats {
        let s = &self.shared;
        let (objects, bytes) = {
            let index = s.index();
            (index.len(), index.bytes)
        };
        let c = &s.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskTierStats {
            objects,
            bytes,
            capacity: s.settings.max_size,
            hits: load(&c.hits),
            misses: load(&c.misses),
            fills: load(&c.fills),
            fill_errors: load(&c.fill_errors),
            fill_rejected: load(&c.rejected),
            evicted_size: load(&c.evicted[0]),
            evicted_inactive: load(&c.evicted[1]),
            evicted_invalidated: load(&c.evicted[2]),
            dropped_corrupt: load(&c.evicted[3]),
            loader_files: load(&c.loader_files),
            loaded: s.loaded.load(Ordering::Acquire),
            full: s.full_until.load(Ordering::Relaxed) > crate::clock::now_ms(),
        }
    }
}

impl DiskTier {
    /// `slice`: the bytes of a slice, when objects are fetched in slices.
    pub(crate) fn slice_size(&self) -> Option<u64> {
        self.shared.settings.slice
    }

    /// The body of the slice under `key` (of the object of request key `base`), to be
    /// read: the fill under way, or the file when it holds a fresh slice of the object
    /// of `etag` (one of another is removed). `None` when there is neither.
    pub(crate) async fn slice_body(
        &self,
        (base, key): (&str, &str),
        etag: Option<&bytes::Bytes>,
        now: u64,
    ) -> Option<stream::OnDisk> {
        if let Some(reader) = self.filling.get(key) {
            return Some(reader.body(key.to_string()));
        }
        self.find(key, base, now)?;
        let entry = self.read(key, now, 0).await?;
        let same = etag.map_or(true, |etag| entry.headers.get(b"etag") == Some(&etag[..]));
        if !same {
            self.invalidate(|k, _| k == key);
            return None;
        }
        entry.on_disk
    }

    /// Starts writing the slice under `key` (of the object of request key `base`, whose
    /// head is `head`), `len` bytes, as they arrive; its readers meanwhile read it as it
    /// is written ([`DiskTier::slice_body`]). A fill of it already under way (another
    /// worker's, started since `slice_body` found none) is given instead, to be read.
    /// `None` when the tier does not take it.
    pub(crate) fn start_slice_fill(
        &self,
        (base, key): (&str, &str),
        (head, len): (&Entry, u64),
        now: u64,
    ) -> Option<slices::SliceFill> {
        let filling = self.filling.clone();
        self.filling.get_or_start(key, || {
            let owned = key.to_string();
            let registered = Arc::new(Mutex::new(None::<fill::FillReader>));
            let mine = registered.clone();
            let done: fill::Done = Box::new(move |_| {
                if let Some(mine) = mine.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    filling.ended(&owned, &mine);
                }
            });
            let fill = self.start_fill((base, key), (&[], 0), (head, len), now, done)?;
            *registered.lock().unwrap_or_else(|e| e.into_inner()) = Some(fill.reader());
            Some(fill)
        })
    }
}

/// A read, on an I/O thread: the file checked and decoded (but for the body of a fresh
/// object larger than `stream_above`, left to be read as it is sent); dropped when
/// refused.
fn read_on_thread(
    s: &Shared,
    queue: &Queue,
    key: &str,
    now: u64,
    stream_above: u64,
) -> Option<Entry> {
    let path = s.path_of(key);
    let max = s.settings.max_object_size as usize;
    let read = file::open(&path).and_then(|(mut f, header, header_len)| {
        if header.key != key {
            return Err(Refused::Corrupt("another key"));
        }
        if header.record_len > stream_above {
            let checked_ms = s.index().checked_at(key);
            let at = (key, header_len, now, checked_ms);
            if let Some((entry, kept)) = hot::head_only(queue, &f, &header, at, max) {
                s.index().set_hot(key, header.stored_ms, kept);
                return Ok(entry);
            }
        }
        let record = file::read_record(&mut f, &header)?;
        Entry::decode(record, max, now).ok_or(Refused::Corrupt("record"))
    });
    let refused = match read {
        Ok(entry) => return Some(entry),
        Err(e) => e,
    };
    tracing::warn!(path = %path.display(), ?refused, "disk cache file dropped");
    s.index().remove(key);
    s.count_gone(Gone::Corrupt, 1);
    let _ = std::fs::remove_file(&path);
    None
}

/// A write, on an I/O thread: under `tmp/`, renamed into place, then indexed (unless an
/// invalidation came meanwhile), and the least recently used evicted beyond `max_size`.
fn write_on_thread(s: &Shared, mut header: Header, entry: &Entry, generation: u64) {
    let record = entry.encode();
    header.record_len = record.len() as u64;
    header.record_crc = crc32fast::hash(&record);
    let body_len = entry.record_body_len();
    header.align_body(record.len() - body_len, body_len as u64);
    let head = header.encode();
    let size = (head.len() + record.len()) as u64;
    let temp = s.temp_path(&header.key);
    let written = (|| {
        use std::io::Write;
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(&head)?;
        f.write_all(&record)?;
        drop(f);
        s.place(&temp, &header, size, generation)
    })();
    if let Err(e) = written {
        s.write_failed(&temp, &e);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use http::StatusCode;

    use super::slices::SliceFill;
    use super::*;
    use crate::cache::freshness::Freshness;

    #[test]
    fn a_slice_fill_under_way_is_read_not_started_again() {
        let path = std::env::temp_dir().join(format!("tessera-slice-fill-{}", std::process::id()));
        let tier = DiskTier::start(DiskSettings {
            path: path.clone(),
            max_size: 1 << 30,
            max_object_size: 1 << 30,
            inactive: Duration::from_secs(3600),
            min_uses: 1,
            loader_rate: 1000,
            slice: Some(1 << 20),
            io_threads: 2,
            io_queue: 16,
        })
        .unwrap();
        let now = crate::clock::now_ms();
        let fresh = Freshness {
            store: true,
            fresh: Duration::from_secs(60),
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            keep: Duration::ZERO,
            age: Duration::ZERO,
        };
        let head = Entry::new(
            StatusCode::OK,
            handler::FieldList::new(),
            Bytes::new(),
            None,
            Some(&fresh),
            now,
        );
        let start = || tier.start_slice_fill(("k", "k#slice=1"), (&head, 10), now);
        // Two requests (on any workers) that found the slice missing: one fill.
        let first = start();
        assert!(matches!(first, Some(SliceFill::Started(_))));
        assert!(matches!(start(), Some(SliceFill::Filling(_))));
        // Given up (on the tier's threads), it is no longer found: a request starts one.
        drop(first);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !matches!(start(), Some(SliceFill::Started(_))) {
            assert!(
                std::time::Instant::now() < deadline,
                "the fill given up is still found"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(path);
    }
}
