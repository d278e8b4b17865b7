//! Upstream calls as a module other than the proxy makes them (Lua's
//! `tessera.http.request`): the interface is here, `edge` implements it, so a script
//! reaches upstreams without depending on the proxy.

use bytes::Bytes;

use crate::LocalFuture;

/// One request to a named upstream.
pub struct UpstreamRequest {
    pub upstream: String,
    pub method: String,
    /// Path and query.
    pub target: String,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Bytes,
    /// Most body bytes read from the response.
    pub max_body: usize,
}

/// Its whole response.
pub struct UpstreamReply {
    pub status: u16,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Bytes,
}

/// A worker's upstream client.
pub trait Upstreams {
    /// Sends `req` through the upstream's pool and breaker, within its timeouts. `Err`
    /// says why it failed, for the script.
    fn call(&self, req: UpstreamRequest) -> LocalFuture<Result<UpstreamReply, String>>;
}

/// Builds a worker's [`Upstreams`] on that worker's thread.
pub trait UpstreamsFactory: Send + Sync {
    fn upstreams(&self, worker: usize) -> Option<std::rc::Rc<dyn Upstreams>>;
}

/// A request on its way to an upstream, as a balancer hook sees it.
pub struct BalanceRequest<'a> {
    /// The upstream's name.
    pub upstream: &'a str,
    pub method: &'a str,
    /// Path and query, as sent to the upstream.
    pub target: &'a str,
    /// The client whose request it is (`None` for a request the proxy makes itself, an
    /// ESI fragment's).
    pub client: Option<std::net::SocketAddr>,
    /// The request's fields (the client's, for a forwarded request), names lower-case.
    pub fields: &'a [(&'a [u8], &'a [u8])],
}

/// One of the upstream's peers, as a balancer hook sees it.
pub struct PeerView<'a> {
    /// `ip:port` (or the name as written, or `unix:PATH`).
    pub address: &'a str,
    /// Its health: `up`, `down` (taken out by failures), `probing` (one request decides
    /// whether it is back) or `unhealthy` (taken out by the active checks).
    pub state: &'static str,
    pub weight: u32,
    /// Whether this request was tried on it already (a retry is choosing).
    pub tried: bool,
}

/// Chooses a request's peer in place of an upstream's balancer (`[[upstream]]
/// balancer_script`: Lua's `balance(r, peers)`), on the worker's thread, for each
/// attempt. `cli` builds it and hands it to the proxy, which names no script.
pub trait BalancerHook: Send + Sync + std::fmt::Debug {
    /// The peer to try (an index into `peers`), or `None`: the configured balancer
    /// chooses. A hook that fails or answers something that is not a peer logs why and
    /// answers `None`.
    fn balance(&self, req: &BalanceRequest<'_>, peers: &[PeerView<'_>]) -> Option<usize>;
}
