//! Access policy on a routed request (docs/security.md, "Access rules"): its route's
//! `access` list, else its host's, on the request's client (the one a trusted proxy
//! names). A refused request is answered with the list's `deny_status` in place of
//! whatever would have answered it, through the route's error pages and response edits.

use handler::Response;

use crate::generation::Generation;
use crate::metrics::Denied;
use crate::routing::Decided;
use crate::worker::Worker;

/// Refuses the request in `decided` when the access list of its route (or host) does
/// not allow `client`; counted in `tessera_access_denied_total{reason="acl"}`. Returns
/// whether it did.
pub(crate) fn check(
    worker: &Worker,
    (gen, site): (&Generation, usize),
    client: std::net::IpAddr,
    decided: &mut Decided,
) -> bool {
    let Some(access) = gen.rules[site].access(decided.rule) else {
        return false;
    };
    if access.allows(client) {
        return false;
    }
    if let Some(metrics) = worker.metrics() {
        metrics.denied(gen.host_labels[site], Denied::Acl);
    }
    decided.response = Some(Response::status_page(access.deny_status));
    decided.files = false;
    true
}
