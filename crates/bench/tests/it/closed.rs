use crate::{config, run};
use bench::testserver::TestServer;
use bench::RequestSpec;
use std::time::Duration;

#[test]
fn counts_requests_exactly() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.requests_total = Some(1000);
    c.connections = 4;
    c.threads = 2;
    let r = run(&c);
    assert_eq!(r.requests, 1000);
    assert_eq!(server.requests(), 1000);
    assert_eq!(r.errors.total, 0);
    assert_eq!(r.status.get("200"), Some(&1000));
    assert_eq!(r.connects.count, 4);
    assert_eq!(server.connections(), 4);
    assert_eq!(r.series.iter().map(|s| s.requests).sum::<u64>(), 1000);
    // Every response of the test server is the same size.
    assert_eq!(r.bytes % 1000, 0);
    assert!(r.bytes > 0);
}

#[test]
fn pipelines_the_requested_depth() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.requests_total = Some(1600);
    c.connections = 2;
    c.pipeline = 16;
    let r = run(&c);
    assert_eq!(r.requests, 1600);
    assert_eq!(server.requests(), 1600);
    assert_eq!(server.connections(), 2);
    assert_eq!(r.errors.total, 0);
    // The first write of each connection carries 16 requests at once.
    assert_eq!(server.max_pipelined(), 16);
}

#[test]
fn opens_one_connection_per_request_without_keepalive() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/chunked"));
    c.requests_total = Some(300);
    c.connections = 3;
    c.keepalive = false;
    let r = run(&c);
    assert_eq!(r.requests, 300);
    assert_eq!(r.connects.count, 300);
    assert_eq!(server.connections(), 300);
    assert_eq!(server.requests(), 300);
    assert_eq!(r.errors.total, 0);
}

#[test]
fn frames_chunked_responses_pipelined() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/chunked"));
    c.requests_total = Some(500);
    c.pipeline = 4;
    let r = run(&c);
    assert_eq!((r.requests, r.errors.total), (500, 0));
}

#[test]
fn sends_bodies_and_weighted_mixes() {
    let server = TestServer::start().unwrap();
    let mut post = RequestSpec::get(&server.url("/post"));
    post.method = "POST".into();
    post.body = Some(vec![b'x'; 3000]);
    post.weight = 3;
    let mut c = config(&server.url("/"));
    c.requests = vec![post, RequestSpec::get(&server.url("/status/404"))];
    c.requests_total = Some(400);
    let r = run(&c);
    // One connection cycles through the mix: 3 POSTs then one GET, exactly.
    assert_eq!(r.requests, 400);
    assert_eq!(r.status.get("200"), Some(&300));
    assert_eq!(r.status.get("404"), Some(&100));
    assert_eq!(r.errors.non_2xx, 100);
    assert_eq!(r.errors.status.get("404"), Some(&100));
    assert_eq!(server.requests(), 400);
}

#[test]
fn latency_percentiles_match_known_delays() {
    let server = TestServer::start().unwrap();
    let mut fast = RequestSpec::get(&server.url("/delay/0"));
    fast.weight = 9;
    let slow = RequestSpec::get(&server.url("/delay/40"));
    let mut c = config(&server.url("/"));
    c.requests = vec![fast, slow];
    c.requests_total = Some(100);
    c.connections = 2;
    let r = run(&c);
    assert_eq!(r.requests, 100);
    let l = &r.latency_ms;
    // 90% answer at once, 10% after 40 ms: p50 is fast, p99 and max at least 40 ms.
    assert!(l.p50 < 40.0, "p50 {}", l.p50);
    assert!(l.p99 >= 40.0, "p99 {}", l.p99);
    assert!(l.max >= 40.0 && l.max < 40.0 + 500.0, "max {}", l.max);
    assert!(l.min < 40.0);
}

#[test]
fn duration_bounds_the_run() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.duration = Some(Duration::from_millis(500));
    c.connections = 2;
    let r = run(&c);
    assert_eq!(r.duration_s, 0.5);
    assert!(r.requests > 0);
    assert_eq!(r.errors.total, 0);
    // Responses cannot outnumber what the server answered.
    assert!(r.requests <= server.requests());
}

#[test]
fn ramps_connections_at_the_given_rate() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.duration = Some(Duration::from_millis(600));
    c.connections = 20;
    c.ramp = Some(100.0);
    let r = run(&c);
    // The 20th connection may open 190 ms after the first, not sooner.
    let all = r.connects.all_connected_s.expect("all connections opened");
    assert!(all >= 0.19, "all connected after {all}");
    assert!(r.connects.ramp_rate.unwrap() <= 20.0 / 0.19);
    assert_eq!(server.connections(), 20);
}

#[test]
fn talks_to_unix_sockets() {
    let path = std::env::temp_dir().join(format!("tessera-bench-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let server = TestServer::start_unix(&path).unwrap();
    let mut c = config("http://localhost/");
    c.unix_socket = Some(path.clone());
    c.requests_total = Some(200);
    c.pipeline = 2;
    let r = run(&c);
    assert_eq!((r.requests, r.errors.total), (200, 0));
    assert_eq!(server.requests(), 200);
    assert!(r.settings.address.starts_with("unix:"));
}
