//! The failure policy, branch by branch, and the circuit breaker.

use std::time::{Duration, Instant};

use crate::origin::{black_hole, closed_port, frag, page, status, Origin, Reply};
use crate::{allow_host, config, fetch_error, fetch_page, ms, read_all, request, run};
use edge::{Edge, PageError, PagePolicy, PeerState};

#[test]
fn timeout_attribute_then_alt() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/slow" alt="/alt" timeout="50"/>."#),
        ),
        ("/slow", frag("slow", 1000)),
        ("/alt", frag("alt", 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let start = Instant::now();
        assert_eq!(fetch_page(&edge, "/").await, "alt.");
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50));
        assert!(took < Duration::from_millis(300), "took {took:?}");
    });
}

#[test]
fn error_status_and_reset_fall_back_to_alt() {
    let origin = Origin::start(&[
        (
            "/",
            page(
                r#"<esi:include src="/e500" alt="/alt"/>|<esi:include src="/reset" alt="/alt"/>|<esi:include src="/missing" alt="/alt"/>"#,
            ),
        ),
        ("/e500", status(500, 0)),
        ("/reset", Reply::Reset),
        ("/alt", frag("alt", 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "alt|alt|alt");
    });
}

#[test]
fn failed_src_and_alt_go_to_the_enclosing_except() {
    let origin = Origin::start(&[
        (
            "/",
            page(concat!(
                "<esi:try><esi:attempt>A[<esi:include src=\"/ok\"/><esi:include src=\"/bad\" alt=\"/bad2\"/>]</esi:attempt>",
                "<esi:except>E[<esi:include src=\"/ok\"/>]</esi:except></esi:try>",
                "<esi:try><esi:attempt>fine:<esi:include src=\"/ok\"/></esi:attempt><esi:except>no</esi:except></esi:try>",
            )),
        ),
        ("/ok", frag("ok", 10)),
        ("/bad", status(503, 0)),
        ("/bad2", status(404, 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "E[ok]fine:ok");
    });
}

#[test]
fn onerror_continue_yields_nothing() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/bad" onerror="continue"/>rest"#),
        ),
        ("/bad", status(500, 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "rest");
    });
}

#[test]
fn onerror_continue_discards_a_broken_esi_fragment_whole() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/outer" onerror="continue"/>rest"#),
        ),
        (
            "/outer",
            Reply::Ok {
                body: r#"outer-start<esi:include src="/bad"/>outer-end"#.into(),
                delay: Duration::ZERO,
                status: 200,
                esi: true,
                headers: Vec::new(),
            },
        ),
        ("/bad", status(500, 30)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "rest");
    });
}

