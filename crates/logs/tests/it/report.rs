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
