//! The disk tier with large objects (docs/cache.md "Disk tier"): bodies sent with
//! sendfile(2) in cleartext, byte-exact with ranges and after a restart, warm and cold;
//! and the issue's tests at scale: a 256 MiB object for ten clients at once, a 2 GiB
//! working set through 256 MiB of memory, and memory hits beside disk misses. Their
//! origin ([`PatternOrigin`]) makes bodies of any size cheaply, and the clients compare
//! them as they arrive, without keeping them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::disk_cache::{
    body_of, file_of, get_exact, metric, on_disk, request, serve, Origin, LARGE,
};
use crate::harness::{read_request_head, read_response, Server, Site};

/// The whole body of `path` (a `/large/` object), ranges across the edges of the 1 MiB
/// regions it is sent in, and two responses on one connection, each byte-exact.
fn check_large(server: &Server, path: &str) {
    let whole = body_of(path);
    get_exact(server, path);
    let len = LARGE as u64;
    let edge = 1u64 << 20;
    for (first, last) in [
        (0, 99),
        (edge - 10, 3 * edge + 10),
        (4097, len - 1),
        (len - 5000, len - 1),
    ] {
        let range = format!("Range: bytes={first}-{last}\r\n");
        let r = request(server, "GET", path, &range);
        assert_eq!(r.status, 206, "{first}-{last}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {first}-{last}/{len}").as_str())
        );
        assert!(
            r.body == whole[first as usize..=last as usize],
            "{first}-{last}: {} bytes",
            r.body.len()
        );
    }
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n\
         GET {path} HTTP/1.1\r\nHost: test\r\nRange: bytes=-3\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let first = read_response(&mut stream, false);
    assert!(first.status == 200 && first.body == whole);
    let second = read_response(&mut stream, false);
    assert_eq!(second.status, 206);
    assert_eq!(second.body, whole[LARGE - 3..]);
}

/// A disk hit over a cleartext HTTP/1.1 connection is sent from the cache file with
/// sendfile: byte-exact, whole and in ranges, before and after a restart, without the
/// origin.
#[test]
fn a_large_disk_hit_over_cleartext_is_byte_exact_with_ranges_and_after_a_restart() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let path = "/large/sendfile";
    let (server, admin) = serve(&site, &origin, &dir, "");
    get_exact(&server, path);
    on_disk(admin, 1);
    check_large(&server, path);
    drop(server);
    let (server, admin) = serve(&site, &origin, &dir, "");
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 1.0);
    check_large(&server, path);
    // Cold: the file's pages dropped from the page cache, read back on the tier's
    // threads before they are sent.
    evict_from_page_cache(&file_of(&dir, path));
    check_large(&server, path);
    assert_eq!(origin.hits(path), 1);
    assert!(metric(admin, "tessera_cache_disk_lookups_total", &["hit"]) >= 14.0);
}

/// Drops the pages of `file` from the page cache (`POSIX_FADV_DONTNEED`: clean pages
/// go), as if it had not been read since the machine started.
fn evict_from_page_cache(file: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(file).unwrap();
    f.sync_all().unwrap();
    // SAFETY: the descriptor is open for the call.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
}

/// Held by the tests that move hundreds of MiB, one at a time: each would make the
/// others' clients (and the latencies one of them measures) wait for the machine.
static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes every [`PatternOrigin`] body repeats: a prime number of them, so that a
/// body's bytes at 1 MiB boundaries differ.
const BLOCK: usize = 1_048_573;

fn block() -> &'static [u8] {
    static BLOCK_BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BLOCK_BYTES.get_or_init(|| {
        (0..BLOCK as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    })
}

/// Where in [`block`] the body of `name` starts.
fn seed_of(name: &str) -> usize {
    name.bytes()
        .fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
        % BLOCK
}

/// Whether `bytes` are the bytes of `name`'s body from `offset` (compared a block's run
/// at a time: cheap even for hundreds of MiB).
fn pattern_matches(name: &str, offset: u64, bytes: &[u8]) -> bool {
    let block = block();
    let mut at = (seed_of(name) as u64 + offset) % BLOCK as u64;
    let mut rest = bytes;
    while !rest.is_empty() {
        let run = (BLOCK - at as usize).min(rest.len());
        if rest[..run] != block[at as usize..at as usize + run] {
            return false;
        }
        rest = &rest[run..];
        at = 0;
    }
    true
}

