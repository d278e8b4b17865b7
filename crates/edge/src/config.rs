//! The proxy's configuration: `[[upstream]]`, `[[route]]` and `[esi]` of tessera's TOML
//! file. Every key has a default; unknown keys are an error so a typo is caught.
//! Durations are seconds (fractions allowed), like the server's `[timeouts]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub use crate::cache::config::{CacheConfig, DiskConfig, DurationText, RedisConfig, SizeText};
pub use crate::cache::policy::{Bypass, KeyRules, RouteCacheConfig, TtlMode};
use crate::error::ConfigError;

/// Everything the proxy is told.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EdgeConfig {
    /// `[[upstream]]`: the origins and fragment servers the proxy may call.
    pub upstream: Vec<UpstreamConfig>,
    /// `[[route]]`: path prefix to upstream or static root. The longest matching prefix
    /// wins; a request no route matches gets 404 from the proxy.
    pub route: Vec<RouteConfig>,
    /// `[esi]`: ESI assembly limits and policies.
    pub esi: EsiConfig,
    /// `[cache]`: the response cache (memory, and Redis when configured).
    pub cache: CacheConfig,
    /// The sites' host names (`[[host]]` of the server), so that a page's own includes
    /// take the routes of the site their host names (set by `cli`; no TOML key).
    #[serde(skip)]
    pub hosts: handler::Hosts,
    /// Each site's `[compression]` policy (the server's), by site number, so that a cached
    /// object keeps its compressed forms (set by `cli`; no TOML key of the proxy's own).
    /// Default none: the server's filter compresses per response.
    #[serde(skip)]
    pub compression: Vec<Option<compress::Compression>>,
}

/// The upstream address that means this server's own first listener.
pub const SELF_ADDRESS: &str = "self";

/// The address of an upstream that names none.
const DEFAULT_ADDRESS: &str = "127.0.0.1:9000";

