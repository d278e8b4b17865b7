//! The proxy's side of a streaming fill (docs/cache.md, "Disk tier"): a response too
//! large for the memory tier goes to disk as it arrives (`cache::disk::fill`) instead
//! of being read whole first. A plain GET (no range, no condition) gets the body as it
//! passes; any other request, and a background refresh, leave the body to a task that
//! writes it to disk, and the request is answered from the object as it is written
//! (its range, its 304).

use bytes::Bytes;
use http::Method;

use crate::arena::Text;
use crate::body::{Body, BodyKind};
use crate::cache::freshness::Freshness;
use crate::cache::Entry;
use crate::exchange::{CacheStatus, ProxyRequest, ProxyResponse};
use crate::proxy::{content_length, Edge, Store};
use crate::upstream::client::pass::PassBody;
use crate::upstream::client::{Head, Pooled};
use crate::{error::ProxyError, headers};

/// The request fields that make an answer from a stored object partial or conditional.
const NOT_PLAIN: [&str; 6] = [
    "range",
    "if-range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

impl Store<'_> {
    /// Whether the route lets its objects go to the disk tier.
    pub(crate) fn disk(&self) -> bool {
        self.policy.as_ref().map_or(true, |p| p.disk)
    }
}

/// A GET without a range or a condition.
/// The entry to store for the response head `parts` (its hop-by-hop fields left out),
/// its body to come.
pub(crate) fn stored_head(parts: &Head, freshness: &Freshness, now: u64) -> Entry {
    let mut stored = parts.headers.clone();
    headers::strip_hop_by_hop(&mut stored);
    Entry::new(
        parts.status,
        stored,
        Bytes::new(),
        None,
        Some(freshness),
        now,
    )
}

fn plain(req: &ProxyRequest) -> bool {
    req.method == Method::GET && !NOT_PLAIN.iter().any(|n| req.headers.contains_key(*n))
}

/// The upstream body of `pooled`, `length` bytes when known.
pub(crate) fn upstream_body(mut pooled: Pooled, length: Option<u64>) -> Body {
    match pooled.take_whole() {
        Some(whole) => Body::whole(whole),
        None => Body {
            kind: BodyKind::Pass(PassBody::new(pooled)),
            length,
        },
    }
}

impl Edge {
    /// Answers with a storable response too large for the memory tier (or of unknown
    /// length): written to disk as it arrives when it has a length and the disk tier
    /// takes it, else passed through and not stored.
    pub(crate) async fn pass_or_fill(
        &self,
        req: ProxyRequest,
        (parts, pooled, freshness, now): (Head, Pooled, Freshness, u64),
        store: Store<'_>,
        (esi, expose): (bool, bool),
        authority: Text,
    ) -> Result<ProxyResponse, ProxyError> {
        let length = content_length(&parts.headers);
        let mut fill = None;
        if let Some(length) = length.filter(|_| !esi && req.method == Method::GET && store.disk()) {
            let mut head = stored_head(&parts, &freshness, now);
            head.expose_keys = expose;
            let field = |n: &str| req.headers.get(n).cloned();
            let object = (head, length);
            fill = (self.worker.cache).start_fill(&store.key, &field, object, store.guard);
        }
        let Some((fill, entry)) = fill else {
            return self
                .answer_exposing(req, parts, pooled, (esi, expose), authority)
                .await;
        };
        if let Some(status) = store.status {
            status.set(CacheStatus::Miss(true));
        }
        if plain(&req) && !store.refresh {
            let response = self
                .answer_exposing(req, parts, pooled, (esi, expose), authority)
                .await?;
            return Ok(ProxyResponse {
                body: response.body.tee(fill),
                ..response
            });
        }
        // The body goes to disk only; the request is answered from the object.
        evloop::spawn_local(crate::body::finish_fill(
            upstream_body(pooled, length),
            fill,
        ));
        if store.refresh {
            return Ok(ProxyResponse {
                status: entry.status,
                head_h1: None,
                headers: handler::FieldList::new(),
                body: Body::ready(Vec::new()),
            });
        }
        self.serve(entry, &req, &authority, now, None).await
    }
}