/// Writes `name`'s body bytes `first..end` to `w`.
fn write_pattern(w: &mut impl Write, name: &str, first: u64, end: u64) -> std::io::Result<()> {
    let block = block();
    let mut at = (seed_of(name) as u64 + first) % BLOCK as u64;
    let mut left = end - first;
    while left > 0 {
        let run = ((BLOCK as u64 - at).min(left)) as usize;
        w.write_all(&block[at as usize..at as usize + run])?;
        left -= run as u64;
        at = 0;
    }
    Ok(())
}

/// An origin of bodies made cheaply at any size: `GET /obj/SIZE/NAME` answers SIZE bytes
/// of a pattern of NAME (of `NAME~V` once [`PatternOrigin::change`] made its version V),
/// cacheable for an hour, with an ETag of NAME and the version, and honours one `Range`;
/// `/norange/SIZE/NAME` the same, but ignores `Range` (answers 200 whole). Keeps every
/// request's path and `Range`.
#[derive(Clone)]
struct PatternOrigin {
    addr: std::net::SocketAddr,
    log: RequestLog,
    version: Arc<std::sync::atomic::AtomicUsize>,
}

/// Every request's path and `Range`, in order.
type RequestLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// The pattern of `name` at `version`.
fn versioned(name: &str, version: usize) -> String {
    match version {
        0 => name.to_string(),
        v => format!("{name}~{v}"),
    }
}

impl PatternOrigin {
    fn start() -> PatternOrigin {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = PatternOrigin {
            addr: listener.local_addr().unwrap(),
            log: Arc::default(),
            version: Arc::default(),
        };
        let o = origin.clone();
        crate::harness::thread_per_connection(listener, move |stream| o.serve(stream));
        origin
    }

