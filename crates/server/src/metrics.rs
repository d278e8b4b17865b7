//! Request counters for `/metrics`, kept per worker and summed at scrape time: a worker
//! writes only its own counters (a relaxed load and store, no locked instruction, no
//! cache line another worker writes), and the admin thread reads them all.
//!
//! Labels are bounded by construction: the host is the configured host's first name
//! (`default` for the top-level one; at most [`MAX_HOSTS`] names over the process's
//! life, later ones counted as `other`), never the request's Host header; the kind is one
//! of [`Kinds`], fixed when the server is bound; the code is the status class.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use handler::bump;

/// What answered a request, the `kind` label, when the server answered it: the static
/// files, the admin listener, or `module` for a module whose kind was not registered. The
/// modules' own kinds follow these in [`Kinds`].
const OWN: [&str; 3] = ["static", "admin", "module"];

/// The index of `module` in [`OWN`].
const UNREGISTERED: u8 = 2;

/// Every `kind` label of the process: the server's own, then those the modules registered
/// when the server was bound (`handler::KindLabels`), fixed from then on so that a label
/// keeps its counters across reloads and a scrape lists the same families whatever
/// modules the configuration uses.
pub(crate) struct Kinds {
    labels: Vec<&'static str>,
    /// Per label, the index of the one its responses count under when assembled from
    /// fragments (its own, for most).
    assembled: Vec<u8>,
}

impl Kinds {
    pub fn new(registered: &[handler::KindLabels]) -> Kinds {
        let mut labels = OWN.to_vec();
        for k in registered {
            for label in std::iter::once(k.answered).chain(k.assembled) {
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
        }
        let mut kinds = Kinds {
            assembled: (0..labels.len() as u8).collect(),
            labels,
        };
        for k in registered {
            if let Some(assembled) = k.assembled {
                let (from, to) = (kinds.index(k.answered), kinds.index(assembled));
                kinds.assembled[from as usize] = to;
            }
        }
        kinds
    }

    /// The index of a module's label; that of `module` when it was not registered.
    pub fn index(&self, label: &str) -> u8 {
        self.labels
            .iter()
            .position(|l| *l == label)
            .map_or(UNREGISTERED, |i| i as u8)
    }

    /// The kind a response of `kind` counts under when it was assembled from fragments.
    pub fn assembled(&self, kind: u8) -> u8 {
        self.assembled.get(kind as usize).copied().unwrap_or(kind)
    }

    fn len(&self) -> usize {
        self.labels.len()
    }

    /// The labels with their indexes, in the order a scrape lists them: the static files,
    /// the modules' (as registered), the admin listener, `module`.
    fn listed(&self) -> impl Iterator<Item = (usize, &'static str)> + '_ {
        std::iter::once(0)
            .chain(OWN.len()..self.labels.len())
            .chain(1..OWN.len())
            .map(|i| (i, self.labels[i]))
    }
}

/// The request's method: the `method` label. The methods a site sees every day keep
/// their own label; the rest (TRACE, CONNECT, PURGE, BAN, any other token) are `other`.
pub(crate) const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "other",
];

/// The index in [`METHODS`] of a request's method.
pub(crate) fn method_index(method: wire::Method) -> u8 {
    match method {
        wire::Method::Get => 0,
        wire::Method::Head => 1,
        wire::Method::Post => 2,
        wire::Method::Put => 3,
        wire::Method::Delete => 4,
        wire::Method::Options => 5,
        wire::Method::Patch => 6,
        _ => 7,
    }
}

/// Why the server closed a client connection of its own accord: the `reason` label of
/// `tessera_connections_closed_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Closed {
    /// The slots were full: the oldest idle keep-alive connection made room for a new one.
    Evicted,
    HeadTimeout,
    BodyTimeout,
    IdleTimeout,
    WriteTimeout,
}

