//! The proxy's cache (docs/cache.md): freshness, Vary, coalescing, stale serving,
//! PURGE/BAN, and the Redis tier with a real redis-server.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{eventually, read_request_head, read_response, Response, Server, Site};

/// An origin that counts requests per path and can be told to fail (503 for all).
///
/// - `/frag/X`: `[X]`, `Cache-Control: max-age=60`
/// - `/slow/X`: `slow X` after 500 ms, `max-age=60`
/// - `/page/X`: ESI page including `/frag/a` and `/frag/b`, Surrogate-Control max-age=60
/// - `/cond`: 304 to a conditional or range request, else `full`, `max-age=60`
/// - `/slow-fail`: 503 after 1 s
/// - `/swr`: `vN` (N = the count), `max-age=1, stale-while-revalidate=60`
/// - `/swr-page`: ESI page including `/swr`, Surrogate-Control max-age=60
/// - `/sie-page`: ESI page including `/sie-frag`, Surrogate-Control `max-age=1+60`
/// - `/sie-frag`: `fragment vN`, `max-age=1, stale-if-error=60`
/// - `/vary`: the Accept-Language, `Vary: Accept-Language`, `max-age=60`
/// - `/private`: `max-age=60, private`
/// - `/cookie`: `max-age=60` with Set-Cookie
/// - `/unique/X`: `max-age=60`, 2 KiB
/// - `/many`: ESI page of 600 includes `/frag/mN`, comma-separated
/// - `/big`: 6 MB of numbered lines, `max-age=60`
/// - `/slow-private`: `private` after 300 ms
/// - `/becomes`: `private` the first time, `max-age=60` after
#[derive(Clone)]
pub struct Origin {
    pub addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    failing: Arc<AtomicBool>,
}

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = Origin {
            addr: listener.local_addr().unwrap(),
            hits: Arc::default(),
            failing: Arc::default(),
        };
        let o = origin.clone();
        crate::harness::thread_per_connection(listener, move |stream| o.serve(stream));
        origin
    }

    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn serve(&self, stream: TcpStream) {
        stream.set_nodelay(true).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        loop {
            let Some((path, fields)) = read_request_head(&mut reader) else {
                return;
            };
            let mut language = String::new();
            let mut conditional = false;
            for field in fields {
                let field = field.to_ascii_lowercase();
                if let Some(v) = field.strip_prefix("accept-language:") {
                    language = v.trim().to_string();
                }
                conditional |= [
                    "if-none-match:",
                    "if-modified-since:",
                    "if-range:",
                    "range:",
                ]
                .iter()
                .any(|p| field.starts_with(p));
            }
            let n = {
                let mut hits = self.hits.lock().unwrap();
                let n = hits.entry(path.clone()).or_insert(0);
                *n += 1;
                *n
            };
            let esi = "Surrogate-Control: max-age=60, content=\"ESI/1.0\"\r\n";
            let (status, extra, body): (&str, String, String) =
                if self.failing.load(Ordering::SeqCst) {
                    ("503 Service Unavailable", String::new(), "down".into())
                } else if let Some(x) = path.strip_prefix("/frag/") {
                    (
                        "200 OK",
                        "Cache-Control: max-age=60\r\n".into(),
                        format!("[{x}]"),
                    )
                } else if let Some(x) = path.strip_prefix("/slow/") {
                    std::thread::sleep(Duration::from_millis(500));
                    (
                        "200 OK",
                        "Cache-Control: max-age=60\r\n".into(),
                        format!("slow {x}"),
                    )
                } else if let Some(x) = path.strip_prefix("/page/") {
                    let body = format!(
                        "<p>{x}<esi:include src=\"/frag/a\"/><esi:include src=\"/frag/b\"/></p>"
                    );
                    ("200 OK", esi.into(), body)
                } else if path.starts_with("/cond") && conditional {
                    ("304 Not Modified", String::new(), String::new())
                } else if path.starts_with("/cond") {
                    let h = "Cache-Control: max-age=60\r\nETag: \"e1\"\r\n";
                    ("200 OK", h.into(), "full".into())
                } else if path == "/slow-fail" {
                    std::thread::sleep(Duration::from_millis(1000));
                    ("503 Service Unavailable", String::new(), "down".into())
                } else if path == "/swr" {
                    if n > 1 {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    let cc = "Cache-Control: max-age=1, stale-while-revalidate=60\r\n";
                    ("200 OK", cc.into(), format!("v{n}"))
                } else if path == "/swr-page" {
                    let sc = "Surrogate-Control: max-age=60, content=\"ESI/1.0\"\r\n";
                    (
                        "200 OK",
                        sc.into(),
                        "<p><esi:include src=\"/swr\"/></p>".into(),
                    )
                } else if path == "/sie-page" {
                    let sc = "Surrogate-Control: max-age=1+60, content=\"ESI/1.0\"\r\n";
                    (
                        "200 OK",
                        sc.into(),
                        "<p><esi:include src=\"/sie-frag\"/></p>".into(),
                    )
                } else if path == "/sie-frag" {
                    let cc = "Cache-Control: max-age=1, stale-if-error=60\r\n";
                    ("200 OK", cc.into(), format!("fragment v{n}"))
                } else if path == "/slow-vary" {
                    std::thread::sleep(Duration::from_millis(300));
                    let h = "Cache-Control: max-age=60\r\nVary: Accept-Language\r\n";
                    ("200 OK", h.into(), format!("lang {language}"))
                } else if path == "/vary" {
                    let h = "Cache-Control: max-age=60\r\nVary: Accept-Language\r\n";
                    ("200 OK", h.into(), format!("lang {language}"))
                } else if path == "/private" {
                    (
                        "200 OK",
                        "Cache-Control: max-age=60, private\r\n".into(),
                        "mine".into(),
                    )
                } else if path == "/slow-private" {
                    std::thread::sleep(Duration::from_millis(300));
                    let h = "Cache-Control: max-age=60, private\r\n";
                    ("200 OK", h.into(), "mine, slowly".into())
                } else if path == "/becomes" {
                    let cc = if n == 1 { "private" } else { "max-age=60" };
                    let h = format!("Cache-Control: {cc}\r\n");
                    ("200 OK", h, format!("v{n}"))
                } else if path == "/cookie" {
                    let h = "Cache-Control: max-age=60\r\nSet-Cookie: id=1\r\n";
                    ("200 OK", h.into(), "with cookie".into())
                } else if path == "/many" {
                    let includes: Vec<String> = (0..600)
                        .map(|i| format!("<esi:include src=\"/frag/m{i}\"/>"))
                        .collect();
                    ("200 OK", esi.into(), includes.join(","))
                } else if path == "/big" {
                    let body: String = (0..750_000)
                        .map(|i| format!("{:07}\n", i % 10_000_000))
                        .collect();
                    ("200 OK", "Cache-Control: max-age=60\r\n".into(), body)
                } else if path.starts_with("/unique/") {
                    (
                        "200 OK",
                        "Cache-Control: max-age=60\r\n".into(),
                        "u".repeat(2048),
                    )
                } else {
                    ("404 Not Found", String::new(), "no such page".into())
                };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/html\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if writer.write_all(response.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// `tessera serve` with `workers` workers, proxying everything to `origin`, with the
/// extra TOML `cache` (keys of `[cache]` and below).
fn serve(site: &Site, origin: &Origin, workers: usize, cache: &str) -> Server {
    let config = site
        .dir
        .path()
        .join(format!("cache-{}.toml", origin.addr.port()));
    let toml = format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\n[[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\n{cache}\n",
        origin.addr
    );
    std::fs::write(&config, toml).unwrap();
    let args: Vec<String> = [
        "serve",
        "--root",
        site.root().to_str().unwrap(),
        "--workers",
        &workers.to_string(),
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Server::start_args(&args)
}

fn request(server: &Server, raw: &str) -> Response {
    let mut stream = server.connect();
    stream.write_all(raw.as_bytes()).unwrap();
    read_response(&mut stream, raw.starts_with("HEAD"))
}

fn get(server: &Server, path: &str) -> Response {
    request(
        server,
        &format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
    )
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[test]
fn fresh_objects_are_served_from_memory_with_age() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    let first = get(&server, "/frag/x");
    assert_eq!((first.status, body(&first).as_str()), (200, "[x]"));
    let second = get(&server, "/frag/x");
    assert_eq!(body(&second), "[x]");
    assert!(second.header("age").is_some(), "{second:?}");
    assert_eq!(second.header("content-length"), Some("3"));
    assert_eq!(origin.hits("/frag/x"), 1);
    // HEAD is answered from the GET's object.
    let head = request(
        &server,
        "HEAD /frag/x HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(head.status, 200);
    assert_eq!(origin.hits("/frag/x"), 1);
    // Not stored: private, Set-Cookie, and anything but GET/HEAD.
    for path in ["/private", "/cookie"] {
        get(&server, path);
        get(&server, path);
        assert_eq!(origin.hits(path), 2, "{path}");
    }
    let post =
        "POST /frag/x HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    assert_eq!(request(&server, post).status, 200);
    assert_eq!(origin.hits("/frag/x"), 2);
}

#[test]
fn large_cached_body_is_written_whole_across_partial_writes() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    let first = get(&server, "/big");
    assert_eq!(first.body.len(), 6_000_000);
    // From the cache: one vectored write that the socket takes in many parts, read
    // slowly so that it does.
    let mut stream = server.connect();
    stream
        .write_all(b"GET /big HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let second = read_response(&mut stream, false);
    assert_eq!(origin.hits("/big"), 1);
    assert_eq!(second.header("content-length"), Some("6000000"));
    assert!(second.body == first.body, "cached body differs");
}

#[test]
fn cached_page_of_more_buffers_than_one_writev_takes_arrives_whole() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "[esi]\nmax_includes = 1000\n");
    let want: Vec<String> = (0..600).map(|i| format!("[m{i}]")).collect();
    let want = want.join(",");
    assert_eq!(body(&get(&server, "/many")), want);
    // All 600 fragments cached: 1,199 buffers in one response, over IOV_MAX.
    let r = get(&server, "/many");
    assert_eq!(
        r.header("content-length"),
        Some(want.len().to_string().as_str())
    );
    assert_eq!(body(&r), want);
    assert_eq!(origin.hits("/many"), 1);
}

#[test]
fn vary_keeps_one_object_per_language() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    let lang = |l: &str| {
        let raw = format!(
            "GET /vary HTTP/1.1\r\nHost: test\r\nAccept-Language: {l}\r\nConnection: close\r\n\r\n"
        );
        body(&request(&server, &raw))
    };
    assert_eq!(lang("en"), "lang en");
    assert_eq!(lang("fr"), "lang fr");
    assert_eq!(lang("en"), "lang en");
    assert_eq!(lang("fr"), "lang fr");
    assert_eq!(origin.hits("/vary"), 2);
}

#[test]
fn concurrent_misses_for_different_variants_each_get_their_own() {
    let site = Site::new();
    let origin = Origin::start();
    let server = Arc::new(serve(&site, &origin, 1, ""));
    let barrier = Arc::new(Barrier::new(20));
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let (server, barrier) = (server.clone(), barrier.clone());
            let language = ["en", "fr"][i % 2];
            std::thread::spawn(move || {
                let mut stream = server.connect();
                barrier.wait();
                let raw = format!(
                    "GET /slow-vary HTTP/1.1\r\nHost: test\r\nAccept-Language: {language}\r\nConnection: close\r\n\r\n"
                );
                stream.write_all(raw.as_bytes()).unwrap();
                (language, read_response(&mut stream, false))
            })
        })
        .collect();
    for c in clients {
        let (language, r) = c.join().unwrap();
        assert_eq!(body(&r), format!("lang {language}"));
    }
    // The waiters of the other language fetched their own, but not one each.
    let hits = origin.hits("/slow-vary");
    assert!((2..=11).contains(&hits), "{hits} origin requests");
}

#[test]
fn cached_esi_page_is_assembled_from_cached_fragments() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(
        &site,
        &origin,
        1,
        "[cache]\npurge_allow = [\"127.0.0.1\"]\n",
    );
    for _ in 0..3 {
        let r = get(&server, "/page/1");
        assert_eq!(body(&r), "<p>1[a][b]</p>");
        assert_eq!(r.header("surrogate-control"), None);
    }
    let r = get(&server, "/page/1");
    // Whole from memory: a known length, not chunked.
    assert_eq!(r.header("content-length"), Some("14"), "{r:?}");
    assert_eq!(origin.hits("/page/1"), 1);
    assert_eq!(origin.hits("/frag/a"), 1);
    assert_eq!(origin.hits("/frag/b"), 1);
    // A purged fragment is fetched again for the next page (no stale assembly kept).
    let purge = "PURGE /frag/a HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    assert_eq!(request(&server, purge).status, 200);
    assert_eq!(body(&get(&server, "/page/1")), "<p>1[a][b]</p>");
    assert_eq!(origin.hits("/frag/a"), 2);
    assert_eq!(origin.hits("/page/1"), 1);
}

/// `n` GETs of `path`, each on a connection of its own, sent at once.
fn concurrent_gets(server: &Arc<Server>, path: &str, n: usize) -> Vec<Response> {
    let barrier = Arc::new(Barrier::new(n));
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let (server, barrier, request) = (server.clone(), barrier.clone(), request.clone());
            std::thread::spawn(move || {
                let mut stream = server.connect();
                barrier.wait();
                stream.write_all(request.as_bytes()).unwrap();
                read_response(&mut stream, false)
            })
        })
        .collect();
    clients.into_iter().map(|c| c.join().unwrap()).collect()
}