    fn total_hits(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// The `Range` of each request for `path` so far.
    fn ranges_of(&self, path: &str) -> Vec<Option<String>> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Every object changes: another body, another ETag.
    fn change(&self) {
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn serve(&self, stream: std::net::TcpStream) {
        // The last small write of a body is not held back for an ACK (Nagle).
        stream.set_nodelay(true).unwrap();
        let mut writer = std::io::BufWriter::with_capacity(256 << 10, stream.try_clone().unwrap());
        let mut reader = std::io::BufReader::new(stream);
        while let Some((path, fields)) = read_request_head(&mut reader) {
            let asked = fields.iter().find_map(|f| {
                let lower = f.to_ascii_lowercase();
                Some(lower.strip_prefix("range:")?.trim().to_string())
            });
            self.log.lock().unwrap().push((path.clone(), asked.clone()));
            let mut parts = path.split('/').skip(2);
            let size: u64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let version = self.version.load(std::sync::atomic::Ordering::SeqCst);
            let name = versioned(parts.next().unwrap_or(""), version);
            let range = asked
                .filter(|_| !path.starts_with("/norange/"))
                .and_then(|spec| {
                    let (a, b) = spec.strip_prefix("bytes=")?.split_once('-')?;
                    let first: u64 = a.parse().ok()?;
                    let last: u64 = b.parse::<u64>().unwrap_or(size - 1).min(size - 1);
                    (first <= last).then_some((first, last))
                });
            let (status, first, end, extra) = match range {
                Some((first, last)) => (
                    "206 Partial Content",
                    first,
                    last + 1,
                    format!("Content-Range: bytes {first}-{last}/{size}\r\n"),
                ),
                None => ("200 OK", 0, size, String::new()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nCache-Control: max-age=3600\r\n\
                 ETag: \"{name}\"\r\nAccept-Ranges: bytes\r\n{extra}\r\n",
                end - first
            );
            let sent = writer
                .write_all(head.as_bytes())
                .and_then(|()| write_pattern(&mut writer, &name, first, end))
                .and_then(|()| writer.flush());
            if sent.is_err() {
                return;
            }
        }
    }
}

/// The configuration for a [`PatternOrigin`]: `cache` and `disk` are more `[cache]` and
/// `[cache.disk]` keys, the disk tier in `dir`.
fn pattern_config(origin: &PatternOrigin, dir: &Path, cache: &str, disk: &str) -> String {
    format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
         [cache]\npurge_allow = [\"127.0.0.1\"]\n{cache}\n\
         [cache.disk]\npath = \"{}\"\n{disk}\n",
        origin.addr,
        dir.display()
    )
}

/// Starts the server of `toml`, once its disk loader has read every file.
fn serve_pattern(site: &Site, toml: &str) -> (Server, std::net::SocketAddr) {
    let server = site.serve_with(toml);
    let admin = crate::metrics::admin_addr(&server);
    crate::harness::eventually("the loader to finish", || {
        metric(admin, "tessera_cache_disk_loaded", &[]) == 1.0
    });
    (server, admin)
}

/// A response read as it arrives, its body compared with the pattern, not kept.
struct Checked {
    status: u16,
    head: String,
    body_len: u64,
    exact: bool,
}

/// Sends `GET path` (with `extra` fields) on `stream` and reads the response, checking
/// its body against `name`'s pattern from `offset`.
fn get_checked(
    stream: &mut TcpStream,
    path: &str,
    extra: &str,
    name: &str,
    offset: u64,
) -> Checked {
    // One write (write! makes several, which Nagle's algorithm would hold back).
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{extra}\r\n");
    stream.set_nodelay(true).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    read_checked(stream, name, offset)
}

fn read_checked(stream: &mut TcpStream, name: &str, offset: u64) -> Checked {
    let mut buf = vec![0u8; 256 << 10];
    let mut got = Vec::new();
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the head's end");
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
    let status = head[9..12].parse().unwrap();
    let length: u64 = head
        .lines()
        .find_map(|l| {
            let lower = l.to_ascii_lowercase();
            lower
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    let mut exact = true;
    let mut body_len = 0u64;
    let take = |bytes: &[u8], exact: &mut bool, body_len: &mut u64| {
        *exact &= pattern_matches(name, offset + *body_len, bytes);
        *body_len += bytes.len() as u64;
    };
    let first = (got.len() - head_end).min(length as usize);
    take(&got[head_end..head_end + first], &mut exact, &mut body_len);
    while body_len < length {
        let want = ((length - body_len) as usize).min(buf.len());
        let n = stream.read(&mut buf[..want]).unwrap();
        if n == 0 {
            break;
        }
        take(&buf[..n], &mut exact, &mut body_len);
    }
    Checked {
        status,
        head,
        body_len,
        exact,
    }
}

/// The size of the object of the 256 MiB tests.
const HUGE: u64 = 256 << 20;

/// The issue's test, with the disk tier's keys `disk`: a 256 MiB object from the origin,
/// fetched once (in `requests` requests) while 10 clients download it at once, each
/// byte-exact, kept as `objects` on disk; served after a restart without contacting the
/// origin; ranges inside and across 1 MiB (slices).
fn huge_for_ten_clients(disk: &str, (requests, objects): (usize, usize)) {
    let _heavy = heavy();
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let disk = format!("max_size = \"1g\"\nmax_object_size = \"512m\"\n{disk}");
    let toml = pattern_config(&origin, &dir, "max_object_size = 1048576", &disk);
    let (server, admin) = serve_pattern(&site, &toml);
    let path = format!("/obj/{HUGE}/huge");
    let barrier = Arc::new(std::sync::Barrier::new(10));
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let (addr, barrier, path) = (server.addr, barrier.clone(), path.clone());
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(60)))
                    .unwrap();
                barrier.wait();
                get_checked(&mut stream, &path, "Connection: close\r\n", "huge", 0)
            })
        })
        .collect();
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.body_len, HUGE);
        assert!(r.exact, "a body differs from the origin's");
    }
    assert_eq!(origin.total_hits(), requests);
    on_disk(admin, objects);
    drop(server);

    let (server, _admin) = serve_pattern(&site, &toml);
    let mut stream = server.connect();
    let whole = get_checked(&mut stream, &path, "", "huge", 0);
    assert!(whole.status == 200 && whole.body_len == HUGE && whole.exact);
    let mib = 1u64 << 20;
    for (first, last) in [
        (5 * mib + 100, 5 * mib + 20_000),
        (mib - 1000, 3 * mib + 1000),
        (200 * mib - 1, 200 * mib),
        (HUGE - 1000, HUGE - 1),
    ] {
        let range = format!("Range: bytes={first}-{last}\r\n");
        let r = get_checked(&mut stream, &path, &range, "huge", first);
        assert_eq!(r.status, 206, "{first}-{last}: {}", r.head);
        assert!(
            r.body_len == last - first + 1 && r.exact,
            "{first}-{last}: {} bytes",
            r.body_len
        );
    }
    assert_eq!(origin.total_hits(), requests);
}

