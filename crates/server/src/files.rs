//! Static files: path decoding and normalisation, opening beneath the root, the
//! per-worker open-file cache, and the responses for files and directories.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use wire::{Method, Request, Version};

use crate::output::Output;
use crate::worker::Worker;

/// An open file in the cache, with its response header lines formatted once.
pub(crate) struct FileEntry {
    pub file: File,
    pub len: u64,
    /// The whole file when it is smaller than `sendfile_min_size`, else empty.
    body: Box<[u8]>,
    in_memory: bool,
    /// `Content-Type`, `Content-Length`, `Last-Modified` and `ETag` lines.
    headers: Box<[u8]>,
    identity: Identity,
    /// The second this entry was last checked against the file system.
    checked: Cell<u64>,
}

impl FileEntry {
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// What makes two opens of a path the same file with the same contents.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

/// Per-worker cache of open files keyed by normalised path. Entries are re-checked
/// (reopened and compared) at most once a second, so a changed file is served within a
/// second, as with nginx's `open_file_cache_valid 1s`.
pub(crate) struct FileCache {
    map: HashMap<Box<[u8]>, Rc<FileEntry>, foldhash::fast::RandomState>,
    max_entries: usize,
}

impl FileCache {
    pub fn new(max_entries: usize) -> Self {
        FileCache {
            map: HashMap::with_capacity_and_hasher(
                max_entries.min(1024),
                foldhash::fast::RandomState::default(),
            ),
            max_entries,
        }
    }

    fn get(&self, key: &[u8], now: u64) -> Option<&Rc<FileEntry>> {
        self.map.get(key).filter(|e| e.checked.get() == now)
    }

    fn get_stale(&self, key: &[u8]) -> Option<&Rc<FileEntry>> {
        self.map.get(key)
    }

    fn insert(&mut self, key: &[u8], entry: Rc<FileEntry>) {
        if self.max_entries == 0 {
            return;
        }
        if self.map.len() >= self.max_entries && !self.map.contains_key(key) {
            // Rare: the cache is full. Drop an arbitrary entry; its file stays open until
            // the responses that hold it finish.
            if let Some(victim) = self.map.keys().next().cloned() {
                self.map.remove(&victim);
            }
        }
        self.map.insert(key.into(), entry);
    }

    fn remove(&mut self, key: &[u8]) {
        self.map.remove(key);
    }
}

/// Fails at start on kernels without openat2(2), rather than on the first request.
pub(crate) fn probe_openat2(root: RawFd) -> io::Result<()> {
    open_beneath(root, c".", libc::O_PATH).map(drop)
}

/// Opens `path` (relative) beneath `root`: `RESOLVE_BENEATH` makes the kernel refuse any
/// `..` or symlink (absolute or relative) that would leave the root, with EXDEV, so no
/// request can read outside it whatever the path normalisation above missed.
fn open_beneath(root: RawFd, path: &CStr, flags: i32) -> io::Result<File> {
    // SAFETY: open_how is plain data; all-zero is its documented neutral value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    // O_NONBLOCK: opening a FIFO must not block the worker. openat2 refuses flags that
    // mean nothing with O_PATH, so those get only O_CLOEXEC.
    let extra = if flags & libc::O_PATH != 0 {
        libc::O_CLOEXEC
    } else {
        libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY
    };
    how.flags = (flags | extra) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: path is NUL-terminated, how is a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd as RawFd) })
}

/// Why a path cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathError {
    /// Bad percent-encoding, a NUL, or `..` above the root.
    Invalid,
}

