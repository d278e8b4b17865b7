//! HTTP/2 upstreams (docs/upstreams.md, "HTTP/2 upstreams"): the real binary in front of
//! nginx listening with `http2` (prior knowledge in clear text, ALPN h2 over TLS), whose
//! access log names the connection of every request it served; load from h2load.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{eventually, read_request_head, thread_per_connection, Server, Site};
use crate::http2::h2load;
use crate::upstream_tls::Ca;

/// nginx as an HTTP/2 origin, killed on drop. Every request is logged as
/// `CONNECTION PROTOCOL METHOD URI` in `access.log`.
struct Nginx {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Nginx {
    /// Listens on a free port with `listen` (`"http2"` or `"ssl http2"`), `server` being
    /// the rest of the server block, `http` more of the http block.
    fn start(dir: &Path, listen: &str, http: &str, server: &str) -> Nginx {
        let port = crate::acme::free_port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections 1024; }}\n\
             http {{\n  log_format c '$connection $server_protocol $request_method $request_uri';\n\
             access_log {d}/access.log c;\n  client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  {http}\n\
             server {{\n    listen 127.0.0.1:{port} {listen};\n    {server}\n  }}\n}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx is missing: scripts/test.sh installs it");
        eventually("nginx listens", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Nginx {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    /// The access log's lines.
    fn log(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    }

    /// The distinct connections the log names.
    fn connections(&self) -> usize {
        let mut ids: Vec<String> = self
            .log()
            .iter()
            .map(|l| l.split(' ').next().unwrap_or_default().to_string())
            .collect();
        ids.sort();
        ids.dedup();
        ids.len()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// tessera with one upstream `o` at `127.0.0.1:PORT` and `keys` in it.
fn serve(site: &Site, port: u16, keys: &str) -> Server {
    site.serve_with(&format!(
        "[[upstream]]\nname = \"o\"\naddresses = [\"127.0.0.1:{port}\"]\n{keys}\n\n\
         [[route]]\nupstream = \"o\"\n"
    ))
}

fn url(server: &Server, path: &str) -> String {
    format!("http://{}{path}", server.addr)
}

/// Every line of the log is an HTTP/2 request.
fn assert_all_h2(nginx: &Nginx, count: usize) {
    let log = nginx.log();
    assert_eq!(log.len(), count, "{log:?}");
    assert!(log.iter().all(|l| l.contains(" HTTP/2.0 GET /")), "{log:?}");
}

#[test]
fn h2c_upstream_carries_100_concurrent_requests_on_one_connection() {
    let site = Site::new();
    let nginx = Nginx::start(
        site.dir.path(),
        "http2",
        "",
        "location / { return 200 \"hi $request_uri\\n\"; }",
    );
    let server = serve(&site, nginx.port, "protocol = \"h2c\"");
    // A hundred clients at once, each with one request.
    h2load(100, &["-c", "100", "-m", "1", &url(&server, "/many")]);
    assert_all_h2(&nginx, 100);
    assert_eq!(nginx.connections(), 1, "{:?}", nginx.log());
    let r = server.get("/one?x=1");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hi /one?x=1\n");
    assert_eq!(r.header("via"), Some("2 tessera"));
    assert_eq!(nginx.connections(), 1);
    // Only HTTP/1.1 connections are spliced into tunnels.
    let upgrade = server.exchange(
        b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nConnection: close\r\n\r\n",
    );
    assert!(
        upgrade.starts_with(b"HTTP/1.1 502"),
        "{}",
        String::from_utf8_lossy(&upgrade)
    );
    assert_eq!(nginx.log().len(), 101);
}

#[test]
fn h2_upstream_over_tls_carries_100_concurrent_requests_on_one_connection() {
    let site = Site::new();
    let dir = site.dir.path();
    let ca = Ca::new(dir, "test-ca");
    let (cert, key) = ca.sign(dir, "origin", &["origin.test"]);
    let nginx = Nginx::start(
        dir,
        "ssl http2",
        "",
        &format!(
            "ssl_certificate {};\n    ssl_certificate_key {};\n    \
             location / {{ return 200 \"tls $ssl_protocol $request_uri\\n\"; }}",
            cert.display(),
            key.display()
        ),
    );
    let keys = format!(
        "tls = true\nca = {:?}\nsni = \"origin.test\"\nprotocol = \"h2\"",
        ca.pem.display().to_string()
    );
    let server = serve(&site, nginx.port, &keys);
    h2load(100, &["-c", "100", "-m", "1", &url(&server, "/many")]);
    assert_all_h2(&nginx, 100);
    assert_eq!(nginx.connections(), 1, "{:?}", nginx.log());
    let r = server.get("/one");
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        text.starts_with("tls TLSv1.") && text.ends_with(" /one\n"),
        "{text}"
    );
}

#[test]
fn h2_to_a_peer_that_does_not_choose_h2_by_alpn_is_a_502() {
    let site = Site::new();
    let dir = site.dir.path();
    let ca = Ca::new(dir, "test-ca");
    let (cert, key) = ca.sign(dir, "origin", &["origin.test"]);
    // nginx without http2 on its listener offers only http/1.1 by ALPN.
    let nginx = Nginx::start(
        dir,
        "ssl",
        "",
        &format!(
            "ssl_certificate {};\n    ssl_certificate_key {};\n    location / {{ return 200; }}",
            cert.display(),
            key.display()
        ),
    );
    let keys = format!(
        "tls = true\nca = {:?}\nsni = \"origin.test\"\nprotocol = \"h2\"",
        ca.pem.display().to_string()
    );
    let server = serve(&site, nginx.port, &keys);
    assert_eq!(server.get("/x").status, 502);
    // nginx ends the handshake with an alert (no protocol in common) before tessera
    // can see what it chose.
    eventually("the warning", || {
        crate::harness::stderr_has(&server, "NoApplicationProtocol")
    });
    assert!(nginx.log().is_empty(), "{:?}", nginx.log());
    drop(server);
    // openssl s_server knows nothing of ALPN: the handshake completes without h2.
    let port = crate::acme::free_port();
    let mut s_server = Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-www",
            "-accept",
            &port.to_string(),
            "-cert",
        ])
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("s_server listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let server = serve(&site, port, &keys);
    assert_eq!(server.get("/x").status, 502);
    eventually("the warning", || {
        crate::harness::stderr_has(&server, "the peer did not choose h2 by ALPN")
    });
    let _ = s_server.kill();
    let _ = s_server.wait();
}

#[test]
fn goaway_from_the_origin_mid_load_loses_no_request() {
    for tls in [false, true] {
        let site = Site::new();
        let dir = site.dir.path();
        let ca = Ca::new(dir, "test-ca");
        let (cert, key) = ca.sign(dir, "origin", &["origin.test"]);
        let (listen, certificate, keys) = match tls {
            false => ("http2", String::new(), "protocol = \"h2c\"".to_string()),
            true => (
                "ssl http2",
                format!(
                    "ssl_certificate {};\n    ssl_certificate_key {};",
                    cert.display(),
                    key.display()
                ),
                format!(
                    "tls = true\nca = {:?}\nsni = \"origin.test\"\nprotocol = \"h2\"",
                    ca.pem.display().to_string()
                ),
            ),
        };
        // nginx ends a connection with GOAWAY after 150 requests, while up to 100 more
        // are in flight on it: those above its last stream are sent again on a new
        // connection.
        let nginx = Nginx::start(
            dir,
            listen,
            "keepalive_requests 150;",
            &format!("{certificate}\n    location / {{ return 200 \"ok\\n\"; }}"),
        );
        let server = serve(&site, nginx.port, &keys);
        h2load(2000, &["-c", "100", "-m", "1", &url(&server, "/load")]);
        assert_all_h2(&nginx, 2000);
        assert!(
            nginx.connections() >= 14,
            "tls {tls}: {}",
            nginx.connections()
        );
    }
}

/// An origin behind nginx that answers `BYTES SUM` of the body it read.
fn body_origin() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread_per_connection(listener, |stream| {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let Some((_, fields)) = read_request_head(&mut reader) else {
            return;
        };
        let length: usize = fields
            .iter()
            .find_map(|f| {
                let (n, v) = f.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let sum: u64 = body.iter().map(|&b| b as u64).sum();
        let text = format!("{length} {sum}\n");
        let mut stream = stream;
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
        let _ = reader.fill_buf();
    });
    port
}

#[test]
fn request_and_response_bodies_larger_than_the_windows_pass_whole() {
    let site = Site::new();
    let origin = body_origin();
    // 2 MiB down: more than a stream's window of 256 KiB, given back as it is read.
    let big: Vec<u8> = (0..2 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    let files = site.dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("down"), &big).unwrap();
    let nginx = Nginx::start(
        site.dir.path(),
        "http2",
        "client_max_body_size 64m;",
        &format!(
            "location /up {{ proxy_pass http://127.0.0.1:{origin}; }}\n    \
             location /down {{ root {}; }}",
            files.display()
        ),
    );
    let server = serve(
        &site,
        nginx.port,
        "protocol = \"h2c\"\n\n[limits]\nmax_body_size = 8388608",
    );
    // 3 MiB up: more than the 64 KiB a stream may send before the origin's window updates.
    let body: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let sum: u64 = body.iter().map(|&b| b as u64).sum();
    for streamed in [false, true] {
        let mut c = std::net::TcpStream::connect(server.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let framing = match streamed {
            false => format!("Content-Length: {}", body.len()),
            true => "Transfer-Encoding: chunked".to_string(),
        };
        write!(
            c,
            "POST /up HTTP/1.1\r\nHost: t\r\n{framing}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        if streamed {
            for piece in body.chunks(100_000) {
                write!(c, "{:x}\r\n", piece.len()).unwrap();
                c.write_all(piece).unwrap();
                c.write_all(b"\r\n").unwrap();
            }
            c.write_all(b"0\r\n\r\n").unwrap();
        } else {
            c.write_all(&body).unwrap();
        }
        let r = crate::harness::read_response(&mut c, false);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            format!("{} {sum}\n", body.len())
        );
    }
    let r = server.get("/down");
    assert_eq!(r.status, 200);
    assert!(r.body == big, "{} bytes", r.body.len());
    assert_eq!(nginx.connections(), 1);
}

#[test]
fn check_config_names_the_protocol_it_refuses() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    for (keys, says) in [
        ("protocol = \"h3\"", "unknown variant `h3`"),
        (
            "protocol = \"h2\"",
            "upstream `o`: protocol = \"h2\" is HTTP/2 over TLS",
        ),
        (
            "protocol = \"h2c\"\ntls = true",
            "protocol = \"h2c\" is HTTP/2 in clear text",
        ),
        (
            "protocol = \"h2c\"\nsend_proxy = \"v1\"",
            "send_proxy applies to protocol = \"h1\"",
        ),
        (
            "protocol = \"h2c\"\nmax_streams_per_connection = 0",
            "max_streams_per_connection must be at least 1",
        ),
    ] {
        std::fs::write(
            &path,
            format!(
                "[[upstream]]\nname = \"o\"\naddresses = [\"127.0.0.1:1\"]\n{keys}\n\n\
                 [[route]]\nupstream = \"o\"\n"
            ),
        )
        .unwrap();
        let (code, stderr) = crate::harness::check_config_output(&path);
        assert_eq!(code, Some(1), "{keys}: {stderr}");
        assert!(stderr.contains(says), "{keys}: {stderr}");
    }
}

#[test]
fn health_checks_speak_h2_and_the_metrics_count_streams_in_flight() {
    let site = Site::new();
    // An origin behind nginx that answers once `release` has a token for it.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Arc::new(std::sync::Mutex::new(held));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = listener.local_addr().unwrap().port();
    thread_per_connection(listener, move |mut stream| {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        if read_request_head(&mut reader).is_some() {
            let _ = held.lock().unwrap().recv();
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nslow\n");
        }
    });
    let nginx = Nginx::start(
        site.dir.path(),
        "http2",
        "",
        &format!(
            "location = /health {{ return 200; }}\n    \
             location /slow {{ proxy_pass http://127.0.0.1:{origin}; }}"
        ),
    );
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"o\"\naddresses = [\"127.0.0.1:{}\"]\nprotocol = \"h2c\"\n\
         health = {{ path = \"/health\", interval = 0.2, unhealthy_after = 1 }}\n\n\
         [[route]]\nupstream = \"o\"\n",
        nginx.port
    ));
    let admin = crate::metrics::admin_addr(&server);
    let peer = format!("127.0.0.1:{}", nginx.port);
    let metric = |name: &str| {
        let (_, text) = crate::metrics::admin_get(admin, "/metrics", "");
        let key = format!("{name}{{upstream=\"o\",peer=\"{peer}\"}}");
        crate::metrics::samples(&text).get(&key).copied()
    };
    eventually("three checks over HTTP/2", || {
        nginx
            .log()
            .iter()
            .filter(|l| l.ends_with("HTTP/2.0 GET /health"))
            .count()
            >= 3
    });
    let up = format!("tessera_upstream_peer_state{{upstream=\"o\",peer=\"{peer}\",state=\"up\"}}");
    let (_, text) = crate::metrics::admin_get(admin, "/metrics", "");
    assert_eq!(
        crate::metrics::samples(&text).get(&up),
        Some(&1.0),
        "{text}"
    );
    assert_eq!(metric("tessera_upstream_h2_streams"), Some(0.0));
    let addr = server.addr;
    let clients: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                write!(
                    c,
                    "GET /slow/{i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                crate::harness::read_response(&mut c, false)
            })
        })
        .collect();
    eventually("three streams in flight", || {
        metric("tessera_upstream_h2_streams") == Some(3.0)
    });
    for _ in 0..3 {
        release.send(()).unwrap();
    }
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"slow\n"[..]));
    }
    eventually("no stream in flight", || {
        metric("tessera_upstream_h2_streams") == Some(0.0)
    });
}
