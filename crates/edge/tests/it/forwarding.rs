//! Header forwarding (RFC 9110 7.6) and the surrogate headers, seen from the origin.

use std::time::Duration;

use crate::origin::{frag, page, Origin, Reply};
use crate::{read_all, request, run};
use edge::Edge;

#[test]
fn page_request_headers_are_forwarded_per_rfc_9110() {
    let origin = Origin::start(&[("/p", frag("plain", 0))]);
    run(async {
        let edge = Edge::new(crate::config(&origin)).unwrap();
        let req = request(
            "/p?q=1",
            &[
                ("connection", "keep-alive, x-hop"),
                ("x-hop", "secret"),
                ("keep-alive", "timeout=5"),
                ("te", "trailers"),
                ("upgrade", "websocket"),
                ("x-forwarded-for", "192.0.2.1"),
                ("x-forwarded-proto", "https"),
                ("via", "1.1 cdn"),
                ("accept", "text/html"),
                ("if-none-match", "\"v1\""),
            ],
        );
        let mut resp = edge.proxy(req).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "plain");
        let seen = origin.seen().pop().unwrap();
        for gone in ["x-hop", "keep-alive", "te", "upgrade"] {
            assert_eq!(seen.header(gone), None, "{gone} forwarded");
        }
        assert!(!seen.header("connection").unwrap_or("").contains("x-hop"));
        assert_eq!(seen.header("host"), Some("site.test"));
        assert_eq!(seen.header("x-forwarded-for"), Some("192.0.2.1, 10.0.0.7"));
        assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
        assert_eq!(seen.header("via"), Some("1.1 cdn, 1.1 tessera"));
        assert_eq!(
            seen.header("surrogate-capability"),
            Some("tessera=\"ESI/1.0\"")
        );
        assert_eq!(seen.header("accept"), Some("text/html"));
        // A GET that may fill the cache asks for the whole object: the client's
        // conditionals are not forwarded (docs/cache.md).
        assert_eq!(seen.header("if-none-match"), None);
    });
    // Without the cache the page request keeps its conditionals (the origin may
    // answer 304).
    let origin = Origin::start(&[("/p", frag("plain", 0))]);
    run(async {
        let mut config = crate::config(&origin);
        config.cache.enabled = false;
        let edge = Edge::new(config).unwrap();
        let req = request("/p", &[("if-none-match", "\"v1\""), ("range", "bytes=0-1")]);
        let mut resp = edge.proxy(req).await.unwrap();
        read_all(&mut resp).await;
        let seen = origin.seen().pop().unwrap();
        assert_eq!(seen.header("if-none-match"), Some("\"v1\""));
        assert_eq!(seen.header("range"), Some("bytes=0-1"));
    });
}

#[test]
fn response_headers_lose_hop_by_hop_and_surrogate_control() {
    let origin = Origin::start(&[
        (
            "/",
            Reply::Ok {
                body: r#"<esi:include src="/f"/>"#.into(),
                delay: Duration::ZERO,
                status: 200,
                esi: true,
                headers: vec![
                    ("x-internal".into(), "1".into()),
                    ("connection".into(), "x-internal".into()),
                    ("etag".into(), "\"page\"".into()),
                    ("cache-control".into(), "max-age=5".into()),
                ],
            },
        ),
        ("/f", frag("f", 0)),
    ]);
    run(async {
        let edge = Edge::new(crate::config(&origin)).unwrap();
        let mut resp = edge.proxy(request("/", &[])).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "f");
        let h = &resp.headers;
        assert!(h.get("surrogate-control").is_none());
        assert!(h.get("x-internal").is_none());
        assert!(h.get("connection").is_none());
        assert!(
            h.get("content-length").is_none(),
            "assembled page: new length"
        );
        assert!(h.get("etag").is_none(), "assembled page: new content");
        assert_eq!(h.get("cache-control"), Some(&b"max-age=5"[..]));
        assert_eq!(h.get("via"), Some(&b"1.1 tessera"[..]));
    });
}