/// One `[[upstream]]`: a named origin reached at one or more addresses.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Name routes refer to. Default `"origin"`.
    pub name: String,
    /// Addresses of the peers, each of weight 1 (see `peer` for weights): `host:port`,
    /// `https://host[:port]` (TLS), `http://host[:port]` or `unix:PATH` (a Unix socket).
    /// Default `["127.0.0.1:9000"]` when `peer` is empty. Names are resolved at start
    /// and at each reload (one peer per address). [`SELF_ADDRESS`] stands for this server's own first listener
    /// (see [`crate::EdgeModule::listening_on`]), for an origin served by the same process.
    pub addresses: Vec<String>,
    /// `[[upstream.peer]]`: peers with a weight (and limits) of their own, after those of
    /// `addresses`.
    pub peer: Vec<PeerConfig>,
    /// How a request's peer is chosen. Default `round_robin`.
    pub balance: Balance,
    /// What `balance = "hash"` hashes: `"cache_key"` (the default: host, path and
    /// query), `"client"` (the client's address, the one a trusted proxy named),
    /// `"header:NAME"` or `"cookie:NAME"`. A request without the header or cookie (or a
    /// request of the proxy's own, without a client) is balanced round robin.
    pub hash_key: String,
    /// Failures of a peer (connect errors and timeouts, a connection broken before the
    /// response, no response in time; and the statuses of `fail_status`) within
    /// `fail_window` that take it out for `fail_timeout`. 0: never. Default 1, and, as
    /// nginx, never for an upstream of one peer: taking out the only peer turns one
    /// failed request into `fail_timeout` of failures (set it to take out even that one,
    /// so that its failures are answered at once).
    #[serde(alias = "breaker_failures")]
    pub max_fails: Option<u32>,
    /// Seconds in which `max_fails` failures count. Default 10.
    pub fail_window: f64,
    /// Seconds a failed peer stays out; then one probe request decides whether it is
    /// back (success) or out again. Default 10.
    #[serde(alias = "breaker_cool_down")]
    pub fail_timeout: f64,
    /// Response statuses that count as a peer's failure. Default none: a 5xx is the
    /// application's answer, passed on, and does not take a peer out.
    pub fail_status: Vec<u16>,
    /// Other peers an idempotent request (or one whose body was not sent) is tried on
    /// when a peer refuses the connection, does not accept it in time, or breaks it before
    /// any response byte. Default 1.
    pub retries: u32,
    /// Retries allowed as a share of requests, plus 10 a second, counted over the whole
    /// process (every worker's requests and retries). Default 0.2: a brownout is never
    /// multiplied by retries.
    pub retry_budget: f64,
    /// Seconds over which a peer that comes back is ramped from almost no traffic to its
    /// full weight (round robin, least_conn, random_two). Default 0: off.
    pub slow_start: f64,
    /// Seconds an upgraded connection (WebSocket) may pass no byte either way before it
    /// is closed. Default 60.
    pub tunnel_idle_timeout: f64,
    /// Seconds an upgraded connection may last at most. Default 0: no limit.
    pub tunnel_max_duration: f64,
    /// `[upstream.health]`: active health checks. Default none.
    pub health: Option<HealthConfig>,
    /// Prepended to the path of every request sent to this upstream (`"/origin"` sends
    /// `/a?b` as `/origin/a?b`), like the path of nginx's `proxy_pass http://app/origin`.
    /// Default empty: paths go as they came. Empty or `/...` without a trailing `/`.
    pub path_prefix: String,
    /// Seconds to open a TCP connection. Default 1: a loopback or LAN origin that does not
    /// accept within a second is down, and a page should not wait longer on it.
    pub connect_timeout: f64,
    /// Seconds from sending a request to receiving the response head, and the longest
    /// silence while reading a body. Default 30, for slow pages; fragments are bounded
    /// by the shorter include timeout.
    pub response_timeout: f64,
    /// Most connections open to each peer per worker, in use or idle. Default 64;
    /// requests beyond it wait for a connection (within their timeouts). This is also
    /// the per-upstream fetch concurrency.
    pub max_connections: usize,
    /// Idle keep-alive connections kept per worker. Default: `max_connections`, so that
    /// load below that limit never closes a connection only to open another for the next
    /// request (a smaller pool than the concurrency it serves churns connections: with
    /// 16 for 50 concurrent requests, about one request in three opened one). Idle
    /// connections cost the upstream a socket each; an origin that closes idle
    /// connections sooner is fine (a closed one is noticed and replaced).
    pub max_idle: Option<usize>,
    /// Begin every connection to this upstream's peers with a PROXY protocol header,
    /// `"v1"` (text) or `"v2"` (binary), naming the client and the peer (HAProxy's
    /// `send-proxy`/`send-proxy-v2`; docs/security.md). A connection then carries one
    /// client's requests only: it is reused for the same client, never another's. A
    /// request the proxy makes itself (an ESI fragment's) names no client: v1 `UNKNOWN`,
    /// v2 `LOCAL`. Default none.
    pub send_proxy: Option<SendProxy>,
    /// Speak TLS to every peer (an `https://` address does so for its peer alone).
    /// Default false. See docs/upstreams.md, "HTTPS upstreams".
    pub tls: bool,
    /// PEM file of the certificate authorities that verify the peers' certificates,
    /// instead of the system's. Default none: the system's roots.
    pub ca: Option<PathBuf>,
    /// The name sent in SNI and verified in the peer's certificate. Default: the host
    /// name of the peer's address (an IP address is verified as an IP address and sends
    /// no SNI).
    pub sni: Option<String>,
    /// Whether the peers' certificates are verified. Default true; false is logged as a
    /// warning at start.
    pub verify: bool,
    /// PEM certificate chain presented to peers that ask for one (mTLS), with
    /// `client_key`. Default none.
    pub client_certificate: Option<PathBuf>,
    /// PEM private key of `client_certificate`. Default none.
    pub client_key: Option<PathBuf>,
    /// The HTTP version spoken to the peers: `"h1"` (the default), `"h2"` (over TLS,
    /// by ALPN) or `"h2c"` (cleartext, prior knowledge). See docs/upstreams.md, "HTTP/2
    /// upstreams".
    pub protocol: Protocol,
    /// With `protocol = "h2"`/`"h2c"`: the most requests (streams) one connection carries
    /// at once, fewer when the peer's SETTINGS_MAX_CONCURRENT_STREAMS says so; beyond,
    /// another connection is opened. Default 100, the floor RFC 9113 recommends that
    /// servers allow: one connection carries a busy worker's requests to a peer.
    pub max_streams_per_connection: u32,
    /// A Lua file whose module's `balance(r, peers)` chooses each request's peer, or
    /// returns nil for `balance` to choose (docs/lua.md). Default none.
    pub balancer_script: Option<PathBuf>,
    /// `balancer_script` loaded (by `cli`, which knows Lua; no TOML key).
    #[serde(skip)]
    pub balancer_hook: Option<std::sync::Arc<dyn handler::BalancerHook>>,
}

