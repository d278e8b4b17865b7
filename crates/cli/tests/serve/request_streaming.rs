//! Request bodies streamed to the origin (docs/upstreams.md, "Request bodies"): through
//! the real binary, against origins written here (std threads on loopback) that hash what
//! they read and say when the first bytes came, or read nothing until told.

use std::hash::Hasher;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{eventually, read_response, stderr_has, thread_per_connection, Server, Site};
use crate::upstreams::{origins, quoted, Mode};

/// What the origin saw of one request body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// `content-length N` or `chunked` (or `none`).
    framing: String,
    bytes: u64,
    hash: u64,
    /// Whether the body ended as its framing said (else the connection closed first).
    complete: bool,
}

/// What an upload origin reports as it reads.
#[derive(Debug)]
enum Event {
    /// The first body bytes arrived.
    FirstBytes,
    /// The body ended (whole or not).
    Done(Seen),
}

/// An origin that reads each request's body (Content-Length or chunked), hashing it, and
/// answers `200` with `BYTES HASH`. It reports the first bytes and the end on `events`.
/// While `hold` is set it reads nothing of a body after its head (a slow origin). To a
/// request with `Expect: 100-continue` it says `100 Continue` first.
fn upload_origin(events: mpsc::Sender<Event>, hold: Arc<Mutex<bool>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let events = Arc::new(Mutex::new(events));
    thread_per_connection(listener, move |stream| {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::with_capacity(256 * 1024, stream);
        loop {
            let Some(fields) = head(&mut reader) else {
                return;
            };
            while *hold.lock().unwrap() {
                std::thread::sleep(Duration::from_millis(20));
            }
            if fields
                .iter()
                .any(|(n, v)| n == "expect" && v == "100-continue")
            {
                let _ = writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            let report = |e: Event| {
                let _ = events.lock().unwrap().send(e);
            };
            let seen = read_body(&mut reader, &fields, &report);
            let complete = seen.complete;
            report(Event::Done(seen.clone()));
            if !complete {
                return;
            }
            let answer = format!("{} {:016x}", seen.bytes, seen.hash);
            let _ = write!(
                writer,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Framing: {}\r\n\r\n{answer}",
                answer.len(),
                seen.framing
            );
        }
    });
    addr
}

/// A request head's fields, lower-cased names; `None` at the end of the connection.
fn head(reader: &mut impl BufRead) -> Option<Vec<(String, String)>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    if line.is_empty() {
        return None;
    }
    let mut fields = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            return Some(fields);
        }
        let (name, value) = l.split_once(':')?;
        fields.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
}

/// Reads a body as its fields frame it, hashing it.
fn read_body(
    reader: &mut impl BufRead,
    fields: &[(String, String)],
    report: &dyn Fn(Event),
) -> Seen {
    let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut bytes = 0u64;
    let mut take = |reader: &mut dyn BufRead, mut n: u64| -> bool {
        while n > 0 {
            let buf = match reader.fill_buf() {
                Ok(b) if !b.is_empty() => b,
                _ => return false,
            };
            let k = buf.len().min(n as usize);
            if bytes == 0 {
                report(Event::FirstBytes);
            }
            hasher.write(&buf[..k]);
            bytes += k as u64;
            n -= k as u64;
            reader.consume(k);
        }
        true
    };
    let (framing, complete) = if let Some(length) = field("content-length") {
        let n: u64 = length.parse().unwrap();
        (format!("content-length {n}"), take(reader, n))
    } else if field("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        let mut complete = false;
        loop {
            let mut size = String::new();
            if reader.read_line(&mut size).unwrap_or(0) == 0 {
                break;
            }
            let Ok(n) = u64::from_str_radix(size.trim().split(';').next().unwrap(), 16) else {
                break;
            };
            if n == 0 {
                let mut end = String::new();
                complete = reader.read_line(&mut end).is_ok_and(|r| r > 0);
                break;
            }
            if !take(reader, n) {
                break;
            }
            let mut crlf = [0u8; 2];
            if reader.read_exact(&mut crlf).is_err() {
                break;
            }
        }
        ("chunked".to_string(), complete)
    } else {
        ("none".to_string(), true)
    };
    Seen {
        framing,
        bytes,
        hash: hasher.finish(),
        complete,
    }
}

/// The body the tests send: `blocks` blocks of 1 MiB, each different (its number in its
/// first bytes), and its hash as the origin computes it.
struct Upload {
    block: Vec<u8>,
    blocks: u64,
}

impl Upload {
    fn new(blocks: u64) -> Upload {
        let mut block = vec![0u8; 1 << 20];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in block.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        Upload { block, blocks }
    }

