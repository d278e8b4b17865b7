//! The open-file cache, shared by every worker of a process: open descriptors, metadata,
//! small bodies and preformatted header lines for hot files, so that a hit costs no
//! open(2), no stat(2) and no formatting.
//!
//! It is split into shards, each a mutex around a hash map; a worker holds a shard's lock
//! only to look a path up and clone one `Arc`, so two workers collide only when they ask
//! for paths of the same shard at the same instant, and then for nanoseconds. Entries are
//! trusted for `file_cache_valid_ms`; after that the next request for the path reopens
//! the file (and its precompressed siblings) and compares device, inode, size and mtime:
//! unchanged, the entry is trusted again; changed, it is replaced; gone, it is removed.

use std::collections::HashMap;
use std::fs::File;
use std::hash::BuildHasher;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

/// Enough shards that two workers rarely want the same one at once; few enough that an
/// idle cache costs nothing to speak of.
const SHARDS: usize = 32;

/// One representation of a file as it is sent: the file itself or one of its
/// precompressed siblings.
pub(crate) struct FileEntry {
    pub file: File,
    pub len: u64,
    /// The whole file when it is smaller than `sendfile_min_size` (read once, then
    /// checked unchanged, so it is never a mix of two versions), else empty.
    body: Box<[u8]>,
    pub in_memory: bool,
    /// Header lines, each ending in CRLF, in this order: Accept-Ranges, Content-Type,
    /// Content-Encoding (siblings only); then, from `validators_at`, the lines a 304
    /// repeats: Last-Modified, ETag, Vary (when the path has siblings), Cache-Control.
    head: Box<[u8]>,
    /// The same lines as fields, for HTTP/2: per line, where its name starts, where its
    /// value starts and where the value ends, in `head` (found once, when the entry is
    /// made, so no request reads the lines back).
    fields: Box<[(u32, u32, u32, u32)]>,
    after_accept_ranges: usize,
    after_type: usize,
    validators_at: usize,
    /// The ETag's quoted value, as a range of `head`.
    etag: (usize, usize),
    pub content_type: &'static str,
    /// Modification time in whole seconds, as Last-Modified says it.
    pub mtime: i64,
    identity: Identity,
    /// The coding of what is sent.
    pub coding: Coding,
}

impl FileEntry {
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The file's identity (for a compressed form: the file it was made from).
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// Every header line of a 200 except Content-Length.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The header lines of a 206: no Accept-Ranges, the client knows.
    pub fn partial_head(&self) -> &[u8] {
        &self.head[self.after_accept_ranges..]
    }

    /// The header lines of a multipart/byteranges 206: without Content-Type either, each
    /// part carries it.
    pub fn multipart_head(&self) -> &[u8] {
        &self.head[self.after_type..]
    }

    /// The header lines a 304 carries.
    pub fn validators(&self) -> &[u8] {
        &self.head[self.validators_at..]
    }

    /// The fields of the lines that start at `from` in `head`.
    fn fields_from(&self, from: usize) -> impl Iterator<Item = (&[u8], &[u8])> {
        let head = &self.head;
        self.fields
            .iter()
            .filter(move |&&(name, _, _, _)| name as usize >= from)
            .map(move |&(name, name_end, value, end)| {
                let at = |i: u32| i as usize;
                (&head[at(name)..at(name_end)], &head[at(value)..at(end)])
            })
    }

    /// The entity tag, quotes included.
    pub fn etag(&self) -> &[u8] {
        &self.head[self.etag.0..self.etag.1]
    }

    /// Formats the entry for `file`. `extra` holds the header lines that depend on the
    /// path rather than the file (Vary, Cache-Control).
    pub fn load(
        file: File,
        identity: Identity,
        content_type: &'static str,
        coding: Coding,
        extra: &[u8],
        sendfile_min_size: u64,
    ) -> FileEntry {
        FileEntry::make(
            file,
            identity,
            content_type,
            coding,
            extra,
            sendfile_min_size,
            None,
        )
    }

    /// The `coding` form of a file made here: `body` compressed from the file whose
    /// identity is `identity` (`file` is that file, kept open for nothing but the entry's
    /// shape). Its ETag is the file's with the coding appended, so a validator never
    /// names two different byte sequences.
    pub fn compressed(
        file: File,
        identity: Identity,
        content_type: &'static str,
        coding: Coding,
        extra: &[u8],
        body: Vec<u8>,
    ) -> FileEntry {
        FileEntry::make(file, identity, content_type, coding, extra, 0, Some(body))
    }

