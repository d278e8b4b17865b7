//! What every worker of the process shares, and where the workers are in their life.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::access_log;
use crate::conn_state::ConnState;
use crate::generation::Generation;
use crate::metrics;
use crate::net::listeners::Listeners;
use crate::net::tls;

/// What every worker shares. The configuration and what is built from it is the
/// current [`Generation`], replaced whole by a reload; the rest lives as long as the
/// process.
pub(crate) struct Shared {
    /// The running configuration generation, and its number (what a worker compares
    /// with the one it holds before each request).
    pub current: ArcSwap<Generation>,
    pub generation: AtomicU64,
    /// The listening sockets; workers sync their accept loops to them.
    pub listeners: Listeners,
    /// The access log's drop counter and reopen flag.
    pub log: Arc<access_log::Shared>,
    /// The connections each client has open, for `limit_conn_per_client`.
    pub per_client: crate::limit::PerClient,
    /// Requests refused, per reason (indexed by `wire::Error::index`).
    pub refusals: [AtomicU64; wire::Error::ALL.len()],
    /// Connections closed with a lingering close (half-close, then drain), because the
    /// client might have had bytes in flight; every other close after a response is
    /// immediate.
    pub lingering_closes: AtomicU64,
    /// Connections per state for each worker, published by its periodic check.
    pub counts: Vec<[AtomicUsize; ConnState::ALL.len()]>,
    /// Fixed at start (they size the buffers and slots every worker allocated): a
    /// reload that changes them says they wait for a restart or an upgrade.
    pub limits: wire::Limits,
    pub workers: usize,
    pub slots_per_worker: usize,
    /// The TLS settings every TLS listener shares (certificates, resumption), when
    /// there was a `tls_listen` at start.
    pub tls: Option<tls::Tls>,
    /// `[acme]`'s certificates and challenge answers (HTTP-01 is answered on the
    /// cleartext listeners), when it was configured at start.
    pub acme: Option<Arc<tls::AcmeCerts>>,
    /// The port of the first `tls_listen` as bound at start, for `redirect_https`.
    pub https_port: Option<u16>,
    /// `h3=":PORT"; ma=86400` with the port of the first `quic_listen` as bound at start:
    /// the Alt-Svc field that responses on TLS connections carry when QUIC is on.
    pub alt_svc: Option<Box<[u8]>>,
    /// The origin of every worker's millisecond clock, so that a time one worker
    /// records in the shared file cache means the same to the others.
    pub epoch: std::time::Instant,
    /// Whether requests are counted for `/metrics` (an admin listener is configured).
    pub metrics_on: bool,
    /// Per worker, its request counters; the admin listener's own.
    pub metrics: Vec<metrics::WorkerMetrics>,
    pub admin_metrics: metrics::WorkerMetrics,
    pub host_labels: metrics::HostLabels,
    /// The `kind` labels, fixed when the server was bound.
    pub kinds: metrics::Kinds,
    /// When the process started, in seconds since the Unix epoch.
    pub started_unix: f64,
    /// Reloads refused (an invalid configuration).
    pub reloads_failed: AtomicU64,
}

/// Where the workers are in their life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Serve,
    /// Another process took the listening sockets over (binary upgrade): stop
    /// accepting, answer the next request on each connection with `Connection: close`,
    /// let idle connections time out, exit when none is left (or after
    /// `shutdown_timeout`).
    Drain,
    /// Graceful shutdown: stop accepting, finish the responses in flight, close idle
    /// connections at once, exit (after `shutdown_timeout` at the latest).
    Stop,
}