/// [`huge_for_ten_clients`], the object fetched whole: one request, one file.
#[test]
fn a_256_mib_object_is_fetched_once_for_ten_clients_and_kept() {
    huge_for_ten_clients("", (1, 1));
}

/// [`huge_for_ten_clients`] with `slice = "1m"`: each of the 256 slices asked for once
/// (the clients that need a slice being written read it as it is written), kept as 256
/// files and the head.
#[test]
fn a_256_mib_object_in_slices_is_fetched_once_for_ten_clients_and_kept() {
    huge_for_ten_clients("slice = \"1m\"", (256, 257));
}

/// The peak resident memory of process `pid` (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib << 10
}

/// Fails with a clear message when the temporary directory's file system has less than
/// `need` bytes free.
fn needs_free_space(dir: &Path, need: u64) {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a zeroed statvfs is a valid value for the call to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `st` live room for the answer.
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    assert!(
        free >= need,
        "this test needs {} MiB free under {} (has {} MiB)",
        need >> 20,
        dir.display(),
        free >> 20
    );
}

/// The objects of the working set: 1,024 of 512 KiB (which memory takes) and 384 of
/// 4 MiB (disk only, above memory's 1 MiB per object), 2 GiB in all.
fn working_set() -> Vec<(String, u64)> {
    let small = (0..1024).map(|i| (format!("s{i}"), 512 << 10));
    let large = (0..384).map(|i| (format!("l{i}"), 4 << 20));
    // Mixed, as a site's objects are asked for.
    let mut all: Vec<_> = small.collect();
    for (i, l) in large.enumerate() {
        all.insert(i * 3 + 1, l);
    }
    all
}