#[test]
fn hundred_concurrent_misses_make_one_origin_request() {
    let site = Site::new();
    let origin = Origin::start();
    // Two workers: the misses land on both, and still make one request.
    let server = Arc::new(serve(&site, &origin, 2, ""));
    for r in concurrent_gets(&server, "/slow/c", 100) {
        assert_eq!((r.status, body(&r).as_str()), (200, "slow c"));
    }
    assert_eq!(origin.hits("/slow/c"), 1);
}

/// The shutdown line of the cache's counters (`tessera: cache: ...`), after SIGTERM.
fn counters_at_shutdown(server: &Server) -> String {
    server.signal(libc::SIGTERM);
    let mut line = String::new();
    eventually("the cache counters at shutdown", || {
        let lines = server.stderr.lock().unwrap();
        match lines.iter().find(|l| l.starts_with("tessera: cache: ")) {
            Some(l) => {
                line = l.clone();
                true
            }
            None => false,
        }
    });
    line
}

#[test]
fn a_key_whose_response_was_not_stored_skips_the_waiting_list() {
    let site = Site::new();
    let origin = Origin::start();
    let server = Arc::new(serve(
        &site,
        &origin,
        1,
        "[cache]\npurge_allow = [\"127.0.0.1\"]\n",
    ));
    // The first response cannot be stored: it marks the key.
    assert_eq!(body(&get(&server, "/slow-private")), "mine, slowly");
    // Concurrent requests for it then go to the origin each, none waiting on another.
    for r in concurrent_gets(&server, "/slow-private", 10) {
        assert_eq!(body(&r), "mine, slowly");
    }
    assert_eq!(origin.hits("/slow-private"), 11);
    // A marked key whose response can be stored now is stored, and then hit; but not
    // for a request that says `no-store`.
    assert_eq!(body(&get(&server, "/becomes")), "v1");
    let no_store =
        "GET /becomes HTTP/1.1\r\nHost: test\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    assert_eq!(body(&request(&server, no_store)), "v2");
    assert_eq!(body(&get(&server, "/becomes")), "v3");
    assert_eq!(body(&get(&server, "/becomes")), "v3");
    assert_eq!(origin.hits("/becomes"), 3);
    // PURGE finds no object where there is only a mark.
    let purge = "PURGE /slow-private HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    assert_eq!(request(&server, purge).status, 404);
    let line = counters_at_shutdown(&server);
    assert!(line.contains(" 0 coalesced"), "{line}");
}

