//! Parallel assembly: byte-exact pages, latency of parallel and nested fetches, streaming
//! of the prefix, collapsing and connection reuse.

use std::time::{Duration, Instant};

use crate::origin::{frag, page, Origin, Reply};
use crate::{config, fetch_page, ms, read_all, request, run};
use edge::Edge;

#[test]
fn assembles_a_page_byte_exact() {
    let origin = Origin::start(&[
        (
            "/",
            page(concat!(
                "<html><body>\n",
                "<esi:include src=\"/header\"/>",
                "<p>between</p>",
                "<esi:include src=\"http://site.test/nav?x=1\"/>\n",
                "<esi:remove>no ESI here</esi:remove>",
                "<esi:include src=\"/esi-frag\"/>",
                "</body></html>",
            )),
        ),
        ("/header", frag("<h1>Header</h1>", 0)),
        ("/nav", frag("<nav>a | b</nav>", 5)),
        (
            "/esi-frag",
            Reply::Ok {
                body: "[<esi:include src=\"/leaf\"/>|<esi:include src=\"leaf\"/>]".into(),
                delay: Duration::ZERO,
                status: 200,
                esi: true,
                headers: Vec::new(),
            },
        ),
        ("/leaf", frag("leaf", 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let body = fetch_page(&edge, "/").await;
        assert_eq!(
            body,
            "<html><body>\n<h1>Header</h1><p>between</p><nav>a | b</nav>\n[leaf|leaf]</body></html>"
        );
    });
}

#[test]
fn three_50ms_fragments_take_one_fetch_time_not_three() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/a"/>-<esi:include src="/b"/>-<esi:include src="/c"/>"#),
        ),
        ("/a", frag("A", 50)),
        ("/b", frag("B", 50)),
        ("/c", frag("C", 50)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let start = Instant::now();
        let body = fetch_page(&edge, "/").await;
        let took = start.elapsed();
        assert_eq!(body, "A-B-C");
        eprintln!("three 50 ms fragments: page in {} ms", ms(took));
        assert!(took >= Duration::from_millis(50));
        assert!(took < Duration::from_millis(140), "took {took:?}");
    });
}

#[test]
fn prefix_is_sent_before_a_slow_fragment_arrives() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<head>early</head><esi:include src="/fast"/><esi:include src="/slow"/>!"#),
        ),
        ("/fast", frag("[fast]", 0)),
        ("/slow", frag("[slow]", 200)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let start = Instant::now();
        let mut resp = edge.proxy(request("/", &[])).await.unwrap();
        assert_eq!(
            resp.body.content_length(),
            None,
            "assembled: length unknown"
        );
        let mut early = Vec::new();
        // Everything before the slow include arrives first.
        while early.len() < "<head>early</head>[fast]".len() {
            let chunk = resp.body.next_chunk().await.unwrap().unwrap();
            early.extend_from_slice(&chunk);
        }
        let first = start.elapsed();
        assert_eq!(early, b"<head>early</head>[fast]");
        let (rest, err) = read_all(&mut resp).await;
        let total = start.elapsed();
        assert!(err.is_none());
        assert_eq!(rest, "[slow]!");
        eprintln!(
            "prefix after {} ms, whole page after {} ms (slow fragment 200 ms)",
            ms(first),
            ms(total)
        );
        assert!(first < Duration::from_millis(100), "prefix took {first:?}");
        assert!(total >= Duration::from_millis(200));
    });
}

#[test]
fn nested_includes_are_fetched_in_parallel_not_level_by_level() {
    // Level by level this takes 150 (slowest of level 1) + 150 (slowest of level 2);
    // fetching each fragment's includes when it arrives takes 10 + 150 = 160.
    let esi = |body: &str, delay_ms: u64| Reply::Ok {
        body: body.into(),
        delay: Duration::from_millis(delay_ms),
        status: 200,
        esi: true,
        headers: Vec::new(),
    };
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/a"/>|<esi:include src="/c"/>"#),
        ),
        ("/a", esi(r#"a(<esi:include src="/b"/>)"#, 10)),
        ("/b", frag("b", 150)),
        ("/c", esi(r#"c(<esi:include src="/d"/>)"#, 150)),
        ("/d", frag("d", 10)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let start = Instant::now();
        let body = fetch_page(&edge, "/").await;
        let took = start.elapsed();
        assert_eq!(body, "a(b)|c(d)");
        eprintln!(
            "nested page (level by level would be 300 ms): {} ms",
            ms(took)
        );
        assert!(took >= Duration::from_millis(160));
        assert!(took < Duration::from_millis(260), "took {took:?}");
    });
}

#[test]
fn identical_concurrent_fetches_collapse_into_one() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/shared"/><esi:include src="/shared"/>"#),
        ),
        ("/shared", frag("S", 50)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        // Two pages at once, from two clients, each including the fragment twice: one
        // fetch.
        let mut other_client = request("/", &[]);
        other_client.client.addr = "10.0.0.8".parse().unwrap();
        let (a, b) = tokio::join!(fetch_page(&edge, "/"), async {
            let mut resp = edge.proxy(other_client).await.unwrap();
            read_all(&mut resp).await.0
        });
        assert_eq!((a.as_str(), b.as_str()), ("SS", "SS"));
        assert_eq!(origin.hits("/shared"), 1);
        assert_eq!(edge.fragment_fetches(), 1);
        // Once it is done, the next page fetches it again (no cache yet).
        assert_eq!(fetch_page(&edge, "/").await, "SS");
        assert_eq!(origin.hits("/shared"), 2);
    });
}

