//! HTTP/2 (docs/http2.md): curl and h2load for what clients do, and a client written
//! here from raw frames for what attackers do (floods, resets, windows never opened).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{eventually, stderr_has, Server, Site};
use crate::tls::TlsSite;

// --- A client from raw frames (RFC 9113 section 4).

pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
const ENHANCE_YOUR_CALM: u32 = 0xb;
const REFUSED_STREAM: u32 = 0x7;

pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 section 5.1), `first` holding the
/// representation's flag bits.
fn integer(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A header block of literal fields without indexing (no Huffman, no table).
pub(crate) fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0);
        string(&mut out, name.as_bytes());
        string(&mut out, value.as_bytes());
    }
    out
}

/// HEADERS then RST_STREAM (CANCEL) for `count` streams from the `first`-th: what a
/// Rapid Reset client sends.
fn open_and_cancel(first: u32, count: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    for i in first..first + count {
        let id = 2 * i + 1;
        bytes.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            id,
            &get("/hello.txt"),
        ));
        bytes.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    bytes
}

fn get(path: &str) -> Vec<u8> {
    block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
    ])
}

/// Why no frame came.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The server closed the connection (or reset it).
    Closed,
    /// Nothing within the read timeout.
    TimedOut,
}

struct Frames {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Frames {
    /// Connects with prior knowledge and sends the preface and `settings`.
    fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> Frames {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut frames = Frames {
            stream,
            buf: Vec::new(),
        };
        let mut payload = Vec::new();
        for (id, value) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &payload));
        frames.send(&hello).unwrap();
        frames
    }

    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next frame: (type, flags, stream, payload), or why there is none.
    fn next(&mut self) -> Result<(u8, u8, u32, Vec<u8>), End> {
        loop {
            if self.buf.len() >= 9 {
                let len = (self.buf[0] as usize) << 16
                    | (self.buf[1] as usize) << 8
                    | self.buf[2] as usize;
                if self.buf.len() >= 9 + len {
                    let kind = self.buf[3];
                    let flags = self.buf[4];
                    let id = u32::from_be_bytes(self.buf[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    let payload = self.buf[9..9 + len].to_vec();
                    self.buf.drain(..9 + len);
                    return Ok((kind, flags, id, payload));
                }
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(End::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if is_timeout(&e) => return Err(End::TimedOut),
                Err(_) => return Err(End::Closed),
            }
        }
    }

    /// The next frame; `None` at the end of the connection (or after the read timeout).
    fn read(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        self.next().ok()
    }

    /// Whether the server closes the connection within 10 s (frames before are read
    /// and dropped).
    fn closed(&mut self) -> bool {
        self.closed_within(Duration::from_secs(10))
    }

    fn closed_within(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        loop {
            match self.next() {
                Ok(_) => {}
                Err(end) => return end == End::Closed,
            }
        }
    }

    /// Whether the server ends the connection (GOAWAY, or closes it) within `wait`;
    /// false if it is still open and silent when `wait` is over.
    fn cut_off(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        loop {
            match self.next() {
                Ok((GOAWAY, ..)) => return true,
                Ok(_) => {}
                Err(end) => return end == End::Closed,
            }
        }
    }

    /// Reads until a GOAWAY (its error code) or the end of the connection (`None`).
    fn goaway(&mut self) -> Option<u32> {
        while let Some((kind, _, _, payload)) = self.read() {
            if kind == GOAWAY {
                return Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
            }
        }
        None
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn curl(args: &[&str]) -> std::process::Output {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "30"])
        .args(args)
        .output()
        .expect("curl");
    out
}

/// One request with prior knowledge: (status and headers as curl prints them, body).
fn h2c(server: &Server, path: &str, extra: &[&str]) -> (String, Vec<u8>) {
    let url = format!("http://{}{path}", server.addr);
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let mut args = vec!["--http2-prior-knowledge", "-D", head.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(&url);
    let out = curl(&args);
    (
        std::fs::read_to_string(&head).unwrap_or_default(),
        out.stdout,
    )
}

/// h2load's report of a run of `requests` requests, every one of which succeeded.
pub(crate) fn h2load(requests: usize, args: &[&str]) -> String {
    let out = Command::new("h2load")
        .args(["-n", &requests.to_string()])
        .args(args)
        .output()
        .expect("h2load is missing: scripts/test.sh installs it (nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains(&format!("{requests} succeeded, 0 failed, 0 errored")),
        "{args:?}: {text}"
    );
    text
}

/// A good client, asked after an attack: served at once, over HTTP/2.
fn assert_still_served(server: &Server) {
    let started = Instant::now();
    let (head, body) = h2c(server, "/hello.txt", &[]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(body, b"hello world\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "slow: {:?}",
        started.elapsed()
    );
}

/// After an attack: the server's memory stayed bounded and a good client is served.
fn assert_unharmed(server: &Server) {
    let rss = server.rss_kib();
    assert!(rss < 200 * 1024, "RSS {rss} KiB");
    assert_still_served(server);
}

// --- What clients do.

#[test]
fn files_are_byte_exact_over_h2c_and_tls_with_ranges_head_and_validators() {
    let tls = TlsSite::start("", "");
    let big: Vec<u8> = (0..64u32 << 20).map(|i| (i * 7 + i / 4093) as u8).collect();
    tls.site.write("big.bin", &big);
    let server = &tls.server;

    let (head, body) = h2c(server, "/big.bin", &[]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(head.contains("content-length: 67108864"), "{head}");
    assert!(body == big, "64 MiB body differs ({} bytes)", body.len());

    let out = tls.curl("/big.bin", &["--http2", "-w", "%{http_version}", "-o", "-"]);
    assert!(out.stdout.ends_with(b"2"), "not HTTP/2 over TLS");
    assert!(
        out.stdout[..out.stdout.len() - 1] == big[..],
        "TLS body differs"
    );

    let (head, body) = h2c(server, "/big.bin", &["-r", "1000-1999"]);
    assert!(head.starts_with("HTTP/2 206"), "{head}");
    assert!(
        head.contains("content-range: bytes 1000-1999/67108864"),
        "{head}"
    );
    assert_eq!(body, &big[1000..2000]);

    let (head, body) = h2c(server, "/hello.txt", &["-I"]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(head.contains("content-length: 12"), "{head}");
    assert!(
        body.is_empty() || body.starts_with(b"HTTP/2"),
        "HEAD has no body"
    );

    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .expect("etag")
        .trim()
        .to_string();
    let (head, body) = h2c(
        server,
        "/hello.txt",
        &["-H", &format!("If-None-Match: {etag}")],
    );
    assert!(head.starts_with("HTTP/2 304"), "{head}");
    assert!(body.is_empty());

    let (head, _) = h2c(server, "/missing", &[]);
    assert!(head.starts_with("HTTP/2 404"), "{head}");
}

/// Over TLS the records of an HTTP/2 connection gather until the h2 crate's flush, and a
/// flush right after a full DATA frame is held until the connection's next poll: files
/// whose last frame is full, and sizes around that, each alone on its connection, still
/// arrive whole and at once.
#[test]
fn responses_ending_on_a_full_data_frame_leave_at_once_over_tls() {
    let tls = TlsSite::start("", "");
    for size in [16_384usize, 16_385, 32_768, 58_368, 65_536, 65_545, 262_144] {
        let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let name = format!("f{size}.bin");
        tls.site.write(&name, &body);
        let started = Instant::now();
        let out = tls.curl(&format!("/{name}"), &["--http2", "-o", "-"]);
        assert!(
            out.stdout == body,
            "{size} bytes: body differs ({} bytes)",
            out.stdout.len()
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{size} bytes took {:?}",
            started.elapsed()
        );
    }
    // A client that reads slowly: the socket takes part of the queue at a time.
    let body: Vec<u8> = (0..4usize << 20).map(|i| (i % 253) as u8).collect();
    tls.site.write("slow.bin", &body);
    let out = tls.curl("/slow.bin", &["--http2", "--limit-rate", "4M", "-o", "-"]);
    assert!(
        out.stdout == body,
        "slow read: body differs ({} bytes)",
        out.stdout.len()
    );
}

/// Files small enough for the file cache's memory (below `sendfile_min_size`) are framed
/// from the cache's copy: whole, ranged, as parts of a multipart/byteranges body, and
/// past the windows (8 KiB per stream, 64 KiB for the connection, ten 10 KB files at a
/// time) they arrive as HTTP/1.1 gets them.
#[test]
fn files_held_in_memory_are_byte_exact_over_h2_whole_ranged_and_past_the_window() {
    let site = Site::new();
    let small: Vec<u8> = (0..10_000u32).map(|i| (i * 31 + i / 97) as u8).collect();
    site.write("small.bin", &small);
    let server = Server::start(&site.root(), &[]);
    let url = format!("http://{}/small.bin", server.addr);

    let (head, body) = h2c(&server, "/small.bin", &[]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(body == small, "whole body differs ({} bytes)", body.len());

    let (head, body) = h2c(&server, "/small.bin", &["-r", "100-199"]);
    assert!(head.starts_with("HTTP/2 206"), "{head}");
    assert_eq!(body, &small[100..200]);

    // Multipart: the part heads and the parts, as HTTP/1.1 frames them (each response
    // has a boundary of its own).
    let unbound = |head: &str, body: Vec<u8>| {
        let boundary = head
            .lines()
            .find_map(|l| l.split_once("boundary="))
            .expect("a boundary")
            .1
            .trim()
            .to_string();
        String::from_utf8_lossy(&body).replace(&boundary, "BOUNDARY")
    };
    let (head, body) = h2c(&server, "/small.bin", &["-r", "0-9,5000-5009"]);
    assert!(head.starts_with("HTTP/2 206"), "{head}");
    let over_h2 = unbound(&head, body);
    let dir = tempfile::tempdir().unwrap();
    let head1 = dir.path().join("head");
    let http1 = curl(&[
        "--http1.1",
        "-D",
        head1.to_str().unwrap(),
        "-r",
        "0-9,5000-5009",
        &url,
    ]);
    let over_h1 = unbound(&std::fs::read_to_string(&head1).unwrap(), http1.stdout);
    assert!(over_h2.contains("bytes 5000-5009/10000"), "{over_h2}");
    assert_eq!(over_h2, over_h1, "multipart bodies differ");

    // Ten 10 KB bodies at a time through 8 KiB stream windows and a 64 KiB connection
    // window: each body waits for its WINDOW_UPDATE part way.
    let text = h2load(200, &["-c", "1", "-m", "10", "-w", "13", "-W", "16", &url]);
    assert!(
        text.contains("(2000000) data"),
        "not every byte arrived: {text}"
    );
}

#[test]
fn a_hundred_concurrent_streams_on_one_connection() {
    let tls = TlsSite::start("", "");
    let urls = [
        format!("http://{}/hello.txt", tls.server.addr),
        format!("https://127.0.0.1:{}/hello.txt", tls.https.port()),
    ];
    for url in urls {
        let text = h2load(1000, &["-c", "1", "-m", "100", &url]);
        assert!(
            text.contains("Application protocol: h2") || text.contains("h2c"),
            "{text}"
        );
    }
}

#[test]
fn esi_pages_proxied_bodies_lua_and_cached_responses_over_http2() {
    // ESI and request bodies through the proxy, against what HTTP/1.1 gets.
    let site = Site::new();
    let origin = crate::proxy::origin();
    let server = Server::start(&site.root(), &["--proxy", &format!("http://{origin}")]);
    let (head, h2_page) = h2c(&server, "/page", &[]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    let h1_page = curl(&["--http1.1", &format!("http://{}/page", server.addr)]).stdout;
    assert_eq!(h2_page, b"<html>[0][1][2]</html>");
    assert_eq!(h2_page, h1_page);
    // Chunked over HTTP/1.1, a plain stream of DATA over HTTP/2: no field HTTP/2 forbids
    // (RFC 9113 section 8.2.2).
    for forbidden in ["connection:", "keep-alive:", "transfer-encoding:"] {
        assert!(!head.to_ascii_lowercase().contains(forbidden), "{head}");
    }
    let (head, echo) = h2c(&server, "/echo", &["--data-binary", "a body over h2"]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    let echo = String::from_utf8_lossy(&echo).to_ascii_lowercase();
    assert!(echo.ends_with("\n\na body over h2"), "{echo}");
    assert!(echo.contains("content-length: 14"), "{echo}");
    assert!(
        echo.contains("host: "),
        "the :authority goes upstream as Host: {echo}"
    );
    drop(server);

    // A Lua handler.
    let hello =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/lua/hello.lua");
    let server = Server::start(
        &site.root(),
        &["--script", &format!("/hello={}", hello.display())],
    );
    let (head, body) = h2c(&server, "/hello", &[]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(body, b"Hello World\n");
    drop(server);

    // A cached response: the second request never reaches the origin.
    let origin = crate::cache::Origin::start();
    let config = site.dir.path().join("cached.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"o\"\naddresses = [\"{}\"]\n[[route]]\nprefix = \"/\"\nupstream = \"o\"\n",
            origin.addr
        ),
    )
    .unwrap();
    let server = Server::start(&site.root(), &["--config", config.to_str().unwrap()]);
    for _ in 0..2 {
        let (head, body) = h2c(&server, "/frag/x", &[]);
        assert!(head.starts_with("HTTP/2 200"), "{head}");
        assert_eq!(body, b"[x]");
    }
    assert_eq!(origin.hits("/frag/x"), 1);
}

#[test]
fn the_access_log_says_http_2_0() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = Server::start(&site.root(), &["--access-log", log.to_str().unwrap()]);
    let (head, _) = h2c(&server, "/hello.txt?x=1", &[]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    eventually("the log line", || {
        std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("\"GET /hello.txt?x=1 HTTP/2.0\" 200 12"))
    });
}

#[test]
fn http2_false_turns_off_both_alpn_h2_and_prior_knowledge() {
    let tls = TlsSite::start("http2 = false", "");
    let url = format!("https://localhost:{}/hello.txt", tls.https.port());
    let resolve = format!("localhost:{}:127.0.0.1", tls.https.port());
    let out = curl(&[
        "--http2",
        "--cacert",
        tls.cert.cert.to_str().unwrap(),
        "--resolve",
        &resolve,
        "-o",
        "/dev/null",
        "-w",
        "%{http_version}",
        &url,
    ]);
    assert_eq!(out.stdout, b"1.1");
    // The preface is then an HTTP/1 request line with an unknown version.
    let mut stream = tls.server.connect();
    stream.write_all(PREFACE).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 505 "),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn over_tls_http2_is_what_alpn_chose_never_the_preface() {
    let tls = TlsSite::start("", "");
    // ALPN http/1.1, then the preface: an HTTP/1 request line (505), not HTTP/2.
    let (out, err) = crate::tls::s_client(tls.https, &["-alpn", "http/1.1", "-quiet"], PREFACE);
    assert!(
        out.starts_with(b"HTTP/1.1 505 "),
        "{:?} {err}",
        String::from_utf8_lossy(&out)
    );
}

#[test]
fn the_server_announces_its_limits_and_refuses_streams_beyond_them() {
    let site = Site::new();
    let server = site.serve_with(
        "[http2]\nmax_concurrent_streams = 2\ninitial_stream_window = 100000\nhpack_table_size = 1024\n[limits]\nmax_head_size = 10000\n",
    );
    let mut client = Frames::connect(server.addr, &[]);
    let (kind, _, _, payload) = client.read().unwrap();
    assert_eq!(kind, SETTINGS);
    let settings: Vec<(u16, u32)> = payload
        .chunks(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes(c[2..6].try_into().unwrap()),
            )
        })
        .collect();
    for expected in [(0x1, 1024), (0x3, 2), (0x4, 100000), (0x6, 10000)] {
        assert!(
            settings.contains(&expected),
            "{expected:?} not in {settings:?}"
        );
    }
    // Two streams left open by the client (no END_STREAM), then a third: refused.
    let mut bytes = frame(SETTINGS, 0x1, 0, &[]);
    for id in [1, 3, 5] {
        bytes.extend(frame(HEADERS, END_HEADERS, id, &get("/hello.txt")));
    }
    client.send(&bytes).unwrap();
    let mut refused = false;
    while let Some((kind, _, id, payload)) = client.read() {
        if kind == RST_STREAM && id == 5 {
            assert_eq!(
                u32::from_be_bytes(payload[..4].try_into().unwrap()),
                REFUSED_STREAM
            );
            refused = true;
            break;
        }
    }
    assert!(refused, "the third stream was not refused");
}

/// Request bodies the server stops reading (past `limits.max_body_size`, a body sent to
/// a file) go back to the connection's window: twenty uploads of 64 KiB each, more than
/// the connection's 1 MiB window, leave it open for the next request.
#[test]
fn bodies_the_server_stops_reading_give_their_window_back() {
    let site = Site::new();
    let server = site.serve_with("[limits]\nmax_body_size = 10000\n");
    let mut client = Frames::connect(server.addr, &[]);
    client.send(&frame(SETTINGS, 0x1, 0, &[])).unwrap();
    let post = block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/hello.txt"),
        (":authority", "localhost"),
    ]);
    for i in 0..20u32 {
        let id = 2 * i + 1;
        // No content-length: the server reads until it has seen more than it allows.
        let mut bytes = frame(HEADERS, END_HEADERS, id, &post);
        for _ in 0..3 {
            bytes.extend(frame(DATA, 0, id, &[b'u'; 16_384]));
        }
        bytes.extend(frame(DATA, END_STREAM, id, &[b'u'; 16_383]));
        client.send(&bytes).unwrap();
        let answered = loop {
            match client.read() {
                Some((HEADERS, _, got, _)) if got == id => break true,
                Some((GOAWAY, ..)) | None => break false,
                Some(_) => {}
            }
        };
        assert!(answered, "upload {i} was not answered");
    }
    let mut bytes = frame(HEADERS, END_HEADERS | END_STREAM, 41, &get("/hello.txt"));
    bytes.extend(frame(PING, 0, 0, &[1; 8]));
    client.send(&bytes).unwrap();
    loop {
        match client.read() {
            Some((DATA, flags, 41, _)) if flags & END_STREAM != 0 => break,
            Some((GOAWAY, _, _, payload)) => panic!("GOAWAY {payload:?}"),
            None => panic!("the request after the uploads was not answered"),
            Some(_) => {}
        }
    }
}

// --- What attackers do.

#[test]
fn rapid_reset_gets_goaway_and_other_clients_are_served() {
    let site = Site::new();
    let server = site.serve_with("[http2]\nmax_reset_streams = 1000\n");
    let mut client = Frames::connect(server.addr, &[]);
    let mut sent = 0u32;
    // Open and cancel streams in batches, as CVE-2023-44487's clients do.
    for batch in 0..100u32 {
        let bytes = open_and_cancel(batch * 100, 100);
        if client.send(&bytes).is_err() {
            break;
        }
        sent += 100;
        if sent >= 10_000 {
            break;
        }
    }
    assert_eq!(
        client.goaway(),
        Some(ENHANCE_YOUR_CALM),
        "after {sent} cancelled streams"
    );
    eventually("the Rapid Reset line", || {
        stderr_has(&server, "Rapid Reset")
    });
    assert_still_served(&server);
}

#[test]
fn cancelling_fewer_streams_than_the_limit_is_not_an_attack() {
    let site = Site::new();
    let server = site.serve_with("[http2]\nmax_reset_streams = 1000\n");
    let mut client = Frames::connect(server.addr, &[]);
    // A browser leaving a page cancels what it had asked for: 900 streams here.
    let mut bytes = open_and_cancel(0, 900);
    bytes.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1801,
        &get("/hello.txt"),
    ));
    client.send(&bytes).unwrap();
    let mut answered = false;
    while let Some((kind, flags, id, _)) = client.read() {
        assert_ne!(kind, GOAWAY, "GOAWAY after 900 cancelled streams");
        if kind == DATA && id == 1801 && flags & END_STREAM != 0 {
            answered = true;
            break;
        }
    }
    assert!(
        answered,
        "the stream after the cancelled ones was not answered"
    );
}

#[test]
fn an_endless_continuation_is_cut_off_at_the_head_budget() {
    let site = Site::new();
    let server = site.serve();
    let mut client = Frames::connect(server.addr, &[]);
    client
        .stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut bytes = frame(HEADERS, 0, 1, &get("/hello.txt"));
    let filler = "x".repeat(1000);
    let mut written = 0usize;
    let mut cut_off = false;
    for i in 0..10_000 {
        bytes.extend(frame(
            CONTINUATION,
            0,
            1,
            &block(&[(&format!("x-{i}"), &filler)]),
        ));
        if let Err(e) = client.send(&bytes) {
            // Closed by the server, not merely stalled.
            assert!(!is_timeout(&e), "stalled after {written} bytes: {e}");
            cut_off = true;
            break;
        }
        written += bytes.len();
        bytes.clear();
    }
    // The server closed (or sent GOAWAY) long before 10 MB of header block.
    cut_off = cut_off || client.cut_off(Duration::from_secs(5));
    assert!(cut_off, "{written} bytes of CONTINUATION accepted");
    assert_unharmed(&server);
}

#[test]
fn an_hpack_bomb_is_refused_without_decoding_it() {
    let site = Site::new();
    let server = site.serve();
    let mut client = Frames::connect(server.addr, &[]);
    // One 4000-byte field into the dynamic table, then 16,000 one-byte references to it:
    // 64 MB of fields from a 16 KB block.
    let mut block = get("/hello.txt");
    block.push(0x40); // literal with incremental indexing, new name
    string(&mut block, b"x-bomb");
    string(&mut block, "b".repeat(4000).as_bytes());
    block.extend(std::iter::repeat_n(0xbe, 16_000)); // indexed: dynamic entry 62
    let mut bytes = frame(HEADERS, END_STREAM, 1, &block[..16_000]);
    bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &block[16_000..]));
    client.send(&bytes).unwrap();
    // Refused: a response that is not 200 (0x88, HPACK's static index 8), a stream reset,
    // GOAWAY, or the connection closed; never silence, never 200.
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let refused = loop {
        match client.read() {
            Some((HEADERS, _, 1, payload)) => break payload[0] != 0x88,
            Some((RST_STREAM, ..)) | Some((GOAWAY, ..)) => break true,
            Some(_) => {}
            None => break client.cut_off(Duration::from_millis(10)),
        }
    };
    assert!(refused, "the bomb was answered 200, or not at all");
    assert_unharmed(&server);
}

