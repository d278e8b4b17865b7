//! The cache's disk tier (`[cache.disk]`, docs/cache.md "Disk tier"): objects kept in
//! files in a temporary directory, served after a restart without the origin, objects
//! above the memory tier's limit kept on disk only, truncated and corrupted files
//! dropped at load, invalidations, `inactive`, `min_uses`, `max_size`, and ranges.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::harness::{
    check_config_output, eventually, read_request_head, read_response, read_to_close, Response,
    Server, Site,
};
use crate::metrics::{admin_addr, admin_get, json_sum, promtool_check, samples, status_json, sum};

/// The memory tier's per-object limit in these tests; `/big/` objects are above it.
pub(super) const MEMORY_LIMIT: usize = 1 << 20;
/// The size of a `/big/` object.
pub(super) const BIG: usize = 2 << 20;

/// An origin that counts requests per path:
/// - `/small/X`: 10 000 bytes, `max-age=3600`, `Surrogate-Key: tag-X all`
/// - `/big/X`: [`BIG`] bytes, `max-age=3600`, `Surrogate-Key: tag-X all`
/// - `/large/X`: [`LARGE`] bytes, the same
/// - `/vary/X`: the Accept-Language, `Vary: Accept-Language`, `max-age=3600`
/// - `/slow/...`: the first half of the body, then the rest once [`Origin::open`] is called
/// - `/broken/...`: the head and half the body, then the connection closed once
///   [`Origin::open`] is called
#[derive(Clone)]
pub(super) struct Origin {
    pub(super) addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

/// The size of a `/large/` object: several MiB, not a multiple of a page.
pub(super) const LARGE: usize = (5 << 20) + 4321;

/// The body the origin sends for `path`.
pub(super) fn body_of(path: &str) -> Vec<u8> {
    let size = if path.contains("/big/") {
        BIG
    } else if path.contains("/large/") {
        LARGE
    } else {
        10_000
    };
    let seed = path
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    (0..size as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

impl Origin {
    pub(super) fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = Origin {
            addr: listener.local_addr().unwrap(),
            hits: Arc::default(),
            gate: Arc::default(),
        };
        let o = origin.clone();
        crate::harness::thread_per_connection(listener, move |stream| o.serve(stream));
        origin
    }

    /// Lets `/slow/` bodies end.
    pub(super) fn open(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }

    pub(super) fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn serve(&self, stream: TcpStream) {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while let Some((path, fields)) = read_request_head(&mut reader) {
            *self.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
            let tag = path.rsplit('/').next().unwrap_or("");
            let (body, extra) = if path.starts_with("/vary/") {
                let language = fields
                    .iter()
                    .find_map(|f| {
                        let lower = f.to_ascii_lowercase();
                        lower
                            .strip_prefix("accept-language:")
                            .map(|v| v.trim().to_string())
                    })
                    .unwrap_or_default();
                (
                    format!("language {language}").into_bytes(),
                    "Vary: Accept-Language\r\n".to_string(),
                )
            } else {
                (body_of(&path), format!("Surrogate-Key: tag-{tag} all\r\n"))
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nCache-Control: max-age=3600\r\n{extra}\r\n",
                body.len()
            );
            if writer.write_all(head.as_bytes()).is_err() {
                return;
            }
            let half = body.len() / 2;
            if path.starts_with("/slow/") || path.starts_with("/broken/") {
                if writer.write_all(&body[..half]).is_err() {
                    return;
                }
                let mut open = self.gate.0.lock().unwrap();
                while !*open {
                    open = self.gate.1.wait(open).unwrap();
                }
                drop(open);
                if path.starts_with("/broken/") || writer.write_all(&body[half..]).is_err() {
                    return;
                }
                continue;
            }
            if writer.write_all(&body).is_err() {
                return;
            }
        }
    }
}

/// The configuration: the memory tier's limit at [`MEMORY_LIMIT`], the disk tier in
/// `dir` with `disk` (more `[cache.disk]` keys), PURGE from the loopback, the admin
/// listener on.
pub(super) fn config(origin: &Origin, dir: &Path, disk: &str) -> String {
    format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/off/\"\nupstream = \"origin\"\n[route.cache]\ndisk = false\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
         [cache]\nmax_object_size = {MEMORY_LIMIT}\npurge_allow = [\"127.0.0.1\"]\n\
         [cache.disk]\npath = \"{}\"\n{disk}\n",
        origin.addr,
        dir.display()
    )
}

/// A server with the disk tier in `dir`, once its loader has read every file.
pub(super) fn serve(site: &Site, origin: &Origin, dir: &Path, disk: &str) -> (Server, SocketAddr) {
    let server = site.serve_with(&config(origin, dir, disk));
    let admin = admin_addr(&server);
    eventually("the loader to finish", || {
        metric(admin, "tessera_cache_disk_loaded", &[]) == 1.0
    });
    (server, admin)
}

pub(super) fn metric(admin: SocketAddr, name: &str, parts: &[&str]) -> f64 {
    let (_, text) = admin_get(admin, "/metrics", "");
    sum(&samples(&text), name, parts)
}

/// Waits until the disk tier holds `n` objects.
pub(super) fn on_disk(admin: SocketAddr, n: usize) {
    eventually(&format!("{n} objects on disk"), || {
        metric(admin, "tessera_cache_disk_objects", &[]) == n as f64
    });
}

pub(super) fn request(server: &Server, method: &str, path: &str, extra: &str) -> Response {
    let mut stream = server.connect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: test\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, method == "HEAD")
}

/// `GET path`, checked byte-exact against what the origin sends.
pub(super) fn get_exact(server: &Server, path: &str) {
    let r = request(server, "GET", path, "");
    assert_eq!(r.status, 200, "{path}");
    assert!(
        r.body == body_of(path),
        "{path}: the body differs ({} bytes)",
        r.body.len()
    );
}

/// The object files under `dir` (not those being written).
pub(super) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().unwrap() != "tmp" {
                dirs.push(p);
            } else if p.is_file() {
                found.push(p);
            }
        }
    }
    found
}

