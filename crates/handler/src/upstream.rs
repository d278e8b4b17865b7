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
