//! A route's own compression policy on a response head: the seam's head carries it as
//! an opaque value (`handler` cannot name [`Compression`], which builds on it), and this
//! trait sets and reads it as what it is.

use std::sync::Arc;

use handler::ResponseHead;

use crate::Compression;

/// The policy of the route that made a response, in place of its site's: set by the
/// module that answered (the proxy, for a `[route.compression]`), read by the server's
/// compression filter.
pub trait HeadPolicy {
    /// Has the compression filter use `policy` for this response.
    fn set_compression(&mut self, policy: Arc<Compression>);

    /// The policy set with [`HeadPolicy::set_compression`], if any.
    fn compression(&self) -> Option<Arc<Compression>>;
}

impl HeadPolicy for ResponseHead {
    fn set_compression(&mut self, policy: Arc<Compression>) {
        self.set_compression_policy(policy);
    }

    fn compression(&self) -> Option<Arc<Compression>> {
        // Only this trait sets the policy, so it is always a `Compression`.
        self.compression_policy()?.clone().downcast().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_round_trips_through_the_head() {
        let policy = Arc::new(
            crate::CompressionConfig::default()
                .build()
                .unwrap()
                .expect("enabled by default"),
        );
        let mut head = ResponseHead::new(200);
        assert!(head.compression().is_none());
        head.set_compression(policy.clone());
        assert!(Arc::ptr_eq(&head.compression().unwrap(), &policy));
        head.reset(200);
        assert!(head.compression().is_none());
    }
}