/// Asserts that the file of `path` ends with its body, which starts on a page (sendfile
/// from an offset within a page costs more: file.rs).
fn body_starts_on_a_page(dir: &Path, path: &str) {
    let file = std::fs::read(file_of(dir, path)).unwrap();
    let whole = body_of(path);
    assert!(file.ends_with(&whole));
    assert_eq!((file.len() - whole.len()) % 4096, 0, "{path}");
}

/// The file that holds the object of `path` (its header names the key).
pub(super) fn file_of(dir: &Path, path: &str) -> PathBuf {
    let key = format!("test{path}");
    files(dir)
        .into_iter()
        .find(|f| {
            let head = std::fs::read(f).unwrap();
            let head = &head[..head.len().min(4096)];
            head.windows(key.len() + 1)
                .any(|w| &w[..key.len()] == key.as_bytes() && w[key.len()] < b' ')
        })
        .unwrap_or_else(|| panic!("no file holds {key}"))
}

#[test]
fn objects_are_served_from_disk_after_a_restart_without_the_origin() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    get_exact(&server, "/small/a");
    get_exact(&server, "/big/b");
    let fr = request(&server, "GET", "/vary/c", "Accept-Language: fr\r\n");
    let de = request(&server, "GET", "/vary/c", "Accept-Language: de\r\n");
    assert_eq!(
        (fr.body.as_slice(), de.body.as_slice()),
        (&b"language fr"[..], &b"language de"[..])
    );
    on_disk(admin, 4);
    drop(server);

    let (server, admin) = serve(&site, &origin, &dir, "");
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 4.0);
    get_exact(&server, "/small/a");
    get_exact(&server, "/big/b");
    get_exact(&server, "/big/b");
    let de = request(&server, "GET", "/vary/c", "Accept-Language: de\r\n");
    assert_eq!(de.body, b"language de");
    let fr = request(&server, "GET", "/vary/c", "Accept-Language: fr\r\n");
    assert_eq!(fr.body, b"language fr");
    for path in ["/small/a", "/big/b"] {
        assert_eq!(origin.hits(path), 1, "{path}");
    }
    assert_eq!(origin.hits("/vary/c"), 2);
    assert!(metric(admin, "tessera_cache_disk_lookups_total", &["hit"]) >= 4.0);
}

