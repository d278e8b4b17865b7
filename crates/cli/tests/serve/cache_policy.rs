//! The cache's rules per route (docs/cache.md, "Rules per route"): lifetimes by status,
//! `mode`, `grace` and `bypass`, through the binary and an origin started here.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use crate::harness::{
    check_config_output, read_request_head, read_response, Response, Server, Site,
};

/// An origin that counts requests per path (query included), answering by the path's
/// last part:
///
/// - `/plain...`: 200 `plain N` (N = the count), no caching headers
/// - `/zero...`: 200 `zero N`, `Cache-Control: max-age=0`
/// - `/slow...`: 200 `slow N` after 300 ms, `max-age=60`
/// - `/missing...`: 404 `missing N`, no caching headers
/// - `/error...`: 503 `error N`, no caching headers
/// - `/doc...`: 200 `0123456789abcdefghij`, `max-age=60`, `ETag: "v1"`, a Last-Modified
#[derive(Clone)]
pub struct Origin {
    pub addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

pub const LAST_MODIFIED: &str = "Tue, 02 Jan 2024 03:04:05 GMT";
pub const DOC: &str = "0123456789abcdefghij";

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = Origin {
            addr: listener.local_addr().unwrap(),
            hits: Arc::default(),
        };
        let o = origin.clone();
        crate::harness::thread_per_connection(listener, move |stream| o.serve(stream));
        origin
    }

    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn serve(&self, stream: TcpStream) {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while let Some((path, _)) = read_request_head(&mut reader) {
            let n = {
                let mut hits = self.hits.lock().unwrap();
                let n = hits.entry(path.clone()).or_insert(0);
                *n += 1;
                *n
            };
            let (status, extra, body) = if path.contains("/plain") {
                ("200 OK", String::new(), format!("plain {n}"))
            } else if path.contains("/zero") {
                (
                    "200 OK",
                    "Cache-Control: max-age=0\r\n".into(),
                    format!("zero {n}"),
                )
            } else if path.contains("/slow") {
                std::thread::sleep(std::time::Duration::from_millis(300));
                (
                    "200 OK",
                    "Cache-Control: max-age=60\r\n".into(),
                    format!("slow {n}"),
                )
            } else if path.contains("/error") {
                (
                    "503 Service Unavailable",
                    String::new(),
                    format!("error {n}"),
                )
            } else if path.contains("/missing") {
                ("404 Not Found", String::new(), format!("missing {n}"))
            } else {
                let h = format!(
                    "Cache-Control: max-age=60\r\nETag: \"v1\"\r\nLast-Modified: {LAST_MODIFIED}\r\nContent-Type: text/plain\r\n"
                );
                ("200 OK", h, DOC.to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if writer.write_all(response.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// `tessera serve` proxying to `origin` with the TOML `routes` (each `[[route]]`
/// naming upstream `origin`) and `extra` (other tables).
pub fn serve(site: &Site, origin: &Origin, routes: &str, extra: &str) -> Server {
    let toml = format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\n{routes}\n{extra}\n",
        origin.addr
    );
    site.serve_with(&toml)
}

pub fn request(server: &Server, raw: &str) -> Response {
    let mut stream = server.connect();
    stream.write_all(raw.as_bytes()).unwrap();
    read_response(&mut stream, raw.starts_with("HEAD"))
}

/// A GET of `path` with the extra header lines `fields` (each ending in CRLF).
pub fn get_with(server: &Server, path: &str, fields: &str) -> Response {
    request(
        server,
        &format!("GET {path} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n"),
    )
}

pub fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

const ROUTES: &str = "[[route]]\nprefix = \"/over\"\nupstream = \"origin\"\n\
    [route.cache]\nttl = { \"200\" = \"1h\" }\nmode = \"override\"\ngrace = \"30s\"\n\n\
    [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
    [route.cache]\nttl = { \"200\" = \"1h\", \"404\" = \"1m\" }\nmode = \"default\"\n\
    bypass = { cookie = \"session\", header = \"X-No-Cache\" }\n";

#[test]
fn ttl_by_status_stores_what_the_origin_gave_no_lifetime() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, ROUTES, "");
    for (path, status, want) in [
        ("/plain/a", 200, "plain 1"),
        ("/missing/a", 404, "missing 1"),
    ] {
        for _ in 0..3 {
            let r = get_with(&server, path, "");
            assert_eq!((r.status, body(&r).as_str()), (status, want), "{path}");
        }
        assert_eq!(origin.hits(path), 1, "{path}");
    }
    // "default": the origin's own `max-age=0` wins over the rule, so it is not stored.
    for want in ["zero 1", "zero 2"] {
        assert_eq!(body(&get_with(&server, "/zero/a", "")), want);
    }
}

#[test]
fn override_replaces_the_origins_lifetime() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, ROUTES, "");
    for _ in 0..3 {
        assert_eq!(body(&get_with(&server, "/over/zero", "")), "zero 1");
    }
    assert_eq!(origin.hits("/over/zero"), 1);
    // A status the rule does not name keeps tessera's own rule: a 404 without a
    // lifetime is not stored.
    get_with(&server, "/over/missing", "");
    get_with(&server, "/over/missing", "");
    assert_eq!(origin.hits("/over/missing"), 2);
}

#[test]
fn bypass_by_cookie_or_header_skips_lookup_and_store() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, ROUTES, "");
    assert_eq!(body(&get_with(&server, "/plain/b", "")), "plain 1");
    // Bypassed: the origin answers, and what it answers is not stored.
    let bypassed = [
        "Cookie: theme=dark; session=abc\r\n",
        "Cookie: session=abc\r\n",
        "X-No-Cache: 1\r\n",
    ];
    for (i, fields) in bypassed.iter().enumerate() {
        let want = format!("plain {}", i + 2);
        assert_eq!(
            body(&get_with(&server, "/plain/b", fields)),
            want,
            "{fields}"
        );
    }
    // Others still get the stored object; a cookie of another name does not bypass.
    for fields in ["", "Cookie: sessions=1\r\n"] {
        assert_eq!(
            body(&get_with(&server, "/plain/b", fields)),
            "plain 1",
            "{fields}"
        );
    }
    // A first request that bypasses stores nothing for the next.
    assert_eq!(
        body(&get_with(&server, "/plain/c", "X-No-Cache: 1\r\n")),
        "plain 1"
    );
    assert_eq!(body(&get_with(&server, "/plain/c", "")), "plain 2");
    assert_eq!(body(&get_with(&server, "/plain/c", "")), "plain 2");
}