/// `protocol`: the HTTP version spoken to an upstream's peers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP/1.1.
    #[default]
    H1,
    /// HTTP/2 over TLS, agreed by ALPN.
    H2,
    /// HTTP/2 over cleartext, prior knowledge (RFC 9113 section 3.3).
    H2c,
}

/// `send_proxy`: the PROXY protocol version sent to an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    V1,
    V2,
}

/// One `[[upstream.peer]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerConfig {
    /// An address as in `addresses`. Required.
    pub address: String,
    /// Its share of requests against the other peers'. Default 1.
    pub weight: u32,
    /// Its own `max_connections` (per worker). Default: the upstream's.
    pub max_connections: Option<usize>,
    /// Its own `max_idle` (per worker). Default: the upstream's.
    pub max_idle: Option<usize>,
    /// Speak TLS to this peer (as the upstream's `tls` does to all). Default false.
    pub tls: bool,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            address: String::new(),
            weight: 1,
            max_connections: None,
            max_idle: None,
            tls: false,
        }
    }
}

/// How a request's peer is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// In turn, by weight (smooth weighted round robin, as nginx).
    #[default]
    RoundRobin,
    /// The peer with the fewest requests in flight (from every worker) for its weight.
    LeastConn,
    /// The less loaded of two peers picked at random (power of two choices).
    RandomTwo,
    /// Consistent hashing of `hash_key`, so that a key stays on one peer and several
    /// tessera nodes agree on it.
    Hash,
}

/// `[upstream.health]`: one checker per process asks each peer for `path` every
/// `interval` (with jitter), and shares its verdict with every worker.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Path requested (`GET`). Default `"/"`.
    pub path: String,
    /// Seconds between two checks of a peer. Default 5; each wait is drawn within
    /// ±10% so that many tessera nodes do not check in lockstep.
    pub interval: f64,
    /// Seconds a check may take (connect and response head). Default 1.
    pub timeout: f64,
    /// Statuses that pass. Default none: any 2xx or 3xx passes.
    pub expect_status: Vec<u16>,
    /// Checks passed in a row that bring an unhealthy peer back. Default 1.
    pub healthy_after: u32,
    /// Checks failed in a row that take a peer out. Default 2.
    pub unhealthy_after: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            path: "/".into(),
            interval: 5.0,
            timeout: 1.0,
            expect_status: Vec::new(),
            healthy_after: 1,
            unhealthy_after: 2,
        }
    }
}

/// One peer as the client uses it: `addresses` and `[[upstream.peer]]` together.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// `host:port`, its scheme taken off.
    pub(crate) address: String,
    /// The host name of the address as written (before it is resolved): the TLS server
    /// name unless `sni` says another.
    pub(crate) host: String,
    /// Whether it is spoken to over TLS (`tls = true`, or an `https://` address).
    pub(crate) tls: bool,
    /// The socket's path, for an address `unix:PATH`.
    pub(crate) unix: Option<PathBuf>,
    pub(crate) weight: u32,
    pub(crate) max_connections: usize,
    pub(crate) max_idle: usize,
}