#[test]
fn unabsorbed_failure_before_any_byte_is_a_502() {
    let origin = Origin::start(&[
        ("/", page(r#"<esi:include src="/bad"/>never sent"#)),
        ("/bad", status(500, 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let e = fetch_error(&edge, "/").await;
        assert_eq!(e.status(), 502, "{e}");
        assert!(matches!(
            e,
            edge::ProxyError::Page(PageError::IncludeFailed(_))
        ));
    });
}

#[test]
fn unabsorbed_failure_after_streaming_breaks_the_body() {
    let origin = Origin::start(&[
        ("/", page(r#"sent<esi:include src="/late-bad"/>never"#)),
        ("/late-bad", status(500, 60)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let mut resp = edge.proxy(request("/", &[])).await.unwrap();
        assert_eq!(resp.status, 200);
        let (body, err) = read_all(&mut resp).await;
        assert_eq!(body, "sent");
        assert!(matches!(err, Some(PageError::IncludeFailed(_))), "{err:?}");
    });
}

#[test]
fn page_policy_continue_drops_the_failed_include() {
    let origin = Origin::start(&[
        ("/", page(r#"a<esi:include src="/bad"/>b"#)),
        ("/bad", status(500, 0)),
    ]);
    run(async {
        let mut c = config(&origin);
        c.esi.on_failure = PagePolicy::Continue;
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "ab");
    });
}

#[test]
fn config_default_timeout_bounds_a_hanging_fragment() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"x<esi:include src="/hang" onerror="continue"/>y"#),
        ),
        ("/hang", Reply::Hang),
    ]);
    run(async {
        let mut c = config(&origin);
        c.esi.include_timeout = 0.1;
        let edge = Edge::new(c).unwrap();
        let start = Instant::now();
        assert_eq!(fetch_page(&edge, "/").await, "xy");
        let took = start.elapsed();
        eprintln!(
            "hanging fragment, 100 ms include timeout: page in {} ms",
            ms(took)
        );
        assert!(took >= Duration::from_millis(100));
        assert!(took < Duration::from_millis(400), "took {took:?}");
    });
}

#[test]
fn a_server_that_accepts_and_never_answers_does_not_hang_the_page() {
    let hole = black_hole();
    let origin = Origin::start(&[(
        "/",
        page(r#"<esi:include src="http://hole.test/f" alt="http://hole.test/g" timeout="80"/>"#),
    )]);
    run(async {
        let mut c = config(&origin);
        allow_host(&mut c, "hole.test", "hole", &hole.to_string(), false);
        let edge = Edge::new(c).unwrap();
        let start = Instant::now();
        let e = fetch_error(&edge, "/").await;
        let took = start.elapsed();
        eprintln!(
            "never-answering server, src+alt at 80 ms: 502 after {} ms",
            ms(took)
        );
        assert_eq!(e.status(), 502);
        // src and alt each wait at most their 80 ms.
        assert!(took >= Duration::from_millis(160), "took {took:?}");
        assert!(took < Duration::from_millis(450), "took {took:?}");
    });
}

#[test]
fn unreachable_page_upstream_is_a_502_and_its_timeouts_a_504() {
    run(async {
        let mut c = edge::EdgeConfig::proxy_to(&closed_port().to_string());
        c.upstream[0].max_fails = Some(0);
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_error(&edge, "/").await.status(), 502);
        let mut c = edge::EdgeConfig::proxy_to(&black_hole().to_string());
        c.upstream[0].response_timeout = 0.1;
        let edge = Edge::new(c).unwrap();
        let start = Instant::now();
        assert_eq!(fetch_error(&edge, "/").await.status(), 504);
        assert!(start.elapsed() < Duration::from_millis(400));
    });
}

#[test]
fn depth_and_count_limits_fail_includes() {
    // A chain of ESI fragments, each including the next: /l1 -> /l2 -> ... -> /l5.
    let level = |next: usize| Reply::Ok {
        body: format!(r#"<<esi:include src="/l{next}" onerror="continue"/>>"#),
        delay: Duration::ZERO,
        status: 200,
        esi: true,
        headers: Vec::new(),
    };
    let many: String = (0..5)
        .map(|i| format!(r#"<esi:include src="/n{i}" onerror="continue"/>"#))
        .collect();
    let origin = Origin::start(&[
        ("/", page(r#"<esi:include src="/l1"/>"#)),
        ("/l1", level(2)),
        ("/l2", level(3)),
        ("/l3", level(4)),
        ("/l4", level(5)),
        ("/many", page(&many)),
        ("/n0", frag("0", 0)),
        ("/n1", frag("1", 0)),
        ("/n2", frag("2", 0)),
        ("/n3", frag("3", 0)),
        ("/n4", frag("4", 0)),
    ]);
    run(async {
        let mut c = config(&origin);
        c.esi.max_depth = 3;
        c.esi.max_includes = 3;
        // Uncached, so that every level is a fetch.
        c.cache.enabled = false;
        let edge = Edge::new(c).unwrap();
        // Three levels; the fourth include fails and continues.
        assert_eq!(fetch_page(&edge, "/").await, "<<<>>>");
        let fetched: usize = ["/l1", "/l2", "/l3"].iter().map(|p| origin.hits(p)).sum();
        assert_eq!(fetched, 3);
        assert_eq!(origin.hits("/l4"), 0);
        assert_eq!(fetch_page(&edge, "/many").await, "012");
    });
}

/// An include that resolves to a page containing it (itself, or a page above it) would
/// repeat the page until the depth limit and then fail inside its body: it is refused
/// at once as a failed include, so its alt and onerror apply.
#[test]
fn an_include_of_its_own_page_is_refused_at_any_depth() {
    let origin = Origin::start(&[
        ("/self", page(r#"[<esi:include src="/self" alt="/alt"/>]"#)),
        ("/alt", frag("alt", 0)),
        ("/top", page(r#"top<esi:include src="/mid"/>"#)),
        (
            "/mid",
            Reply::Ok {
                body: r#"(mid<esi:include src="/top" onerror="continue"/>)"#.into(),
                delay: Duration::ZERO,
                status: 200,
                esi: true,
                headers: Vec::new(),
            },
        ),
    ]);
    run(async {
        let mut c = config(&origin);
        c.cache.enabled = false;
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_page(&edge, "/self").await, "[alt]");
        assert_eq!(origin.hits("/self"), 1);
        assert_eq!(fetch_page(&edge, "/top").await, "top(mid)");
        assert_eq!(origin.hits("/top"), 1);
    });
}

#[test]
fn a_peer_failing_max_fails_times_is_skipped_until_a_good_probe() {
    let frags = Origin::start(&[("/f", status(500, 0))]);
    let origin = Origin::start(&[(
        "/",
        page(r#"[<esi:include src="http://frags.test/f" onerror="continue"/>]"#),
    )]);
    run(async {
        let mut c = config(&origin);
        allow_host(
            &mut c,
            "frags.test",
            "frags",
            &frags.addr.to_string(),
            false,
        );
        c.upstream[1].max_fails = Some(3);
        c.upstream[1].fail_status = vec![500];
        c.upstream[1].fail_timeout = 0.2;
        let edge = Edge::new(c).unwrap();
        for _ in 0..3 {
            assert_eq!(fetch_page(&edge, "/").await, "[]");
        }
        assert_eq!(frags.hits("/f"), 3);
        assert_eq!(peer_state(&edge, "frags"), PeerState::Down);
        // Down: the include fails at once, the fragment server is not called.
        let start = Instant::now();
        assert_eq!(fetch_page(&edge, "/").await, "[]");
        assert!(start.elapsed() < Duration::from_millis(50));
        assert_eq!(frags.hits("/f"), 3);
        // After fail_timeout one probe goes through; it succeeds and the peer is back.
        frags.set("/f", frag("back", 0));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(peer_state(&edge, "frags"), PeerState::Probing);
        assert_eq!(fetch_page(&edge, "/").await, "[back]");
        assert_eq!(peer_state(&edge, "frags"), PeerState::Up);
        assert_eq!(fetch_page(&edge, "/").await, "[back]");
        assert_eq!(frags.hits("/f"), 5);
        // The page's own upstream was never affected.
        assert_eq!(peer_state(&edge, "origin"), PeerState::Up);
    });
}

/// The state of an upstream's first peer.
fn peer_state(edge: &Edge, upstream: &str) -> PeerState {
    edge.upstream_stats(upstream).unwrap().peers[0].1
}

#[test]
fn a_probe_dropped_midway_counts_as_a_failure_not_a_stuck_peer() {
    let hole = black_hole();
    run(async {
        let mut c = edge::EdgeConfig::proxy_to(&hole.to_string());
        c.upstream[0].response_timeout = 0.05;
        c.upstream[0].max_fails = Some(1);
        c.upstream[0].fail_timeout = 0.05;
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_error(&edge, "/").await.status(), 504);
        assert_eq!(peer_state(&edge, "origin"), PeerState::Down);
        // Every peer down: 502 at once.
        let start = Instant::now();
        assert_eq!(fetch_error(&edge, "/").await.status(), 502);
        assert!(start.elapsed() < Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(70)).await;
        // The probe's client goes away before the upstream answers.
        let probe = tokio::time::timeout(Duration::from_millis(10), edge.proxy(request("/", &[])));
        assert!(probe.await.is_err());
        assert_eq!(peer_state(&edge, "origin"), PeerState::Down);
        tokio::time::sleep(Duration::from_millis(70)).await;
        assert_eq!(peer_state(&edge, "origin"), PeerState::Probing);
        // The next probe is let through (and times out against the black hole).
        assert_eq!(fetch_error(&edge, "/").await.status(), 504);
    });
}

#[test]
fn a_refused_get_is_retried_on_the_next_peer_which_takes_the_load() {
    let origin = Origin::start(&[("/", page("up"))]);
    run(async {
        let mut c = config(&origin);
        c.upstream[0].addresses = vec![closed_port().to_string(), origin.addr.to_string()];
        c.upstream[0].max_idle = Some(0);
        let edge = Edge::new(c).unwrap();
        for _ in 0..4 {
            assert_eq!(fetch_page(&edge, "/").await, "up");
        }
        let peers = edge.upstream_stats("origin").unwrap().peers;
        assert_eq!(
            peers[0].1,
            PeerState::Down,
            "refused once: out (max_fails 1)"
        );
        assert_eq!(peers[1].1, PeerState::Up);
    });
}

/// A fragment that comes with a Content-Encoding although identity was asked for is a
/// failed include (its alt applies): encoded bytes are never spliced into a page. The
/// page and its fragments are requested with `Accept-Encoding: identity`.
#[test]
fn an_encoded_fragment_is_a_failed_include_never_spliced_raw() {
    let gzipped = Reply::Ok {
        body: "\u{1f}\u{8b}not really gzip".into(),
        delay: Duration::ZERO,
        status: 200,
        esi: false,
        headers: vec![("Content-Encoding".into(), "gzip".into())],
    };
    let origin = Origin::start(&[
        ("/", page(r#"<p><esi:include src="/f" alt="/plain"/></p>"#)),
        ("/f", gzipped),
        ("/plain", frag("plain", 0)),
    ]);
    run(async {
        let mut c = config(&origin);
        c.cache.enabled = false;
        let edge = Edge::new(c).unwrap();
        let req = crate::request("/", &[("accept-encoding", "gzip, br")]);
        let mut resp = edge.proxy(req).await.unwrap();
        assert_eq!(crate::read_all(&mut resp).await.0, "<p>plain</p>");
        for seen in origin.seen() {
            assert_eq!(
                seen.header("accept-encoding"),
                Some("identity"),
                "{} asked for another coding",
                seen.path
            );
        }
    });
}

/// Character and entity references in an include's attributes are decoded once, in the
/// ESI parser, the same for the proxy as for `tessera esi render`.
#[test]
fn references_in_include_urls_are_decoded() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/q?a=1&amp;b=2"/>|<esi:include src="/q?a=3&#38;b=&#x34;"/>"#),
        ),
        ("/q", frag("q", 0)),
    ]);
    run(async {
        let mut c = config(&origin);
        c.cache.enabled = false;
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "q|q");
        let mut paths: Vec<String> = origin.seen().into_iter().map(|s| s.target).collect();
        paths.sort();
        assert_eq!(paths, ["/", "/q?a=1&b=2", "/q?a=3&b=4"]);
    });
}

#[test]
fn an_include_timeout_shorter_than_the_response_timeout_does_not_take_a_peer_out() {
    let origin = Origin::start(&[
        (
            "/",
            page(r#"<esi:include src="/slow" alt="/alt" timeout="50"/>."#),
        ),
        ("/slow", frag("slow", 300)),
        ("/alt", frag("alt", 0)),
    ]);
    run(async {
        let mut c = config(&origin);
        // Two peers (the same origin twice), so max_fails (1) applies.
        let address = c.upstream[0].addresses[0].clone();
        c.upstream[0].addresses.push(address);
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "alt.");
        let peers = edge.upstream_stats("origin").unwrap().peers;
        assert!(
            peers.iter().all(|(_, state)| *state == PeerState::Up),
            "the page's own deadline is not the peer's failure: {peers:?}"
        );
    });
}

#[test]
fn a_fragment_fetch_refused_by_one_peer_is_retried_on_another() {
    let frags = Origin::start(&[("/f", frag("frag", 0))]);
    let origin = Origin::start(&[("/", page(r#"[<esi:include src="http://frags.test/f"/>]"#))]);
    run(async {
        let mut c = config(&origin);
        allow_host(
            &mut c,
            "frags.test",
            "frags",
            &frags.addr.to_string(),
            false,
        );
        // The refusing peer first: round robin tries it first, then the live one.
        c.upstream[1].addresses = vec![closed_port().to_string(), frags.addr.to_string()];
        let edge = Edge::new(c).unwrap();
        assert_eq!(fetch_page(&edge, "/").await, "[frag]");
        let peers = edge.upstream_stats("frags").unwrap().peers;
        assert_eq!(peers[0].1, PeerState::Down, "the refusing peer is out");
        assert_eq!(peers[1].1, PeerState::Up);
    });
}
