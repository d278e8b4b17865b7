use crate::{config, run};
use bench::testserver::TestServer;
use std::time::Duration;

#[test]
fn classifies_refused_connections() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = config(&format!("http://127.0.0.1:{port}/"));
    c.requests_total = Some(10);
    c.connections = 2;
    let r = run(&c);
    assert_eq!(r.requests, 0);
    assert_eq!(r.errors.connect, 10);
    assert_eq!(r.errors.total, 10);
}

#[test]
fn classifies_resets() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/close"));
    c.requests_total = Some(5);
    let r = run(&c);
    assert_eq!((r.requests, r.errors.reset, r.errors.total), (0, 5, 5));
}

#[test]
fn classifies_bad_responses() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/garbage"));
    c.requests_total = Some(5);
    let r = run(&c);
    assert_eq!(
        (r.requests, r.errors.bad_response, r.errors.total),
        (0, 5, 5)
    );
}

#[test]
fn classifies_timeouts() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/hang"));
    c.requests_total = Some(2);
    c.connections = 2;
    c.timeout = Duration::from_millis(200);
    let r = run(&c);
    assert_eq!((r.requests, r.errors.timeout, r.errors.total), (0, 2, 2));
}

#[test]
fn classifies_statuses() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/status/503"));
    c.requests_total = Some(7);
    let r = run(&c);
    assert_eq!(r.requests, 7);
    assert_eq!(r.errors.non_2xx, 7);
    assert_eq!(r.errors.status.get("503"), Some(&7));
    assert_eq!(
        r.errors.connect + r.errors.reset + r.errors.timeout + r.errors.bad_response,
        0
    );
}

#[test]
fn refuses_bad_configurations() {
    let run = |c: &bench::Config| bench::run(c, &Default::default(), None).unwrap_err();
    let mut c = config("ftp://127.0.0.1/");
    c.requests_total = Some(1);
    assert!(matches!(run(&c), bench::Error::Url { .. }));
    let mut c = config("http://127.0.0.1:1/");
    c.streams = 8;
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption {
            option: "streams",
            ..
        }
    ));
    let mut c = config("http://127.0.0.1:1/");
    c.insecure = true;
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption { option: "ca", .. }
    ));
    let mut c = config("https://127.0.0.1:1/");
    c.ca = Some("/nonexistent/ca.pem".into());
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption { option: "ca", .. }
    ));
    // One scheme per run.
    let mut c = config("http://127.0.0.1:1/");
    c.requests
        .push(bench::RequestSpec::get("https://127.0.0.1:1/"));
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption { option: "url", .. }
    ));
    let mut c = config("http://127.0.0.1:1/");
    c.pipeline = 4;
    c.keepalive = false;
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption {
            option: "pipeline",
            ..
        }
    ));
    let mut c = config("http://127.0.0.1:1/");
    c.rate = Some(100.0);
    c.pipeline = 2;
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption {
            option: "pipeline",
            ..
        }
    ));
    let mut c = config("http://127.0.0.1:1/");
    c.requests
        .push(bench::RequestSpec::get("http://127.0.0.1:2/"));
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption { option: "url", .. }
    ));
    // 192.0.2.1 is TEST-NET-1: a literal, so nothing is resolved or contacted.
    let mut c = config("http://192.0.2.1:1/");
    c.loopback_only = true;
    assert!(matches!(run(&c), bench::Error::NotLoopback(_)));
    c.loopback_only = false;
    c.requests_total = Some(0);
    assert!(matches!(
        run(&c),
        bench::Error::InvalidOption {
            option: "requests",
            ..
        }
    ));
}
