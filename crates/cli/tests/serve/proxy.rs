//! `tessera serve --proxy` and `[[route]]`: requests proxied to an origin, ESI pages
//! assembled from fragments fetched in parallel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{read_request_head, read_response, read_to_close, Server, Site};

/// A small origin on loopback: one thread per connection, keep-alive, each response in
/// one write with TCP_NODELAY (so no Nagle delays blur the timings).
///
/// - `/page`: ESI (Surrogate-Control) including `/frag/0`..`/frag/2`
/// - `/frag/N`: `[N]` after 50 ms
/// - `/echo`: the request head fields, one per line, then the body (Content-Length or
///   chunked)
/// - anything else: 404
pub fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    crate::harness::thread_per_connection(listener, serve_origin);
    addr
}

fn serve_origin(stream: TcpStream) {
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let Some((path, fields)) = read_request_head(&mut reader) else {
            return;
        };
        // The last Content-Length, if any.
        let length: usize = fields
            .iter()
            .rev()
            .find_map(|f| {
                let f = f.to_ascii_lowercase();
                f.strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut body_in = vec![0u8; length];
        reader.read_exact(&mut body_in).unwrap();
        let chunked = fields.iter().any(|f| {
            f.to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked")
        });
        if chunked {
            body_in = read_chunked(&mut reader);
        }
        let (status, extra, body): (&str, &str, Vec<u8>) = if path == "/page" {
            let includes: String = (0..3)
                .map(|i| format!("<esi:include src=\"/frag/{i}\"/>"))
                .collect();
            (
                "200 OK",
                "Content-Type: text/html\r\nSurrogate-Control: content=\"ESI/1.0\"\r\n",
                format!("<html>{includes}</html>").into_bytes(),
            )
        } else if let Some(n) = path.strip_prefix("/frag/") {
            std::thread::sleep(Duration::from_millis(50));
            (
                "200 OK",
                "Content-Type: text/html\r\n",
                format!("[{n}]").into_bytes(),
            )
        } else if path.starts_with("/echo") {
            let mut body = fields.join("\n").into_bytes();
            body.extend_from_slice(b"\n\n");
            body.extend_from_slice(&body_in);
            ("200 OK", "Content-Type: text/plain\r\n", body)
        } else {
            ("404 Not Found", "", b"no such page".to_vec())
        };
        let mut response = format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(&body);
        if writer.write_all(&response).is_err() {
            return;
        }
    }
}

/// A chunked body (a client's chunked body streams to the origin chunked), whole.
fn read_chunked(reader: &mut impl BufRead) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        let mut data = vec![0u8; n + 2];
        reader.read_exact(&mut data).unwrap();
        if n == 0 {
            return body;
        }
        body.extend_from_slice(&data[..n]);
    }
}

fn proxy_to(site: &Site, origin: SocketAddr) -> Server {
    Server::start(&site.root(), &["--proxy", &format!("http://{origin}")])
}

#[test]
fn esi_page_is_assembled_from_fragments_fetched_in_parallel() {
    let site = Site::new();
    let server = proxy_to(&site, origin());
    // The first page also opens the upstream connections; time the next ones.
    assert_eq!(server.get("/page").body, b"<html>[0][1][2]</html>");
    for _ in 0..3 {
        let started = Instant::now();
        let r = server.get("/page");
        let elapsed = started.elapsed();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"<html>[0][1][2]</html>");
        assert_eq!(r.header("surrogate-control"), None);
        // One after another they would take 150 ms; in parallel, one fragment's 50 ms.
        assert!(
            elapsed < Duration::from_millis(140),
            "page took {elapsed:?}"
        );
    }
}

#[test]
fn assembled_pages_are_chunked_for_http11_and_length_delimited_for_http10() {
    let site = Site::new();
    let server = proxy_to(&site, origin());
    let mut stream = server.connect();
    stream
        .write_all(b"GET /page HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.ends_with(b"0\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the last chunk");
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("Transfer-Encoding: chunked\r\n"), "{text}");
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let mut decoded = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        if size == 0 {
            break;
        }
        decoded.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    assert_eq!(decoded, "<html>[0][1][2]</html>");
    // The connection stays usable.
    stream
        .write_all(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);

    let old = server.exchange(b"GET /page HTTP/1.0\r\n\r\n");
    let text = String::from_utf8_lossy(&old);
    assert!(text.contains("Content-Length: 22\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\n<html>[0][1][2]</html>"), "{text}");
}

