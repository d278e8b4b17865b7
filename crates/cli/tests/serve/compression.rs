//! `[compression]`: proxied, ESI-assembled and Lua responses compressed on the fly for
//! the client's Accept-Encoding, decoded here with the same libraries, byte for byte.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::harness::{read_request_head, read_response, Response, Server, Site};

/// A text page long enough to compress (about 20 KB).
pub fn page_text() -> Vec<u8> {
    (0..400)
        .flat_map(|i| format!("<p>paragraph {i} of the page, with some words</p>\n").into_bytes())
        .collect()
}

/// A fragment's text (about 3 KB), different per fragment.
fn fragment_text(n: u32) -> Vec<u8> {
    (0..60)
        .flat_map(|i| format!("<li>fragment {n} item {i}</li>\n").into_bytes())
        .collect()
}

/// The assembled ESI page `/esi` makes.
pub fn esi_page() -> Vec<u8> {
    let mut page = b"<html><body>\n".to_vec();
    for n in 0..3 {
        page.extend_from_slice(&fragment_text(n));
    }
    page.extend_from_slice(b"</body></html>\n");
    page
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// An origin on loopback, one thread per connection, keep-alive:
///
/// - `/page` (and `/page?...`): [`page_text`], text/html, a strong ETag
/// - `/esi`: an ESI template including `/frag/0`..`/frag/2` (the second after 100 ms)
/// - `/frag/N`: [`fragment_text`], gzip-encoded when the request accepts gzip
/// - `/small`: 100 bytes of text/html
/// - `/png`: 5 KB of image/png
/// - `/no-transform`: the page with `Cache-Control: no-transform`
/// - `/gzipped`: the page gzip-encoded by the origin
/// - `/partial`: a 206 of the page's first 2000 bytes
/// - `/bomb`: ESI template whose gzip body expands to 64 MiB of zeros
/// - `/enc/CODING/page`: the `/esi` template encoded in CODING (gzip, br, zstd), whatever
///   the request accepts (an origin serving precompressed files), including
///   `/enc/CODING/frag/N`: [`fragment_text`] encoded the same way
pub fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    crate::harness::thread_per_connection(listener, serve_origin);
    addr
}

