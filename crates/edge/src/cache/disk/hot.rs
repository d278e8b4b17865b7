//! A disk hit sent as it is read: the object's head read from its file (on an I/O
//! thread), its body left there ([`stream::OnDisk`]). The open file and the head's bytes
//! are then kept with the object's index entry ([`Hot`]), so that the next hits on it
//! need no I/O thread: an entry made again from them, on the worker, with one `fstat`
//! (which also tells a file removed from the directory: that one is not served).
//!
//! Why: bench/disk-cache.sh measured a warm 1 MiB disk hit at x2.10 tessera's static
//! file of the same size (216.67 against 103.37 µs) when every hit went to an I/O
//! thread (open, read the head, wake the worker: perf showed the context switches and
//! wake-ups). nginx keeps the same things between hits (`open_file_cache`, its keys
//! zone). With them the same benchmark measured x1.81 (196.72 µs). A kept entry goes
//! with its index entry (an eviction, purge or new write drops it, and with it the
//! file), and [`super::index::MAX_HOT`] of them are kept at most. A kept file serves a
//! hit only while the start of its body is in the page cache: bench/disk-cache.sh
//! PART=cold measured cold objects served from kept files at x0.76-0.90 nginx's
//! requests/s, and looked up on the tier's threads at x1.38-1.44 (docs/benchmarks.md).

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use super::file::Header;
use super::index::Hot;
use super::shared::Queue;
use super::stream;
use crate::cache::entry::{Entry, RecordHead};

/// The most of a record read to find its head (status, fields, freshness) for an
/// object sent as it is read; one whose fields are longer is read whole.
const HEAD_READ: usize = 64 << 10;
/// What is read first: a head is a few hundred bytes. Reading [`HEAD_READ`] every time
/// cost a zeroed 64 KiB buffer, its copy and (after jemalloc gave it back) its page
/// faults per disk hit: bench/disk-cache.sh measured the 1 MiB disk hit at 242 µs with
/// it, 217 µs without.
const HEAD_READ_FIRST: usize = 4 << 10;

/// The object of `file` (its header read) with its body left on disk, to be sent as it
/// is read ([`stream::OnDisk`]), and what to keep for the next hits: when it is fresh at
/// `now`, not an ESI page (whose template is compiled from the whole source), and its
/// head within [`HEAD_READ`].
pub(super) fn head_only(
    queue: &Queue,
    file: &File,
    header: &Header,
    (key, header_len, now, checked_ms): (&str, u64, u64, Option<u64>),
    max: usize,
) -> Option<(Entry, Arc<Hot>)> {
    use std::os::unix::fs::FileExt;
    let read = |n: usize| {
        let mut prefix = vec![0u8; n];
        file.read_exact_at(&mut prefix, header_len).ok()?;
        let prefix = Bytes::from(prefix);
        let mut rest = prefix.clone();
        RecordHead::decode(&mut rest, max, now)?;
        let head_len = prefix.len() - rest.len();
        Some(prefix.slice(..head_len))
    };
    let whole = (header.record_len as usize).min(HEAD_READ);
    let head = match read(whole.min(HEAD_READ_FIRST)) {
        Some(head) => head,
        None if whole > HEAD_READ_FIRST => read(whole)?,
        None => return None,
    };
    let hot = Arc::new(Hot {
        file: Arc::new(file.try_clone().ok()?),
        header_len,
        record_len: header.record_len,
        record_crc: header.record_crc,
        head,
        checked_ms,
    });
    let entry = entry(queue, key, &hot, now, max)?;
    Some((entry, hot))
}

/// How many bytes from the start of a kept object's body (its first region) are in the
/// page cache: that region's length, or `None` when some of it is not.
pub(super) fn body_cached(hot: &Hot) -> Option<u64> {
    let head = hot.head.len() as u64;
    let len = (hot.record_len - head).min(stream::WINDOW);
    stream::resident(&handler::FileRegion {
        file: hot.file.clone(),
        offset: hot.header_len + head,
        len,
    })
    .then_some(len)
}

/// The entry of a kept object, its body to be sent from its file, when it is still
/// fresh at `now` (else `None`: the caller reads it whole, as for any stale object).
pub(super) fn entry(queue: &Queue, key: &str, hot: &Hot, now: u64, max: usize) -> Option<Entry> {
    let mut rest = hot.head.clone();
    let head = RecordHead::decode(&mut rest, max, now)?;
    if head.is_template() || !head.is_fresh(now) || !rest.is_empty() {
        return None;
    }
    let head_len = hot.head.len() as u64;
    let body_len = head.body_len as u64;
    if head_len + body_len != hot.record_len {
        return None;
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&hot.head);
    // A file removed from the directory (by hand, or replaced) is not served from the
    // kept descriptor: the I/O thread's path finds it gone, as a hit without a kept
    // file would.
    let meta = hot.file.metadata().ok()?;
    if std::os::unix::fs::MetadataExt::nlink(&meta) == 0 {
        return None;
    }
    // A file not modified since it was checked whole (loaded) or written may be sent
    // without passing through the process (sendfile); one modified since is checked
    // against its checksum as it is sent.
    let modified_ms = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64);
    let trusted = matches!((modified_ms, hot.checked_ms), (Some(m), Some(c)) if m <= c);
    let mut entry = head.into_entry(Bytes::new());
    entry.weight += body_len;
    entry.on_disk = Some(stream::OnDisk::new(
        (queue.clone(), key.to_string()),
        hot.file.clone(),
        (hot.header_len + head_len, body_len),
        (crc, hot.record_crc),
        trusted,
    ));
    Some(entry)
}