#[test]
fn check_config_names_the_route_cache_key() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    for (rule, key, want) in [
        (
            "ttl = { \"200\" = \"soon\" }",
            "route[1].cache.ttl",
            "\"soon\" is not a duration",
        ),
        (
            "ttl = { \"500\" = \"1m\" }",
            "route[1].cache.ttl",
            "500 cannot be stored",
        ),
        ("mode = \"always\"", "mode", "unknown variant `always`"),
        (
            "grace = \"-1\"",
            "route[1].cache.grace",
            "is not a duration",
        ),
        (
            "keep = \"a while\"",
            "route[1].cache.keep",
            "is not a duration",
        ),
        (
            "expose_keys = \"yes\"",
            "expose_keys",
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            "key = { query = \"random\" }",
            "route[1].cache.key",
            "query = \"random\"",
        ),
        (
            "key = { drop_query = [\"\"] }",
            "route[1].cache.key",
            "drop_query",
        ),
        (
            "bypass = { cookie = \"\" }",
            "route[1].cache.bypass.cookie",
            "not a cookie name",
        ),
    ] {
        let toml = format!(
            "[[upstream]]\nname = \"origin\"\naddresses = [\"127.0.0.1:1\"]\n\n\
             [[route]]\nprefix = \"/r\"\nrespond = {{ body = \"x\" }}\n\n\
             [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\n{rule}\n"
        );
        std::fs::write(&path, toml).unwrap();
        let (code, stderr) = check_config_output(&path);
        assert_eq!(code, Some(1), "{rule}: {stderr}");
        for want in [key, want] {
            assert!(stderr.contains(want), "{rule}: {stderr} lacks {want}");
        }
        assert!(stderr.contains("bad.toml:"), "{stderr}");
    }
}

