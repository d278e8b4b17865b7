//! Exact output of the report for a small crafted log holding every awkward line: an own
//! referrer (in another case), IPv6 and host-name clients, `-` sizes, escaped quotes in the
//! request and the user agent, a CRLF line, a blank line, a `-` request, malformed lines,
//! a second day, and no final newline.

use logs::{Input, LogFormat, ReportQuery};

const TRICKY: &[u8] = include_bytes!("../data/tricky.log");

fn tricky_report() -> logs::Report {
    let query = ReportQuery::new(
        LogFormat::new("combined").unwrap(),
        &["www.example.com".into()],
    );
    query.analyse_block(TRICKY).report(&query, 10)
}

#[test]
fn tricky_log_text_report() {
    let text = logs::render::text(&tricky_report());
    let expected = include_str!("../data/tricky.report.txt");
    assert!(text == expected, "got:\n{text}\nexpected:\n{expected}");
}

#[test]
fn tricky_log_summary_numbers() {
    let r = tricky_report();
    // 11 lines, one blank: 10 read, of which 2 malformed.
    assert_eq!((r.lines, r.hits, r.malformed), (10, 8, 2));
    assert_eq!(r.bytes, 1000 + 500 + 120 + 2000 + 120);
    // (client, day, agent): 192.0.2.1 counts once per day; 198.51.100.4 once per agent.
    assert_eq!(r.visitors, 7);
    let referrers: Vec<&str> = r.top_referrers.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(
        referrers,
        [
            "https://www.google.com/search?q=x",
            "https://news.example.org/"
        ]
    );
}

#[test]
fn own_site_is_recognised_from_the_vhost_field() {
    let log = br#"www.example.com:443 10.0.0.1 - - [21/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 1 "https://www.example.com/a" "ua"
blog.example.com:443 10.0.0.1 - - [21/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 1 "https://www.example.com/a" "ua"
"#;
    let query = ReportQuery::new(LogFormat::new("vcombined").unwrap(), &[]);
    let r = query.analyse_block(log).report(&query, 10);
    // From www to blog is a referral; from www to www is not.
    assert_eq!(r.top_referrers.len(), 1);
    assert_eq!(r.top_referrers[0].hits, 1);
}

#[test]
fn html_report_is_self_contained() {
    let html = logs::render::html(&tricky_report());
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.ends_with("</html>\n"));
    for needle in [
        "<svg",
        "Hits per hour",
        "Top 404 URLs",
        "/missing",
        "bot \\&quot;quoted\\&quot; 1.0",
    ] {
        assert!(html.contains(needle), "missing {needle}");
    }
    for forbidden in ["<script", " src=", "<link", "@import", "url("] {
        assert!(
            !html.contains(forbidden),
            "HTML must not load anything: found {forbidden}"
        );
    }
}

#[test]
fn tricky_log_streamed_from_gzip_matches() {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::write_file(&dir, "tricky.log.gz", &crate::gzip(TRICKY));
    let query = ReportQuery::new(
        LogFormat::new("combined").unwrap(),
        &["www.example.com".into()],
    );
    let mut opened = logs::open(&[Input::Path(path)]).unwrap();
    let analysis = query
        .run(&mut opened, &crate::many_chunks(2, 1), None)
        .unwrap();
    assert_eq!(analysis.report(&query, 10), tricky_report());
}

#[test]
fn own_site_is_inferred_from_referrers_to_served_pages() {
    let line = |path: &str, referrer: &str| {
        format!(
            r#"10.0.0.1 - - [21/Nov/2026:10:00:00 +0000] "GET {path} HTTP/1.1" 200 1 "{referrer}" "ua""#
        )
    };
    let log = [
        line("/a", "https://search.example/"),
        line("/b", "https://Blog.Example.org/a"),
        line("/c", "https://blog.example.org/b"),
        line("/a", "https://blog.example.org/c?x=1"),
        line("/a", "https://blog.example.org:8443/d"),
        line("/b", "https://search.example/?q=b"),
        line("/c", "https://search.example/?q=c"),
    ]
    .join("\n");
    let query = ReportQuery::new(LogFormat::new("combined").unwrap(), &[]);
    let r = query.analyse_block(log.as_bytes()).report(&query, 10);
    // blog.example.org (any case, any port) sent four URLs, two of them (/a, /b) pages this
    // log served: half, so it is the site. search.example sent three, none served here.
    assert_eq!(r.own_hosts, ["blog.example.org"]);
    let referrers: Vec<&str> = r.top_referrers.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(
        referrers,
        [
            "https://search.example/",
            "https://search.example/?q=b",
            "https://search.example/?q=c"
        ]
    );
}

/// nginx's variables for the upstream, the cache, the time and the host, as an nginx
/// `log_format` writes them (a retry lists both attempts).
const NGINX_UPSTREAM: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time "$upstream_addr" "$upstream_status" "$upstream_response_time" "$upstream_cache_status" "$host""#;

