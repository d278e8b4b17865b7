//! A route's own cache rules (`[route.cache]`): lifetimes by status that replace or
//! complete the origin's (nginx's `proxy_cache_valid`, Varnish's `beresp.ttl`), the
//! stale-while-revalidate window (`grace`), and the requests that bypass the cache
//! (nginx's `proxy_cache_bypass`, Varnish's `return (pass)`). Checked and compiled once
//! at load into a [`RoutePolicy`] the request path only reads.

use std::collections::BTreeMap;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName};
use serde::Deserialize;

pub use super::key_rule::KeyRules;
use crate::error::ConfigError;

/// `[route.cache]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteCacheConfig {
    /// Lifetimes by status: `{ "200" = "1h", "404" = "1m" }` (a duration: a number with
    /// `ms`, `s`, `m`, `h` or `d`, or a bare number of seconds). A status named here may
    /// be stored on this route even when tessera would not store it by default (a 302,
    /// a 403). Default none: the origin's headers alone decide.
    pub ttl: BTreeMap<String, String>,
    /// When `ttl` applies: `"default"` (the default) only when the origin's response
    /// gives no lifetime of its own, `"override"` always.
    pub mode: TtlMode,
    /// How long an expired object is served while one background request refreshes it
    /// (stale-while-revalidate), for this route instead of `[cache]`
    /// `stale_while_revalidate`. With `mode = "override"` it replaces the origin's own
    /// `stale-while-revalidate` too. Default: `[cache]`'s.
    pub grace: Option<String>,
    /// How long an expired object with validators (`ETag`, `Last-Modified`) is kept,
    /// after its stale windows, to be revalidated with a conditional request (Varnish's
    /// `beresp.keep`). Default: none (an object past its windows is dropped).
    pub keep: Option<String>,
    /// Lifetimes of server errors: `{ "503" = "5s" }` (statuses 500 to 599), stored like
    /// `ttl`'s (and following `mode`) when no stale object may be served instead.
    /// Default none: errors are not stored.
    pub cache_errors: BTreeMap<String, String>,
    /// Requests that skip the cache: neither looked up nor stored.
    pub bypass: Bypass,
    /// Which parts of the request make the cache key: `query = "sorted"` (or
    /// `"as_sent"`, the default), `drop_query` (names or globs with `*`), `headers` and
    /// `cookies` (their values added). Default none: host, path and query as sent.
    pub key: Option<KeyRules>,
    /// Whether the origin's surrogate key fields (`Surrogate-Key`, `Cache-Tag`, `xkey`)
    /// reach the client. Default false: they are for this cache, and removed.
    pub expose_keys: bool,
    /// Whether this route's objects may be kept in the disk tier (`[cache.disk]`).
    /// Default true.
    pub disk: Option<bool>,
}

/// When a route's `ttl` applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TtlMode {
    /// Only when the origin's response says nothing about its lifetime.
    #[default]
    Default,
    /// Always, whatever lifetime the origin's response gives.
    Override,
}

/// `bypass = { cookie = "session", header = "X-Debug" }`: a request carrying the cookie
/// (by name) or the header goes to the origin, and its response is not stored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Bypass {
    pub cookie: Option<String>,
    pub header: Option<String>,
}

/// A route's cache rules, compiled.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoutePolicy {
    /// (status, lifetime), sorted by status.
    ttl: Vec<(u16, Duration)>,
    pub(crate) mode: TtlMode,
    pub(crate) grace: Option<Duration>,
    /// How long an expired object with validators is kept for revalidation (`keep`).
    pub(crate) keep: Option<Duration>,
    /// Whether the surrogate key fields reach the client (`expose_keys`).
    pub(crate) expose_keys: bool,
    /// Whether the route's objects may go to the disk tier (`disk`).
    pub(crate) disk: bool,
    bypass_cookie: Option<String>,
    bypass_header: Option<HeaderName>,
    /// The key rule (`key`), when the route has one.
    pub(crate) key: Option<super::key_rule::KeyRule>,
}

impl RoutePolicy {
    /// Checks `config` and compiles it; errors name the key under `at`
    /// (`route[0].cache`).
    pub(crate) fn build(config: &RouteCacheConfig, at: &str) -> Result<RoutePolicy, ConfigError> {
        let bad =
            |key: &str, what: String| Err(ConfigError::Invalid(format!("`{at}.{key}`: {what}")));
        let mut ttl = Vec::with_capacity(config.ttl.len());
        for (status, lifetime) in &config.ttl {
            let Some(code) = status
                .parse::<u16>()
                .ok()
                .filter(|s| (100..=599).contains(s))
            else {
                return bad("ttl", format!("{status:?} is not an HTTP status"));
            };
            if !storable_by_rule(code) {
                return bad(
                    "ttl",
                    format!(
                        "{code} cannot be stored: a rule may name statuses 200 to 499 but 204, \
                         206 and 304 (server errors go in `cache_errors`)"
                    ),
                );
            }
            let Some(d) = parse_duration(lifetime) else {
                return bad(
                    "ttl",
                    format!("{status}: {lifetime:?} is not a duration (30s, 5m, 1h, 1d)"),
                );
            };
            // Capped at one year where the lifetime is decided (`freshness`).
            ttl.push((code, d));
        }
        for (status, lifetime) in &config.cache_errors {
            let Some(code) = status
                .parse::<u16>()
                .ok()
                .filter(|s| (500..=599).contains(s))
            else {
                return bad(
                    "cache_errors",
                    format!("{status:?} is not a server error (500 to 599)"),
                );
            };
            let Some(d) = parse_duration(lifetime) else {
                return bad(
                    "cache_errors",
                    format!("{status}: {lifetime:?} is not a duration (30s, 5m, 1h, 1d)"),
                );
            };
            ttl.push((code, d));
        }
        ttl.sort_unstable_by_key(|&(status, _)| status);
        let duration = |key: &str, value: &Option<String>| match value {
            None => Ok(None),
            Some(v) => match parse_duration(v) {
                None => Err(ConfigError::Invalid(format!(
                    "`{at}.{key}`: {v:?} is not a duration (30s, 5m, 1h, 1d)"
                ))),
                some => Ok(some),
            },
        };
        let grace = duration("grace", &config.grace)?;
        let keep = duration("keep", &config.keep)?;
        let bypass_cookie = match &config.bypass.cookie {
            Some(c) if c.is_empty() || c.contains([';', '=', ' ', ',']) => {
                return bad("bypass.cookie", format!("{c:?} is not a cookie name"));
            }
            c => c.clone(),
        };
        let bypass_header = match &config.bypass.header {
            None => None,
            Some(h) => match HeaderName::from_bytes(h.as_bytes()) {
                Ok(name) => Some(name),
                Err(_) => return bad("bypass.header", format!("{h:?} is not a header name")),
            },
        };
        let key = match &config.key {
            Some(k) => Some(super::key_rule::KeyRule::build(k, &format!("{at}.key"))?),
            None => None,
        };
        Ok(RoutePolicy {
            key,
            ttl,
            mode: config.mode,
            grace,
            keep,
            expose_keys: config.expose_keys,
            disk: config.disk.unwrap_or(true),
            bypass_cookie,
            bypass_header,
        })
    }