fn serve_origin(stream: TcpStream) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let Some((path, fields)) = read_request_head(&mut reader) else {
            return;
        };
        let accepts_gzip = fields.iter().any(|f| {
            let f = f.to_ascii_lowercase();
            f.starts_with("accept-encoding:") && f.contains("gzip")
        });
        let html = "Content-Type: text/html; charset=utf-8\r\n";
        let esi = "Content-Type: text/html\r\nSurrogate-Control: content=\"ESI/1.0\"\r\n";
        let (status, extra, body): (&str, String, Vec<u8>) = match path.as_str() {
            p if p.starts_with("/page") => {
                ("200 OK", format!("{html}ETag: \"v1\"\r\n"), page_text())
            }
            "/esi" => {
                let mut t = b"<html><body>\n".to_vec();
                for n in 0..3 {
                    t.extend_from_slice(format!("<esi:include src=\"/frag/{n}\"/>").as_bytes());
                }
                t.extend_from_slice(b"</body></html>\n");
                ("200 OK", esi.into(), t)
            }
            p if p.starts_with("/frag/") => {
                let n: u32 = p["/frag/".len()..].parse().unwrap();
                if n == 1 {
                    std::thread::sleep(Duration::from_millis(100));
                }
                if accepts_gzip {
                    let extra = format!("{html}Content-Encoding: gzip\r\n");
                    ("200 OK", extra, gzip(&fragment_text(n)))
                } else {
                    ("200 OK", html.into(), fragment_text(n))
                }
            }
            "/small" => ("200 OK", html.into(), vec![b'x'; 100]),
            "/png" => (
                "200 OK",
                "Content-Type: image/png\r\n".into(),
                vec![7; 5000],
            ),
            "/no-transform" => (
                "200 OK",
                format!("{html}Cache-Control: no-transform\r\n"),
                page_text(),
            ),
            "/gzipped" => (
                "200 OK",
                format!("{html}Content-Encoding: gzip\r\n"),
                gzip(&page_text()),
            ),
            "/partial" => (
                "206 Partial Content",
                format!(
                    "{html}Content-Range: bytes 0-1999/{}\r\n",
                    page_text().len()
                ),
                page_text()[..2000].to_vec(),
            ),
            "/bomb" => (
                "200 OK",
                format!("{esi}Content-Encoding: gzip\r\n"),
                bomb().to_vec(),
            ),
            "/cached/page" => {
                let mut t = b"<html><body>\n".to_vec();
                for n in 0..3 {
                    let src = format!("<esi:include src=\"/cached/frag/{n}\"/>");
                    t.extend_from_slice(src.as_bytes());
                }
                t.extend_from_slice(b"</body></html>\n");
                ("200 OK", format!("{esi}Cache-Control: max-age=60\r\n"), t)
            }
            "/cached/personal" => {
                let mut t =
                    b"<html><body>\n<esi:vars>Hello $(HTTP_COOKIE{name})</esi:vars>\n".to_vec();
                for n in 0..3 {
                    let src = format!("<esi:include src=\"/cached/frag/{n}\"/>");
                    t.extend_from_slice(src.as_bytes());
                }
                t.extend_from_slice(b"</body></html>\n");
                ("200 OK", format!("{esi}Cache-Control: max-age=60\r\n"), t)
            }
            p if p.starts_with("/cached/frag/") => {
                let n: u32 = p["/cached/frag/".len()..].parse().unwrap();
                let extra = format!("{html}Cache-Control: max-age=60\r\n");
                ("200 OK", extra, fragment_text(n))
            }
            "/cached/plain" => (
                "200 OK",
                format!("{html}Cache-Control: max-age=60\r\nETag: \"p1\"\r\n"),
                page_text(),
            ),
            p if p.starts_with("/enc/") => {
                let mut parts = p["/enc/".len()..].split('/');
                let coding = parts.next().unwrap().to_string();
                let body = match parts.next() {
                    Some("frag") => fragment_text(parts.next().unwrap().parse().unwrap()),
                    _ => {
                        let mut t = b"<html><body>\n".to_vec();
                        for n in 0..3 {
                            let src = format!("<esi:include src=\"/enc/{coding}/frag/{n}\"/>");
                            t.extend_from_slice(src.as_bytes());
                        }
                        t.extend_from_slice(b"</body></html>\n");
                        t
                    }
                };
                let extra = format!("{esi}Content-Encoding: {coding}\r\n");
                ("200 OK", extra, encode(&coding, &body))
            }
            _ => ("404 Not Found", String::new(), b"no such page".to_vec()),
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

/// `data` encoded in `coding`, as an origin would send it.
fn encode(coding: &str, data: &[u8]) -> Vec<u8> {
    match coding {
        "gzip" => gzip(data),
        "br" => {
            let mut out = Vec::new();
            let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 20);
            w.write_all(data).unwrap();
            drop(w);
            out
        }
        "zstd" => zstd::encode_all(data, 3).unwrap(),
        other => panic!("unknown coding {other}"),
    }
}

/// 64 MiB of zeros, gzip-encoded once (about 64 KB).
fn bomb() -> &'static [u8] {
    static BOMB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BOMB.get_or_init(|| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap()
    })
}

const LUA: &str = r#"
local M = {}
function M.content(r)
  r:set_header("Content-Type", "text/plain")
  if r:arg("opt_out") then r:no_compress() end
  for i = 0, 299 do
    r:say("lua line ", i, " with some text to compress")
  end
end
return M
"#;

/// The Lua handler's body.
pub fn lua_text() -> Vec<u8> {
    (0..300)
        .flat_map(|i| format!("lua line {i} with some text to compress\n").into_bytes())
        .collect()
}

/// A server proxying `/` to the origin (ESI on), with `/lua` answered by [`LUA`].
pub fn serve(extra: &str) -> (Site, Server) {
    serve_env(extra, &[])
}

/// [`serve`] with environment variables for the server.
fn serve_env(extra: &str, env: &[(&str, &str)]) -> (Site, Server) {
    serve_with(extra, env, &["--listen", "127.0.0.1:0"])
}

/// [`serve`] listening where `extra` says (`listen = [...]`), not on the command line.
pub fn serve_listening_as_configured(extra: &str) -> (Site, Server) {
    serve_with(extra, &[], &[])
}