/// One `[[route]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteConfig {
    /// Path prefix this route serves. Default `"/"`.
    pub prefix: String,
    /// Upstream (by name) requests are proxied to. Exactly one of `upstream` and `root`.
    pub upstream: Option<String>,
    /// Directory files are served from: the file for `/a/b` is `root/a/b` (the whole
    /// path, like nginx `root`). Pages are the server's job; the proxy reads fragments
    /// from it. Exactly one of `upstream` and `root`.
    pub root: Option<PathBuf>,
    /// When responses are processed as ESI. Default `auto`.
    pub esi: EsiMode,
    /// Whether this route's responses may be compressed on the fly (the site's
    /// `[compression]` decides how). Default true; false sends them as they come, a
    /// shorthand for `[route.compression] enabled = false`.
    pub compress: Option<bool>,
    /// `[route.compression]`: this route's own compression policy, replacing its site's
    /// `[compression]` (or `[host.compression]`) table as a whole, as a host's replaces
    /// the top-level one. Default: the site's. Not together with `compress`, nor on a
    /// `root` route (static files take their site's policy).
    pub compression: Option<compress::CompressionConfig>,
    /// Whether a request body is read whole (within `limits.max_body_size`) before the
    /// request goes on. Default false: it streams to the origin as it arrives.
    pub request_buffering: bool,
    /// `[route.cache]`: this route's cache rules (lifetimes by status, grace, bypass;
    /// docs/cache.md, "Rules per route"). Default none: `[cache]` and the origin's
    /// headers alone decide. Not on a `root` route.
    pub cache: Option<RouteCacheConfig>,
    /// The site it belongs to: 0 for top-level `[[route]]`s, `i + 1` for
    /// `[[host.route]]`s of `[[host]]` number `i` (set by `cli`; no TOML key).
    #[serde(skip)]
    pub site: usize,
    /// The first name of its `[[host]]`, for a `[[host.route]]` (set by `cli`; no TOML
    /// key), so that an error names the host too.
    #[serde(skip)]
    pub host: Option<String>,
    /// Its place among its site's routes when the server's rules choose it (it has a
    /// matcher other than its prefix: `regex`, `path`, `header`...), set by `cli`; `None`:
    /// the server finds it by its prefix.
    #[serde(skip)]
    pub rule: Option<usize>,
    /// Its key path in the file (`route[2]`, `host[0].route[1]`), set by `cli` so that
    /// errors name it; empty: `route[I]` by its place in `EdgeConfig::route`.
    #[serde(skip)]
    pub key: String,
}

impl RouteConfig {
    /// Checks `[route.cache]` (`i`: its place in `EdgeConfig::route`).
    fn validate_cache(&self, i: usize) -> Result<(), ConfigError> {
        let Some(c) = &self.cache else {
            return Ok(());
        };
        let at = format!("{}.cache", self.key_or(i));
        if self.root.is_some() {
            return Err(ConfigError::Invalid(format!(
                "`{at}`: a `root` route serves files; cache rules apply to proxied routes"
            )));
        }
        crate::cache::policy::RoutePolicy::build(c, &at).map(|_| ())
    }

    /// Checks `request_buffering`, which only a proxied route has a body to buffer for.
    fn validate_buffering(&self, i: usize) -> Result<(), ConfigError> {
        if self.root.is_some() && self.request_buffering {
            return Err(ConfigError::Invalid(format!(
                "`{}.request_buffering`: a `root` route serves files, it proxies no body",
                self.key_or(i)
            )));
        }
        Ok(())
    }

    /// Its key path in the file, or `route[i]` when `cli` did not set one.
    pub(crate) fn key_or(&self, i: usize) -> String {
        match self.key.is_empty() {
            true => format!("route[{i}]"),
            false => self.key.clone(),
        }
    }

    /// How an error names it: "route `/p`", or "route `/p` of host `a.test`".
    pub fn named(&self) -> String {
        match &self.host {
            Some(host) => format!("route `{}` of host `{host}`", self.prefix),
            None => format!("route `{}`", self.prefix),
        }
    }
}

/// When a response is processed as ESI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EsiMode {
    /// When the upstream says so: `Surrogate-Control: content="ESI/1.0"` (untargeted or
    /// targeted at our device token). The default, as the Edge Architecture note says.
    #[default]
    Auto,
    /// Every `text/html` response on this route, whatever its headers say.
    Html,
    /// Never: responses pass through untouched (Surrogate-Control is still removed).
    Off,
}

/// What happens when an include fails and nothing in the template absorbs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PagePolicy {
    /// The page fails: 502 when no byte was sent yet, else the stream ends with an error
    /// so the server closes the connection (no cache downstream keeps a truncated page).
    /// The default, as the W3C note says.
    #[default]
    Fail,
    /// The failed include yields nothing, as if it had `onerror="continue"`.
    Continue,
}