    /// The rule's lifetime for responses of `status`, if it names it.
    pub(crate) fn ttl(&self, status: u16) -> Option<Duration> {
        self.ttl
            .binary_search_by_key(&status, |&(s, _)| s)
            .ok()
            .map(|i| self.ttl[i].1)
    }

    /// Whether `policy` (a route's, if any) gives responses of `status` a lifetime.
    pub(crate) fn keeps(
        policy: &Option<std::rc::Rc<RoutePolicy>>,
        status: http::StatusCode,
    ) -> bool {
        policy
            .as_ref()
            .is_some_and(|p| p.ttl(status.as_u16()).is_some())
    }

    /// Whether a request with these fields skips the cache (`bypass`).
    pub(crate) fn bypasses(&self, fields: &HeaderMap) -> bool {
        if let Some(name) = &self.bypass_header {
            if fields.contains_key(name) {
                return true;
            }
        }
        let Some(wanted) = &self.bypass_cookie else {
            return false;
        };
        fields
            .get_all(header::COOKIE)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
            .any(|pair| {
                let name = pair.split(|&b| b == b'=').next().unwrap_or_default();
                wire::trim_ows(name) == wanted.as_bytes()
            })
    }
}

/// Statuses a route's `ttl` may make storable: those with a body that is the resource's
/// (or its absence's) representation. 204 and 304 have no body to keep, 206 is a part
/// (ranges are made from the whole object), and 5xx is the origin failing.
fn storable_by_rule(status: u16) -> bool {
    (200..500).contains(&status) && !matches!(status, 204 | 206 | 304)
}

/// `30s`, `5m`, `1h`, `1d`, `250ms`, or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: f64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(n * scale).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(toml: &str) -> Result<RoutePolicy, String> {
        let config: RouteCacheConfig = toml::from_str(toml).map_err(|e| e.to_string())?;
        RoutePolicy::build(&config, "route[0].cache").map_err(|e| e.to_string())
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1 m"), Some(Duration::from_secs(60)));
        for bad in ["", "h", "1y", "-1s", "1h30m"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn ttl_by_status_and_errors_naming_the_key() {
        let p = build("ttl = { \"200\" = \"1h\", \"404\" = \"1m\" }\nmode = \"override\"").unwrap();
        assert_eq!(p.ttl(200), Some(Duration::from_secs(3600)));
        assert_eq!(p.ttl(404), Some(Duration::from_secs(60)));
        assert_eq!(p.ttl(301), None);
        assert_eq!(p.mode, TtlMode::Override);
        for (toml, want) in [
            (
                "ttl = { \"200\" = \"soon\" }",
                "`route[0].cache.ttl`: 200: \"soon\"",
            ),
            (
                "ttl = { \"ok\" = \"1h\" }",
                "`route[0].cache.ttl`: \"ok\" is not",
            ),
            (
                "ttl = { \"503\" = \"1h\" }",
                "`route[0].cache.ttl`: 503 cannot be stored",
            ),
            ("grace = \"x\"", "`route[0].cache.grace`"),
            (
                "cache_errors = { \"404\" = \"1m\" }",
                "`route[0].cache.cache_errors`: \"404\"",
            ),
            (
                "keep = \"later\"",
                "`route[0].cache.keep`: \"later\" is not",
            ),
            (
                "bypass = { header = \"a b\" }",
                "`route[0].cache.bypass.header`",
            ),
            (
                "bypass = { cookie = \"a=b\" }",
                "`route[0].cache.bypass.cookie`",
            ),
        ] {
            let e = build(toml).unwrap_err();
            assert!(e.contains(want), "{toml}: {e}");
        }
    }

    #[test]
    fn bypass_by_cookie_name_or_header() {
        let p = build("bypass = { cookie = \"session\", header = \"X-Debug\" }").unwrap();
        let with = |name: &str, value: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
            p.bypasses(&h)
        };
        assert!(with("cookie", "a=1; session=x"));
        assert!(with("cookie", "session=x"));
        assert!(!with("cookie", "a=1; sessions=x"));
        assert!(!with("cookie", "a=session"));
        assert!(with("x-debug", "1"));
        assert!(!p.bypasses(&HeaderMap::new()));
    }
}