#[test]
fn personalised_fragments_are_not_collapsed_across_users() {
    let origin = Origin::start(&[
        ("/", page(r#"<esi:include src="/me"/>"#)),
        ("/me", frag("me", 30)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let ann = request("/", &[("cookie", "user=ann")]);
        let bob = request("/", &[("cookie", "user=bob")]);
        let (a, b) = tokio::join!(edge.proxy(ann), edge.proxy(bob));
        let (mut a, mut b) = (a.unwrap(), b.unwrap());
        read_all(&mut a).await;
        read_all(&mut b).await;
        let cookies: Vec<_> = origin
            .seen()
            .iter()
            .filter(|s| s.path == "/me")
            .map(|s| s.header("cookie").unwrap().to_string())
            .collect();
        assert_eq!(cookies.len(), 2);
        assert!(cookies.contains(&"user=ann".to_string()));
        assert!(cookies.contains(&"user=bob".to_string()));
    });
}

#[test]
fn keep_alive_connections_are_reused() {
    let origin = Origin::start(&[
        ("/", page(r#"<esi:include src="/f"/>"#)),
        ("/f", frag("f", 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        for _ in 0..5 {
            assert_eq!(fetch_page(&edge, "/").await, "f");
        }
        let stats = edge.upstream_stats("origin").unwrap();
        assert_eq!(origin.hits("/f"), 5);
        // The page and its fragment are sequential, so one or two connections serve
        // all ten requests.
        assert!(stats.connections_opened <= 2, "{stats:?}");
        assert_eq!(origin.connections() as u64, stats.connections_opened);
    });
}

/// The default pool keeps as many idle connections as it may open, so steady load below
/// `max_connections` never closes a connection only to open another (with the old
/// default of 16 idle, these 240 requests opened 86 connections).
#[test]
fn steady_concurrent_load_reuses_every_connection() {
    let origin = Origin::start(&[("/f", frag("f", 5))]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        const CONCURRENT: usize = 24;
        for _ in 0..10 {
            let tasks: Vec<_> = (0..CONCURRENT)
                .map(|_| {
                    let edge = edge.clone();
                    tokio::task::spawn_local(async move { fetch_page(&edge, "/f").await })
                })
                .collect();
            for t in tasks {
                assert_eq!(t.await.unwrap(), "f");
            }
        }
        let stats = edge.upstream_stats("origin").unwrap();
        assert_eq!(origin.hits("/f"), 10 * CONCURRENT);
        assert!(
            stats.connections_opened <= CONCURRENT as u64,
            "{} requests opened {} connections",
            10 * CONCURRENT,
            stats.connections_opened
        );
        assert_eq!(stats.idle as u64, stats.connections_opened);
    });
}

#[test]
fn max_connections_bounds_parallel_fetches() {
    let origin = Origin::start(&[
        (
            "/",
            page(
                r#"<esi:include src="/a"/><esi:include src="/b"/><esi:include src="/c"/><esi:include src="/d"/>"#,
            ),
        ),
        ("/a", frag("a", 40)),
        ("/b", frag("b", 40)),
        ("/c", frag("c", 40)),
        ("/d", frag("d", 40)),
    ]);
    run(async {
        let mut c = config(&origin);
        c.upstream[0].max_connections = 2;
        let edge = Edge::new(c).unwrap();
        let start = Instant::now();
        assert_eq!(fetch_page(&edge, "/").await, "abcd");
        let took = start.elapsed();
        // Two at a time: two rounds of 40 ms.
        assert!(took >= Duration::from_millis(80), "took {took:?}");
        assert!(edge.upstream_stats("origin").unwrap().connections_opened <= 2);
    });
}

#[test]
fn non_esi_responses_pass_through_with_their_length() {
    let origin = Origin::start(&[
        ("/plain", frag(r#"<esi:include src="/x"/> stays"#, 0)),
        (
            "/other-device",
            Reply::Ok {
                body: r#"<esi:include src="/x"/>"#.into(),
                delay: Duration::ZERO,
                status: 200,
                esi: false,
                headers: vec![(
                    "surrogate-control".into(),
                    r#"content="ESI/1.0";varnish"#.into(),
                )],
            },
        ),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        for path in ["/plain", "/other-device"] {
            let mut resp = edge.proxy(request(path, &[])).await.unwrap();
            assert!(!resp.body.is_assembled());
            let n = resp.body.content_length().unwrap();
            assert!(resp.headers.get("surrogate-control").is_none());
            let (body, err) = read_all(&mut resp).await;
            assert!(err.is_none());
            assert_eq!(body.len() as u64, n);
            assert!(body.starts_with("<esi:include"));
        }
        assert_eq!(origin.hits("/x"), 0);
    });
}

#[test]
fn http_1_0_clients_can_have_the_page_buffered() {
    let origin = Origin::start(&[
        ("/", page(r#"<p><esi:include src="/f"/></p>"#)),
        ("/f", frag("fragment", 20)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let resp = edge.proxy(request("/", &[])).await.unwrap();
        assert!(resp.body.is_assembled());
        assert_eq!(resp.body.content_length(), None);
        assert!(resp.headers.get("content-length").is_none());
        let whole = resp.body.collect().await.unwrap();
        assert_eq!(&whole[..], b"<p>fragment</p>");
    });
}

#[test]
fn includes_under_a_static_root_are_read_from_files() {
    let root = std::env::temp_dir().join(format!("edge-static-{}", std::process::id()));
    // Like nginx `root`: the file is the root plus the whole path.
    std::fs::create_dir_all(root.join("static/frag")).unwrap();
    std::fs::write(
        root.join("static/frag/footer.html"),
        "<footer>static</footer>",
    )
    .unwrap();
    let origin = Origin::start(&[(
        "/",
        page(
            r#"<esi:include src="/static/frag/footer.html"/>|<esi:include src="/static/frag/%2e%2e/%2e%2e/etc/passwd" onerror="continue"/>|"#,
        ),
    )]);
    run(async {
        let mut c = config(&origin);
        c.route.push(edge::RouteConfig {
            prefix: "/static/".into(),
            root: Some(root.clone()),
            ..edge::RouteConfig::default()
        });
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "<footer>static</footer>||");
        // Static paths are the server's to serve as pages.
        let e = edge.proxy(request("/static/frag/footer.html", &[])).await;
        assert!(matches!(e, Err(edge::ProxyError::StaticRoute { .. })));
    });
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn chunked_bodies_stream_through_and_esi_tags_may_straddle_chunks() {
    let origin = Origin::start(&[
        (
            "/stream",
            Reply::Chunked {
                parts: vec!["first ".into(), "second".into()],
                gap: Duration::from_millis(150),
                esi: false,
            },
        ),
        (
            "/",
            Reply::Chunked {
                parts: vec!["<p><esi:inc".into(), "lude src=\"/f\"/></p>".into()],
                gap: Duration::from_millis(10),
                esi: true,
            },
        ),
        ("/f", frag("f", 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let start = Instant::now();
        let mut resp = edge.proxy(request("/stream", &[])).await.unwrap();
        assert_eq!(
            resp.body.content_length(),
            None,
            "chunked upstream: no length"
        );
        // Read through the Stream trait this time.
        async fn next(body: &mut edge::Body) -> Option<Vec<u8>> {
            let mut body = std::pin::Pin::new(body);
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(body.as_mut(), cx))
                .await
                .map(|chunk| chunk.unwrap().to_vec())
        }
        assert_eq!(next(&mut resp.body).await.unwrap(), b"first ");
        let first = start.elapsed();
        assert_eq!(next(&mut resp.body).await.unwrap(), b"second");
        assert!(next(&mut resp.body).await.is_none());
        assert!(
            first < Duration::from_millis(120),
            "first chunk after {first:?}"
        );
        assert_eq!(fetch_page(&edge, "/").await, "<p>f</p>");
    });
}

#[test]
fn max_concurrency_bounds_one_page_fetches() {
    let includes: String = (0..4)
        .map(|i| format!(r#"<esi:include src="/c{i}"/>"#))
        .collect();
    let origin = Origin::start(&[
        ("/", page(&includes)),
        ("/c0", frag("0", 40)),
        ("/c1", frag("1", 40)),
        ("/c2", frag("2", 40)),
        ("/c3", frag("3", 40)),
    ]);
    run(async {
        let mut c = config(&origin);
        c.esi.max_concurrency = 1;
        let edge = Edge::new(c).unwrap();
        let start = Instant::now();
        assert_eq!(fetch_page(&edge, "/").await, "0123");
        let took = start.elapsed();
        // One at a time: four rounds of 40 ms.
        assert!(took >= Duration::from_millis(160), "took {took:?}");
    });
}