const PROXY_ALL: &str = "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n";

#[test]
fn not_modified_from_the_cache_for_either_validator() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, PROXY_ALL, "");
    let r = get_with(&server, "/doc/a", "");
    assert_eq!(body(&r), DOC);
    assert_eq!(
        r.header("cache-status"),
        None,
        "cache_status is off by default"
    );
    let older = "Mon, 01 Jan 2024 00:00:00 GMT";
    for (fields, status) in [
        ("If-None-Match: \"v1\"\r\n", 304),
        ("If-None-Match: \"x\", W/\"v1\"\r\n", 304),
        ("If-None-Match: *\r\n", 304),
        ("If-None-Match: \"v2\"\r\n", 200),
        (&format!("If-Modified-Since: {LAST_MODIFIED}\r\n"), 304),
        (&format!("If-Modified-Since: {older}\r\n"), 200),
        // If-None-Match wins over If-Modified-Since.
        (
            &format!("If-None-Match: \"v2\"\r\nIf-Modified-Since: {LAST_MODIFIED}\r\n"),
            200,
        ),
        ("If-Match: \"v2\"\r\n", 412),
        ("If-Match: \"v1\"\r\n", 200),
        (&format!("If-Unmodified-Since: {older}\r\n"), 412),
    ] {
        let r = get_with(&server, "/doc/a", fields);
        assert_eq!(r.status, status, "{fields}");
        match status {
            304 => {
                assert!(r.body.is_empty(), "{fields}");
                assert_eq!(r.header("etag"), Some("\"v1\""), "{fields}");
                assert!(r.header("age").is_some(), "{fields}");
            }
            200 => assert_eq!(body(&r), DOC, "{fields}"),
            _ => {}
        }
    }
    // HEAD from the cache: the GET's head, no body; conditional too.
    let head = "HEAD /doc/a HTTP/1.1\r\nHost: test\r\nConnection: close\r\n";
    let r = request(&server, &format!("{head}\r\n"));
    assert_eq!((r.status, r.header("content-length")), (200, Some("20")));
    assert!(r.body.is_empty());
    let r = request(&server, &format!("{head}If-None-Match: \"v1\"\r\n\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(origin.hits("/doc/a"), 1);
}

#[test]
fn ranges_from_the_cache_single_multipart_and_if_range() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, PROXY_ALL, "");
    assert_eq!(body(&get_with(&server, "/doc/r", "")), DOC);
    let r = get_with(&server, "/doc/r", "Range: bytes=0-4\r\n");
    assert_eq!((r.status, body(&r).as_str()), (206, "01234"));
    assert_eq!(r.header("content-range"), Some("bytes 0-4/20"));
    assert_eq!(r.header("content-length"), Some("5"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = get_with(&server, "/doc/r", "Range: bytes=-3\r\n");
    assert_eq!((r.status, body(&r).as_str()), (206, "hij"));
    // Several ranges: multipart/byteranges, each part with its type and range.
    let r = get_with(&server, "/doc/r", "Range: bytes=0-1, 5-6\r\n");
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap().to_string();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(&ct);
    let want = format!(
        "\r\n--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/20\r\n\r\n01\
         \r\n--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 5-6/20\r\n\r\n56\
         \r\n--{boundary}--\r\n"
    );
    assert_eq!(body(&r), want);
    // If-Range: the same ETag or date gives the range; a changed ETag gives it all.
    for (if_range, status, want) in [
        ("\"v1\"", 206, "01234"),
        (LAST_MODIFIED, 206, "01234"),
        ("\"v2\"", 200, DOC),
        ("W/\"v1\"", 200, DOC),
    ] {
        let fields = format!("Range: bytes=0-4\r\nIf-Range: {if_range}\r\n");
        let r = get_with(&server, "/doc/r", &fields);
        assert_eq!((r.status, body(&r).as_str()), (status, want), "{if_range}");
    }
    let r = get_with(&server, "/doc/r", "Range: bytes=20-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */20"));
    // Another unit is ignored: the whole object.
    assert_eq!(
        body(&get_with(&server, "/doc/r", "Range: items=0-1\r\n")),
        DOC
    );
    assert_eq!(origin.hits("/doc/r"), 1);
}

