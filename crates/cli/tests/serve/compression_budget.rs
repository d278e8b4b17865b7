//! `compression_memory`: the compressors of streaming responses reserve their state from
//! one budget for the process; a stream that would pass it goes out uncompressed (with
//! Vary), and every reservation is given back, also when the client goes away.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::compression::{
    decode, esi_page, lua_text, request, serve, serve_listening_as_configured,
    vary_names_accept_encoding,
};
use crate::harness::{eventually, stderr_has, Server};
use crate::metrics::{admin_addr, admin_get, samples};

/// Room for one gzip stream (448 KiB), not two.
const ONE_GZIP_STREAM: &str = "admin_listen = \"127.0.0.1:0\"\ncompression_memory = 600000\n\
                               [compression]\nalgorithms = [\"gzip\"]\n";

/// Sends `GET /esi` accepting gzip and reads the response head: the page is then
/// streaming (its second fragment is 100 ms away). The head's lines, lower-case, and the
/// reader for the rest.
fn start_esi_page(server: &Server) -> (Vec<String>, BufReader<TcpStream>) {
    start_page(server, "/esi")
}

/// [`start_esi_page`] for the page at `path`.
fn start_page(server: &Server, path: &str) -> (Vec<String>, BufReader<TcpStream>) {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            return (head, reader);
        }
        head.push(line.trim().to_ascii_lowercase());
    }
}

fn streams_metric(server: &Server, name: &str) -> f64 {
    samples(&admin_get(admin_addr(server), "/metrics", "").1)[name]
}

#[test]
fn past_the_budget_a_concurrent_stream_goes_out_uncompressed_and_the_budget_comes_back() {
    let (_site, server) = serve(ONE_GZIP_STREAM);
    let (first, first_rest) = start_esi_page(&server);
    assert!(
        first.contains(&"content-encoding: gzip".to_string()),
        "{first:?}"
    );
    assert_eq!(
        streams_metric(&server, "tessera_compression_stream_bytes"),
        448.0 * 1024.0
    );
    // While the first streams, a second has no room: identity, with Vary.
    let second = request(&server, "GET", "/esi", "Accept-Encoding: gzip\r\n");
    assert_eq!(second.header("content-encoding"), None);
    assert!(vary_names_accept_encoding(&second));
    assert_eq!(second.body, esi_page());
    // A whole body needs no stream: compressed still.
    let lua = request(&server, "GET", "/lua", "Accept-Encoding: gzip\r\n");
    assert_eq!(decode("gzip", &lua.body), lua_text());
    drop(first_rest.into_inner());
    // The first's reservation is given back once it is gone, and the next page streams
    // compressed again.
    eventually("the budget given back", || {
        streams_metric(&server, "tessera_compression_stream_bytes") == 0.0
    });
    let third = request(&server, "GET", "/esi", "Accept-Encoding: gzip\r\n");
    assert_eq!(third.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &third.body), esi_page());
    eventually("the budget given back after a whole page", || {
        streams_metric(&server, "tessera_compression_stream_bytes") == 0.0
    });
    let refused = "tessera_compression_streams_total{result=\"refused\"}";
    assert_eq!(streams_metric(&server, refused), 1.0);
    let compressed = "tessera_compression_streams_total{result=\"compressed\"}";
    assert_eq!(streams_metric(&server, compressed), 2.0);
}

#[test]
fn a_client_that_goes_away_mid_stream_gives_its_reservation_back() {
    let (_site, server) = serve(ONE_GZIP_STREAM);
    for _ in 0..3 {
        let (head, rest) = start_esi_page(&server);
        assert!(
            head.contains(&"content-encoding: gzip".to_string()),
            "{head:?}"
        );
        drop(rest);
        eventually("the reservation given back", || {
            streams_metric(&server, "tessera_compression_stream_bytes") == 0.0
        });
    }
}

#[test]
fn a_budget_of_nothing_streams_nothing_compressed() {
    let (_site, server) = serve("compression_memory = 0\n");
    let r = request(&server, "GET", "/esi", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), None);
    assert!(vary_names_accept_encoding(&r));
    assert_eq!(r.body, esi_page());
}

#[test]
fn a_reload_sets_the_budget_anew() {
    let (site, server) = serve(ONE_GZIP_STREAM);
    let capacity = "tessera_compression_stream_capacity_bytes";
    assert_eq!(streams_metric(&server, capacity), 600000.0);
    let config = site.dir.path().join("tessera.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    let toml = toml.replace("compression_memory = 600000", "compression_memory = 0");
    std::fs::write(&config, toml).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the new budget", || {
        streams_metric(&server, capacity) == 0.0
    });
    let r = request(&server, "GET", "/esi", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, esi_page());
}

