//! Request limits (docs/security.md, "Request limits"): `[[limit]]` zones on routes,
//! against a timed loop of requests whose counts of passed, delayed and refused requests
//! are computed here from nginx's documented algorithm (ngx_http_limit_req_module) at
//! the times the requests were sent; `dry_run`; a million keys in a zone of fixed size.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{read_response, Response, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// A site whose every request is answered `ok` by a route counted in zone `z`, with an
/// admin listener for the counts.
fn limited(zone: &str) -> (Site, Server) {
    let site = Site::new();
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[limit]]\nname = \"z\"\n{zone}\n\
         [[route]]\nprefix = \"/\"\nrespond = {{ status = 200, body = \"ok\" }}\nlimit = [\"z\"]\n"
    ));
    (site, server)
}

/// `tessera_limit_requests_total{zone="z"}` by result: passed, delayed, refused, dry_run.
fn counted(server: &Server) -> [u64; 4] {
    let (_, text) = admin_get(admin_addr(server), "/metrics", "");
    let all = samples(&text);
    ["passed", "delayed", "refused", "dry_run"].map(|result| {
        let key = format!("tessera_limit_requests_total{{zone=\"z\",result=\"{result}\"}}");
        *all.get(&key).unwrap_or(&0.0) as u64
    })
}

/// nginx's limit_req for one key, over requests at `times` (milliseconds): a new key's
/// first request leaves excess 0; each later one `excess - rate * ms / 1000 + 1000` (at
/// least 0); over `burst` it is refused and changes nothing; else it waits
/// `(excess - delay) * 1000 / rate` ms when that is positive. Rates in millirequests a
/// second. Returns (passed, delayed, refused).
fn nginx_limit_req(times: &[u64], rate: i64, burst: i64, delay: i64) -> [u64; 3] {
    let mut state: Option<(i64, u64)> = None;
    let mut counts = [0; 3];
    for &now in times {
        let excess = match state {
            None => 0,
            Some((excess, last)) => (excess - rate * (now - last) as i64 / 1000 + 1000).max(0),
        };
        if excess > burst {
            counts[2] += 1;
            continue;
        }
        let last = match state {
            Some((_, last)) if now == last => last,
            _ => now,
        };
        state = Some((excess, last));
        counts[if excess > delay { 1 } else { 0 }] += 1;
    }
    counts
}

/// Sends `n` requests, one every `every`, each on its own connection (so a delayed one
/// holds up no other): when each was sent (ms after the first, as the server's clock
/// counts whole milliseconds), and each response's status and time taken.
fn timed_loop(addr: SocketAddr, n: u32, every: Duration) -> Vec<(u64, u16, Duration)> {
    let start = Instant::now();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            std::thread::spawn(move || {
                let at = start + every * i;
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.set_nodelay(true).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                let sent = Instant::now();
                stream
                    .write_all(b"GET /login HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let r = read_response(&mut stream, false);
                (sent, r.status, sent.elapsed())
            })
        })
        .collect();
    let mut results: Vec<(Instant, u16, Duration)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    results.sort_by_key(|r| r.0);
    let first = results[0].0;
    results
        .into_iter()
        .map(|(sent, status, took)| ((sent - first).as_millis() as u64, status, took))
        .collect()
}

/// Within one request of what nginx's algorithm gives for the same times (the server
/// reads its clock when the bytes arrive, a little after the client's).
fn near(what: &str, got: [u64; 3], want: [u64; 3]) -> Result<(), String> {
    for (i, name) in ["passed", "delayed", "refused"].iter().enumerate() {
        if got[i].abs_diff(want[i]) > 1 {
            return Err(format!(
                "{what}: {name} {} where nginx's algorithm gives {} (all: {got:?} vs {want:?})",
                got[i], want[i]
            ));
        }
    }
    Ok(())
}

/// One timed run per attempt, on a fresh server with zone `zone`: `n` requests, one every
/// 25 ms, compared by `check` with nginx's algorithm at the times they were sent (burst
/// 5 at 10 a second; `delay` in millirequests). The times are the client's: on a machine
/// so loaded that the server reads a request 25 ms after it was sent, a run can differ
/// by more than one request through no fault of the limits, so a run that does is tried
/// again, twice at most; every attempt's failure is reported.
fn against_nginx(
    zone: &str,
    n: u32,
    delay: i64,
    check: impl Fn(&Server, &[(u64, u16, Duration)], [u64; 3]) -> Result<(), String>,
) {
    let mut failures = Vec::new();
    for _ in 0..3 {
        let (_site, server) = limited(zone);
        let results = timed_loop(server.addr, n, Duration::from_millis(25));
        let times: Vec<u64> = results.iter().map(|r| r.0).collect();
        let want = nginx_limit_req(&times, 10_000, 5_000, delay);
        match check(&server, &results, want) {
            Ok(()) => return,
            Err(e) => failures.push(e),
        }
    }
    panic!("every attempt differed: {failures:#?}");
}