const UPSTREAM_LOG: &[u8] = br#"192.0.2.1 - - [21/Nov/2026:10:00:00 +0000] "GET /api/users?id=1 HTTP/1.1" 200 120 "-" "a" 0.012 "10.0.0.1:8080" "200" "0.011" "MISS" "api.example.com"
192.0.2.2 - - [21/Nov/2026:10:00:01 +0000] "GET /api/users?id=2 HTTP/1.1" 200 120 "-" "a" 0.002 "-" "-" "-" "HIT" "api.example.com"
192.0.2.3 - - [21/Nov/2026:10:00:02 +0000] "GET /api/orders HTTP/1.1" 502 0 "-" "a" 3.001 "10.0.0.1:8080, 10.0.0.2:8080" "502, 504" "0.001, 3.000" "-" "api.example.com"
192.0.2.4 - - [21/Nov/2026:10:00:03 +0000] "GET /index.html HTTP/1.1" 404 10 "-" "a" 0.000 "-" "-" "-" "-" "www.example.com"
"#;

#[test]
fn sections_from_nginx_upstream_cache_and_time_variables() {
    let query = ReportQuery::new(LogFormat::new(NGINX_UPSTREAM).unwrap(), &[]);
    let r = query.analyse_block(UPSTREAM_LOG).report(&query, 10);
    assert_eq!((r.hits, r.malformed), (4, 0));
    let s = serde_json::to_value(&r.sections).unwrap();
    assert_eq!(
        s["hosts"],
        serde_json::json!([
            {"host": "api.example.com", "hits": 3, "bytes": 240, "client_errors": 0, "server_errors": 1},
            {"host": "www.example.com", "hits": 1, "bytes": 10, "client_errors": 1, "server_errors": 0},
        ])
    );
    // /api/ took 2 ms, 12 ms and 3.001 s: each percentile is the top of its bucket, within
    // a sixteenth above the value, and never above the largest.
    let api = &s["slowest_routes"][0];
    assert_eq!(
        (api["route"].as_str(), api["hits"].as_u64()),
        (Some("/api/"), Some(3))
    );
    let p50 = api["p50_us"].as_u64().unwrap();
    assert!((12_000..=12_750).contains(&p50), "{p50}");
    assert_eq!(
        (api["p95_us"].as_u64(), api["max_us"].as_u64()),
        (Some(3_001_000), Some(3_001_000))
    );
    assert_eq!(s["slowest_routes"][1]["route"], "/index.html");
    // One line with a retry: two attempts, one per peer; the first peer answered twice.
    let peers = &s["upstream_peers"];
    assert_eq!(peers[0]["peer"], "10.0.0.1:8080");
    assert_eq!(
        (
            peers[0]["attempts"].as_u64(),
            peers[0]["status_2xx"].as_u64(),
            peers[0]["status_5xx"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(peers[1]["peer"], "10.0.0.2:8080");
    let p50 = peers[1]["p50_us"].as_u64().unwrap();
    assert_eq!((peers[1]["status_5xx"].as_u64(), p50), (Some(1), 3_000_000));
    assert_eq!(
        s["cache_by_route"],
        serde_json::json!([{
            "route": "/api/", "total": 2, "served_from_cache": 1,
            "results": [{"key": "hit", "hits": 1}, {"key": "miss", "hits": 1}]
        }])
    );
    let text = logs::render::text(&r);
    for title in [
        "By host",
        "Slowest routes",
        "Upstream peers",
        "Cache by route",
    ] {
        assert!(text.contains(title), "{title} missing:\n{text}");
    }
    assert!(logs::render::html(&r).contains("<h2>Upstream peers</h2>"));
}

#[test]
fn sections_from_tessera_json_lines_use_the_route_field() {
    let log = br#"{"time":"2026-11-28T08:00:00Z","client":"127.0.0.1","host":"a.test","route":"route[1]","method":"GET","uri":"/x/1","status":200,"bytes_sent":100,"body_bytes_sent":12,"duration":0.000250}
{"time":"2026-11-28T08:00:01Z","client":"127.0.0.1","host":"a.test","route":"route[1]","method":"GET","uri":"/x/2","status":200,"bytes_sent":100,"body_bytes_sent":12,"duration":0.004000}
{"time":"2026-11-28T08:00:02Z","client":"127.0.0.1","host":"b.test","route":null,"method":"GET","uri":"/y/3","status":500,"bytes_sent":100,"body_bytes_sent":12,"duration":0.000100}
"#;
    let query = ReportQuery::new(LogFormat::json(), &[]);
    let r = query.analyse_block(log).report(&query, 10);
    let routes: Vec<(&str, u64, u64)> = r
        .sections
        .slowest_routes
        .iter()
        .map(|l| (l.route.as_str(), l.hits, l.max_us))
        .collect();
    assert_eq!(routes, [("route[1]", 2, 4_000), ("/y/", 1, 100)]);
    let hosts: Vec<(&str, u64, u64)> = r
        .sections
        .hosts
        .iter()
        .map(|h| (h.host.as_str(), h.hits, h.server_errors))
        .collect();
    assert_eq!(hosts, [("a.test", 2, 0), ("b.test", 1, 1)]);
    assert!(r.sections.upstream_peers.is_empty() && r.sections.cache_by_route.is_empty());
}

#[test]
fn a_plain_combined_log_has_no_sections() {
    let r = tricky_report();
    assert_eq!(r.sections, logs::sections::SectionsReport::default());
    assert!(!logs::render::text(&r).contains("Slowest routes"));
}
