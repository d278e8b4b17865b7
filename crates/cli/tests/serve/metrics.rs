//! The admin listener: `/metrics` checked by promtool and scraped by a real Prometheus,
//! `/healthz`, and who may connect.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

/// The directory holding `promtool` and `prometheus` (scripts/test.sh fetches them).
fn prometheus_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("TESSERA_PROMETHEUS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
            cache.join("tessera-test/prometheus/usr/bin")
        });
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/test.sh, which fetches it",
        path.display()
    );
    path
}

/// `promtool check metrics` on `text` finds nothing wrong.
pub(crate) fn promtool_check(text: &str) {
    let mut promtool = Command::new(prometheus_bin("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The admin address from the start-up line.
pub(crate) fn admin_addr(server: &Server) -> SocketAddr {
    eventually("the admin line", || stderr_has(server, "admin on http://"));
    let lines = server.stderr.lock().unwrap();
    let line = lines
        .iter()
        .find(|l| l.contains("admin on http://"))
        .unwrap();
    let rest = &line[line.find("http://").unwrap() + 7..];
    rest[..rest.find('/').unwrap()].parse().unwrap()
}

/// One request to the admin listener: (status, body).
pub(crate) fn admin_get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: admin\r\n{extra}\r\n").unwrap();
    let r = read_response(&mut stream, false);
    (r.status, String::from_utf8(r.body).unwrap())
}

/// `name{labels}` -> value, for every sample.
pub fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap();
            (key.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// The sum of the samples whose key starts with `prefix` and contains every `part`.
pub fn sum(samples: &HashMap<String, f64>, prefix: &str, parts: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with(prefix) && parts.iter().all(|p| k.contains(p)))
        .map(|(_, v)| v)
        .sum()
}

/// A site with a file, a Lua handler at /lua, and a proxy at /p to a Lua origin at
/// /origin (its pages cacheable for a minute), with the admin listener on.
fn site_with_everything(extra: &str) -> (Site, Server) {
    let site = Site::new();
    site.write("hello.txt", b"hello\n");
    let dir = site.dir.path();
    std::fs::write(
        dir.join("lua.lua"),
        "return { content = function(r) if r:arg('sleep') then tessera.sleep(2) end return 'hi' end }",
    )
    .unwrap();
    // /p/esi: an ESI page (not stored) including /p/frag and /p/broken (a 500, its
    // include `onerror="continue"`).
    std::fs::write(
        dir.join("origin.lua"),
        "return { content = function(r)\n\
           local p = r:path()\n\
           if p:find('esi') then\n\
             r:set_header('Surrogate-Control', 'content=\"ESI/1.0\"')\n\
             return [[<p><esi:include src=\"/p/frag\"/>|<esi:include src=\"/p/broken\" onerror=\"continue\"/></p>]]\n\
           end\n\
           if p:find('frag') then return 'F' end\n\
           if p:find('broken') then r:set_status(500) return 'down' end\n\
           r:set_header('Cache-Control', 'max-age=60') return 'page' end }",
    )
    .unwrap();
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n{extra}\n\
         [[upstream]]\nname = \"o\"\naddresses = [\"self\"]\npath_prefix = \"/origin\"\n\n\
         [[route]]\nprefix = \"/p\"\nupstream = \"o\"\n\n\
         [[script]]\nprefix = \"/lua\"\npath = \"{d}/lua.lua\"\n\n\
         [[script]]\nprefix = \"/origin\"\npath = \"{d}/origin.lua\"\n",
        d = dir.display()
    ));
    (site, server)
}

