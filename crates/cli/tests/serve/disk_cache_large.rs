//! The disk tier with large objects (docs/cache.md "Disk tier"): bodies sent with
//! sendfile(2) in cleartext, byte-exact with ranges and after a restart.

use std::io::Write;

use crate::disk_cache::{
    body_of, file_of, get_exact, metric, on_disk, request, serve, Origin, LARGE,
};
use crate::harness::{read_response, Server, Site};

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
