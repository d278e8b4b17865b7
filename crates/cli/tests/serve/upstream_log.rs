//! The access log's upstream and cache fields (`%{upstream_addr}x`...`%{cache}x`, and
//! the same JSON fields), written as nginx lists them, with real origins.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::cache::Origin;
use crate::harness::{echo_origin, read_response, Server, Site};

const UPSTREAM_FIELDS: &str = "%U|%{upstream_addr}x|%{upstream_status}x|%{upstream_connect_time}x|%{upstream_header_time}x|%{upstream_response_time}x|%{cache}x";

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

/// A port nothing listens on.
fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn assert_matches(line: &str, pattern: &str) {
    assert!(
        regex_lite::Regex::new(pattern).unwrap().is_match(line),
        "{line}\n  !~ {pattern}"
    );
}

/// A request whose first peer refuses the connection is retried on the second: the
/// line lists both attempts, with the status nginx gives a failed one (502), no connect
/// or header time for it, and the times of each. One that every peer refuses (answered
/// 502 by the proxy) lists its attempts too. A request that reaches no upstream logs
/// `-` for each field.
#[test]
fn a_retried_request_logs_both_attempts() {
    let (refused, live) = (closed_port(), echo_origin());
    let down = [closed_port(), closed_port()];
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        r#"
        access_log = {log:?}
        access_log_format = "{UPSTREAM_FIELDS}"

        [[upstream]]
        name = "app"
        addresses = ["{refused}", "{live}"]
        balance = "round_robin"
        retries = 1

        [[upstream]]
        name = "down"
        addresses = ["{down0}", "{down1}"]
        balance = "round_robin"
        retries = 1

        [[route]]
        prefix = "/api"
        upstream = "app"
        [[route]]
        prefix = "/down"
        upstream = "down"
        "#,
        log = log.display().to_string(),
        down0 = down[0],
        down1 = down[1],
    ));
    assert_eq!(server.get("/api/x").status, 200);
    assert_eq!(server.get("/hello.txt").status, 200);
    assert_eq!(server.get("/down/x").status, 502);
    let lines = wait_for_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let (r, l) = (
        regex_lite::escape(&refused.to_string()),
        regex_lite::escape(&live.to_string()),
    );
    let t = r"\d+\.\d{3}";
    // The cache was asked and had nothing: a miss (the echo is not stored either).
    assert_matches(
        &lines[0],
        &format!(r"^/api/x\|{r}, {l}\|502, 200\|-, {t}\|-, {t}\|{t}, {t}\|miss$"),
    );
    assert_eq!(lines[1], "/hello.txt|-|-|-|-|-|-");
    let (d0, d1) = (
        regex_lite::escape(&down[0].to_string()),
        regex_lite::escape(&down[1].to_string()),
    );
    assert_matches(
        &lines[2],
        &format!(r"^/down/x\|{d0}, {d1}\|502, 502\|-, -\|-, -\|{t}, {t}\|miss$"),
    );
}

/// A server whose access log (`format`) is at the path returned, with a route (its
/// `[[route]]` lines but the upstream's) to one upstream at `origin`.
fn logged_proxy(
    origin: SocketAddr,
    format: &str,
    route: &str,
) -> (Site, Server, std::path::PathBuf) {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "access_log = {log:?}\naccess_log_format = {format:?}\n\n\
         [[upstream]]\nname = \"app\"\naddresses = [\"{origin}\"]\n\n\
         [[route]]\n{route}\nupstream = \"app\"\n",
        log = log.display().to_string(),
    ));
    (site, server, log)
}

/// `n` GETs of `path` on connections of their own, sent at once.
fn concurrent_gets(server: &Arc<Server>, path: &str, n: usize) -> Vec<u16> {
    let barrier = Arc::new(Barrier::new(n));
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let (server, barrier, request) = (server.clone(), barrier.clone(), request.clone());
            std::thread::spawn(move || {
                let mut stream = server.connect();
                barrier.wait();
                stream.write_all(request.as_bytes()).unwrap();
                read_response(&mut stream, false).status
            })
        })
        .collect();
    clients.into_iter().map(|c| c.join().unwrap()).collect()
}

/// `%{cache}x` says what the cache did: a miss then a hit, a stale object served while
/// it is refreshed, a request that waited for another's fetch (collapsed), and a key
/// whose response could not be stored (a miss, then passed).
#[test]
fn cache_results_are_logged() {
    let origin = Origin::start();
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = Arc::new(site.serve_with(&format!(
        r#"
        access_log = {log:?}
        access_log_format = "%U %{{cache}}x %{{upstream_status}}x"

        [[upstream]]
        name = "origin"
        addresses = ["{addr}"]

        [[route]]
        prefix = "/"
        upstream = "origin"
        "#,
        log = log.display().to_string(),
        addr = origin.addr,
    )));
    assert_eq!(server.get("/frag/a").status, 200);
    assert_eq!(server.get("/frag/a").status, 200);
    assert_eq!(server.get("/private").status, 200);
    assert_eq!(server.get("/private").status, 200);
    assert_eq!(server.get("/swr").status, 200);
    // max-age=1: stale a second later, served while refreshed in the background.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(server.get("/swr").status, 200);
    // /slow/x takes 500 ms: the second request waits for the first's fetch.
    assert_eq!(concurrent_gets(&server, "/slow/x", 2), [200, 200]);
    let mut lines = wait_for_lines(&log, 8);
    assert_eq!(lines.len(), 8, "{lines:?}");
    lines[6..].sort();
    assert_eq!(
        lines,
        [
            "/frag/a miss 200",
            "/frag/a hit -",
            "/private miss 200",
            "/private pass 200",
            "/swr miss 200",
            "/swr stale -",
            "/slow/x collapsed -",
            "/slow/x miss 200",
        ]
    );
}