#[test]
fn ping_settings_and_window_update_floods_stay_bounded() {
    let site = Site::new();
    let server = site.serve();
    let before = server.rss_kib();
    for (name, flood) in [
        ("PING", frame(PING, 0, 0, &[7; 8])),
        ("SETTINGS", frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100])),
        (
            "WINDOW_UPDATE",
            frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()),
        ),
    ] {
        let mut client = Frames::connect(server.addr, &[]);
        client
            .stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let batch: Vec<u8> = flood.repeat(10_000);
        // Never reading what the server answers: it must stop reading, not queue.
        let started = Instant::now();
        let mut sent = 0usize;
        while started.elapsed() < Duration::from_secs(5) && sent < 1_000_000 {
            if client.send(&batch).is_err() {
                break;
            }
            sent += 10_000;
        }
        assert_still_served(&server);
        let grown = server.rss_kib().saturating_sub(before);
        assert!(
            grown < 64 * 1024,
            "{name} flood ({sent} frames): RSS grew {grown} KiB"
        );
    }
}

#[test]
fn a_client_that_never_opens_its_window_is_closed_at_the_write_timeout() {
    let site = Site::new();
    site.write("big.bin", &vec![b'x'; 4 << 20]);
    let server = site.serve_with("[timeouts]\nwrite = 1\n");
    // SETTINGS_INITIAL_WINDOW_SIZE 0: the server may send no DATA until told.
    let mut client = Frames::connect(server.addr, &[(0x4, 0)]);
    client
        .send(&frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &get("/big.bin"),
        ))
        .unwrap();
    let started = Instant::now();
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    let mut data = 0;
    loop {
        match client.next() {
            Ok((DATA, _, _, payload)) => data += payload.len(),
            Ok(_) => {}
            Err(End::Closed) => break,
            Err(End::TimedOut) => panic!("not closed after {:?}", started.elapsed()),
        }
    }
    assert_eq!(data, 0);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed after {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
    assert_still_served(&server);
}

