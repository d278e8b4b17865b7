//! Integration tests of the ESI proxy against real origin servers on loopback.

mod assembly;
mod failure;
mod forwarding;
mod origin;
mod security;

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edge::{
    ClientInfo, Edge, EdgeConfig, FragmentHost, PageError, ProxyError, ProxyRequest, ProxyResponse,
    UpstreamConfig,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Version};

use origin::Origin;

/// Runs a test the way a tessera worker runs: a current-thread runtime and a LocalSet.
pub fn run<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

/// One upstream `origin` serving every path.
pub fn config(origin: &Origin) -> EdgeConfig {
    EdgeConfig::proxy_to(&origin.addr.to_string())
}

/// Adds upstream `name` at `origin` and allows includes to `host` to reach it.
pub fn allow_host(config: &mut EdgeConfig, host: &str, name: &str, addr: &str, credentials: bool) {
    config.upstream.push(UpstreamConfig {
        name: name.into(),
        addresses: vec![addr.into()],
        ..UpstreamConfig::default()
    });
    config.esi.fragment_host.push(FragmentHost {
        host: host.into(),
        upstream: name.into(),
        credentials,
    });
}

/// A GET for `target` on host `site.test` from client 10.0.0.7.
pub fn request(target: &str, headers: &[(&str, &str)]) -> ProxyRequest {
    let mut h = HeaderMap::new();
    h.insert("host", HeaderValue::from_static("site.test"));
    for (n, v) in headers {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    ProxyRequest {
        method: Method::GET,
        target: target.into(),
        headers: h,
        body: Bytes::new(),
        streamed: None,
        client: ClientInfo {
            addr: "10.0.0.7".parse().unwrap(),
            scheme: "http",
            version: Version::HTTP_11,
            port: 0,
            forwarded_for: None,
        },
        notes: None,
        request_id: None,
        trace: None,
    }
}

/// The whole body as text, or how it broke off, with what came before the break.
pub async fn read_all(resp: &mut ProxyResponse) -> (String, Option<PageError>) {
    let mut out = Vec::new();
    while let Some(chunk) = resp.body.next_chunk().await {
        match chunk {
            Ok(b) => out.extend_from_slice(&b),
            Err(e) => return (String::from_utf8(out).unwrap(), Some(e)),
        }
    }
    (String::from_utf8(out).unwrap(), None)
}

/// Proxies `target` and returns the assembled body, failing the test on any error.
pub async fn fetch_page(edge: &Edge, target: &str) -> String {
    let mut resp = edge
        .proxy(request(target, &[]))
        .await
        .expect("page answered");
    let (body, err) = read_all(&mut resp).await;
    assert!(err.is_none(), "page broke off: {err:?} after {body:?}");
    body
}

/// Proxies `target` and returns the error before the head.
pub async fn fetch_error(edge: &Edge, target: &str) -> ProxyError {
    match edge.proxy(request(target, &[])).await {
        Ok(mut r) => panic!("expected an error, got {:?}", read_all(&mut r).await),
        Err(e) => e,
    }
}

pub fn ms(d: Duration) -> u128 {
    d.as_millis()
}

pub fn since(t: Instant) -> Duration {
    t.elapsed()
}