#[test]
fn fragment_requests_drop_conditionals_ranges_and_body_headers() {
    let origin = Origin::start(&[
        ("/", page(r#"<esi:include src="/f"/>"#)),
        ("/f", frag("f", 0)),
    ]);
    run(async {
        let edge = Edge::new(crate::config(&origin)).unwrap();
        let req = request(
            "/",
            &[
                ("if-none-match", "\"v1\""),
                ("if-modified-since", "Sat, 01 Jan 2000 00:00:00 GMT"),
                ("range", "bytes=0-10"),
                ("if-range", "\"v1\""),
                ("accept-encoding", "gzip"),
                ("content-type", "text/plain"),
                ("accept-language", "nb"),
                ("user-agent", "test/1.0"),
                ("cookie", "sid=1"),
            ],
        );
        let mut resp = edge.proxy(req).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "f");
        let f = origin.seen().into_iter().find(|s| s.path == "/f").unwrap();
        for gone in [
            "if-none-match",
            "if-modified-since",
            "range",
            "if-range",
            "content-type",
        ] {
            assert_eq!(f.header(gone), None, "{gone} sent to a fragment");
        }
        // Not the client's gzip, and not absent (which would allow any coding, RFC 9110
        // section 12.5.3): identity, the only coding a page can be assembled from.
        assert_eq!(f.header("accept-encoding"), Some("identity"));
        assert_eq!(f.header("accept-language"), Some("nb"));
        assert_eq!(f.header("user-agent"), Some("test/1.0"));
        assert_eq!(f.header("cookie"), Some("sid=1"));
        assert_eq!(f.header("x-forwarded-for"), Some("10.0.0.7"));
        assert_eq!(
            f.header("surrogate-capability"),
            Some("tessera=\"ESI/1.0\"")
        );
    });
}

#[test]
fn surrogate_control_targeted_at_us_turns_esi_on() {
    let origin = Origin::start(&[
        (
            "/",
            Reply::Ok {
                body: r#"<esi:include src="/f"/>"#.into(),
                delay: Duration::ZERO,
                status: 200,
                esi: false,
                headers: vec![(
                    "surrogate-control".into(),
                    r#"content="ESI/1.0";tessera, max-age=10;varnish"#.into(),
                )],
            },
        ),
        ("/f", frag("targeted", 0)),
    ]);
    run(async {
        let edge = Edge::new(crate::config(&origin)).unwrap();
        let mut resp = edge.proxy(request("/", &[])).await.unwrap();
        assert!(resp.body.is_assembled());
        assert_eq!(read_all(&mut resp).await.0, "targeted");
    });
}

#[test]
fn config_parses_from_toml_with_defaults_and_rejects_unknown_keys() {
    let c: edge::EdgeConfig = toml::from_str(
        r#"
        [[upstream]]
        name = "app"
        addresses = ["127.0.0.1:9000", "127.0.0.1:9001"]
        connect_timeout = 0.5

        [[route]]
        prefix = "/static"
        root = "/srv/static"

        [[route]]
        prefix = "/"
        upstream = "app"

        [esi]
        include_timeout = 1.5
        on_failure = "continue"

        [[esi.fragment_host]]
        host = "fragments.example"
        upstream = "app"
        "#,
    )
    .unwrap();
    assert_eq!(c.upstream[0].max_connections, 64);
    assert_eq!(c.esi.max_depth, 5);
    assert_eq!(c.esi.max_includes, 256);
    assert_eq!(c.esi.on_failure, edge::PagePolicy::Continue);
    let edge = Edge::new(c).unwrap();
    assert_eq!(
        edge.route("/static/a.css"),
        Some(edge::Route::Static("/srv/static".as_ref()))
    );
    assert_eq!(edge.route("/staticky"), Some(edge::Route::Upstream("app")));
    assert!(toml::from_str::<edge::EdgeConfig>("[esi]\nmax_dept = 3").is_err());
    let bad: edge::EdgeConfig = toml::from_str("[[route]]\nupstream = \"nope\"").unwrap();
    assert!(Edge::new(bad).is_err());
}

#[test]
fn request_bodies_are_forwarded() {
    let origin = Origin::start(&[("/form", frag("thanks", 0))]);
    run(async {
        let edge = Edge::new(crate::config(&origin)).unwrap();
        let mut req = request(
            "/form",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("content-length", "7"),
            ],
        );
        req.method = http::Method::POST;
        req.body = bytes::Bytes::from_static(b"a=1&b=2");
        let mut resp = edge.proxy(req).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "thanks");
        let seen = origin.seen().pop().unwrap();
        assert_eq!(seen.body, b"a=1&b=2");
        assert_eq!(seen.header("content-length"), Some("7"));
        assert_eq!(
            seen.header("content-type"),
            Some("application/x-www-form-urlencoded")
        );
        // A body the client sent chunked (the server decoded it) goes with its length.
        let mut req = request("/form", &[("transfer-encoding", "chunked")]);
        req.method = http::Method::PUT;
        req.body = bytes::Bytes::from_static(b"xyz");
        let mut resp = edge.proxy(req).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "thanks");
        let seen = origin.seen().pop().unwrap();
        assert_eq!(seen.body, b"xyz");
        assert_eq!(seen.header("content-length"), Some("3"));
        assert_eq!(seen.header("transfer-encoding"), None);
    });
}