    fn len(&self) -> u64 {
        self.blocks << 20
    }

    /// Block `i`.
    fn block(&mut self, i: u64) -> &[u8] {
        self.block[..8].copy_from_slice(&i.to_le_bytes());
        &self.block
    }

    fn hash(&mut self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for i in 0..self.blocks {
            hasher.write(self.block(i));
        }
        hasher.finish()
    }
}

fn config(origin: SocketAddr, extra: &str) -> String {
    format!(
        "[limits]\nmax_body_size = 4294967296\n\n\
         [[upstream]]\nname = \"app\"\naddresses = [\"{origin}\"]\n\n\
         [[route]]\nprefix = \"/\"\nupstream = \"app\"\n{extra}"
    )
}

/// VmHWM (the most resident memory so far) of a process, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

fn post_head(length: u64) -> String {
    format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n\r\n")
}

/// The 1 GiB: about 3.4 s through the debug build on the two-core test machine
/// (client, server and origin on one host), well within what a test may take here.
const LARGE_BLOCKS: u64 = 1024;

#[test]
fn a_large_upload_streams_to_the_origin_whole_and_the_server_stays_small() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    // A small upload first, so that what is measured after is the body's growth only.
    let mut stream = server.connect();
    stream.write_all(post_head(5).as_bytes()).unwrap();
    stream.write_all(b"hello").unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);
    let before = peak_kib(server.child.id());
    let mut upload = Upload::new(LARGE_BLOCKS);
    let started = std::time::Instant::now();
    stream
        .write_all(post_head(upload.len()).as_bytes())
        .unwrap();
    for i in 0..upload.blocks {
        stream.write_all(upload.block(i)).unwrap();
    }
    let r = read_response(&mut stream, false);
    eprintln!("{} MiB uploaded in {:?}", LARGE_BLOCKS, started.elapsed());
    assert_eq!(r.status, 200);
    let expected = format!("{} {:016x}", upload.len(), upload.hash());
    assert_eq!(String::from_utf8_lossy(&r.body), expected);
    assert_eq!(
        r.header("x-framing"),
        Some(&*format!("content-length {}", upload.len()))
    );
    let grown = peak_kib(server.child.id()).saturating_sub(before);
    eprintln!("peak grew by {grown} KiB");
    assert!(
        grown < 32 * 1024,
        "the server's peak memory grew by {grown} KiB"
    );
    drop(seen);
}

/// A body of declared length is read from the client straight into the pipe, up to its
/// last byte and not past it: the request sent right behind it, in the same write as the
/// body's end, is the connection's next.
#[test]
fn the_request_right_behind_a_streamed_body_is_answered_next() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    // 100,000 bytes: the first half, then (once the server has read it and waits for
    // more) the second half and the next request in one write.
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let mut stream = server.connect();
    stream.write_all(post_head(100_000).as_bytes()).unwrap();
    stream.write_all(&body[..50_000]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut last = body[50_000..].to_vec();
    last.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n");
    stream.write_all(&last).unwrap();
    let first = read_response(&mut stream, false);
    assert_eq!(first.status, 200);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    hasher.write(&body);
    let expected = format!("100000 {:016x}", hasher.finish());
    assert_eq!(String::from_utf8_lossy(&first.body), expected);
    let next = read_response(&mut stream, false);
    assert_eq!(next.status, 200);
    assert_eq!(next.header("x-framing"), Some("none"));
    assert!(
        String::from_utf8_lossy(&next.body).starts_with("0 "),
        "{:?}",
        String::from_utf8_lossy(&next.body)
    );
    drop(seen);
}

#[test]
fn the_origin_sees_the_first_bytes_before_the_client_sends_the_last() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    let mut stream = server.connect();
    // Chunked, length unknown: the origin gets it chunked too.
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    stream.write_all(b"5\r\nfirst\r\n").unwrap();
    // Buffering the body would keep it from the origin until the last chunk below.
    match seen.recv_timeout(Duration::from_secs(10)) {
        Ok(Event::FirstBytes) => {}
        other => panic!("the origin saw no body bytes while the client was sending: {other:?}"),
    }
    stream.write_all(b"4\r\nlast\r\n0\r\n\r\n").unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-framing"), Some("chunked"));
    assert!(String::from_utf8_lossy(&r.body).starts_with("9 "));
}