#[test]
fn shutdown_sends_goaway_and_finishes_the_streams_in_flight() {
    let site = Site::new();
    let origin = crate::cache::Origin::start();
    let config = site.dir.path().join("slow.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"o\"\naddresses = [\"{}\"]\n[[route]]\nprefix = \"/slow\"\nupstream = \"o\"\n",
            origin.addr
        ),
    )
    .unwrap();
    let server = Server::start(&site.root(), &["--config", config.to_str().unwrap()]);
    let mut client = Frames::connect(server.addr, &[]);
    // /slow/X answers after 500 ms.
    client
        .send(&frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &get("/slow/a"),
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    server.signal(libc::SIGTERM);
    let (mut goaway, mut headers, mut ended) = (false, false, false);
    while let Some((kind, flags, id, _)) = client.read() {
        match kind {
            GOAWAY => goaway = true,
            HEADERS if id == 1 => headers = true,
            DATA if id == 1 && flags & END_STREAM != 0 => ended = true,
            _ => {}
        }
        if ended {
            break;
        }
    }
    assert!(goaway, "no GOAWAY");
    assert!(headers && ended, "the stream in flight was not finished");
}

#[test]
fn a_thousand_idle_http2_connections_fit_the_budget_and_a_new_one_evicts_the_oldest() {
    let site = Site::new();
    let server = site.serve_with("max_connections = 1000\n");
    let before = server.rss_kib();
    // One after another, each with its SETTINGS exchanged before the next connects: all
    // are open HTTP/2 connections, and the server saw them go idle in this order (had
    // they all connected first, the worker could finish their handshakes in another).
    let mut clients: Vec<Frames> = (0..1000)
        .map(|_| {
            let mut client = Frames::connect(server.addr, &[]);
            client.send(&frame(SETTINGS, 0x1, 0, &[])).unwrap();
            let (kind, _, _, _) = client.read().expect("server SETTINGS");
            assert_eq!(kind, SETTINGS);
            client
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let per_connection = (server.rss_kib().saturating_sub(before)) as f64 / 1000.0;
    // What one idle HTTP/2 connection costs here (docs/http2.md records the figure).
    assert!(
        per_connection < 64.0,
        "{per_connection:.1} KiB per idle HTTP/2 connection"
    );
    // The budget is full: a new client is served after the oldest idle one is closed.
    assert_still_served(&server);
    assert!(
        clients[0].closed(),
        "the oldest idle connection was not closed"
    );
    assert!(
        !clients[999].closed_within(Duration::from_millis(200)),
        "the newest was closed"
    );
}

#[test]
fn a_reload_that_changes_http2_settings_sends_goaway_and_one_that_does_not_keeps_the_connection() {
    let site = Site::new();
    let server = site.serve_with("[http2]\nmax_concurrent_streams = 100\n");
    let config = site.dir.path().join("tessera.toml");
    let ask = |client: &mut Frames, id: u32| -> Option<u8> {
        client
            .send(&frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                id,
                &get("/hello.txt"),
            ))
            .ok()?;
        while let Some((kind, flags, sid, _)) = client.read() {
            if kind == GOAWAY {
                return Some(GOAWAY);
            }
            if kind == DATA && sid == id && flags & END_STREAM != 0 {
                return Some(DATA);
            }
        }
        None
    };
    let mut client = Frames::connect(server.addr, &[]);
    assert_eq!(ask(&mut client, 1), Some(DATA));

    // Another key changes: the connection goes on, its next stream on the new config.
    std::fs::write(
        &config,
        "[http2]\nmax_concurrent_streams = 100\n[timeouts]\nidle = 30\n",
    )
    .unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    assert_eq!(ask(&mut client, 3), Some(DATA));

    // `[http2]` changes: GOAWAY (the stream asked is still answered or refused, never
    // lost), and a new connection gets the new SETTINGS.
    std::fs::write(&config, "[http2]\nmax_concurrent_streams = 7\n").unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=3"));
    assert_eq!(ask(&mut client, 5), Some(GOAWAY));
    let mut fresh = Frames::connect(server.addr, &[]);
    let (kind, _, _, payload) = fresh.read().unwrap();
    assert_eq!(kind, SETTINGS);
    assert!(
        payload.chunks(6).any(|c| c == [0, 3, 0, 0, 0, 7]),
        "{payload:?}"
    );
}

#[test]
fn metrics_count_http2_connections_streams_and_goaways() {
    use crate::metrics::{admin_addr, admin_get, samples, sum};
    let site = Site::new();
    let server =
        site.serve_with("admin_listen = \"127.0.0.1:0\"\n[http2]\nmax_reset_streams = 10\n");
    let admin = admin_addr(&server);
    for _ in 0..3 {
        assert_still_served(&server);
    }
    let mut client = Frames::connect(server.addr, &[]);
    let bytes = open_and_cancel(0, 2000);
    let _ = client.send(&bytes);
    assert_eq!(client.goaway(), Some(ENHANCE_YOUR_CALM));
    eventually("the figures", || {
        let (_, text) = admin_get(admin, "/metrics", "");
        let s = samples(&text);
        sum(&s, "tessera_http2_connections_total", &[]) == 4.0
            && sum(&s, "tessera_http2_streams_total", &["finished"]) >= 3.0
            && sum(&s, "tessera_http2_goaways_total", &["rapid_reset"]) == 1.0
            && sum(
                &s,
                "tessera_requests_total",
                &["kind=\"static\"", "GET", "2xx"],
            ) >= 3.0
    });
}

#[test]
fn the_authority_chooses_the_virtual_host() {
    let site = Site::new();
    let a = site.dir.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("who.txt"), b"a\n").unwrap();
    site.write("who.txt", b"top\n");
    let server = site.serve_with(&format!(
        "[[host]]\nnames = [\"a.test\"]\nroot = {:?}\n",
        a.display().to_string()
    ));
    let port = server.addr.port();
    for (host, want) in [("a.test", &b"a\n"[..]), ("other.test", b"top\n")] {
        let resolve = format!("{host}:{port}:127.0.0.1");
        let url = format!("http://{host}:{port}/who.txt");
        let out = curl(&["--http2-prior-knowledge", "--resolve", &resolve, &url]);
        assert_eq!(out.stdout, want, "{host}");
    }
    // A Host field that names another host than the :authority is refused (400: HPACK
    // static index 12, the first byte of the response's header block is 0x8c).
    let mut client = Frames::connect(server.addr, &[]);
    let mut fields = get("/who.txt");
    fields.extend(block(&[("host", "a.test")]));
    client
        .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &fields))
        .unwrap();
    let status = loop {
        match client.read() {
            Some((HEADERS, _, 1, payload)) => break payload[0],
            Some(_) => {}
            None => panic!("no response"),
        }
    };
    assert_eq!(status, 0x8c, "not 400");
}

#[test]
fn streams_cancelled_while_their_handler_waits_count_toward_rapid_reset() {
    let site = Site::new();
    let origin = crate::cache::Origin::start();
    let server = site.serve_with(&format!(
        "[http2]\nmax_reset_streams = 50\n\
         [[upstream]]\nname = \"o\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/slow\"\nupstream = \"o\"\n",
        origin.addr
    ));
    let mut client = Frames::connect(server.addr, &[]);
    // Each stream is accepted and waits on the origin (500 ms) when the client cancels
    // it: the handler's work is dropped and the cancel counted.
    for i in 0..200u32 {
        let id = 2 * i + 1;
        let path = format!("/slow/{i}");
        if client
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &get(&path)))
            .is_err()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(3));
        if client
            .send(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes()))
            .is_err()
        {
            break;
        }
    }
    assert_eq!(client.goaway(), Some(ENHANCE_YOUR_CALM));
    eventually("the Rapid Reset line", || {
        stderr_has(&server, "Rapid Reset")
    });
    assert_still_served(&server);
}
