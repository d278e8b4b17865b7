//! Revalidation with the origin (docs/cache.md, "Revalidation"): an expired object with
//! validators is asked for with a conditional request, and the origin's 304 refreshes
//! it without the body being sent again. Through the binary and an origin started here
//! that answers conditionals and counts what it sends.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::Redis;
use crate::cache_policy::{body, get_with};
use crate::harness::{check_config_output, eventually, read_request_head, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// What the origin saw and sent for one path.
#[derive(Default, Clone, Debug)]
struct Seen {
    requests: usize,
    /// Requests with If-None-Match or If-Modified-Since.
    conditionals: usize,
    /// 304s sent.
    not_modified: usize,
    /// Body bytes sent.
    body_bytes: usize,
    /// The conditional fields of the last conditional request.
    last_conditionals: Vec<String>,
}

/// An origin whose documents have a version per path (1 until [`Origin::bump`]):
/// `doc vN`, `Cache-Control: max-age=1`, `ETag: "vN"` and a Last-Modified (only the
/// Last-Modified for a path with `/lm`). A conditional request matching the current
/// version gets a 304 with `Cache-Control: max-age=60` and `X-Refreshed: N` (the count of
/// 304s for the path). A path with `/slow` answers after 300 ms; one with `/down`
/// answers a conditional request with 503. `/page/X` is an ESI page
/// (`Surrogate-Control: max-age=60`) including `/frag/X`.
#[derive(Clone)]
struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    versions: Arc<Mutex<HashMap<String, u32>>>,
}

const LAST_MODIFIED: &str = "Tue, 02 Jan 2024 03:04:05 GMT";