/// Asks for every object of `objects` on two connections (each byte-exact).
fn download_all(server: &Server, objects: &[(String, u64)]) {
    let halves: Vec<Vec<(String, u64)>> = (0..2)
        .map(|c| objects.iter().skip(c).step_by(2).cloned().collect())
        .collect();
    let clients: Vec<_> = halves
        .into_iter()
        .map(|half| {
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                    .unwrap();
                for (name, size) in half {
                    let path = format!("/obj/{size}/{name}");
                    let r = get_checked(&mut stream, &path, "", &name, 0);
                    assert!(
                        r.status == 200 && r.body_len == size && r.exact,
                        "{path}: {}",
                        r.head
                    );
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

/// The issue's test: a working set of 2 GiB ([`working_set`]) through a 256 MiB memory
/// tier and a 4 GiB disk tier, twice (the second time in the reverse order, so that what
/// memory kept last comes first): the second pass is served from memory and disk (its
/// hit ratio is printed, and must be at least 90%), and the server's peak RSS grows by
/// no more than the memory tier's budget (256 MiB), the disk tier's own (the objects
/// waiting to be written, 64 MiB, and the chunk buffers, 16 MiB), and 160 MiB for the
/// bodies in flight and the pages the allocator keeps after a free (jemalloc gives them
/// back to the system after about 10 s): not with the working set.
#[test]
fn a_2_gib_working_set_through_256_mib_of_memory_and_4_gib_of_disk() {
    let _heavy = heavy();
    let objects = working_set();
    let total: u64 = objects.iter().map(|(_, size)| size).sum();
    assert_eq!(total, 2 << 30);
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    needs_free_space(site.dir.path(), total + (512 << 20));
    let toml = pattern_config(
        &origin,
        &dir,
        "max_size = 268435456\nmax_object_size = 1048576",
        "max_size = \"4g\"",
    );
    let (server, admin) = serve_pattern(&site, &toml);
    let pid = server.child.id();
    let before = peak_rss(pid);
    let started = std::time::Instant::now();
    download_all(&server, &objects);
    assert_eq!(origin.total_hits(), objects.len());
    // The disk's writes done before the second pass (its count of objects settled).
    let mut last = -1.0;
    crate::harness::eventually("the disk's writes to end", || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = metric(admin, "tessera_cache_disk_objects", &[]);
        std::mem::replace(&mut last, now) == now
    });
    let memory_hits = metric(admin, "tessera_cache_requests_total", &["hit"]);
    let disk_hits = metric(admin, "tessera_cache_disk_lookups_total", &["hit"]);
    let reversed: Vec<_> = objects.iter().rev().cloned().collect();
    download_all(&server, &reversed);
    let from_origin = origin.total_hits() - objects.len();
    let memory_hits = metric(admin, "tessera_cache_requests_total", &["hit"]) - memory_hits;
    let disk_hits = metric(admin, "tessera_cache_disk_lookups_total", &["hit"]) - disk_hits;
    let ratio = 1.0 - from_origin as f64 / objects.len() as f64;
    let peak = peak_rss(pid);
    println!(
        "2 GiB working set, second pass: hit ratio {:.1}% ({memory_hits} from memory, \
         {disk_hits} from disk, {from_origin} from the origin, of {}); peak RSS {} MiB \
         ({} MiB at start); {:.1} s",
        ratio * 100.0,
        objects.len(),
        peak >> 20,
        before >> 20,
        started.elapsed().as_secs_f64()
    );
    assert!(ratio >= 0.9, "hit ratio {ratio}");
    assert!(memory_hits > 0.0 && disk_hits > 0.0);
    let budget = (256 << 20) + (64 << 20) + (16 << 20) + (160 << 20);
    assert!(
        peak <= before + budget,
        "peak RSS {} MiB, {} MiB at start",
        peak >> 20,
        before >> 20
    );
}

/// The latencies of `n` memory hits of `path` (a `/obj/` object of `name`) on one
/// connection, 3 ms apart (so that they spread over a second or more), sorted.
fn hit_latencies(server: &Server, path: &str, name: &str, n: usize) -> Vec<std::time::Duration> {
    let mut stream = server.connect();
    let mut took: Vec<_> = (0..n)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(3));
            let t = std::time::Instant::now();
            let r = get_checked(&mut stream, path, "", name, 0);
            assert!(r.status == 200 && r.exact, "{}", r.head);
            t.elapsed()
        })
        .collect();
    took.sort();
    took
}

