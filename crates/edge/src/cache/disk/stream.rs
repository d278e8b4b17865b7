//! A disk object too large for the memory tier, sent as it is read: its head (status,
//! fields, freshness) is read for the lookup, and its body a chunk at a time with
//! `pread` on the tier's I/O threads, the next chunk read while the last one is sent, so
//! a response holds two chunks in memory however large the object; or, for a cleartext
//! HTTP/1 connection, as regions of the file that the server sends with `sendfile(2)`
//! once they are in the page cache ([`DiskStream::poll_piece`]). The file stays open
//! for the response (a purge or eviction meanwhile removes its name, not what is sent).
//!
//! Every file in the index had its checksum checked when it was loaded or written; a
//! whole body is checked again as it is sent, and when it no longer matches (the file
//! changed on disk since) the response breaks off before its end, so no client or cache
//! takes it as whole, and the file is dropped. A range is sent without that check (its
//! length is checked when the file is opened), and so is a whole body whose file was not
//! modified since it was checked (which may go out with sendfile, its bytes never read
//! by the process).
//!
//! An object still being filled ([`Progress`]) is read the same way as its bytes are
//! written: a reader that has caught up waits to be woken by the next write, and one
//! whose fill fails breaks off (its bytes are not checked: they were just written).

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use handler::{FileRegion, Piece};
use tokio::sync::oneshot;

use super::index::Gone;
use super::shared::{Queue, Shared};

/// Bytes read at a time.
const CHUNK: usize = 256 << 10;

/// Chunk buffers kept for reuse, at most (16 MiB).
const KEPT: usize = 64;

/// The chunk buffers of bodies sent from disk, reused. A fresh 256 KiB buffer per chunk
/// (`BytesMut::zeroed`) is above malloc's mmap threshold: every chunk was an `mmap`, a
/// page fault per 4 KiB touched and an `munmap` after the send. perf of a 1 MiB disk hit
/// (bench/disk-cache.sh, 2026-11-28): page faults, zeroing and unmapping took about 25% of
/// the worker's and the tier's time, at 765 us per request.
static BUFFERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of [`CHUNK`] bytes, reused when one is kept.
fn take_buffer() -> Vec<u8> {
    let kept = BUFFERS.lock().ok().and_then(|mut b| b.pop());
    kept.unwrap_or_else(|| vec![0; CHUNK])
}

/// The first `len` bytes of a pooled buffer, as the body's chunk; the buffer goes back to
/// [`BUFFERS`] when the chunk is dropped (after its send).
struct Chunk {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if let Ok(mut kept) = BUFFERS.lock() {
            if kept.len() < KEPT {
                kept.push(buf);
            }
        }
    }
}

/// A fill under way, as its readers see it.
#[derive(Default)]
pub(crate) struct Progress {
    /// The file, once made.
    file: OnceLock<Arc<File>>,
    /// Bytes of the body written.
    written: AtomicU64,
    /// 0 while filling, then [`WHOLE`] or [`FAILED`].
    state: AtomicU8,
    /// Readers that caught up with the writes.
    waiting: Mutex<Vec<Waker>>,
}

const WHOLE: u8 = 1;
const FAILED: u8 = 2;

impl Progress {
    /// The file is made.
    pub(super) fn opened(&self, file: Arc<File>) {
        let _ = self.file.set(file);
    }

    /// `written` bytes of the body are in the file.
    pub(super) fn wrote(&self, written: u64) {
        self.written.store(written, Ordering::Release);
        self.wake();
    }

    /// The fill ended, whole or not.
    pub(super) fn ended(&self, whole: bool) {
        let state = if whole { WHOLE } else { FAILED };
        self.state.store(state, Ordering::Release);
        self.wake();
    }

    fn wake(&self) {
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        for w in waiting {
            w.wake();
        }
    }

    /// What a reader at `at` (in the body) may read now: the bytes written past it and
    /// the file; `Err` when the fill failed; `Ok(None)` when it must wait (`cx` woken).
    fn available(&self, at: u64, cx: &mut Context<'_>) -> Result<Option<(u64, Arc<File>)>, ()> {
        for registered in [false, true] {
            if self.state.load(Ordering::Acquire) == FAILED {
                return Err(());
            }
            let written = self.written.load(Ordering::Acquire);
            if let Some(file) = self.file.get().filter(|_| written > at) {
                return Ok(Some((written - at, file.clone())));
            }
            if registered {
                break;
            }
            // Registered, then looked at again, so that a write in between is not missed.
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            waiting.push(cx.waker().clone());
        }
        Ok(None)
    }
}

