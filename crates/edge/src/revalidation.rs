//! The proxy's side of revalidation (docs/cache.md, "Revalidation"): a fetch made for an
//! expired object with validators went upstream as a conditional request
//! (`Store::validate`, the fields from `headers::Forwarded::revalidate`), and the origin
//! answered `304 Not Modified`. The object is refreshed with the 304's fields and a new
//! lifetime (RFC 9111 4.3.4), stored and landed for the requests waiting on the key,
//! and the client gets it as from the cache. The origin sent no body.

use std::sync::Arc;

use handler::FieldList;
use http::header;

use crate::arena::Text;
use crate::body::Body;
use crate::cache::freshness;
use crate::cache::revalidate::updated_fields;
use crate::cache::Landing;
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::exchange::{CacheStatus, ProxyRequest, ProxyResponse};
use crate::headers;
use crate::proxy::{Edge, Store};
use crate::upstream::client::{Head, Pooled};

impl Edge {
    /// Answers a request whose conditional fetch of `store.validate` got a 304 (`parts`).
    pub(crate) async fn revalidated(
        &self,
        req: ProxyRequest,
        mut parts: Head,
        mut pooled: Pooled,
        store: Store<'_>,
        authority: Text,
    ) -> Result<ProxyResponse, ProxyError> {
        // A 304 has no body: the connection goes back to the pool.
        let _ = pooled.take_whole();
        drop(pooled);
        let Some(stored) = store.validate else {
            unreachable!("revalidated() is called for a fetch with an object to validate");
        };
        let worker = &self.worker;
        let token = worker.config.esi.device_token.as_str();
        headers::strip_hop_by_hop(&mut parts.headers);
        let fields = updated_fields(&stored.headers, &parts.headers);
        let now = now_ms();
        let rules = freshness::Rules {
            route: store.policy.as_deref(),
            ..worker.cache.rules(token)
        };
        let authorized = req.headers.contains_key(header::AUTHORIZATION);
        let decided = freshness::decide(
            stored.status,
            &fields,
            &rules,
            None,
            authorized,
            evloop::time::system_now(),
        );
        crate::metrics::revalidated();
        let entry = if decided.store {
            let entry = Arc::new(stored.refreshed(fields, &decided, now));
            let field = |n: &str| req.headers.get(n).cloned();
            worker.cache.insert(&store.key, &field, entry.clone(), now);
            if let Some(guard) = store.guard {
                guard.land(Landing::Stored(entry.clone()));
            }
            entry
        } else {
            // The origin's fields now forbid storing it: this request gets the object it
            // confirmed, and the waiters fetch their own (the guard lands `NotStored`
            // when dropped).
            Arc::new(stored.refreshed(fields, &decided, now))
        };
        tracing::debug!(key = %store.key, stored = decided.store, "revalidated: 304 from the origin");
        if let Some(status) = store.status {
            status.set(CacheStatus::Revalidated(
                entry.fresh_until().saturating_sub(now),
            ));
        }
        if store.refresh {
            return Ok(ProxyResponse {
                status: entry.status,
                head_h1: None,
                headers: FieldList::new(),
                body: Body::ready(Vec::new()),
            });
        }
        self.serve(entry, &req, &authority, now, None).await
    }
}