/// The same fields in a JSON line: Python's json module parses it, and `tessera logs
/// report --json` on the log has its upstream peers and cache sections.
#[test]
fn json_upstream_fields_feed_the_report() {
    let origin = Origin::start();
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        r#"
        access_log = {log:?}
        access_log_format = "json"
        json_fields = ["time", "client", "host", "route", "method", "uri", "status", "bytes_sent", "duration",
                       "upstream_addr", "upstream_status", "upstream_connect_time", "upstream_header_time",
                       "upstream_response_time", "cache", "request_id"]

        [[upstream]]
        name = "origin"
        addresses = ["{addr}"]

        [[route]]
        prefix = "/"
        upstream = "origin"
        "#,
        log = log.display().to_string(),
        addr = origin.addr,
    ));
    for _ in 0..3 {
        assert_eq!(server.get("/frag/a").status, 200);
    }
    assert_eq!(wait_for_lines(&log, 3).len(), 3);
    let script = r#"
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    o = json.loads(line)
    print(o["uri"], o["upstream_addr"], o["upstream_status"], o["cache"],
          o["upstream_connect_time"] is None or float(o["upstream_connect_time"]) >= 0,
          o["upstream_response_time"] is None or float(o["upstream_response_time"]) >= 0, sep="|")
"#;
    let printed = crate::harness::python_on(script, &log);
    let addr = origin.addr;
    assert_eq!(
        printed,
        format!("/frag/a|{addr}|200|miss|True|True\n/frag/a|None|None|hit|True|True\n/frag/a|None|None|hit|True|True\n")
    );
    let report = crate::harness::logs_report_json(&log);
    let peers = &report["upstream_peers"];
    assert_eq!(peers[0]["peer"], addr.to_string(), "{report}");
    assert_eq!(
        (
            peers[0]["attempts"].as_u64(),
            peers[0]["status_2xx"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let cache = &report["cache_by_route"][0];
    assert_eq!(
        (cache["total"].as_u64(), cache["served_from_cache"].as_u64()),
        (Some(3), Some(2)),
        "{report}"
    );
}

/// The `x-request-id` fields an echo origin saw, from its body.
fn request_ids_seen(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-request-id")
                .then(|| value.trim().to_string())
        })
        .collect()
}

/// With `%{request_id}x` in the log, the proxy sends the id to the origin as
/// `X-Request-Id`, in place of the client's; a trusted proxy's `X-Request-Id` (32 hex
/// digits or a UUID) is taken as the id instead of a new one; a route whose
/// `request_headers` set `X-Request-Id` sends what they make.
#[test]
fn the_request_id_goes_to_the_origin_and_comes_from_a_trusted_proxy() {
    let origin = echo_origin();
    let site = Site::new();
    let serve = |name: &str, trusted: &str| {
        let log = site.dir.path().join(format!("{name}.log"));
        let server = site.serve_with(&format!(
            r#"
            access_log = {log:?}
            access_log_format = "%U %{{request_id}}x"
            trusted_proxies = [{trusted}]

            [[upstream]]
            name = "app"
            addresses = ["{origin}"]

            [[route]]
            prefix = "/api"
            upstream = "app"
            [[route]]
            prefix = "/rule"
            upstream = "app"
            request_headers = {{ set = {{ "X-Request-Id" = "req-$request_id" }} }}
            "#,
            log = log.display().to_string(),
        ));
        (server, log)
    };
    let get = |server: &Server, path: &str, id: &str| {
        let mut stream = server.connect();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: t\r\nX-Request-Id: {id}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let response = read_response(&mut stream, false);
        assert_eq!(response.status, 200);
        request_ids_seen(&response.body)
    };
    let uuid = "01234567-89AB-cdef-0123-456789abcdef";
    let hex = "0123456789abcdef0123456789abcdef";
    // Not trusted: the client's id is replaced by a new one, the one logged.
    let (server, log) = serve("untrusted", "");
    let seen = get(&server, "/api/a", hex);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0] != hex && seen[0].len() == 32, "{seen:?}");
    let rule = get(&server, "/rule/b", hex);
    let lines = wait_for_lines(&log, 2);
    assert_eq!(lines[0], format!("/api/a {}", seen[0]));
    let logged = lines[1].strip_prefix("/rule/b ").unwrap();
    assert_eq!(rule, [format!("req-{logged}")]);
    drop(server);
    // Trusted: its id is the request's, sent on and logged.
    let (server, log) = serve("trusted", "\"127.0.0.1\"");
    assert_eq!(get(&server, "/api/c", uuid), [hex]);
    assert_eq!(get(&server, "/api/d", hex), [hex]);
    let fresh = get(&server, "/api/e", "not-an-id");
    assert!(fresh[0].len() == 32 && fresh[0] != hex, "{fresh:?}");
    let lines = wait_for_lines(&log, 3);
    assert_eq!(
        lines,
        [
            format!("/api/c {hex}"),
            format!("/api/d {hex}"),
            format!("/api/e {}", fresh[0]),
        ]
    );
}