#[test]
fn cache_status_says_hit_miss_stale_collapsed_and_bypass() {
    let site = Site::new();
    let origin = Origin::start();
    let routes = "[[route]]\nprefix = \"/g\"\nupstream = \"origin\"\n[route.cache]\n\
        ttl = { \"200\" = \"1s\" }\nmode = \"override\"\ngrace = \"60s\"\n\n\
        [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
        [route.cache]\nbypass = { cookie = \"session\" }\n";
    let server = serve(&site, &origin, routes, "[cache]\ncache_status = true\n");
    let status = |path: &str, fields: &str| {
        let r = get_with(&server, path, fields);
        r.header("cache-status").unwrap_or("(none)").to_string()
    };
    assert_eq!(status("/doc/s", ""), "tessera; fwd=miss; stored");
    let hit = status("/doc/s", "");
    let ttl: u64 = hit
        .strip_prefix("tessera; hit; ttl=")
        .expect(&hit)
        .parse()
        .unwrap();
    assert!((55..=60).contains(&ttl), "{hit}");
    // Conditional answers from the cache say so too.
    let r = get_with(&server, "/doc/s", "If-None-Match: \"v1\"\r\n");
    assert_eq!(r.status, 304);
    assert!(r
        .header("cache-status")
        .unwrap()
        .starts_with("tessera; hit; ttl="));
    // No lifetime: not stored, then the key is passed without a lookup.
    assert_eq!(status("/plain/s", ""), "tessera; fwd=miss");
    assert_eq!(status("/plain/s", ""), "tessera; fwd=bypass");
    assert_eq!(
        status("/doc/s", "Cookie: session=1\r\n"),
        "tessera; fwd=bypass"
    );
    // Past its second of life, within grace: served stale while refreshed.
    assert_eq!(status("/g/doc", ""), "tessera; fwd=miss; stored");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let stale = status("/g/doc", "");
    assert!(stale.starts_with("tessera; fwd=stale; ttl=-"), "{stale}");
    // Concurrent misses: one fetch stored, the others waited on it.
    let server = std::sync::Arc::new(server);
    let all: Vec<String> = (0..4)
        .map(|_| {
            let server = server.clone();
            std::thread::spawn(move || {
                let r = get_with(&server, "/slow/c", "");
                r.header("cache-status").unwrap_or("(none)").to_string()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let stored = all
        .iter()
        .filter(|s| *s == "tessera; fwd=miss; stored")
        .count();
    let collapsed = all
        .iter()
        .filter(|s| *s == "tessera; fwd=miss; collapsed")
        .count();
    assert_eq!((stored, collapsed), (1, 3), "{all:?}");
    assert_eq!(origin.hits("/slow/c"), 1);
}

#[test]
fn key_rules_drop_and_sort_the_query_add_a_header_and_change_at_reload() {
    let site = Site::new();
    let origin = Origin::start();
    let route = |key: &str| {
        format!("[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\nkey = {key}\n")
    };
    let rule = "{ query = \"sorted\", drop_query = [\"utm_*\", \"fbclid\", \"gclid\"], \
                headers = [\"Accept-Language\"], cookies = [] }";
    let server = serve(&site, &origin, &route(rule), "");
    let get = |path: &str, fields: &str| {
        let r = get_with(&server, path, fields);
        assert_eq!((r.status, body(&r).as_str()), (200, DOC), "{path}");
    };
    get("/doc/k?utm_source=a&id=1", "");
    get("/doc/k?id=1", "");
    get("/doc/k?gclid=x&id=1&fbclid=y&utm_medium=b", "");
    assert_eq!(origin.hits("/doc/k?utm_source=a&id=1"), 1);
    assert_eq!(origin.hits("/doc/k?id=1"), 0);
    assert_eq!(origin.hits("/doc/k?gclid=x&id=1&fbclid=y&utm_medium=b"), 0);
    get("/doc/k?b=2&a=1", "");
    get("/doc/k?a=1&b=2", "");
    assert_eq!(
        origin.hits("/doc/k?b=2&a=1") + origin.hits("/doc/k?a=1&b=2"),
        1
    );
    // Accept-Language in the key: one object per language.
    for language in ["fr", "fr", "en", "en"] {
        get("/doc/l", &format!("Accept-Language: {language}\r\n"));
    }
    assert_eq!(origin.hits("/doc/l"), 2);
    // A reload with another rule: nothing stored under the old one is served.
    let config = site.dir.path().join("tessera.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, toml.replace(rule, "{ query = \"sorted\" }")).unwrap();
    server.signal(libc::SIGHUP);
    crate::harness::eventually("the reload", || {
        crate::harness::stderr_has(&server, "generation=2")
    });
    get("/doc/k?id=1", "");
    get("/doc/k?utm_source=a&id=1", "");
    get("/doc/k?utm_source=a&id=1", "");
    assert_eq!(origin.hits("/doc/k?id=1"), 1);
    assert_eq!(origin.hits("/doc/k?utm_source=a&id=1"), 2);
}

#[test]
fn a_hosts_route_has_its_own_cache_rules() {
    let site = Site::new();
    let origin = Origin::start();
    let host = |rule: &str| {
        format!(
            "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\n\
             [[host]]\nnames = [\"a.test\"]\n\
             [[host.route]]\nprefix = \"/\"\nupstream = \"origin\"\n[host.route.cache]\n{rule}\n"
        )
    };
    let server = serve(&site, &origin, &host("ttl = { \"200\" = \"1h\" }"), "");
    let get = |authority: &str| {
        let raw =
            format!("GET /plain/h HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        body(&request(&server, &raw))
    };
    // The host's rule stores what has no lifetime; the top-level route has no rule.
    assert_eq!(
        (get("a.test"), get("a.test")),
        ("plain 1".into(), "plain 1".into())
    );
    assert_eq!(
        (get("other.test"), get("other.test")),
        ("plain 2".into(), "plain 3".into())
    );
    let path = site.dir.path().join("bad.toml");
    let toml = format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"127.0.0.1:1\"]\n\n{}",
        host("ttl = { \"200\" = \"x\" }")
    );
    std::fs::write(&path, toml).unwrap();
    let (code, stderr) = check_config_output(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("host[0].route[0].cache.ttl"), "{stderr}");
}

#[test]
fn cache_errors_stores_a_server_error_for_its_lifetime() {
    let site = Site::new();
    let origin = Origin::start();
    let routes = "[[route]]\nprefix = \"/e\"\nupstream = \"origin\"\n\
        [route.cache]\ncache_errors = { \"503\" = \"1m\" }\n\n\
        [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n";
    let server = serve(&site, &origin, routes, "");
    for _ in 0..3 {
        let r = get_with(&server, "/e/error", "");
        assert_eq!((r.status, body(&r).as_str()), (503, "error 1"));
    }
    assert_eq!(origin.hits("/e/error"), 1);
    // Without the rule a server error is never stored.
    for want in ["error 1", "error 2"] {
        assert_eq!(body(&get_with(&server, "/error", "")), want);
    }
}