#[test]
fn an_object_above_the_memory_limit_is_kept_on_disk_only() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    get_exact(&server, "/big/x");
    on_disk(admin, 1);
    body_starts_on_a_page(&dir, "/big/x");
    get_exact(&server, "/big/x");
    get_exact(&server, "/big/x");
    assert_eq!(origin.hits("/big/x"), 1);
    // Not in memory: every hit was the disk's.
    assert_eq!(metric(admin, "tessera_cache_objects", &[]), 0.0);
    assert_eq!(
        metric(admin, "tessera_cache_disk_lookups_total", &["hit"]),
        2.0
    );
    assert!(metric(admin, "tessera_cache_disk_bytes", &[]) > BIG as f64);
    // /status.json has the disk figures, and /status a tile for them.
    let doc = status_json(admin);
    assert_eq!(json_sum(&doc, "tessera_cache_disk_objects", &[]), 1.0);
    assert_eq!(
        json_sum(
            &doc,
            "tessera_cache_disk_lookups_total",
            &[("result", "hit")]
        ),
        2.0
    );
    let (status, page) = admin_get(admin, "/status", "");
    assert_eq!(status, 200);
    assert!(page.contains("tessera_cache_disk_objects") && page.contains("disk cache objects"));

    // A route with `disk = false`: too large for memory, so not stored at all.
    get_exact(&server, "/off/big/y");
    get_exact(&server, "/off/big/y");
    assert_eq!(origin.hits("/off/big/y"), 2);
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 1.0);
}

#[test]
fn truncated_and_corrupted_files_are_dropped_at_load_and_fetched_again() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    for path in ["/big/truncated", "/big/corrupted", "/big/intact"] {
        get_exact(&server, path);
    }
    on_disk(admin, 3);
    drop(server);

    let truncated = file_of(&dir, "/big/truncated");
    let len = std::fs::metadata(&truncated).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len - 1000)
        .unwrap();
    let corrupted = file_of(&dir, "/big/corrupted");
    let mut bytes = std::fs::read(&corrupted).unwrap();
    let i = bytes.len() - BIG / 2;
    bytes[i] ^= 0xff;
    std::fs::write(&corrupted, bytes).unwrap();

    let (server, admin) = serve(&site, &origin, &dir, "");
    assert_eq!(
        metric(admin, "tessera_cache_disk_evictions_total", &["corrupt"]),
        2.0
    );
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 1.0);
    assert!(!truncated.exists() && !corrupted.exists());
    for path in ["/big/truncated", "/big/corrupted", "/big/intact"] {
        get_exact(&server, path);
    }
    assert_eq!(origin.hits("/big/truncated"), 2);
    assert_eq!(origin.hits("/big/corrupted"), 2);
    assert_eq!(origin.hits("/big/intact"), 1);
    on_disk(admin, 3);
}

#[test]
fn a_file_corrupted_while_serving_breaks_its_response_off_and_is_dropped() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    get_exact(&server, "/big/z");
    on_disk(admin, 1);
    // Sent as it is read: two requests at once, and a range, all from the file.
    let both: Vec<_> = (0..2)
        .map(|_| {
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                write!(
                    stream,
                    "GET /big/z HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                read_response(&mut stream, false).body
            })
        })
        .collect();
    for b in both {
        assert!(b.join().unwrap() == body_of("/big/z"));
    }
    let file = file_of(&dir, "/big/z");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    // The checksum no longer matches at the end of the body: the response breaks off
    // short of its Content-Length, so no client takes it as whole.
    let mut stream = server.connect();
    write!(
        stream,
        "GET /big/z HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let raw = read_to_close(&mut stream);
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&raw[..40])
    );
    assert!(raw.len() < BIG, "{} bytes", raw.len());
    eventually("the file to be dropped", || {
        metric(admin, "tessera_cache_disk_evictions_total", &["corrupt"]) == 1.0
    });
    // Fetched again, and stored again.
    get_exact(&server, "/big/z");
    assert_eq!(origin.hits("/big/z"), 2);
    on_disk(admin, 1);
    get_exact(&server, "/big/z");
    assert_eq!(origin.hits("/big/z"), 2);
}

#[test]
fn ten_clients_downloading_a_new_object_at_once_make_one_origin_request() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    let barrier = Arc::new(std::sync::Barrier::new(10));
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let (addr, barrier) = (server.addr, barrier.clone());
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                    .unwrap();
                barrier.wait();
                write!(
                    stream,
                    "GET /big/ten HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                read_response(&mut stream, false)
            })
        })
        .collect();
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == body_of("/big/ten"), "{} bytes", r.body.len());
    }
    assert_eq!(origin.hits("/big/ten"), 1);
    on_disk(admin, 1);
    get_exact(&server, "/big/ten");
    assert_eq!(origin.hits("/big/ten"), 1);
}