    fn make(
        file: File,
        identity: Identity,
        content_type: &'static str,
        coding: Coding,
        extra: &[u8],
        sendfile_min_size: u64,
        made: Option<Vec<u8>>,
    ) -> FileEntry {
        let mut len = identity.len;
        let mut body: Box<[u8]> = Box::new([]);
        let mut in_memory = false;
        let etag_suffix = if made.is_some() { coding.token() } else { "" };
        if let Some(made) = made {
            len = made.len() as u64;
            body = made.into_boxed_slice();
            in_memory = true;
        } else if len < sendfile_min_size {
            let mut data = vec![0u8; len as usize];
            // Read, then check the file is still the one measured: a file rewritten
            // meanwhile is served with sendfile instead, bounded by the length measured.
            if file.read_exact_at(&mut data, 0).is_ok()
                && file.metadata().ok().map(|m| Identity::of(&m)) == Some(identity)
            {
                body = data.into_boxed_slice();
                in_memory = true;
            }
        }
        let mtime = UNIX_EPOCH + Duration::from_secs(identity.mtime.max(0) as u64);
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(b"Accept-Ranges: bytes\r\n");
        let after_accept_ranges = head.len();
        head.extend_from_slice(b"Content-Type: ");
        head.extend_from_slice(content_type.as_bytes());
        head.extend_from_slice(b"\r\n");
        let after_type = head.len();
        if coding != Coding::Identity {
            head.extend_from_slice(b"Content-Encoding: ");
            head.extend_from_slice(coding.token().as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        let validators_at = head.len();
        head.extend_from_slice(b"Last-Modified: ");
        head.extend_from_slice(httpdate::fmt_http_date(mtime).as_bytes());
        head.extend_from_slice(b"\r\nETag: ");
        // A strong validator from file identity, modification time and size: any change
        // to the file (or its replacement by another) changes it.
        let etag_start = head.len();
        let nanos = (identity.mtime.max(0) as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(identity.mtime_nsec.max(0) as u64);
        let etag_text = format!(
            "\"{:x}-{:x}-{:x}{}{etag_suffix}\"",
            identity.ino,
            nanos,
            identity.len,
            if etag_suffix.is_empty() { "" } else { "-" }
        );
        head.extend_from_slice(etag_text.as_bytes());
        let etag = (etag_start, head.len());
        head.extend_from_slice(b"\r\n");
        head.extend_from_slice(extra);
        let fields = index_fields(&head);
        FileEntry {
            file,
            len,
            body,
            in_memory,
            head: head.into_boxed_slice(),
            fields,
            after_accept_ranges,
            after_type,
            validators_at,
            etag,
            content_type,
            mtime: identity.mtime,
            identity,
            coding,
        }
    }

    /// A generated body (a directory listing) that no cache holds: `file` only keeps
    /// the directory it describes open while the response is written.
    pub fn generated(file: File, body: Vec<u8>, content_type: &'static str) -> FileEntry {
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(b"Content-Type: ");
        head.extend_from_slice(content_type.as_bytes());
        head.extend_from_slice(b"\r\n");
        let after_type = head.len();
        let fields = index_fields(&head);
        FileEntry {
            file,
            len: body.len() as u64,
            body: body.into_boxed_slice(),
            in_memory: true,
            head: head.into_boxed_slice(),
            fields,
            after_accept_ranges: 0,
            after_type,
            validators_at: after_type,
            etag: (after_type, after_type),
            content_type,
            mtime: 0,
            identity: Identity::default(),
            coding: Coding::Identity,
        }
    }
}

/// The header lines of an entry from one point on (one of [`FileEntry::head`],
/// [`FileEntry::partial_head`], [`FileEntry::multipart_head`], [`FileEntry::validators`]),
/// shared with the entry: how a head written as fields (HTTP/2) carries a file's fields
/// without copying them, so HPACK encodes them straight from the entry.
#[derive(Clone)]
pub(crate) struct EntryFields {
    entry: Arc<FileEntry>,
    /// Where the lines start in the entry's head.
    from: usize,
}

impl EntryFields {
    /// `lines` must be one of the entry's blocks named above.
    pub(crate) fn new(entry: &Arc<FileEntry>, lines: &[u8]) -> EntryFields {
        let from = entry.head.len() - lines.len();
        debug_assert!(
            std::ptr::eq(&entry.head[from..], lines),
            "not the entry's lines"
        );
        EntryFields {
            entry: entry.clone(),
            from,
        }
    }

    /// The lines as HTTP/1 writes them, each ending in CRLF.
    pub(crate) fn lines(&self) -> &[u8] {
        &self.entry.head[self.from..]
    }

    /// The same, field by field.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entry.fields_from(self.from)
    }
}

/// What makes two opens of a path the same file with the same contents.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
    pub len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Identity {
    pub fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

pub(crate) use compress::{Accepted as AcceptEncoding, Coding};

/// A cached path: the file and the precompressed siblings found next to it.
pub(crate) struct Resource {
    pub plain: Arc<FileEntry>,
    pub brotli: Option<Arc<FileEntry>>,
    pub gzip: Option<Arc<FileEntry>>,
    /// Compressed forms made here for a file without siblings (`[compression]`).
    pub compressed: Option<Compressed>,
    /// When the files were last compared with the file system (the workers' clock, ms).
    checked: u64,
}

/// The compressed forms of a file, made once when it is loaded, and their share of the
/// site's budget (`[compression] file_cache_bytes`), given back when they are dropped.
pub(crate) struct Compressed {
    pub entries: Vec<Arc<FileEntry>>,
    bytes: u64,
    budget: Arc<std::sync::atomic::AtomicU64>,
}

impl Compressed {
    /// Takes `bytes` of the budget (`used` of at most `limit`), or `None` when they do
    /// not fit.
    pub fn reserve(
        budget: &Arc<std::sync::atomic::AtomicU64>,
        limit: u64,
        bytes: u64,
    ) -> Option<Compressed> {
        use std::sync::atomic::Ordering::Relaxed;
        let before = budget.fetch_add(bytes, Relaxed);
        if before.saturating_add(bytes) > limit {
            budget.fetch_sub(bytes, Relaxed);
            return None;
        }
        Some(Compressed {
            entries: Vec::new(),
            bytes,
            budget: budget.clone(),
        })
    }
}

impl Drop for Compressed {
    fn drop(&mut self) {
        self.budget
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The identities found by reopening a path, to compare with what is cached.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Identities {
    pub plain: Identity,
    pub brotli: Option<Identity>,
    pub gzip: Option<Identity>,
}

impl Resource {
    pub fn new(
        plain: FileEntry,
        brotli: Option<FileEntry>,
        gzip: Option<FileEntry>,
        now: u64,
    ) -> Resource {
        Resource {
            plain: Arc::new(plain),
            brotli: brotli.map(Arc::new),
            gzip: gzip.map(Arc::new),
            compressed: None,
            checked: now,
        }
    }

    /// The representation to send: the acceptable sibling the client prefers (Brotli on
    /// a tie, being smaller), else the file itself.
    pub fn select(&self, accept: AcceptEncoding) -> &Arc<FileEntry> {
        let (qb, qg) = (accept.q(Coding::Brotli), accept.q(Coding::Gzip));
        let brotli = self.brotli.as_ref().filter(|_| qb > 0);
        let gzip = self.gzip.as_ref().filter(|_| qg > 0);
        match (brotli, gzip) {
            (Some(b), Some(g)) => {
                if qg > qb {
                    g
                } else {
                    b
                }
            }
            (Some(b), None) => b,
            (None, Some(g)) => g,
            (None, None) => self.compressed(accept).unwrap_or(&self.plain),
        }
    }

    /// The compressed form made here (no sibling) the client gives the highest q-value,
    /// the first made on a tie (they are made in the policy's order).
    fn compressed(&self, accept: AcceptEncoding) -> Option<&Arc<FileEntry>> {
        let forms = self.compressed.as_ref()?;
        let mut best: Option<(&Arc<FileEntry>, u16)> = None;
        for form in &forms.entries {
            let q = accept.q(form.coding);
            if q > 0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((form, q));
            }
        }
        best.map(|(form, _)| form)
    }

    fn identities(&self) -> Identities {
        Identities {
            plain: self.plain.identity,
            brotli: self.brotli.as_ref().map(|e| e.identity),
            gzip: self.gzip.as_ref().map(|e| e.identity),
        }
    }
}

type Map = HashMap<Box<[u8]>, Resource, foldhash::fast::RandomState>;

pub(crate) struct FileCache {
    shards: Box<[Mutex<Map>]>,
    hasher: foldhash::fast::RandomState,
    per_shard: usize,
}

impl FileCache {
    /// A cache of at most `max_entries` paths (0 caches nothing).
    pub fn new(max_entries: usize) -> FileCache {
        let hasher = foldhash::fast::RandomState::default();
        let per_shard = max_entries.div_ceil(SHARDS);
        FileCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Map::with_capacity_and_hasher(
                        per_shard.min(64),
                        hasher.clone(),
                    ))
                })
                .collect(),
            hasher,
            per_shard,
        }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Map> {
        let index = self.hasher.hash_one(key) as usize % SHARDS;
        // A worker that panicked while holding the lock left the map consistent (no
        // operation here can panic halfway), so a poisoned lock is still usable.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The hot path: the representation to send for `key` if it was checked less than
    /// `valid_ms` ago. Never allocates.
    pub fn get(
        &self,
        key: &[u8],
        now: u64,
        valid_ms: u64,
        accept: AcceptEncoding,
    ) -> Option<Arc<FileEntry>> {
        let shard = self.shard(key);
        let resource = shard.get(key)?;
        if now.saturating_sub(resource.checked) >= valid_ms {
            return None;
        }
        Some(resource.select(accept).clone())
    }

    /// After reopening: if the cached files are the ones just found, trusts them for
    /// another period and returns the representation to send. Never allocates.
    pub fn revalidate(
        &self,
        key: &[u8],
        now: u64,
        found: &Identities,
        accept: AcceptEncoding,
    ) -> Option<Arc<FileEntry>> {
        let mut shard = self.shard(key);
        let resource = shard.get_mut(key)?;
        if resource.identities() != *found {
            return None;
        }
        resource.checked = resource.checked.max(now);
        Some(resource.select(accept).clone())
    }

    pub fn insert(&self, key: &[u8], resource: Resource) {
        if self.per_shard == 0 {
            return;
        }
        let mut shard = self.shard(key);
        if let Some(slot) = shard.get_mut(key) {
            *slot = resource;
            return;
        }
        if shard.len() >= self.per_shard {
            // Rare: the shard is full. Drop an arbitrary entry; its files stay open until
            // the responses that hold them finish.
            if let Some(victim) = shard.keys().next().cloned() {
                shard.remove(&victim);
            }
        }
        shard.insert(key.into(), resource);
    }

    pub fn remove(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }
}

/// Where each `Name: value\r\n` line of `head` has its name, its value and the value's
/// end (the entry's own lines: never longer than a few hundred bytes).
fn index_fields(head: &[u8]) -> Box<[(u32, u32, u32, u32)]> {
    let mut fields = Vec::new();
    let mut start = 0;
    while let Some(eol) = memchr::memmem::find(&head[start..], b"\r\n") {
        let line = &head[start..start + eol];
        if let Some(colon) = memchr::memchr(b':', line) {
            let space = usize::from(line.get(colon + 1) == Some(&b' '));
            let value = start + colon + 1 + space;
            let at = |i: usize| i as u32;
            fields.push((at(start), at(start + colon), at(value), at(start + eol)));
        }
        start += eol + 2;
    }
    fields.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_bounded_and_revalidates() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(SHARDS);
        let mut identities = Vec::new();
        for i in 0..4 * SHARDS {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, b"x").unwrap();
            let file = File::open(&path).unwrap();
            let id = Identity::of(&file.metadata().unwrap());
            let entry = FileEntry::load(file, id, "text/plain", Coding::Identity, b"", 1024);
            cache.insert(
                format!("/f{i}").as_bytes(),
                Resource::new(entry, None, None, 0),
            );
            identities.push(id);
        }
        let cached: usize = cache.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(cached <= SHARDS, "{cached} entries in a cache of {SHARDS}");
        let (key, id) = (0..4 * SHARDS)
            .map(|i| (format!("/f{i}"), identities[i]))
            .find(|(k, _)| {
                cache
                    .get(k.as_bytes(), 0, 10, AcceptEncoding::IDENTITY)
                    .is_some()
            })
            .expect("some entry cached");
        let key = key.as_bytes();
        assert!(
            cache.get(key, 10, 10, AcceptEncoding::IDENTITY).is_none(),
            "stale after 10 ms"
        );
        let mut changed = Identities {
            plain: id,
            brotli: None,
            gzip: None,
        };
        changed.plain.len += 1;
        assert!(cache
            .revalidate(key, 10, &changed, AcceptEncoding::IDENTITY)
            .is_none());
        let same = Identities {
            plain: id,
            brotli: None,
            gzip: None,
        };
        let entry = cache
            .revalidate(key, 10, &same, AcceptEncoding::IDENTITY)
            .unwrap();
        assert_eq!(entry.body(), b"x");
        assert!(
            cache.get(key, 19, 10, AcceptEncoding::IDENTITY).is_some(),
            "fresh again"
        );
    }
}
