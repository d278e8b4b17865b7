//! What the disk tier's threads (I/O and loader) and the workers share: its settings,
//! its index behind a lock, its counters, and the queue of its I/O threads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::file::{self, Header};
use super::index::{Gone, Index, Meta};
use crate::cache::config::DiskSettings;

#[derive(Default)]
pub(super) struct Counters {
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) fills: AtomicU64,
    pub(super) fill_errors: AtomicU64,
    /// New objects not admitted (`Index::admits`).
    pub(super) rejected: AtomicU64,
    pub(super) evicted: [AtomicU64; 4],
    pub(super) loader_files: AtomicU64,
}

/// What the tier's threads and its workers share.
pub(super) struct Shared {
    pub(super) settings: DiskSettings,
    pub(super) index: Mutex<Index>,
    pub(super) counters: Counters,
    pub(super) loaded: AtomicBool,
    /// Writes paused until (Unix ms), after `ENOSPC`.
    pub(super) full_until: AtomicU64,
    /// Reads and writes queued.
    pub(super) queued: AtomicUsize,
    pub(super) temp_seq: AtomicU64,
    /// Bytes of the objects queued to be written.
    pub(super) pending_bytes: AtomicU64,
}

impl Shared {
    pub(super) fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn count_gone(&self, why: Gone, n: usize) {
        let i = match why {
            Gone::Size => 0,
            Gone::Inactive => 1,
            Gone::Invalidated => 2,
            Gone::Corrupt => 3,
        };
        self.counters.evicted[i].fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(super) fn path_of(&self, key: &str) -> PathBuf {
        file::path_of(&self.settings.path, key)
    }

    /// Removes the files of `keys` (taken out of the index).
    pub(super) fn unlink(&self, keys: &[String]) {
        for k in keys {
            let _ = std::fs::remove_file(self.path_of(k));
        }
    }

    /// Whether `meta` is past use at `now`: not used for `inactive`, or of no use.
    pub(super) fn expired(&self, meta: &Meta, now: u64) -> bool {
        let inactive = self.settings.inactive.as_millis() as u64;
        meta.last_used_ms.saturating_add(inactive) <= now || meta.useless_ms <= now
    }
}

/// How long writes stop after the disk said it is full.
const FULL_PAUSE: Duration = Duration::from_secs(30);

/// Bytes of objects (or chunks of streaming fills) waiting to be written at most, or
/// twice `max_object_size` when that is more; beyond, a write is not made.
const WRITE_BUDGET: u64 = 64 << 20;

impl Shared {
    /// [`WRITE_BUDGET`], or twice `max_object_size`.
    pub(super) fn write_budget(&self) -> u64 {
        (2 * self.settings.max_object_size).max(WRITE_BUDGET)
    }

    /// A new name under `tmp/` for a file of `key` being written.
    pub(super) fn temp_path(&self, key: &str) -> PathBuf {
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}.{}.{seq}", file::name_of(key), std::process::id());
        file::temp_dir(&self.settings.path).join(name)
    }

    /// Puts the file written whole at `temp` in place and indexes it (`size` bytes),
    /// unless an invalidation came since `generation` (then it is removed, with what
    /// it replaced); evicts the least recently used beyond `max_size`. Whether it was
    /// kept.
    pub(super) fn place(
        &self,
        temp: &Path,
        header: &Header,
        size: u64,
        generation: u64,
    ) -> std::io::Result<bool> {
        let path = self.path_of(&header.key);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::rename(temp, &path)?;
        let now = crate::clock::now_ms();
        let evicted = {
            let mut index = self.index();
            if index.generation != generation {
                // An invalidation since the fill began may concern it: not kept.
                index.remove(&header.key);
                drop(index);
                let _ = std::fs::remove_file(&path);
                return Ok(false);
            }
            index.insert(header, size, now, false);
            index.over(self.settings.max_size)
        };
        self.counters.fills.fetch_add(1, Ordering::Relaxed);
        self.count_gone(Gone::Size, evicted.len());
        self.unlink(&evicted);
        Ok(true)
    }

    /// A write that failed: its file removed, counted, and writes paused when the disk
    /// is full.
    pub(super) fn write_failed(&self, temp: &Path, e: &std::io::Error) {
        let _ = std::fs::remove_file(temp);
        self.counters.fill_errors.fetch_add(1, Ordering::Relaxed);
        if e.raw_os_error() == Some(libc::ENOSPC) {
            let until = crate::clock::now_ms() + FULL_PAUSE.as_millis() as u64;
            self.full_until.store(until, Ordering::Relaxed);
            tracing::warn!(path = %self.settings.path.display(), "disk cache full: writes paused");
        } else {
            tracing::warn!(error = %e, path = %temp.display(), "disk cache write failed");
        }
    }
}

/// Work for an I/O thread.
pub(super) type Job = Box<dyn FnOnce(&Shared) + Send>;

/// The way to the tier's I/O threads.
#[derive(Clone)]
pub(crate) struct Queue {
    pub(super) shared: Arc<Shared>,
    jobs: mpsc::Sender<Job>,
}

impl Queue {
    pub(super) fn new(shared: Arc<Shared>, jobs: mpsc::Sender<Job>) -> Queue {
        Queue { shared, jobs }
    }

    /// Queues a read or write of a request, unless `io_queue` are (beyond, a read is a
    /// miss and a write is not made); whether it was queued.
    pub(super) fn bounded(&self, job: impl FnOnce(&Shared) + Send + 'static) -> bool {
        let queued = &self.shared.queued;
        if queued.fetch_add(1, Ordering::AcqRel) >= self.shared.settings.io_queue {
            queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        self.jobs
            .send(Box::new(move |s: &Shared| {
                s.queued.fetch_sub(1, Ordering::AcqRel);
                job(s);
            }))
            .is_ok()
    }

    /// Queues whatever is queued: removals (a purged file must not come back at the next
    /// start) and the next chunk of a body being sent (bounded by the responses).
    pub(super) fn always(&self, job: impl FnOnce(&Shared) + Send + 'static) -> bool {
        self.jobs.send(Box::new(job)).is_ok()
    }
}
