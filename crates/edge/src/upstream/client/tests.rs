//! The requests in flight that least_conn counts are every worker's, and each is
//! counted down however it ends.

use std::net::SocketAddr;

use http::header::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::metrics::UpstreamFigures;

/// A peer that reads requests and answers each with `200 ok`, or never answers.
async fn peer(answers: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    evloop::spawn_local(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            evloop::spawn_local(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    if answers {
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        let _ = s.write_all(ok).await;
                    }
                }
            });
        }
    });
    addr
}

/// One worker's client of the upstream whose peers (and counts) are `set`.
fn worker(c: &UpstreamConfig, set: &Arc<PeerSet>, n: u64) -> Rc<Upstream> {
    let figures = UpstreamFigures::new(1).for_worker(0);
    Rc::new(Upstream::new(c, set.clone(), Arc::default(), figures, 0, n))
}

async fn get(upstream: &Rc<Upstream>) -> Result<(Head, Pooled), UpstreamError> {
    let (fields, body) = (HeaderMap::new(), Bytes::new());
    let req = Outgoing {
        method: &Method::GET,
        target: "/",
        fields: Fields::Plain(&fields),
        body: &body,
        streamed: None,
        upgrade: None,
        notes: None,
        trace: None,
    };
    upstream
        .send(&req, Instant::now() + Duration::from_secs(5))
        .await
}

async fn until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        evloop::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn least_conn_sees_every_workers_requests_and_counts_each_down_on_every_path() {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let (slow, fast) = (peer(false).await, peer(true).await);
            let c = UpstreamConfig {
                addresses: vec![slow.to_string(), fast.to_string()],
                balance: Balance::LeastConn,
                max_fails: Some(0),
                ..UpstreamConfig::default()
            };
            let set = Arc::new(PeerSet::new(&c, false));
            let (one, two) = (worker(&c, &set, 1), worker(&c, &set, 2));

            // Worker one's request waits on the slow peer (the first of a tie).
            let waiting = evloop::spawn_local({
                let one = one.clone();
                async move { get(&one).await.map(|_| ()) }
            });
            until("the request to reach the slow peer", || {
                set.in_flight(0) == 1
            })
            .await;
            // Worker two sees it: its next requests go to the other peer.
            for _ in 0..3 {
                let (head, pooled) = get(&two).await.unwrap();
                assert_eq!(head.status, 200);
                assert_eq!(set.in_flight(1), 1, "counted while its body is read");
                drop(pooled);
                assert_eq!(set.in_flight(1), 0, "success: counted down");
            }
            assert_eq!(set.in_flight(0), 1);
            // Cancelled (a client gone): counted down.
            waiting.abort();
            until("the cancelled request to be counted down", || {
                set.in_flight(0) == 0
            })
            .await;
        })
        .await;
}

#[tokio::test]
async fn a_failed_request_is_counted_down() {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = refused.local_addr().unwrap();
            drop(refused);
            let c = UpstreamConfig {
                addresses: vec![addr.to_string()],
                balance: Balance::LeastConn,
                ..UpstreamConfig::default()
            };
            let set = Arc::new(PeerSet::new(&c, false));
            assert!(get(&worker(&c, &set, 1)).await.is_err());
            assert_eq!(set.in_flight(0), 0);
        })
        .await;
}
