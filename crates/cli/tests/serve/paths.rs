//! Path attacks: whatever the encoding of the target, and whatever happens to the
//! symlinks under the root while requests run, nothing outside the root is ever served.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{
    contains, parse_responses, read_response, read_to_close, Server, Site, SECRET,
};

/// Asks for `target` and checks the answer is one of `statuses` and carries no byte of
/// anything outside the root.
fn assert_stays_inside(server: &Server, target: &[u8], statuses: &[u16]) {
    let mut raw = b"GET ".to_vec();
    raw.extend_from_slice(target);
    raw.extend_from_slice(b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let got = server.exchange(&raw);
    let shown = String::from_utf8_lossy(&target[..target.len().min(80)]);
    assert!(!contains(&got, SECRET), "{shown} leaked the secret");
    assert!(!contains(&got, b"root:x:0:0"), "{shown} leaked /etc/passwd");
    let responses = parse_responses(&got);
    assert_eq!(responses.len(), 1, "{shown}");
    assert!(
        statuses.contains(&responses[0].status),
        "{shown} answered {}, want one of {statuses:?}",
        responses[0].status
    );
}

#[test]
fn percent_encoded_dots_and_slashes_cannot_climb_out() {
    let site = Site::hostile();
    let server = site.serve();
    for target in [
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/%2e./secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/docs%2f..%2f..%2fsecret.txt",
        "/docs/%2e%2e/%2e%2e/secret.txt",
        "/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/docs/./../../secret.txt",
        "//../secret.txt",
        "/%2f..%2fsecret.txt",
    ] {
        // Decoding comes before normalisation, so each of these is a `..` above the
        // root: 400, never a lookup.
        assert_stays_inside(&server, target.as_bytes(), &[400]);
    }
    // An encoded slash is a slash: it can name files inside the root.
    assert_eq!(server.get("/docs%2findex.html").body, b"<h1>docs</h1>\n");
    assert_eq!(server.get("/docs/%2e%2e/hello.txt").body, b"hello world\n");
}

#[test]
fn backslashes_are_not_separators() {
    let site = Site::hostile();
    let server = site.serve();
    for target in [
        &b"/..%5csecret.txt"[..],
        b"/..%5Csecret.txt",
        b"/%2e%2e%5csecret.txt",
        b"/docs%5c..%5c..%5csecret.txt",
    ] {
        // A backslash is an ordinary byte in a Unix file name: no such file.
        assert_stays_inside(&server, target, &[404]);
    }
    // A raw backslash is not a URI character, but httparse lets it through: it is then
    // the same ordinary byte.
    assert_stays_inside(&server, b"/..\\secret.txt", &[404]);
}

#[test]
fn overlong_utf8_is_not_decoded_to_dots_or_slashes() {
    let site = Site::hostile();
    let server = site.serve();
    for target in [
        "/%c0%ae%c0%ae/secret.txt",
        "/%c0%2e%c0%2e/secret.txt",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/..%c0%afsecret.txt",
        "/..%c1%9csecret.txt",
        "/%c0%ae%c0%ae%c0%afsecret.txt",
        "/%f0%80%80%ae%f0%80%80%ae/secret.txt",
    ] {
        assert_stays_inside(&server, target.as_bytes(), &[404]);
    }
}

#[test]
fn double_encoding_is_decoded_once() {
    let site = Site::hostile();
    let server = site.serve();
    for target in [
        "/%252e%252e/secret.txt",
        "/%252e%252e%252fsecret.txt",
        "/..%252fsecret.txt",
        "/%25%32%65%25%32%65/secret.txt",
    ] {
        assert_stays_inside(&server, target.as_bytes(), &[404]);
    }
    // Once decoded, `%2e%2e` spells a file literally named `%2e%2e`: a path inside the
    // root, served as such.
    std::fs::create_dir(site.root().join("%2e%2e")).unwrap();
    site.write("%2e%2e/inside.txt", b"literal percent");
    assert_eq!(
        server.get("/%252e%252e/inside.txt").body,
        b"literal percent"
    );
}

#[test]
fn nul_bytes_never_truncate_a_path() {
    let site = Site::hostile();
    let server = site.serve();
    for target in [
        &b"/hello.txt%00.html"[..],
        b"/%00",
        b"/%00/../secret.txt",
        b"/docs%00/../../secret.txt",
        b"/hello.txt%2500",
    ] {
        assert_stays_inside(&server, target, &[400, 404]);
    }
    // A raw NUL is refused by the parser before any path handling.
    assert_stays_inside(&server, b"/hello.txt\0.html", &[400]);
    // `%00` must be a 400, not a C string cut short at `/hello.txt`.
    let site_root_file = server.get("/hello.txt%00");
    assert_eq!(site_root_file.status, 400);
}

#[test]
fn malformed_percent_encoding_is_refused() {
    let site = Site::hostile();
    let server = site.serve();
    for target in [
        "/%",
        "/%2",
        "/%zz/secret.txt",
        "/%%32%65%2e/secret.txt",
        "/%2g",
    ] {
        assert_stays_inside(&server, target.as_bytes(), &[400]);
    }
}

#[test]
fn very_long_paths_are_refused_or_missing() {
    let site = Site::hostile();
    let server = site.serve();
    // Inside the URI limit: a name longer than NAME_MAX, a path longer than PATH_MAX,
    // deep `..` chains and deep encoded chains.
    let long_name = format!("/{}", "a".repeat(300));
    let deep = "/a".repeat(3000);
    let dots = format!("/docs{}/secret.txt", "/..".repeat(2000));
    let encoded = format!("/docs{}secret.txt", "%2e%2e%2f".repeat(800));
    let climb_back = format!("{}{}/hello.txt", "/docs".repeat(700), "/..".repeat(700));
    for target in [&long_name, &deep] {
        assert_stays_inside(&server, target.as_bytes(), &[404]);
    }
    for target in [&dots, &encoded] {
        assert_stays_inside(&server, target.as_bytes(), &[400]);
    }
    // 700 segments down and 700 back up is the root again, which is fine.
    assert_stays_inside(&server, climb_back.as_bytes(), &[200]);
    // Over the URI limit.
    let too_long = format!("/{}", "../".repeat(3000));
    assert_stays_inside(&server, too_long.as_bytes(), &[414]);
}

/// Replaces the symlink at `link` with one to `target`, atomically (rename(2)), so a
/// request sees either the old link or the new one, never a missing file.
fn point(link: &Path, target: &Path, scratch: &Path) {
    let _ = std::fs::remove_file(scratch);
    std::os::unix::fs::symlink(target, scratch).unwrap();
    std::fs::rename(scratch, link).unwrap();
}

/// A thread flips symlinks inside the root between a file inside and the secret outside
/// (and a directory link between a directory inside and the directory holding the
/// secret) while requests run. Opening beneath the root is one kernel walk
/// (openat2 with RESOLVE_BENEATH), so no flip between a check and a use can exist:
/// every answer is the inside file or a refusal, never the secret.
#[test]
fn symlink_race_never_serves_outside_the_root() {
    let site = Site::hostile();
    let server = site.serve();
    let root = site.root();
    std::fs::write(root.join("docs/secret.txt"), b"inside docs").unwrap();
    const LINKS: usize = 16;
    for i in 0..LINKS {
        std::os::unix::fs::symlink(root.join("hello.txt"), root.join(format!("race-{i}"))).unwrap();
    }
    std::os::unix::fs::symlink(root.join("docs"), root.join("race-dir")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let root = root.clone();
        std::thread::spawn(move || {
            let scratch = root.join(".race-scratch");
            // Relative targets, as a site owner would write them: absolute ones are
            // refused beneath the root whatever they point to.
            let (inside, outside) = (Path::new("hello.txt"), Path::new("../secret.txt"));
            let (inside_dir, outside_dir) = (Path::new("docs"), Path::new(".."));
            let mut flips = 0u64;
            let mut out = false;
            while !stop.load(Ordering::Relaxed) {
                out = !out;
                for i in 0..LINKS {
                    let link = root.join(format!("race-{i}"));
                    point(&link, if out { outside } else { inside }, &scratch);
                }
                let dir = if out { outside_dir } else { inside_dir };
                point(&root.join("race-dir"), dir, &scratch);
                flips += 1;
            }
            flips
        })
    };

    let mut stream = server.connect();
    let (mut served, mut refused) = (0u32, 0u32);
    let started = Instant::now();
    let mut i = 0usize;
    // Run until both outcomes were seen (the race really happened), bounded in time.
    while (served == 0 || refused == 0 || i < 400) && started.elapsed() < Duration::from_secs(10) {
        let path = if i % 4 == 3 {
            "/race-dir/secret.txt".to_string()
        } else {
            format!("/race-{}", i % LINKS)
        };
        i += 1;
        // One write per request: several small ones would wait on Nagle and delayed ACK.
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let r = read_response(&mut stream, false);
        assert!(!contains(&r.body, SECRET), "{path} served the secret");
        match r.status {
            200 => {
                let expected: &[u8] = if path.starts_with("/race-dir") {
                    b"inside docs"
                } else {
                    b"hello world\n"
                };
                assert_eq!(r.body, expected, "{path}");
                served += 1;
            }
            403 | 404 => refused += 1,
            status => panic!("{path} answered {status}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0, "the links never flipped");
    assert!(
        served > 0 && refused > 0,
        "the race was not exercised: {served} served, {refused} refused in {i} requests"
    );
    drop(stream);
    // And the server is still fine afterwards.
    let mut stream = server.connect();
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let rest = parse_responses(&read_to_close(&mut stream));
    assert_eq!(rest[0].body, b"hello world\n");
}