#[test]
fn ten_a_second_with_a_burst_of_5_and_nodelay_refuses_what_nginx_refuses() {
    // 60 requests, one every 25 ms (40 a second): the burst goes, then one in four.
    against_nginx(
        "rate = \"10r/s\"\nburst = 5\nnodelay = true",
        60,
        i64::MAX,
        |server, results, want| {
            let refused = results.iter().filter(|r| r.1 == 429).count() as u64;
            let passed = results.iter().filter(|r| r.1 == 200).count() as u64;
            assert_eq!(passed + refused, 60, "every answer is 200 or 429");
            let [p, d, r, dry] = counted(server);
            assert_eq!((d, dry), (0, 0), "nodelay delays nothing");
            assert_eq!(
                (p, r),
                (passed, refused),
                "the metrics count what the client saw"
            );
            assert!(
                refused >= 30,
                "{refused} refused of 60 at four times the rate"
            );
            near("nodelay", [passed, 0, refused], want)
        },
    );
}

#[test]
fn a_refused_request_says_when_to_come_back() {
    let (_site, server) = limited("rate = \"10r/s\"\nburst = 5\nnodelay = true");
    let mut stream = server.connect();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(8).as_slice())
        .unwrap();
    let statuses: Vec<Response> = (0..8).map(|_| read_response(&mut stream, false)).collect();
    // The first and a burst of 5 at once, then refused until 100 ms have passed.
    let codes: Vec<u16> = statuses.iter().map(|r| r.status).collect();
    assert_eq!(codes, [200, 200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(statuses[6].header("retry-after"), Some("1"));
}

#[test]
fn ten_a_second_with_a_burst_of_5_spaces_out_the_burst_and_refuses_the_rest() {
    against_nginx(
        "rate = \"10r/s\"\nburst = 5",
        40,
        0,
        |server, results, want| {
            let refused = results.iter().filter(|r| r.1 == 429).count() as u64;
            let [p, d, r, _] = counted(server);
            assert_eq!(r, refused);
            assert_eq!(p + d + r, 40);
            // A delayed request waits its turn at the rate: the last of a full burst waits
            // about 500 ms (5 requests' excess at 10 a second).
            let slowest = results.iter().map(|r| r.2).max().unwrap();
            assert!(
                slowest >= Duration::from_millis(300),
                "the slowest answer took {slowest:?}"
            );
            near("delay", [p, d, r], want)
        },
    );
}

#[test]
fn two_stage_delay_passes_the_first_of_the_burst_at_once() {
    // nginx's `delay=N`: 3 of the burst at once, the next 2 spaced out, then refused.
    against_nginx(
        "rate = \"10r/s\"\nburst = 5\ndelay = 3",
        30,
        3_000,
        |server, _, want| {
            let [p, d, r, _] = counted(server);
            near("delay = 3", [p, d, r], want)
        },
    );
}

#[test]
fn dry_run_refuses_nothing_and_counts_what_it_would_refuse() {
    let zone = "rate = \"10r/s\"\nburst = 5\nnodelay = true\ndry_run = true";
    against_nginx(zone, 40, i64::MAX, |server, results, want| {
        assert!(
            results.iter().all(|r| r.1 == 200),
            "dry run refused a request"
        );
        let [p, d, r, dry] = counted(server);
        assert_eq!((d, r), (0, 0));
        assert!(dry >= 15, "{dry} counted as dry_run");
        // Logged, a line a second at most (the run takes about one).
        crate::harness::eventually("the dry run's line", || {
            crate::harness::stderr_has(server, "limiting requests")
        });
        let lines = (server.stderr.lock().unwrap().iter())
            .filter(|l| l.contains("limiting requests"))
            .count();
        assert!(lines <= 3, "{lines} lines for {dry} would-be refusals");
        near("dry run", [p, 0, dry], want)
    });
}

#[test]
fn a_key_of_two_variables_limits_each_pair_apart() {
    let (_site, server) = limited("rate = \"1r/m\"\nnodelay = true\nkey = \"$http_x_user $arg_a\"");
    let get = |fields: &str, query: &str| {
        let mut stream = server.connect();
        write!(
            stream,
            "GET /x{query} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut stream, false).status
    };
    assert_eq!(get("X-User: ann\r\n", "?a=1"), 200);
    assert_eq!(get("X-User: ann\r\n", "?a=1"), 429);
    assert_eq!(get("X-User: ann\r\n", "?a=2"), 200);
    assert_eq!(get("X-User: bob\r\n", "?a=1"), 200);
    // A key that expands to nothing is not limited, as in nginx.
    let (_site2, open) = limited("rate = \"1r/m\"\nnodelay = true\nkey = \"$http_x_user\"");
    for _ in 0..3 {
        assert_eq!(open.get("/").status, 200);
    }
}

/// Resident memory of `server` in KiB.
fn rss(server: &Server) -> u64 {
    server.rss_kib()
}

#[test]
fn a_million_keys_stay_within_the_zone_memory() {
    // 1m: 65,536 keys of 16 bytes. A million distinct keys pass through it, pipelined
    // in batches on one connection; the table was allocated at start and only its
    // pages are touched, so the process grows by at most the zone's memory (and a
    // little for buffers), however many keys come.
    let (_site, server) =
        limited("rate = \"1r/m\"\nnodelay = true\nkey = \"$http_x_key\"\nmemory = \"1m\"");
    let mut stream = server.connect();
    stream.set_nodelay(true).unwrap();
    // Warm up (buffers, the admin's first scrape) before the first measure.
    assert_eq!(counted(&server), [0; 4]);
    let before = rss(&server);
    const KEYS: u32 = 1_000_000;
    const BATCH: u32 = 500;
    let mut request = Vec::with_capacity(BATCH as usize * 64);
    let mut answers = vec![0u8; 1 << 20];
    let mut key = 0;
    let ok = b"HTTP/1.1 200 OK\r\n";
    while key < KEYS {
        request.clear();
        for _ in 0..BATCH {
            write!(
                request,
                "GET / HTTP/1.1\r\nHost: t\r\nX-Key: k{key}\r\n\r\n"
            )
            .unwrap();
            key += 1;
        }
        stream.write_all(&request).unwrap();
        // Read until this batch's last response: count status lines as they come.
        let mut seen = 0;
        let mut tail = Vec::new();
        while seen < BATCH {
            let n = stream.read(&mut answers).unwrap();
            assert!(n > 0, "closed after {key} keys");
            tail.extend_from_slice(&answers[..n]);
            let mut at = 0;
            while let Some(i) = find(&tail[at..], b"HTTP/1.1 ") {
                if tail.len() < at + i + ok.len() {
                    break;
                }
                assert_eq!(
                    &tail[at + i..at + i + ok.len()],
                    ok,
                    "a new key is never refused"
                );
                seen += 1;
                at += i + ok.len();
            }
            tail.drain(..at);
        }
    }
    let after = rss(&server);
    let [p, ..] = counted(&server);
    assert_eq!(p, KEYS as u64);
    let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
    let keys = samples(&text)["tessera_limit_keys{zone=\"z\"}"];
    assert!(keys <= 65536.0 && keys > 60000.0, "{keys} keys held");
    let grown = after.saturating_sub(before);
    assert!(
        grown <= 1024 + 4096,
        "RSS grew by {grown} KiB ({before} -> {after}) for a 1m zone"
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(i) = haystack[at..].iter().position(|&b| b == needle[0]) {
        let start = at + i;
        if haystack[start..].starts_with(needle) {
            return Some(start);
        }
        if haystack.len() - start < needle.len() {
            return None;
        }
        at = start + 1;
    }
    None
}

#[test]
fn over_http2_the_burst_is_spaced_out_on_its_streams_and_the_rest_refused() {
    // Ten streams at once on one connection: the first passes, the burst's 5 wait
    // 100 to 500 ms each on timers (the connection serves the others meanwhile), the
    // last 4 are refused.
    let (_site, server) = limited("rate = \"10r/s\"\nburst = 5");
    let url = format!("http://{}/", server.addr);
    let started = Instant::now();
    let out = std::process::Command::new("h2load")
        .args(["-n", "10", "-c", "1", "-m", "10", &url])
        .output()
        .expect("h2load is missing: scripts/test.sh installs it (nghttp2-client)");
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("status codes: 6 2xx, 0 3xx, 4 4xx, 0 5xx"),
        "{text}"
    );
    assert_eq!(counted(&server), [1, 5, 4, 0]);
    assert!(
        took >= Duration::from_millis(450),
        "all answered in {took:?}"
    );
}

#[test]
fn a_host_limits_the_requests_its_routes_do_not() {
    let site = Site::new();
    let server = site.serve_with(
        "[[limit]]\nname = \"host\"\nrate = \"1r/m\"\nnodelay = true\n\
         [[limit]]\nname = \"route\"\nrate = \"1r/m\"\nburst = 2\nnodelay = true\n\
         [[host]]\nnames = [\"a.test\"]\nlimit = [\"host\"]\n\
         [[host.route]]\nprefix = \"/own\"\nrespond = { body = \"own\" }\nlimit = [\"route\"]\n",
    );
    let get = |path: &str| {
        let mut stream = server.connect();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut stream, false).status
    };
    // The host's zone: one request a minute, for its files.
    assert_eq!([get("/hello.txt"), get("/hello.txt")], [200, 429]);
    // The route's own: a burst of 2 more.
    assert_eq!(
        [get("/own"), get("/own"), get("/own"), get("/own")],
        [200, 200, 200, 429]
    );
    // Another host is not limited.
    assert_eq!(
        [
            server.get("/hello.txt").status,
            server.get("/hello.txt").status
        ],
        [200, 200]
    );
}

#[test]
fn check_config_names_a_bad_zone_and_an_unknown_one() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[limit]]\nname = \"login\"\nrate = \"10 per second\"\n\
         [[route]]\nprefix = \"/login\"\nrespond = { body = \"x\" }\nlimit = [\"logn\"]\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("bad.toml:3: limit[0].rate: `10 per second` is not `Nr/s` or `Nr/m`"),
        "{stderr}"
    );
    std::fs::write(
        &path,
        "[[limit]]\nname = \"login\"\nrate = \"10r/s\"\n\
         [[route]]\nprefix = \"/login\"\nrespond = { body = \"x\" }\nlimit = [\"logn\"]\n",
    )
    .unwrap();
    let (_, stderr) = crate::harness::check_config_output(&path);
    assert!(
        stderr.contains("bad.toml:7: route[0].limit: no `[[limit]]` is named `logn`"),
        "{stderr}"
    );
}