const CLOSE_REASONS: [&str; 5] = [
    "evicted",
    "head_timeout",
    "body_timeout",
    "idle_timeout",
    "write_timeout",
];

/// How a TLS handshake ended: the `result` label of `tessera_tls_handshakes_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Handshake {
    Full,
    Resumed,
    Failed,
}

const HANDSHAKES: [&str; 3] = ["full", "resumed", "failed"];

/// The index in [`Kinds`] of one of the server's own kinds ([`OWN`]).
pub(crate) fn kind_index(kind: &str) -> u8 {
    OWN.iter()
        .position(|k| *k == kind)
        .map_or(UNREGISTERED, |i| i as u8)
}

/// Host labels a process keeps apart; the last one is `other`.
pub(crate) const MAX_HOSTS: usize = 64;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Upper bounds of the request duration buckets, in microseconds (100 us to 10 s).
const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Who answered a request, as the connection learns it from `dispatch`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Answered {
    /// The host label's index (`HostLabels`).
    pub host: u16,
    /// The index in [`Kinds`].
    pub kind: u8,
    /// The index in [`METHODS`].
    pub method: u8,
    /// The request's id (`$request_id`, `%{request_id}x`), when its site uses one.
    pub request_id: Option<u128>,
    /// The routing rule that chose its handling, (site, rule), for `%{route}x`.
    pub route: Option<(u16, u16)>,
    /// Its trace context, with `[tracing]` on (`%{traceparent}x`, its server span).
    pub trace: Option<trace::Context>,
}

/// One worker's counters. Aligned so that two workers' never share a cache line.
#[repr(align(128))]
pub(crate) struct WorkerMetrics {
    /// How many kinds there are ([`Kinds`]).
    kinds: usize,
    /// By host, kind and status class.
    requests: Box<[AtomicU64]>,
    /// By kind, per bucket (not cumulative; the last is above every bound).
    durations: Box<[AtomicU64]>,
    duration_sum_us: Box<[AtomicU64]>,
    /// Bytes read from clients (heads and bodies, as they came: TLS records decrypted).
    received_bytes: AtomicU64,
    /// Response heads and bodies written (chunked framing and TLS records not counted).
    sent_bytes: AtomicU64,
    accepted: AtomicU64,
    closed: [AtomicU64; CLOSE_REASONS.len()],
    accept_pauses: AtomicU64,
    /// Open-file cache lookups: hits, misses.
    file_cache: [AtomicU64; 2],
    handshakes: [AtomicU64; HANDSHAKES.len()],
    /// Connections closed on a `proxy_protocol` listener for a missing or malformed
    /// PROXY header.
    proxy_refused: AtomicU64,
    /// Requests refused by access policy, by host and [`DENIED`] reason.
    denied: Box<[AtomicU64]>,
    /// Connections (index 0, no host yet) and requests (by host label) refused by
    /// `limit_conn_per_client` and `limit_conn`.
    limit_conn_refused: Box<[AtomicU64]>,
    http2_connections: AtomicU64,
    /// HTTP/3 connections whose handshake finished, and new QUIC connections sent a
    /// Retry (`[http3] retry_threshold`).
    http3_connections: AtomicU64,
    quic_retries: AtomicU64,
    /// HTTP/2 streams by how they ended: finished, cancelled by the client.
    http2_streams: [AtomicU64; 2],
    /// GOAWAYs sent, by [`GOAWAY_REASONS`].
    http2_goaways: [AtomicU64; GOAWAY_REASONS.len()],
}

/// Why a request was refused by access policy: the `reason` label of
/// `tessera_access_denied_total` (besides `proxy_protocol`, counted per connection).
pub(crate) const DENIED: [&str; 3] = ["acl", "auth", "forward_auth"];

