//! A route's cache key rule (`[route.cache] key`): which parts of the request make the
//! key (nginx's `proxy_cache_key`, Varnish's `hash_data`). The query's parameters may be
//! sorted and some dropped by name or glob (`utm_*`), and request headers and cookies
//! added. Compiled once at load; a key is written per request into a reused buffer and
//! copied into the worker's block, so the steady state allocates nothing.
//!
//! The key is the URL key (host, path, normalised query) followed by a mark of the
//! rule (a space, which no request target holds, then `k` and a digest of the rule) and
//! the headers' and cookies' values. So BAN by prefix still reaches these objects, and
//! an object stored under another rule (before a reload changed it) is never found by a
//! request keyed by this one.

use std::cell::RefCell;

use http::header::{self, HeaderMap, HeaderName};

use serde::Deserialize;

use crate::error::ConfigError;

/// `key = { ... }`: which parts of the request make the cache key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyRules {
    pub query: Option<String>,
    pub drop_query: Vec<String>,
    pub headers: Vec<String>,
    pub cookies: Vec<String>,
}

/// A key rule, compiled.
#[derive(Debug, Clone)]
pub(crate) struct KeyRule {
    sorted: bool,
    drop: Vec<Vec<u8>>,
    headers: Vec<HeaderName>,
    cookies: Vec<Vec<u8>>,
    /// A digest of the rule (FNV-1a of its settings): the same rule gives the same keys
    /// in every process sharing the Redis tier.
    tag: u64,
}

/// The key being written, and the query's parameters (start, end) in it.
type Scratch = (Vec<u8>, Vec<(u32, u32)>);

thread_local! {
    static SCRATCH: RefCell<Scratch> = const { RefCell::new((Vec::new(), Vec::new())) };
}

impl KeyRule {
    /// Checks `rules` and compiles them; errors name the key under `at`
    /// (`route[0].cache.key`).
    pub(crate) fn build(rules: &KeyRules, at: &str) -> Result<KeyRule, ConfigError> {
        let bad = |what: String| Err(ConfigError::Invalid(format!("`{at}`: {what}")));
        let sorted = match rules.query.as_deref() {
            None | Some("as_sent") => false,
            Some("sorted") => true,
            Some(other) => return bad(format!("query = {other:?}: \"sorted\" or \"as_sent\"")),
        };
        let mut headers = Vec::new();
        for h in &rules.headers {
            match HeaderName::from_bytes(h.as_bytes()) {
                Ok(name) => headers.push(name),
                Err(_) => return bad(format!("headers: {h:?} is not a header name")),
            }
        }
        for (what, list) in [
            ("drop_query", &rules.drop_query),
            ("cookies", &rules.cookies),
        ] {
            if let Some(n) = list
                .iter()
                .find(|n| n.is_empty() || n.contains([' ', ';', '=', '&']))
            {
                return bad(format!("{what}: {n:?} is not a name"));
            }
        }
        let mut tag: u64 = 0xcbf2_9ce4_8422_2325;
        let settings = format!(
            "{sorted}|{:?}|{:?}|{:?}",
            rules.drop_query, headers, rules.cookies
        );
        for b in settings.bytes() {
            tag = (tag ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Ok(KeyRule {
            sorted,
            drop: rules
                .drop_query
                .iter()
                .map(|g| g.as_bytes().to_vec())
                .collect(),
            headers,
            cookies: rules
                .cookies
                .iter()
                .map(|c| c.as_bytes().to_vec())
                .collect(),
            tag,
        })
    }

    /// The cache key of a request for `target` at `authority` with `fields`.
    pub(crate) fn key(
        &self,
        authority: &str,
        target: &str,
        fields: &HeaderMap,
    ) -> crate::arena::Text {
        SCRATCH.with(|scratch| {
            let (out, params) = &mut *scratch.borrow_mut();
            out.clear();
            self.write(out, params, authority, target, fields);
            let key = crate::arena::copy(out);
            // Host, path and query come from strs and values are escaped to ASCII.
            crate::arena::Text::from_utf8(key).expect("a key of UTF-8 and ASCII")
        })
    }

    fn write(
        &self,
        out: &mut Vec<u8>,
        params: &mut Vec<(u32, u32)>,
        authority: &str,
        target: &str,
        fields: &HeaderMap,
    ) {
        let host = authority.strip_suffix(":80").unwrap_or(authority);
        out.extend_from_slice(host.as_bytes());
        out.make_ascii_lowercase();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        out.extend_from_slice(path.as_bytes());
        params.clear();
        let mut at = 0u32;
        for param in query.as_bytes().split(|&b| b == b'&') {
            let (start, end) = (at, at + param.len() as u32);
            at = end + 1;
            let name = param.split(|&b| b == b'=').next().unwrap_or_default();
            if !param.is_empty() && !self.drop.iter().any(|g| glob(g, name)) {
                params.push((start, end));
            }
        }
        let query = query.as_bytes();
        if self.sorted {
            let of = |&(s, e): &(u32, u32)| &query[s as usize..e as usize];
            params.sort_unstable_by(|a, b| of(a).cmp(of(b)));
        }
        for (i, &(s, e)) in params.iter().enumerate() {
            out.push(if i == 0 { b'?' } else { b'&' });
            out.extend_from_slice(&query[s as usize..e as usize]);
        }
        out.extend_from_slice(b" k");
        out.extend_from_slice(format_hex(self.tag).as_slice());
        for name in &self.headers {
            out.extend_from_slice(b" h");
            for (i, v) in fields.get_all(name).iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_value(out, v.as_bytes());
            }
        }
        for wanted in &self.cookies {
            out.extend_from_slice(b" c");
            if let Some(value) = cookie(fields, wanted) {
                out.push(b'=');
                push_value(out, value);
            }
        }
    }
}

/// A field value into the key, bytes outside ASCII (and `%`) as `%XX`, so that the key
/// stays text and two values never make the same key.
fn push_value(out: &mut Vec<u8>, value: &[u8]) {
    for &b in value {
        if b >= 0x80 || b == b'%' {
            out.extend_from_slice(&[
                b'%',
                b"0123456789ABCDEF"[(b >> 4) as usize],
                b"0123456789ABCDEF"[(b & 0xf) as usize],
            ]);
        } else {
            out.push(b);
        }
    }
}

/// 16 hex digits of `n`.
fn format_hex(n: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[(n >> (60 - 4 * i)) as usize & 0xf];
    }
    out
}