/// An origin whose `/slow` requests wait until `release` is set (10 s at most); `seen`
/// counts those that arrived.
struct HeldOrigin {
    addr: SocketAddr,
    seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

fn held_origin() -> HeldOrigin {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let (s, r) = (seen.clone(), release.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (seen, release) = (s.clone(), r.clone());
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                while let Some((target, _)) = crate::harness::read_request_head(&mut reader) {
                    if target.starts_with("/slow") {
                        seen.fetch_add(1, Ordering::SeqCst);
                        let until = Instant::now() + Duration::from_secs(10);
                        while !release.load(Ordering::SeqCst) && Instant::now() < until {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                }
            });
        }
    });
    HeldOrigin {
        addr,
        seen,
        release,
    }
}

/// A connection from the loopback address `source` to `to`.
fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::new(source.parse().unwrap(), 0).into())
        .unwrap();
    socket.connect(&to.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

fn ask(stream: &mut TcpStream, path: &str) -> u16 {
    // One write: a request in pieces would wait on Nagle and the delayed ACK.
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    read_response(stream, false).status
}

/// `tessera_access_denied_total{host=HOST,reason="limit_conn"}`.
fn denied(server: &Server, host: &str) -> f64 {
    let (_, text) = admin_get(admin_addr(server), "/metrics", "");
    let key = format!("tessera_access_denied_total{{host=\"{host}\",reason=\"limit_conn\"}}");
    samples(&text).get(&key).copied().unwrap_or(0.0)
}

#[test]
fn limit_conn_refuses_a_clients_third_request_in_flight_while_another_is_served() {
    use std::sync::atomic::Ordering;
    let origin = held_origin();
    let site = Site::new();
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"app\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/\"\nupstream = \"app\"\n\
         limit_conn = {{ key = \"$remote_addr\", max = 2 }}\n",
        origin.addr
    ));
    // Client A (127.0.0.4) has two requests waiting on the origin.
    let waiting: Vec<_> = (0..2)
        .map(|i| {
            let to = server.addr;
            std::thread::spawn(move || {
                let mut stream = connect_from("127.0.0.4", to);
                ask(&mut stream, &format!("/slow/{i}"))
            })
        })
        .collect();
    crate::harness::eventually("both slow requests at the origin", || {
        origin.seen.load(Ordering::SeqCst) == 2
    });
    // Its third, on another connection, is refused at once; client B is served.
    let mut a = connect_from("127.0.0.4", server.addr);
    assert_eq!(ask(&mut a, "/fast"), 503);
    let mut b = connect_from("127.0.0.5", server.addr);
    assert_eq!(ask(&mut b, "/fast"), 200);
    assert_eq!(denied(&server, "default"), 1.0);
    // Once A's requests are answered, it has room again.
    origin.release.store(true, Ordering::SeqCst);
    for w in waiting {
        assert_eq!(w.join().unwrap(), 200);
    }
    assert_eq!(ask(&mut a, "/fast"), 200);
}