const DENIED_HELP: &str = "Connections and requests refused by access policy, by host and \
     reason: proxy_protocol (a connection on a proxy_protocol listener without a valid PROXY \
     header in time; counted before any host is known, so its host is empty), acl (an \
     access list refused the client), auth (basic_auth answered 401), forward_auth \
     (the forward_auth upstream refused, or failed and the request was answered 500), \
     limit_conn (a request over its route's or host's limit_conn; a connection over \
     limit_conn_per_client, host empty).";

/// Indexes into [`DENIED`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Denied {
    /// An `access` list refused the client.
    Acl,
    /// `basic_auth` refused the request's credentials (none, or wrong: a 401).
    Auth,
    /// `forward_auth` refused the request (its upstream's 401 or 403) or failed (500).
    ForwardAuth,
}

/// Why the server sent an HTTP/2 connection GOAWAY: the `reason` label.
pub(crate) const GOAWAY_REASONS: [&str; 3] = ["shutdown", "reload", "rapid_reset"];

/// Indexes into [`GOAWAY_REASONS`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum GoAway {
    Shutdown,
    Reload,
    RapidReset,
}

impl WorkerMetrics {
    pub fn new(kinds: &Kinds) -> WorkerMetrics {
        let zeros = |n| (0..n).map(|_| AtomicU64::new(0)).collect();
        let kinds = kinds.len();
        WorkerMetrics {
            kinds,
            requests: zeros(MAX_HOSTS * kinds * METHODS.len() * CLASSES.len()),
            durations: zeros(kinds * (BUCKETS_US.len() + 1)),
            duration_sum_us: zeros(kinds),
            received_bytes: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            closed: Default::default(),
            accept_pauses: AtomicU64::new(0),
            file_cache: Default::default(),
            handshakes: Default::default(),
            proxy_refused: AtomicU64::new(0),
            denied: zeros(MAX_HOSTS * DENIED.len()),
            limit_conn_refused: zeros(MAX_HOSTS + 1),
            http2_connections: AtomicU64::new(0),
            http3_connections: AtomicU64::new(0),
            quic_retries: AtomicU64::new(0),
            http2_streams: Default::default(),
            http2_goaways: Default::default(),
        }
    }

    /// Counts one response of `bytes` (head and body; called by this worker only).
    pub fn record(&self, answered: Answered, status: u16, micros: u64, bytes: u64) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        let kind = (answered.kind as usize).min(self.kinds - 1);
        let method = (answered.method as usize).min(METHODS.len() - 1);
        let host = (answered.host as usize).min(MAX_HOSTS - 1);
        bump(
            &self.requests[self.request_index(host, kind, method, class)],
            1,
        );
        let bucket = BUCKETS_US.partition_point(|&b| b < micros);
        bump(&self.durations[kind * (BUCKETS_US.len() + 1) + bucket], 1);
        bump(&self.duration_sum_us[kind], micros);
        bump(&self.sent_bytes, bytes);
    }

    /// Counts bytes read from a client.
    pub fn received(&self, bytes: usize) {
        bump(&self.received_bytes, bytes as u64);
    }

    /// Counts a connection accepted.
    pub fn accepted(&self) {
        bump(&self.accepted, 1);
    }

    /// Counts a connection the server closed of its own accord.
    pub fn closed(&self, reason: Closed) {
        bump(&self.closed[reason as usize], 1);
    }

    /// Counts a pause of accepting (slots full, none idle).
    pub fn accept_paused(&self) {
        bump(&self.accept_pauses, 1);
    }

    /// Counts a TLS handshake.
    pub fn handshake(&self, result: Handshake) {
        bump(&self.handshakes[result as usize], 1);
    }

    /// Counts a connection closed for its PROXY header.
    pub fn proxy_refused(&self) {
        bump(&self.proxy_refused, 1);
    }

    /// Counts a request of the host label `host` refused by access policy.
    pub fn denied(&self, host: u16, reason: Denied) {
        let host = (host as usize).min(MAX_HOSTS - 1);
        bump(&self.denied[host * DENIED.len() + reason as usize], 1);
    }

    /// Counts a connection that speaks HTTP/2.
    /// A request of the host with label `host` refused by `limit_conn`.
    pub fn limit_conn_refused(&self, host: u16) {
        bump(
            &self.limit_conn_refused[(host as usize).min(MAX_HOSTS - 1) + 1],
            1,
        );
    }

    /// A connection refused by `limit_conn_per_client` (no host is known yet).
    pub fn client_conns_refused(&self) {
        bump(&self.limit_conn_refused[0], 1);
    }

    pub fn http2_connection(&self) {
        bump(&self.http2_connections, 1);
    }

    pub fn http3_connection(&self) {
        bump(&self.http3_connections, 1);
    }

    pub fn quic_retry(&self) {
        bump(&self.quic_retries, 1);
    }

    /// Counts an HTTP/2 stream ended (`cancelled` by the client before its response was
    /// complete).
    pub fn http2_stream(&self, cancelled: bool) {
        bump(&self.http2_streams[usize::from(cancelled)], 1);
    }

    /// Counts a GOAWAY sent.
    pub fn http2_goaway(&self, reason: GoAway) {
        bump(&self.http2_goaways[reason as usize], 1);
    }

    /// Counts an open-file cache lookup.
    pub fn file_cache(&self, hit: bool) {
        bump(&self.file_cache[usize::from(!hit)], 1);
    }

    /// Where the counter of (host, kind, method, class) is in `requests`.
    fn request_index(&self, host: usize, kind: usize, method: usize, class: usize) -> usize {
        ((host * self.kinds + kind) * METHODS.len() + method) * CLASSES.len() + class
    }
}