#[test]
fn request_headers_and_bodies_are_forwarded() {
    let site = Site::new();
    let server = proxy_to(&site, origin());
    let mut stream = server.connect();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: shop.test\r\nConnection: keep-alive, X-Private\r\nX-Private: secret\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    let r = read_response(&mut stream, false);
    let text = String::from_utf8(r.body).unwrap();
    let lower = text.to_ascii_lowercase();
    assert!(lower.contains("x-forwarded-for: 127.0.0.1"), "{text}");
    assert!(lower.contains("x-forwarded-proto: http"), "{text}");
    assert!(lower.contains("via: 1.1 tessera"), "{text}");
    assert!(
        lower.contains("surrogate-capability: tessera=\"esi/1.0\""),
        "{text}"
    );
    assert!(lower.contains("host: shop.test"), "{text}");
    assert!(
        !lower.contains("x-private"),
        "a field named in Connection was forwarded: {text}"
    );
    assert!(text.ends_with("\n\nhello"), "{text}");
    // A chunked request body arrives whole, then the next request on the connection.
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /nothing HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut stream, false);
    assert!(String::from_utf8(r.body).unwrap().ends_with("\n\nabcde"));
    let r = read_response(&mut stream, false);
    assert_eq!((r.status, r.body.as_slice()), (404, &b"no such page"[..]));
}

/// The Host the origin gets: the client's as it came, and, for an HTTP/1.0 request that
/// has none, the upstream's name (as nginx sends `$proxy_host`): the proxy speaks
/// HTTP/1.1 to origins, where Host is required.
#[test]
fn the_origin_gets_the_clients_host_or_the_upstreams_name() {
    let site = Site::new();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"app\"\naddresses = [\"{}\"]\n\n\
         [[route]]\nprefix = \"/\"\nupstream = \"app\"\n",
        origin()
    ));
    let host_lines = |request: &[u8]| {
        let response = String::from_utf8(server.exchange(request)).unwrap();
        response
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(host_lines(b"GET /echo HTTP/1.0\r\n\r\n"), ["host: app"]);
    assert_eq!(
        host_lines(b"GET /echo HTTP/1.1\r\nHost: Shop.Test:8080\r\nConnection: close\r\n\r\n"),
        ["host: Shop.Test:8080"]
    );
}

/// A fragment in the client's target never reaches the origin (it would ask for
/// another resource, `/page#top`).
#[test]
fn fragment_is_not_forwarded_to_the_origin() {
    let site = Site::new();
    let server = proxy_to(&site, origin());
    let r = server.get("/page#top");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<html>[0][1][2]</html>");
}

#[test]
fn an_origin_that_is_down_gets_502() {
    let site = Site::new();
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let server = proxy_to(&site, closed);
    let r = server.get("/page");
    assert_eq!(r.status, 502);
}

#[test]
fn routes_send_one_prefix_to_the_origin_and_the_rest_to_static_files() {
    let site = Site::new();
    let origin = origin();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "access_log = {:?}\n[[upstream]]\nname = \"app\"\naddresses = [\"{origin}\"]\n[[route]]\nprefix = \"/echo\"\nupstream = \"app\"\n",
        log.display().to_string()
    ));
    assert_eq!(server.get("/hello.txt").body, b"hello world\n");
    let echo = server.get("/echo?x=1");
    assert_eq!(echo.status, 200);
    assert!(String::from_utf8(echo.body)
        .unwrap()
        .to_ascii_lowercase()
        .contains("via: 1.1 tessera"));
    // Both kinds of response are in the access log.
    std::thread::sleep(Duration::from_millis(700));
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines.contains("\"GET /hello.txt HTTP/1.1\" 200 12"),
        "{lines}"
    );
    assert!(lines.contains("\"GET /echo?x=1 HTTP/1.1\" 200"), "{lines}");
}