/// The issue's test: a worker serving memory hits is not delayed by other clients'
/// disk misses and cold disk reads. One worker serves a small object from memory while
/// three other clients keep asking it (a request every 2 ms each) for new objects (a
/// miss in memory and on disk, filled from the origin to disk) and for objects on disk
/// whose pages are dropped from the page cache before each request (read from the
/// disk), all above memory's per-object limit. The median latency of the memory hits
/// under that load stays within twice that without it, plus 2 ms (a bound for a shared
/// machine, not a measure of speed): a worker that waited for the disk would add the
/// disk's wait to the hits that come meanwhile.
#[test]
fn memory_hits_are_not_delayed_by_disk_misses() {
    let _heavy = heavy();
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const COLD: usize = 16;
    const SIZE: u64 = 256 << 10;
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let toml = pattern_config(&origin, &dir, "max_object_size = 16384", "");
    let (server, admin) = serve_pattern(&site, &toml);
    let hot = "/obj/10000/hot";
    let pause = || std::thread::sleep(std::time::Duration::from_millis(2));
    hit_latencies(&server, hot, "hot", 2);
    let cold: Vec<(String, std::path::PathBuf)> = (0..COLD)
        .map(|i| {
            let path = format!("/obj/{SIZE}/cold{i}");
            let mut stream = server.connect();
            let r = get_checked(&mut stream, &path, "", &format!("cold{i}"), 0);
            assert!(r.status == 200 && r.exact);
            (path, std::path::PathBuf::new())
        })
        .collect();
    on_disk(admin, COLD + 1);
    let cold: Vec<_> = cold
        .into_iter()
        .map(|(path, _)| {
            let file = file_of(&dir, &path);
            (path, file)
        })
        .collect();
    let baseline = hit_latencies(&server, hot, "hot", 300);

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    // Misses: a new object each time, fetched from the origin and filled to disk.
    let (addr, stop_, done_) = (server.addr, stop.clone(), done.clone());
    load.push(std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        for i in 0.. {
            if stop_.load(Ordering::Relaxed) {
                break;
            }
            let name = format!("miss{i}");
            let r = get_checked(&mut stream, &format!("/obj/{SIZE}/{name}"), "", &name, 0);
            assert!(r.status == 200 && r.exact);
            done_.fetch_add(1, Ordering::Relaxed);
            pause();
        }
    }));
    // Cold reads: objects on disk, their pages dropped first.
    for c in 0..2 {
        let (addr, stop_, done_, cold) = (server.addr, stop.clone(), done.clone(), cold.clone());
        load.push(std::thread::spawn(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            for i in (c..).step_by(2) {
                if stop_.load(Ordering::Relaxed) {
                    break;
                }
                let (path, file) = &cold[i % COLD];
                evict_from_page_cache(file);
                let name = format!("cold{}", i % COLD);
                let r = get_checked(&mut stream, path, "", &name, 0);
                assert!(r.status == 200 && r.exact);
                done_.fetch_add(1, Ordering::Relaxed);
                pause();
            }
        }));
    }
    crate::harness::eventually("the load to run", || done.load(Ordering::Relaxed) >= 3);
    let disk_hits = metric(admin, "tessera_cache_disk_lookups_total", &["hit"]);
    let under_load = done.load(Ordering::Relaxed);
    let loaded = hit_latencies(&server, hot, "hot", 300);
    let under_load = done.load(Ordering::Relaxed) - under_load;
    let disk_hits = metric(admin, "tessera_cache_disk_lookups_total", &["hit"]) - disk_hits;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.join().unwrap();
    }
    let (base, with_load) = (baseline[150], loaded[150]);
    println!(
        "memory hits, median (p90): {base:?} ({:?}) alone, {with_load:?} ({:?}) while \
         {under_load} objects went from disk and the origin ({disk_hits} disk hits)",
        baseline[270], loaded[270]
    );
    assert!(
        under_load >= 2 && disk_hits >= 1.0,
        "the load did not run meanwhile"
    );
    assert!(
        with_load <= 2 * base + std::time::Duration::from_millis(2),
        "memory hits took {with_load:?} under the disk load, {base:?} without"
    );
}

/// Over HTTP/2 a disk hit's body is read with pread into the stream's DATA frames (not
/// sent with sendfile): whole and in a range, byte-exact.
#[test]
fn a_large_disk_hit_over_http2_is_byte_exact() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let path = "/large/h2";
    let whole = body_of(path);
    let (server, admin) = serve(&site, &origin, &dir, "");
    get_exact(&server, path);
    on_disk(admin, 1);
    let out = site.dir.path().join("h2-body");
    let url = format!("http://{}{path}", server.addr);
    for (range, want) in [
        (None, &whole[..]),
        (Some("1048000-3145800"), &whole[1_048_000..=3_145_800]),
    ] {
        let mut curl = std::process::Command::new("curl");
        curl.args([
            "-s",
            "--max-time",
            "30",
            "--http2-prior-knowledge",
            "-H",
            "Host: test",
        ]);
        curl.args(["-w", "%{http_version} %{http_code}", "-o"])
            .arg(&out);
        if let Some(range) = range {
            curl.args(["-r", range]);
        }
        let done = curl.arg(&url).output().expect("curl");
        let status = String::from_utf8_lossy(&done.stdout).to_string();
        let code = if range.is_some() { "2 206" } else { "2 200" };
        assert_eq!(status, code, "{range:?}");
        let got = std::fs::read(&out).unwrap();
        assert!(got == want, "{range:?}: {} bytes", got.len());
    }
    assert_eq!(origin.hits(path), 1);
}

/// The size of the sliced objects of the tests below: five slices of 1 MiB and a short
/// sixth.
const SLICED: u64 = (5 << 20) + 1234;

/// A server whose disk tier fetches objects in slices of 1 MiB (memory takes 1 MiB at
/// most per object).
fn serve_sliced(site: &Site, origin: &PatternOrigin, dir: &Path) -> (Server, std::net::SocketAddr) {
    let toml = pattern_config(origin, dir, "max_object_size = 1048576", "slice = \"1m\"");
    serve_pattern(site, &toml)
}