#[test]
fn stale_while_revalidate_serves_stale_and_refreshes_in_the_background() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    assert_eq!(body(&get(&server, "/swr")), "v1");
    // max-age=1: wait until it is stale (Age counts whole seconds).
    std::thread::sleep(Duration::from_millis(1100));
    let stale = get(&server, "/swr");
    assert_eq!(body(&stale), "v1", "stale object served at once");
    eventually("the background refresh", || origin.hits("/swr") == 2);
    eventually("the refreshed object", || {
        body(&get(&server, "/swr")) == "v2"
    });
    assert_eq!(origin.hits("/swr"), 2);
}

#[test]
fn stale_if_error_serves_page_and_fragment_when_the_origin_fails() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    assert_eq!(body(&get(&server, "/sie-page")), "<p>fragment v1</p>");
    origin.failing.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1100));
    // Stale now, and the origin answers 503: the stale page and fragment are served,
    // however many times the origin fails.
    for i in 0..10 {
        let r = get(&server, "/sie-page");
        assert_eq!(
            (r.status, body(&r).as_str()),
            (200, "<p>fragment v1</p>"),
            "request {i}"
        );
    }
    // What was never cached fails.
    assert_ne!(get(&server, "/frag/never").status, 200);
}

#[test]
fn purge_and_ban_need_permission() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(
        &site,
        &origin,
        1,
        "[cache]\npurge_token = \"s3cret\"\npurge_allow = [\"192.0.2.1\"]\n",
    );
    let purge = |path: &str, token: Option<&str>| {
        let token = token.map_or(String::new(), |t| format!("X-Purge-Token: {t}\r\n"));
        request(
            &server,
            &format!("PURGE {path} HTTP/1.1\r\nHost: test\r\n{token}Connection: close\r\n\r\n"),
        )
        .status
    };
    get(&server, "/frag/p");
    assert_eq!(purge("/frag/p", None), 403);
    assert_eq!(purge("/frag/p", Some("wrong")), 403);
    get(&server, "/frag/p");
    assert_eq!(origin.hits("/frag/p"), 1, "a refused purge removes nothing");
    assert_eq!(purge("/frag/p", Some("s3cret")), 200);
    assert_eq!(purge("/frag/p", Some("s3cret")), 404);
    get(&server, "/frag/p");
    assert_eq!(origin.hits("/frag/p"), 2);

    // From an allowed address, no token needed; BAN removes a prefix.
    let origin2 = Origin::start();
    let site2 = Site::new();
    let server2 = serve(
        &site2,
        &origin2,
        1,
        "[cache]\npurge_allow = [\"127.0.0.1\"]\n",
    );
    for path in ["/frag/1", "/frag/2", "/slow/1"] {
        get(&server2, path);
    }
    let ban = |path: &str| {
        request(
            &server2,
            &format!("BAN {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
        )
    };
    // The answer counts the objects removed here.
    let r = ban("/frag/");
    assert_eq!((r.status, r.header("purged")), (200, Some("2")));
    let r = ban("/frag/");
    assert_eq!((r.status, r.header("purged")), (404, Some("0")));
    for path in ["/frag/1", "/frag/2", "/slow/1"] {
        get(&server2, path);
    }
    assert_eq!(origin2.hits("/frag/1"), 2);
    assert_eq!(origin2.hits("/frag/2"), 2);
    assert_eq!(origin2.hits("/slow/1"), 1, "outside the banned prefix");
    // And the first server's token does not work here.
    let raw = "PURGE /slow/1 HTTP/1.1\r\nHost: test\r\nX-Purge-Token: s3cret\r\nConnection: close\r\n\r\n";
    assert_eq!(request(&server2, raw).status, 200);
}

