//! Whose compression a route's responses take, and the compressed pages this worker
//! stitches from cached parts. The server's filter compresses the rest; what is decided
//! here is which policy it applies (the route's own `[route.compression]` or its site's)
//! and, for a page assembled per request from cached parts, its compressed form made
//! from the parts' forms.

use std::sync::Arc;

use bytes::Bytes;
use compress::{Accepted, Compression};
use handler::{Body, ResponseHead};

use crate::assembly::stitch::Parts;
use crate::config::{EdgeConfig, RouteConfig};

/// Whose `[compression]` a route's responses are compressed with.
pub(crate) enum RoutePolicy {
    /// Its site's (`[compression]` or `[host.compression]`).
    Site,
    /// Its own `[route.compression]`; `None` when that is off (or `compress = false`).
    Own(Option<Arc<Compression>>),
}

impl RoutePolicy {
    /// The policy of a `[[route]]` as configured (already validated).
    fn of(route: &RouteConfig) -> RoutePolicy {
        match (&route.compression, route.compress) {
            (Some(c), _) => RoutePolicy::Own(c.build().ok().flatten().map(Arc::new)),
            (None, Some(false)) => RoutePolicy::Own(None),
            (None, _) => RoutePolicy::Site,
        }
    }
}

/// One worker's compression per route (in `config.route`'s order) and its store of
/// compressed parts.
pub(crate) struct RouteCompression {
    policies: Vec<RoutePolicy>,
    /// Compressed parts of pages assembled per request ([`crate::assembly::stitch`]).
    parts: Parts,
}

impl RouteCompression {
    pub(crate) fn new(config: &EdgeConfig) -> RouteCompression {
        RouteCompression {
            policies: config.route.iter().map(RoutePolicy::of).collect(),
            parts: Parts::default(),
        }
    }

    /// The compression policy of `config.route[route]`: its own `[route.compression]`,
    /// else its site's. `None` when compression is off there.
    pub(crate) fn compression<'a>(
        &'a self,
        config: &'a EdgeConfig,
        route: usize,
    ) -> Option<&'a Compression> {
        match self.policies.get(route)? {
            RoutePolicy::Own(policy) => policy.as_deref(),
            RoutePolicy::Site => {
                let site = config.route.get(route)?.site;
                config.compression.get(site)?.as_ref()
            }
        }
    }

    /// Whose policy the server's filter applies to `config.route[route]`'s responses.
    pub(crate) fn policy(&self, route: usize) -> Option<&RoutePolicy> {
        self.policies.get(route)
    }

    /// A page assembled per request from cached parts, in the coding the client gets,
    /// stitched from the parts' compressed forms ([`crate::assembly::stitch`]); `None`
    /// when it is not to be compressed here (the server's filter then decides).
    pub(crate) fn stitch(
        &self,
        policy: &Compression,
        accepted: Accepted,
        head: &mut ResponseHead,
        chunks: &[Bytes],
    ) -> Option<Body> {
        let length = chunks.iter().map(|c| c.len() as u64).sum();
        if !compress::compressible(policy, head, Some(length)) {
            return None;
        }
        let coding = accepted.choose(&policy.order)?;
        let (body, made) = self.parts.stitch(coding, policy.level(coding), chunks)?;
        tracing::debug!(
            coding = coding.token(),
            parts = chunks.len(),
            made,
            "page stitched"
        );
        compress::mark_encoded(head, coding);
        head.set_identity_only(true);
        Some(Body::Full(body))
    }
}
