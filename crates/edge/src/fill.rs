//! The proxy's side of a streaming fill (docs/cache.md, "Disk tier"): a response too
//! large for the memory tier, asked for by a plain GET (no range, no condition), goes to
//! the client as it arrives and, when the disk tier takes it, to disk as it passes
//! (`cache::disk::fill`), instead of being read whole first.

use bytes::Bytes;
use http::Method;

use crate::arena::Text;
use crate::cache::freshness::Freshness;
use crate::cache::Entry;
use crate::exchange::{CacheStatus, ProxyRequest, ProxyResponse};
use crate::proxy::{content_length, Edge, Store};
use crate::upstream::client::{Head, Pooled};
use crate::{cache::Cache, error::ProxyError, headers};

/// The request fields that make an answer from a stored object partial or conditional:
/// a request with one of them gets its answer from the object read whole.
const NOT_PLAIN: [&str; 6] = [
    "range",
    "if-range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

impl Store<'_> {
    /// The largest response read whole to be stored: the memory tier's limit, or the
    /// disk tier's when it is larger and the route may use it, unless the request is a
    /// plain GET that fills the disk as the body passes ([`Edge::pass_or_fill`]).
    pub(crate) fn limit(store: Option<&Self>, cache: &Cache, req: &ProxyRequest) -> usize {
        let streams = store.is_some_and(|s| !s.refresh) && plain(req);
        cache.object_limit(store.map_or(true, Store::disk) && !streams)
    }

    /// Whether the route lets its objects go to the disk tier.
    pub(crate) fn disk(&self) -> bool {
        self.policy.as_ref().map_or(true, |p| p.disk)
    }
}

/// A GET without a range or a condition.
fn plain(req: &ProxyRequest) -> bool {
    req.method == Method::GET && !NOT_PLAIN.iter().any(|n| req.headers.contains_key(*n))
}

impl Edge {
    /// Answers with a storable response too large to read whole (or of unknown length):
    /// passed through, and written to disk as it passes when it has a length, the
    /// request is plain and the disk tier takes it; else not stored.
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
        if let Some(length) = length.filter(|_| !esi && plain(&req) && store.disk()) {
            let mut stored = parts.headers.clone();
            headers::strip_hop_by_hop(&mut stored);
            let mut head = Entry::new(
                parts.status,
                stored,
                Bytes::new(),
                None,
                Some(&freshness),
                now,
            );
            head.expose_keys = expose;
            let field = |n: &str| req.headers.get(n).cloned();
            let object = (head, length);
            fill = (self.worker.cache).start_fill(&store.key, &field, object, store.guard);
        }
        if let (Some(_), Some(status)) = (&fill, store.status) {
            status.set(CacheStatus::Miss(true));
        }
        let response = self
            .answer_exposing(req, parts, pooled, (esi, expose), authority)
            .await?;
        Ok(match fill {
            Some(fill) => ProxyResponse {
                body: response.body.tee(fill),
                ..response
            },
            None => response,
        })
    }
}