/// A redis-server of our own on an ephemeral loopback port, killed on drop.
pub(crate) struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    pub(crate) fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        let redis = Redis { child, port };
        eventually("redis-server to answer PING", || {
            redis.command(&["PING"]).is_some_and(|r| r == "+PONG")
        });
        redis
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One command in RESP; the first line of the answer.
    pub(crate) fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut raw = format!("*{}\r\n", args.len());
        for a in args {
            raw.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(raw.as_bytes()).ok()?;
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if s.read(&mut b).ok()? == 0 {
                return None;
            }
            line.push(b[0]);
        }
        Some(String::from_utf8_lossy(&line).trim_end().to_string())
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills it and starts a new one, empty, on the same port.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        eventually("redis-server to answer PING again", || {
            self.command(&["PING"]).is_some_and(|r| r == "+PONG")
        });
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A generous lookup timeout: on a loaded machine a 50 ms lookup may be late, and the
/// sharing test must not then see an origin request. (Killing Redis makes lookups fail
/// at once, refused, so the timeout does not slow that test.)
fn redis_config(redis: &Redis) -> String {
    format!("[cache.redis]\nurl = \"{}\"\ntimeout = 5\n", redis.url())
}

#[test]
fn two_processes_share_fills_through_redis() {
    let redis = Redis::start();
    let origin = Origin::start();
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, 1, &redis_config(&redis));
    let b = serve(&site_b, &origin, 1, &redis_config(&redis));
    assert_eq!(body(&get(&a, "/frag/shared")), "[shared]");
    assert_eq!(body(&get(&a, "/page/2")), "<p>2[a][b]</p>");
    // Writes to Redis are asynchronous: wait until they are there.
    for key in [
        "tessera:test/frag/shared",
        "tessera:test/page/2",
        "tessera:test/frag/b",
    ] {
        eventually(key, || {
            redis.command(&["EXISTS", key]).as_deref() == Some(":1")
        });
    }
    assert_eq!(body(&get(&b, "/frag/shared")), "[shared]");
    assert_eq!(body(&get(&b, "/page/2")), "<p>2[a][b]</p>");
    assert_eq!(
        origin.hits("/frag/shared"),
        1,
        "the second process asked Redis, not the origin"
    );
    assert_eq!(origin.hits("/page/2"), 1);
    assert_eq!(origin.hits("/frag/a"), 1);
}