#[test]
fn limit_conn_per_client_closes_a_clients_third_connection_while_another_is_served() {
    let site = Site::new();
    let server = site.serve_with("admin_listen = \"127.0.0.1:0\"\nlimit_conn_per_client = 2\n");
    let mut open: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = connect_from("127.0.0.4", server.addr);
            assert_eq!(ask(&mut stream, "/hello.txt"), 200);
            stream
        })
        .collect();
    // A third connection of 127.0.0.4 is closed without an answer.
    let mut third = connect_from("127.0.0.4", server.addr);
    let _ = third.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut buf = [0u8; 64];
    let read = third.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "the third connection was answered: {read:?}"
    );
    // Another client is served meanwhile, and the two open ones still are.
    let mut other = connect_from("127.0.0.5", server.addr);
    assert_eq!(ask(&mut other, "/hello.txt"), 200);
    assert_eq!(ask(&mut open[1], "/hello.txt"), 200);
    assert_eq!(denied(&server, ""), 1.0);
    // One closed, a new one of 127.0.0.4 is served.
    drop(open.remove(0));
    crate::harness::eventually("a connection of 127.0.0.4 admitted again", || {
        let mut again = connect_from("127.0.0.4", server.addr);
        let _ = again.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let mut buf = [0u8; 12];
        matches!(again.read(&mut buf), Ok(12)) && buf.starts_with(b"HTTP/1.1 200")
    });
}