/// An origin of one ESI page, `/esi`, that includes `/ok` (answered) and `/broken` (a
/// 500, `onerror="continue"`); nothing is cacheable.
fn esi_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let Some((target, _)) = crate::harness::read_request_head(&mut reader) else {
                continue;
            };
            let (status, extra, body) = match target.as_str() {
                "/esi" => (
                    "200 OK",
                    "Surrogate-Control: content=\"ESI/1.0\"\r\n",
                    "<p><esi:include src=\"/ok\"/><esi:include src=\"/broken\" onerror=\"continue\"/></p>",
                ),
                "/ok" => ("200 OK", "", "ok"),
                _ => ("500 Internal Server Error", "", "broken"),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\n{extra}Cache-Control: no-store\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// `%{esi_fragments}x` and `%{esi_failed}x`: an assembled page logs how many includes it
/// had and which failed; a response that is no page logs `-`.
#[test]
fn an_esi_page_logs_its_fragments_and_the_failed_one() {
    let format = "%U %{esi_fragments}x %{esi_failed}x";
    let (_site, server, log) = logged_proxy(esi_origin(), format, "prefix = \"/\"");
    let page = server.get("/esi");
    assert_eq!(page.status, 200);
    assert_eq!(String::from_utf8_lossy(&page.body), "<p>ok</p>");
    assert_eq!(server.get("/ok").status, 200);
    let lines = wait_for_lines(&log, 2);
    // The failed include by its URL, resolved against the page.
    assert_eq!(lines, ["/esi 2 http://test/broken", "/ok - -"]);
}

/// `tessera logs report` lists the ESI includes that failed, from a JSON log's
/// `esi_failed` and from a format string's `%{esi_failed}x`, in its text, `--json` and
/// `--html` forms alike.
#[test]
fn the_report_lists_failing_esi_fragments() {
    let origin = esi_origin();
    for (format, report_format) in [
        ("json", "auto"),
        ("%U \\\"%{esi_failed}x\\\"", "%U \"%{esi_failed}x\""),
    ] {
        let site = Site::new();
        let log = site.dir.path().join("access.log");
        let server = site.serve_with(&format!(
            r#"
            access_log = {log:?}
            access_log_format = "{format}"
            json_fields = ["uri", "status", "esi_fragments", "esi_failed"]

            [[upstream]]
            name = "origin"
            addresses = ["{origin}"]

            [[route]]
            prefix = "/"
            upstream = "origin"
            "#,
            log = log.display().to_string(),
        ));
        for _ in 0..3 {
            assert_eq!(server.get("/esi").status, 200);
        }
        assert_eq!(wait_for_lines(&log, 3).len(), 3);
        let tessera = |args: &[&str]| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args(["logs", "report", "--format", report_format])
                .args(args)
                .arg(&log)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let report: serde_json::Value = serde_json::from_str(&tessera(&["--json"])).unwrap();
        assert_eq!(
            report["failing_esi_fragments"],
            serde_json::json!([{"fragment": "http://test/broken", "failures": 3}]),
            "{format}: {report}"
        );
        let text = tessera(&[]);
        let table = text
            .split("Failing ESI fragments")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"));
        assert!(table.contains("3  http://test/broken"), "{text}");
        let html = site.dir.path().join("report.html");
        tessera(&["--html", html.to_str().unwrap()]);
        let html = std::fs::read_to_string(html).unwrap();
        assert!(html.contains("Failing ESI fragments"), "{format}");
        assert!(html.contains("http://test/broken"), "{format}");
    }
}

/// A proxied request's line shows its header fields as the client sent them, not as the
/// route's `request_headers` edited them for the origin (the head kept for the log is
/// the one parsed, not the edited view).
#[test]
fn a_proxied_line_logs_the_request_as_received() {
    let route = "prefix = \"/api\"\nrequest_headers = { remove = [\"Cookie\"] }";
    let (_site, server, log) = logged_proxy(echo_origin(), "%U|%{Cookie}i", route);
    let raw = b"GET /api/x HTTP/1.1\r\nHost: test\r\nCookie: a=1\r\nConnection: close\r\n\r\n";
    let answer = String::from_utf8_lossy(&server.exchange(raw)).to_string();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("cookie: a=1"),
        "{answer}"
    );
    let lines = wait_for_lines(&log, 1);
    assert_eq!(lines, ["/api/x|a=1"]);
}
