//! Surrogate keys and soft purge (docs/cache.md, "Surrogate keys", "Soft purge"):
//! `PURGE` with `Surrogate-Key` or `xkey` removes every object the origin tagged with
//! one of the keys, a fragment's key reaches every page that includes it, and
//! `Fastly-Soft-Purge: 1` marks objects stale instead. Through the binary and an origin
//! started here.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::Redis;
use crate::cache_policy::{body, get_with, request};
use crate::compression::decode;
use crate::harness::{eventually, read_request_head, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// An origin whose objects have a version per path (1 until [`Origin::bump`]) and
/// surrogate keys:
///
/// - `/doc/X`: `doc X vN`, `max-age=60`, `ETag: "vN"`, `xkey: doc-X all-docs`
/// - `/tag/X`: `tag X vN`, `max-age=60`, `Cache-Tag: tag-X,all-tags`
/// - `/frag/X`: `[X vN]` and 2 KB of filler, `max-age=60`, `Surrogate-Key: frag-X frags`
/// - `/page/X`: an ESI page including `/frag/a` and `/frag/b`, `Surrogate-Control:
///   max-age=60`, `Surrogate-Key: page-X`
/// - `/grace/X`: `grace X vN`, `max-age=60, stale-while-revalidate=3600`, `ETag: "vN"`,
///   `Surrogate-Key: grace-X`; a conditional request matching the version gets a 304
#[derive(Clone)]
pub(crate) struct Origin {
    pub(crate) addr: SocketAddr,
    /// Requests and conditional requests per path.
    seen: Arc<Mutex<HashMap<String, (usize, usize)>>>,
    versions: Arc<Mutex<HashMap<String, u32>>>,
}

const FILLER: &str = "filler ";

impl Origin {
    pub(crate) fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = Origin {
            addr: listener.local_addr().unwrap(),
            seen: Arc::default(),
            versions: Arc::default(),
        };
        let o = origin.clone();
        crate::harness::thread_per_connection(listener, move |stream| o.serve(stream));
        origin
    }

    /// (requests, conditional requests) for `path`.
    pub(crate) fn seen(&self, path: &str) -> (usize, usize) {
        self.seen
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn bump(&self, path: &str) {
        *self
            .versions
            .lock()
            .unwrap()
            .entry(path.to_string())
            .or_insert(1) += 1;
    }

    fn serve(&self, stream: TcpStream) {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while let Some((path, fields)) = read_request_head(&mut reader) {
            let v = *self.versions.lock().unwrap().get(&path).unwrap_or(&1);
            let inm = fields.iter().find_map(|f| {
                let (n, value) = f.split_once(':')?;
                n.eq_ignore_ascii_case("if-none-match")
                    .then(|| value.trim().to_string())
            });
            {
                let mut seen = self.seen.lock().unwrap();
                let seen = seen.entry(path.clone()).or_default();
                seen.0 += 1;
                seen.1 += usize::from(inm.is_some());
            }
            let name = path.rsplit('/').next().unwrap_or_default();
            let etag = format!("\"v{v}\"");
            let (extra, text) = if path.contains("/doc/") {
                (
                    format!("Cache-Control: max-age=60\r\nETag: {etag}\r\nxkey: doc-{name} all-docs\r\n"),
                    format!("doc {name} v{v}"),
                )
            } else if path.starts_with("/tag/") {
                (
                    format!("Cache-Control: max-age=60\r\nCache-Tag: tag-{name},all-tags\r\n"),
                    format!("tag {name} v{v}"),
                )
            } else if path.starts_with("/frag/") {
                (
                    format!("Cache-Control: max-age=60\r\nSurrogate-Key: frag-{name} frags\r\n"),
                    format!("[{name} v{v}]{}", FILLER.repeat(300)),
                )
            } else if path.starts_with("/page/") {
                (
                    format!(
                        "Surrogate-Control: max-age=60, content=\"ESI/1.0\"\r\n\
                         Surrogate-Key: page-{name}\r\n"
                    ),
                    format!(
                        "<p>{name}<esi:include src=\"/frag/a\"/>|<esi:include src=\"/frag/b\"/></p>"
                    ),
                )
            } else if inm.as_deref() == Some(etag.as_str()) {
                let response = format!(
                    "HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60, \
                     stale-while-revalidate=3600\r\nETag: {etag}\r\n\r\n"
                );
                if writer.write_all(response.as_bytes()).is_err() {
                    return;
                }
                continue;
            } else {
                (
                    format!(
                        "Cache-Control: max-age=60, stale-while-revalidate=3600\r\nETag: {etag}\r\n\
                         Surrogate-Key: grace-{name}\r\n"
                    ),
                    format!("grace {name} v{v}"),
                )
            };
            let response = format!(
                "HTTP/1.1 200 OK\r\n{extra}Content-Type: text/html\r\nContent-Length: {}\r\n\r\n{text}",
                text.len()
            );
            if writer.write_all(response.as_bytes()).is_err() {
                return;
            }
        }
    }
}

fn serve(site: &Site, origin: &Origin, extra_routes: &str) -> Server {
    serve_with_tables(site, origin, extra_routes, "")
}

/// [`serve`] with more `tables` at the end.
fn serve_with_tables(site: &Site, origin: &Origin, extra_routes: &str, tables: &str) -> Server {
    site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\n{extra_routes}\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\n\
         [cache]\ncache_status = true\npurge_token = \"s3cret\"\n\n\
         [compression]\nmin_length = 1\n\n{tables}",
        origin.addr
    ))
}