fn serve_with(extra: &str, env: &[(&str, &str)], listen: &[&str]) -> (Site, Server) {
    let site = Site::new();
    site.write("handler.lua", LUA.as_bytes());
    let lua = site.root().join("handler.lua");
    let config = site.dir.path().join("tessera.toml");
    let toml = format!(
        "{extra}\n\
         [[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
         [[script]]\nprefix = \"/lua\"\npath = \"{}\"\n",
        origin(),
        lua.display()
    );
    std::fs::write(&config, toml).unwrap();
    let args: Vec<String> = [
        "serve",
        "--root",
        site.root().to_str().unwrap(),
        "--workers",
        "1",
        "--config",
        config.to_str().unwrap(),
    ]
    .iter()
    .chain(listen)
    .map(|s| s.to_string())
    .collect();
    let server = Server::start_args_env(std::path::Path::new("."), &args, env);
    (site, server)
}

/// One request with these extra header lines, its response (the body as sent).
pub fn request(server: &Server, method: &str, path: &str, fields: &str) -> Response {
    let mut stream = server.connect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, method == "HEAD")
}

/// Decodes a body in `coding` with the libraries clients use.
pub fn decode(coding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        "br" => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        "zstd" => out = zstd::decode_all(body).unwrap(),
        other => panic!("unknown coding {other}"),
    }
    out
}

pub fn vary_names_accept_encoding(r: &Response) -> bool {
    r.headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("vary") && v.to_ascii_lowercase().contains("accept-encoding")
    })
}

/// Asserts `path` comes back in each coding, decoding to `expected`, with Vary.
fn assert_every_coding(server: &Server, path: &str, expected: &[u8]) {
    for coding in ["gzip", "br", "zstd"] {
        let r = request(
            server,
            "GET",
            path,
            &format!("Accept-Encoding: {coding}\r\n"),
        );
        assert_eq!(r.status, 200, "{path} {coding}");
        assert_eq!(r.header("content-encoding"), Some(coding), "{path}");
        assert!(
            vary_names_accept_encoding(&r),
            "{path} {coding}: {:?}",
            r.headers
        );
        assert!(
            r.body.len() < expected.len() / 2,
            "{path} {coding} not smaller"
        );
        assert_eq!(decode(coding, &r.body), expected, "{path} {coding}");
    }
}

#[test]
fn proxied_esi_and_lua_responses_decode_byte_exact_in_every_coding() {
    let (_site, server) = serve("");
    assert_every_coding(&server, "/page", &page_text());
    assert_every_coding(&server, "/esi", &esi_page());
    assert_every_coding(&server, "/lua", &lua_text());
}

