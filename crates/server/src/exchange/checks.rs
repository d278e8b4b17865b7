//! The checks a route makes before its handler that may wait (docs/security.md):
//! `basic_auth`, whose password is verified on the verifier threads, then
//! `forward_auth`, a subrequest to an upstream. A check that waits makes the exchange
//! answer [`Dispatched::Wait`](super::Dispatched): the connection awaits it, then answers
//! the same request again with what it found ([`Checked`]), which the check then takes
//! instead of asking again. A route's filter that waits (`handler::Filtered::Later`) is
//! carried the same way (`modules.rs`).

use std::cell::RefCell;
use std::sync::Arc;

use handler::{LocalFuture, Response};

pub(crate) use crate::auth::forward::Copied;
use crate::auth::forward::{ForwardAuth, Outcome};
use crate::auth::{RouteAuth, Verdict};
use crate::facts::ConnFacts;
use crate::generation::Generation;
use crate::metrics::Denied;
use crate::worker::Worker;

/// What the checks that waited found, for the request's next answer: per route
/// checked, as (generation, site, rule), its findings. A request whose filter gives it another path
/// may be checked on several routes; each keeps its own.
#[derive(Default)]
pub(crate) struct Checked {
    routes: Vec<(Route, Found)>,
    /// What a route's filter ended with after it waited (a Lua `access` that awaited):
    /// the filter (generation, module, tag) and the path it ran on, and the result, taken by the
    /// next answer in place of calling that filter again on that path.
    pub filtered: RefCell<Option<Filtered>>,
}

/// A filter's end after it waited, and which filter on which path it belongs to.
pub(crate) type Filtered = ((u64, usize, u32), Vec<u8>, handler::Filtered);

/// A route checked: the configuration's generation (a reload may give its place to
/// another route), its site and its rule.
type Route = (u64, usize, usize);

/// What one route's checks found.
#[derive(Clone, Default)]
struct Found {
    /// The password was verified: good or not.
    basic: Option<bool>,
    /// The verifier's queue was full.
    busy: bool,
    /// The forward auth upstream's answer.
    forward: Option<Outcome>,
}

impl Checked {
    /// What `found` (none: nothing) holds, with `filtered`: what is carried to the next
    /// answer after a filter waited.
    pub fn with_filtered(found: Option<&Checked>, filtered: Filtered) -> Checked {
        Checked {
            routes: found.map_or_else(Vec::new, |c| c.routes.clone()),
            filtered: RefCell::new(Some(filtered)),
        }
    }

    /// What `found` holds, with `route`'s findings (replacing its earlier ones).
    fn adding(found: &[(Route, Found)], route: Route, this: Found) -> Checked {
        let mut routes: Vec<_> = found.iter().filter(|(r, _)| *r != route).cloned().collect();
        routes.push((route, this));
        Checked {
            routes,
            filtered: RefCell::new(None),
        }
    }

    fn of(&self, route: Route) -> Option<&Found> {
        self.routes
            .iter()
            .find(|(r, _)| *r == route)
            .map(|(_, f)| f)
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
    let Some((rule, auth)) = rule.and_then(|r| Some((r, gen.auth.get(site)?.get(r)?.as_ref()?)))
    else {
        return Check::Pass(None);
    };
    let route = (gen.number, site, rule);
    let earlier = checked.map_or(&[][..], |c| &c.routes[..]);
    let found = checked.and_then(|c| c.of(route));
    let deny = |reason| {
        if let Some(metrics) = worker.metrics() {
            metrics.denied(gen.host_labels[site], reason);
        }
    };
    match basic(auth, req, (route, earlier, found)) {
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
    let outcome = match found.and_then(|f| f.forward.as_ref()) {
        Some(outcome) => outcome,
        None => return ask(worker, forward, (req, conn), (route, earlier, found)),
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

/// A route, what was found on every route so far, and on this one.
type Seen<'a> = (Route, &'a [(Route, Found)], Option<&'a Found>);

/// The route's `basic_auth` on the request's `Authorization`.
fn basic(
    auth: &RouteAuth,
    req: &wire::Request<'_, '_>,
    (route, earlier, found): Seen<'_>,
) -> Check {
    let Some(basic) = &auth.basic else {
        return Check::Pass(None);
    };
    let refuse = || {
        let mut response = Response::status_page(401);
        response.head.append(b"WWW-Authenticate", &basic.challenge);
        Check::Answer(response)
    };
    match found {
        Some(Found {
            basic: Some(good), ..
        }) => return if *good { Check::Pass(None) } else { refuse() },
        Some(Found { busy: true, .. }) => {
            let mut response = Response::status_page(503);
            response.head.append(b"Retry-After", b"1");
            return Check::Answer(response);
        }
        _ => {}
    }
    match basic.judge(req.header("authorization")) {
        Verdict::Good => Check::Pass(None),
        Verdict::Refused => refuse(),
        Verdict::Verify(pending) => {
            let earlier = earlier.to_vec();
            Check::Wait(handler::local_future(async move {
                let this = match pending.verify().await {
                    Some(good) => Found {
                        basic: Some(good),
                        ..Found::default()
                    },
                    None => Found {
                        busy: true,
                        ..Found::default()
                    },
                };
                Checked::adding(&earlier, route, this)
            }))
        }
    }
}

/// The forward auth upstream's cached answer, else a subrequest to await. What the
/// basic check found (it passed) is carried on.
fn ask(
    worker: &Worker,
    (forward, route): (&ForwardAuth, &Arc<RouteAuth>),
    (req, conn): (&wire::Request<'_, '_>, &ConnFacts),
    (route_at, earlier, found): Seen<'_>,
) -> Check {
    let key = forward.key(req);
    if let Some(copied) = forward.cached(key) {
        return Check::Pass((!copied.names.is_empty()).then_some(copied));
    }
    // What the basic check found (it passed) is kept with the answer.
    let (earlier, basic) = (earlier.to_vec(), found.and_then(|f| f.basic));
    let found = move |outcome| {
        let this = Found {
            basic,
            busy: false,
            forward: Some(outcome),
        };
        Checked::adding(&earlier, route_at, this)
    };
    let current = worker.current();
    let Some(upstreams) = current.upstreams.clone() else {
        return Check::Wait(handler::local_future(async move { found(Outcome::Failed) }));
    };
    let request = forward.request(req, (conn.client.ip(), conn.secure()));
    let call = upstreams.call(request);
    let route = route.clone();
    Check::Wait(handler::local_future(async move {
        let reply = call.await;
        let outcome = route.forward.as_ref().map(|f| f.judge(reply, key));
        found(outcome.unwrap_or(Outcome::Failed))
    }))
}