/// The value of a sample of `/metrics`.
fn metric(server: &Server, key: &str) -> f64 {
    let (_, text) = admin_get(admin_addr(server), "/metrics", "");
    samples(&text).get(key).copied().unwrap_or(f64::NAN)
}

#[test]
fn two_servers_sharing_a_redis_zone_enforce_one_limit_and_keep_local_limits_without_it() {
    // 10 a minute and a burst of 40: 50 requests in any minute, across both servers.
    // Alone, each server's own bucket would pass 41 at once (and one more every 6 s).
    let mut redis = crate::cache::Redis::start();
    let config = format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [cache.redis]\nurl = \"{}\"\n\
         [[limit]]\nname = \"z\"\nrate = \"10r/m\"\nburst = 40\nnodelay = true\nredis = true\n\
         [[route]]\nprefix = \"/\"\nrespond = {{ status = 200, body = \"ok\" }}\nlimit = [\"z\"]\n",
        redis.url()
    );
    let (site_a, site_b) = (Site::new(), Site::new());
    let (a, b) = (site_a.serve_with(&config), site_b.serve_with(&config));
    let (mut to_a, mut to_b) = (a.connect(), b.connect());
    let mut passed = [0u32; 2];
    let start = Instant::now();
    for i in 0..120u32 {
        let (stream, n) = match i % 2 {
            0 => (&mut to_a, 0),
            _ => (&mut to_b, 1),
        };
        match ask(stream, "/") {
            200 => passed[n] += 1,
            429 => {}
            other => panic!("status {other}"),
        }
        // A request without a token passes on credit while its zone's thread asks Redis
        // for a batch: the limit is shared as fast as Redis answers. The first request of
        // each server starts that thread; paced requests leave it time to answer even on
        // a loaded machine (back to back, 120 requests took 28 ms there, less than the
        // thread took to start and connect, and each server passed its local 41).
        std::thread::sleep(Duration::from_millis(if i < 2 { 300 } else { 3 }));
    }
    let total = passed[0] + passed[1];
    assert!(
        (48..=58).contains(&total) && passed[0] > 0 && passed[1] > 0,
        "{passed:?} passed of 120 in {:?}: the shared limit is 50 in a minute",
        start.elapsed()
    );
    assert_eq!(metric(&a, "tessera_limit_redis_up{zone=\"z\"}"), 1.0);

    // Redis dies: each server goes on with its own bucket, and no request waits on it.
    // (A server that Redis told it had no room asks again a second later: that is when
    // it finds Redis gone.)
    redis.kill();
    std::thread::sleep(Duration::from_millis(1100));
    let mut local = 0;
    for _ in 0..80 {
        let asked = Instant::now();
        if ask(&mut to_a, "/") == 200 {
            local += 1;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "a request waited on Redis"
        );
    }
    // A's bucket passed the requests it let through on credit before (a few).
    assert!(
        (30..=42).contains(&local),
        "{local} of 80 passed by the local bucket (burst 40)"
    );
    assert_eq!(metric(&a, "tessera_limit_redis_up{zone=\"z\"}"), 0.0);
    assert!(metric(&a, "tessera_limit_redis_fallbacks_total{zone=\"z\"}") >= 70.0);
    // B finds out at its next request (refused: Redis had no room for it, so it asks
    // again), then passes its requests by its own bucket.
    crate::harness::eventually("B to pass by its own bucket", || ask(&mut to_b, "/") == 200);
    assert_eq!(metric(&b, "tessera_limit_redis_up{zone=\"z\"}"), 0.0);
}