#[test]
fn a_bad_proxy_url_is_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--proxy", "ftp://x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--proxy ftp://x"), "{stderr}");
    let _ = read_to_close;
}

/// An installed binary has no examples/site: a proxy started anywhere needs no root.
#[test]
fn a_proxy_started_outside_the_repository_needs_no_root() {
    let elsewhere = tempfile::tempdir().unwrap();
    let origin = origin();
    let server = Server::start_args_in(
        elsewhere.path(),
        &[
            "serve".into(),
            "--proxy".into(),
            format!("http://{origin}"),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--workers".into(),
            "1".into(),
        ],
    );
    let r = server.get("/page");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<html>[0][1][2]</html>");
}

/// nginx's `location /docs { root ...; }` inside a proxied `location /`: the longer files
/// route answers from disk instead of falling through to the proxy; and an upstream's
/// `path_prefix` puts every path it is sent (page and fragments) under its prefix.
#[test]
fn a_files_route_under_a_proxied_root_serves_files_and_path_prefix_is_prepended() {
    let site = Site::new();
    let origin = origin();
    let root = site.root();
    let server = site.serve_with(&format!(
        "root = {root:?}\n\
         [[upstream]]\nname = \"app\"\naddresses = [\"{origin}\"]\npath_prefix = \"/frag\"\n\
         [[route]]\nprefix = \"/\"\nupstream = \"app\"\n\
         [[route]]\nprefix = \"/docs\"\nroot = {root:?}\n"
    ));
    let doc = server.get("/docs/index.html");
    assert_eq!(doc.status, 200);
    assert_eq!(doc.body, b"<h1>docs</h1>\n");
    // /7 is sent as /frag/7, which the origin answers "[7]".
    let proxied = server.get("/7");
    assert_eq!(proxied.status, 200);
    assert_eq!(proxied.body, b"[7]");
    // Not under /docs: proxied, even though the file exists in the root.
    assert_eq!(server.get("/hello.txt").body, b"[hello.txt]");
}

#[test]
fn pipelined_proxied_static_and_slow_requests_are_answered_in_order() {
    let site = Site::new();
    let origin = origin();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"app\"\naddresses = [\"{origin}\"]\n[[route]]\nprefix = \"/echo\"\nupstream = \"app\"\n[[route]]\nprefix = \"/frag\"\nupstream = \"app\"\n"
    ));
    let echo = |n: u32| format!("GET /echo?{n} HTTP/1.1\r\nHost: t\r\nX-N: {n}\r\n\r\n");
    let file = "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n".to_string();
    // Proxied, static and slow (50 ms: past the time the batch is held) responses mixed,
    // the last request closing.
    let requests = [
        echo(1),
        file.clone(),
        echo(2),
        "GET /frag/7 HTTP/1.1\r\nHost: t\r\n\r\n".to_string(),
        echo(3),
        file,
        "GET /echo?4 HTTP/1.1\r\nHost: t\r\nX-N: 4\r\nConnection: close\r\n\r\n".to_string(),
    ];
    let mut stream = server.connect();
    stream.write_all(requests.concat().as_bytes()).unwrap();
    let mut bodies = Vec::new();
    for _ in 0..requests.len() {
        let r = read_response(&mut stream, false);
        assert_eq!(r.status, 200, "{r:?}");
        bodies.push(String::from_utf8(r.body).unwrap().to_ascii_lowercase());
    }
    for (i, n) in [(0, 1), (2, 2), (4, 3), (6, 4)] {
        assert!(
            bodies[i].contains(&format!("x-n: {n}")),
            "{i}: {}",
            bodies[i]
        );
    }
    assert_eq!(bodies[1], "hello world\n");
    assert_eq!(bodies[3], "[7]");
    assert_eq!(bodies[5], "hello world\n");
    // The last one asked to close: nothing follows.
    assert!(read_to_close(&mut stream).is_empty());
}