/// A PURGE of `path` with the extra fields `fields`, holding the token: its status.
fn purge(server: &Server, path: &str, fields: &str) -> u16 {
    purge_answer(server, path, fields).status
}

/// The same: the whole answer.
fn purge_answer(server: &Server, path: &str, fields: &str) -> crate::harness::Response {
    request(
        server,
        &format!(
            "PURGE {path} HTTP/1.1\r\nHost: test\r\nX-Purge-Token: s3cret\r\n{fields}\
             Connection: close\r\n\r\n"
        ),
    )
}

/// Purging a key removes every object tagged with it (Surrogate-Key, Cache-Tag or
/// xkey, several keys per field), whatever their URL, and nothing else; the key fields
/// are not sent to the client unless the route says `expose_keys = true`.
#[test]
fn purging_a_surrogate_key_removes_every_object_with_it() {
    let site = Site::new();
    let origin = Origin::start();
    let exposed = "[[route]]\nprefix = \"/exposed\"\nupstream = \"origin\"\n\
                   [route.cache]\nexpose_keys = true\ngrace = \"1h\"\n";
    let server = serve(&site, &origin, exposed);
    for path in ["/doc/1", "/doc/2", "/tag/1", "/tag/2"] {
        let r = get_with(&server, path, "");
        assert_eq!(r.status, 200);
        for field in ["xkey", "cache-tag", "surrogate-key"] {
            assert_eq!(r.header(field), None, "{path}: {field} reached the client");
        }
    }
    let hits = |paths: &[&str]| paths.iter().map(|p| origin.seen(p).0).collect::<Vec<_>>();
    // One key of two (xkey), then a key shared by two objects.
    origin.bump("/doc/1");
    assert_eq!(purge(&server, "/", "Surrogate-Key: doc-1\r\n"), 200);
    assert_eq!(body(&get_with(&server, "/doc/1", "")), "doc 1 v2");
    assert_eq!(body(&get_with(&server, "/doc/2", "")), "doc 2 v1");
    assert_eq!(hits(&["/doc/1", "/doc/2"]), [2, 1]);
    // The answer counts what this process removed, as xkey's VCL does.
    let r = purge_answer(&server, "/anything", "xkey: all-docs\r\n");
    assert_eq!(
        (r.status, r.header("purged"), body(&r).as_str()),
        (200, Some("2"), "Invalidated 2 objects\n")
    );
    get_with(&server, "/doc/1", "");
    get_with(&server, "/doc/2", "");
    assert_eq!(hits(&["/doc/1", "/doc/2", "/tag/1"]), [3, 2, 1]);
    // Cache-Tag's comma-separated keys; two keys in one PURGE.
    assert_eq!(
        purge(&server, "/", "Surrogate-Key: tag-1 nothing-else\r\n"),
        200
    );
    get_with(&server, "/tag/1", "");
    get_with(&server, "/tag/2", "");
    assert_eq!(hits(&["/tag/1", "/tag/2"]), [2, 1]);
    // Nothing with the key: 404, 0 purged; without the token: 403, nothing purged.
    let r = purge_answer(&server, "/", "Surrogate-Key: unknown\r\n");
    assert_eq!((r.status, r.header("purged")), (404, Some("0")));
    let refused = request(
        &server,
        "PURGE / HTTP/1.1\r\nHost: test\r\nSurrogate-Key: all-tags\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(refused.status, 403);
    get_with(&server, "/tag/2", "");
    assert_eq!(hits(&["/tag/2"]), [1]);
    // expose_keys: the fields reach the client, fetched and from the cache.
    for _ in 0..2 {
        let r = get_with(&server, "/exposed/doc/9", "");
        assert_eq!(r.header("xkey"), Some("doc-9 all-docs"));
        assert_eq!(body(&r), "doc 9 v1");
    }
    assert_eq!(origin.seen("/exposed/doc/9").0, 1);
    // And after a background refresh (within grace, after a soft purge).
    let r = purge_answer(&server, "/exposed/doc/9", "Fastly-Soft-Purge: 1\r\n");
    assert_eq!(
        (r.status, r.header("purged")),
        (200, Some("1")),
        "marked stale"
    );
    assert_eq!(
        get_with(&server, "/exposed/doc/9", "").header("xkey"),
        Some("doc-9 all-docs")
    );
    eventually("the background refresh", || {
        origin.seen("/exposed/doc/9").0 == 2
    });
    eventually("the refreshed object, with its keys", || {
        let r = get_with(&server, "/exposed/doc/9", "");
        r.header("cache-status")
            .is_some_and(|s| s.starts_with("tessera; hit;"))
            && r.header("xkey") == Some("doc-9 all-docs")
    });
    // Passed through without storing (a request's no-store): the same.
    let no_store = "Cache-Control: no-store\r\n";
    let r = get_with(&server, "/exposed/doc/8", no_store);
    assert_eq!(r.header("xkey"), Some("doc-8 all-docs"));
    let r = get_with(&server, "/doc/8", no_store);
    assert_eq!((r.header("xkey"), body(&r).as_str()), (None, "doc 8 v1"));
}

/// A page assembled from fragments shows a fragment's new version on its next request
/// once the fragment's key is purged, in identity, gzip and zstd, without the page's
/// template being fetched again.
#[test]
fn a_fragments_key_purge_reaches_every_page_that_includes_it() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, "");
    let page = |path: &str, coding: &str| {
        let accept = if coding == "identity" {
            String::new()
        } else {
            format!("Accept-Encoding: {coding}\r\n")
        };
        let r = get_with(&server, path, &accept);
        assert_eq!(r.status, 200, "{path} {coding}");
        let text = if coding == "identity" {
            assert_eq!(r.header("content-encoding"), None);
            r.body.clone()
        } else {
            assert_eq!(r.header("content-encoding"), Some(coding), "{path}");
            decode(coding, &r.body)
        };
        let text = String::from_utf8(text).unwrap().replace(FILLER, "");
        assert_eq!(r.header("surrogate-key"), None);
        text
    };
    for coding in ["identity", "gzip", "zstd"] {
        for name in ["1", "2"] {
            assert_eq!(
                page(&format!("/page/{name}"), coding),
                format!("<p>{name}[a v1]|[b v1]</p>")
            );
        }
    }
    origin.bump("/frag/a");
    assert_eq!(page("/page/1", "identity"), "<p>1[a v1]|[b v1]</p>");
    assert_eq!(purge(&server, "/", "Surrogate-Key: frag-a\r\n"), 200);
    for coding in ["identity", "gzip", "zstd"] {
        for name in ["1", "2"] {
            assert_eq!(
                page(&format!("/page/{name}"), coding),
                format!("<p>{name}[a v2]|[b v1]</p>"),
                "{coding}"
            );
        }
    }
    assert_eq!(origin.seen("/frag/a").0, 2);
    assert_eq!(origin.seen("/frag/b").0, 1);
    assert_eq!(origin.seen("/page/1").0, 1, "the template stays cached");
    // A page's own key removes the template, not its fragments.
    assert_eq!(purge(&server, "/", "Surrogate-Key: page-1\r\n"), 200);
    assert_eq!(page("/page/1", "identity"), "<p>1[a v2]|[b v1]</p>");
    assert_eq!(origin.seen("/page/1").0, 2);
    assert_eq!(origin.seen("/frag/a").0, 2);
}

