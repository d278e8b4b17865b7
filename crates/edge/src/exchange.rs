//! What the proxy is given and what it gives back: a request as the server parsed it,
//! and the response to send downstream, with its [`Body`].

use std::sync::Arc;

use bytes::Bytes;
use handler::FieldList;
use http::header::HeaderMap;
use http::{Method, StatusCode};

use crate::arena::Text;
use crate::body::Body;
use crate::cache::variants::Variants;
use crate::cache::Entry;
use crate::headers::ClientInfo;

/// A request to proxy, as the server parsed it.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    pub method: Method,
    /// The request target in origin form: `/path?query`.
    pub target: Text,
    pub headers: HeaderMap,
    /// The whole request body (the server reads it within its body limit first), when
    /// it is not `streamed`.
    pub body: Bytes,
    /// The request body as it arrives from the client (`request_buffering = false`, the
    /// default), sent on as it comes; `None`: `body` is the whole of it. Shared so that
    /// the request stays `Clone`; its bytes are taken once.
    pub streamed: Option<std::rc::Rc<handler::RequestBody>>,
    pub client: ClientInfo,
    /// Where to note the upstream attempts and the cache's result for the access log;
    /// `None`: the log does not write them, and nothing is noted.
    pub notes: Option<handler::LogNotes>,
    /// The request's id, sent to the origin as `X-Request-Id` in place of any the client
    /// sent (`handler::Request::request_id`); `None`: the fields go as they are.
    pub request_id: Option<u128>,
    /// The request's trace context (`handler::Request::trace`): each request sent for it
    /// upstream (its own, its ESI fragments') goes as a child span with its own
    /// `traceparent`; `None`: the trace fields go as they are.
    pub trace: Option<trace::Context>,
}

/// The response to send downstream. `headers` are final (hop-by-hop fields and
/// Surrogate-Control removed, Via added), in the seam's form: the module makes them the
/// `handler::ResponseHead` as they are. The server adds its own framing from
/// [`Body::content_length`].
pub struct ProxyResponse {
    pub status: StatusCode,
    pub headers: FieldList,
    pub body: Body,
    /// For an object served from the cache: `headers` but Age, as HTTP/1 lines made once
    /// for the object, so that serving it does not re-encode every field.
    /// With the object's (or assembled page's) compressed forms, to serve from, and the
    /// object (weighed again in the cache when a form is added).
    pub(crate) head_h1: Option<(Bytes, bool, Option<CachedForms>)>,
}

/// A cached body's compressed forms and the object they count in.
pub(crate) type CachedForms = (Arc<Variants>, Arc<Entry>);

/// What the cache did for one request, for its RFC 9211 `Cache-Status` field
/// (`[cache] cache_status`): set by the proxy as it decides, read once it answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum CacheStatus {
    /// The cache was not asked (a tunnel, a purge, an error before the lookup).
    #[default]
    Unknown,
    /// A fresh object; the milliseconds it stays fresh.
    Hit(u64),
    /// A stale object served (while it is refreshed, or because the origin failed);
    /// the milliseconds it has been stale.
    Stale(u64),
    /// An expired object the origin confirmed with a 304 to a conditional request: served
    /// refreshed; the milliseconds it is fresh for now.
    Revalidated(u64),
    /// Another request's fetch of the key, waited on.
    Collapsed,
    /// Not found: forwarded; `true` once the response was stored.
    Miss(bool),
    /// Not looked up: the route's `bypass`, a key whose response could not be stored, a
    /// method other than GET and HEAD, or a request's `no-store`.
    Bypass,
}

impl CacheStatus {
    /// A hit on `entry` at `now`: fresh, or stale.
    pub(crate) fn of(entry: &Entry, now: u64) -> CacheStatus {
        // Fresh while `now < until`, as `Entry::is_fresh` decides.
        let until = entry.fresh_until();
        if now < until {
            CacheStatus::Hit(until - now)
        } else {
            CacheStatus::Stale(now - until)
        }
    }

    /// The cache's result as the access log writes it (`%{cache}x`): `None` when the
    /// cache was not asked.
    pub(crate) fn log_result(self) -> Option<handler::CacheResult> {
        Some(match self {
            CacheStatus::Unknown => return None,
            CacheStatus::Hit(_) => handler::CacheResult::Hit,
            CacheStatus::Stale(_) => handler::CacheResult::Stale,
            CacheStatus::Revalidated(_) => handler::CacheResult::Revalidated,
            CacheStatus::Collapsed => handler::CacheResult::Collapsed,
            CacheStatus::Miss(_) => handler::CacheResult::Miss,
            CacheStatus::Bypass => handler::CacheResult::Pass,
        })
    }

    /// The field's value, written into `out`: `tessera; hit; ttl=N`,
    /// `tessera; fwd=miss; stored`, `tessera; fwd=stale; ttl=-N`,
    /// `tessera; fwd=stale; fwd-status=304; ttl=N`, ... (`None` when
    /// unknown).
    pub(crate) fn write(self, out: &mut Vec<u8>) -> Option<()> {
        out.extend_from_slice(b"tessera; ");
        match self {
            CacheStatus::Unknown => return None,
            CacheStatus::Hit(ms) => {
                out.extend_from_slice(b"hit; ttl=");
                wire::write_decimal(out, ms / 1000);
            }
            CacheStatus::Stale(ms) => {
                out.extend_from_slice(b"fwd=stale; ttl=-");
                wire::write_decimal(out, ms.div_ceil(1000));
            }
            // RFC 9211: forwarded because what the cache held was stale, and what the
            // origin answered.
            CacheStatus::Revalidated(ms) => {
                out.extend_from_slice(b"fwd=stale; fwd-status=304; ttl=");
                wire::write_decimal(out, ms / 1000);
            }
            CacheStatus::Collapsed => out.extend_from_slice(b"fwd=miss; collapsed"),
            CacheStatus::Miss(true) => out.extend_from_slice(b"fwd=miss; stored"),
            CacheStatus::Miss(false) => out.extend_from_slice(b"fwd=miss"),
            CacheStatus::Bypass => out.extend_from_slice(b"fwd=bypass"),
        }
        Some(())
    }
}