#[test]
fn a_redis_zone_without_a_redis_is_refused() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[limit]]\nname = \"z\"\nrate = \"1r/s\"\nredis = true\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("limit[0].redis: needs the Redis of `[cache.redis] url`"),
        "{stderr}"
    );
}

#[test]
fn a_request_a_script_routes_again_is_counted_once_by_the_first_route_with_zones() {
    let site = Site::new();
    let dir = site.dir.path();
    std::fs::write(
        dir.join("edit.lua"),
        "return { access = function(r) r:set_path('/to') end }",
    )
    .unwrap();
    let server = site.serve_with(&format!(
        "[[limit]]\nname = \"z\"\nrate = \"1r/m\"\nburst = 1\nnodelay = true\nkey = \"$http_x_k\"\n\
         [[upstream]]\nname = \"app\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/counted\"\nupstream = \"app\"\nlimit = [\"z\"]\n\
         [[route]]\nprefix = \"/to\"\nrespond = {{ body = \"to\" }}\nlimit = [\"z\"]\n\
         [[script]]\nprefix = \"/counted\"\npath = \"{d}/edit.lua\"\n\
         [[script]]\nprefix = \"/from\"\npath = \"{d}/edit.lua\"\n",
        crate::harness::echo_origin(),
        d = dir.display()
    ));
    let three = |path: &str, key: &str| -> Vec<u16> {
        (0..3)
            .map(|_| {
                let mut stream = server.connect();
                let request = format!(
                    "GET {path} HTTP/1.1\r\nHost: t\r\nX-K: {key}\r\nConnection: close\r\n\r\n"
                );
                stream.write_all(request.as_bytes()).unwrap();
                read_response(&mut stream, false).status
            })
            .collect()
    };
    // /from has no zone: the route the script sends it to counts it (burst 1: two pass).
    assert_eq!(three("/from/x", "one"), [200, 200, 429]);
    // /counted counted it already: /to, where the script sends it, does not count it
    // again (twice would refuse the second).
    assert_eq!(three("/counted", "two"), [200, 200, 429]);
}

#[test]
fn a_zone_keeps_its_counts_across_a_reload_until_its_settings_change() {
    let site = Site::new();
    let zone = |burst: u32| {
        format!(
            "[[limit]]\nname = \"z\"\nrate = \"1r/m\"\nburst = {burst}\nnodelay = true\n\
             [[route]]\nprefix = \"/\"\nrespond = {{ body = \"ok\" }}\nlimit = [\"z\"]\n"
        )
    };
    let server = site.serve_with(&zone(0));
    let config = site.dir.path().join("tessera.toml");
    assert_eq!([server.get("/").status, server.get("/").status], [200, 429]);
    // The same settings: the key's count stays, so it is still refused.
    server.signal(libc::SIGHUP);
    crate::harness::eventually("the reload", || {
        crate::harness::stderr_has(&server, "generation=2")
    });
    assert_eq!(server.get("/").status, 429);
    // Another burst makes another zone, which starts afresh.
    std::fs::write(&config, zone(1)).unwrap();
    server.signal(libc::SIGHUP);
    crate::harness::eventually("the second reload", || {
        crate::harness::stderr_has(&server, "generation=3")
    });
    assert_eq!([server.get("/").status, server.get("/").status], [200, 200]);
    assert_eq!(server.get("/").status, 429);
}
