//! How long a response may be served from the cache (RFC 9111, RFC 5861 and the Edge
//! Architecture note's Surrogate-Control), decided once when the response arrives.
//!
//! Order of authority, first that speaks wins: `Surrogate-Control` addressed to us (its
//! `no-store`, `max-age=N` or `max-age=N+M`), then `Cache-Control` (`no-store`,
//! `no-cache`, `private`, `s-maxage`, `max-age`), then `Expires` (against `Date`). A
//! response with none of them is not stored: heuristic freshness is off. An include's
//! `ttl` attribute replaces the lifetime (but not a `no-store`/`private` refusal).

use std::time::{Duration, SystemTime};

use handler::FieldList;
use http::header::{self, HeaderMap};
use http::StatusCode;

use super::policy::TtlMode;
use crate::headers::field_text;

/// What the cache may do with one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freshness {
    /// Whether it may be stored at all.
    pub store: bool,
    /// How long it is fresh, counted from when it was generated (its Age is taken off).
    pub fresh: Duration,
    /// How long after that it may be served stale while one refresh runs
    /// (`stale-while-revalidate`).
    pub stale_while_revalidate: Duration,
    /// How long after that it may be served stale when the origin fails
    /// (`stale-if-error`, or Surrogate-Control's `+M`).
    pub stale_if_error: Duration,
    /// How long after its stale windows it is kept to be revalidated with a
    /// conditional request (a route's `keep`, for a response with validators).
    pub keep: Duration,
    /// Seconds the response was already old when it arrived (its `Age`).
    pub age: Duration,
}

/// Defaults and switches from `[cache]` that the decision needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    pub device_token: &'a str,
    pub default_stale_while_revalidate: Duration,
    pub default_stale_if_error: Duration,
    pub store_set_cookie: bool,
    /// The cache rules of the route the request took (`[route.cache]`), if any.
    pub route: Option<&'a super::policy::RoutePolicy>,
}

const NOT_STORED: Freshness = Freshness {
    store: false,
    fresh: Duration::ZERO,
    stale_while_revalidate: Duration::ZERO,
    stale_if_error: Duration::ZERO,
    keep: Duration::ZERO,
    age: Duration::ZERO,
};

/// The longest any lifetime or stale window is kept (one year, RFC 9111 5.3's advice
/// for "never expires"): larger values are capped, so times never overflow.
pub(crate) const MAX_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Statuses a cache may store when the response says how long (RFC 9110 15.1 lists
/// the heuristically cacheable ones; partial content and errors other than 404/410 are
/// left to the origin).
pub(crate) fn status_cacheable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 200 | 203 | 300 | 301 | 308 | 404 | 410)
}

