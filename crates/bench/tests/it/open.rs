use crate::{config, run};
use bench::testserver::TestServer;
use std::time::Duration;

#[test]
fn holds_the_rate_and_counts_exactly() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.rate = Some(500.0);
    c.requests_total = Some(200);
    c.connections = 4;
    c.threads = 2;
    let r = run(&c);
    assert_eq!(r.requests, 200);
    assert_eq!(server.requests(), 200);
    assert_eq!(r.settings.model, "open");
    assert_eq!(r.correction, "intended-send-time");
    // 200 requests at 500/s cannot finish before the 200th is due (398 ms).
    assert!(r.duration_s >= 0.39, "took {}", r.duration_s);
    let lag = r
        .self_check
        .send_lag_ms
        .expect("open model measures send lag");
    assert_eq!(lag.count, 200);
}

#[test]
fn a_one_second_stall_shows_in_corrected_p99() {
    let server = TestServer::start().unwrap();
    // After 100 requests (0.5 s in) the server freezes for 1 s.
    server.stall_after(100, Duration::from_secs(1));
    let mut c = config(&server.url("/"));
    c.rate = Some(200.0);
    c.duration = Some(Duration::from_secs(3));
    c.connections = 2;
    let r = run(&c);
    assert_eq!(r.errors.total, 0);
    // Requests that were due during the stall waited for it; measured from
    // their intended send time the wait shows up in the tail...
    assert!(
        r.corrected_latency_ms.p99 >= 800.0,
        "corrected p99 {}",
        r.corrected_latency_ms.p99
    );
    assert!(r.corrected_latency_ms.max >= 950.0);
    // ...while only the two requests in flight at the stall saw it from their
    // actual send time: the uncorrected p99 hides it.
    assert!(
        r.latency_ms.p99 < 500.0,
        "uncorrected p99 {}",
        r.latency_ms.p99
    );
    assert!(r.latency_ms.max >= 950.0);
    // Requests due during the stall were sent late, so the rate held on average.
    assert!(r.requests >= 500, "requests {}", r.requests);
}