/// Fragment hosts includes may name besides the page's own host.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FragmentHost {
    /// Host (with `:port` when not 80), as written in include URLs. Default empty (an
    /// entry that matches nothing).
    pub host: String,
    /// Upstream (by name) that serves it. Default `"origin"`.
    pub upstream: String,
    /// Whether Cookie and Authorization go to it. Default false: credentials only go to
    /// the page's own origin unless a host is trusted here.
    pub credentials: bool,
}

impl Default for FragmentHost {
    fn default() -> Self {
        FragmentHost {
            host: String::new(),
            upstream: "origin".into(),
            credentials: false,
        }
    }
}

/// `[esi]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EsiConfig {
    /// Levels of fragments within fragments. Default 5: the page's includes are level 1;
    /// an include deeper than this fails (so `alt`, `onerror` and `esi:try` apply).
    pub max_depth: usize,
    /// Includes per page, all levels together. Default 256; the ones after fail.
    pub max_includes: usize,
    /// Fragment fetches in flight at once for one page. Default 32; the rest wait their
    /// turn (within their timeouts).
    pub max_concurrency: usize,
    /// Seconds an include waits for its fragment when the tag has no `timeout`/`maxwait`.
    /// Default 2: a fragment that takes longer costs more than it is worth. `alt` gets
    /// the same time again.
    pub include_timeout: f64,
    /// What an unabsorbed include failure does to the page. Default `fail`.
    pub on_failure: PagePolicy,
    /// Our device token for Surrogate-Control targeting (`content="ESI/1.0";tessera`) and
    /// the Surrogate-Capability we send (`tessera="ESI/1.0"`). Default `"tessera"`.
    pub device_token: String,
    /// Hosts besides the page's own that includes may fetch from (`[[esi.fragment_host]]`).
    /// Default none: an include naming any other host is refused, so a template (or a
    /// cookie substituted into one) cannot make the proxy call arbitrary servers.
    pub fragment_host: Vec<FragmentHost>,
    /// Largest fragment body, in bytes. Default 8 MiB; a larger one fails.
    pub max_fragment_size: usize,
}

impl UpstreamConfig {
    /// How many idle connections a worker keeps (`max_idle`, or `max_connections`).
    pub fn idle_limit(&self) -> usize {
        self.max_idle.unwrap_or(self.max_connections)
    }

    /// Every peer, `addresses` first.
    pub(crate) fn peer_list(&self) -> Vec<Peer> {
        let default = [DEFAULT_ADDRESS.to_string()];
        let addresses = match (&self.addresses[..], &self.peer[..]) {
            ([], []) => &default[..],
            (a, _) => a,
        };
        // validate() refused an address that does not parse.
        let split = |a: &str| parse_address(a).unwrap_or_else(|_| (a.to_string(), None));
        let peer = |written: &str, tls: bool, weight: u32, max_connections: usize, max_idle| {
            let (address, scheme_tls) = split(written);
            let unix = unix_path(&address).map(PathBuf::from);
            Peer {
                host: host_of(&address).to_string(),
                tls: unix.is_none() && (tls || scheme_tls == Some(true)),
                unix,
                address,
                weight,
                max_connections,
                max_idle,
            }
        };
        let plain = addresses
            .iter()
            .map(|a| peer(a, self.tls, 1, self.max_connections, self.idle_limit()));
        let weighted = self.peer.iter().map(|p| {
            let max_connections = p.max_connections.unwrap_or(self.max_connections);
            peer(
                &p.address,
                self.tls || p.tls,
                p.weight,
                max_connections,
                p.max_idle.unwrap_or(match p.max_connections {
                    Some(m) => self.max_idle.unwrap_or(m).min(m),
                    None => self.idle_limit(),
                }),
            )
        });
        plain.chain(weighted).collect()
    }
}

/// A peer's address as written: `host:port`, `https://host[:port]` (port 443 by
/// default) or `http://host[:port]` (port 80 by default), with or without a trailing
/// `/`. The address as `host:port`, and whether its scheme asks for TLS (`None`: no
/// scheme, the upstream's `tls` decides).
pub(crate) fn parse_address(written: &str) -> Result<(String, Option<bool>), String> {
    let tls = match written.split_once("://") {
        None => return Ok((written.to_string(), None)),
        Some(("https", _)) => true,
        Some(("http", _)) => false,
        Some((scheme, _)) => return Err(format!("unknown scheme `{scheme}://`")),
    };
    let bad = || format!("{written:?} is not http(s)://host[:port]");
    let uri: http::Uri = written.parse().map_err(|_| bad())?;
    let path_ok = uri.path_and_query().map_or(true, |p| p.as_str() == "/");
    let authority = uri.authority().ok_or_else(bad)?;
    if !path_ok || authority.as_str().contains('@') || authority.host().is_empty() {
        return Err(bad());
    }
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    Ok((format!("{}:{port}", authority.host()), Some(tls)))
}

