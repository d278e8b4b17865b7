//! Typed errors. Each proxy failure maps to exactly one status in [`ProxyError::status`].

/// A configuration the proxy cannot run with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A bad value or a dangling reference; the message names the key.
    #[error("invalid proxy configuration: {0}")]
    Invalid(String),
}

/// Why one upstream request failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// No connection within `connect_timeout`.
    #[error("connect to {upstream} timed out")]
    ConnectTimeout { upstream: String },
    /// Connection refused, reset or unresolvable.
    #[error("connect to {upstream} failed: {message}")]
    Connect { upstream: String, message: String },
    /// No response head (or body progress) within the response timeout.
    #[error("{upstream} did not answer in time")]
    ResponseTimeout { upstream: String },
    /// The connection broke or the response was not HTTP.
    #[error("{upstream}: {message}")]
    Protocol { upstream: String, message: String },
    /// The client's request body, streamed to the peer, broke off (the client went away,
    /// or it passed a limit): the request was aborted, its connection closed.
    #[error("{upstream}: request body: {message}")]
    RequestBody { upstream: String, message: String },
    /// Every peer of the upstream is out (passive or active health): not sent.
    #[error("every peer of {upstream} is down")]
    Unavailable { upstream: String },
    /// A body larger than the limit.
    #[error("response from {upstream} is too large")]
    TooLarge { upstream: String },
    /// An encoded body (gzip, br, zstd) that does not decode, or that expands beyond the
    /// limit (a decompression bomb).
    #[error("response from {upstream} cannot be decoded: {message}")]
    Decode { upstream: String, message: String },
    /// The identical request this one waited on (request coalescing) failed; this one
    /// is not sent again, so a failing origin sees one request, not one per client.
    #[error("{upstream} failed the request this one waited on")]
    Coalesced { upstream: String },
}

/// Why a page's stream ended early (after its head was sent). The server must close the
/// connection without finishing the body, so that no cache stores a truncated page.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PageError {
    /// An include failed with nothing to absorb it (page policy `fail`).
    #[error(transparent)]
    IncludeFailed(#[from] esi::IncludeFailed),
    /// A passed-through body broke off.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A body read from the disk tier as it was sent could not be read to its end, or
    /// no longer matched its checksum.
    #[error("{0}")]
    Disk(String),
}

/// Why [`Edge::proxy`](crate::Edge::proxy) produced no response; the server answers
/// [`status`](ProxyError::status) and closes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// No route matches the path.
    #[error("no route for {path}")]
    NoRoute { path: String },
    /// The route is a static root; the server serves those itself.
    #[error("{path} is served from a static root")]
    StaticRoute { path: String },
    /// The page's upstream failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// An ESI page failed before any byte of it was ready.
    #[error(transparent)]
    Page(#[from] PageError),
    /// The request cannot be forwarded (bad target or header).
    #[error("bad request: {0}")]
    BadRequest(String),
}

impl ProxyError {
    /// The status to answer: 404 no route, 400 bad request, 504 timeouts, 502 everything
    /// else an upstream or a fragment did (every peer down included: at once). `StaticRoute` is
    /// not an error to show: the server serves the file (404 if it gets here anyway).
    pub fn status(&self) -> u16 {
        match self {
            ProxyError::NoRoute { .. } | ProxyError::StaticRoute { .. } => 404,
            ProxyError::BadRequest(_) => 400,
            ProxyError::Upstream(
                UpstreamError::ConnectTimeout { .. } | UpstreamError::ResponseTimeout { .. },
            ) => 504,
            ProxyError::Upstream(_) | ProxyError::Page(_) => 502,
        }
    }
}
