//! The request limits on one request (docs/security.md, "Request limits"): its route's
//! (else its host's) `[[limit]]` zones and `limit_conn`, between the rules and the
//! handlers.

use super::edited::Rerouted;
use super::Checked;
use crate::facts::ConnFacts;
use crate::generation::Generation;
use crate::limit::Verdict;
use crate::routing;
use crate::worker::Worker;

/// The request limits of its route (else of its host) on a request: a refusal becomes
/// its answer (and the second value says so: the access checks then do not run, as
/// nginx's access phase does not after its preaccess phase refused); `Err(ms)` when it is
/// to wait that long first ([`delay`]; answered again then, not counted again); its place
/// among its key's requests in flight (`limit_conn`), counted after the wait as nginx's
/// `limit_conn` counts after `limit_req`. A request answered again after an access check
/// waited (`checked`) was counted the first time. A request is counted by the zones of the first route it comes to that
/// has any: one a filter's edit routes again (`rerouted`) is counted by the new route's
/// only if no earlier one counted it (nginx's `limit_req` counts a request once). A
/// configuration without limits costs one test.
pub(super) fn limits(
    worker: &Worker,
    conn: &ConnFacts,
    (gen, site): (&Generation, usize),
    req: &wire::Request<'_, '_>,
    checked: Option<&Checked>,
    (decided, path, rerouted): (&mut routing::Decided, &[u8], &mut Option<Rerouted>),
) -> Result<(Option<crate::limit::Held>, bool), u64> {
    if !gen.limits_on {
        return Ok((None, false));
    }
    let ctx = rules::Ctx {
        req,
        original: req.path,
        path,
        peer: conn.client,
        secure: conn.secure(),
        request_id: &[b'0'; 32],
    };
    let zones = gen.limits.of(site, decided.rule);
    let counted = checked.is_some() || rerouted.is_some_and(|r| r.counted);
    if !zones.is_empty() && !counted {
        let before = Rerouted {
            site,
            times: 0,
            counted: true,
            sub: false,
        };
        *rerouted = Some(Rerouted {
            counted: true,
            ..rerouted.unwrap_or(before)
        });
        let now = (worker.clock.millis(), worker.clock.unix_millis());
        match gen.limits.check(zones, &ctx, now, worker.id) {
            Verdict::Pass => {}
            Verdict::Delay(ms) => return Err(ms),
            Verdict::Refuse {
                status,
                retry_after,
            } => {
                decided.response = Some(refusal(status, retry_after));
                return Ok((None, true));
            }
        }
    }
    if rerouted.is_some_and(|r| r.sub) {
        return Ok((None, false));
    }
    match gen.limits.hold(site, decided.rule, &ctx) {
        Ok(held) => Ok((held, false)),
        Err(status) => {
            if let Some(metrics) = worker.metrics() {
                metrics.limit_conn_refused(gen.host_labels[site]);
            }
            decided.response = Some(handler::Response::status_page(status));
            Ok((None, true))
        }
    }
}

/// A delay the limits give a request (nginx's `limit_req` without `nodelay`), as a check
/// that waits: the connection (or the HTTP/2 stream's task) awaits it on a timer of its
/// worker, then answers the request again with what it found, nothing, which tells the
/// limits that they counted the request already ([`limits`]'s `checked`).
pub(super) fn delay(ms: u64) -> handler::LocalFuture<Checked> {
    handler::local_future(async move {
        evloop::time::sleep(std::time::Duration::from_millis(ms)).await;
        Checked::default()
    })
}

/// The answer to a request the limits refuse: `status` with `Retry-After`.
fn refusal(status: u16, retry_after: u64) -> handler::Response {
    let mut response = handler::Response::status_page(status);
    let mut seconds = Vec::with_capacity(8);
    wire::write_decimal(&mut seconds, retry_after);
    response.head.append(b"Retry-After", &seconds);
    response
}