#[test]
fn a_refused_reload_leaves_the_budget_as_it_was() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap();
    let (site, server) =
        serve_listening_as_configured(&format!("listen = [\"127.0.0.1:0\"]\n{ONE_GZIP_STREAM}"));
    let capacity = "tessera_compression_stream_capacity_bytes";
    let config = site.dir.path().join("tessera.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    // A budget of nothing, and an address another socket holds: the reload is checked
    // and built, then fails when it opens the new listener.
    let toml = toml
        .replace("compression_memory = 600000", "compression_memory = 0")
        .replace(
            "listen = [\"127.0.0.1:0\"]",
            &format!("listen = [\"127.0.0.1:0\", \"{busy}\"]"),
        );
    std::fs::write(&config, toml).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload failure", || {
        stderr_has(&server, "reload failed")
    });
    assert_eq!(streams_metric(&server, capacity), 600000.0);
    let (head, rest) = start_esi_page(&server);
    assert!(
        head.contains(&"content-encoding: gzip".to_string()),
        "{head:?}"
    );
    drop(rest);
    drop(held);
}

/// An origin of its own: `/slow/page`, an ESI page whose fragment (`/slow/frag`) is 10 s
/// away, so that a page streams long after its head.
fn slow_origin() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let mut request = String::new();
                reader.read_line(&mut request).unwrap();
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let (fields, body) = if request.contains("/slow/frag") {
                    std::thread::sleep(Duration::from_secs(10));
                    ("", "<p>late</p>".to_string())
                } else {
                    (
                        "Surrogate-Control: content=\"ESI/1.0\"\r\n",
                        format!(
                            "<html><body>{}<esi:include src=\"/slow/frag\"/></body></html>",
                            "<p>early text</p>\n".repeat(200)
                        ),
                    )
                };
                let _ = write!(
                    reader.get_mut(),
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n{fields}\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    addr
}

/// [`ONE_GZIP_STREAM`] with `/slow` routed to [`slow_origin`].
fn serve_slow() -> (crate::harness::Site, Server) {
    serve(&format!(
        "{ONE_GZIP_STREAM}[[upstream]]\nname = \"slow\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/slow\"\nupstream = \"slow\"\n",
        slow_origin()
    ))
}

/// Waits (up to 5 s) for the reservations to be given back; how long it took.
fn released_after(server: &Server) -> Duration {
    let closed = Instant::now();
    while streams_metric(server, "tessera_compression_stream_bytes") != 0.0 {
        assert!(
            closed.elapsed() < Duration::from_secs(5),
            "never given back"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    closed.elapsed()
}

#[test]
fn a_client_gone_while_a_fragment_is_late_gives_its_reservation_back_at_once() {
    let (_site, server) = serve_slow();
    let (head, rest) = start_page(&server, "/slow/page");
    assert!(
        head.contains(&"content-encoding: gzip".to_string()),
        "{head:?}"
    );
    assert_eq!(
        streams_metric(&server, "tessera_compression_stream_bytes"),
        448.0 * 1024.0
    );
    // The page is 10 s from done: a release now is the client's going, not the end.
    drop(rest);
    let took = released_after(&server);
    assert!(took < Duration::from_secs(1), "given back after {took:?}");
}

#[test]
fn an_http2_stream_reset_while_a_fragment_is_late_gives_its_reservation_back() {
    use crate::http2::{
        block, frame, END_HEADERS, END_STREAM, HEADERS, PREFACE, RST_STREAM, SETTINGS,
    };
    let (_site, server) = serve_slow();
    let mut stream = server.connect();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &block(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/slow/page"),
            (":authority", "localhost"),
            ("accept-encoding", "gzip"),
        ]),
    ));
    stream.write_all(&hello).unwrap();
    // The response's head (HEADERS on stream 1): the page streams compressed.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    loop {
        let mut head = [0u8; 9];
        stream.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).unwrap();
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if head[3] == HEADERS && id == 1 {
            break;
        }
    }
    assert_eq!(
        streams_metric(&server, "tessera_compression_stream_bytes"),
        448.0 * 1024.0
    );
    // The stream cancelled, the connection kept open.
    stream
        .write_all(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()))
        .unwrap();
    let took = released_after(&server);
    assert!(took < Duration::from_secs(1), "given back after {took:?}");
    drop(stream);
}