/// Percent-decodes `path` (no query) and normalises it into `out` as `/a/b` or `/a/b/`:
/// empty and `.` segments vanish, `..` removes the segment before it. Decoding happens
/// first, so `%2e%2e` is a `..` like any other, and `..` above the root is refused.
fn normalize(path: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    out.push(b'/');
    let mut segment_start = 1;
    let mut i = 0;
    loop {
        let byte = match path.get(i) {
            None => None,
            Some(b'%') => {
                let hi = path.get(i + 1).and_then(|&b| hex(b));
                let lo = path.get(i + 2).and_then(|&b| hex(b));
                match (hi, lo) {
                    (Some(hi), Some(lo)) => {
                        i += 2;
                        Some(hi << 4 | lo)
                    }
                    _ => return Err(PathError::Invalid),
                }
            }
            Some(&b) => Some(b),
        };
        i += 1;
        match byte {
            None | Some(b'/') => {
                let segment = &out[segment_start..];
                if segment == b"." {
                    out.truncate(segment_start);
                } else if segment == b".." {
                    if segment_start == 1 {
                        return Err(PathError::Invalid);
                    }
                    out.truncate(segment_start - 1);
                    let parent = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    out.truncate(parent + 1);
                } else if byte.is_some() && !segment.is_empty() {
                    out.push(b'/');
                }
                if byte.is_none() {
                    return Ok(());
                }
                segment_start = out.len();
            }
            Some(0) => return Err(PathError::Invalid),
            Some(b) => out.push(b),
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Answers a request for a static file. Writes the whole response into `out`.
pub(crate) fn respond(req: &Request<'_, '_>, worker: &Worker, out: &mut Output, keep_alive: bool) {
    let head_only = req.method == Method::Head;
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => {
            return simple(
                worker,
                out,
                req,
                keep_alive,
                204,
                b"Allow: GET, HEAD, OPTIONS\r\n",
            );
        }
        Method::Other => return simple(worker, out, req, keep_alive, 501, b""),
        _ => {
            return simple(
                worker,
                out,
                req,
                keep_alive,
                405,
                b"Allow: GET, HEAD, OPTIONS\r\n",
            );
        }
    }
    let raw_path = match memchr::memchr(b'?', req.path) {
        Some(q) => &req.path[..q],
        None => req.path,
    };
    let mut scratch = worker.scratch.borrow_mut();
    let (key, cpath) = &mut *scratch;
    if normalize(raw_path, key).is_err() {
        return simple(worker, out, req, keep_alive, 400, b"");
    }
    let now = worker.clock.second();
    let cached = worker.files.borrow().get(key, now).cloned();
    let entry = match cached {
        Some(entry) => entry,
        None => match open(worker, key, cpath, now) {
            Ok(entry) => entry,
            Err(Refusal::Status(status)) => {
                return simple(worker, out, req, keep_alive, status, b"");
            }
            Err(Refusal::AddSlash) => return redirect_with_slash(worker, out, req, keep_alive),
        },
    };
    drop(scratch);
    let buf = out.buf();
    buf.extend_from_slice(wire::status_line(200));
    common_headers(worker, buf);
    buf.extend_from_slice(&entry.headers);
    end_head(buf, req.version, keep_alive);
    if head_only || entry.len == 0 {
        return;
    }
    if entry.in_memory {
        out.push_memory(entry);
    } else {
        let len = entry.len;
        out.push_file(entry, 0, len);
    }
}

enum Refusal {
    Status(u16),
    /// The path names a directory but lacks the trailing slash.
    AddSlash,
}

/// Opens the file for `key` (a normalised path), reusing the cached entry when the file
/// has not changed, and caches the result.
fn open(
    worker: &Worker,
    key: &[u8],
    cpath: &mut Vec<u8>,
    now: u64,
) -> Result<Rc<FileEntry>, Refusal> {
    let shared = &worker.shared;
    let root = std::os::fd::AsRawFd::as_raw_fd(&shared.root);
    let is_dir_request = key.ends_with(b"/");
    cpath.clear();
    if key.len() > 1 {
        cpath.extend_from_slice(&key[1..]);
    }
    if is_dir_request {
        cpath.extend_from_slice(shared.config.index.as_bytes());
    }
    cpath.push(0);
    let name = CStr::from_bytes_with_nul(cpath).map_err(|_| Refusal::Status(400))?;
    let file = match open_beneath(root, name, libc::O_RDONLY) {
        Ok(file) => file,
        Err(e) => {
            worker.files.borrow_mut().remove(key);
            if is_dir_request && e.raw_os_error() == Some(libc::ENOENT) {
                // A directory without an index: listing is off, so 403 as nginx does,
                // but only if the directory itself exists.
                cpath.clear();
                if key.len() > 1 {
                    cpath.extend_from_slice(&key[1..]);
                } else {
                    cpath.push(b'.');
                }
                cpath.push(0);
                let dir = CStr::from_bytes_with_nul(cpath).map_err(|_| Refusal::Status(400))?;
                return match open_beneath(root, dir, libc::O_PATH | libc::O_DIRECTORY) {
                    Ok(_) => Err(Refusal::Status(403)),
                    Err(e) => Err(Refusal::Status(status_for(&e))),
                };
            }
            return Err(Refusal::Status(status_for(&e)));
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| Refusal::Status(status_for(&e)))?;
    if meta.is_dir() {
        return Err(if is_dir_request {
            Refusal::Status(403)
        } else {
            Refusal::AddSlash
        });
    }
    if !meta.is_file() {
        return Err(Refusal::Status(403));
    }
    let identity = Identity {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime: meta.mtime(),
        mtime_nsec: meta.mtime_nsec(),
    };
    if let Some(old) = worker.files.borrow().get_stale(key) {
        if old.identity == identity {
            old.checked.set(now);
            return Ok(old.clone());
        }
    }
    let name_for_type: &[u8] = if is_dir_request {
        shared.config.index.as_bytes()
    } else {
        key
    };
    let entry = Rc::new(FileEntry::load(
        file,
        identity,
        content_type(name_for_type),
        shared.config.sendfile_min_size,
        now,
    ));
    worker.files.borrow_mut().insert(key, entry.clone());
    Ok(entry)
}

impl FileEntry {
    fn load(
        file: File,
        identity: Identity,
        content_type: &str,
        sendfile_min_size: u64,
        now: u64,
    ) -> FileEntry {
        let len = identity.len;
        let mut body: Box<[u8]> = Box::new([]);
        let mut in_memory = false;
        if len < sendfile_min_size {
            let mut data = vec![0u8; len as usize];
            // A short read means the file changed under us; sendfile then serves it.
            if file.read_exact_at(&mut data, 0).is_ok() {
                body = data.into_boxed_slice();
                in_memory = true;
            }
        }
        let mtime = UNIX_EPOCH
            + Duration::new(
                identity.mtime.max(0) as u64,
                identity.mtime_nsec.clamp(0, 999_999_999) as u32,
            );
        let mut headers = Vec::with_capacity(192);
        headers.extend_from_slice(b"Content-Type: ");
        headers.extend_from_slice(content_type.as_bytes());
        headers.extend_from_slice(b"\r\nContent-Length: ");
        headers.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
        headers.extend_from_slice(b"\r\nLast-Modified: ");
        headers.extend_from_slice(httpdate::fmt_http_date(mtime).as_bytes());
        // A strong validator from file identity, size and modification time.
        let etag = format!(
            "\r\nETag: \"{:x}-{:x}-{:x}\"\r\n",
            identity.ino,
            identity.mtime.max(0) as u64 * 1_000_000_000 + identity.mtime_nsec.max(0) as u64,
            len
        );
        headers.extend_from_slice(etag.as_bytes());
        FileEntry {
            file,
            len,
            body,
            in_memory,
            headers: headers.into_boxed_slice(),
            identity,
            checked: Cell::new(now),
        }
    }
}

fn status_for(e: &io::Error) -> u16 {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => 404,
        // EXDEV: the path or a symlink on it leads outside the root.
        Some(libc::EACCES | libc::EPERM | libc::EXDEV | libc::ELOOP) => 403,
        _ => 500,
    }
}

fn redirect_with_slash(worker: &Worker, out: &mut Output, req: &Request<'_, '_>, keep_alive: bool) {
    let (path, query) = match memchr::memchr(b'?', req.path) {
        Some(q) => req.path.split_at(q),
        None => (req.path, &b""[..]),
    };
    let mut location = Vec::with_capacity(path.len() + query.len() + 16);
    location.extend_from_slice(b"Location: ");
    location.extend_from_slice(path);
    location.push(b'/');
    location.extend_from_slice(query);
    location.extend_from_slice(b"\r\n");
    simple(worker, out, req, keep_alive, 301, &location);
}

/// Status line, Server and Date.
fn common_headers(worker: &Worker, buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"Server: tessera\r\n");
    worker.clock.write_date(buf);
}

fn end_head(buf: &mut Vec<u8>, version: Version, keep_alive: bool) {
    match (version, keep_alive) {
        (Version::Http11, true) => {}
        (Version::Http10, true) => buf.extend_from_slice(b"Connection: keep-alive\r\n"),
        (_, false) => buf.extend_from_slice(b"Connection: close\r\n"),
    }
    buf.extend_from_slice(b"\r\n");
}

/// A response with a small generated HTML body (or none for 204 and 304), as nginx
/// sends for errors and redirects.
pub(crate) fn simple(
    worker: &Worker,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    status: u16,
    extra_headers: &[u8],
) {
    write_simple(
        worker,
        out.buf(),
        status,
        extra_headers,
        req.method == Method::Head,
        req.version,
        keep_alive,
    );
}

/// The same, for refusals that come before a request could be parsed.
pub(crate) fn write_simple(
    worker: &Worker,
    buf: &mut Vec<u8>,
    status: u16,
    extra_headers: &[u8],
    head_only: bool,
    version: Version,
    keep_alive: bool,
) {
    buf.extend_from_slice(wire::status_line(status));
    common_headers(worker, buf);
    buf.extend_from_slice(extra_headers);
    if status == 204 || status == 304 {
        end_head(buf, version, keep_alive);
        return;
    }
    let reason = wire::reason(status);
    let mut code = itoa::Buffer::new();
    let code = code.format(status);
    // <html><head><title>404 Not Found</title></head><body><h1>404 Not Found</h1></body></html>\n
    let body_len = 2 * (code.len() + 1 + reason.len()) + 64;
    buf.extend_from_slice(b"Content-Type: text/html; charset=utf-8\r\nContent-Length: ");
    buf.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
    buf.extend_from_slice(b"\r\n");
    end_head(buf, version, keep_alive);
    if head_only {
        return;
    }
    let start = buf.len();
    for part in [
        "<html><head><title>",
        code,
        " ",
        reason,
        "</title></head><body><h1>",
        code,
        " ",
        reason,
        "</h1></body></html>\n",
    ] {
        buf.extend_from_slice(part.as_bytes());
    }
    debug_assert_eq!(buf.len() - start, body_len);
}

/// The media type for a file name, by extension; text types carry `charset=utf-8`.
fn content_type(name: &[u8]) -> &'static str {
    let ext = match name.iter().rposition(|&b| b == b'.' || b == b'/') {
        Some(dot) if name[dot] == b'.' => &name[dot + 1..],
        _ => return "application/octet-stream",
    };
    let mut lower = [0u8; 8];
    if ext.len() > lower.len() {
        return "application/octet-stream";
    }
    for (l, &b) in lower.iter_mut().zip(ext) {
        *l = b.to_ascii_lowercase();
    }
    match &lower[..ext.len()] {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"json" | b"map" => "application/json",
        b"txt" | b"text" => "text/plain; charset=utf-8",
        b"md" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"xml" => "text/xml; charset=utf-8",
        b"svg" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"ico" => "image/x-icon",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"wasm" => "application/wasm",
        b"pdf" => "application/pdf",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"tar" => "application/x-tar",
        b"mp4" => "video/mp4",
        b"webm" => "video/webm",
        b"mp3" => "audio/mpeg",
        b"ogg" => "audio/ogg",
        b"wav" => "audio/wav",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str) -> Result<String, PathError> {
        let mut out = Vec::new();
        normalize(path.as_bytes(), &mut out).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn normalizes_paths() {
        assert_eq!(norm("/").unwrap(), "/");
        assert_eq!(norm("/a/b").unwrap(), "/a/b");
        assert_eq!(norm("/a//b/").unwrap(), "/a/b/");
        assert_eq!(norm("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(norm("/a/b/..").unwrap(), "/a/");
        assert_eq!(norm("/a/.").unwrap(), "/a/");
        assert_eq!(norm("/%61%2Fb").unwrap(), "/a/b");
        assert_eq!(norm("/a/%2e%2e/b").unwrap(), "/b");
        assert_eq!(norm("/..%2fx").unwrap_err(), PathError::Invalid);
    }

    #[test]
    fn refuses_escapes_nul_and_bad_escapes() {
        for bad in [
            "/..",
            "/../etc/passwd",
            "/%2e%2e/",
            "/a/../../b",
            "/%00",
            "/a%0",
            "/%zz",
        ] {
            assert_eq!(norm(bad), Err(PathError::Invalid), "{bad}");
        }
    }

    #[test]
    fn content_types() {
        assert_eq!(content_type(b"/a/index.HTML"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"/x.tar.gz"), "application/gzip");
        assert_eq!(content_type(b"/a.b/noext"), "application/octet-stream");
        assert_eq!(content_type(b"/.hidden"), "application/octet-stream");
    }
}
