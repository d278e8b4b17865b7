//! Static files: path decoding and normalisation, opening beneath the root, and the
//! responses for files and directories with the semantics of RFC 9110: validators and
//! conditional requests, byte ranges, OPTIONS, precompressed siblings, listings.

pub(crate) mod compressed;
mod listing;
pub(crate) mod open;

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use handler::{Body, Response, ResponseHead};
use wire::{Framing, Method, Request};

use crate::config::CacheControlRule;
use crate::facts::ConnFacts;
use crate::net::output::Output;
use crate::reply::{simple, HeadWriter};
use crate::sites::Site;
use crate::sys;
use crate::worker::Worker;
pub(crate) use open::FileEntry;
use open::{AcceptEncoding, Coding, Identities, Identity, Resource};
// The conditional and range code is wire's, shared with the proxy's cache.
use wire::conditional::{self, Conditions, Outcome, Validators};
use wire::range;
use wire::range::{content_range, Ranges, CONTENT_RANGE_MAX};

/// What a static resource allows: the Allow header of 405s and OPTIONS answers.
const ALLOW: &[(&[u8], &[u8])] = &[(b"Allow", b"GET, HEAD, OPTIONS")];

/// Answers a request for a static file. Writes the whole response into `out`. `path`
/// is the request's path decoded and normalised (`None`: it does not normalise, 400).
pub(crate) fn respond(
    req: &Request<'_, '_>,
    path: Option<&[u8]>,
    worker: &Worker,
    conn: &ConnFacts,
    site: &Site,
    out: &mut Output,
    keep_alive: bool,
) {
    let get = match req.method {
        Method::Get => true,
        Method::Head => false,
        Method::Options => return options(req, path, worker, conn, site, out, keep_alive),
        Method::Other => return simple(worker, conn, out, req, keep_alive, 501, &[]),
        // Methods tessera knows but files do not support, TRACE among them: RFC 9110
        // section 9.3.8 leaves TRACE optional, and echoing requests back only helps
        // cross-site tracing attacks.
        _ => return simple(worker, conn, out, req, keep_alive, 405, ALLOW),
    };
    let conditions = Conditions::from_headers(req.headers);
    let accept = if site.precompressed || site.compression.is_some() {
        AcceptEncoding::parse(conditions.accept_encoding)
    } else {
        AcceptEncoding::IDENTITY
    };
    let entry = match lookup(path, worker, site, accept) {
        Ok(entry) => entry,
        Err(Miss::Status(status)) => {
            return simple(worker, conn, out, req, keep_alive, status, &[])
        }
        Err(Miss::AddSlash) => return redirect_with_slash(worker, conn, out, req, keep_alive),
        // A listing is generated for this request alone: no validators, no ranges.
        Err(Miss::Listing(entry)) => {
            return send_whole(worker, conn, out, req, keep_alive, entry, get)
        }
    };
    let now = worker.clock.second() as i64;
    let validators = Validators::strong(entry.etag(), entry.mtime);
    match conditional::evaluate(&conditions, validators, now) {
        Outcome::Proceed => {}
        Outcome::NotModified => {
            let mut head = HeadWriter::start(worker, conn, out, 304);
            head.block(&entry, entry.validators());
            head.end(Framing::None, req.version, keep_alive);
            return;
        }
        Outcome::PreconditionFailed => return simple(worker, conn, out, req, keep_alive, 412, &[]),
    }
    // Range is defined for GET only (RFC 9110 section 14.2); HEAD gets the 200 head.
    if let (true, Some(range)) = (get, conditions.range) {
        let applies = match conditions.if_range {
            Some(validator) => conditional::if_range_holds(validator, validators),
            None => true,
        };
        if applies {
            match range::parse(range, entry.len) {
                Ranges::Ignore => {}
                Ranges::Unsatisfiable => {
                    return unsatisfiable(worker, conn, out, req, keep_alive, entry.len);
                }
                Ranges::Satisfiable(set) => {
                    return match set.as_slice() {
                        &[(first, last)] => {
                            send_range(worker, conn, out, req, keep_alive, entry, (first, last))
                        }
                        ranges => send_multipart(worker, conn, out, req, keep_alive, entry, ranges),
                    };
                }
            }
        }
    }
    send_whole(worker, conn, out, req, keep_alive, entry, get)
}

