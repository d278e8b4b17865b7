//! The checks a route makes before its handler that may wait (docs/security.md):
//! `basic_auth`, whose password is verified on the verifier threads. A check that waits
//! makes the exchange answer [`Dispatched::Wait`](super::Dispatched): the connection
//! awaits it, then answers the same request again with what it found ([`Checked`]),
//! which the check then takes instead of asking again.

use handler::{LocalFuture, Response};

use crate::auth::Verdict;
use crate::generation::Generation;
use crate::metrics::Denied;
use crate::worker::Worker;

/// What the checks that waited found, for the request's next answer.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// The password was verified: good or not.
    basic: Option<bool>,
    /// The verifier's queue was full.
    busy: bool,
}

/// What a check made of a request.
pub(crate) enum Check {
    /// On to the handler.
    Pass,
    /// Answered in the handler's place (a 401, a 503).
    Answer(Response),
    /// To await, then answer the request again with its findings.
    Wait(LocalFuture<Checked>),
}

/// The `basic_auth` of the route `rule` of `site`, on the request's `Authorization`.
pub(crate) fn basic(
    worker: &Worker,
    (gen, site): (&Generation, usize),
    rule: Option<usize>,
    req: &wire::Request<'_, '_>,
    checked: Option<&Checked>,
) -> Check {
    let Some(auth) = rule.and_then(|r| gen.basic_auth[site].get(r)?.as_deref()) else {
        return Check::Pass;
    };
    let refuse = || {
        if let Some(metrics) = worker.metrics() {
            metrics.denied(gen.host_labels[site], Denied::Auth);
        }
        let mut response = Response::status_page(401);
        response.head.append(b"WWW-Authenticate", &auth.challenge);
        Check::Answer(response)
    };
    match checked {
        Some(Checked {
            basic: Some(good), ..
        }) => return if *good { Check::Pass } else { refuse() },
        Some(Checked { busy: true, .. }) => {
            let mut response = Response::status_page(503);
            response.head.append(b"Retry-After", b"1");
            return Check::Answer(response);
        }
        _ => {}
    }
    match auth.judge(req.header("authorization")) {
        Verdict::Good => Check::Pass,
        Verdict::Refused => refuse(),
        Verdict::Verify(pending) => Check::Wait(handler::local_future(async move {
            match pending.verify().await {
                Some(good) => Checked {
                    basic: Some(good),
                    busy: false,
                },
                None => Checked {
                    basic: None,
                    busy: true,
                },
            }
        })),
    }
}