#[test]
fn metrics_count_exactly_what_was_sent_and_pass_promtool() {
    // A request-limit zone no route names: its families are listed, at zero.
    let (_site, server) = site_with_everything("[[limit]]\nname = \"spare\"\nrate = \"100r/s\"\n");
    let admin = admin_addr(&server);
    let etag = server.get("/hello.txt").header("etag").unwrap().to_string();
    for _ in 0..2 {
        assert_eq!(server.get("/hello.txt").status, 200);
    }
    let mut stream = server.connect();
    write!(
        stream,
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    assert_eq!(read_response(&mut stream, true).status, 304);
    for _ in 0..2 {
        assert_eq!(server.get("/missing").status, 404);
    }
    assert_eq!(server.get("/lua").body, b"hi");
    // A miss (the origin asked, through this server: one script request more), a hit.
    assert_eq!(server.get("/p/x").body, b"page");
    assert_eq!(server.get("/p/x").body, b"page");
    let refused = server.exchange(b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n");
    assert!(refused.starts_with(b"HTTP/1.1 400"));
    // An ESI page with one fragment that fails (three upstream requests, and three
    // script requests answering them).
    assert_eq!(server.get("/p/esi").body, b"<p>F|</p>");
    let mut stream = server.connect();
    write!(
        stream,
        "HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    assert_eq!(read_response(&mut stream, true).status, 200);

    // A proxied response is counted once its last byte is written, which may be just
    // after the client has read it.
    let mut text = String::new();
    eventually("the ESI page counted", || {
        text = admin_get(admin, "/metrics", "").1;
        text.contains("kind=\"esi\"")
    });
    let (status, text) = admin_get(admin, "/metrics", "");
    assert_eq!(status, 200);
    let s = samples(&text);
    let requests = "tessera_requests_total{";
    let host = "host=\"default\"";
    let static_ok = sum(&s, requests, &[host, "kind=\"static\"", "2xx"]);
    assert_eq!(static_ok, 4.0, "{text}");
    assert_eq!(sum(&s, requests, &[host, "kind=\"static\"", "3xx"]), 1.0);
    assert_eq!(sum(&s, requests, &[host, "kind=\"static\"", "4xx"]), 2.0);
    assert_eq!(
        sum(&s, requests, &["kind=\"static\"", "method=\"HEAD\""]),
        1.0
    );
    assert_eq!(
        sum(&s, requests, &["kind=\"static\"", "method=\"GET\""]),
        6.0
    );
    assert_eq!(sum(&s, requests, &[host, "kind=\"script\"", "2xx"]), 4.0);
    assert_eq!(sum(&s, requests, &[host, "kind=\"script\"", "5xx"]), 1.0);
    assert_eq!(sum(&s, requests, &[host, "kind=\"proxy\"", "2xx"]), 2.0);
    assert_eq!(sum(&s, requests, &[host, "kind=\"esi\"", "2xx"]), 1.0);
    let scrapes = sum(&s, requests, &["kind=\"admin\""]);
    assert_eq!(sum(&s, requests, &[]) - scrapes, 15.0);
    assert_eq!(sum(&s, "tessera_refused_requests_total", &[]), 1.0);
    let count = "tessera_request_duration_seconds_count";
    assert_eq!(sum(&s, count, &["static"]), 7.0);
    assert_eq!(sum(&s, count, &["script"]), 5.0);
    assert_eq!(sum(&s, count, &["proxy"]), 2.0);
    assert_eq!(sum(&s, count, &["esi"]), 1.0);
    let inf = "tessera_request_duration_seconds_bucket{kind=\"static\",le=\"+Inf\"}";
    assert_eq!(s[inf], 7.0);
    assert_eq!(s["tessera_cache_requests_total{result=\"hit\"}"], 1.0);
    // Misses: /p/x (stored) and the failing fragment; passes: the ESI page and its good
    // fragment, which may not be stored (no Cache-Control).
    assert_eq!(s["tessera_cache_requests_total{result=\"miss\"}"], 2.0);
    assert_eq!(s["tessera_cache_requests_total{result=\"pass\"}"], 2.0);
    // The same counts, named as Cache-Status names them.
    for (result, n) in [
        ("hit", 1.0),
        ("miss", 2.0),
        ("bypass", 2.0),
        ("collapsed", 0.0),
    ] {
        assert_eq!(
            s[&format!("tessera_cache_lookups_total{{result=\"{result}\"}}")],
            n
        );
    }
    assert_eq!(s["tessera_cache_stores_total"], 1.0);
    let upstream = |outcome: &str| {
        s[&format!("tessera_upstream_requests_total{{upstream=\"o\",outcome=\"{outcome}\"}}")]
    };
    assert_eq!(upstream("response"), 3.0);
    assert_eq!(upstream("server_error"), 1.0);
    assert_eq!(s["tessera_esi_pages_total{result=\"complete\"}"], 1.0);
    assert_eq!(sum(&s, "tessera_esi_pages_total{", &[]), 1.0);
    assert_eq!(s["tessera_esi_fragments_total{result=\"ok\"}"], 1.0);
    assert_eq!(s["tessera_esi_fragments_total{result=\"error\"}"], 1.0);
    assert_eq!(sum(&s, "tessera_esi_fragments_total{", &[]), 2.0);
    assert_eq!(s["tessera_esi_fragment_seconds_count"], 2.0);
    let failures = "tessera_esi_include_failures_total";
    assert_eq!(s[&format!("{failures}{{outcome=\"continue\"}}")], 1.0);
    assert_eq!(sum(&s, failures, &[]), 1.0);
    assert_eq!(s["tessera_config_generation"], 1.0);
    assert!(s["tessera_connections_capacity"] >= 1.0);
    assert_eq!(
        sum(&s, "tessera_limit_requests_total{zone=\"spare\"", &[]),
        0.0
    );
    assert_eq!(s["tessera_limit_keys{zone=\"spare\"}"], 0.0);
    let denied = "tessera_access_denied_total{host=\"\",reason=\"limit_conn\"}";
    assert_eq!(s[denied], 0.0);

    // promtool finds nothing wrong.
    promtool_check(&text);

    // The scrape itself is counted, as kind="admin", by the next one.
    let (_, text) = admin_get(
        admin,
        "/metrics",
        "Accept: application/openmetrics-text\r\n",
    );
    assert!(text.ends_with("# EOF\n"));
    let s = samples(&text);
    assert_eq!(sum(&s, requests, &["kind=\"admin\""]), scrapes + 1.0);
}

#[test]
fn label_values_stay_bounded_whatever_the_paths() {
    let (_site, server) = site_with_everything("");
    let admin = admin_addr(&server);
    // 10,000 paths and hosts, pipelined on one connection (the last one closes it).
    let mut stream = server.connect();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut batch = Vec::new();
        for i in 0..10_000 {
            let close = if i == 9_999 {
                "Connection: close\r\n"
            } else {
                ""
            };
            write!(
                batch,
                "GET /missing/{i}?q={i} HTTP/1.1\r\nHost: h{i}.test\r\n{close}\r\n"
            )
            .unwrap();
            if batch.len() > 32 * 1024 {
                writer.write_all(&batch).unwrap();
                batch.clear();
            }
        }
        writer.write_all(&batch).unwrap();
    });
    let all = read_to_close(&mut stream);
    sender.join().unwrap();
    let answered = all.windows(13).filter(|w| w == b"HTTP/1.1 404 ").count();
    assert_eq!(answered, 10_000);
    let (_, text) = admin_get(admin, "/metrics", "");
    let lines = text
        .lines()
        .filter(|l| l.starts_with("tessera_requests_total"))
        .count();
    assert_eq!(lines, 1, "{text}");
    assert!(text.len() < 32 * 1024, "{} bytes", text.len());
}

#[test]
fn the_admin_listener_admits_only_the_clients_allowed() {
    let token = "0123456789abcdef0123";
    let (site, server) = site_with_everything(&format!(
        "admin_allow = [\"192.0.2.1\"]\nadmin_token = \"{token}\"\n"
    ));
    let admin = admin_addr(&server);
    // admin_allow is the whole list: loopback is not in it.
    assert_eq!(admin_get(admin, "/metrics", "").0, 403);
    assert_eq!(admin_get(admin, "/healthz", "").0, 403);
    let bearer = format!("Authorization: Bearer {token}\r\n");
    assert_eq!(admin_get(admin, "/metrics", &bearer).0, 200);
    assert_eq!(
        admin_get(
            admin,
            "/metrics",
            "Authorization: Bearer wrong-token-0000\r\n"
        )
        .0,
        403
    );
    // The public listener does not serve the admin paths.
    assert_eq!(server.get("/metrics").status, 404);

    // A non-loopback admin address needs admin_allow or admin_token.
    let config = site.dir.path().join("open.toml");
    std::fs::write(&config, "admin_listen = \"0.0.0.0:9145\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["check-config", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("admin_listen"), "{stderr}");
}

#[test]
fn healthz_turns_503_during_a_graceful_shutdown() {
    let (_site, server) = site_with_everything("");
    let admin = admin_addr(&server);
    assert_eq!(admin_get(admin, "/healthz", ""), (200, "ok\n".to_string()));
    // A request in flight keeps the server shutting down for a while.
    let mut slow = server.connect();
    write!(slow, "GET /lua?sleep=1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    server.signal(libc::SIGTERM);
    eventually("503 from /healthz", || {
        admin_get(admin, "/healthz", "").0 == 503
    });
    assert_eq!(read_response(&mut slow, false).body, b"hi");
}

#[test]
fn a_real_prometheus_scrapes_every_request() {
    let (site, server) = site_with_everything("");
    let admin = admin_addr(&server);
    for _ in 0..7 {
        assert_eq!(server.get("/hello.txt").status, 200);
    }
    assert_eq!(server.get("/missing").status, 404);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = site.dir.path().join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tessera\n    \
             static_configs:\n      - targets: [\"{admin}\"]\n"
        ),
    )
    .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _prometheus = Kill(
        Command::new(prometheus_bin("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let query = |q: &str| -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let q: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        write!(
            stream,
            "GET /api/v1/query?query={q} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let bytes = read_to_close(&mut stream);
        Some(String::from_utf8_lossy(&bytes).into_owned())
    };
    eventually("Prometheus to see the target up", || {
        query("up{job=\"tessera\"}").is_some_and(|r| r.contains("\"1\"]"))
    });
    eventually("Prometheus to count the 8 requests", || {
        query("sum(tessera_requests_total{kind!=\"admin\"})").is_some_and(|r| r.contains(",\"8\"]"))
    });
}

/// `/status.json`: the sum of the samples named `name` whose labels include every pair.
pub(crate) fn json_sum(doc: &serde_json::Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    doc["families"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .filter(|s| s["name"] == name)
        .filter(|s| labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

pub(crate) fn status_json(admin: SocketAddr) -> serde_json::Value {
    let (status, body) = admin_get(admin, "/status.json", "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn status_json_figures_move_with_the_requests_sent() {
    let (_site, server) = site_with_everything("");
    let admin = admin_addr(&server);
    let before = status_json(admin);
    for _ in 0..3 {
        assert_eq!(server.get("/hello.txt").status, 200);
    }
    assert_eq!(server.get("/missing").status, 404);
    // A miss (the origin asked through this server: one script request), then a hit.
    assert_eq!(server.get("/p/x").body, b"page");
    assert_eq!(server.get("/p/x").body, b"page");
    // A proxied response is counted once its last byte is written, which may be just
    // after the client has read it: ask again until both proxied ones are in.
    let mut scrapes = 1;
    let mut after = status_json(admin);
    let proxy_ok = [("kind", "proxy"), ("code", "2xx")];
    eventually("the proxied requests counted", || {
        if json_sum(&after, "tessera_requests_total", &proxy_ok) < 2.0 {
            after = status_json(admin);
            scrapes += 1;
            return false;
        }
        true
    });

    assert!(after["time"].as_f64().unwrap() >= before["time"].as_f64().unwrap());
    let moved = |name: &str, labels: &[(&str, &str)]| {
        json_sum(&after, name, labels) - json_sum(&before, name, labels)
    };
    let requests = "tessera_requests_total";
    let static_ok = [("kind", "static"), ("code", "2xx"), ("host", "default")];
    assert_eq!(moved(requests, &static_ok), 3.0);
    assert_eq!(moved(requests, &[("kind", "static"), ("code", "4xx")]), 1.0);
    assert_eq!(moved(requests, &[("kind", "proxy"), ("code", "2xx")]), 2.0);
    assert_eq!(moved(requests, &[("kind", "script"), ("code", "2xx")]), 1.0);
    // Each /status.json is counted by the time the next one is rendered.
    assert_eq!(moved(requests, &[("kind", "admin")]), scrapes as f64);
    let count = "tessera_request_duration_seconds_count";
    let kinds = ["static", "proxy", "script"];
    let durations: f64 = kinds.iter().map(|k| moved(count, &[("kind", k)])).sum();
    assert_eq!(durations, 7.0);
    let inf = [("kind", "static"), ("le", "+Inf")];
    assert_eq!(moved("tessera_request_duration_seconds_bucket", &inf), 4.0);
    let cache = "tessera_cache_requests_total";
    assert_eq!(moved(cache, &[("result", "miss")]), 1.0);
    assert_eq!(moved(cache, &[("result", "hit")]), 1.0);
    let upstream = [("upstream", "o"), ("outcome", "response")];
    assert_eq!(moved("tessera_upstream_requests_total", &upstream), 1.0);
    let head = [("upstream", "o")];
    assert_eq!(moved("tessera_upstream_response_seconds_count", &head), 1.0);
    assert_eq!(json_sum(&after, "tessera_config_generation", &[]), 1.0);
    assert!(json_sum(&after, "tessera_connections_capacity", &[]) > 0.0);
    let families = after["families"].as_array().unwrap();
    let connections = families
        .iter()
        .find(|f| f["name"] == "tessera_connections")
        .unwrap();
    assert_eq!(connections["type"], "gauge");
    assert_eq!(connections["samples"].as_array().unwrap().len(), 6);
}

#[test]
fn status_page_is_html_with_nothing_from_other_hosts() {
    let (_site, server) = site_with_everything("");
    let admin = admin_addr(&server);
    let mut stream = TcpStream::connect(admin).unwrap();
    write!(stream, "GET /status HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
    let page = read_response(&mut stream, false);
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = String::from_utf8(page.body).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<canvas"), "charts drawn on canvases");
    assert!(
        html.contains("fetch(\"status.json\""),
        "fed by /status.json"
    );
    for family in [
        "tessera_requests_total",
        "tessera_request_duration_seconds_bucket",
        "tessera_cache_requests_total",
        "tessera_connections",
        "tessera_upstream_requests_total",
        "tessera_upstream_response_seconds_bucket",
    ] {
        assert!(
            html.contains(&format!("\"{family}\"")),
            "the page charts {family}"
        );
    }
    for outside in [
        "http://",
        "https://",
        "src=\"//",
        "href=\"//",
        "@import",
        "url(",
    ] {
        assert!(!html.contains(outside), "the page names {outside}");
    }
    // Only inline scripts and styles: no src or href attribute at all.
    for attribute in [" src=", " href="] {
        assert!(!html.contains(attribute), "the page has {attribute}");
    }
    // The same page is refused to a client the admin listener does not admit.
    drop(server);
    let (_site, server) = site_with_everything("admin_allow = [\"10.9.9.9\"]");
    let (status, _) = admin_get(admin_addr(&server), "/status", "");
    assert_eq!(status, 403);
}

/// Every PromQL expression of docs/grafana-dashboard.json: its panels' targets and its
/// template variables' queries.
fn dashboard_expressions(dashboard: &serde_json::Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "{}",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}");
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let query = variable["query"]["query"].as_str().unwrap();
        // label_values(METRIC, LABEL) is Grafana's, not PromQL: keep the metric.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.split_once(','))
            .map(|(metric, _)| metric)
            .unwrap_or(query);
        exprs.push(inner.to_string());
    }
    exprs
}

#[test]
fn grafana_dashboard_names_only_what_metrics_exposes() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/grafana-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let inputs = dashboard["__inputs"].as_array().unwrap();
    assert!(inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS"));
    let exprs = dashboard_expressions(&dashboard);

    // What a scrape exposes: sample names and label names. A Redis tier (at an address
    // where nothing listens: its lookups count as errors) so that its figures are there.
    let (_site, server) = site_with_everything("[cache.redis]\nurl = \"redis://127.0.0.1:1\"\n");
    let admin = admin_addr(&server);
    assert_eq!(server.get("/p/x").body, b"page");
    let (_, text) = admin_get(admin, "/metrics", "");
    let s = samples(&text);
    assert!(s.contains_key("tessera_redis_breaker_open"), "{text}");
    let names: std::collections::HashSet<&str> =
        s.keys().map(|k| k.split('{').next().unwrap()).collect();
    let label = regex_lite::Regex::new(r#"[{,]([a-zA-Z_][a-zA-Z0-9_]*)=""#).unwrap();
    let mut labels: std::collections::HashSet<&str> = s
        .keys()
        .flat_map(|k| label.captures_iter(k).map(|c| c.get(1).unwrap().as_str()))
        .collect();
    labels.insert("instance"); // added by Prometheus to every series it scrapes
    labels.insert("job");

    let identifier = regex_lite::Regex::new(r"tessera_[a-zA-Z0-9_:]*").unwrap();
    let matcher = regex_lite::Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*""#).unwrap();
    let grouping = regex_lite::Regex::new(r"\b(?:by|without)\s*\(([^)]*)\)").unwrap();
    let mut used = std::collections::HashSet::new();
    for expr in &exprs {
        let metrics: Vec<&str> = identifier.find_iter(expr).map(|m| m.as_str()).collect();
        assert!(!metrics.is_empty(), "{expr} names no tessera metric");
        for metric in metrics {
            assert!(
                names.contains(metric),
                "{expr}: {metric} is not in /metrics"
            );
            used.insert(metric.to_string());
        }
        let grouped = grouping.captures_iter(expr).flat_map(|c| {
            c[1].split(',')
                .map(|l| l.trim().to_string())
                .collect::<Vec<_>>()
        });
        let matched = matcher.captures_iter(expr).map(|c| c[1].to_string());
        for name in grouped.chain(matched) {
            assert!(labels.contains(name.as_str()), "{expr}: no label {name}");
        }
    }
    for needed in [
        "tessera_requests_total",
        "tessera_request_duration_seconds_bucket",
        "tessera_cache_requests_total",
        "tessera_connections",
        "tessera_refused_requests_total",
        "tessera_reloads_total",
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }

    // Prometheus' own parser accepts every expression (Grafana's variables given values).
    let rules: String = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let e = e
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*");
            format!("      - record: dashboard:expr{i}\n        expr: {e:?}\n")
        })
        .collect();
    let file = _site.dir.path().join("dashboard-rules.yml");
    std::fs::write(
        &file,
        format!("groups:\n  - name: dashboard\n    rules:\n{rules}"),
    )
    .unwrap();
    let out = Command::new(prometheus_bin("promtool"))
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn upstream_requests_count_exactly_by_outcome() {
    let site = Site::new();
    let dir = site.dir.path();
    std::fs::write(
        dir.join("origin.lua"),
        "return { content = function(r)\n\
           if r:path():find('fail') then r:set_status(503) return 'down' end\n\
           r:set_header('Cache-Control', 'max-age=60') return 'page' end }",
    )
    .unwrap();
    // Port 1 on loopback: nothing listens, every connect is refused.
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"o\"\naddresses = [\"self\"]\npath_prefix = \"/origin\"\n\n\
         [[upstream]]\nname = \"down\"\naddresses = [\"127.0.0.1:1\"]\n\n\
         [[route]]\nprefix = \"/p\"\nupstream = \"o\"\n\n\
         [[route]]\nprefix = \"/down\"\nupstream = \"down\"\n\n\
         [[script]]\nprefix = \"/origin\"\npath = \"{}/origin.lua\"\n",
        dir.display()
    ));
    let admin = admin_addr(&server);
    assert_eq!(server.get("/p/x").body, b"page"); // a miss: one request
    assert_eq!(server.get("/p/x").body, b"page"); // a hit: none
    for _ in 0..3 {
        assert_eq!(server.get("/p/fail").status, 503);
    }
    for _ in 0..2 {
        assert_eq!(server.get("/down/x").status, 502);
    }
    let (_, text) = admin_get(admin, "/metrics", "");
    let s = samples(&text);
    let requests = |upstream: &str, outcome: &str| {
        let key = format!(
            "tessera_upstream_requests_total{{upstream=\"{upstream}\",outcome=\"{outcome}\"}}"
        );
        *s.get(&key).unwrap_or_else(|| panic!("{key} in {text}"))
    };
    assert_eq!(requests("o", "response"), 1.0);
    assert_eq!(requests("o", "server_error"), 3.0);
    assert_eq!(requests("down", "connect_error"), 2.0);
    assert_eq!(sum(&s, "tessera_upstream_requests_total{", &[]), 6.0);
    // Every response head is timed, and only those.
    let seconds = "tessera_upstream_response_seconds";
    assert_eq!(s[&format!("{seconds}_count{{upstream=\"o\"}}")], 4.0);
    assert_eq!(
        s[&format!("{seconds}_bucket{{upstream=\"o\",le=\"+Inf\"}}")],
        4.0
    );
    assert_eq!(s[&format!("{seconds}_count{{upstream=\"down\"}}")], 0.0);
    assert!(s[&format!("{seconds}_sum{{upstream=\"o\"}}")] > 0.0);
    // The proxy's requests are the origin's: 4 answered by the script.
    let script = sum(&s, "tessera_requests_total{", &["kind=\"script\""]);
    assert_eq!(script, 4.0);
}

/// One whole response as it came (head and a Content-Length body), raw.
fn read_raw(stream: &mut TcpStream, head_only: bool) -> Vec<u8> {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "closed mid-head");
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    if !head_only {
        let start = raw.len();
        raw.resize(start + length, 0);
        stream.read_exact(&mut raw[start..]).unwrap();
    }
    raw
}

#[test]
fn bytes_connections_methods_file_cache_and_log_lines_count_exactly() {
    let site = Site::new();
    site.write("hello.txt", b"hello\n");
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\nmax_connections = 2\nfile_cache_valid_ms = 600000\n\
         access_log = \"{}\"\n[timeouts]\nhead = 2\nidle = 2\n",
        log.display()
    ));
    let admin = admin_addr(&server);
    let (mut received, mut sent) = (0, 0);
    let mut exchange = |stream: &mut TcpStream, request: &str, head_only: bool| {
        stream.write_all(request.as_bytes()).unwrap();
        received += request.len();
        let response = read_raw(stream, head_only);
        sent += response.len();
        response
    };
    // Two keep-alive connections fill the two slots; a third evicts the oldest idle one.
    let get = "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut first = server.connect();
    assert!(exchange(&mut first, get, false).ends_with(b"\r\n\r\nhello\n"));
    let mut second = server.connect();
    exchange(
        &mut second,
        "HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        true,
    );
    let mut third = server.connect();
    let post = "POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi";
    assert!(exchange(&mut third, post, false).starts_with(b"HTTP/1.1 405"));
    assert_eq!(
        read_to_close(&mut first),
        b"",
        "the oldest idle one was evicted"
    );
    exchange(
        &mut third,
        "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n",
        false,
    );
    exchange(
        &mut third,
        "DELETE /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        false,
    );
    // The idle ones time out; then one that never finishes its head.
    assert_eq!(read_to_close(&mut second), b"");
    assert_eq!(read_to_close(&mut third), b"");
    let mut slow = server.connect();
    slow.write_all(b"GET /hello.txt HTTP/1.1\r\n").unwrap();
    received += 25;
    assert_eq!(read_to_close(&mut slow), b"");

    let mut text = String::new();
    eventually("the access log lines written", || {
        text = admin_get(admin, "/metrics", "").1;
        samples(&text)["tessera_access_log_lines_total"] == 5.0
    });
    let s = samples(&text);
    let requests = "tessera_requests_total{";
    let method = |m: &str| {
        sum(
            &s,
            requests,
            &["kind=\"static\"", &format!("method=\"{m}\"")],
        )
    };
    assert_eq!(method("GET"), 2.0, "{text}");
    assert_eq!(method("HEAD"), 1.0);
    assert_eq!(method("POST"), 1.0);
    assert_eq!(method("DELETE"), 1.0);
    assert_eq!(sum(&s, requests, &["kind=\"static\""]), 5.0);
    assert_eq!(s["tessera_received_bytes_total"], received as f64);
    assert_eq!(s["tessera_sent_bytes_total"], sent as f64);
    assert_eq!(s["tessera_connections_accepted_total"], 4.0);
    let closed =
        |reason: &str| s[&format!("tessera_connections_closed_total{{reason=\"{reason}\"}}")];
    assert_eq!(closed("evicted"), 1.0);
    assert_eq!(closed("idle_timeout"), 2.0);
    assert_eq!(closed("head_timeout"), 1.0);
    assert_eq!(closed("body_timeout") + closed("write_timeout"), 0.0);
    assert_eq!(s["tessera_accept_pauses_total"], 0.0);
    // The first GET opened the file, the HEAD found it cached, the 404 looked on disk
    // (a POST or DELETE is refused before any lookup).
    let files = "tessera_open_file_cache_requests_total";
    assert_eq!(s[&format!("{files}{{result=\"hit\"}}")], 1.0);
    assert_eq!(s[&format!("{files}{{result=\"miss\"}}")], 2.0);
    assert_eq!(s["tessera_access_log_dropped_lines_total"], 0.0);
    let lines = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(lines, 5);
}

#[test]
fn cache_stores_evictions_invalidations_and_passes_count_exactly() {
    let site = Site::new();
    let dir = site.dir.path();
    std::fs::write(
        dir.join("origin.lua"),
        "return { content = function(r)\n\
           r:set_header('Cache-Control', 'max-age=60')\n\
           r:set_header('Content-Type', 'image/png')\n\
           if r:path():find('big') then return string.rep('x', 2000) end\n\
           return 'page' end }",
    )
    .unwrap();
    // A 64 KiB memory budget: a hundred 2 KB objects do not fit.
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [cache]\nmax_size = 65536\nmax_object_size = 4096\npurge_allow = [\"127.0.0.1\"]\n\n\
         [[upstream]]\nname = \"o\"\naddresses = [\"self\"]\npath_prefix = \"/origin\"\n\n\
         [[route]]\nprefix = \"/p\"\nupstream = \"o\"\n\n\
         [[script]]\nprefix = \"/origin\"\npath = \"{}/origin.lua\"\n",
        dir.display()
    ));
    let admin = admin_addr(&server);
    for path in ["/p/a", "/p/b1", "/p/b2"] {
        assert_eq!(server.get(path).body, b"page");
    }
    let invalidate = |method: &str, path: &str| {
        let raw = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        let answer = server.exchange(raw.as_bytes());
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{method} {path}");
    };
    invalidate("PURGE", "/p/a");
    invalidate("BAN", "/p/b");
    // Not a method the cache looks up: a pass.
    let post = server.exchange(
        b"POST /p/form HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(post.starts_with(b"HTTP/1.1 200"));
    for i in 0..100 {
        assert_eq!(server.get(&format!("/p/big/{i}")).body.len(), 2000);
    }
    let (_, text) = admin_get(admin, "/metrics", "");
    let s = samples(&text);
    let lookups = |result: &str| s[&format!("tessera_cache_requests_total{{result=\"{result}\"}}")];
    assert_eq!(lookups("miss"), 103.0, "{text}");
    assert_eq!(lookups("pass"), 1.0);
    assert_eq!(lookups("hit"), 0.0);
    assert_eq!(s["tessera_cache_stores_total"], 103.0);
    let invalidations = "tessera_cache_invalidations_total";
    assert_eq!(s[&format!("{invalidations}{{method=\"purge\"}}")], 1.0);
    assert_eq!(s[&format!("{invalidations}{{method=\"ban\"}}")], 1.0);
    let evicted =
        |reason: &str| s[&format!("tessera_cache_evictions_total{{reason=\"{reason}\"}}")];
    assert_eq!(evicted("purge"), 1.0);
    assert_eq!(evicted("ban"), 2.0);
    assert!(evicted("capacity") > 0.0);
    // Every object stored is still there or was let go, once (not compressible, so no
    // Vary marker beside each).
    assert_eq!(
        s["tessera_cache_stores_total"] - evicted("capacity") - evicted("purge") - evicted("ban"),
        s["tessera_cache_objects"]
    );
}

#[test]
fn lua_calls_failures_and_loads_count_exactly() {
    let site = Site::new();
    let dir = site.dir.path();
    std::fs::write(
        dir.join("m.lua"),
        r#"return {
  access = function(r) end,
  content = function(r)
    local p = r:path()
    if p == "/m/error" then local t = nil return t.field end
    if p == "/m/spin" then while true do end end
    if p == "/m/hog" then
      local t = {}
      for i = 1, 1e8 do t[i] = string.rep("x", 65536) .. i end
    end
    return "ok"
  end,
  header_filter = function(r) end,
  log = function(r) end,
}"#,
    )
    .unwrap();
    let config = format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[script]]\nprefix = \"/m\"\npath = \"{}/m.lua\"\ntime_limit = 0.2\nmemory_limit = 8388608\n",
        dir.display()
    );
    let server = site.serve_with(&config);
    let admin = admin_addr(&server);
    assert_eq!(server.get("/m/ok").body, b"ok");
    for path in ["/m/error", "/m/spin", "/m/hog"] {
        assert_eq!(server.get(path).status, 500, "{path}");
    }
    let lua = |text: &str, name: &str, labels: &str| -> f64 {
        samples(text)
            .get(&format!("tessera_lua_{name}{{{labels}}}"))
            .copied()
            .unwrap_or_else(|| panic!("{name}{{{labels}}} in {text}"))
    };
    let mut text = String::new();
    eventually("the log phases", || {
        text = admin_get(admin, "/metrics", "").1;
        lua(&text, "calls_total", "phase=\"log\"") == 4.0
    });
    assert_eq!(lua(&text, "calls_total", "phase=\"access\""), 4.0, "{text}");
    assert_eq!(lua(&text, "calls_total", "phase=\"content\""), 4.0);
    assert_eq!(lua(&text, "calls_total", "phase=\"header_filter\""), 4.0);
    assert_eq!(lua(&text, "calls_total", "phase=\"timer\""), 0.0);
    let errors = |reason: &str| {
        lua(
            &text,
            "errors_total",
            &format!("phase=\"content\",reason=\"{reason}\""),
        )
    };
    assert_eq!(errors("error"), 1.0);
    assert_eq!(errors("time_limit"), 1.0);
    assert_eq!(errors("memory_limit"), 1.0);
    assert_eq!(errors("panic"), 0.0);
    assert_eq!(sum(&samples(&text), "tessera_lua_errors_total", &[]), 3.0);
    assert_eq!(lua(&text, "script_loads_total", "result=\"ok\""), 1.0);

    // A reload loads the script again (when the worker takes the new configuration).
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    assert_eq!(server.get("/m/ok").body, b"ok");
    let (_, text) = admin_get(admin, "/metrics", "");
    assert_eq!(lua(&text, "script_loads_total", "result=\"ok\""), 2.0);
    assert_eq!(lua(&text, "script_loads_total", "result=\"failed\""), 0.0);
    assert_eq!(lua(&text, "calls_total", "phase=\"content\""), 5.0);
}