#[test]
fn purge_and_surrogate_key_purge_remove_disk_objects() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    for path in ["/big/p", "/big/k", "/small/s"] {
        get_exact(&server, path);
    }
    on_disk(admin, 3);
    let purged = request(&server, "PURGE", "/big/p", "");
    assert_eq!((purged.status, purged.header("purged")), (200, Some("1")));
    on_disk(admin, 2);
    let purged = request(&server, "PURGE", "/", "Surrogate-Key: tag-k tag-s\r\n");
    assert_eq!(purged.status, 200);
    on_disk(admin, 0);
    eventually("the files to be removed", || files(&dir).is_empty());
    for path in ["/big/p", "/big/k", "/small/s"] {
        get_exact(&server, path);
        assert_eq!(origin.hits(path), 2, "{path}");
    }
    on_disk(admin, 3);
    // A ban by prefix too.
    let banned = request(&server, "BAN", "/big/", "");
    assert_eq!(banned.status, 200);
    on_disk(admin, 1);
    get_exact(&server, "/big/p");
    assert_eq!(origin.hits("/big/p"), 3);
    assert_eq!(
        metric(
            admin,
            "tessera_cache_disk_evictions_total",
            &["invalidated"]
        ),
        5.0
    );
}

#[test]
fn inactive_objects_are_evicted() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "inactive = \"1s\"");
    get_exact(&server, "/big/i");
    on_disk(admin, 1);
    // The janitor removes it once it has not been used for a second.
    on_disk(admin, 0);
    assert_eq!(
        metric(admin, "tessera_cache_disk_evictions_total", &["inactive"]),
        1.0
    );
    get_exact(&server, "/big/i");
    assert_eq!(origin.hits("/big/i"), 2);
}

#[test]
fn min_uses_admits_an_object_on_its_second_request() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "min_uses = 2");
    get_exact(&server, "/big/m");
    get_exact(&server, "/big/m");
    assert_eq!(origin.hits("/big/m"), 2);
    on_disk(admin, 1);
    get_exact(&server, "/big/m");
    assert_eq!(origin.hits("/big/m"), 2);
    assert_eq!(
        metric(admin, "tessera_cache_disk_fills_total", &["written"]),
        1.0
    );
    promtool_check(&admin_get(admin, "/metrics", "").1);
}

#[test]
fn max_size_evicts_the_least_recently_used() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let disk = "max_size = \"5m\"\nmax_object_size = \"3m\"";
    let (server, admin) = serve(&site, &origin, &dir, disk);
    get_exact(&server, "/big/1");
    on_disk(admin, 1);
    get_exact(&server, "/big/2");
    on_disk(admin, 2);
    // /big/1 is used again: /big/2 is now the least recently used.
    get_exact(&server, "/big/1");
    get_exact(&server, "/big/3");
    eventually("an eviction for size", || {
        metric(admin, "tessera_cache_disk_evictions_total", &["size"]) == 1.0
    });
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 2.0);
    assert!(metric(admin, "tessera_cache_disk_bytes", &[]) <= (5 << 20) as f64);
    get_exact(&server, "/big/1");
    get_exact(&server, "/big/3");
    assert_eq!((origin.hits("/big/1"), origin.hits("/big/3")), (1, 1));
    get_exact(&server, "/big/2");
    assert_eq!(origin.hits("/big/2"), 2);
    assert_eq!(files(&dir).len(), 2, "the evicted file is removed");
}

#[test]
fn ranges_of_a_disk_object_are_byte_exact() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    get_exact(&server, "/big/r");
    on_disk(admin, 1);
    drop(server);
    let (server, _admin) = serve(&site, &origin, &dir, "");
    let whole = body_of("/big/r");
    let mid = MEMORY_LIMIT as u64;
    for (range, start, end) in [
        ("bytes=0-99".to_string(), 0, 99),
        (
            format!("bytes={}-{}", mid - 10, mid + 10),
            mid - 10,
            mid + 10,
        ),
        ("bytes=-500".to_string(), BIG as u64 - 500, BIG as u64 - 1),
        (
            format!("bytes={}-", BIG - 3),
            BIG as u64 - 3,
            BIG as u64 - 1,
        ),
    ] {
        let r = request(&server, "GET", "/big/r", &format!("Range: {range}\r\n"));
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {start}-{end}/{BIG}").as_str()),
            "{range}"
        );
        assert!(r.body == whole[start as usize..=end as usize], "{range}");
    }
    // Several ranges of a body sent as it is read: the whole object.
    let r = request(&server, "GET", "/big/r", "Range: bytes=0-9,100-109\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body == whole);
    assert_eq!(origin.hits("/big/r"), 1);
}

