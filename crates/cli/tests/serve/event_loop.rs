//! The worker's loop (issue 49): with 10,000 connections open, its timers still fire
//! within their documented slack: the connections' head timeout (swept four times a
//! second, docs/config.md "[timeouts]") and the proxy's response timeout (a timer of the
//! loop's own).

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::Site;

/// Beyond the documented slack, for a shared machine's scheduling.
const GRACE: Duration = Duration::from_millis(400);

#[test]
fn timers_fire_within_their_slack_with_10000_connections_open() {
    // Room for the connections in this process (the server raises its own limit).
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    // An origin that accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming() {
            match s {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
    });
    let site = Site::new();
    let server = site.serve_with(&format!(
        r#"
        [timeouts]
        head = 3.0

        [[upstream]]
        name = "silent"
        addresses = ["{silent_addr}"]
        response_timeout = 0.5

        [[route]]
        prefix = "/silent"
        upstream = "silent"
        "#
    ));
    // 10,000 connections that send nothing: each waits for its head timeout.
    let first = Instant::now();
    let mut open = Vec::with_capacity(10_000);
    while open.len() < 10_000 {
        open.push(TcpStream::connect(server.addr).unwrap());
    }
    let last = Instant::now();
    // The proxy's response timeout, while they are open.
    let asked = Instant::now();
    let r = server.get("/silent/x");
    let took = asked.elapsed();
    assert_eq!(r.status, 504);
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(500) + GRACE,
        "the 0.5 s response timeout took {took:?}"
    );
    // None closed before its head timeout...
    let early = first + Duration::from_millis(2900);
    assert!(
        Instant::now() < early,
        "opening the connections took {:?}",
        first.elapsed()
    );
    std::thread::sleep(early - Instant::now());
    for s in &mut open[..100] {
        s.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let e = s
            .read(&mut byte)
            .expect_err("closed before its head timeout");
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        s.set_nonblocking(false).unwrap();
    }
    // ...and every one within the sweep's quarter of a second after it.
    let due = last + Duration::from_millis(3250) + GRACE;
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
    let mut closed = 0;
    for s in &mut open {
        s.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        match s.read(&mut byte) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(
        closed,
        open.len(),
        "connections still open {:?} after the last was opened",
        last.elapsed()
    );
}
