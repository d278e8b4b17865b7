//! `h2c_listen` (docs/http2.md): cleartext addresses that speak HTTP/2 with prior
//! knowledge and nothing else, beside `listen`'s HTTP/1.1 (or h2c when a connection
//! starts with the preface).

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{eventually, printed_addr, read_to_close, stderr_has, Site};
use crate::http2::h2load;

const H2C_ONLY: &str = "HTTP/2 with prior knowledge only";

/// `curl ARGS URL`: (what `-w %{http_version}` printed after the body, the body).
fn curl_version(url: &str, args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-w", "\n%{http_version}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let mut body = out.stdout;
    let at = body.iter().rposition(|b| *b == b'\n').unwrap();
    let version = String::from_utf8_lossy(&body[at + 1..]).into_owned();
    body.truncate(at);
    (version, body)
}

/// What `addr` answers to `bytes` on a new connection, and whether it then closed the
/// connection within 5 s.
fn answer(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    let started = Instant::now();
    let out = read_to_close(&mut stream);
    (out, started.elapsed() < Duration::from_secs(5))
}

/// The frame types in `bytes`, read as HTTP/2 frames.
fn frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        types.push(bytes[3]);
        bytes = &bytes[(9 + len).min(bytes.len())..];
    }
    assert!(bytes.is_empty(), "a partial frame at the end");
    types
}

/// An HTTP/1.1 request, and the bytes h2spec sends as an invalid preface.
const NOT_HTTP2: [&[u8]; 2] = [
    b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    b"INVALID CONNECTION PREFACE\r\n\r\n",
];

/// The h2c-only listener closes a connection that does not start with the preface,
/// after its SETTINGS and nothing in HTTP/1.
fn assert_only_http2(addr: SocketAddr) {
    for bytes in NOT_HTTP2 {
        let (out, closed) = answer(addr, bytes);
        assert!(
            closed,
            "still open after {:?}",
            String::from_utf8_lossy(bytes)
        );
        let types = frame_types(&out);
        // SETTINGS (4) and WINDOW_UPDATE (8) are sent before the preface is read;
        // GOAWAY (7) may follow. Never an HTTP/1 answer.
        assert!(
            !types.is_empty() && types.iter().all(|t| [4, 7, 8].contains(t)),
            "{types:?}: {:?}",
            String::from_utf8_lossy(&out)
        );
    }
}

#[test]
fn an_h2c_listener_speaks_http2_with_prior_knowledge_and_nothing_else() {
    use crate::metrics::{admin_addr, admin_get, samples, sum};
    let site = Site::new();
    let server =
        site.serve_with("h2c_listen = [\"127.0.0.1:0\"]\nadmin_listen = \"127.0.0.1:0\"\n");
    let h2c = printed_addr(&server, H2C_ONLY);
    assert_ne!(h2c, server.addr);

    let url = format!("http://{h2c}/hello.txt");
    let (version, body) = curl_version(&url, &["--http2-prior-knowledge"]);
    assert_eq!((version.as_str(), &body[..]), ("2", &b"hello world\n"[..]));
    h2load(500, &["-c", "2", "-m", "10", &url]);
    assert_only_http2(h2c);

    // The `listen` address beside it still speaks both, and answers a malformed
    // request line as HTTP/1.1 does.
    let (version, _) = curl_version(&format!("http://{}/hello.txt", server.addr), &[]);
    assert_eq!(version, "1.1");
    let (out, closed) = answer(server.addr, NOT_HTTP2[1]);
    assert!(closed && out.starts_with(b"HTTP/1.1 400 "), "{out:?}");

    // curl's connection and h2load's two spoke HTTP/2; the two without the preface
    // did not.
    let admin = admin_addr(&server);
    eventually("the count", || {
        let (_, text) = admin_get(admin, "/metrics", "");
        sum(&samples(&text), "tessera_http2_connections_total", &[]) == 3.0
    });
}

#[test]
fn a_reload_adds_and_removes_an_h2c_listener() {
    let site = Site::new();
    let server = site.serve_with("");
    let config = site.dir.path().join("tessera.toml");
    // (The harness's --listen keeps the HTTP/1.1 listener through every reload.)
    std::fs::write(&config, "h2c_listen = [\"127.0.0.1:0\"]\n").unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "listeners added ["));
    let h2c = crate::reload::added_listener(&server);
    let url = format!("http://{h2c}/hello.txt");
    let (version, body) = curl_version(&url, &["--http2-prior-knowledge"]);
    assert_eq!((version.as_str(), &body[..]), ("2", &b"hello world\n"[..]));
    assert_only_http2(h2c);

    std::fs::write(&config, "").unwrap();
    server.signal(libc::SIGHUP);
    eventually("the second reload", || {
        stderr_has(&server, "listeners removed [")
    });
    eventually("the h2c listener to close", || {
        std::net::TcpStream::connect(h2c).is_err()
    });
    assert_eq!(server.get("/hello.txt").status, 200);
}

/// `check-config` refuses them, naming the file, line and key.
#[test]
fn h2c_listen_needs_http2_and_an_address_no_other_kind_of_listener_has() {
    let site = Site::new();
    let config = site.dir.path().join("tessera.toml");
    for (toml, problem) in [
        (
            "http2 = false\nh2c_listen = [\"127.0.0.1:0\"]\n",
            "tessera.toml:2: h2c_listen: needs HTTP/2, which `http2 = false` turns off",
        ),
        (
            "listen = [\"127.0.0.1:8089\"]\nh2c_listen = [\"127.0.0.1:8089\"]\n",
            "tessera.toml:2: h2c_listen: lists 127.0.0.1:8089, which `listen` lists already",
        ),
    ] {
        std::fs::write(&config, toml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["check-config", "--config", config.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(problem),
            "{stderr}"
        );
    }
}