/// `OPTIONS *` asks about the server, `OPTIONS /path` about one resource: both are
/// answered with what a static file allows, the latter only if the resource exists.
fn options(
    req: &Request<'_, '_>,
    path: Option<&[u8]>,
    worker: &Worker,
    conn: &ConnFacts,
    site: &Site,
    out: &mut Output,
    keep_alive: bool,
) {
    if req.path == b"*" {
        return simple(worker, conn, out, req, keep_alive, 204, ALLOW);
    }
    match lookup(path, worker, site, AcceptEncoding::IDENTITY) {
        Ok(_) | Err(Miss::AddSlash | Miss::Listing(_)) => {
            simple(worker, conn, out, req, keep_alive, 204, ALLOW)
        }
        Err(Miss::Status(status)) => simple(worker, conn, out, req, keep_alive, status, &[]),
    }
}

/// 200 with the whole representation.
fn send_whole(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    entry: Arc<FileEntry>,
    get: bool,
) {
    let mut head = HeadWriter::start(worker, conn, out, 200);
    head.block(&entry, entry.head());
    head.end(Framing::Length(entry.len), req.version, keep_alive);
    if get && entry.len > 0 {
        let len = entry.len;
        push_body(out, entry, 0, len);
    }
}

/// 206 with one range: the slice goes out with sendfile from its offset (or from memory).
fn send_range(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    entry: Arc<FileEntry>,
    (first, last): (u64, u64),
) {
    let mut head = HeadWriter::start(worker, conn, out, 206);
    head.block(&entry, entry.partial_head());
    let mut range = [0u8; CONTENT_RANGE_MAX];
    head.field(
        b"Content-Range",
        content_range(&mut range, first, last, entry.len),
    );
    let length = Framing::Length(last - first + 1);
    head.end(length, req.version, keep_alive);
    push_body(out, entry, first, last - first + 1);
}

/// 206 with several ranges as multipart/byteranges (RFC 9110 section 14.6), each part
/// sent from the file (or memory) like a single range.
fn send_multipart(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    entry: Arc<FileEntry>,
    ranges: &[(u64, u64)],
) {
    let boundary = range::boundary();
    let content_type = entry.content_type.as_bytes();
    let length = range::multipart_length(ranges, &boundary, content_type, entry.len);
    let mut head = HeadWriter::start(worker, conn, out, 206);
    let mut room = [0u8; 64];
    head.field(b"Content-Type", range::multipart_type(&mut room, &boundary));
    head.block(&entry, entry.multipart_head());
    head.end(Framing::Length(length), req.version, keep_alive);
    for &(first, last) in ranges {
        range::part_head(out.buf(), &boundary, content_type, (first, last), entry.len);
        push_body(out, entry.clone(), first, last - first + 1);
    }
    range::closing(out.buf(), &boundary);
}

/// 416 (RFC 9110 section 15.5.17), saying how long the representation is.
fn unsatisfiable(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    len: u64,
) {
    let mut value = [0u8; 32];
    let mut cursor = &mut value[..];
    // At most 20 digits: always fits.
    let _ = write!(cursor, "bytes */{len}");
    let used = 32 - cursor.len();
    simple(
        worker,
        conn,
        out,
        req,
        keep_alive,
        416,
        &[(b"Content-Range", &value[..used])],
    );
}

fn push_body(out: &mut Output, entry: Arc<FileEntry>, offset: u64, len: u64) {
    if len == 0 {
        return;
    }
    if entry.in_memory {
        out.push_memory(entry, offset as usize, (offset + len) as usize);
    } else {
        out.push_file(entry, offset, len);
    }
}

/// Why a path has no cached file to send.
enum Miss {
    Status(u16),
    /// The path names a directory but lacks the trailing slash.
    AddSlash,
    /// A directory without an index, listed (`autoindex`).
    Listing(Arc<FileEntry>),
}

