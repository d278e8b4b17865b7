use std::io::Write;

use crate::harness::{assert_closed, read_response, Site};

#[test]
fn keep_alive_reuses_the_connection() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    for _ in 0..5 {
        stream
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let r = read_response(&mut stream, false);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), None);
        assert_eq!(r.body, b"hello world\n");
    }
}

#[test]
fn hundred_pipelined_requests_in_one_write_answered_in_order() {
    let site = Site::new();
    for i in 0..100 {
        site.write(&format!("f{i}.txt"), format!("file number {i}").as_bytes());
    }
    let server = site.serve();
    let mut batch = Vec::new();
    for i in 0..100 {
        write!(batch, "GET /f{i}.txt HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    }
    let mut stream = server.connect();
    stream.write_all(&batch).unwrap();
    for i in 0..100 {
        let r = read_response(&mut stream, false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, format!("file number {i}").as_bytes());
    }
}

#[test]
fn http10_without_keep_alive_closes() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    stream
        .write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n")
        .unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    assert_closed(&mut stream);
}

#[test]
fn http10_with_keep_alive_stays_open() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    for _ in 0..3 {
        stream
            .write_all(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let r = read_response(&mut stream, false);
        assert_eq!(r.header("connection"), Some("keep-alive"));
        assert_eq!(r.body, b"hello world\n");
    }
}

#[test]
fn connection_close_is_honoured() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(r.header("connection"), Some("close"));
    assert_closed(&mut stream);
}

#[test]
fn bodies_are_discarded_and_keep_alive_stays_in_sync() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    // A Content-Length body that looks like a request, then a chunked one, split
    // across writes.
    let body = "GET /secret HTTP/1.1\r\nHost: t\r\n\r\n";
    write!(
        stream,
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    assert_eq!(read_response(&mut stream, false).body, b"hello world\n");
    stream
        .write_all(
            b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /",
        )
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 405);
    std::thread::sleep(std::time::Duration::from_millis(50));
    stream
        .write_all(b"\r\n3;ext=\"q\"\r\nabc\r\n0\r\nTrailer: x\r\n\r\nGET /style.css HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"body{}\n"[..]));
}

#[test]
fn expect_100_continue() {
    let site = Site::new();
    let server = site.serve();
    let mut stream = server.connect();
    stream
        .write_all(
            b"PUT /up.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap();
    let interim = read_response(&mut stream, true);
    assert_eq!(interim.status, 100);
    let final_response = read_response(&mut stream, false);
    assert_eq!(final_response.status, 405);
    // The body follows, then the next request on the same connection.
    stream
        .write_all(b"helloGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world\n"[..]));
}

#[test]
fn malformed_heads_get_their_status_and_a_close() {
    let site = Site::new();
    let server = site.serve();
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "b".repeat(17000)
    );
    let mut many = String::from("GET / HTTP/1.1\r\nHost: t\r\n");
    for i in 0..101 {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("cl_and_te", b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(), 400),
        ("two_content_lengths", b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(), 400),
        ("signed_content_length", b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +1\r\n\r\n".to_vec(), 400),
        ("unknown_transfer_coding", b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(), 501),
        ("http2_version", b"GET / HTTP/2.0\r\nHost: t\r\n\r\n".to_vec(), 505),
        ("missing_host", b"GET / HTTP/1.1\r\n\r\n".to_vec(), 400),
        ("bare_lf", b"GET / HTTP/1.1\nHost: t\n\n".to_vec(), 400),
        ("obs_fold", b"GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n".to_vec(), 400),
        ("space_before_colon", b"GET / HTTP/1.1\r\nHost : t\r\n\r\n".to_vec(), 400),
        ("nul_in_header", b"GET / HTTP/1.1\r\nHost: t\0x\r\n\r\n".to_vec(), 400),
        ("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(), 400),
        ("body_too_large", b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n".to_vec(), 413),
        ("uri_too_long", long_target.into_bytes(), 414),
        ("head_too_large", big_header.into_bytes(), 431),
        ("too_many_headers", many.into_bytes(), 431),
    ];
    for (name, raw, status) in cases {
        let mut stream = server.connect();
        // Send the bad head followed by a valid request that must never be answered.
        let mut bytes = raw.clone();
        bytes.extend_from_slice(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        let _ = stream.write_all(&bytes);
        let r = read_response(&mut stream, false);
        assert_eq!(r.status, status, "{name}");
        assert_eq!(r.header("connection"), Some("close"), "{name}");
        assert_closed(&mut stream);
    }
}