#[test]
fn upstream_counters_go_on_across_a_reload_that_keeps_the_upstream() {
    let site = Site::new();
    let dir = site.dir.path();
    std::fs::write(
        dir.join("origin.lua"),
        "return { content = function(r) return 'page' end }",
    )
    .unwrap();
    let config = |down: &str, extra: &str| {
        format!(
            "admin_listen = \"127.0.0.1:0\"\n{extra}\n\
             [[upstream]]\nname = \"o\"\naddresses = [\"self\"]\npath_prefix = \"/origin\"\n\n\
             [[upstream]]\nname = \"down\"\naddresses = [\"{down}\"]\n\n\
             [[route]]\nprefix = \"/p\"\nupstream = \"o\"\n\n\
             [[route]]\nprefix = \"/down\"\nupstream = \"down\"\n\n\
             [[script]]\nprefix = \"/origin\"\npath = \"{}/origin.lua\"\n",
            dir.display()
        )
    };
    let server = site.serve_with(&config("127.0.0.1:1", ""));
    let admin = admin_addr(&server);
    for _ in 0..2 {
        assert_eq!(server.get("/p/x").body, b"page");
    }
    assert_eq!(server.get("/down/x").status, 502);
    // `o` stays as it was, `down` moves to another address, something else changes.
    std::fs::write(
        dir.join("tessera.toml"),
        config(
            "127.0.0.1:2",
            "[[route]]\nprefix = \"/q\"\nupstream = \"o\"\n",
        ),
    )
    .unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    assert_eq!(server.get("/p/x").body, b"page");
    assert_eq!(server.get("/down/x").status, 502);
    let (_, text) = admin_get(admin, "/metrics", "");
    let s = samples(&text);
    assert_eq!(s["tessera_config_generation"], 2.0, "{text}");
    let requests = |upstream: &str, outcome: &str| {
        s[&format!(
            "tessera_upstream_requests_total{{upstream=\"{upstream}\",outcome=\"{outcome}\"}}"
        )]
    };
    assert_eq!(requests("o", "response"), 3.0, "{text}");
    assert_eq!(
        s["tessera_upstream_response_seconds_count{upstream=\"o\"}"],
        3.0
    );
    assert_eq!(requests("down", "connect_error"), 1.0);
    assert!(s["tessera_upstream_connections_opened_total{upstream=\"o\"}"] >= 1.0);
}