#[test]
fn check_config_names_the_disk_key() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    let dir = site.dir.path().join("disk");
    for (keys, key, want) in [
        (
            "max_size = \"lots\"",
            "cache.disk.max_size",
            "\"lots\" is not a size",
        ),
        (
            "inactive = \"soon\"",
            "cache.disk.inactive",
            "\"soon\" is not a duration",
        ),
        ("min_uses = 0", "cache.disk.min_uses", "at least 1"),
        ("loader_rate = 0", "cache.disk.loader_rate", "at least 1"),
        (
            "max_size = \"1m\"\nmax_object_size = \"2m\"",
            "cache.disk.max_object_size",
            "at most max_size",
        ),
        ("slice = \"0\"", "cache.disk.slice", "at least 4k"),
        (
            "io_threads = 0",
            "cache.disk.io_threads",
            "must be 1 to 256",
        ),
        (
            "io_queue = 0",
            "cache.disk.io_queue",
            "must be 1 to 1048576",
        ),
    ] {
        let toml = format!(
            "[[upstream]]\nname = \"origin\"\naddresses = [\"127.0.0.1:1\"]\n\
             [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
             [cache.disk]\npath = \"{}\"\n{keys}\n",
            dir.display()
        );
        std::fs::write(&path, toml).unwrap();
        let (code, stderr) = check_config_output(&path);
        assert_eq!(code, Some(1), "{keys}: {stderr}");
        for want in [key, want, "bad.toml:"] {
            assert!(stderr.contains(want), "{keys}: {stderr} lacks {want}");
        }
    }
    let toml = "[[upstream]]\nname = \"origin\"\naddresses = [\"127.0.0.1:1\"]\n\
                [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
                [cache.disk]\nmax_size = \"1g\"\n";
    std::fs::write(&path, toml).unwrap();
    let (code, stderr) = check_config_output(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cache.disk.path") && stderr.contains("required"),
        "{stderr}"
    );

    let toml = format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"127.0.0.1:1\"]\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\ndisk = false\n\
         [cache.disk]\npath = \"{}\"\nmax_size = \"10g\"\nmax_object_size = \"1g\"\n\
         inactive = \"7d\"\nmin_uses = 1\nslice = \"1m\"\nloader_rate = 500\n\
         io_threads = 8\nio_queue = 4096\n",
        dir.display()
    );
    std::fs::write(&path, toml).unwrap();
    let (code, stderr) = check_config_output(&path);
    assert_eq!(code, Some(0), "the issue's keys as written: {stderr}");
}

/// The disk full: the tier is a 5 MiB tmpfs, mounted in a mount namespace of the
/// server's own (`unshare -rm`: a user namespace, so it needs no privilege where user
/// namespaces are allowed), which holds two 2 MiB objects and not a third.
#[test]
fn a_full_disk_stops_writes_without_failing_requests() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    std::fs::create_dir_all(&dir).unwrap();
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(&config, self::config(&origin, &dir, "max_size = \"64m\"")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=5m tmpfs '{}' && exec '{}' serve --root '{}' --workers 1 \
         --listen 127.0.0.1:0 --config '{}'",
        dir.display(),
        env!("CARGO_BIN_EXE_tessera"),
        site.root().display(),
        config.display()
    );
    let args: Vec<String> = ["-rm", "sh", "-c", &script].map(String::from).to_vec();
    let server = Server::start_program(Path::new("unshare"), Path::new("."), &args, &[]);
    let admin = admin_addr(&server);
    eventually("the loader to finish", || {
        metric(admin, "tessera_cache_disk_loaded", &[]) == 1.0
    });
    get_exact(&server, "/big/f1");
    on_disk(admin, 1);
    get_exact(&server, "/big/f2");
    on_disk(admin, 2);
    // The third does not fit: its write fails, writes pause, the request is answered.
    get_exact(&server, "/big/f3");
    eventually("the write to fail", || {
        metric(admin, "tessera_cache_disk_fills_total", &["failed"]) == 1.0
    });
    assert_eq!(metric(admin, "tessera_cache_disk_full", &[]), 1.0);
    // Paused: the next fills are not tried, and every request is answered in full.
    get_exact(&server, "/big/f4");
    get_exact(&server, "/big/f3");
    assert_eq!((origin.hits("/big/f3"), origin.hits("/big/f4")), (2, 1));
    assert_eq!(
        metric(admin, "tessera_cache_disk_fills_total", &["failed"]),
        1.0
    );
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 2.0);
    // What is on disk is still served from there.
    get_exact(&server, "/big/f1");
    get_exact(&server, "/big/f2");
    assert_eq!((origin.hits("/big/f1"), origin.hits("/big/f2")), (1, 1));
}