#[test]
fn zstd_is_preferred_and_q_values_are_honoured() {
    let (_site, server) = serve("");
    let browser = "Accept-Encoding: gzip, deflate, br, zstd\r\n";
    let r = request(&server, "GET", "/page", browser);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert_eq!(
        r.header("etag"),
        Some("W/\"v1\""),
        "a compressed variant's ETag is weak"
    );
    let r = request(
        &server,
        "GET",
        "/page",
        "Accept-Encoding: br;q=0.5, gzip\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let r = request(
        &server,
        "GET",
        "/page",
        "Accept-Encoding: zstd;q=0, br;q=0, gzip\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    // Nothing accepted, or no header: identity, strong ETag, Vary still (a shared cache
    // must not give this to a client that accepts gzip).
    for fields in [
        "",
        "Accept-Encoding: deflate\r\n",
        "Accept-Encoding: gzip;q=0\r\n",
    ] {
        let r = request(&server, "GET", "/page", fields);
        assert_eq!(r.header("content-encoding"), None, "{fields:?}");
        assert_eq!(r.header("etag"), Some("\"v1\""));
        assert!(vary_names_accept_encoding(&r), "{fields:?}");
        assert_eq!(r.body, page_text());
    }
    // identity refused and nothing else acceptable: 406 (RFC 9110 section 12.5.3).
    let r = request(
        &server,
        "GET",
        "/page",
        "Accept-Encoding: deflate, identity;q=0\r\n",
    );
    assert_eq!(r.status, 406);
    let r = request(&server, "GET", "/page", "Accept-Encoding: *;q=0\r\n");
    assert_eq!(r.status, 406);
    let r = request(
        &server,
        "GET",
        "/page",
        "Accept-Encoding: gzip, identity;q=0\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[test]
fn the_exclusions_go_out_as_they_came() {
    let (_site, server) = serve("");
    let gzip_ok = "Accept-Encoding: gzip, br, zstd\r\n";
    // Under min_length, an excluded type, no-transform, a 206.
    let r = request(&server, "GET", "/small", gzip_ok);
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 100));
    let r = request(&server, "GET", "/png", gzip_ok);
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 5000));
    assert!(!vary_names_accept_encoding(&r));
    let r = request(&server, "GET", "/no-transform", gzip_ok);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page_text());
    let r = request(&server, "GET", "/partial", gzip_ok);
    assert_eq!((r.status, r.header("content-encoding")), (206, None));
    assert_eq!(r.body, &page_text()[..2000]);
    // Already encoded by the origin in a coding the client accepts: untouched (not
    // recompressed, even though the client prefers zstd).
    let r = request(&server, "GET", "/gzipped", gzip_ok);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, gzip(&page_text()));
    // A Lua response that opted out.
    let r = request(&server, "GET", "/lua?opt_out=1", gzip_ok);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, lua_text());
    // HEAD: the fields its GET gets, no body.
    let r = request(&server, "HEAD", "/page", "Accept-Encoding: gzip\r\n");
    assert_eq!(
        (r.status, r.header("content-encoding")),
        (200, Some("gzip"))
    );
    assert!(vary_names_accept_encoding(&r));
    let r = request(&server, "HEAD", "/lua", "Accept-Encoding: br\r\n");
    assert_eq!((r.status, r.header("content-encoding")), (200, Some("br")));
    // Turned off.
    let (_site, off) = serve("[compression]\nenabled = false\n");
    let r = request(&off, "GET", "/page", gzip_ok);
    assert_eq!(r.header("content-encoding"), None);
    assert!(!vary_names_accept_encoding(&r));
}

#[test]
fn config_chooses_algorithms_types_and_min_length() {
    let (_site, server) = serve(
        "[compression]\nalgorithms = [\"gzip\"]\ntypes = [\"image/png\"]\nmin_length = 10\n\
         [compression.level]\ngzip = 1\n",
    );
    let r = request(
        &server,
        "GET",
        "/png",
        "Accept-Encoding: zstd, br, gzip\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), vec![7u8; 5000]);
    let r = request(&server, "GET", "/page", "Accept-Encoding: gzip\r\n");
    assert_eq!(
        r.header("content-encoding"),
        None,
        "text/html is not listed"
    );
}

#[test]
fn an_esi_page_streams_compressed_piece_by_piece() {
    // The second fragment takes 100 ms: the page up to it must reach the client, and
    // decode, before then (each ready piece ends with a sync flush).
    let (_site, server) = serve("");
    let mut stream = server.connect();
    stream
        .write_all(b"GET /esi HTTP/1.1\r\nHost: test\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
        .unwrap();
    let start = std::time::Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 65536];
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let ready = 13 + fragment_text(0).len();
    let mut head_end = None;
    let mut at = 0;
    while decoder.get_ref().len() < ready {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed early");
        seen.extend_from_slice(&buf[..n]);
        if head_end.is_none() {
            let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            assert!(head.contains("transfer-encoding: chunked"), "{head}");
            assert!(head.contains("content-encoding: gzip"), "{head}");
            head_end = Some(end + 4);
            at = end + 4;
        }
        // Feed every whole chunk received so far to the decoder.
        loop {
            let rest = &seen[at..];
            let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
                break;
            };
            let size_text = std::str::from_utf8(&rest[..line_end]).unwrap();
            let size = usize::from_str_radix(size_text, 16).unwrap();
            if rest.len() < line_end + 2 + size + 2 {
                break;
            }
            decoder
                .write_all(&rest[line_end + 2..line_end + 2 + size])
                .unwrap();
            decoder.flush().unwrap();
            at += line_end + 2 + size + 2;
        }
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_millis(90),
        "first pieces after {elapsed:?}"
    );
    let partial = decoder.get_ref();
    assert_eq!(&partial[..], &esi_page()[..partial.len()]);
}