/// A soft purge (of a URL, or of a key) marks the object stale instead of removing it:
/// the next request is served the stale object at once (`fwd=stale`) while one
/// background request revalidates it (a 304 keeps it) or fetches the new version.
#[test]
fn soft_purge_serves_stale_once_while_revalidating() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, "");
    let get = |path: &str| {
        let r = get_with(&server, path, "");
        (r.header("cache-status").unwrap_or("").to_string(), body(&r))
    };
    let wait_for = |path: &str, want: (usize, usize)| {
        let started = Instant::now();
        while origin.seen(path) != want && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(origin.seen(path), want, "{path}");
    };
    let hit_with = |path: &str, want: &str| {
        let started = Instant::now();
        loop {
            let (cs, text) = get(path);
            if cs.starts_with("tessera; hit;") {
                assert_eq!(text, want);
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "{cs}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(get("/grace/u").1, "grace u v1");
    assert_eq!(purge(&server, "/grace/u", "Fastly-Soft-Purge: 1\r\n"), 200);
    let (cs, text) = get("/grace/u");
    assert!(cs.starts_with("tessera; fwd=stale;"), "{cs}");
    assert_eq!(text, "grace u v1");
    // One conditional request, answered 304: the object is fresh again.
    wait_for("/grace/u", (2, 1));
    hit_with("/grace/u", "grace u v1");
    assert_eq!(origin.seen("/grace/u"), (2, 1));

    // By key, with a new version: stale once, then the new one.
    assert_eq!(get("/grace/k").1, "grace k v1");
    origin.bump("/grace/k");
    assert_eq!(
        purge(
            &server,
            "/",
            "Surrogate-Key: grace-k\r\nFastly-Soft-Purge: 1\r\n"
        ),
        200
    );
    let (cs, text) = get("/grace/k");
    assert!(cs.starts_with("tessera; fwd=stale;"), "{cs}");
    assert_eq!(text, "grace k v1");
    wait_for("/grace/k", (2, 1));
    hit_with("/grace/k", "grace k v2");
    // A soft purge of nothing cached: 404.
    assert_eq!(
        purge(&server, "/grace/none", "Fastly-Soft-Purge: 1\r\n"),
        404
    );
}

/// `BAN /` with `X-Ban-Url` (and `X-Ban-Host`) bans every object whose URL (and host)
/// the expressions match, and nothing else: the lurker removes them in the background
/// (no request for them needed), and a request right after the ban does not get a
/// banned object. An expression that does not compile is a 400 naming its field.
#[test]
fn bans_by_regular_expression_on_url_and_host() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, "");
    let get_at = |host: &str, path: &str| {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        body(&request(&server, &raw))
    };
    let ban = |fields: &str| {
        let raw = format!(
            "BAN / HTTP/1.1\r\nHost: test\r\nX-Purge-Token: s3cret\r\n{fields}Connection: close\r\n\r\n"
        );
        request(&server, &raw)
    };
    let banned = || {
        let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
        samples(&text)["tessera_cache_evictions_total{reason=\"ban\"}"]
    };
    let paths = ["/doc/1", "/doc/2", "/doc/30", "/tag/1"];
    for path in paths {
        get_at("test", path);
    }
    get_at("other", "/doc/1");
    assert_eq!(origin.seen("/doc/1").0, 2);
    let r = ban("X-Ban-Url: ^/doc/[0-9]$\r\nX-Ban-Host: ^test$\r\n");
    // Applied lazily: no count yet, Varnish's words.
    assert_eq!(
        (r.status, r.header("purged"), body(&r).as_str()),
        (200, None, "Ban added\n")
    );
    // The lurker removes the two objects without anyone asking for them.
    eventually("the lurker's pass", || banned() == 2.0);
    for path in paths {
        get_at("test", path);
    }
    get_at("other", "/doc/1");
    let seen: Vec<usize> = paths.iter().map(|p| origin.seen(p).0).collect();
    // /doc/1 twice (test, banned) plus other's once; /doc/30 and /tag/1 kept.
    assert_eq!(seen, [3, 2, 1, 1]);
    // Asked for right after its ban: not served.
    assert_eq!(get_at("test", "/doc/5"), "doc 5 v1");
    origin.bump("/doc/5");
    assert_eq!(ban("X-Ban-Url: ^/doc/5\r\n").status, 200);
    assert_eq!(get_at("test", "/doc/5"), "doc 5 v2");
    // The host alone.
    assert_eq!(ban("X-Ban-Host: ^oth\r\n").status, 200);
    get_at("other", "/doc/1");
    assert_eq!(origin.seen("/doc/1").0, 4);
    // What matched is known later: a ban is a 200 whatever it matches.
    assert_eq!(ban("X-Ban-Url: ^/nothing\r\n").status, 200);
    eventually("every ban applied", || banned() == 4.0);
    let r = ban("X-Ban-Url: (unclosed\r\n");
    assert_eq!(r.status, 400);
    assert!(body(&r).starts_with("X-Ban-Url: "), "{}", body(&r));
    let refused = request(
        &server,
        "BAN / HTTP/1.1\r\nHost: test\r\nX-Ban-Url: .\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(refused.status, 403);
    assert_eq!(get_at("test", "/tag/1"), "tag 1 v1");
    assert_eq!(origin.seen("/tag/1").0, 1);
}

/// With Redis shared by two processes, a purge by key (or a ban by expression) in one
/// makes it refuse the Redis records made before it that it names (Redis is not scanned
/// for them): it asks the origin, and then shares the new object.
#[test]
fn a_key_purge_or_ban_refuses_older_redis_records() {
    let redis = Redis::start();
    let origin = Origin::start();
    let tables = format!("[cache.redis]\nurl = \"{}\"\ntimeout = 5\n", redis.url());
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve_with_tables(&site_a, &origin, "", &tables);
    let b = serve_with_tables(&site_b, &origin, "", &tables);
    assert_eq!(body(&get_with(&a, "/doc/r", "")), "doc r v1");
    eventually("the Redis record", || {
        redis.command(&["EXISTS", "tessera:test/doc/r"]).as_deref() == Some(":1")
    });
    assert_eq!(body(&get_with(&b, "/doc/r", "")), "doc r v1");
    assert_eq!(origin.seen("/doc/r").0, 1, "the second process read Redis");
    origin.bump("/doc/r");
    assert_eq!(purge(&b, "/", "xkey: doc-r\r\n"), 200);
    assert_eq!(body(&get_with(&b, "/doc/r", "")), "doc r v2");
    assert_eq!(origin.seen("/doc/r").0, 2);
    // A ban by expression: the same.
    assert_eq!(body(&get_with(&a, "/tag/r", "")), "tag r v1");
    eventually("the Redis record", || {
        redis.command(&["EXISTS", "tessera:test/tag/r"]).as_deref() == Some(":1")
    });
    assert_eq!(body(&get_with(&b, "/tag/r", "")), "tag r v1");
    origin.bump("/tag/r");
    let raw = "BAN / HTTP/1.1\r\nHost: test\r\nX-Purge-Token: s3cret\r\nX-Ban-Url: ^/tag/\r\n\
               Connection: close\r\n\r\n";
    assert_eq!(request(&b, raw).status, 200);
    assert_eq!(body(&get_with(&b, "/tag/r", "")), "tag r v2");
    assert_eq!(origin.seen("/tag/r").0, 2);
}