#[test]
fn killing_redis_loses_no_request() {
    let mut redis = Redis::start();
    let origin = Origin::start();
    let site = Site::new();
    let server = serve(&site, &origin, 2, &redis_config(&redis));
    for i in 0..300 {
        if i == 100 {
            redis.kill();
        }
        // New keys (a Redis lookup each, then the origin) and repeated ones (memory).
        let path = format!("/frag/k{}", i % 150);
        let r = get(&server, &path);
        assert_eq!(
            (r.status, body(&r)),
            (200, format!("[k{}]", i % 150)),
            "request {i}"
        );
    }
    eventually("the Redis breaker to be logged", || {
        server
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("redis is failing"))
    });
    // The counters are printed at shutdown.
    server.signal(libc::SIGTERM);
    eventually("the cache counters at shutdown", || {
        server.stderr.lock().unwrap().iter().any(|l| {
            l.starts_with("tessera: cache: ") && l.contains("; redis: ") && !l.contains(" 0 errors")
        })
    });
}

/// Three redis-server cluster nodes (no replicas) on ephemeral loopback ports, joined
/// with `redis-cli --cluster create`; killed on drop.
pub(crate) struct RedisCluster {
    pub(crate) nodes: Vec<Redis>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    pub(crate) fn start() -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<Redis> = (0..3)
            .map(|i| {
                let free = || {
                    TcpListener::bind("127.0.0.1:0")
                        .unwrap()
                        .local_addr()
                        .unwrap()
                        .port()
                };
                // The cluster bus's port is given too: by default it is the port plus
                // 10,000, and redis-server refuses to start when that passes 65,535.
                // bind(0) gives a port above 55,535 when the lower half of the
                // ephemeral range is busy, as it is while the whole suite runs: the
                // node then never answered PING.
                let (port, bus) = (free(), free());
                let conf = dir.path().join(format!("nodes-{i}.conf"));
                let child = Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--cluster-port", &bus.to_string()])
                    .args(["--save", "", "--appendonly", "no"])
                    .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                    .arg(&conf)
                    .current_dir(dir.path())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server (scripts/test.sh installs it)");
                let node = Redis { child, port };
                eventually("a cluster node to answer PING", || {
                    node.command(&["PING"]).is_some_and(|r| r == "+PONG")
                });
                node
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli (installed with redis-server)");
        assert!(status.success(), "redis-cli --cluster create failed");
        for node in &nodes {
            eventually("the cluster to be ok on every node", || {
                let mut s = TcpStream::connect(("127.0.0.1", node.port)).unwrap();
                s.write_all(b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n")
                    .unwrap();
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap_or(0);
                String::from_utf8_lossy(&buf[..n]).contains("cluster_state:ok")
            });
        }
        RedisCluster { nodes, _dir: dir }
    }
}

#[test]
fn two_processes_share_fills_through_redis_cluster() {
    let cluster = RedisCluster::start();
    let seeds: Vec<String> = cluster.nodes[..2]
        .iter()
        .map(|n| format!("\"{}\"", n.url()))
        .collect();
    let config = format!(
        "[cache.redis]\ncluster = [{}]\ntimeout = 5\n",
        seeds.join(", ")
    );
    let origin = Origin::start();
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, 1, &config);
    let b = serve(&site_b, &origin, 1, &config);
    assert_eq!(body(&get(&a, "/page/3")), "<p>3[a][b]</p>");
    // Each key lives on the node its hash slot names; ask every node.
    for key in [
        "tessera:test/page/3",
        "tessera:test/frag/a",
        "tessera:test/frag/b",
    ] {
        eventually(key, || {
            cluster
                .nodes
                .iter()
                .any(|n| n.command(&["EXISTS", key]).as_deref() == Some(":1"))
        });
    }
    assert_eq!(body(&get(&b, "/page/3")), "<p>3[a][b]</p>");
    assert_eq!(
        origin.hits("/page/3"),
        1,
        "the second process asked the cluster"
    );
    assert_eq!(origin.hits("/frag/a"), 1);
    assert_eq!(origin.hits("/frag/b"), 1);
}

#[test]
fn stale_redis_record_is_not_served_as_fresh_while_the_origin_is_up() {
    let redis = Redis::start();
    let origin = Origin::start();
    let site = Site::new();
    let server = serve(&site, &origin, 1, &redis_config(&redis));
    assert_eq!(body(&get(&server, "/sie-frag")), "fragment v1");
    eventually("the record in Redis", || {
        redis
            .command(&["EXISTS", "tessera:test/sie-frag"])
            .as_deref()
            == Some(":1")
    });
    // max-age=1, stale-if-error=60: once stale, a healthy origin is asked again rather
    // than the stale Redis copy being served as a hit.
    eventually("a fresh object from the origin", || {
        body(&get(&server, "/sie-frag")) == "fragment v2"
    });
    assert_eq!(origin.hits("/sie-frag"), 2);
}

/// Stored bodies are exact copies, not slices keeping the upstream connection's whole
/// read buffer alive: many tiny objects must cost about what the budget says.
#[test]
fn tiny_objects_do_not_keep_read_buffers_alive() {
    let site = Site::new();
    let origin = Origin::start();
    let max_size: u64 = 4 << 20;
    let server = serve(
        &site,
        &origin,
        1,
        &format!("[cache]\nmax_size = {max_size}\n"),
    );
    get(&server, "/frag/warm-up");
    let before = server.rss_kib();
    let server = Arc::new(server);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let server = server.clone();
            std::thread::spawn(move || {
                for i in 0..750 {
                    let r = get(&server, &format!("/frag/t{t}-{i}"));
                    assert_eq!(r.status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let grown = server.rss_kib().saturating_sub(before) * 1024;
    // Generous: three times the budget (allocator slack, connection buffers); holding
    // read buffers cost over ten times it.
    assert!(
        grown < 3 * max_size,
        "RSS grew by {grown} bytes for 3000 tiny objects (max_size {max_size})"
    );
}

#[test]
fn waiters_on_a_failed_page_fetch_do_not_retry_the_origin() {
    let site = Site::new();
    let origin = Origin::start();
    let server = Arc::new(serve(&site, &origin, 2, ""));
    let barrier = Arc::new(Barrier::new(20));
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let (server, barrier) = (server.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                get(&server, "/slow-fail").status
            })
        })
        .collect();
    for t in threads {
        let status = t.join().unwrap();
        assert!(status == 502 || status == 503, "status {status}");
    }
    // One fetch, answered slowly: all twenty join it (a second only if a request came
    // in after the first had failed, on a very loaded machine).
    assert!(
        origin.hits("/slow-fail") <= 2,
        "{} origin requests",
        origin.hits("/slow-fail")
    );
}

#[test]
fn fills_do_not_forward_the_clients_conditionals_or_ranges() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    for (i, (field, status, want)) in [
        ("If-None-Match: \"e1\"", 304, ""),
        // The object has no Last-Modified: the date is ignored.
        (
            "If-Modified-Since: Sun, 22 Nov 2026 05:00:00 GMT",
            200,
            "full",
        ),
        ("Range: bytes=0-1", 206, "fu"),
    ]
    .into_iter()
    .enumerate()
    {
        let path = format!("/cond?{i}");
        let r = request(
            &server,
            &format!("GET {path} HTTP/1.1\r\nHost: test\r\n{field}\r\nConnection: close\r\n\r\n"),
        );
        // The fill asked for the whole object and stored it; the client got what the
        // stored object answers to its request (docs/cache.md, "304 and 206").
        assert_eq!((r.status, body(&r).as_str()), (status, want), "{field}");
        assert_eq!(body(&get(&server, &path)), "full");
        assert_eq!(origin.hits(&path), 1, "{field}: the second request hit");
    }
}

#[test]
fn request_no_store_is_not_stored_but_may_be_served_a_hit() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    let no_store = |path: &str| {
        request(
            &server,
            &format!("GET {path} HTTP/1.1\r\nHost: test\r\nCache-Control: max-age=0, No-Store\r\nConnection: close\r\n\r\n"),
        )
    };
    assert_eq!(body(&no_store("/frag/ns")), "[ns]");
    assert_eq!(body(&get(&server, "/frag/ns")), "[ns]");
    assert_eq!(
        origin.hits("/frag/ns"),
        2,
        "the no-store request's response was not stored"
    );
    // What is stored may still answer a no-store request.
    assert_eq!(body(&no_store("/frag/ns")), "[ns]");
    assert_eq!(origin.hits("/frag/ns"), 2);
}