#[test]
fn tls_handshakes_count_full_resumed_and_failed() {
    use crate::tls::{s_client, TlsSite};
    let tls = TlsSite::start("admin_listen = \"127.0.0.1:0\"", "");
    let admin = admin_addr(&tls.server);
    let session = tls.site.dir.path().join("session.pem");
    let session = session.to_str().unwrap();
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    // -ign_eof: s_client reads on until the server closes, so the ticket is saved.
    for (args, line) in [
        (["-sess_out", session], "New,"),
        (["-sess_in", session], "Reused,"),
    ] {
        let (stdout, err) = s_client(
            tls.https,
            &[&["-tls1_3", "-ign_eof"][..], &args].concat(),
            request,
        );
        let stdout = String::from_utf8_lossy(&stdout);
        assert!(
            stdout.lines().any(|l| l.starts_with(line)),
            "{line} {stdout} {err}"
        );
    }
    // Cleartext HTTP on the TLS port: the handshake fails.
    let mut plain = TcpStream::connect(tls.https).unwrap();
    plain.write_all(request).unwrap();
    let _ = read_to_close(&mut plain);
    let mut text = String::new();
    eventually("the failed handshake", || {
        text = admin_get(admin, "/metrics", "").1;
        samples(&text)["tessera_tls_handshakes_total{result=\"failed\"}"] == 1.0
    });
    let s = samples(&text);
    assert_eq!(
        s["tessera_tls_handshakes_total{result=\"full\"}"], 1.0,
        "{text}"
    );
    assert_eq!(s["tessera_tls_handshakes_total{result=\"resumed\"}"], 1.0);
    assert_eq!(
        sum(&s, "tessera_requests_total{", &["kind=\"static\""]),
        2.0
    );
}