/// The path of a Unix socket address, `unix:PATH`.
pub(crate) fn unix_path(address: &str) -> Option<&str> {
    address.strip_prefix("unix:")
}

/// Checks the TLS keys of an upstream without reading files: what needs TLS has it,
/// names are names, `protocol` is one that is built; and its Unix socket peers.
fn validate_tls(u: &UpstreamConfig) -> Result<(), ConfigError> {
    let bad = |msg: String| {
        Err(ConfigError::Invalid(format!(
            "upstream `{}`: {msg}",
            u.name
        )))
    };
    let peers = u.peer_list();
    match u.protocol {
        Protocol::H1 => {}
        Protocol::H2 if peers.iter().any(|p| !p.tls) => {
            return bad(
                "protocol = \"h2\" is HTTP/2 over TLS (ALPN h2): set tls = true or give \
                 https:// addresses; HTTP/2 in clear text is protocol = \"h2c\""
                    .into(),
            )
        }
        Protocol::H2c if peers.iter().any(|p| p.tls) => {
            return bad(
                "protocol = \"h2c\" is HTTP/2 in clear text: over TLS it is protocol = \"h2\""
                    .into(),
            )
        }
        Protocol::H2 | Protocol::H2c if u.send_proxy.is_some() => {
            return bad(
                "send_proxy applies to protocol = \"h1\": an HTTP/2 connection carries \
                 many clients' requests"
                    .into(),
            )
        }
        Protocol::H2 | Protocol::H2c if u.max_streams_per_connection == 0 => {
            return bad("max_streams_per_connection must be at least 1".into())
        }
        Protocol::H2 | Protocol::H2c => {}
    }
    let written = (u.addresses.iter().map(|a| (a, u.tls)))
        .chain(u.peer.iter().map(|p| (&p.address, u.tls || p.tls)));
    for (a, tls) in written {
        if let Some(path) = unix_path(a) {
            let wrong = if path.is_empty() {
                Some("a Unix socket address is unix:PATH")
            } else if tls {
                Some("a Unix socket peer with tls = true: TLS is spoken over TCP only")
            } else if u.send_proxy.is_some() {
                Some("send_proxy applies to TCP peers, not Unix sockets")
            } else {
                None
            };
            match wrong {
                Some(why) => return bad(format!("address {a:?}: {why}")),
                None => continue,
            }
        }
        match parse_address(a) {
            Err(e) => return bad(format!("address {a:?}: {e}")),
            Ok((_, Some(false))) if tls => {
                return bad(format!("address {a:?} is http:// but tls = true"))
            }
            Ok(_) => {}
        }
    }
    if u.client_certificate.is_some() != u.client_key.is_some() {
        return bad("client_certificate and client_key go together".into());
    }
    if !peers.iter().any(|p| p.tls) {
        let set = [
            ("ca", u.ca.is_some()),
            ("sni", u.sni.is_some()),
            ("verify", !u.verify),
            ("client_certificate", u.client_certificate.is_some()),
        ];
        if let Some((key, _)) = set.iter().find(|(_, set)| *set) {
            return bad(format!(
                "`{key}` applies to TLS: set tls = true or give https:// addresses"
            ));
        }
        return Ok(());
    }
    if let Some(sni) = &u.sni {
        if rustls::pki_types::ServerName::try_from(sni.as_str()).is_err() {
            return bad(format!("sni {sni:?} is not a host name or an IP address"));
        }
    } else if let Some(p) = peers
        .iter()
        .find(|p| p.tls && rustls::pki_types::ServerName::try_from(p.host.as_str()).is_err())
    {
        return bad(format!(
            "{:?} is not a name TLS can verify: set sni to the certificate's name",
            p.host
        ));
    }
    Ok(())
}

