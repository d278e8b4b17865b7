use crate::{config, run};
use bench::compare::compare;
use bench::find_max::{find_max, FindMaxOptions, Slo};
use bench::testserver::TestServer;
use bench::Invocation;
use std::time::Duration;

#[test]
fn html_report_is_self_contained() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.requests_total = Some(300);
    let r = run(&c);
    let html = bench::html::render(&r);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 4);
    for chart in [
        "Latency distribution",
        "Latency by percentile",
        "Requests per second",
        "Latency over time",
    ] {
        assert!(html.contains(chart), "missing {chart}");
    }
    // Nothing is fetched: no scripts, stylesheets, images or fonts from anywhere.
    for needle in ["<script", "<link", "src=", "url(", "@import"] {
        assert!(!html.contains(needle), "found {needle}");
    }
}

#[test]
fn text_report_shows_both_latencies_and_errors() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/status/500"));
    c.requests_total = Some(10);
    let t = run(&c).text();
    assert!(t.contains("uncorrected") && t.contains("corrected"), "{t}");
    assert!(t.contains("non-2xx 10"), "{t}");
    assert!(t.contains("500: 10"), "{t}");
}

#[test]
fn finds_the_max_rate_within_an_objective() {
    let server = TestServer::start().unwrap();
    // 4 connections to a server that takes 10 ms: at most 400 requests/s.
    let mut c = config(&server.url("/delay/10"));
    c.connections = 4;
    let slo = Slo::parse_all("p99<100ms").unwrap();
    let opts = FindMaxOptions {
        start_rate: 50.0,
        step: Duration::from_millis(600),
        max_steps: 6,
        ..Default::default()
    };
    let mut seen = 0;
    let f = find_max(&c, &slo, &opts, &Invocation::default(), &mut |_| seen += 1).unwrap();
    assert_eq!(
        seen,
        f.steps.len() + 1,
        "every step and the confirming run are reported"
    );
    let max = f.max_rate.expect("50/s is well within reach");
    // Capacity is just under 400/s; a step passes at 95% of its rate, so no
    // rate much above capacity can pass. (Below 50 only if a noisy machine
    // failed the first step and the search halved.)
    assert!(max > 0.0 && max <= 420.0, "max {max}");
    let bad = f.first_failing_rate.expect("the search went past capacity");
    assert!(bad > max);
    assert!(f.confirm.is_some());
    assert!(f.steps.windows(2).all(|w| w[0].rate <= w[1].rate));
    let html = bench::html::render_find_max(&f);
    assert!(html.contains("Throughput vs corrected p99"));
}

#[test]
fn compares_two_targets_in_alternating_rounds() {
    let a = TestServer::start().unwrap();
    let b = TestServer::start().unwrap();
    let mut ca = config(&a.url("/"));
    ca.duration = Some(Duration::from_millis(300));
    ca.connections = 2;
    let mut cb = ca.clone();
    cb.requests = vec![bench::RequestSpec::get(&b.url("/delay/5"))];
    let mut order = Vec::new();
    let r = compare(
        &ca,
        &cb,
        2,
        &Invocation::default(),
        &mut |round, side, _| order.push((round, side)),
    )
    .unwrap();
    assert_eq!(order, vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
    assert_eq!(
        (r.a.rounds.len(), r.b.rounds.len(), r.runs.len()),
        (2, 2, 4)
    );
    // B answers after 5 ms on 2 connections: at most 400/s, far below A.
    assert!(r.ratio_rps.median < 0.5, "ratio {:?}", r.ratio_rps);
    assert!(r.ratio_rps.min <= r.ratio_rps.median && r.ratio_rps.median <= r.ratio_rps.max);
    assert!(r.ratio_p99.median > 1.0);
    assert!(r.text().contains("B/A requests/s"));
}