/// Sends `GET path` with `extra` fields and reads until the body holds `want` bytes (or
/// the connection closes): the stream, the bytes read, and where the body starts.
pub(super) fn get_until(
    server: &Server,
    path: &str,
    extra: &str,
    want: usize,
) -> (TcpStream, Vec<u8>, usize) {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut received = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let head_end = received.windows(4).position(|w| w == b"\r\n\r\n");
        if let Some(end) = head_end.filter(|e| received.len() >= e + 4 + want) {
            return (stream, received, end + 4);
        }
        let n = std::io::Read::read(&mut stream, &mut buf).unwrap();
        assert!(n > 0, "closed after {} bytes", received.len());
        received.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_large_object_is_written_to_disk_as_it_passes_to_its_clients() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    let path = "/slow/big/s";
    let whole = body_of(path);
    // The first half reaches the client while the origin holds the rest back: the body
    // is not read whole before it is sent.
    let (mut leader, mut received, head_end) = get_until(&server, path, "", BIG / 2);
    assert!(received[head_end..] == whole[..received.len() - head_end]);
    // A second client, and a range, get the object as it is written.
    let (mut second, mut second_received, second_head) = get_until(&server, path, "", BIG / 2);
    assert!(second_received[second_head..] == whole[..second_received.len() - second_head]);
    let range = request(&server, "GET", path, "Range: bytes=1000-1999\r\n");
    assert_eq!(range.status, 206);
    assert!(range.body == whole[1000..2000]);
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 0.0);
    origin.open();
    received.extend(read_to_close(&mut leader));
    assert!(
        received[head_end..] == whole[..],
        "{} bytes",
        received.len() - head_end
    );
    second_received.extend(read_to_close(&mut second));
    assert!(second_received[second_head..] == whole[..]);
    // Put in place once whole, and served from there.
    on_disk(admin, 1);
    body_starts_on_a_page(&dir, path);
    get_exact(&server, path);
    assert_eq!(origin.hits(path), 1);
}

#[test]
fn a_fill_whose_origin_breaks_off_leaves_nothing_on_disk() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    let path = "/broken/big/b";
    // The leader and a client that joined its fill each get the half written...
    let (mut leader, mut received, _) = get_until(&server, path, "", BIG / 2);
    let (mut second, mut second_received, _) = get_until(&server, path, "", BIG / 2);
    // ... and, when the origin breaks off, break off too, short of their length.
    origin.open();
    received.extend(read_to_close(&mut leader));
    second_received.extend(read_to_close(&mut second));
    for raw in [received, second_received] {
        assert!(
            raw.starts_with(b"HTTP/1.1 200") && raw.len() < BIG,
            "{} bytes",
            raw.len()
        );
    }
    assert_eq!(origin.hits(path), 1);
    eventually("the fill's file to be removed", || {
        std::fs::read_dir(dir.join("tmp")).unwrap().count() == 0
    });
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 0.0);
    assert!(files(&dir).is_empty());
    // Nothing kept: the next request goes to the origin.
    let (mut again, _, _) = get_until(&server, path, "", BIG / 2);
    read_to_close(&mut again);
    assert_eq!(origin.hits(path), 2);
}

