//! A disk object too large for the memory tier, sent as it is read: its head (status,
//! fields, freshness) is read for the lookup, and its body a chunk at a time with
//! `pread` on the tier's I/O threads, the next chunk read while the last one is sent, so
//! a response holds two chunks in memory however large the object. The file stays open
//! for the response (a purge or eviction meanwhile removes its name, not what is sent).
//!
//! Every file in the index had its checksum checked when it was loaded or written; a
//! whole body is checked again as it is sent, and when it no longer matches (the file
//! changed on disk since) the response breaks off before its end, so no client or cache
//! takes it as whole, and the file is dropped. A range is sent without that check (its
//! length is checked when the file is opened).

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;

use super::index::Gone;
use super::shared::{Queue, Shared};

/// Bytes read at a time.
const CHUNK: usize = 256 << 10;

/// The body of a disk object, left on disk ([`Entry::on_disk`](crate::cache::Entry)).
pub(crate) struct OnDisk {
    queue: Queue,
    key: String,
    file: Arc<File>,
    /// Where the body starts in the file, and its length.
    offset: u64,
    len: u64,
    /// The record's checksum over its head, and the one the whole record has.
    crc: (crc32fast::Hasher, u32),
}

impl OnDisk {
    pub(super) fn new(
        (queue, key): (Queue, String),
        file: Arc<File>,
        (offset, len): (u64, u64),
        crc: (crc32fast::Hasher, u32),
    ) -> OnDisk {
        OnDisk {
            queue,
            key,
            file,
            offset,
            len,
            crc,
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
        DiskStream {
            queue: self.queue.clone(),
            key: self.key.clone(),
            file: self.file.clone(),
            next: self.offset + first,
            end: self.offset + end.min(self.len),
            verify: range.is_none().then(|| self.crc.clone()),
            pending: None,
        }
    }
}

/// A body being read from disk.
pub(crate) struct DiskStream {
    queue: Queue,
    key: String,
    file: Arc<File>,
    /// The file offsets of the next byte to read, and of the end.
    next: u64,
    end: u64,
    verify: Option<(crc32fast::Hasher, u32)>,
    /// The read under way.
    pending: Option<oneshot::Receiver<io::Result<Bytes>>>,
}

impl DiskStream {
    /// The bytes still to send.
    pub(crate) fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.next)
    }

    /// Queues the read of the next chunk.
    fn request(&mut self) {
        let n = (self.end - self.next).min(CHUNK as u64) as usize;
        let (tx, rx) = oneshot::channel();
        let (file, at) = (self.file.clone(), self.next);
        // A tier gone drops the sender: the response breaks off.
        self.queue.always(move |_| {
            let mut buf = BytesMut::zeroed(n);
            let _ = tx.send(file.read_exact_at(&mut buf, at).map(|()| buf.freeze()));
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
            self.request();
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
        // The next chunk is read while this one is sent.
        if self.next < self.end {
            self.request();
        }
        Poll::Ready(Some(Ok(chunk)))
    }

    /// Ends the stream with an error, and drops the file.
    fn broken(&mut self, why: String) -> Poll<Option<Result<Bytes, String>>> {
        self.next = self.end;
        let (key, file) = (self.key.clone(), self.file.clone());
        self.queue
            .always(move |s: &Shared| drop_file(s, &key, &file));
        Poll::Ready(Some(Err(format!("disk cache file {why}"))))
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