/// Where a body's bytes are.
#[derive(Clone)]
enum Source {
    /// A file written whole.
    File(Arc<File>),
    /// A file being written.
    Filling(Arc<Progress>),
}

/// The body of a disk object, left on disk ([`Entry::on_disk`](crate::cache::Entry)).
pub(crate) struct OnDisk {
    queue: Queue,
    key: String,
    source: Source,
    /// Where the body starts in the file, and its length.
    offset: u64,
    len: u64,
    /// The record's checksum over its head, and the one the whole record has.
    crc: (crc32fast::Hasher, u32),
    /// Whether the file is as it was checked (not modified since it was loaded or
    /// written): its whole body may then be sent without checking it again.
    trusted: bool,
    /// The file offset up to which the page cache was just found to hold the body (its
    /// first region, checked by the lookup of a kept file: hot.rs); 0 when unknown.
    cached_to: u64,
}

impl OnDisk {
    pub(super) fn new(
        (queue, key): (Queue, String),
        file: Arc<File>,
        (offset, len): (u64, u64),
        crc: (crc32fast::Hasher, u32),
        trusted: bool,
    ) -> OnDisk {
        OnDisk {
            queue,
            key,
            source: Source::File(file),
            offset,
            len,
            crc,
            trusted,
            cached_to: 0,
        }
    }

    /// The first `len` bytes of the body were just found in the page cache: the first
    /// region sent from them needs no second look.
    pub(super) fn cached_first(mut self, len: u64) -> OnDisk {
        self.cached_to = self.offset + len;
        self
    }

    /// The body of an object being filled, read as it is written.
    pub(super) fn filling(
        (queue, key): (Queue, String),
        progress: Arc<Progress>,
        (offset, len): (u64, u64),
    ) -> OnDisk {
        OnDisk {
            queue,
            key,
            source: Source::Filling(progress),
            offset,
            len,
            crc: (crc32fast::Hasher::new(), 0),
            trusted: true,
            cached_to: 0,
        }
    }

    /// The body's length.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The body as it is read, whole (checked against the record's checksum as it goes)
    /// or bytes `first..=last` of it.
    pub(crate) fn stream(&self, range: Option<(u64, u64)>) -> DiskStream {
        let (first, end) = range.map_or((0, self.len), |(first, last)| (first, last + 1));
        let whole = range.is_none() && matches!(self.source, Source::File(_));
        DiskStream {
            sendable: !whole || self.trusted,
            warming: None,
            queue: self.queue.clone(),
            key: self.key.clone(),
            source: self.source.clone(),
            offset: self.offset,
            next: self.offset + first,
            end: self.offset + end.min(self.len),
            verify: whole.then(|| self.crc.clone()),
            pending: None,
            cached_to: self.cached_to,
        }
    }
}

/// A body being read from disk.
pub(crate) struct DiskStream {
    queue: Queue,
    key: String,
    source: Source,
    /// Where the body starts in the file.
    offset: u64,
    /// The file offsets of the next byte to read, and of the end.
    next: u64,
    end: u64,
    verify: Option<(crc32fast::Hasher, u32)>,
    /// The read under way.
    pending: Option<oneshot::Receiver<io::Result<Bytes>>>,
    /// Whether its bytes may be sent as regions of the file ([`DiskStream::poll_piece`]):
    /// a range, a body being filled, or a whole body whose file is as it was checked.
    sendable: bool,
    /// A region being read into the page cache on the tier's threads, to be sent next.
    warming: Option<(oneshot::Receiver<io::Result<()>>, FileRegion)>,
    /// [`OnDisk`]'s `cached_to`, used by the first region only.
    cached_to: u64,
}