/// Decides the freshness of a response to a GET. `ttl` is the include's `ttl`
/// attribute when the response is a fragment fetched for one. `request_authorized`:
/// the request carried Authorization, so only `public`/`s-maxage` allows storing it
/// (RFC 9111 3.5).
pub(crate) fn decide(
    status: StatusCode,
    headers: &FieldList,
    rules: &Rules<'_>,
    ttl: Option<Duration>,
    request_authorized: bool,
    now: SystemTime,
) -> Freshness {
    let rule = rules.route.and_then(|r| r.ttl(status.as_u16()));
    let overrides = rules.route.is_some_and(|r| r.mode == TtlMode::Override);
    if !status_cacheable(status) && rule.is_none() {
        return NOT_STORED;
    }
    if headers.contains(b"set-cookie") && !rules.store_set_cookie {
        return NOT_STORED;
    }
    if vary_star(headers) {
        return NOT_STORED;
    }
    let surrogate = Directives::surrogate(headers, rules.device_token);
    let cc = Directives::cache_control(headers);
    if surrogate.no_store || cc.no_store || cc.private || cc.no_cache {
        return NOT_STORED;
    }
    if request_authorized && !(cc.public || cc.s_maxage.is_some()) {
        return NOT_STORED;
    }
    let age = headers
        .get(b"age")
        .and_then(field_text)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    let mut stale_if_error = cc.stale_if_error;
    let lifetime = if let Some(ttl) = ttl {
        Some(ttl)
    } else if let Some(rule) = rule.filter(|_| overrides) {
        Some(rule)
    } else if let Some((n, m)) = surrogate.max_age {
        // The surrogate's own lifetime wins over Cache-Control (Edge Architecture 1.0):
        // N fresh, M more when the origin cannot be reached.
        if let Some(m) = m {
            stale_if_error = Some(m);
        }
        Some(n)
    } else if let Some(s) = cc.s_maxage.or(cc.max_age) {
        Some(s)
    } else {
        // The route's rule, in "default" mode, when the origin says nothing.
        expires_lifetime(headers, now).or(rule)
    };
    let Some(lifetime) = lifetime else {
        return NOT_STORED;
    };
    // must-revalidate, proxy-revalidate and s-maxage (which implies proxy-revalidate,
    // RFC 9111 5.2.2.10) forbid serving stale without revalidation (RFC 9111 4.2.4):
    // no stale windows, neither the defaults nor stale-while-revalidate. An explicit
    // stale-if-error (or Surrogate-Control's +M) still applies: RFC 5861 section 4
    // lets it be used "regardless of other freshness information".
    let revalidate = cc.must_revalidate || cc.s_maxage.is_some();
    let grace = rules.route.and_then(|r| r.grace);
    let swr = match grace {
        // The route's grace, in "override" mode, wins over what the origin says.
        Some(grace) if overrides => grace,
        _ if revalidate => Duration::ZERO,
        _ => cc
            .stale_while_revalidate
            .or(grace)
            .unwrap_or(rules.default_stale_while_revalidate),
    };
    let sie = match stale_if_error {
        Some(sie) => sie,
        None if revalidate => Duration::ZERO,
        None => rules.default_stale_if_error,
    };
    // Kept for revalidation only when there is something to revalidate with.
    let keep = rules
        .route
        .and_then(|r| r.keep)
        .filter(|_| has_validators(headers))
        .unwrap_or(Duration::ZERO);
    if lifetime.is_zero() && swr.is_zero() && sie.is_zero() && keep.is_zero() {
        return NOT_STORED;
    }
    Freshness {
        store: true,
        fresh: lifetime.min(MAX_LIFETIME),
        stale_while_revalidate: swr.min(MAX_LIFETIME),
        stale_if_error: sie.min(MAX_LIFETIME),
        keep: keep.min(MAX_LIFETIME),
        age: age.min(MAX_LIFETIME),
    }
}

/// Whether a response carries a validator a conditional request can send back
/// (`ETag` for If-None-Match, `Last-Modified` for If-Modified-Since).
pub(crate) fn has_validators(headers: &FieldList) -> bool {
    headers.contains(b"etag") || headers.contains(b"last-modified")
}

/// `Expires` minus `Date` (or now when there is no Date); an invalid Expires means
/// already expired (RFC 9111 5.3).
fn expires_lifetime(headers: &FieldList, now: SystemTime) -> Option<Duration> {
    let expires = headers.get(b"expires")?;
    let Some(expires) = field_text(expires).and_then(|v| httpdate::parse_http_date(v).ok()) else {
        return Some(Duration::ZERO);
    };
    let date = headers
        .get(b"date")
        .and_then(field_text)
        .and_then(|v| httpdate::parse_http_date(v).ok())
        .unwrap_or(now);
    Some(expires.duration_since(date).unwrap_or(Duration::ZERO))
}

/// Whether a request says `Cache-Control: no-store`: its response must not be stored
/// (RFC 9111 5.2.1.5), though a stored object may still answer it.
pub(crate) fn request_no_store(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-store"))
}

fn vary_star(headers: &FieldList) -> bool {
    // Not through `vary_names`: no lower-cased copy of each name per response.
    headers
        .get_all(b"vary")
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|n| wire::trim_ows(n) == b"*")
}

/// The field names of Vary, lower-cased.
pub(crate) fn vary_names(headers: &FieldList) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(b"vary")
        .filter_map(field_text)
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
}