/// The page of the site's root at `path` as a response of `status` (`error_page`): the
/// file's bytes and its type, without validators or ranges; `None` when there is no such
/// file, or it is over 1 MiB (an error page is small).
pub(crate) fn page(status: u16, path: &[u8], worker: &Worker, site: &Site) -> Option<Response> {
    const MAX_PAGE: u64 = 1 << 20;
    let entry = lookup(Some(path), worker, site, AcceptEncoding::IDENTITY).ok()?;
    let body = match entry.in_memory {
        true => bytes::Bytes::copy_from_slice(entry.body()),
        false if entry.len <= MAX_PAGE => {
            use std::os::unix::fs::FileExt;
            let mut bytes = vec![0u8; entry.len as usize];
            entry.file.read_exact_at(&mut bytes, 0).ok()?;
            bytes.into()
        }
        false => return None,
    };
    let mut head = ResponseHead::new(status);
    head.append(b"Content-Type", entry.content_type.as_bytes());
    Some(Response {
        head,
        body: Body::Full(body),
        relayed: false,
    })
}

/// A file (or a directory's listing) for a route whose filter rewrites bodies (a Lua
/// `body_filter`): a 200 whose body streams from the file as identity bytes, for the
/// filter to see and the compression after it to encode, instead of the head and
/// `sendfile` the files write otherwise. Without validators, ranges or Accept-Ranges
/// (the filter changes the bytes they would describe). `None` for anything else (not a
/// GET or HEAD, no such file, a redirect): the files answer it as usual, unfiltered.
pub(crate) fn filtered(
    req: &Request<'_, '_>,
    path: Option<&[u8]>,
    worker: &Worker,
    site: &Site,
) -> Option<Response> {
    if !matches!(req.method, Method::Get | Method::Head) {
        return None;
    }
    let entry = match lookup(path, worker, site, AcceptEncoding::IDENTITY) {
        Ok(entry) | Err(Miss::Listing(entry)) => entry,
        Err(_) => return None,
    };
    let mut head = ResponseHead::new(200);
    head.append(b"Content-Type", entry.content_type.as_bytes());
    let body = match entry.in_memory {
        true => Body::Full(bytes::Bytes::copy_from_slice(entry.body())),
        false => Body::stream(Some(entry.len), FileChunks { entry, offset: 0 }),
    };
    Some(Response {
        head,
        body,
        relayed: false,
    })
}

/// A file read in pieces of [`FILE_CHUNK`] bytes ([`filtered`]).
struct FileChunks {
    entry: Arc<FileEntry>,
    offset: u64,
}

/// How much of a filtered file is read at a time.
const FILE_CHUNK: usize = 16 * 1024;