#[test]
fn encoded_templates_and_fragments_from_origins_are_decoded_and_assembled() {
    let (_site, server) = serve("");
    for origin_coding in ["gzip", "br", "zstd"] {
        let path = format!("/enc/{origin_coding}/page");
        // Identity for a client that accepts nothing, each coding for one that does.
        let r = request(&server, "GET", &path, "");
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-encoding"), None, "{path}");
        assert_eq!(r.body, esi_page(), "{path}");
        assert_every_coding(&server, &path, &esi_page());
    }
}

#[test]
fn a_decompression_bomb_from_an_origin_is_a_502_naming_the_upstream() {
    let (_site, server) = serve("[esi]\nmax_fragment_size = 1048576\n");
    // The origin's bomb is made once, before the clock starts.
    let _ = bomb();
    let start = std::time::Instant::now();
    let r = request(&server, "GET", "/bomb", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.status, 502);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let logged = server.stderr.lock().unwrap().iter().any(|l| {
            l.contains("upstream body refused") && l.contains("origin") && l.contains("exceeds")
        });
        if logged {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The server is fine afterwards.
    assert_eq!(request(&server, "GET", "/page", "").body, page_text());
}

/// How many times the server logged that it made a compressed form of a cached object
/// in `coding`.
fn forms_made(server: &Server, coding: &str) -> usize {
    // The log line is written before the response; give the reader thread a moment.
    std::thread::sleep(Duration::from_millis(100));
    let needle = format!("coding=\"{coding}\"");
    let lines = server.stderr.lock().unwrap();
    lines
        .iter()
        .filter(|l| l.contains("compressed form made") && l.contains(&needle))
        .count()
}

#[test]
fn a_cached_page_is_compressed_once_and_served_in_every_form_from_one_object() {
    let (_site, server) = serve_env("", &[("RUST_LOG", "info,edge=debug")]);
    let expected = esi_page();
    let mut gzip_bodies = Vec::new();
    for i in 0..10 {
        let r = request(&server, "GET", "/cached/page", "Accept-Encoding: gzip\r\n");
        assert_eq!(r.header("content-encoding"), Some("gzip"), "request {i}");
        assert!(vary_names_accept_encoding(&r));
        assert_eq!(decode("gzip", &r.body), expected, "request {i}");
        if i > 0 {
            // From the cache: whole, with its length.
            assert!(
                r.header("content-length").is_some(),
                "request {i}: {:?}",
                r.headers
            );
        }
        // The second is stitched from the fragments' parts while its assembly is first
        // kept; from the third on, the kept assembly's gzip form is served as it is.
        if i > 1 {
            gzip_bodies.push(r.body);
        }
    }
    assert!(gzip_bodies.windows(2).all(|w| w[0] == w[1]));
    // Nine hits, one compression.
    assert_eq!(forms_made(&server, "gzip"), 1);
    // The same stored page for a client that accepts nothing, and for zstd and br.
    for _ in 0..3 {
        let r = request(&server, "GET", "/cached/page", "");
        assert_eq!(r.header("content-encoding"), None);
        assert!(vary_names_accept_encoding(&r), "{:?}", r.headers);
        assert_eq!(r.body, expected);
        for coding in ["zstd", "br"] {
            let r = request(
                &server,
                "GET",
                "/cached/page",
                &format!("Accept-Encoding: {coding}\r\n"),
            );
            assert_eq!(r.header("content-encoding"), Some(coding));
            assert_eq!(decode(coding, &r.body), expected);
        }
    }
    assert_eq!(forms_made(&server, "identity"), 1);
    assert_eq!(forms_made(&server, "zstd"), 1);
    assert_eq!(forms_made(&server, "br"), 1);
    assert_eq!(forms_made(&server, "gzip"), 1);

    // A cached plain page: one object, a gzip client and a client that accepts nothing.
    let g = request(&server, "GET", "/cached/plain", "Accept-Encoding: gzip\r\n");
    let g2 = request(&server, "GET", "/cached/plain", "Accept-Encoding: gzip\r\n");
    let plain = request(&server, "GET", "/cached/plain", "");
    assert_eq!(g.header("etag"), Some("W/\"p1\""));
    assert_eq!(decode("gzip", &g2.body), page_text());
    assert_eq!(g.body, g2.body);
    assert_eq!(
        (plain.header("etag"), plain.body.clone()),
        (Some("\"p1\""), page_text())
    );
    assert!(vary_names_accept_encoding(&plain));
    assert_eq!(forms_made(&server, "gzip"), 2, "one per object");
    let head = request(
        &server,
        "HEAD",
        "/cached/plain",
        "Accept-Encoding: gzip\r\n",
    );
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert_eq!(head.header("etag"), Some("W/\"p1\""));
}

#[test]
fn static_files_without_siblings_are_compressed_once_and_kept() {
    let site = Site::new();
    site.write("page.html", &page_text());
    site.write("with-sibling.html", &page_text());
    site.write("with-sibling.html.gz", &gzip(&page_text()));
    site.write("image.png", &[7u8; 5000]);
    let server = site.serve();
    for coding in ["gzip", "br", "zstd"] {
        let fields = format!("Accept-Encoding: {coding}\r\n");
        let r = request(&server, "GET", "/page.html", &fields);
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert!(vary_names_accept_encoding(&r));
        assert_eq!(decode(coding, &r.body), page_text(), "{coding}");
        // Its own validator: a 304 for it, in the same coding.
        let etag = r.header("etag").unwrap().to_string();
        assert!(etag.ends_with(&format!("-{coding}\"")), "{etag}");
        let again = request(
            &server,
            "GET",
            "/page.html",
            &format!("{fields}If-None-Match: {etag}\r\n"),
        );
        assert_eq!(again.status, 304);
    }
    let plain = request(&server, "GET", "/page.html", "");
    assert_eq!(plain.header("content-encoding"), None);
    assert!(vary_names_accept_encoding(&plain));
    assert_eq!(plain.body, page_text());
    // A sibling wins for its coding; the other codings are made here.
    let r = request(
        &server,
        "GET",
        "/with-sibling.html",
        "Accept-Encoding: gzip\r\n",
    );
    assert_eq!(r.body, gzip(&page_text()), "the sibling, as it is on disk");
    let r = request(
        &server,
        "GET",
        "/with-sibling.html",
        "Accept-Encoding: zstd\r\n",
    );
    assert_eq!(decode("zstd", &r.body), page_text());
    // Not a listed type; not compressed.
    let r = request(
        &server,
        "GET",
        "/image.png",
        "Accept-Encoding: gzip, zstd\r\n",
    );
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 5000));
    // A budget of nothing keeps nothing compressed.
    let none = site.serve_with("[compression]\nfile_cache_bytes = 0\n");
    let r = request(&none, "GET", "/page.html", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page_text());
}

