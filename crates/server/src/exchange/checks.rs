//! The checks a route makes before its handler that may wait (docs/security.md):
//! `basic_auth`, whose password is verified on the verifier threads, then
//! `forward_auth`, a subrequest to an upstream. A check that waits makes the exchange
//! answer [`Dispatched::Wait`](super::Dispatched): the connection awaits it, then answers
//! the same request again with what it found ([`Checked`]), which the check then takes
//! instead of asking again. A route's filter that waits (`handler::Filtered::Later`) is
//! carried the same way (`modules.rs`).

use std::sync::Arc;

use handler::{LocalFuture, Response};

pub(crate) use crate::auth::forward::Copied;
use crate::auth::forward::{ForwardAuth, Outcome};
use crate::auth::{RouteAuth, Verdict};
use crate::facts::ConnFacts;
use crate::generation::Generation;
use crate::metrics::Denied;
use crate::worker::Worker;

/// What the checks that waited found, for the request's next answer.
#[derive(Default)]
pub(crate) struct Checked {
    /// The password was verified: good or not.
    basic: Option<bool>,
    /// The verifier's queue was full.
    busy: bool,
    /// The forward auth upstream's answer.
    forward: Option<Outcome>,
    /// What the route's filter ended with after it waited (a Lua `access` that awaited),
    /// taken by the next answer in place of calling the filter again.
    pub filtered: std::cell::RefCell<Option<handler::Filtered>>,
}

impl Checked {
    /// What the checks found so far (`None`: nothing), with what the route's filter
    /// ended with after it waited.
    pub fn with_filtered(found: Option<&Checked>, filtered: handler::Filtered) -> Checked {
        Checked {
            basic: found.and_then(|c| c.basic),
            busy: false,
            forward: found.and_then(|c| c.forward.clone()),
            filtered: std::cell::RefCell::new(Some(filtered)),
        }
    }
}

/// What the checks made of a request.
pub(crate) enum Check {
    /// On to the handler, with these fields from a forward auth answer put into it.
    Pass(Option<Copied>),
    /// Answered in the handler's place (a 401, a 503...).
    Answer(Response),
    /// To await, then answer the request again with its findings.
    Wait(LocalFuture<Checked>),
}

/// The checks of the route `rule` of `site` on `req`: its `basic_auth`, then its
/// `forward_auth`.
pub(crate) fn run(
    worker: &Worker,
    (gen, site): (&Generation, usize),
    rule: Option<usize>,
    (req, conn): (&wire::Request<'_, '_>, &ConnFacts),
    checked: Option<&Checked>,
) -> Check {
    let Some(auth) = rule.and_then(|r| gen.auth.get(site)?.get(r)?.as_ref()) else {
        return Check::Pass(None);
    };
    let deny = |reason| {
        if let Some(metrics) = worker.metrics() {
            metrics.denied(gen.host_labels[site], reason);
        }
    };
    match basic(auth, req, checked) {
        Check::Pass(_) => {}
        Check::Answer(response) => {
            if response.head.status() == 401 {
                deny(Denied::Auth);
            }
            return Check::Answer(response);
        }
        wait => return wait,
    }
    let Some(forward) = &auth.forward else {
        return Check::Pass(None);
    };
    let forward = (forward, auth);
    let outcome = match checked.and_then(|c| c.forward.as_ref()) {
        Some(outcome) => outcome,
        None => return ask(worker, forward, (req, conn), checked),
    };
    let forward = forward.0;
    match outcome {
        Outcome::Allowed(copied) if copied.names.is_empty() => Check::Pass(None),
        Outcome::Allowed(copied) => Check::Pass(Some(copied.clone())),
        Outcome::Failed if forward.allow_on_failure => Check::Pass(None),
        Outcome::Failed => {
            deny(Denied::ForwardAuth);
            Check::Answer(Response::status_page(500))
        }
        Outcome::Refused {
            status,
            headers,
            body,
        } => {
            deny(Denied::ForwardAuth);
            let mut head = handler::ResponseHead::new(*status);
            for (name, value) in headers {
                head.append(name, value);
            }
            Check::Answer(Response {
                head,
                body: handler::Body::Full(body.clone()),
                relayed: false,
            })
        }
    }
}

/// The route's `basic_auth` on the request's `Authorization`.
fn basic(auth: &RouteAuth, req: &wire::Request<'_, '_>, checked: Option<&Checked>) -> Check {
    let Some(basic) = &auth.basic else {
        return Check::Pass(None);
    };
    let refuse = || {
        let mut response = Response::status_page(401);
        response.head.append(b"WWW-Authenticate", &basic.challenge);
        Check::Answer(response)
    };
    match checked {
        Some(Checked {
            basic: Some(good), ..
        }) => return if *good { Check::Pass(None) } else { refuse() },
        Some(Checked { busy: true, .. }) => {
            let mut response = Response::status_page(503);
            response.head.append(b"Retry-After", b"1");
            return Check::Answer(response);
        }
        _ => {}
    }
    match basic.judge(req.header("authorization")) {
        Verdict::Good => Check::Pass(None),
        Verdict::Refused => refuse(),
        Verdict::Verify(pending) => Check::Wait(handler::local_future(async move {
            match pending.verify().await {
                Some(good) => Checked {
                    basic: Some(good),
                    ..Checked::default()
                },
                None => Checked {
                    busy: true,
                    ..Checked::default()
                },
            }
        })),
    }
}

/// The forward auth upstream's cached answer, else a subrequest to await. What the
/// basic check found (it passed) is carried on.
fn ask(
    worker: &Worker,
    (forward, route): (&ForwardAuth, &Arc<RouteAuth>),
    (req, conn): (&wire::Request<'_, '_>, &ConnFacts),
    checked: Option<&Checked>,
) -> Check {
    let key = forward.key(req);
    if let Some(copied) = forward.cached(key) {
        return Check::Pass((!copied.names.is_empty()).then_some(copied));
    }
    let basic = checked.and_then(|c| c.basic);
    let current = worker.current();
    let Some(upstreams) = current.upstreams.clone() else {
        let forward = Some(Outcome::Failed);
        return Check::Wait(handler::local_future(async move {
            Checked {
                basic,
                forward,
                ..Checked::default()
            }
        }));
    };
    let request = forward.request(req, (conn.client.ip(), conn.secure()));
    let call = upstreams.call(request);
    let route = route.clone();
    Check::Wait(handler::local_future(async move {
        let reply = call.await;
        let forward = route.forward.as_ref().map(|f| f.judge(reply, key));
        Checked {
            basic,
            forward: Some(forward.unwrap_or(Outcome::Failed)),
            ..Checked::default()
        }
    }))
}