impl Origin {
    fn start() -> Origin {
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

    fn seen(&self, path: &str) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// A new version of `path`: its ETag and body change.
    fn bump(&self, path: &str) {
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
            if path.contains("/slow") {
                std::thread::sleep(Duration::from_millis(300));
            }
            if let Some(name) = path.strip_prefix("/page/") {
                let body = format!("<p><esi:include src=\"/frag/{name}\"/></p>");
                let response = format!(
                    "HTTP/1.1 200 OK\r\nSurrogate-Control: max-age=60, content=\"ESI/1.0\"\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if writer.write_all(response.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
            let version = *self.versions.lock().unwrap().get(&path).unwrap_or(&1);
            let etag = format!("\"v{version}\"");
            let only_dates = path.contains("/lm");
            let value = |name: &str| {
                fields.iter().find_map(|f| {
                    let (n, v) = f.split_once(':')?;
                    n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            let (inm, ims) = (value("if-none-match"), value("if-modified-since"));
            let matches = if only_dates {
                ims.as_deref() == Some(LAST_MODIFIED) && version == 1
            } else {
                inm.as_deref() == Some(etag.as_str())
            };
            let response = {
                let mut seen = self.seen.lock().unwrap();
                let seen = seen.entry(path.clone()).or_default();
                seen.requests += 1;
                if inm.is_some() || ims.is_some() {
                    seen.conditionals += 1;
                    seen.last_conditionals = fields
                        .iter()
                        .filter(|f| f.to_ascii_lowercase().starts_with("if-"))
                        .cloned()
                        .collect();
                }
                let validators = if only_dates {
                    format!("Last-Modified: {LAST_MODIFIED}\r\n")
                } else {
                    format!("ETag: {etag}\r\nLast-Modified: {LAST_MODIFIED}\r\n")
                };
                if path.contains("/down") && (inm.is_some() || ims.is_some()) {
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".to_string()
                } else if matches {
                    seen.not_modified += 1;
                    format!(
                        "HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60\r\n{validators}\
                         X-Refreshed: {}\r\n\r\n",
                        seen.not_modified
                    )
                } else {
                    let body = format!("doc v{version}");
                    seen.body_bytes += body.len();
                    format!(
                        "HTTP/1.1 200 OK\r\nCache-Control: max-age=1\r\n{validators}\
                         Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                }
            };
            if writer.write_all(response.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// `tessera serve` with `extra` (top-level keys, then tables) and `routes` to `origin`.
fn serve(site: &Site, origin: &Origin, routes: &str, extra: &str) -> Server {
    site.serve_with(&format!(
        "{extra}\n[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\n{routes}\n",
        origin.addr
    ))
}

fn cache_status(server: &Server, path: &str, fields: &str) -> (u16, String, String) {
    let r = get_with(server, path, fields);
    let status = r.header("cache-status").unwrap_or("(none)").to_string();
    (r.status, status, body(&r))
}

/// Past its second of life (and `keep` long after), the object is revalidated: the
/// origin gets one conditional request with the stored ETag and Last-Modified, answers
/// 304, sends no body, and the client gets the stored body with the 304's fields; the
/// refreshed object is fresh for the 304's max-age. The access log says `revalidated`.
/// A client's own conditional gets its 304 from the refreshed object. Without `keep`,
/// an expired object is gone and fetched whole.
#[test]
fn an_expired_object_is_revalidated_and_a_304_refreshes_it() {
    let site = Site::new();
    let origin = Origin::start();
    let log = site.dir.path().join("access.log");
    let routes = "[[route]]\nprefix = \"/nokeep\"\nupstream = \"origin\"\n\n\
        [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\nkeep = \"1h\"\n";
    let extra = format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         access_log = {:?}\naccess_log_format = \"%U %s %{{cache}}x %{{upstream_status}}x\"\n\
         [cache]\ncache_status = true\n",
        log.display().to_string()
    );
    let server = serve(&site, &origin, routes, &extra);
    let (status, cs, text) = cache_status(&server, "/doc", "");
    assert_eq!(
        (status, cs.as_str(), text.as_str()),
        (200, "tessera; fwd=miss; stored", "doc v1")
    );
    std::thread::sleep(Duration::from_millis(1200));
    let r = get_with(&server, "/doc", "");
    assert_eq!((r.status, body(&r).as_str()), (200, "doc v1"));
    let cs = r.header("cache-status").unwrap();
    let ttl: u64 = cs
        .strip_prefix("tessera; fwd=stale; fwd-status=304; ttl=")
        .unwrap_or_else(|| panic!("{cs}"))
        .parse()
        .unwrap();
    assert!((55..=60).contains(&ttl), "{cs}");
    assert_eq!(
        r.header("x-refreshed"),
        Some("1"),
        "the 304's fields are stored"
    );
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(r.header("content-length"), Some("6"));
    let seen = origin.seen("/doc");
    assert_eq!(
        (
            seen.requests,
            seen.conditionals,
            seen.not_modified,
            seen.body_bytes
        ),
        (2, 1, 1, 6),
        "{seen:?}"
    );
    let mut sent = seen.last_conditionals.clone();
    sent.sort();
    assert_eq!(
        sent,
        [
            "if-modified-since: Tue, 02 Jan 2024 03:04:05 GMT".to_string(),
            "if-none-match: \"v1\"".to_string()
        ],
        "{seen:?}"
    );
    // Fresh again: a hit, and a client's conditional answered from it.
    let (_, cs, text) = cache_status(&server, "/doc", "");
    assert!(cs.starts_with("tessera; hit; ttl="), "{cs}");
    assert_eq!(text, "doc v1");
    let r = get_with(&server, "/doc", "If-None-Match: \"v1\"\r\n");
    assert_eq!(r.status, 304);
    assert_eq!(origin.seen("/doc").requests, 2);

    // Last-Modified alone: If-Modified-Since; the client's own conditional, on an
    // expired object, gets its 304 from the refreshed one.
    assert_eq!(body(&get_with(&server, "/lm", "")), "doc v1");
    std::thread::sleep(Duration::from_millis(1200));
    let r = get_with(
        &server,
        "/lm",
        &format!("If-Modified-Since: {LAST_MODIFIED}\r\n"),
    );
    assert_eq!(r.status, 304);
    assert!(r
        .header("cache-status")
        .unwrap()
        .starts_with("tessera; fwd=stale; fwd-status=304; ttl="));
    let seen = origin.seen("/lm");
    assert_eq!(
        (seen.conditionals, seen.not_modified, seen.body_bytes),
        (1, 1, 6)
    );
    assert_eq!(
        seen.last_conditionals,
        [format!("if-modified-since: {LAST_MODIFIED}")]
    );

    // A new version: the conditional gets a 200, which replaces the object.
    assert_eq!(body(&get_with(&server, "/new", "")), "doc v1");
    origin.bump("/new");
    std::thread::sleep(Duration::from_millis(1200));
    let (_, cs, text) = cache_status(&server, "/new", "");
    assert_eq!(
        (cs.as_str(), text.as_str()),
        ("tessera; fwd=miss; stored", "doc v2")
    );
    assert_eq!(origin.seen("/new").conditionals, 1);
    assert_eq!(body(&get_with(&server, "/new", "")), "doc v2");
    assert_eq!(origin.seen("/new").requests, 2);

    // No `keep`: the expired object is gone, and fetched whole.
    assert_eq!(body(&get_with(&server, "/nokeep/doc", "")), "doc v1");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(body(&get_with(&server, "/nokeep/doc", "")), "doc v1");
    let seen = origin.seen("/nokeep/doc");
    assert_eq!((seen.requests, seen.conditionals), (2, 0), "{seen:?}");

    let lines = wait_for_lines(&log, 11);
    assert_eq!(
        lines[..4],
        [
            "/doc 200 miss 200",
            "/doc 200 revalidated 304",
            "/doc 200 hit -",
            "/doc 304 hit -"
        ],
        "{lines:?}"
    );
    assert_eq!(lines[5], "/lm 304 revalidated 304", "{lines:?}");
    // Two 304s refreshed an object (the 200 that replaced one is a store).
    let (status, text) = admin_get(admin_addr(&server), "/metrics", "");
    assert_eq!(status, 200);
    assert_eq!(
        samples(&text)["tessera_cache_revalidations_total"],
        2.0,
        "{text}"
    );
}

/// Within grace (stale-while-revalidate), the stale object is served at once and the
/// background refresh is itself a conditional request: the origin's 304 refreshes the
/// object, and sends no body.
#[test]
fn the_background_refresh_within_grace_revalidates() {
    let site = Site::new();
    let origin = Origin::start();
    let routes =
        "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\ngrace = \"1h\"\n";
    let server = serve(&site, &origin, routes, "[cache]\ncache_status = true\n");
    assert_eq!(body(&get_with(&server, "/doc", "")), "doc v1");
    std::thread::sleep(Duration::from_millis(1200));
    let (_, cs, text) = cache_status(&server, "/doc", "");
    assert!(cs.starts_with("tessera; fwd=stale; ttl=-"), "{cs}");
    assert_eq!(text, "doc v1");
    // The refresh runs in the background: wait for the origin's 304.
    let started = Instant::now();
    while origin.seen("/doc").not_modified == 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = origin.seen("/doc");
    assert_eq!(
        (
            seen.requests,
            seen.conditionals,
            seen.not_modified,
            seen.body_bytes
        ),
        (2, 1, 1, 6),
        "{seen:?}"
    );
    // Refreshed with the 304's lifetime: a hit.
    let started = Instant::now();
    loop {
        let r = get_with(&server, "/doc", "");
        let cs = r.header("cache-status").unwrap().to_string();
        if cs.starts_with("tessera; hit; ttl=") {
            assert_eq!(r.header("x-refreshed"), Some("1"));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{cs}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(origin.seen("/doc").requests, 2);
}

/// An ESI fragment served stale within stale-while-revalidate is refreshed in the
/// background with a conditional request too: the page shows the stored fragment, and
/// the origin sends its body once.
#[test]
fn a_fragments_background_refresh_revalidates() {
    let site = Site::new();
    let origin = Origin::start();
    let routes = "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n";
    let server = serve(
        &site,
        &origin,
        routes,
        "[cache]\nstale_while_revalidate = 60\n",
    );
    assert_eq!(body(&get_with(&server, "/page/p", "")), "<p>doc v1</p>");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(body(&get_with(&server, "/page/p", "")), "<p>doc v1</p>");
    let started = Instant::now();
    while origin.seen("/frag/p").not_modified == 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = origin.seen("/frag/p");
    assert_eq!(
        (
            seen.requests,
            seen.conditionals,
            seen.not_modified,
            seen.body_bytes
        ),
        (2, 1, 1, 6),
        "{seen:?}"
    );
    assert_eq!(body(&get_with(&server, "/page/p", "")), "<p>doc v1</p>");
    assert_eq!(origin.seen("/frag/p").requests, 2);
}

/// A revalidation the origin fails (503) serves the stale object when stale-if-error
/// allows, as a plain fetch would.
#[test]
fn a_failed_revalidation_serves_stale_within_stale_if_error() {
    let site = Site::new();
    let origin = Origin::start();
    let routes = "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n";
    let server = serve(
        &site,
        &origin,
        routes,
        "[cache]\ncache_status = true\nstale_if_error = 60\n",
    );
    assert_eq!(body(&get_with(&server, "/down/doc", "")), "doc v1");
    std::thread::sleep(Duration::from_millis(1200));
    let (status, cs, text) = cache_status(&server, "/down/doc", "");
    assert_eq!((status, text.as_str()), (200, "doc v1"));
    assert!(cs.starts_with("tessera; fwd=stale; ttl=-"), "{cs}");
    let seen = origin.seen("/down/doc");
    assert_eq!((seen.requests, seen.conditionals), (2, 1), "{seen:?}");
}

/// Concurrent requests for one expired object make one conditional request: one
/// request revalidates, the others wait for it and get the refreshed object.
#[test]
fn concurrent_requests_for_an_expired_object_make_one_revalidation() {
    let site = Site::new();
    let origin = Origin::start();
    let routes = "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\nkeep = \"1h\"\n";
    let server = Arc::new(serve(
        &site,
        &origin,
        routes,
        "[cache]\ncache_status = true\n",
    ));
    assert_eq!(body(&get_with(&server, "/slow/doc", "")), "doc v1");
    std::thread::sleep(Duration::from_millis(1200));
    let all: Vec<(String, String)> = (0..4)
        .map(|_| {
            let server = server.clone();
            std::thread::spawn(move || {
                let r = get_with(&server, "/slow/doc", "");
                (
                    r.header("cache-status").unwrap_or("(none)").to_string(),
                    body(&r),
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let revalidated = all
        .iter()
        .filter(|(cs, _)| cs.starts_with("tessera; fwd=stale; fwd-status=304;"))
        .count();
    let collapsed = all
        .iter()
        .filter(|(cs, _)| cs == "tessera; fwd=miss; collapsed")
        .count();
    assert_eq!((revalidated, collapsed), (1, 3), "{all:?}");
    assert!(all.iter().all(|(_, b)| b == "doc v1"), "{all:?}");
    let seen = origin.seen("/slow/doc");
    assert_eq!(
        (seen.requests, seen.conditionals, seen.body_bytes),
        (2, 1, 6),
        "{seen:?}"
    );
}

/// An expired object within `keep` that another process stored in the shared Redis tier
/// is revalidated from its record: one conditional request, no body sent again.
#[test]
fn an_expired_redis_record_within_keep_is_revalidated() {
    let redis = Redis::start();
    let origin = Origin::start();
    let routes = "[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\nkeep = \"1h\"\n";
    let tables = format!(
        "[cache]\ncache_status = true\n[cache.redis]\nurl = \"{}\"\ntimeout = 5\n",
        redis.url()
    );
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, routes, &tables);
    let b = serve(&site_b, &origin, routes, &tables);
    assert_eq!(body(&get_with(&a, "/shared", "")), "doc v1");
    eventually("the Redis record", || {
        redis.command(&["EXISTS", "tessera:test/shared"]).as_deref() == Some(":1")
    });
    std::thread::sleep(Duration::from_millis(1200));
    let (_, cs, text) = cache_status(&b, "/shared", "");
    assert_eq!(text, "doc v1");
    assert!(
        cs.starts_with("tessera; fwd=stale; fwd-status=304;"),
        "{cs}"
    );
    let seen = origin.seen("/shared");
    assert_eq!(
        (seen.requests, seen.conditionals, seen.body_bytes),
        (2, 1, 6),
        "{seen:?}"
    );
}

#[test]
fn check_config_names_a_bad_keep() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[upstream]]\nname = \"origin\"\naddresses = [\"127.0.0.1:1\"]\n\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n[route.cache]\nkeep = \"forever\"\n",
    )
    .unwrap();
    let (code, stderr) = check_config_output(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("route[0].cache.keep"), "{stderr}");
    assert!(stderr.contains("\"forever\" is not a duration"), "{stderr}");
}

/// Waits until `path` has at least `lines` lines (the writer flushes within a second).
fn wait_for_lines(path: &std::path::Path, lines: usize) -> Vec<String> {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let found: Vec<String> = text.lines().map(str::to_string).collect();
        if found.len() >= lines || started.elapsed() > Duration::from_secs(10) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
