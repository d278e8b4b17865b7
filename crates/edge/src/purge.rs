//! Invalidation requests: `PURGE` of one URL or of the objects with some surrogate keys
//! (`Surrogate-Key: k1 k2`, or xkey's `xkey`), soft with `Fastly-Soft-Purge: 1`, and
//! `BAN` of a prefix or, with `X-Ban-Url` and `X-Ban-Host`, of the URLs and hosts
//! regular expressions match (docs/cache.md, "Purging"), allowed to the addresses of
//! `purge_allow` and to holders of `purge_token`.

use handler::FieldList;
use http::StatusCode;

use crate::body::Body;
use crate::cache::fanout::Invalidation;
use crate::exchange::{ProxyRequest, ProxyResponse};
use crate::proxy::Edge;

impl Edge {
    /// `PURGE` (the URL, every variant; or with `Surrogate-Key` or `xkey`, every object
    /// with one of the keys listed, whatever the URL; marked stale instead of removed
    /// with `Fastly-Soft-Purge: 1`) and `BAN` (every URL under the path prefix; or with
    /// `X-Ban-Url` or `X-Ban-Host`, every URL and host their expressions match, applied
    /// lazily: always 200): 200 when something was removed, 404 when nothing was cached,
    /// either with the count in `Purged` ([`answer`]), 403 for a client neither
    /// on `purge_allow` nor holding the `purge_token`, 400 for an expression that does
    /// not compile.
    pub(crate) fn invalidate(&self, req: &ProxyRequest, key: &str) -> ProxyResponse {
        let cache = &self.worker.cache;
        let config = &cache.config;
        let token_ok = !config.purge_token.is_empty()
            && req
                .headers
                .get("x-purge-token")
                .is_some_and(|v| constant_time_eq(v.as_bytes(), config.purge_token.as_bytes()));
        if !(config.purge_allow.contains(&req.client.addr) || token_ok) {
            tracing::debug!(client = %req.client.addr, method = %req.method, "invalidation refused");
            return ProxyResponse {
                status: StatusCode::FORBIDDEN,
                head_h1: None,
                headers: FieldList::new(),
                body: Body::ready(Vec::new()),
            };
        }
        {
            let soft = req
                .headers
                .get("fastly-soft-purge")
                .is_some_and(|v| v.as_bytes() == b"1");
            let tags: Vec<&str> = ["surrogate-key", "xkey"]
                .iter()
                .flat_map(|name| req.headers.get_all(*name))
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split([' ', ',', '\t']))
                .filter(|k| !k.is_empty())
                .collect();
            let field = |name: &str| {
                req.headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let (url, host) = (field("x-ban-url"), field("x-ban-host"));
            let what = match req.method.as_str() {
                "PURGE" if !tags.is_empty() => Invalidation::PurgeKeys {
                    keys: tags.iter().map(|k| k.to_string()).collect(),
                    soft,
                },
                "PURGE" => Invalidation::Purge {
                    key: key.to_string(),
                    soft,
                },
                _ if url.is_some() || host.is_some() => Invalidation::BanMatching { url, host },
                _ => Invalidation::Ban {
                    prefix: key.to_string(),
                },
            };
            let removed = match cache.invalidate(what) {
                Ok(n) => n,
                Err(e) => return refused(StatusCode::BAD_REQUEST, e),
            };
            tracing::info!(client = %req.client.addr, method = %req.method, %key, ?tags, soft, ?removed, "cache invalidated");
            answer(removed)
        }
    }
}

/// The answer to an invalidation carried out: how many objects this process's memory
/// held (removed, or marked stale), in a `Purged` field and in the body as Varnish xkey's
/// VCL says it (`Invalidated N objects`), 200 when there was one, 404 when none; a ban
/// by expression (applied lazily: `None`) 200 with Varnish's `Ban added`, no count.
fn answer(removed: Option<usize>) -> ProxyResponse {
    let mut headers = FieldList::new();
    headers.append(b"content-type", b"text/plain; charset=utf-8");
    let (status, text) = match removed {
        Some(n) => {
            headers.append(b"purged", itoa::Buffer::new().format(n).as_bytes());
            let status = if n > 0 {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            (status, format!("Invalidated {n} objects\n"))
        }
        None => (StatusCode::OK, "Ban added\n".to_string()),
    };
    ProxyResponse {
        status,
        head_h1: None,
        headers,
        body: Body::ready(vec![bytes::Bytes::from(text)]),
    }
}

/// An answer saying why the request was not carried out.
fn refused(status: StatusCode, why: String) -> ProxyResponse {
    let mut headers = FieldList::new();
    headers.append(b"content-type", b"text/plain; charset=utf-8");
    ProxyResponse {
        status,
        head_h1: None,
        headers,
        body: Body::ready(vec![bytes::Bytes::from(why + "\n")]),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