/// The host labels handed out so far (each configured host's first name, `default` for
/// the top-level one), so that a label keeps its counters across reloads.
pub(crate) struct HostLabels(Mutex<Vec<String>>);

impl HostLabels {
    pub fn new() -> HostLabels {
        HostLabels(Mutex::new(vec!["default".to_string()]))
    }

    /// The label index of each site of `config`.
    pub fn of(&self, config: &crate::Config) -> Vec<u16> {
        let mut labels = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut index = |name: &str| {
            if let Some(i) = labels.iter().position(|l| l == name) {
                return i as u16;
            }
            if labels.len() < MAX_HOSTS - 1 {
                labels.push(name.to_string());
                return (labels.len() - 1) as u16;
            }
            (MAX_HOSTS - 1) as u16
        };
        std::iter::once(0)
            .chain(config.host.iter().map(|h| {
                let name = h.names.first().map_or("default", String::as_str);
                index(&name.to_ascii_lowercase())
            }))
            .collect()
    }

    fn name(&self, i: usize) -> String {
        let labels = self.0.lock().unwrap_or_else(|e| e.into_inner());
        labels.get(i).cloned().unwrap_or_else(|| "other".into())
    }
}

/// Adds the request families, summed over `workers`.
pub(crate) fn write(
    out: &mut handler::Metrics,
    workers: &[&WorkerMetrics],
    labels: &HostLabels,
    kinds: &Kinds,
) {
    write_requests(out, workers, labels, kinds);
    write_connections(out, workers, labels);
    write_limit_conn(out, workers, labels);
}

/// `tessera_access_denied_total{reason="limit_conn"}`: connections (host empty) always,
/// requests per host once one was refused.
fn write_limit_conn(out: &mut handler::Metrics, workers: &[&WorkerMetrics], labels: &HostLabels) {
    for i in 0..=MAX_HOSTS {
        let n = total(workers, &|w| &w.limit_conn_refused[i]);
        if i > 0 && n == 0 {
            continue;
        }
        let host = match i {
            0 => String::new(),
            i => labels.name(i - 1),
        };
        out.counter(
            "tessera_access_denied_total",
            DENIED_HELP,
            &[("host", &host), ("reason", "limit_conn")],
            n,
        );
    }
}