#[test]
fn a_slow_origin_holds_the_client_back() {
    let (events, seen) = mpsc::channel();
    let hold = Arc::new(Mutex::new(true));
    let origin = upload_origin(events, hold.clone());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    let mut upload = Upload::new(128);
    let mut stream = server.connect();
    stream
        .write_all(post_head(upload.len()).as_bytes())
        .unwrap();
    // The origin reads nothing: the client's writes stop once the socket buffers (the
    // kernel's, both connections) and the server's pipe are full.
    stream.set_nonblocking(true).unwrap();
    let mut written = 0u64;
    let mut idle_since = std::time::Instant::now();
    while idle_since.elapsed() < Duration::from_secs(2) && written < upload.len() {
        let i = written >> 20;
        let at = (written & ((1 << 20) - 1)) as usize;
        match stream.write(&upload.block(i)[at..]) {
            Ok(n) => {
                written += n as u64;
                idle_since = std::time::Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("held back after {written} bytes");
    assert!(
        written < 64 << 20,
        "the client sent {written} bytes while the origin read none"
    );
    // Let the origin read: the rest goes through, whole.
    *hold.lock().unwrap() = false;
    stream.set_nonblocking(false).unwrap();
    while written < upload.len() {
        let i = written >> 20;
        let at = (written & ((1 << 20) - 1)) as usize;
        stream.write_all(&upload.block(i)[at..]).unwrap();
        written += ((1 << 20) - at) as u64;
    }
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 200);
    let expected = format!("{} {:016x}", upload.len(), upload.hash());
    assert_eq!(String::from_utf8_lossy(&r.body), expected);
    drop(seen);
}

#[test]
fn a_client_that_stops_mid_body_ends_the_origins_request_and_the_server_goes_on() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    for chunked in [false, true] {
        let mut stream = server.connect();
        if chunked {
            stream
                .write_all(
                    b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
                )
                .unwrap();
            stream.write_all(b"10000\r\n").unwrap();
        } else {
            stream.write_all(post_head(1 << 20).as_bytes()).unwrap();
        }
        stream.write_all(&[b'x'; 4096]).unwrap();
        match seen.recv_timeout(Duration::from_secs(10)) {
            Ok(Event::FirstBytes) => {}
            other => panic!("the origin saw no body bytes: {other:?}"),
        }
        drop(stream);
        // The origin sees its request end short (the connection closed), not a hang.
        match seen.recv_timeout(Duration::from_secs(10)) {
            Ok(Event::Done(s)) => {
                assert!(!s.complete, "{s:?}");
                assert_eq!(s.bytes, 4096, "{s:?}");
            }
            other => panic!("the origin's request did not end: {other:?}"),
        }
    }
    // The server serves the next request.
    let mut stream = server.connect();
    stream.write_all(post_head(5).as_bytes()).unwrap();
    stream.write_all(b"hello").unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).starts_with("5 "));
}

#[test]
fn an_over_limit_chunked_body_is_refused_413_and_the_origins_request_aborted() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let toml = config(origin, "").replace("max_body_size = 4294967296", "max_body_size = 65536");
    let server = site.serve_with(&toml);
    // A declared length over the limit: 413 before the origin is asked.
    let mut stream = server.connect();
    stream.write_all(post_head(1 << 20).as_bytes()).unwrap();
    assert_eq!(read_response(&mut stream, false).status, 413);
    // Chunked, past the limit while it streams.
    let mut stream = server.connect();
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let chunk = [b'y'; 16384];
    for _ in 0..8 {
        if stream.write_all(b"4000\r\n").is_err()
            || stream.write_all(&chunk).is_err()
            || stream.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 413);
    assert_eq!(r.header("connection"), Some("close"));
    // The origin got at most the limit, and its request ended short.
    loop {
        match seen.recv_timeout(Duration::from_secs(10)) {
            Ok(Event::FirstBytes) => {}
            Ok(Event::Done(s)) => {
                assert!(!s.complete, "{s:?}");
                assert!(s.bytes <= 65536, "{s:?}");
                break;
            }
            Err(e) => panic!("the origin's request did not end: {e}"),
        }
    }
}

#[test]
fn request_buffering_sends_the_whole_body_with_its_length() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, "request_buffering = true\n"));
    let mut stream = server.connect();
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    stream.write_all(b"5\r\nfirst\r\n").unwrap();
    // Nothing reaches the origin before the whole body is in.
    assert!(
        seen.recv_timeout(Duration::from_millis(500)).is_err(),
        "the origin saw a buffered body before its end"
    );
    stream.write_all(b"4\r\nlast\r\n0\r\n\r\n").unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-framing"), Some("content-length 9"));
}