#[test]
fn a_fill_goes_on_when_its_client_goes_away() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    let path = "/slow/big/gone";
    let whole = body_of(path);
    let (leader, _, _) = get_until(&server, path, "", BIG / 2);
    let (mut second, mut received, head_end) = get_until(&server, path, "", BIG / 2);
    // The client that led the fill goes away; the fill goes on for the other.
    drop(leader);
    origin.open();
    received.extend(read_to_close(&mut second));
    assert!(
        received[head_end..] == whole[..],
        "{} bytes",
        received.len() - head_end
    );
    on_disk(admin, 1);
    get_exact(&server, path);
    assert_eq!(origin.hits(path), 1);
}

#[test]
fn a_range_that_misses_is_answered_from_the_object_as_it_is_written() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, admin) = serve(&site, &origin, &dir, "");
    let path = "/slow/big/r";
    let whole = body_of(path);
    // The first half is written while the origin holds the rest back: a range inside
    // it is answered at once.
    let first = request(&server, "GET", path, "Range: bytes=10-19\r\n");
    assert_eq!(first.status, 206);
    assert_eq!(
        first.header("content-range"),
        Some(format!("bytes 10-19/{BIG}").as_str())
    );
    assert!(first.body == whole[10..20]);
    // A range in the second half waits for it.
    let mut late = server.connect();
    write!(
        late,
        "GET {path} HTTP/1.1\r\nHost: test\r\nRange: bytes=-100\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    origin.open();
    let received = read_to_close(&mut late);
    let head_end = received.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(received.starts_with(b"HTTP/1.1 206"));
    assert!(received[head_end..] == whole[BIG - 100..]);
    on_disk(admin, 1);
    get_exact(&server, path);
    assert_eq!(origin.hits(path), 1);
}

#[test]
fn a_scan_of_cold_objects_does_not_flush_the_objects_asked_for_often() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    // Room for four /big/ objects.
    let disk = "max_size = \"10m\"\nmax_object_size = \"3m\"";
    let (server, admin) = serve(&site, &origin, &dir, disk);
    // The hot set: two objects, each asked for four times.
    for _ in 0..4 {
        get_exact(&server, "/big/hot1");
        get_exact(&server, "/big/hot2");
    }
    on_disk(admin, 2);
    // A scan: ten objects asked for once each. Two fill the room left; the others would
    // evict an object asked for more often, and are not written.
    for i in 0..10 {
        get_exact(&server, &format!("/big/cold{i}"));
    }
    eventually("the scan's fills to end", || {
        metric(admin, "tessera_cache_disk_fills_total", &["written"])
            + metric(admin, "tessera_cache_disk_fills_total", &["rejected"])
            == 12.0
    });
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 4.0);
    assert_eq!(
        metric(admin, "tessera_cache_disk_evictions_total", &["size"]),
        0.0
    );
    get_exact(&server, "/big/hot1");
    get_exact(&server, "/big/hot2");
    assert_eq!((origin.hits("/big/hot1"), origin.hits("/big/hot2")), (1, 1));
    // An object of the scan asked for again is written then: more often asked for than
    // the least recently used (an object of the scan asked for once), which it evicts.
    get_exact(&server, "/big/cold9");
    eventually("cold9 on disk", || {
        metric(admin, "tessera_cache_disk_evictions_total", &["size"]) == 1.0
    });
    get_exact(&server, "/big/cold9");
    get_exact(&server, "/big/hot1");
    assert_eq!(origin.hits("/big/cold9"), 2);
    assert_eq!((origin.hits("/big/hot1"), origin.hits("/big/hot2")), (1, 1));
    assert_eq!(metric(admin, "tessera_cache_disk_objects", &[]), 4.0);
}

#[test]
fn io_threads_sets_the_disk_tiers_threads() {
    let (site, origin) = (Site::new(), Origin::start());
    let dir = site.dir.path().join("disk");
    let (server, _admin) = serve(&site, &origin, &dir, "io_threads = 3\nio_queue = 8");
    let tasks = format!("/proc/{}/task", server.child.id());
    let io_threads = std::fs::read_dir(tasks)
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        // `tessera-disk-N`; the loader's name is cut to 15 bytes, `tessera-disk-lo`.
        .filter(|comm| {
            let n = comm.trim().strip_prefix("tessera-disk-").unwrap_or("x");
            n.bytes().all(|b| b.is_ascii_digit())
        })
        .count();
    assert_eq!(io_threads, 3);
    // Objects are written and read through them.
    get_exact(&server, "/big/q");
    get_exact(&server, "/big/q");
    assert_eq!(origin.hits("/big/q"), 1);
}