/// One counter summed over `workers`.
fn total(workers: &[&WorkerMetrics], pick: &dyn Fn(&WorkerMetrics) -> &AtomicU64) -> u64 {
    workers
        .iter()
        .map(|w| pick(w).load(Ordering::Relaxed))
        .sum()
}

/// Requests by host, kind, method and status class, and their durations by kind.
fn write_requests(
    out: &mut handler::Metrics,
    workers: &[&WorkerMetrics],
    labels: &HostLabels,
    kinds: &Kinds,
) {
    let sum = |pick: &dyn Fn(&WorkerMetrics) -> &AtomicU64| total(workers, pick);
    for host in 0..MAX_HOSTS {
        let mut name = None;
        for (k, kind) in kinds.listed() {
            for (m, method) in METHODS.iter().enumerate() {
                for (c, class) in CLASSES.iter().enumerate() {
                    let n = sum(&|w| &w.requests[w.request_index(host, k, m, c)]);
                    if n == 0 {
                        continue;
                    }
                    let host = name.get_or_insert_with(|| labels.name(host));
                    out.counter(
                        "tessera_requests_total",
                        "Requests answered, by host, kind of handler, method and status class.",
                        &[
                            ("host", host),
                            ("kind", kind),
                            ("method", method),
                            ("code", class),
                        ],
                        n,
                    );
                }
            }
        }
    }
    for (k, kind) in kinds.listed() {
        let mut cumulative = 0;
        let buckets: Vec<(f64, u64)> = BUCKETS_US
            .iter()
            .enumerate()
            .map(|(b, &bound)| {
                cumulative += sum(&|w| &w.durations[k * (BUCKETS_US.len() + 1) + b]);
                (bound as f64 / 1e6, cumulative)
            })
            .collect();
        let count =
            cumulative + sum(&|w| &w.durations[k * (BUCKETS_US.len() + 1) + BUCKETS_US.len()]);
        out.histogram(
            "tessera_request_duration_seconds",
            "Time from reading a request to writing its response's head, by kind of handler.",
            &[("kind", kind)],
            &buckets,
            count,
            sum(&|w| &w.duration_sum_us[k]) as f64 / 1e6,
        );
    }
}