/// The host of `host:port` (`[v6]:port` gives `v6`).
pub(crate) fn host_of(address: &str) -> &str {
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            name: "origin".into(),
            addresses: Vec::new(),
            path_prefix: String::new(),
            connect_timeout: 1.0,
            response_timeout: 30.0,
            max_connections: 64,
            max_idle: None,
            peer: Vec::new(),
            balance: Balance::RoundRobin,
            hash_key: "cache_key".into(),
            max_fails: None,
            fail_window: 10.0,
            fail_timeout: 10.0,
            fail_status: Vec::new(),
            retries: 1,
            retry_budget: 0.2,
            slow_start: 0.0,
            tunnel_idle_timeout: 60.0,
            tunnel_max_duration: 0.0,
            health: None,
            send_proxy: None,
            tls: false,
            ca: None,
            sni: None,
            verify: true,
            client_certificate: None,
            client_key: None,
            protocol: Protocol::H1,
            max_streams_per_connection: 100,
            balancer_script: None,
            balancer_hook: None,
        }
    }
}

impl Default for RouteConfig {
    fn default() -> Self {
        RouteConfig {
            prefix: "/".into(),
            upstream: None,
            root: None,
            esi: EsiMode::Auto,
            compress: None,
            compression: None,
            request_buffering: false,
            cache: None,
            site: 0,
            host: None,
            rule: None,
            key: String::new(),
        }
    }
}

impl Default for EsiConfig {
    fn default() -> Self {
        EsiConfig {
            max_depth: 5,
            max_includes: 256,
            max_concurrency: 32,
            include_timeout: 2.0,
            on_failure: PagePolicy::Fail,
            device_token: "tessera".into(),
            fragment_host: Vec::new(),
            max_fragment_size: 8 << 20,
        }
    }
}

impl EdgeConfig {
    /// The configuration `tessera serve --proxy URL` means: one upstream at `address`
    /// (`host:port`) serving every path, ESI on.
    pub fn proxy_to(address: &str) -> EdgeConfig {
        EdgeConfig {
            upstream: vec![UpstreamConfig {
                addresses: vec![address.to_string()],
                ..UpstreamConfig::default()
            }],
            route: vec![RouteConfig {
                upstream: Some("origin".into()),
                ..RouteConfig::default()
            }],
            esi: EsiConfig::default(),
            cache: CacheConfig::default(),
            hosts: handler::Hosts::default(),
            compression: Vec::new(),
        }
    }

    /// [`proxy_to`](EdgeConfig::proxy_to) from the URL given to `tessera serve --proxy`:
    /// `http://host[:port]` (port 80 by default) or `https://host[:port]` (TLS, port 443
    /// by default, verified against the system's roots), with or without a trailing `/`;
    /// or `unix:PATH`, a Unix socket.
    pub fn proxy_to_url(url: &str) -> Result<EdgeConfig, ConfigError> {
        let bad = || {
            ConfigError::Invalid(format!(
                "--proxy wants http://host[:port], https://host[:port] or unix:PATH, not {url:?}"
            ))
        };
        if unix_path(url).is_some_and(|p| !p.is_empty()) {
            return Ok(EdgeConfig::proxy_to(url));
        }
        let (address, tls) = parse_address(url).map_err(|_| bad())?;
        let Some(tls) = tls else { return Err(bad()) };
        let mut config = EdgeConfig::proxy_to(&address);
        config.upstream[0].tls = tls;
        Ok(config)
    }