impl DiskStream {
    /// The bytes still to send.
    pub(crate) fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.next)
    }

    /// Queues the read of the next chunk: at most `available` bytes, from `file`.
    fn request(&mut self, file: Arc<File>, available: u64) {
        let n = (self.end - self.next).min(CHUNK as u64).min(available) as usize;
        let (tx, rx) = oneshot::channel();
        let at = self.next;
        // A tier gone drops the sender: the response breaks off.
        self.queue.always(move |_| {
            let mut buf = take_buffer();
            let read = file.read_exact_at(&mut buf[..n], at);
            let _ = tx.send(read.map(|()| Bytes::from_owner(Chunk { buf, len: n })));
        });
        self.pending = Some(rx);
    }

    /// The next chunk; `None` at the end; an error when the file could not be read or
    /// its checksum no longer matches.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, String>>> {
        if self.pending.is_none() {
            if self.next >= self.end {
                return Poll::Ready(None);
            }
            match self.readable(cx) {
                Ok(Some((file, available))) => self.request(file, available),
                Ok(None) => return Poll::Pending,
                Err(()) => return self.broken("not filled: the fill failed".into()),
            }
        }
        let Some(rx) = self.pending.as_mut() else {
            return Poll::Ready(None);
        };
        let read = match Pin::new(rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(read) => read,
        };
        self.pending = None;
        let chunk = match read {
            Ok(Ok(chunk)) => chunk,
            Ok(Err(e)) => return self.broken(format!("could not be read: {e}")),
            Err(_) => return self.broken("could not be read: the disk tier stopped".into()),
        };
        self.next += chunk.len() as u64;
        if let Some((crc, want)) = &mut self.verify {
            crc.update(&chunk);
            if self.next >= self.end && crc.clone().finalize() != *want {
                return self.broken("changed on disk (checksum)".into());
            }
        }
        // The next chunk is read while this one is sent (when it is written already).
        if self.next < self.end {
            if let Some((file, available)) = self.readable_now() {
                self.request(file, available);
            }
        }
        Poll::Ready(Some(Ok(chunk)))
    }

    /// The next piece for a connection that sends regions of files itself with
    /// `sendfile(2)` (cleartext HTTP/1): a region of at most [`WINDOW`] bytes, once it is
    /// in the page cache; bytes ([`DiskStream::poll_chunk`]) for a body that must be
    /// checked as it is sent.
    ///
    /// sendfile from a file whose pages are in the page cache (warm) copies them to the
    /// socket without a wait; from pages that are not (cold), the call reads them from
    /// the disk first, and the worker, with every connection it serves, waits for the
    /// disk. So a region is given only once its pages are known to be cached: asked of
    /// the kernel with `cachestat(2)` (no I/O, no mapping), and when some are not (or
    /// the kernel cannot say, before Linux 6.5), read into the page cache on the tier's
    /// threads first (`pread`, its bytes dropped), the worker serving others meanwhile;
    /// the next region is then read ahead while this one is sent. Pages evicted between
    /// that and the send are read by the worker (a narrow window, under memory pressure
    /// only).
    pub(crate) fn poll_piece(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Piece, String>>> {
        let bytes =
            |p: Poll<Option<Result<Bytes, String>>>| p.map(|c| c.map(|r| r.map(Piece::Bytes)));
        if !self.sendable {
            return bytes(self.poll_chunk(cx));
        }
        loop {
            if let Some((rx, region)) = &mut self.warming {
                let warmed = match Pin::new(rx).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(warmed) => warmed,
                };
                let region = region.clone();
                self.warming = None;
                return match warmed {
                    Ok(Ok(())) => {
                        // Read ahead while this region is sent.
                        if let Some((file, available)) = self.readable_now() {
                            let next = self.take_region(file, available);
                            if !resident(&next) {
                                self.warm(next);
                            } else {
                                self.next = next.offset;
                            }
                        }
                        Poll::Ready(Some(Ok(Piece::File(region))))
                    }
                    Ok(Err(e)) => bytes(self.broken(format!("could not be read: {e}"))),
                    Err(_) => bytes(self.broken("could not be read: the disk tier stopped".into())),
                };
            }
            if self.next >= self.end {
                return Poll::Ready(None);
            }
            let region = match self.readable(cx) {
                Ok(Some((file, available))) => self.take_region(file, available),
                Ok(None) => return Poll::Pending,
                Err(()) => return bytes(self.broken("not filled: the fill failed".into())),
            };
            let known = region.offset + region.len <= std::mem::take(&mut self.cached_to);
            if known || resident(&region) {
                return Poll::Ready(Some(Ok(Piece::File(region))));
            }
            self.warm(region);
        }
    }

    /// The next region from `file`, of at most `available` and [`WINDOW`] bytes, counted
    /// as sent.
    fn take_region(&mut self, file: Arc<File>, available: u64) -> FileRegion {
        let len = (self.end - self.next).min(WINDOW).min(available);
        let region = FileRegion {
            file,
            offset: self.next,
            len,
        };
        self.next += len;
        region
    }

    /// Reads `region` into the page cache on the tier's threads; [`DiskStream::poll_piece`]
    /// gives it once done.
    fn warm(&mut self, region: FileRegion) {
        let (tx, rx) = oneshot::channel();
        let (file, at, len) = (region.file.clone(), region.offset, region.len);
        // A tier gone drops the sender: the response breaks off.
        self.queue.always(move |_| {
            let mut chunk = Chunk {
                buf: take_buffer(),
                len: 0,
            };
            let mut done = 0;
            let read = loop {
                if done >= len {
                    break Ok(());
                }
                let n = (len - done).min(CHUNK as u64) as usize;
                if let Err(e) = file.read_exact_at(&mut chunk.buf[..n], at + done) {
                    break Err(e);
                }
                done += n as u64;
            };
            drop(chunk);
            let _ = tx.send(read);
        });
        self.warming = Some((rx, region));
    }

    /// The file and the bytes that may be read from `next`; `Ok(None)` when a fill
    /// must write more first (`cx` woken then); `Err` when it failed.
    fn readable(&self, cx: &mut Context<'_>) -> Result<Option<(Arc<File>, u64)>, ()> {
        match &self.source {
            Source::File(file) => Ok(Some((file.clone(), self.end - self.next))),
            Source::Filling(p) => Ok(p
                .available(self.next - self.offset, cx)?
                .map(|(n, file)| (file, n))),
        }
    }

    /// [`DiskStream::readable`] without waiting.
    fn readable_now(&self) -> Option<(Arc<File>, u64)> {
        match &self.source {
            Source::File(file) => Some((file.clone(), self.end - self.next)),
            Source::Filling(p) => {
                let written = p.written.load(Ordering::Acquire);
                let at = self.next - self.offset;
                let file = p.file.get().filter(|_| written > at)?;
                Some((file.clone(), written - at))
            }
        }
    }

    /// Ends the stream with an error, and drops the file.
    fn broken(&mut self, why: String) -> Poll<Option<Result<Bytes, String>>> {
        self.next = self.end;
        // A file being filled is the fill's to remove.
        if let Source::File(file) = &self.source {
            let (key, file) = (self.key.clone(), file.clone());
            self.queue
                .always(move |s: &Shared| drop_file(s, &key, &file));
        }
        Poll::Ready(Some(Err(format!("disk cache file {why}"))))
    }
}