/// Bytes, connections, the open-file cache, compression, TLS and HTTP/2.
fn write_connections(out: &mut handler::Metrics, workers: &[&WorkerMetrics], labels: &HostLabels) {
    let sum = |pick: &dyn Fn(&WorkerMetrics) -> &AtomicU64| total(workers, pick);
    out.counter(
        "tessera_received_bytes_total",
        "Bytes read from clients: request heads and bodies (after TLS decryption).",
        &[],
        sum(&|w| &w.received_bytes),
    );
    out.counter(
        "tessera_sent_bytes_total",
        "Bytes of response heads and bodies written to clients (before chunked framing and TLS).",
        &[],
        sum(&|w| &w.sent_bytes),
    );
    out.counter(
        "tessera_connections_accepted_total",
        "Client connections accepted.",
        &[],
        sum(&|w| &w.accepted),
    );
    for (r, reason) in CLOSE_REASONS.iter().enumerate() {
        out.counter(
            "tessera_connections_closed_total",
            "Client connections the server closed of its own accord, by reason.",
            &[("reason", reason)],
            sum(&|w| &w.closed[r]),
        );
    }
    out.counter(
        "tessera_accept_pauses_total",
        "Times a worker stopped accepting because every slot was busy and none idle.",
        &[],
        sum(&|w| &w.accept_pauses),
    );
    for (i, result) in ["hit", "miss"].iter().enumerate() {
        out.counter(
            "tessera_open_file_cache_requests_total",
            "Lookups of the open-file cache: hit (no system call), miss (the file system asked).",
            &[("result", result)],
            sum(&|w| &w.file_cache[i]),
        );
    }
    let streams = &compress::STREAM_MEMORY;
    out.gauge(
        "tessera_compression_stream_bytes",
        "Bytes of compression_memory reserved by responses compressing as they stream.",
        &[],
        streams.reserved() as f64,
    );
    out.gauge(
        "tessera_compression_stream_capacity_bytes",
        "compression_memory: the budget of compressing streams, for the process.",
        &[],
        streams.capacity() as f64,
    );
    let (compressed, refused) = streams.streams();
    for (result, n) in [("compressed", compressed), ("refused", refused)] {
        out.counter(
            "tessera_compression_streams_total",
            "Responses to compress as they stream: compressed, or refused (sent \
             uncompressed) because compression_memory was taken.",
            &[("result", result)],
            n,
        );
    }
    for (i, result) in HANDSHAKES.iter().enumerate() {
        out.counter(
            "tessera_tls_handshakes_total",
            "TLS handshakes on the public listeners, by result: full, resumed (a ticket or \
             session ID), failed (or timed out).",
            &[("result", result)],
            sum(&|w| &w.handshakes[i]),
        );
    }
    out.counter(
        "tessera_access_denied_total",
        DENIED_HELP,
        &[("host", ""), ("reason", "proxy_protocol")],
        sum(&|w| &w.proxy_refused),
    );
    for host in 0..MAX_HOSTS {
        for (r, reason) in DENIED.iter().enumerate() {
            let n = sum(&|w| &w.denied[host * DENIED.len() + r]);
            if n > 0 {
                out.counter(
                    "tessera_access_denied_total",
                    DENIED_HELP,
                    &[("host", &labels.name(host)), ("reason", reason)],
                    n,
                );
            }
        }
    }
    out.counter(
        "tessera_http2_connections_total",
        "Client connections that spoke HTTP/2: their preface and SETTINGS arrived (over ALPN h2, or in cleartext).",
        &[],
        sum(&|w| &w.http2_connections),
    );
    out.counter(
        "tessera_http3_connections_total",
        "Client connections that spoke HTTP/3: their QUIC handshake finished.",
        &[],
        sum(&|w| &w.http3_connections),
    );
    out.counter(
        "tessera_quic_retries_total",
        "New QUIC connections asked to prove their address with a Retry ([http3] retry_threshold).",
        &[],
        sum(&|w| &w.quic_retries),
    );
    for (i, result) in ["finished", "cancelled"].iter().enumerate() {
        out.counter(
            "tessera_http2_streams_total",
            "HTTP/2 streams answered, by how they ended: finished, or cancelled by the client \
             (RST_STREAM) before their response was complete.",
            &[("result", result)],
            sum(&|w| &w.http2_streams[i]),
        );
    }
    for (i, reason) in GOAWAY_REASONS.iter().enumerate() {
        out.counter(
            "tessera_http2_goaways_total",
            "GOAWAY frames the server sent to end an HTTP/2 connection, by reason: shutdown \
             (or upgrade), reload (its [http2] settings changed), rapid_reset (too many \
             streams cancelled).",
            &[("reason", reason)],
            sum(&|w| &w.http2_goaways[i]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_listed_in_the_order_scrapes_always_listed_them() {
        let kinds = Kinds::new(&[
            handler::KindLabels {
                answered: "proxy",
                assembled: Some("esi"),
            },
            handler::KindLabels {
                answered: "script",
                assembled: None,
            },
        ]);
        let listed: Vec<&str> = kinds.listed().map(|(_, label)| label).collect();
        assert_eq!(
            listed,
            ["static", "proxy", "esi", "script", "admin", "module"]
        );
        assert_eq!(kinds.assembled(kinds.index("proxy")), kinds.index("esi"));
        assert_eq!(
            kinds.assembled(kinds.index("script")),
            kinds.index("script")
        );
        assert_eq!(kinds.index("unregistered"), kind_index("module"));
    }
}