#[test]
fn stale_fragment_hits_start_one_refresh_not_one_each() {
    let site = Site::new();
    let origin = Origin::start();
    let server = serve(&site, &origin, 1, "");
    assert_eq!(body(&get(&server, "/swr-page")), "<p>v1</p>");
    std::thread::sleep(Duration::from_millis(1100));
    // The refresh takes 200 ms; every request in that time gets the stale fragment.
    let started = Instant::now();
    let mut stale = 0;
    while started.elapsed() < Duration::from_millis(150) {
        if body(&get(&server, "/swr-page")) == "<p>v1</p>" {
            stale += 1;
        }
    }
    // (Dozens here; at least one even on a very loaded machine.)
    assert!(stale >= 1, "no stale hit during the refresh");
    eventually("the refreshed fragment", || {
        body(&get(&server, "/swr-page")) == "<p>v2</p>"
    });
    assert_eq!(origin.hits("/swr"), 2);
    // Only the first stale hit started a refresh: no other waited on it.
    let line = counters_at_shutdown(&server);
    assert!(line.contains(" 0 coalesced"), "{line}");
}

#[test]
fn redis_record_older_than_a_purge_is_refused_when_the_delete_was_lost() {
    let redis = Redis::start();
    let origin = Origin::start();
    let site = Site::new();
    let config = format!(
        "{}\n[cache]\npurge_allow = [\"127.0.0.1\"]\n",
        redis_config(&redis)
    );
    let server = serve(&site, &origin, 1, &config);
    let key = "tessera:test/frag/gone";
    assert_eq!(body(&get(&server, "/frag/gone")), "[gone]");
    // PURGE of the key, then BAN of its prefix: each time the record is copied aside,
    // removed by the invalidation, then put back as if the DEL had been dropped (breaker
    // open, queue full); the next GET must refuse it and ask the origin.
    for (invalidation, hits_after, what) in [
        ("PURGE /frag/gone", 2, "the pre-purge record was refused"),
        ("BAN /frag/", 3, "the pre-ban record was refused"),
    ] {
        eventually("the record in Redis", || {
            redis.command(&["EXISTS", key]).as_deref() == Some(":1")
        });
        assert_eq!(
            redis.command(&["COPY", key, "backup"]).as_deref(),
            Some(":1")
        );
        let raw = format!("{invalidation} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        assert_eq!(request(&server, &raw).status, 200, "{invalidation}");
        eventually("the invalidation to reach Redis", || {
            redis.command(&["EXISTS", key]).as_deref() == Some(":0")
        });
        assert_eq!(
            redis.command(&["RENAME", "backup", key]).as_deref(),
            Some("+OK")
        );
        assert_eq!(body(&get(&server, "/frag/gone")), "[gone]");
        assert_eq!(origin.hits("/frag/gone"), hits_after, "{what}");
    }
}