    /// Checks references and values; the proxy refuses to start on a bad config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |msg: String| Err(ConfigError::Invalid(msg));
        for (i, u) in self.upstream.iter().enumerate() {
            if self.upstream[..i].iter().any(|o| o.name == u.name) {
                return bad(format!("upstream `{}` is defined twice", u.name));
            }
            for p in &u.peer {
                if p.address.is_empty() || p.weight == 0 || p.max_connections == Some(0) {
                    return bad(format!(
                        "upstream `{}`: a peer needs an address, a weight > 0 and \
                         max_connections > 0",
                        u.name
                    ));
                }
            }
            validate_tls(u)?;
            let key = u.hash_key.as_str();
            let named = |prefix: &str| key.strip_prefix(prefix).is_some_and(|n| !n.is_empty());
            if key != "cache_key" && key != "client" && !named("header:") && !named("cookie:") {
                return bad(format!(
                    "upstream `{}`: hash_key must be cache_key, client, header:NAME or cookie:NAME \
                     (not {key:?})",
                    u.name
                ));
            }
            if !(u.retry_budget.is_finite() && u.retry_budget >= 0.0) {
                return bad(format!("upstream `{}`: retry_budget must be >= 0", u.name));
            }
            for (key, v) in [
                ("slow_start", u.slow_start),
                ("tunnel_max_duration", u.tunnel_max_duration),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return bad(format!("upstream `{}`: {key} must be >= 0", u.name));
                }
            }
            if let Some(h) = &u.health {
                if !h.path.starts_with('/') || h.healthy_after == 0 || h.unhealthy_after == 0 {
                    return bad(format!(
                        "upstream `{}`: health.path must start with /, healthy_after and \
                         unhealthy_after must be > 0",
                        u.name
                    ));
                }
                for (key, v) in [
                    ("health.interval", h.interval),
                    ("health.timeout", h.timeout),
                ] {
                    if !(v.is_finite() && v > 0.0) {
                        return bad(format!("upstream `{}`: {key} must be > 0", u.name));
                    }
                }
            }
            let p = &u.path_prefix;
            if !p.is_empty() && (!p.starts_with('/') || p.ends_with('/') || p.contains(['?', '#']))
            {
                return bad(format!(
                    "upstream `{}`: path_prefix must be empty or /path without a trailing / \
                     (not {p:?})",
                    u.name
                ));
            }
            if u.max_connections == 0 {
                return bad(format!(
                    "upstream `{}`: max_connections must be > 0",
                    u.name
                ));
            }
            for (key, v) in [
                ("connect_timeout", u.connect_timeout),
                ("response_timeout", u.response_timeout),
                ("fail_window", u.fail_window),
                ("tunnel_idle_timeout", u.tunnel_idle_timeout),
                ("fail_timeout", u.fail_timeout),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return bad(format!("upstream `{}`: {key} must be > 0", u.name));
                }
            }
        }
        let known = |name: &str| self.upstream.iter().any(|u| u.name == name);
        for (i, r) in self.route.iter().enumerate() {
            r.validate_cache(i)?;
            r.validate_buffering(i)?;
            if !r.prefix.starts_with('/') {
                return bad(format!("{}: prefix must start with /", r.named()));
            }
            match (&r.upstream, &r.root) {
                (Some(u), None) if !known(u) => {
                    return bad(format!("{}: no upstream named `{u}`", r.named()))
                }
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return bad(format!(
                        "{}: needs exactly one of upstream and root",
                        r.named()
                    ))
                }
            }
            if r.root.is_some() && (r.compression.is_some() || r.compress.is_some()) {
                // A `root` route's files are the server's static files, compressed (and
                // their compressed forms kept) by the site's policy per site; a route's
                // own would not reach them.
                return bad(format!(
                    "{}: `compress` and `[route.compression]` do not apply to a \
                     `root` route: its files are compressed by its site's `[compression]` \
                     (or `[host.compression]`)",
                    r.named()
                ));
            }
            if let Some(c) = &r.compression {
                if r.compress.is_some() {
                    return bad(format!(
                        "{}: `compress` and `[route.compression]` together; \
                         keep one (`compress = false` is `compression.enabled = false`)",
                        r.named()
                    ));
                }
                if c.file_cache_bytes.is_some() {
                    // Only files have their forms kept in the open-file cache.
                    return bad(format!(
                        "{}: `compression.file_cache_bytes` is a site's key \
                         (`[compression]` or `[host.compression]`), not a route's",
                        r.named()
                    ));
                }
                if let Err(e) = c.build() {
                    return bad(format!("{}: compression: {e}", r.named()));
                }
            }
        }
        for h in &self.esi.fragment_host {
            if !known(&h.upstream) {
                return bad(format!(
                    "fragment_host `{}`: no upstream named `{}`",
                    h.host, h.upstream
                ));
            }
        }
        let t = self.esi.include_timeout;
        if !(t.is_finite() && t > 0.0) {
            return bad("esi.include_timeout must be > 0".into());
        }
        if self.esi.max_concurrency == 0 {
            return bad("esi.max_concurrency must be > 0".into());
        }
        self.cache.validate()
    }
}

pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

#[cfg(test)]
mod tests;