impl handler::Chunks for FileChunks {
    fn poll_chunk(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<bytes::Bytes, handler::BodyError>>> {
        use std::os::unix::fs::FileExt;
        let this = self.get_mut();
        let left = this.entry.len.saturating_sub(this.offset);
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        // A regular file's page-cache read, as sendfile's would be: it does not wait on
        // the network.
        let mut piece = vec![0u8; left.min(FILE_CHUNK as u64) as usize];
        let read = match this.entry.file.read_at(&mut piece, this.offset) {
            // The file shrank since it was opened: the body ends short, as a cut-off.
            Ok(0) => Err(handler::BodyError(
                "the file shrank while it was read".into(),
            )),
            Ok(n) => Ok(n),
            Err(e) => Err(handler::BodyError(format!("cannot read the file: {e}"))),
        };
        std::task::Poll::Ready(Some(read.map(|n| {
            piece.truncate(n);
            this.offset += n as u64;
            piece.into()
        })))
    }
}

/// Whether a normalised path names something to serve: a file, a directory's index (the
/// path ending in `/`), or its listing (`try_files`).
pub(crate) fn exists(path: &[u8], worker: &Worker, site: &Site) -> bool {
    matches!(
        lookup(Some(path), worker, site, AcceptEncoding::IDENTITY),
        Ok(_) | Err(Miss::Listing(_))
    )
}

/// The representation to send for the request's path: from the shared cache when it was
/// checked recently (the hot path: one shard lock, no system call, no allocation), else
/// from the file system.
fn lookup(
    key: Option<&[u8]>,
    worker: &Worker,
    site: &Site,
    accept: AcceptEncoding,
) -> Result<Arc<FileEntry>, Miss> {
    let Some(key) = key else {
        return Err(Miss::Status(400));
    };
    let mut cpath = worker.cpath.borrow_mut();
    let cpath = &mut *cpath;
    let now = worker.clock.millis();
    let cached = site.files.get(key, now, site.file_cache_valid_ms, accept);
    if let Some(metrics) = worker.metrics() {
        metrics.file_cache(cached.is_some());
    }
    match cached {
        Some(entry) => Ok(entry),
        None => open(site, key, cpath, now, accept),
    }
}

/// Opens the file for `key` (a normalised path) and its precompressed siblings; keeps
/// the cached entry when they are the files it holds, else caches them anew.
fn open(
    site: &Site,
    key: &[u8],
    cpath: &mut Vec<u8>,
    now: u64,
    accept: AcceptEncoding,
) -> Result<Arc<FileEntry>, Miss> {
    // No root: no files, every path is missing.
    let root = site.root.as_ref().ok_or(Miss::Status(404))?.as_raw_fd();
    let is_dir_request = key.ends_with(b"/");
    cpath.clear();
    if key.len() > 1 {
        cpath.extend_from_slice(&key[1..]);
    }
    if is_dir_request {
        cpath.extend_from_slice(site.index.as_bytes());
    }
    cpath.push(0);
    let name = CStr::from_bytes_with_nul(cpath).map_err(|_| Miss::Status(400))?;
    let file = match sys::open_beneath(root, name, libc::O_RDONLY) {
        Ok(file) => file,
        Err(e) => {
            site.files.remove(key);
            if is_dir_request && e.raw_os_error() == Some(libc::ENOENT) {
                return directory_without_index(site, key, cpath);
            }
            return Err(Miss::Status(status_for(&e)));
        }
    };
    let meta = file.metadata().map_err(|e| Miss::Status(status_for(&e)))?;
    if meta.is_dir() {
        site.files.remove(key);
        return Err(if is_dir_request {
            Miss::Status(403)
        } else {
            Miss::AddSlash
        });
    }
    if !meta.is_file() {
        site.files.remove(key);
        return Err(Miss::Status(403));
    }
    let plain = Identity::of(&meta);
    let (brotli, gzip) = if site.precompressed {
        (sibling(root, cpath, b".br"), sibling(root, cpath, b".gz"))
    } else {
        (None, None)
    };
    let found = Identities {
        plain,
        brotli: brotli.as_ref().map(|(_, id)| *id),
        gzip: gzip.as_ref().map(|(_, id)| *id),
    };
    if let Some(entry) = site.files.revalidate(key, now, &found, accept) {
        return Ok(entry);
    }
    // New or changed: format the entries once, outside the cache's lock.
    let content_type = content_type(if is_dir_request {
        site.index.as_bytes()
    } else {
        key
    });
    let policy = site.compression.as_ref().filter(|p| {
        p.compresses_type(content_type.as_bytes())
            && (p.min_length..=crate::files::compressed::MAX_FILE_SIZE).contains(&plain.len)
            && !crate::files::compressed::no_transform(&site.cache_control, key)
    });
    let varies = brotli.is_some() || gzip.is_some() || policy.is_some();
    let extra = path_headers(&site.cache_control, key, varies);
    let min = site.sendfile_min_size;
    let load = |(file, id): (File, Identity), coding| {
        FileEntry::load(file, id, content_type, coding, &extra, min)
    };
    let has = (brotli.is_some(), gzip.is_some());
    let mut resource = Resource::new(
        load((file, plain), Coding::Identity),
        brotli.map(|f| load(f, Coding::Brotli)),
        gzip.map(|f| load(f, Coding::Gzip)),
        now,
    );
    if let Some(policy) = policy {
        resource.compressed =
            crate::files::compressed::forms(policy, site, &resource.plain, has, &extra);
    }
    let entry = resource.select(accept).clone();
    site.files.insert(key, resource);
    Ok(entry)
}

/// `cpath` (NUL-terminated) with `suffix` appended, opened if it is a regular file.
/// `cpath` is left as it was.
fn sibling(root: RawFd, cpath: &mut Vec<u8>, suffix: &[u8]) -> Option<(File, Identity)> {
    let base = cpath.len() - 1;
    cpath.truncate(base);
    cpath.extend_from_slice(suffix);
    cpath.push(0);
    let found = CStr::from_bytes_with_nul(cpath)
        .ok()
        .and_then(|name| sys::open_beneath(root, name, libc::O_RDONLY).ok())
        .and_then(|file| {
            let meta = file.metadata().ok()?;
            meta.is_file().then(|| (file, Identity::of(&meta)))
        });
    cpath.truncate(base);
    cpath.push(0);
    found
}

/// A directory request whose index does not exist: a listing when `autoindex` is on,
/// else 403 as nginx answers (404 if the directory itself does not exist).
fn directory_without_index(
    site: &Site,
    key: &[u8],
    cpath: &mut Vec<u8>,
) -> Result<Arc<FileEntry>, Miss> {
    cpath.clear();
    if key.len() > 1 {
        cpath.extend_from_slice(&key[1..]);
    } else {
        cpath.push(b'.');
    }
    cpath.push(0);
    let dir = CStr::from_bytes_with_nul(cpath).map_err(|_| Miss::Status(400))?;
    let root = site.root.as_ref().ok_or(Miss::Status(404))?.as_raw_fd();
    if !site.autoindex {
        return match sys::open_beneath(root, dir, libc::O_PATH | libc::O_DIRECTORY) {
            Ok(_) => Err(Miss::Status(403)),
            Err(e) => Err(Miss::Status(status_for(&e))),
        };
    }
    let dir = sys::open_beneath(root, dir, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| Miss::Status(status_for(&e)))?;
    let html = listing::render(&dir, key).map_err(|e| Miss::Status(status_for(&e)))?;
    Err(Miss::Listing(Arc::new(FileEntry::generated(
        dir,
        html,
        "text/html; charset=utf-8",
    ))))
}

/// The header lines that depend on the path: Vary when the response depends on
/// Accept-Encoding, and the Cache-Control of the longest matching configured prefix.
fn path_headers(rules: &[CacheControlRule], key: &[u8], has_siblings: bool) -> Vec<u8> {
    let mut extra = Vec::new();
    if has_siblings {
        extra.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
    let rule = rules
        .iter()
        .filter(|rule| key.starts_with(rule.prefix.as_bytes()))
        .max_by_key(|rule| rule.prefix.len());
    if let Some(rule) = rule {
        extra.extend_from_slice(b"Cache-Control: ");
        extra.extend_from_slice(rule.value.as_bytes());
        extra.extend_from_slice(b"\r\n");
    }
    extra
}

fn status_for(e: &io::Error) -> u16 {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => 404,
        // EXDEV: the path or a symlink on it leads outside the root.
        Some(libc::EACCES | libc::EPERM | libc::EXDEV | libc::ELOOP) => 403,
        _ => 500,
    }
}

fn redirect_with_slash(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
) {
    let (path, query) = match memchr::memchr(b'?', req.path) {
        Some(q) => req.path.split_at(q),
        None => (req.path, &b""[..]),
    };
    let mut location = Vec::with_capacity(path.len() + query.len() + 1);
    location.extend_from_slice(path);
    location.push(b'/');
    location.extend_from_slice(query);
    simple(
        worker,
        conn,
        out,
        req,
        keep_alive,
        301,
        &[(b"Location", &location)],
    );
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

    #[test]
    fn content_types() {
        assert_eq!(content_type(b"/a/index.HTML"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"/x.tar.gz"), "application/gzip");
        assert_eq!(content_type(b"/a.b/noext"), "application/octet-stream");
        assert_eq!(content_type(b"/.hidden"), "application/octet-stream");
    }
}