/// The value of the first cookie named `wanted` in the request's Cookie fields.
fn cookie<'f>(fields: &'f HeaderMap, wanted: &[u8]) -> Option<&'f [u8]> {
    fields
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = wire::trim_ows(pair);
            let eq = pair.iter().position(|&b| b == b'=')?;
            (wire::trim_ows(&pair[..eq]) == wanted).then(|| wire::trim_ows(&pair[eq + 1..]))
        })
}

/// Whether `name` matches `glob`, where `*` stands for any run of bytes.
fn glob(glob: &[u8], name: &[u8]) -> bool {
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if g < glob.len() && glob[g] == b'*' {
            star = Some((g, n));
            g += 1;
        } else if g < glob.len() && glob[g] == name[n] {
            g += 1;
            n += 1;
        } else if let Some((sg, sn)) = star {
            g = sg + 1;
            n = sn + 1;
            star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    glob[g..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(toml: &str) -> KeyRule {
        let rules: KeyRules = toml::from_str(toml).unwrap();
        KeyRule::build(&rules, "route[0].cache.key").unwrap()
    }

    fn key(rule: &KeyRule, target: &str, fields: &[(&str, &str)]) -> String {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let k = rule.key("Shop.Example:80", target, &h);
        k.to_string()
    }

    #[test]
    fn globs() {
        assert!(glob(b"utm_*", b"utm_source"));
        assert!(glob(b"utm_*", b"utm_"));
        assert!(!glob(b"utm_*", b"xutm_a"));
        assert!(glob(b"*id", b"fbclid"));
        assert!(glob(b"a*b*c", b"axxbyyc"));
        assert!(!glob(b"a*b*c", b"axxbyy"));
        assert!(glob(b"gclid", b"gclid"));
        assert!(!glob(b"gclid", b"gclids"));
    }

    #[test]
    fn query_sorted_and_dropped_headers_and_cookies_added() {
        let r = rule(
            "query = \"sorted\"\ndrop_query = [\"utm_*\", \"fbclid\"]\n\
             headers = [\"Accept-Language\"]\ncookies = [\"ab\"]",
        );
        let a = key(
            &r,
            "/p?utm_source=x&id=1&b=2&fbclid=9",
            &[("accept-language", "fr")],
        );
        let b = key(
            &r,
            "/p?b=2&id=1",
            &[("accept-language", "fr"), ("cookie", "z=1")],
        );
        assert_eq!(a, b);
        assert!(a.starts_with("shop.example/p?b=2&id=1 k"), "{a}");
        assert!(a.ends_with(" hfr c"), "{a}");
        let en = key(&r, "/p?b=2&id=1", &[("accept-language", "en")]);
        assert_ne!(a, en);
        let cookie = key(
            &r,
            "/p?b=2&id=1",
            &[("accept-language", "fr"), ("cookie", "x=1; ab=b")],
        );
        assert!(cookie.ends_with(" hfr c=b"), "{cookie}");
        // Nothing left of the query: no `?`.
        assert!(key(&r, "/p?utm_a=1", &[]).starts_with("shop.example/p k"));
    }

    #[test]
    fn another_rule_never_makes_the_same_key() {
        let sorted = rule("query = \"sorted\"");
        let as_sent = rule("query = \"as_sent\"");
        assert_ne!(key(&sorted, "/p?a=1", &[]), key(&as_sent, "/p?a=1", &[]));
        assert_eq!(
            key(&sorted, "/p?a=1", &[]),
            key(&rule("query = \"sorted\""), "/p?a=1", &[])
        );
        let e = KeyRule::build(
            &toml::from_str("query = \"x\"").unwrap(),
            "route[0].cache.key",
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("`route[0].cache.key`: query"));
    }
}