#[derive(Debug, Default)]
struct Directives {
    no_store: bool,
    no_cache: bool,
    private: bool,
    public: bool,
    /// `must-revalidate` or `proxy-revalidate`: never served stale without revalidating.
    must_revalidate: bool,
    max_age: Option<Duration>,
    s_maxage: Option<Duration>,
    stale_while_revalidate: Option<Duration>,
    stale_if_error: Option<Duration>,
}

/// Surrogate-Control as the note defines it: `max-age=N[+M]` and `no-store`, each
/// untargeted or targeted at our token (`;tessera`). Targeted directives win over
/// untargeted ones.
#[derive(Debug, Default)]
struct Surrogate {
    no_store: bool,
    max_age: Option<(Duration, Option<Duration>)>,
}

fn seconds(v: &str) -> Option<Duration> {
    v.trim()
        .trim_matches('"')
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

impl Directives {
    fn cache_control(headers: &FieldList) -> Directives {
        let mut d = Directives::default();
        for value in headers.get_all(b"cache-control") {
            let Some(value) = field_text(value) else {
                continue;
            };
            for item in value.split(',') {
                let (name, arg) = match item.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a)),
                    None => (item.trim(), None),
                };
                let name = name.to_ascii_lowercase();
                match (name.as_str(), arg) {
                    ("no-store", _) => d.no_store = true,
                    // `no-cache="field"` only forbids reusing those fields; we do not
                    // strip fields, so any no-cache means revalidate, which we do not
                    // do: not stored.
                    ("no-cache", _) => d.no_cache = true,
                    ("private", _) => d.private = true,
                    ("public", _) => d.public = true,
                    ("must-revalidate" | "proxy-revalidate", _) => d.must_revalidate = true,
                    ("max-age", Some(a)) => d.max_age = seconds(a).or(Some(Duration::ZERO)),
                    ("s-maxage", Some(a)) => d.s_maxage = seconds(a).or(Some(Duration::ZERO)),
                    ("stale-while-revalidate", Some(a)) => d.stale_while_revalidate = seconds(a),
                    ("stale-if-error", Some(a)) => d.stale_if_error = seconds(a),
                    _ => {}
                }
            }
        }
        d
    }

    fn surrogate(headers: &FieldList, token: &str) -> Surrogate {
        let mut untargeted = Surrogate::default();
        let mut targeted = Surrogate::default();
        let mut any_targeted = false;
        for value in headers.get_all(crate::headers::SURROGATE_CONTROL.as_str().as_bytes()) {
            let Some(value) = field_text(value) else {
                continue;
            };
            for item in crate::headers::split_directives(value) {
                let (body, target) = match item.rsplit_once(';') {
                    Some((b, t)) if !t.contains('"') => (b.trim(), Some(t.trim())),
                    _ => (item.trim(), None),
                };
                let into = match target {
                    None => &mut untargeted,
                    Some(t) if t.eq_ignore_ascii_case(token) => {
                        any_targeted = true;
                        &mut targeted
                    }
                    Some(_) => continue,
                };
                let (name, arg) = match body.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a.trim())),
                    None => (body, None),
                };
                if name.eq_ignore_ascii_case("no-store") {
                    into.no_store = true;
                } else if name.eq_ignore_ascii_case("max-age") {
                    let Some(arg) = arg else { continue };
                    let (n, m) = match arg.split_once('+') {
                        Some((n, m)) => (seconds(n), seconds(m)),
                        None => (seconds(arg), None),
                    };
                    if let Some(n) = n {
                        into.max_age = Some((n, m));
                    }
                }
            }
        }
        if any_targeted {
            Surrogate {
                no_store: targeted.no_store,
                max_age: targeted.max_age.or(untargeted.max_age),
            }
        } else {
            untargeted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules<'static> = Rules {
        device_token: "tessera",
        default_stale_while_revalidate: Duration::ZERO,
        default_stale_if_error: Duration::ZERO,
        store_set_cookie: false,
        route: None,
    };

    fn headers(pairs: &[(&str, &str)]) -> FieldList {
        let mut h = FieldList::new();
        for (k, v) in pairs {
            h.append(k.as_bytes(), v.as_bytes());
        }
        h
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn freshness_table() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 05:00:00 GMT").unwrap();
        // (status, headers, include ttl, authorized) -> (store, fresh, swr, sie, age)
        #[allow(clippy::type_complexity)]
        let table: &[(
            u16,
            &[(&str, &str)],
            Option<u64>,
            bool,
            Option<(u64, u64, u64, u64)>,
        )] = &[
            (
                200,
                &[("cache-control", "max-age=60")],
                None,
                false,
                Some((60, 0, 0, 0)),
            ),
            (
                200,
                &[("cache-control", "max-age=60, s-maxage=120")],
                None,
                false,
                Some((120, 0, 0, 0)),
            ),
            (
                200,
                &[(
                    "cache-control",
                    "max-age=60, stale-while-revalidate=30, stale-if-error=300",
                )],
                None,
                false,
                Some((60, 30, 300, 0)),
            ),
            (
                200,
                &[("cache-control", "max-age=60"), ("age", "15")],
                None,
                false,
                Some((60, 0, 0, 15)),
            ),
            (
                200,
                &[("cache-control", "no-store, max-age=60")],
                None,
                false,
                None,
            ),
            (200, &[("cache-control", "no-cache")], None, false, None),
            (
                200,
                &[("cache-control", "private, max-age=60")],
                None,
                false,
                None,
            ),
            (200, &[("cache-control", "max-age=0")], None, false, None),
            // Heuristic freshness is off: Last-Modified alone stores nothing.
            (
                200,
                &[("last-modified", "Sun, 01 Nov 2026 00:00:00 GMT")],
                None,
                false,
                None,
            ),
            (200, &[], None, false, None),
            (
                200,
                &[
                    ("expires", "Sun, 22 Nov 2026 05:10:00 GMT"),
                    ("date", "Sun, 22 Nov 2026 05:00:00 GMT"),
                ],
                None,
                false,
                Some((600, 0, 0, 0)),
            ),
            (
                200,
                &[("expires", "Sun, 22 Nov 2026 05:01:00 GMT")],
                None,
                false,
                Some((60, 0, 0, 0)),
            ),
            (200, &[("expires", "0")], None, false, None),
            (
                200,
                &[
                    ("cache-control", "max-age=10"),
                    ("expires", "Sun, 22 Nov 2026 06:00:00 GMT"),
                ],
                None,
                false,
                Some((10, 0, 0, 0)),
            ),
            // The surrogate's lifetime wins over Cache-Control, +M is stale-if-error.
            (
                200,
                &[
                    ("cache-control", "max-age=10"),
                    ("surrogate-control", "max-age=300+60"),
                ],
                None,
                false,
                Some((300, 0, 60, 0)),
            ),
            (
                200,
                &[
                    ("cache-control", "max-age=10"),
                    ("surrogate-control", r#"max-age=300, content="ESI/1.0""#),
                ],
                None,
                false,
                Some((300, 0, 0, 0)),
            ),
            (
                200,
                &[
                    ("cache-control", "private"),
                    ("surrogate-control", "max-age=300"),
                ],
                None,
                false,
                None,
            ),
            (
                200,
                &[(
                    "surrogate-control",
                    "max-age=30;other, max-age=90;tessera, max-age=5",
                )],
                None,
                false,
                Some((90, 0, 0, 0)),
            ),
            (
                200,
                &[
                    ("cache-control", "max-age=10"),
                    ("surrogate-control", "no-store;tessera"),
                ],
                None,
                false,
                None,
            ),
            (
                200,
                &[
                    ("cache-control", "max-age=10"),
                    ("surrogate-control", "no-store;varnish"),
                ],
                None,
                false,
                Some((10, 0, 0, 0)),
            ),
            // The include's ttl replaces the lifetime, not a refusal.
            (200, &[], Some(45), false, Some((45, 0, 0, 0))),
            (
                200,
                &[("cache-control", "max-age=10")],
                Some(45),
                false,
                Some((45, 0, 0, 0)),
            ),
            (200, &[("cache-control", "no-store")], Some(45), false, None),
            // Set-Cookie, Vary: *, uncacheable statuses.
            (
                200,
                &[("cache-control", "max-age=60"), ("set-cookie", "a=1")],
                None,
                false,
                None,
            ),
            (
                200,
                &[("cache-control", "max-age=60"), ("vary", "*")],
                None,
                false,
                None,
            ),
            (
                404,
                &[("cache-control", "max-age=60")],
                None,
                false,
                Some((60, 0, 0, 0)),
            ),
            (500, &[("cache-control", "max-age=60")], None, false, None),
            (206, &[("cache-control", "max-age=60")], None, false, None),
            // A request with Authorization: only public or s-maxage stores.
            (200, &[("cache-control", "max-age=60")], None, true, None),
            (
                200,
                &[("cache-control", "public, max-age=60")],
                None,
                true,
                Some((60, 0, 0, 0)),
            ),
            (
                200,
                &[("cache-control", "s-maxage=60")],
                None,
                true,
                Some((60, 0, 0, 0)),
            ),
        ];
        for (i, (status, h, ttl, auth, want)) in table.iter().enumerate() {
            let got = decide(
                StatusCode::from_u16(*status).unwrap(),
                &headers(h),
                &RULES,
                ttl.map(s),
                *auth,
                now,
            );
            let got = got.store.then_some({
                (
                    got.fresh.as_secs(),
                    got.stale_while_revalidate.as_secs(),
                    got.stale_if_error.as_secs(),
                    got.age.as_secs(),
                )
            });
            assert_eq!(got, *want, "row {i}: {status} {h:?} ttl {ttl:?}");
        }
    }

    #[test]
    fn config_defaults_and_set_cookie_switch() {
        let rules = Rules {
            default_stale_while_revalidate: s(5),
            default_stale_if_error: s(600),
            store_set_cookie: true,
            ..RULES
        };
        let now = SystemTime::now();
        let f = decide(
            StatusCode::OK,
            &headers(&[
                ("cache-control", "max-age=60, stale-if-error=7"),
                ("set-cookie", "a=1"),
            ]),
            &rules,
            None,
            false,
            now,
        );
        assert!(f.store);
        assert_eq!((f.stale_while_revalidate, f.stale_if_error), (s(5), s(7)));
        // max-age=0 with a stale-if-error default is kept, to be served only on error.
        let f = decide(
            StatusCode::OK,
            &headers(&[("cache-control", "max-age=0")]),
            &rules,
            None,
            false,
            now,
        );
        assert!(f.store && f.fresh.is_zero());
    }

    #[test]
    fn revalidate_directives_get_no_default_stale_windows() {
        let rules = Rules {
            default_stale_while_revalidate: s(5),
            default_stale_if_error: s(600),
            ..RULES
        };
        let now = SystemTime::now();
        let windows = |cc: &str| {
            let f = decide(
                StatusCode::OK,
                &headers(&[("cache-control", cc)]),
                &rules,
                None,
                false,
                now,
            );
            (f.store, f.stale_while_revalidate, f.stale_if_error)
        };
        let zero = Duration::ZERO;
        assert_eq!(windows("max-age=60"), (true, s(5), s(600)));
        for cc in [
            "max-age=60, must-revalidate",
            "max-age=60, proxy-revalidate",
            "s-maxage=60",
            "s-maxage=60, stale-while-revalidate=30",
            "max-age=60, Must-Revalidate, stale-while-revalidate=30",
        ] {
            assert_eq!(windows(cc), (true, zero, zero), "{cc}");
        }
        // An explicit stale-if-error still applies (RFC 5861 section 4).
        assert_eq!(
            windows("max-age=60, must-revalidate, stale-if-error=30"),
            (true, zero, s(30))
        );
        assert_eq!(
            windows("s-maxage=60, stale-if-error=30"),
            (true, zero, s(30))
        );
        // must-revalidate with nothing fresh and no explicit window: not stored.
        assert_eq!(windows("max-age=0, must-revalidate"), (false, zero, zero));
    }

    #[test]
    fn a_routes_rule_completes_or_overrides_the_origins_lifetime() {
        use crate::cache::policy::{RouteCacheConfig, RoutePolicy};
        let policy = |toml: &str| {
            let c: RouteCacheConfig = toml::from_str(toml).unwrap();
            RoutePolicy::build(&c, "route[0].cache").unwrap()
        };
        let now = SystemTime::now();
        let decide_with = |p: &RoutePolicy, status: u16, fields: &[(&str, &str)]| {
            let rules = Rules {
                route: Some(p),
                ..RULES
            };
            let status = StatusCode::from_u16(status).unwrap();
            decide(status, &headers(fields), &rules, None, false, now)
        };
        let default = policy("ttl = { \"200\" = \"1h\", \"302\" = \"1m\" }\ngrace = \"30s\"");
        // Nothing from the origin: the rule's lifetime, and its grace.
        let f = decide_with(&default, 200, &[]);
        assert_eq!(
            (f.store, f.fresh, f.stale_while_revalidate),
            (true, s(3600), s(30))
        );
        // The origin's own lifetime wins in "default" mode.
        assert_eq!(
            decide_with(&default, 200, &[("cache-control", "max-age=5")]).fresh,
            s(5)
        );
        // A status tessera would not store, named by the rule.
        assert_eq!(decide_with(&default, 302, &[]).fresh, s(60));
        assert!(!decide_with(&default, 403, &[]).store);
        // Refusals still refuse.
        assert!(!decide_with(&default, 200, &[("cache-control", "private")]).store);
        let over = policy("ttl = { \"200\" = \"1h\" }\nmode = \"override\"\ngrace = \"30s\"");
        let f = decide_with(
            &over,
            200,
            &[("cache-control", "max-age=5, must-revalidate")],
        );
        assert_eq!((f.fresh, f.stale_while_revalidate), (s(3600), s(30)));
        assert!(!decide_with(&over, 200, &[("cache-control", "no-store")]).store);
        // A status the rule does not name keeps the origin's word.
        assert_eq!(
            decide_with(&over, 404, &[("cache-control", "max-age=7")]).fresh,
            s(7)
        );
    }

    #[test]
    fn keep_holds_an_object_with_validators_for_revalidation() {
        use crate::cache::policy::{RouteCacheConfig, RoutePolicy};
        let c: RouteCacheConfig = toml::from_str("keep = \"1h\"").unwrap();
        let p = RoutePolicy::build(&c, "route[0].cache").unwrap();
        let rules = Rules {
            route: Some(&p),
            ..RULES
        };
        let decide_with = |fields: &[(&str, &str)]| {
            decide(
                StatusCode::OK,
                &headers(fields),
                &rules,
                None,
                false,
                SystemTime::now(),
            )
        };
        let f = decide_with(&[("cache-control", "max-age=5"), ("etag", "\"a\"")]);
        assert_eq!((f.store, f.fresh, f.keep), (true, s(5), s(3600)));
        let f = decide_with(&[("cache-control", "max-age=5"), ("last-modified", "x")]);
        assert_eq!(f.keep, s(3600));
        // Nothing to revalidate with: not kept.
        assert_eq!(decide_with(&[("cache-control", "max-age=5")]).keep, s(0));
        // Expired at once but with a validator: stored, to be revalidated when used.
        let f = decide_with(&[("cache-control", "max-age=0"), ("etag", "\"a\"")]);
        assert_eq!((f.store, f.fresh, f.keep), (true, s(0), s(3600)));
        assert!(!decide_with(&[("cache-control", "max-age=0")]).store);
        // Refusals still refuse.
        assert!(!decide_with(&[("cache-control", "no-store"), ("etag", "\"a\"")]).store);
    }
}