/// Bytes given as one region of a file at most ([`DiskStream::poll_piece`]).
pub(super) const WINDOW: u64 = 1 << 20;

/// Whether every page of `region` is in the page cache, as `cachestat(2)` (Linux 6.5)
/// says; `false` when it cannot say.
pub(super) fn resident(region: &FileRegion) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        /// `cachestat`'s number on every Linux architecture (the unified table).
        const SYS_CACHESTAT: libc::c_long = 451;
        if region.len == 0 {
            return true;
        }
        let range = Range {
            off: region.offset,
            len: region.len,
        };
        let mut stat = Stat::default();
        // SAFETY: `range` and `stat` are live values of the layouts the kernel reads and
        // writes (struct cachestat_range, struct cachestat); the descriptor is open.
        let r = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                region.file.as_raw_fd(),
                &range as *const Range,
                &mut stat as *mut Stat,
                0,
            )
        };
        // SAFETY: sysconf reads a constant of the process.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        let pages = (region.offset + region.len - 1) / page - region.offset / page + 1;
        r == 0 && stat.nr_cache >= pages
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = region;
        false
    }
}

/// Removes the file of `key` from the index and the disk, when it is still `file` (not
/// replaced by a newer fill since).
fn drop_file(s: &Shared, key: &str, file: &File) {
    let path = s.path_of(key);
    let same = match (std::fs::metadata(&path), file.metadata()) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    };
    if !same {
        return;
    }
    tracing::warn!(path = %path.display(), "disk cache file dropped while it was sent");
    if s.index().remove(key).is_some() {
        s.count_gone(Gone::Corrupt, 1);
    }
    let _ = std::fs::remove_file(&path);
}