#[test]
fn a_request_whose_body_was_sent_is_not_retried_and_one_buffered_is() {
    for buffered in [false, true] {
        let o = origins(&["first", "second"]);
        for origin in &o {
            *origin.mode.lock().unwrap() = Mode::Reset;
        }
        let site = Site::new();
        let extra = if buffered {
            "request_buffering = true\n"
        } else {
            ""
        };
        let log = site.dir.path().join("access.log");
        let server = site.serve_with(&format!(
            "access_log = {log:?}\n\
             access_log_format = \"%{{upstream_addr}}x|%{{upstream_status}}x|%{{upstream_not_retried}}x\"\n\
             [[upstream]]\naddresses = [{}]\nmax_fails = 0\nretries = 1\n\
             [[route]]\nupstream = \"origin\"\n{extra}",
            quoted(&o)
        ));
        // A PUT (idempotent, so retried when it can be): each peer reads it and hangs up.
        let mut stream = server.connect();
        stream
            .write_all(b"PUT /doc HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap();
        assert_eq!(read_response(&mut stream, false).status, 502);
        let hits = (o[0].hits(), o[1].hits());
        let logged = || std::fs::read_to_string(&log).unwrap_or_default();
        eventually("the access log line", || !logged().is_empty());
        let (first, second) = (o[0].addr, o[1].addr);
        if buffered {
            assert_eq!(
                hits,
                (1, 1),
                "a buffered body is sent again to the next peer"
            );
            assert_eq!(logged().trim_end(), format!("{first}, {second}|502, 502|-"));
        } else {
            assert_eq!(logged().trim_end(), format!("{first}|502|body_sent"));
            assert_eq!(hits, (1, 0), "a streamed body once sent is not sent again");
            eventually("the log to say why it was not retried", || {
                stderr_has(
                    &server,
                    "not retried on another peer: the request body was sent",
                )
            });
        }
    }
    // A POST to a peer that refuses it (nothing of its body sent) goes to the next one.
    let good = origins(&["good"]);
    let refused = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let site = Site::new();
    let server = site.serve_with(&format!(
        "[[upstream]]\naddresses = [\"{refused}\", \"{}\"]\nretries = 1\n\
         [[route]]\nupstream = \"origin\"\n",
        good[0].addr
    ));
    let mut stream = server.connect();
    stream
        .write_all(b"POST /form HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);
    assert_eq!(good[0].hits(), 1);
}

#[test]
fn an_http2_upload_streams_too() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    // `curl -T -` streams its standard input with no length: over HTTP/2, DATA frames
    // until the stream ends, which the origin gets chunked.
    let mut curl = h2_upload(&server);
    let mut stdin = curl.stdin.take().unwrap();
    let mut upload = Upload::new(16);
    stdin.write_all(upload.block(0)).unwrap();
    match seen.recv_timeout(Duration::from_secs(10)) {
        Ok(Event::FirstBytes) => {}
        other => panic!("the origin saw no body bytes while the client was sending: {other:?}"),
    }
    for i in 1..upload.blocks {
        stdin.write_all(upload.block(i)).unwrap();
    }
    drop(stdin);
    let out = curl.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.contains("x-framing: chunked"), "{text}");
    let expected = format!("{} {:016x}", upload.len(), upload.hash());
    assert!(text.ends_with(&expected), "{text}");
}

#[test]
fn check_config_names_request_buffering() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    for (toml, needle) in [
        (
            "root = \"/srv\"\n[[route]]\nprefix = \"/\"\nroot = \"/srv\"\nrequest_buffering = true\n",
            "route[0].request_buffering",
        ),
        (
            "[[upstream]]\nname = \"app\"\n[[route]]\nupstream = \"app\"\nrequest_buffering = \"yes\"\n",
            "request_buffering",
        ),
    ] {
        std::fs::write(&path, toml).unwrap();
        let (code, stderr) = crate::harness::check_config_output(&path);
        assert_ne!(code, Some(0), "{toml}");
        assert!(stderr.contains(needle), "{toml}: {stderr}");
    }
}

#[test]
fn an_origin_that_answers_early_and_closes_has_its_answer_passed_on() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = listener.local_addr().unwrap();
    thread_per_connection(listener, |stream| {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        if head(&mut reader).is_none() {
            return;
        }
        let mut some = [0u8; 4096];
        let _ = std::io::Read::read(&mut reader, &mut some);
        // Its own limit: answered, then closed with the rest of the body unread.
        let _ = writer.write_all(
            b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig!",
        );
    });
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    let mut upload = Upload::new(32);
    let mut stream = server.connect();
    stream
        .write_all(post_head(upload.len()).as_bytes())
        .unwrap();
    for i in 0..upload.blocks {
        if stream.write_all(upload.block(i)).is_err() {
            break;
        }
    }
    let r = read_response(&mut stream, false);
    assert_eq!((r.status, r.body.as_slice()), (413, &b"big!"[..]));
}