/// The page `/cached/personal` makes for a client whose cookie says `name`.
fn personal_page(name: &str) -> Vec<u8> {
    let mut page = format!("<html><body>\nHello {name}\n").into_bytes();
    for n in 0..3 {
        page.extend_from_slice(&fragment_text(n));
    }
    page.extend_from_slice(b"</body></html>\n");
    page
}

#[test]
fn a_page_assembled_per_request_is_stitched_from_stored_compressed_parts() {
    let (_site, server) = serve_env("", &[("RUST_LOG", "info,edge=debug")]);
    for (i, name) in ["ann", "bob", "cy", "dee"].iter().enumerate() {
        for coding in ["gzip", "zstd"] {
            let fields = format!("Accept-Encoding: {coding}\r\nCookie: name={name}\r\n");
            let r = request(&server, "GET", "/cached/personal", &fields);
            assert_eq!(r.header("content-encoding"), Some(coding), "{name}");
            // One gzip member: a single-member decoder reads the whole page.
            assert_eq!(
                decode(coding, &r.body),
                personal_page(name),
                "{name} {coding}"
            );
            if i > 0 {
                assert!(
                    r.header("content-length").is_some(),
                    "{name}: {:?}",
                    r.headers
                );
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let lines = server.stderr.lock().unwrap();
    let stitched: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("page stitched"))
        .collect();
    assert!(stitched.len() >= 6, "{lines:?}");
    // After the first stitched page per coding, only the greeting is compressed anew.
    let later = &stitched[2..];
    assert!(later.iter().all(|l| l.contains("made=1")), "{stitched:?}");
}

#[test]
fn a_host_has_its_own_compression_table() {
    let site = Site::new();
    site.write("page.html", &page_text());
    let server = site.serve_with(&format!(
        "[[host]]\nnames = [\"plain.test\"]\nroot = \"{root}\"\n\
         [host.compression]\nenabled = false\n\
         [[host]]\nnames = [\"gzip-only.test\"]\nroot = \"{root}\"\n\
         [host.compression]\nalgorithms = [\"gzip\"]\n",
        root = site.root().display()
    ));
    let get = |host: &str| {
        let mut stream = server.connect();
        write!(
            stream,
            "GET /page.html HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: zstd, gzip\r\n\
             Connection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut stream, false)
    };
    assert_eq!(get("other.test").header("content-encoding"), Some("zstd"));
    assert_eq!(get("plain.test").header("content-encoding"), None);
    assert_eq!(get("plain.test").body, page_text());
    let r = get("gzip-only.test");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page_text());
}

#[test]
fn an_http_1_0_client_gets_a_compressed_stream_with_its_length() {
    let (_site, server) = serve("");
    let mut stream = server.connect();
    stream
        .write_all(b"GET /esi HTTP/1.0\r\nHost: test\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let all = crate::harness::read_to_close(&mut stream);
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    let length = format!("content-length: {}", all.len() - end);
    assert!(head.contains(&length), "{head}");
    assert_eq!(decode("gzip", &all[end..]), esi_page());
}

#[test]
fn a_lua_header_filter_can_opt_a_proxied_response_out() {
    let site = Site::new();
    site.write(
        "filter.lua",
        b"local M = {}\nfunction M.header_filter(r)\n  if r:arg(\"raw\") then r:no_compress() end\nend\nreturn M\n",
    );
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
         [[script]]\nprefix = \"/page\"\npath = \"{}\"\n",
        origin(),
        site.root().join("filter.lua").display()
    ));
    let r = request(&server, "GET", "/page?raw=1", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page_text());
    let r = request(&server, "GET", "/page", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page_text());
}

#[test]
fn an_upstream_coding_the_client_refuses_is_decoded_for_it() {
    let (_site, server) = serve("");
    // The origin gzips /gzipped whatever it is asked; a client that takes no coding gets
    // the page itself, one that takes only zstd gets it in zstd.
    let r = request(&server, "GET", "/gzipped", "");
    assert_eq!(r.header("content-encoding"), None);
    assert!(vary_names_accept_encoding(&r));
    assert_eq!(r.body, page_text());
    let r = request(&server, "GET", "/gzipped", "Accept-Encoding: zstd\r\n");
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert_eq!(decode("zstd", &r.body), page_text());
    // A client that takes gzip gets the origin's bytes untouched.
    let r = request(
        &server,
        "GET",
        "/gzipped",
        "Accept-Encoding: gzip, zstd\r\n",
    );
    assert_eq!(r.body, gzip(&page_text()));
}

/// Over HTTP/2 (curl, prior knowledge) the same codings, byte exact once decoded: the
/// compression filter runs before the response is framed, whichever the protocol.
#[test]
fn responses_over_http2_are_compressed_the_same_way() {
    let (site, server) = serve("");
    for (path, expected) in [
        ("/page", page_text()),
        ("/esi", esi_page()),
        ("/lua", lua_text()),
    ] {
        for coding in ["gzip", "br", "zstd"] {
            let head = site.dir.path().join("head");
            let out = std::process::Command::new("curl")
                .args(["-s", "--max-time", "30", "--http2-prior-knowledge"])
                .args(["-H", &format!("Accept-Encoding: {coding}")])
                .args(["-D", head.to_str().unwrap()])
                .arg(format!("http://{}{path}", server.addr))
                .output()
                .unwrap();
            let head = std::fs::read_to_string(&head).unwrap().to_ascii_lowercase();
            assert!(head.starts_with("http/2 200"), "{path} {coding}: {head}");
            assert!(
                head.contains(&format!("content-encoding: {coding}")),
                "{head}"
            );
            assert!(head.contains("vary: accept-encoding"), "{head}");
            assert!(!head.contains("transfer-encoding"), "{head}");
            assert!(
                out.stdout.len() < expected.len() / 2,
                "{path} {coding} not smaller"
            );
            assert_eq!(decode(coding, &out.stdout), expected, "{path} {coding}");
        }
    }
}
