//! What the upstream client accepts from origins (issue 52; docs/security.md, "What the
//! upstream client accepts from origins"): an origin on a raw socket answers each path
//! with fixed bytes (bare-LF heads, HTTP/1.0, odd status lines, bodies to the close, a 204
//! with a body, a truncated body, ...), and the proxied response is checked byte for byte,
//! or is a 502 with a log line that names the reason.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{eventually, read_request_head, read_response, read_to_close, Server, Site};

/// How an origin answers one request: the pieces it writes, 100 ms apart, and whether
/// it then closes the connection.
struct Answer {
    pieces: Vec<&'static [u8]>,
    close: bool,
}

fn answer(pieces: &[&'static [u8]], close: bool) -> Answer {
    Answer {
        pieces: pieces.to_vec(),
        close,
    }
}

/// The raw answer for each path (the query is ignored).
fn answer_for(path: &str) -> Answer {
    match path.split('?').next().unwrap() {
        // Varnish's e00007 and e00014 origins.
        "/lf/http10-close" => answer(
            &[b"HTTP/1.0 200 OK\nConnection: close\n\n", b"body until the close"],
            true,
        ),
        "/lf/length" => answer(&[b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello"], false),
        "/lf/mixed" => answer(
            &[b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\nContent-Length: 5\n\r\nhello"],
            false,
        ),
        "/lf/chunked" => answer(
            &[b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"],
            false,
        ),
        "/http10/keep-alive" => answer(
            &[b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello"],
            false,
        ),
        // Kept open by the origin, but HTTP/1.0 without keep-alive: not to be reused.
        "/http10/length" => answer(&[b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello"], false),
        "/http10/no-length" => answer(&[b"HTTP/1.0 200 OK\r\n\r\n", b"to the close"], true),
        "/reason/empty" => answer(&[b"HTTP/1.1 200 \r\nContent-Length: 5\r\n\r\nhello"], false),
        "/reason/missing" => answer(&[b"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\nhello"], false),
        "/reason/missing-lf" => answer(&[b"HTTP/1.1 200\nContent-Length: 5\n\nhello"], false),
        "/length/zeros" => answer(&[b"HTTP/1.1 200 OK\r\nContent-Length: 0005\r\n\r\nhello"], false),
        "/length/twice" => answer(
            &[b"HTTP/1.1 200 OK\nContent-Length: 5\nContent-Length: 5\n\nhello"],
            false,
        ),
        "/interim" => answer(
            &[
                b"HTTP/1.1 100 Continue\n\n",
                b"HTTP/1.1 103 Early Hints\nLink: </a.css>\n\nHTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
            ],
            false,
        ),
        // A body where none may be: in the same write, and arriving a moment later.
        "/no-content/same-write" => answer(
            &[b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"],
            false,
        ),
        "/no-content/late" => answer(
            &[
                b"HTTP/1.1 204 No Content\r\nContent-Length: 44\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged",
            ],
            false,
        ),
        "/not-modified/late" => answer(
            &[
                b"HTTP/1.1 304 Not Modified\nContent-Length: 44\n\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged",
            ],
            false,
        ),
        "/truncated/length" => answer(
            &[b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"only this"],
            true,
        ),
        "/truncated/same-write" => answer(
            &[b"HTTP/1.1 200 OK\nContent-Length: 100\n\nonly this"],
            true,
        ),
        "/truncated/chunked" => answer(
            &[b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n9\r\nonly this\r\n"],
            true,
        ),
        "/refused/bare-cr" => answer(&[b"HTTP/1.1 200 OK\rContent-Length: 5\r\n\r\nhello"], true),
        "/refused/obs-fold" => answer(
            &[b"HTTP/1.1 200 OK\nX-A: b\n c\nContent-Length: 5\n\nhello"],
            true,
        ),
        "/refused/space-before-colon" => {
            answer(&[b"HTTP/1.1 200 OK\nContent-Length : 5\n\nhello"], true)
        }
        "/refused/two-lengths" => answer(
            &[b"HTTP/1.1 200 OK\nContent-Length: 5\nContent-Length: 6\n\nhello!"],
            true,
        ),
        "/refused/length-and-chunked" => answer(
            &[b"HTTP/1.1 200 OK\nContent-Length: 5\nTransfer-Encoding: chunked\n\n0\r\n\r\n"],
            true,
        ),
        // An ESI page and its fragments, every head with bare LFs; the template arrives
        // in pieces that split an include tag.
        "/esi/page" => answer(
            &[
                b"HTTP/1.0 200 OK\nContent-Type: text/html\nSurrogate-Control: content=\"ESI/1.0\"\nConnection: close\n\n<html><esi:incl",
                b"ude src=\"/esi/frag/a\"/>|<esi:include src=\"/esi/frag/b\"/>",
                b"|<esi:include src=\"/esi/frag/c\"/></html>",
            ],
            true,
        ),
        "/esi/frag/a" => answer(&[b"HTTP/1.0 200 OK\nConnection: close\n\n[a]"], true),
        "/esi/frag/b" => answer(&[b"HTTP/1.1 200 OK\nContent-Length: 3\n\n[b]"], false),
        "/esi/frag/c" => answer(
            &[b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n3\r\n[c]\r\n0\r\n\r\n"],
            false,
        ),
        _ => answer(&[b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnone"], false),
    }
}

/// The raw origin: one thread per connection; counts the connections it accepted.
struct Origin {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

fn origin() -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(stream));
        }
    });
    Origin { addr, connections }
}

fn serve(stream: TcpStream) {
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((path, _fields)) = read_request_head(&mut reader) {
        let answer = answer_for(&path);
        for (i, piece) in answer.pieces.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(100));
            }
            if writer.write_all(piece).is_err() {
                return;
            }
        }
        if answer.close {
            let _ = writer.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

fn proxy_to(site: &Site, origin: &Origin) -> Server {
    Server::start(
        &site.root(),
        &["--proxy", &format!("http://{}", origin.addr)],
    )
}

/// `GET path` on a keep-alive connection of the client's: the response.
fn get_on(stream: &mut TcpStream, path: &str) -> crate::harness::Response {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    read_response(stream, false)
}

#[test]
fn upstream_heads_with_bare_lf_and_old_forms_are_proxied_byte_exact() {
    let site = Site::new();
    let origin = origin();
    let server = proxy_to(&site, &origin);
    let cases: [(&str, u16, &[u8]); 13] = [
        ("/lf/http10-close", 200, b"body until the close"),
        ("/lf/length", 200, b"hello"),
        ("/lf/mixed", 200, b"hello"),
        ("/lf/chunked", 200, b"hello world"),
        ("/http10/keep-alive", 200, b"hello"),
        ("/http10/length", 200, b"hello"),
        ("/http10/no-length", 200, b"to the close"),
        ("/reason/empty", 200, b"hello"),
        ("/reason/missing", 200, b"hello"),
        ("/reason/missing-lf", 200, b"hello"),
        ("/length/zeros", 200, b"hello"),
        ("/length/twice", 200, b"hello"),
        ("/interim", 200, b"hello"),
    ];
    for (path, status, body) in cases {
        let r = server.get(path);
        assert_eq!(
            (r.status, String::from_utf8_lossy(&r.body)),
            (status, String::from_utf8_lossy(body)),
            "{path}"
        );
        if path == "/lf/mixed" {
            assert_eq!(r.header("content-type"), Some("text/plain"));
        }
        if path == "/length/twice" {
            let lengths = r
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .count();
            assert_eq!(lengths, 1, "{:?}", r.headers);
        }
    }
    // The client gets tessera's status line, whatever the origin's reason phrase.
    for path in ["/reason/empty", "/reason/missing", "/reason/missing-lf"] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let raw = server.exchange(request.as_bytes());
        assert!(
            raw.starts_with(b"HTTP/1.1 200 OK\r\n"),
            "{path}: {:?}",
            String::from_utf8_lossy(&raw)
        );
    }
    assert!(
        !server
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("refused")),
        "{:?}",
        server.stderr.lock().unwrap()
    );
}

/// An HTTP/1.0 response is reused only with `Connection: keep-alive` and a length.
#[test]
fn upstream_heads_http10_connections_are_reused_only_with_keep_alive() {
    let site = Site::new();
    let origin = origin();
    let server = proxy_to(&site, &origin);
    let mut client = server.connect();
    for i in 0..3 {
        let r = get_on(&mut client, &format!("/http10/keep-alive?{i}"));
        assert_eq!((r.status, &r.body[..]), (200, &b"hello"[..]));
    }
    assert_eq!(origin.connections.load(Ordering::SeqCst), 1, "reused");
    for i in 0..3 {
        let r = get_on(&mut client, &format!("/http10/length?{i}"));
        assert_eq!((r.status, &r.body[..]), (200, &b"hello"[..]));
    }
    // The first reuses the kept connection, which is then closed; each after it needs a
    // new one.
    assert_eq!(
        origin.connections.load(Ordering::SeqCst),
        3,
        "one new connection per HTTP/1.0 response without keep-alive"
    );
}

/// A 204 or 304 that carries a body: the body is dropped and the connection closed, even
/// when the body arrives after the response was passed on (it is never read as the next
/// request's response).
#[test]
fn upstream_heads_a_204_or_304_with_a_body_is_passed_on_without_it_and_closed() {
    let site = Site::new();
    let origin = origin();
    let server = proxy_to(&site, &origin);
    let mut client = server.connect();
    let paths = [
        ("/no-content/same-write", 204),
        ("/no-content/late", 204),
        ("/not-modified/late", 304),
    ];
    for (i, (path, status)) in paths.into_iter().enumerate() {
        let r = get_on(&mut client, path);
        assert_eq!(r.status, status, "{path}");
        // Give a late body time to arrive, then ask for something else on the same
        // client connection: it must come from a new upstream connection.
        std::thread::sleep(Duration::from_millis(300));
        let next = get_on(&mut client, &format!("/lf/length?{i}"));
        assert_eq!(
            (next.status, &next.body[..]),
            (200, &b"hello"[..]),
            "{path}"
        );
        // The bodiless response's connection is closed, the next one's kept for the next.
        assert_eq!(
            origin.connections.load(Ordering::SeqCst),
            i + 2,
            "{path}: the connection after the bodiless response was not reused"
        );
    }
    // Nothing was left on the client's connection either.
    write!(
        client,
        "GET /lf/length?last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let rest = read_to_close(&mut client);
    assert!(
        rest.starts_with(b"HTTP/1.1 200 ") && rest.ends_with(b"\r\n\r\nhello"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
}

/// A body cut short by the origin's close: the client gets the head the origin sent (its
/// Content-Length, or chunked), the bytes that came, and then the close, so it sees the
/// truncation; never more bytes, nor anything read after the close.
#[test]
fn upstream_heads_a_truncated_body_stays_truncated() {
    let site = Site::new();
    let origin = origin();
    let server = proxy_to(&site, &origin);
    for path in ["/truncated/length", "/truncated/same-write"] {
        let raw = server.exchange(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let text = String::from_utf8_lossy(&raw);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {text}");
        assert!(
            text.contains("\r\nContent-Length: 100\r\n"),
            "{path}: {text}"
        );
        assert!(text.ends_with("\r\n\r\nonly this"), "{path}: {text}");
    }
    let raw = server.exchange(b"GET /truncated/chunked HTTP/1.1\r\nHost: t\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.contains("\r\nTransfer-Encoding: chunked\r\n"),
        "{text}"
    );
    // The chunk that came, and no last chunk.
    assert!(text.ends_with("\r\n\r\n9\r\nonly this\r\n"), "{text}");
    // The next request is answered whole, on a new upstream connection.
    let r = server.get("/lf/length?after");
    assert_eq!((r.status, &r.body[..]), (200, &b"hello"[..]));
}

#[test]
fn upstream_heads_refused_are_a_502_with_a_log_line_naming_the_reason() {
    let site = Site::new();
    let origin = origin();
    let server = proxy_to(&site, &origin);
    let cases = [
        ("/refused/bare-cr", "bare CR"),
        ("/refused/obs-fold", "malformed header field"),
        ("/refused/space-before-colon", "malformed header field"),
        ("/refused/two-lengths", "invalid or repeated Content-Length"),
        (
            "/refused/length-and-chunked",
            "both Content-Length and Transfer-Encoding",
        ),
    ];
    for (path, reason) in cases {
        let before = server.stderr.lock().unwrap().len();
        let r = server.get(path);
        assert_eq!(r.status, 502, "{path}");
        eventually(&format!("a log line naming {reason:?} for {path}"), || {
            server.stderr.lock().unwrap()[before..]
                .iter()
                .any(|l| l.contains("upstream response head refused") && l.contains(reason))
        });
    }
    // The proxy is fine afterwards.
    assert_eq!(server.get("/lf/length").body, b"hello");
}

#[test]
fn upstream_heads_an_esi_page_with_bare_lf_heads_is_assembled() {
    let site = Site::new();
    let origin = origin();
    let server = proxy_to(&site, &origin);
    for _ in 0..2 {
        let r = server.get("/esi/page");
        assert_eq!(
            (r.status, String::from_utf8_lossy(&r.body)),
            (200, "<html>[a]|[b]|[c]</html>".into())
        );
    }
}
