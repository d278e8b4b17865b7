//! The ESI proxy engine: an upstream HTTP/1.1 client with pooled keep-alive connections,
//! parallel fragment assembly streamed in document order, the include failure policy, and
//! upstreams of several peers: balancing, passive and active health, retries
//! (docs/upstreams.md).
//!
//! **What it is for.** Sitting between tessera's server and the origins: [`Edge::proxy`]
//! forwards a request to the upstream its route names (RFC 9110 forwarding: hop-by-hop
//! fields removed, X-Forwarded-For/Proto and Via added, `Surrogate-Capability:
//! tessera="ESI/1.0"` announced) and answers with the response passed through, or, when
//! the response is ESI (`Surrogate-Control: content="ESI/1.0"`), with the page assembled
//! from its fragments. Every include is requested as soon as it is known, nested ones
//! too; the page streams out in order, the ready prefix before a slow fragment; identical
//! concurrent fragment fetches are made once. Includes may only reach the page's own
//! origin and the hosts of `[[esi.fragment_host]]`, with Cookie and Authorization only
//! where trusted. docs/esi.md ("The ESI proxy") describes the configuration and the
//! failure policy.
//!
//! **What it is not for.** Accepting client connections, framing responses, static files
//! (the `server` crate), parsing ESI (the `esi` crate).
//!
//! **How it fits.** `cli` builds one [`EdgeModule`] (a `handler::Module`) from the
//! [`EdgeConfig`]; it holds the process's one [`Cache`] (docs/cache.md). Each server
//! worker is one thread with a tokio current-thread runtime and a `LocalSet`, and starts
//! the module's service, one [`Edge`] ([`Edge::with_cache`]), which is also the
//! `handler::Upstreams` the same worker's scripts call. For a request on one of its
//! routes the service answers later: it awaits [`Edge::proxy`] and hands the server the
//! [`ProxyResponse`] as a `handler::Response`: the head, then [`Body::next_chunk`] until
//! `None`. A chunk `Err`
//! means the page broke off after its head was sent: the server closes the connection
//! without a final chunk. A [`ProxyError`] before the head is answered with
//! [`ProxyError::status`]. [`Body::content_length`] is `None` for an assembled page, so
//! an HTTP/1.0 client gets it buffered ([`Body::collect`]) or close-delimited. Fragment
//! fetches and page writers are spawned with `evloop::spawn_local`, so `proxy`
//! must run inside a `LocalSet`.
//!
//! **How it is laid out.** In layers, a module never importing one above it
//! (`scripts/layering.py` fails on any module import cycle):
//!
//! - leaves every layer may use: `config`, `error`, `headers`, `arena` (the worker's
//!   blocks), `clock`, `metrics` (every figure of edge's for `/metrics`);
//! - `upstream/`: peers, balancing, health, the retry budget, the HTTP/1.1 client and
//!   its pools, the requests it sends;
//! - `cache/`: the memory tier, coalescing (`flight`), the phase machine (`lookup`), the
//!   Redis tier, stored responses and their compressed forms, freshness;
//! - `worker`: one worker's routes, upstreams, fragment fetches in flight and cache;
//! - `assembly/`: fragment fetches, decoding, parallel page assembly, stitching;
//! - the proxy on top: [`Edge`] (`proxy`), its request and response (`exchange`, `body`),
//!   upgrades (`tunnel`), per-route compression (`route_compression`), and the
//!   `handler::Module` (`module`).
//!
//! ```no_run
//! use edge::{ClientInfo, Edge, EdgeConfig, ProxyRequest};
//!
//! # async fn serve_one() -> Result<(), Box<dyn std::error::Error>> {
//! let edge = Edge::new(EdgeConfig::proxy_to_url("http://127.0.0.1:9000")?)?;
//! let mut headers = http::HeaderMap::new();
//! headers.insert("host", "shop.example".parse()?);
//! let request = ProxyRequest {
//!     method: http::Method::GET,
//!     target: "/home".into(),
//!     headers,
//!     body: bytes::Bytes::new(),
//!     streamed: None,
//!     client: ClientInfo {
//!         addr: "192.0.2.7".parse()?,
//!         scheme: "http",
//!         version: http::Version::HTTP_11,
//!         port: 0,
//!         forwarded_for: None,
//!     },
//!     notes: None,
//!     request_id: None,
//!     trace: None,
//! };
//! match edge.proxy(request).await {
//!     Err(e) => { let _status = e.status(); /* answer it */ }
//!     Ok(mut response) => {
//!         // write response.status and response.headers, chunked unless
//!         // response.body.content_length() is known, then:
//!         while let Some(chunk) = response.body.next_chunk().await {
//!             match chunk {
//!                 Ok(bytes) => { /* write bytes */ }
//!                 Err(_) => { /* close the connection: no final chunk */ break }
//!             }
//!         }
//!     }
//! }
//! # Ok(())
//! # }
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! tokio::task::LocalSet::new().block_on(&runtime, serve_one()).unwrap();
//! ```

mod arena;
mod assembly;
mod body;
mod cache;
mod call;
mod clock;
mod config;
mod error;
mod exchange;
mod fill;
mod grpc;
pub mod headers;
mod metrics;
mod module;
mod partial;
mod proxy;
mod purge;
mod revalidation;
mod route_compression;
mod serve;
mod slices;
mod surrogate_keys;
mod tunnel;
mod upstream;
mod worker;

pub use arena::Text;
pub use body::Body;
pub use cache::{Cache, CacheStats, DiskTierStats, FanOutStats, SharedTierStats};
pub use config::{
    Balance, Bypass, CacheConfig, DiskConfig, DurationText, EdgeConfig, EsiConfig, EsiMode,
    FragmentHost, HealthConfig, KeyRules, PagePolicy, PeerConfig, RedisConfig, RouteCacheConfig,
    RouteConfig, SendProxy, SizeText, TtlMode, UpstreamConfig, SELF_ADDRESS,
};
pub use error::{ConfigError, PageError, ProxyError, UpstreamError};
pub use exchange::{ProxyRequest, ProxyResponse};
pub use headers::ClientInfo;
pub use module::EdgeModule;
pub use proxy::{Edge, Route};
pub use upstream::client::UpstreamStats;
pub use upstream::peers::PeerState;
