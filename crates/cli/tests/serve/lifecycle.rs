use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::harness::{read_response, read_to_close, Server, Site};

#[test]
fn slow_reader_does_not_block_its_worker() {
    let site = Site::new();
    let data = vec![7u8; 32 << 20];
    site.write("big.bin", &data);
    let server = site.serve();
    // A client with a tiny receive window asks for 32 MiB and then reads nothing.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut slow: std::net::TcpStream = socket.into();
    slow.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Meanwhile another client on the same (single) worker is answered promptly.
    for _ in 0..20 {
        let start = Instant::now();
        let r = server.get("/hello.txt");
        assert_eq!(r.body, b"hello world\n");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "a request waited {:?} behind a slow reader",
            start.elapsed()
        );
    }
    // And the slow reader still gets every byte once it reads.
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let r = read_response(&mut slow, false);
    assert_eq!(r.body.len(), data.len());
    assert!(r.body.iter().all(|&b| b == 7));
}

#[test]
fn sigterm_finishes_the_response_in_flight_and_exits_zero() {
    let site = Site::new();
    let data: Vec<u8> = (0..(16 << 20)).map(|i: usize| (i % 253) as u8).collect();
    site.write("big.bin", &data);
    let mut server = site.serve();
    let mut stream = server.connect();
    let idle = server.connect();
    stream
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Read a little so the response is in flight, then ask the server to stop.
    let mut first = [0u8; 1024];
    stream.read_exact(&mut first).unwrap();
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    let mut rest = read_to_close(&mut stream);
    let mut all = first.to_vec();
    all.append(&mut rest);
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        all[head_end..] == data[..],
        "response cut short by shutdown"
    );
    drop(idle);
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn listens_on_ipv6_loopback() {
    let site = Site::new();
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback on this machine; skipping");
        return;
    }
    let server = Server::start(&site.root(), &["--listen", "[::1]:0"]);
    assert!(server.addr.is_ipv6());
    assert_eq!(server.get("/hello.txt").body, b"hello world\n");
}

#[test]
fn config_file_sets_root_and_rejects_unknown_keys() {
    let site = Site::new();
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(
        &config,
        format!(
            "root = {:?}\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\n[limits]\nmax_uri_length = 100\n",
            site.root().display().to_string()
        ),
    )
    .unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    assert_eq!(server.get("/hello.txt").status, 200);
    let long = format!("/{}", "a".repeat(200));
    assert_eq!(server.get(&long).status, 414);

    std::fs::write(&config, "listen = [\"127.0.0.1:0\"]\nwokers = 2\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wokers"), "{stderr}");
}

#[test]
fn missing_root_is_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--root", "/no/such/dir", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/no/such/dir") && stderr.contains("No such file"),
        "{stderr}"
    );
}

#[test]
fn refusals_are_logged_with_client_and_reason_and_counted() {
    let site = Site::new();
    let mut server = site.serve();
    for _ in 0..3 {
        let r = server.exchange(b"GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with(b"HTTP/1.1 400 "));
    }
    let r = server.exchange(
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert!(r.starts_with(b"HTTP/1.1 400 "));
    server.signal(libc::SIGTERM);
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    std::thread::sleep(Duration::from_millis(100));
    let stderr = server.stderr.lock().unwrap().join("\n");
    // The first refusal is logged with who and why; the rest are counted (rate limit).
    assert!(
        stderr.contains("client=127.0.0.1:") && stderr.contains("reason=\"bad-host\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("refused 4 requests (bad-host 3, content-length-with-transfer-encoding 1)"),
        "{stderr}"
    );
}

/// What a first-time user gets wrong (a missing file, a bad value, a busy port) ends the
/// start with one line that names the cause once and, where it is clear, what to do.
#[test]
fn start_up_errors_are_one_line_with_their_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad_value = dir.path().join("bad-value.toml");
    std::fs::write(&bad_value, "workers = \"two\"\n").unwrap();
    let bad_syntax = dir.path().join("bad-syntax.toml");
    std::fs::write(&bad_syntax, "listen = [127.0.0.1]\n").unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--config", "missing.toml"],
            "cannot read config file missing.toml: No such file or directory (os error 2)",
        ),
        (
            &["--config", bad_value.to_str().unwrap()],
            "invalid type: string \"two\", expected usize in `workers`",
        ),
        (
            &["--config", bad_syntax.to_str().unwrap()],
            "line 1, column 16: invalid float",
        ),
        (
            &["--root", "missing-dir"],
            "No such file or directory (os error 2); give an existing directory with --root",
        ),
        (
            &["--script", "/x=missing.lua"],
            "cannot read script missing.lua: No such file or directory (os error 2)",
        ),
        (
            &["--listen", &busy_addr],
            "Address already in use (os error 98); another program listens there",
        ),
    ];
    for (args, expected) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("serve")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("tessera: error: "), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        if let Some(cause) = ["(os error 2)", "(os error 98)"]
            .iter()
            .find(|c| stderr.contains(*c))
        {
            assert_eq!(stderr.matches(cause).count(), 1, "{args:?}: {stderr}");
        }
    }
}