#[test]
fn route_esi_mode_html_and_off() {
    let origin = Origin::start(&[
        // text/html without Surrogate-Control.
        ("/html/p", frag(r#"<esi:include src="/f"/>"#, 0)),
        ("/off/p", page(r#"<esi:include src="/f"/>"#)),
        ("/f", frag("f", 0)),
    ]);
    run(async {
        let mut c = crate::config(&origin);
        for (prefix, esi) in [("/html", edge::EsiMode::Html), ("/off", edge::EsiMode::Off)] {
            c.route.push(edge::RouteConfig {
                prefix: prefix.into(),
                upstream: Some("origin".into()),
                esi,
                ..edge::RouteConfig::default()
            });
        }
        let edge = Edge::new(c).unwrap();
        let mut resp = edge.proxy(request("/html/p", &[])).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "f");
        let mut resp = edge.proxy(request("/off/p", &[])).await.unwrap();
        assert!(resp.headers.get("surrogate-control").is_none());
        assert_eq!(read_all(&mut resp).await.0, r#"<esi:include src="/f"/>"#);
    });
}

#[test]
fn upstream_peers_balance_and_health_parse_from_toml() {
    let c: edge::EdgeConfig = toml::from_str(
        r#"
        [[upstream]]
        name = "app"
        addresses = ["127.0.0.1:9000"]
        balance = "hash"
        hash_key = "cookie:session"
        max_fails = 3
        fail_timeout = 5
        retries = 2
        slow_start = 30

        [[upstream.peer]]
        address = "127.0.0.1:9001"
        weight = 3

        [upstream.health]
        path = "/healthz"
        interval = 2
        "#,
    )
    .unwrap();
    let u = &c.upstream[0];
    assert_eq!(u.balance, edge::Balance::Hash);
    assert_eq!(
        (u.max_fails, u.fail_timeout, u.fail_window),
        (Some(3), 5.0, 10.0)
    );
    assert_eq!((u.retries, u.retry_budget, u.slow_start), (2, 0.2, 30.0));
    assert_eq!(
        (u.peer[0].address.as_str(), u.peer[0].weight),
        ("127.0.0.1:9001", 3)
    );
    let h = u.health.as_ref().unwrap();
    assert_eq!(
        (h.path.as_str(), h.interval, h.timeout),
        ("/healthz", 2.0, 1.0)
    );
    assert_eq!((h.healthy_after, h.unhealthy_after), (1, 2));
    let edge = Edge::new(c.clone()).unwrap();
    let peers = edge.upstream_stats("app").unwrap().peers;
    assert_eq!(peers.len(), 2, "addresses and [[upstream.peer]] together");
    // The breaker's old keys still read, as passive health's.
    let old: edge::EdgeConfig =
        toml::from_str("[[upstream]]\nbreaker_failures = 4\nbreaker_cool_down = 2").unwrap();
    assert_eq!(
        (old.upstream[0].max_fails, old.upstream[0].fail_timeout),
        (Some(4), 2.0)
    );
    for bad in [
        "hash_key = \"header:\"",
        "hash_key = \"path\"",
        "retry_budget = -1",
    ] {
        let c: edge::EdgeConfig = toml::from_str(&format!("[[upstream]]\n{bad}")).unwrap();
        assert!(Edge::new(c).is_err(), "{bad}");
    }
    assert!(toml::from_str::<edge::EdgeConfig>("[[upstream]]\nbalance = \"fastest\"").is_err());
}
