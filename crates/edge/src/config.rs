//! The proxy's configuration: `[[upstream]]`, `[[route]]` and `[esi]` of tessera's TOML
//! file. Every key has a default; unknown keys are an error so a typo is caught.
//! Durations are seconds (fractions allowed), like the server's `[timeouts]`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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
    pub compression: Vec<Option<handler::compress::Compression>>,
}

/// The upstream address that means this server's own first listener.
pub const SELF_ADDRESS: &str = "self";

/// One `[[upstream]]`: a named origin reached at one or more addresses.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Name routes refer to. Default `"origin"`.
    pub name: String,
    /// `host:port` addresses, used in turn (round robin); one that refuses a connection
    /// is skipped for the next. Default `["127.0.0.1:9000"]`. Names are resolved when a
    /// connection is opened. [`SELF_ADDRESS`] stands for this server's own first listener
    /// (see [`crate::EdgeModule::listening_on`]), for an origin served by the same process.
    pub addresses: Vec<String>,
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
    /// Most connections open to this upstream per worker, in use or idle. Default 64;
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
    /// Consecutive failures (connect error, timeout, 5xx) that open this upstream's
    /// circuit breaker. Default 5. 0 disables the breaker.
    pub breaker_failures: u32,
    /// Seconds an open breaker refuses requests before letting one probe through.
    /// Default 10.
    pub breaker_cool_down: f64,
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
    /// `[compression]` decides how). Default true; false sends them as they come.
    pub compress: bool,
    /// The site it belongs to: 0 for top-level `[[route]]`s, `i + 1` for
    /// `[[host.route]]`s of `[[host]]` number `i` (set by `cli`; no TOML key).
    #[serde(skip)]
    pub site: usize,
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
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            name: "origin".into(),
            addresses: vec!["127.0.0.1:9000".into()],
            path_prefix: String::new(),
            connect_timeout: 1.0,
            response_timeout: 30.0,
            max_connections: 64,
            max_idle: None,
            breaker_failures: 5,
            breaker_cool_down: 10.0,
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
            compress: true,
            site: 0,
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
    /// `http://host[:port]` (port 80 by default), with or without a trailing `/`.
    pub fn proxy_to_url(url: &str) -> Result<EdgeConfig, ConfigError> {
        let bad = || ConfigError::Invalid(format!("--proxy wants http://host[:port], not {url:?}"));
        let uri: http::Uri = url.parse().map_err(|_| bad())?;
        let path_ok = uri.path_and_query().map_or(true, |p| p.as_str() == "/");
        if uri.scheme_str() != Some("http") || !path_ok {
            return Err(bad());
        }
        let authority = uri.authority().ok_or_else(bad)?;
        if authority.as_str().contains('@') {
            return Err(bad());
        }
        let port = authority.port_u16().unwrap_or(80);
        Ok(EdgeConfig::proxy_to(&format!(
            "{}:{port}",
            authority.host()
        )))
    }

    /// Checks references and values; the proxy refuses to start on a bad config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |msg: String| Err(ConfigError::Invalid(msg));
        for (i, u) in self.upstream.iter().enumerate() {
            if self.upstream[..i].iter().any(|o| o.name == u.name) {
                return bad(format!("upstream `{}` is defined twice", u.name));
            }
            if u.addresses.is_empty() {
                return bad(format!("upstream `{}` has no addresses", u.name));
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
                ("breaker_cool_down", u.breaker_cool_down),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return bad(format!("upstream `{}`: {key} must be > 0", u.name));
                }
            }
        }
        let known = |name: &str| self.upstream.iter().any(|u| u.name == name);
        for r in &self.route {
            if !r.prefix.starts_with('/') {
                return bad(format!("route `{}`: prefix must start with /", r.prefix));
            }
            match (&r.upstream, &r.root) {
                (Some(u), None) if !known(u) => {
                    return bad(format!("route `{}`: no upstream named `{u}`", r.prefix))
                }
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return bad(format!(
                        "route `{}`: needs exactly one of upstream and root",
                        r.prefix
                    ))
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
mod tests {
    use super::*;

    #[test]
    fn proxy_url_becomes_one_upstream_for_every_path() {
        let c = EdgeConfig::proxy_to_url("http://127.0.0.1:9000").unwrap();
        assert_eq!(c.upstream[0].addresses, ["127.0.0.1:9000"]);
        assert_eq!(c.route[0].prefix, "/");
        assert_eq!(c.route[0].upstream.as_deref(), Some("origin"));
        c.validate().unwrap();
        let c = EdgeConfig::proxy_to_url("http://origin.internal/").unwrap();
        assert_eq!(c.upstream[0].addresses, ["origin.internal:80"]);
        let c = EdgeConfig::proxy_to_url("http://[::1]:8000").unwrap();
        assert_eq!(c.upstream[0].addresses, ["[::1]:8000"]);
        for bad in [
            "https://x",
            "127.0.0.1:9000",
            "http://x/app",
            "http://u@x",
            "http://",
        ] {
            assert!(EdgeConfig::proxy_to_url(bad).is_err(), "{bad}");
        }
    }
}

/// `[cache]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Whether proxied responses are cached. Default true: the proxy honours
    /// Cache-Control and Surrogate-Control, and stores nothing that does not say how
    /// long it is fresh.
    pub enabled: bool,
    /// Memory budget of the in-process tier, in bytes (bodies, templates, headers and
    /// keys). Default 256 MiB.
    pub max_size: u64,
    /// Largest object stored, in bytes. Default 8 MiB; larger responses pass through.
    pub max_object_size: usize,
    /// Seconds a stale object may be served while one background request refreshes it,
    /// when the response has no `stale-while-revalidate`. Default 0.
    pub stale_while_revalidate: f64,
    /// Seconds a stale object may be served when the origin fails or its breaker is
    /// open, when the response has no `stale-if-error` (or Surrogate-Control `+M`).
    /// Default 0.
    pub stale_if_error: f64,
    /// Whether responses with Set-Cookie are stored (the Set-Cookie field is then
    /// dropped from the stored copy). Default false: they are not stored.
    pub store_set_cookie: bool,
    /// Client addresses allowed to `PURGE` and `BAN`. Default none.
    pub purge_allow: Vec<IpAddr>,
    /// A token that allows `PURGE` and `BAN` from any address when sent as
    /// `X-Purge-Token`. Default empty: no token works.
    pub purge_token: String,
    /// `[cache.redis]`: the shared tier. Default none (memory only).
    pub redis: Option<RedisConfig>,
}

/// `[cache.redis]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port[/db]`. Required unless `cluster` is given.
    pub url: String,
    /// Redis Cluster seed nodes (`redis://host:port` each); when set, `url` is unused.
    pub cluster: Vec<String>,
    /// Prefix of every key tessera writes. Default `"tessera:"`.
    pub key_prefix: String,
    /// Seconds a lookup may take before it counts as a miss (and a failure). Default
    /// 0.05: Redis on the LAN answers in a millisecond; slower than this it is costing
    /// more than the origin would.
    pub timeout: f64,
    /// Consecutive failures that open the Redis breaker. Default 3.
    pub breaker_failures: u32,
    /// Seconds the open breaker skips Redis before trying again. Default 5.
    pub breaker_cool_down: f64,
    /// Writes queued for Redis at most; beyond it writes are dropped (and counted), so a
    /// slow Redis never holds memory or a response. Default 1024.
    pub max_pending_writes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_size: 256 << 20,
            max_object_size: 8 << 20,
            stale_while_revalidate: 0.0,
            stale_if_error: 0.0,
            store_set_cookie: false,
            purge_allow: Vec::new(),
            purge_token: String::new(),
            redis: None,
        }
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: String::new(),
            cluster: Vec::new(),
            key_prefix: "tessera:".into(),
            timeout: 0.05,
            breaker_failures: 3,
            breaker_cool_down: 5.0,
            max_pending_writes: 1024,
        }
    }
}

impl CacheConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.into()));
        for (key, v) in [
            ("cache.stale_while_revalidate", self.stale_while_revalidate),
            ("cache.stale_if_error", self.stale_if_error),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(&format!("{key} must be >= 0"));
            }
        }
        if let Some(r) = &self.redis {
            if r.url.is_empty() && r.cluster.is_empty() {
                return bad("cache.redis needs url (or cluster)");
            }
            for (key, v) in [
                ("cache.redis.timeout", r.timeout),
                ("cache.redis.breaker_cool_down", r.breaker_cool_down),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return bad(&format!("{key} must be > 0"));
                }
            }
        }
        Ok(())
    }
}
