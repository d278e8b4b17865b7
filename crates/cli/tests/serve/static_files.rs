use std::io::Write;

use crate::harness::{read_response, Site};

#[test]
fn serves_file_with_validators_and_type() {
    let site = Site::new();
    let server = site.serve();
    let r = server.get("/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("12"));
    assert_eq!(r.header("server"), Some("tessera"));
    assert!(r.header("last-modified").unwrap().ends_with(" GMT"));
    assert!(r.header("date").unwrap().ends_with(" GMT"));
    assert!(r.header("etag").unwrap().starts_with('"'));
    assert_eq!(r.header("connection"), Some("close"));
    let css = server.get("/style.css");
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
}

#[test]
fn directory_index_redirect_and_missing_index() {
    let site = Site::new();
    let server = site.serve();
    let home = server.get("/");
    assert_eq!(
        (home.status, home.body.as_slice()),
        (200, &b"<h1>home</h1>\n"[..])
    );
    assert_eq!(
        home.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let docs = server.get("/docs/");
    assert_eq!(
        (docs.status, docs.body.as_slice()),
        (200, &b"<h1>docs</h1>\n"[..])
    );
    let redirect = server.get("/docs?x=1");
    assert_eq!(redirect.status, 301);
    assert_eq!(redirect.header("location"), Some("/docs/?x=1"));
    assert_eq!(server.get("/empty/").status, 403);
    assert_eq!(server.get("/nope.txt").status, 404);
    assert_eq!(server.get("/nope/").status, 404);
    assert_eq!(server.get("/hello.txt/").status, 404);
}

#[test]
fn query_is_ignored_and_path_is_decoded() {
    let site = Site::new();
    site.write("a b.txt", b"space");
    let server = site.serve();
    assert_eq!(server.get("/hello.txt?v=3").body, b"hello world\n");
    assert_eq!(server.get("/a%20b.txt").body, b"space");
    assert_eq!(server.get("/docs/../hello.txt").body, b"hello world\n");
    assert_eq!(server.get("//hello.txt").body, b"hello world\n");
}

#[test]
fn head_sends_headers_without_body() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    stream
        .write_all(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let head = read_response(&mut stream, true);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("12"));
    // The next bytes on the wire are the second response, so HEAD sent no body.
    let get = read_response(&mut stream, false);
    assert_eq!(get.body, b"hello world\n");
}

#[test]
fn methods_other_than_get_and_head() {
    let site = Site::new();
    let server = site.serve();
    let post = server.exchange(
        b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&post);
    assert!(text.starts_with("HTTP/1.1 405 "), "{text}");
    assert!(text.contains("Allow: GET, HEAD, OPTIONS\r\n"), "{text}");
    let options =
        server.exchange(b"OPTIONS /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(options.starts_with(b"HTTP/1.1 204 "));
    let unknown = server.exchange(b"BREW /pot HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(unknown.starts_with(b"HTTP/1.1 501 "));
}

#[test]
fn changed_file_is_served_fresh() {
    let site = Site::new();
    site.write("live.txt", b"one");
    let server = site.serve();
    assert_eq!(server.get("/live.txt").body, b"one");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    site.write("live.txt", b"two!");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(server.get("/live.txt").body, b"two!");
}

#[test]
fn large_file_is_byte_exact() {
    let site = Site::new();
    // 64 MiB of a pattern that differs at every offset modulo a prime, so a dropped,
    // repeated or reordered chunk cannot go unnoticed.
    let size = 64 << 20;
    let data: Vec<u8> = (0..size)
        .map(|i: usize| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect();
    site.write("big.bin", &data);
    let server = site.serve();
    let r = server.get("/big.bin");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body.len(), size);
    assert!(r.body == data, "64 MiB body differs from the file");
}
