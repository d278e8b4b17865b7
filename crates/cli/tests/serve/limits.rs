//! Fixed memory: connection slots, eviction of idle connections, accept pausing, state
//! timeouts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::harness::{assert_closed, read_response, Server, Site};

fn get_on(stream: &mut TcpStream, path: &str) -> Vec<u8> {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    read_response(stream, false).body
}

/// True if the server has closed `stream` (a read sees end-of-file or a reset).
fn is_closed(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut byte = [0u8; 1];
    let closed = match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    closed
}

#[test]
fn full_slots_evict_the_oldest_idle_connection() {
    let site = Site::new();
    let server = site.serve_with("max_connections = 4\n");
    let mut idle: Vec<TcpStream> = (0..4).map(|_| server.connect()).collect();
    for stream in &mut idle {
        assert_eq!(get_on(stream, "/hello.txt"), b"hello world\n");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A fifth client is served; the oldest idle connection made room for it.
    let mut fifth = server.connect();
    assert_eq!(get_on(&mut fifth, "/hello.txt"), b"hello world\n");
    assert!(
        is_closed(&mut idle[0]),
        "the oldest idle connection was not evicted"
    );
    for stream in &mut idle[1..] {
        assert_eq!(get_on(stream, "/hello.txt"), b"hello world\n");
    }
}

#[test]
fn busy_connections_are_never_cut_and_accepting_pauses() {
    let site = Site::new();
    let data = vec![3u8; 8 << 20];
    site.write("big.bin", &data);
    let server = site.serve_with("max_connections = 2\n");
    // A: a response in flight to a client that is not reading (writing state).
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut writing: TcpStream = socket.into();
    writing
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // B: half a request head (reading-head state).
    let mut reading = server.connect();
    reading.write_all(b"GET /hello.txt HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // C: both slots are busy and none is idle, so C waits in the backlog...
    let mut waiting = server.connect();
    waiting
        .write_all(b"GET /style.css HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        waiting.read(&mut byte).is_err(),
        "a connection was served beyond max_connections"
    );
    // ...until B completes its request and goes idle: then B is evicted and C served.
    reading.write_all(b"Host: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut reading, false).body, b"hello world\n");
    waiting
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(read_response(&mut waiting, false).body, b"body{}\n");
    assert_closed(&mut reading);
    // A was never cut: it receives every byte.
    writing
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let r = read_response(&mut writing, false);
    assert_eq!(r.body.len(), data.len());
}

#[test]
fn slowloris_connections_close_at_the_head_timeout() {
    let site = Site::new();
    let server = site.serve_with("[timeouts]\nhead = 1.0\n");
    let mut slow: Vec<TcpStream> = (0..50).map(|_| server.connect()).collect();
    let started = Instant::now();
    let head = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa";
    let mut sent = 0;
    let mut closed_at = None;
    // Trickle one header byte per connection every 100 ms, for at most 5 s.
    while started.elapsed() < Duration::from_secs(5) {
        let mut alive = 0;
        for stream in &mut slow {
            if stream.write_all(&head[sent % head.len()..][..1]).is_ok() {
                alive += 1;
            }
        }
        sent += 1;
        // A normal client is answered promptly throughout.
        let asked = Instant::now();
        assert_eq!(server.get("/hello.txt").body, b"hello world\n");
        assert!(asked.elapsed() < Duration::from_millis(500));
        if alive == 0 || slow.iter_mut().all(is_closed) {
            closed_at = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed_at = closed_at.expect("slowloris connections still open after 5 s");
    assert!(
        closed_at >= Duration::from_millis(900),
        "closed before the head timeout: {closed_at:?}"
    );
}

#[test]
fn idle_connections_close_at_the_idle_timeout() {
    let site = Site::new();
    let server = site.serve_with("[timeouts]\nidle = 0.5\n");
    let mut stream = server.connect();
    assert_eq!(get_on(&mut stream, "/hello.txt"), b"hello world\n");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(is_closed(&mut stream));
}

#[test]
fn a_flood_beyond_the_limit_stays_within_the_memory_budget() {
    let site = Site::new();
    let server: Server = site.serve_with("max_connections = 256\nbacklog = 4096\n");
    let base = server.rss_kib();
    // 1,500 connections, each with half a request head so it holds a buffer set if it
    // gets a slot; only 256 can.
    let mut flood = Vec::new();
    for _ in 0..1500 {
        match TcpStream::connect(server.addr) {
            Ok(mut s) => {
                let _ = s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX: ");
                flood.push(s);
            }
            Err(_) => break,
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let flooded = server.rss_kib();
    // Budget: 256 slots, each with at most one buffer set (16 KiB read buffer and an
    // 18 KiB output buffer) plus its task and socket registration, ~40 KiB in all.
    let budget = 256 * 40;
    assert!(
        flooded - base.min(flooded) <= budget,
        "RSS grew by {} KiB under the flood (budget {budget} KiB)",
        flooded - base
    );
    drop(flood);
    // And the server still answers.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.get("/hello.txt").body, b"hello world\n");
}

#[test]
fn slow_body_closes_at_the_body_timeout() {
    let site = Site::new();
    let server = site.serve_with("[timeouts]\nbody = 1.0\n");
    let mut stream = server.connect();
    stream
        .write_all(b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 405);
    let started = Instant::now();
    // One body byte every 100 ms would take 100 s; the body timeout ends it after 1 s.
    while stream.write_all(b"x").is_ok() && !is_closed(&mut stream) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slow body still open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(started.elapsed() >= Duration::from_millis(800));
}

#[test]
fn a_client_that_never_reads_closes_at_the_write_timeout() {
    let site = Site::new();
    site.write("big.bin", &vec![1u8; 16 << 20]);
    let server = site.serve_with("[timeouts]\nwrite = 1.0\n");
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    stream
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    // The server gave up: reading now ends (EOF or reset) long before 16 MiB.
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    assert!(
        total < 16 << 20,
        "the stalled response was not cut off ({total} bytes)"
    );
}

#[test]
fn abusive_clients_do_not_delay_a_well_behaved_one() {
    let site = Site::new();
    site.write("big.bin", &vec![1u8; 4 << 20]);
    let server = site.serve_with("[timeouts]\nhead = 2.0\nbody = 2.0\nwrite = 2.0\n");
    let mut abusers = Vec::new();
    for i in 0..300 {
        let mut s = server.connect();
        let _ = match i % 3 {
            // Slowloris: half a head.
            0 => s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-A: "),
            // Slow body: a head promising a body that never comes.
            1 => s.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nabc"),
            // Slow reader: a big response nobody reads.
            _ => s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"),
        };
        abusers.push(s);
    }
    let mut worst = Duration::ZERO;
    let mut good = server.connect();
    for _ in 0..200 {
        let asked = Instant::now();
        assert_eq!(get_on(&mut good, "/hello.txt"), b"hello world\n");
        worst = worst.max(asked.elapsed());
    }
    assert!(
        worst < Duration::from_millis(250),
        "worst latency {worst:?} next to 300 abusers"
    );
}
