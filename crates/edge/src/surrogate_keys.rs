//! Surrogate keys on the proxy's side (docs/cache.md, "Surrogate keys"): the origin's
//! `Surrogate-Key`, `Cache-Tag` and `xkey` fields are stored with the object
//! (`cache::Entry::keys`) and removed from the client's response, unless the route says
//! `expose_keys = true`; a `PURGE` naming keys is in `purge.rs`.

use handler::FieldList;

use crate::arena::Text;
use crate::error::ProxyError;
use crate::exchange::{ProxyRequest, ProxyResponse};
use crate::headers;
use crate::proxy::Edge;
use crate::upstream::client::{Head, Pooled};

impl Edge {
    /// [`Edge::answer`], with the origin's surrogate key fields kept for the client when
    /// `expose` (the route's `expose_keys`); `answer` removes them.
    pub(crate) async fn answer_exposing(
        &self,
        req: ProxyRequest,
        parts: Head,
        pooled: Pooled,
        (esi, expose): (bool, bool),
        authority: Text,
    ) -> Result<ProxyResponse, ProxyError> {
        let mut keys = FieldList::new();
        if expose {
            headers::expose_keys(&mut keys, &parts.headers);
        }
        let mut response = self.answer(req, parts, pooled, esi, authority).await?;
        for (name, value) in keys.iter() {
            response.headers.append(name, value);
        }
        Ok(response)
    }
}