#[test]
fn a_client_silent_mid_body_is_closed_after_timeouts_body_and_the_origin_sees_the_end() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, "[timeouts]\nbody = 1\n"));
    let mut stream = server.connect();
    stream.write_all(post_head(1 << 20).as_bytes()).unwrap();
    stream.write_all(&[b'x'; 4096]).unwrap();
    // Then nothing, the connection left open.
    match seen.recv_timeout(Duration::from_secs(10)) {
        Ok(Event::FirstBytes) => {}
        other => panic!("the origin saw no body bytes: {other:?}"),
    }
    match seen.recv_timeout(Duration::from_secs(10)) {
        Ok(Event::Done(s)) => assert_eq!((s.complete, s.bytes), (false, 4096), "{s:?}"),
        other => panic!("the origin's request did not end: {other:?}"),
    }
    crate::harness::assert_closed(&mut stream);
}

#[test]
fn an_origin_that_takes_nothing_for_the_response_timeout_is_a_504() {
    let (events, _seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::new(Mutex::new(true)));
    let site = Site::new();
    let toml = config(origin, "").replace("addresses = [", "response_timeout = 1\naddresses = [");
    let server = site.serve_with(&toml);
    let mut stream = server.connect();
    stream.write_all(post_head(128 << 20).as_bytes()).unwrap();
    // The client sends for as long as it can (everything between it and the origin
    // fills up, then its writes wait), while it waits for the answer.
    let mut sending = stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut upload = Upload::new(128);
        for i in 0..upload.blocks {
            if sending.write_all(upload.block(i)).is_err() {
                return;
            }
        }
    });
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 504);
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn an_http2_client_silent_mid_body_gets_408() {
    let (events, seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, "[timeouts]\nbody = 1\n"));
    let mut curl = h2_upload(&server);
    let mut stdin = curl.stdin.take().unwrap();
    stdin.write_all(&[b'x'; 4096]).unwrap();
    stdin.flush().unwrap();
    match seen.recv_timeout(Duration::from_secs(10)) {
        Ok(Event::FirstBytes) => {}
        other => panic!("the origin saw no body bytes: {other:?}"),
    }
    // Nothing more, its standard input left open: the stream is answered 408.
    match seen.recv_timeout(Duration::from_secs(10)) {
        Ok(Event::Done(s)) => assert_eq!((s.complete, s.bytes), (false, 4096), "{s:?}"),
        other => panic!("the origin's request did not end: {other:?}"),
    }
    drop(stdin);
    let out = curl.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/2 408"), "{text}");
}

#[test]
fn an_origin_that_refuses_the_upload_early_is_heard_while_it_keeps_its_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = listener.local_addr().unwrap();
    thread_per_connection(listener, |stream| {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        if head(&mut reader).is_none() {
            return;
        }
        // Its own refusal, then it reads nothing more and keeps the connection open.
        let _ = writer.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nno!\n");
        std::thread::sleep(Duration::from_secs(30));
    });
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    let mut stream = server.connect();
    stream.write_all(post_head(128 << 20).as_bytes()).unwrap();
    let mut sending = stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut upload = Upload::new(128);
        for i in 0..upload.blocks {
            if sending.write_all(upload.block(i)).is_err() {
                return;
            }
        }
    });
    let r = read_response(&mut stream, false);
    assert_eq!((r.status, r.body.as_slice()), (401, &b"no!\n"[..]));
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn expect_100_continue_goes_through_and_the_origins_interim_answer_is_passed_over() {
    let (events, _seen) = mpsc::channel();
    let origin = upload_origin(events, Arc::default());
    let site = Site::new();
    let server = site.serve_with(&config(origin, ""));
    let mut upload = Upload::new(8);
    let mut stream = server.connect();
    write!(
        stream,
        "POST /upload HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        upload.len()
    )
    .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    reader.read_line(&mut line).unwrap();
    for i in 0..upload.blocks {
        stream.write_all(upload.block(i)).unwrap();
    }
    drop(reader);
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 200);
    let expected = format!("{} {:016x}", upload.len(), upload.hash());
    assert_eq!(String::from_utf8_lossy(&r.body), expected);
}

/// curl uploading its standard input to `/upload` over h2c (prior knowledge), printing
/// the response head: with `-T -` it sends no length, DATA frames until the stream ends.
fn h2_upload(server: &Server) -> std::process::Child {
    std::process::Command::new("curl")
        .args(["-s", "--http2-prior-knowledge", "-T", "-", "-D", "-"])
        .arg(format!("http://{}/upload", server.addr))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl")
}