/// `GET path` on a new connection, checked against `name`'s pattern from `offset`.
fn get_sliced(server: &Server, path: &str, extra: &str, name: &str, offset: u64) -> Checked {
    let mut stream = server.connect();
    get_checked(
        &mut stream,
        path,
        &format!("{extra}Connection: close\r\n"),
        name,
        offset,
    )
}

/// The `Range` a slice `n` of a [`SLICED`] object is asked for with.
fn slice_range(n: u64) -> Option<String> {
    let first = n << 20;
    Some(format!(
        "bytes={first}-{}",
        (first + (1 << 20)).min(SLICED) - 1
    ))
}

#[test]
fn an_object_larger_than_a_slice_is_fetched_and_kept_in_slices() {
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve_sliced(&site, &origin, &dir);
    let path = format!("/obj/{SLICED}/s");
    let r = get_sliced(&server, &path, "", "s", 0);
    assert!(
        r.status == 200 && r.body_len == SLICED && r.exact,
        "{}",
        r.head
    );
    // Asked for in six ranges, each once; kept as six slices and the head.
    let asked: Vec<_> = (0..6).map(slice_range).collect();
    assert_eq!(origin.ranges_of(&path), asked);
    on_disk(admin, 7);
    let r = get_sliced(&server, &path, "", "s", 0);
    assert!(r.status == 200 && r.body_len == SLICED && r.exact);
    // Ranges across slices and inside one, from the slices.
    for (first, last) in [
        (1_048_000, 3_145_800),
        (4_200_000, 4_200_099),
        (SLICED - 10, SLICED - 1),
    ] {
        let range = format!("Range: bytes={first}-{last}\r\n");
        let r = get_sliced(&server, &path, &range, "s", first);
        assert_eq!(r.status, 206, "{first}-{last}: {}", r.head);
        assert!(r.body_len == last - first + 1 && r.exact, "{first}-{last}");
        assert!(
            r.head.contains(&format!("bytes {first}-{last}/{SLICED}")),
            "{}",
            r.head
        );
    }
    assert_eq!(origin.total_hits(), 6);
    // A slice lost from disk: only it is fetched again.
    std::fs::remove_file(file_of(&dir, &format!("{path}#slice=2"))).unwrap();
    let r = get_sliced(&server, &path, "", "s", 0);
    assert!(r.status == 200 && r.body_len == SLICED && r.exact);
    assert_eq!(origin.ranges_of(&path)[6..], [slice_range(2)]);
    on_disk(admin, 7);
    drop(server);

    // After a restart, from the slices on disk.
    let (server, admin) = serve_pattern(
        &site,
        &pattern_config(&origin, &dir, "max_object_size = 1048576", "slice = \"1m\""),
    );
    let r = get_sliced(&server, &path, "Range: bytes=-1000\r\n", "s", SLICED - 1000);
    assert!(
        r.status == 206 && r.body_len == 1000 && r.exact,
        "{}",
        r.head
    );
    let r = get_sliced(&server, &path, "", "s", 0);
    assert!(r.status == 200 && r.body_len == SLICED && r.exact);
    assert_eq!(origin.total_hits(), 7);
    // A purge removes the head and its slices.
    let mut stream = server.connect();
    stream
        .write_all(
            format!("PURGE {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);
    on_disk(admin, 0);
}

#[test]
fn a_sliced_route_stores_small_objects_and_ones_whose_origin_ignores_range_whole() {
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve_sliced(&site, &origin, &dir);
    // Smaller than a slice: its 206 is the whole object, stored as its 200 (in memory
    // and on disk).
    let small = "/obj/5000/small";
    for _ in 0..2 {
        let r = get_sliced(&server, small, "", "small", 0);
        assert!(
            r.status == 200 && r.body_len == 5000 && r.exact,
            "{}",
            r.head
        );
        assert!(
            !r.head.to_ascii_lowercase().contains("content-range"),
            "{}",
            r.head
        );
    }
    assert_eq!(
        origin.ranges_of(small),
        [Some("bytes=0-1048575".to_string())]
    );
    // An origin that ignores Range: its 200 is the whole object, kept whole.
    let whole = format!("/norange/{SLICED}/n");
    for _ in 0..2 {
        let r = get_sliced(&server, &whole, "", "n", 0);
        assert!(
            r.status == 200 && r.body_len == SLICED && r.exact,
            "{}",
            r.head
        );
    }
    let r = get_sliced(
        &server,
        &whole,
        "Range: bytes=3000000-3000009\r\n",
        "n",
        3_000_000,
    );
    assert!(r.status == 206 && r.body_len == 10 && r.exact);
    assert_eq!(origin.ranges_of(&whole).len(), 1);
    on_disk(admin, 2);
}

#[test]
fn a_changed_etag_between_slices_drops_the_object_and_it_is_fetched_again() {
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve_sliced(&site, &origin, &dir);
    let path = format!("/obj/{SLICED}/e");
    let r = get_sliced(&server, &path, "", "e", 0);
    assert!(r.status == 200 && r.exact);
    on_disk(admin, 7);
    // The object changes at the origin, and a slice is lost from disk: the slices
    // before it are sent, then the one fetched is another object's.
    origin.change();
    std::fs::remove_file(file_of(&dir, &format!("{path}#slice=3"))).unwrap();
    let mut stream = server.connect();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
    let raw = crate::harness::read_to_close(&mut stream);
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = &raw[head_end..];
    assert!(
        body.len() as u64 <= 3 << 20,
        "{} bytes: not broken off",
        body.len()
    );
    assert!(
        pattern_matches("e", 0, body),
        "the slices before the change"
    );
    // Dropped: the head and its slices.
    on_disk(admin, 0);
    // Fetched again, whole and the new object's.
    let r = get_sliced(&server, &path, "", &versioned("e", 1), 0);
    assert!(
        r.status == 200 && r.body_len == SLICED && r.exact,
        "{}",
        r.head
    );
    on_disk(admin, 7);
}

#[test]
fn a_range_of_a_new_sliced_object_fetches_the_first_slice_and_its_own() {
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve_sliced(&site, &origin, &dir);
    let path = format!("/obj/{SLICED}/r");
    let (first, last) = (3_200_000, 3_200_999);
    let range = format!("Range: bytes={first}-{last}\r\n");
    let r = get_sliced(&server, &path, &range, "r", first);
    assert!(
        r.status == 206 && r.body_len == 1000 && r.exact,
        "{}",
        r.head
    );
    // The first slice (which gives the object's length) and the range's, not the rest.
    assert_eq!(origin.ranges_of(&path), [slice_range(0), slice_range(3)]);
    on_disk(admin, 3);
    // The whole later: the missing slices only.
    let r = get_sliced(&server, &path, "", "r", 0);
    assert!(r.status == 200 && r.body_len == SLICED && r.exact);
    let later: Vec<_> = [1, 2, 4, 5].into_iter().map(slice_range).collect();
    assert_eq!(origin.ranges_of(&path)[2..], later[..]);
    on_disk(admin, 7);
}

#[test]
fn clients_that_find_the_same_slice_missing_at_once_make_one_fetch_of_it() {
    let (site, origin) = (Site::new(), PatternOrigin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve_sliced(&site, &origin, &dir);
    let path = format!("/obj/{SLICED}/m");
    let r = get_sliced(&server, &path, "", "m", 0);
    assert!(r.status == 200 && r.body_len == SLICED && r.exact);
    on_disk(admin, 7);
    // Slice 2's file is lost: the lookups of it go to the tier's threads and find it
    // gone; the first to come back starts its fetch, and every other reads that one
    // (the claim of a slice's fill is one step: disk::tests checks it on its own).
    std::fs::remove_file(file_of(&dir, &format!("{path}#slice=2"))).unwrap();
    let (first, last) = (2_100_000, 2_300_000);
    let range = format!("Range: bytes={first}-{last}\r\n");
    let start = std::sync::Barrier::new(12);
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..12)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    get_sliced(&server, &path, &range, "m", first)
                })
            })
            .collect();
        for c in clients {
            let r = c.join().unwrap();
            assert!(
                r.status == 206 && r.body_len == last - first + 1 && r.exact,
                "{}",
                r.head
            );
        }
    });
    assert_eq!(origin.ranges_of(&path)[6..], [slice_range(2)]);
    on_disk(admin, 7);
}
