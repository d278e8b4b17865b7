//! A request's route through the seam: its filter (a script's `access`), then its
//! handlers in turn until one answers (`handler::Service`), as the filter left the
//! request (`edited.rs`).

use handler::{Answer, Attached, Filtered, Response};

use super::edited::{Edited, Rerouted};
use crate::facts::ConnFacts;
use crate::generation::{Current, Generation};

/// The filter and handlers of a request's route: by the longest prefix of its path, or,
/// for a route its rules chose by more than its prefix (`rule`), its module's filter (else
/// the prefix's) and its handler, before the prefix's handlers (a script without
/// `content` passes to them).
pub(crate) struct Handlers<'g> {
    filter: Option<(usize, u32)>,
    chosen: Option<(usize, u32)>,
    by_prefix: &'g [(usize, u32)],
}

pub(crate) fn handlers<'g>(
    gen: &'g Generation,
    site: usize,
    path: &[u8],
    rule: Option<usize>,
) -> Option<Handlers<'g>> {
    let routes = &gen.routes[site];
    let by_prefix = match routes.is_empty() {
        true => None,
        false => routes.find(path),
    };
    let chosen = rule.and_then(|rule| gen.by_rule[site].get(&rule));
    if by_prefix.is_none() && chosen.is_none() {
        return None;
    }
    let prefix_filter = by_prefix.and_then(|r| r.filter);
    Some(Handlers {
        filter: chosen.and_then(|c| c.filter).or(prefix_filter),
        chosen: chosen.and_then(|c| c.handler),
        by_prefix: by_prefix.map_or(&[][..], |r| &r.handlers[..]),
    })
}

/// The request a route's modules are asked: its view, normalised path and connection,
/// the count of `X-Forwarded-For` items before its client, how often it has been
/// routed again, where its handler notes what the access log writes, and the id it sends on.
pub(crate) type Asked<'a> = (
    &'a wire::Request<'a, 'a>,
    &'a [u8],
    &'a ConnFacts,
    (
        Option<usize>,
        Option<Rerouted>,
        Option<&'a handler::LogNotes>,
        Option<u128>,
    ),
);

/// The route's filter, then its handlers in turn until one answers: what the filter
/// left attached to the exchange, and the answer (`None`: every handler passed). `kind`
/// becomes the metrics kind of the module that answered. A filter's edits go into
/// `edited`, and the handlers see the request as edited; when they moved it to another
/// path, no handler is called: the exchange routes it again (`rerouted` times so far).
pub(crate) fn call(
    current: &Current,
    route: Handlers<'_>,
    (req, path, conn, (forwarded_for, rerouted, notes, request_id)): Asked<'_>,
    kind: &mut u8,
    edited: &mut Option<Edited>,
) -> (Option<Box<dyn Attached>>, Option<Answer>) {
    let rerouted = rerouted.map_or(0, |r| r.times);
    let request = &mut handler::Request {
        head: req,
        path,
        client: conn.client,
        peer: conn.peer,
        proxy_tlvs: conn.proxy_tlvs(),
        forwarded_for,
        tag: 0,
        secure: conn.secure(),
        notes,
        request_id,
    };
    let mut filter = None;
    if let Some((m, tag)) = route.filter {
        request.tag = tag;
        match current.services[m].filter(request) {
            Filtered::Continue(attached) => filter = attached,
            Filtered::Edited(attached, e) => {
                (filter, *edited) = (attached, Some(Edited::new(e, request.path)))
            }
            Filtered::Answer(a) => {
                *kind = current.gen.kinds[m];
                return (filter, Some(a));
            }
        }
    }
    let handlers = route.chosen.iter().chain(route.by_prefix);
    let Some(e) = edited.as_ref() else {
        return (filter, call_handlers(current, handlers, request, kind));
    };
    if e.refused() {
        return (filter, Some(Answer::Now(Response::status_page(400))));
    }
    if e.moved() {
        // Routed again by the exchange, unless it has been too often: a loop.
        if rerouted < rules::MAX_REWRITES {
            return (filter, None);
        }
        tracing::error!(
            "a filter gave a request a new path more than {} times: answered 500",
            rules::MAX_REWRITES
        );
        return (filter, Some(Answer::Now(Response::status_page(500))));
    }
    let mut fields = Vec::new();
    let view = e.view(request.head, &mut fields);
    let path = e.path().unwrap_or(request.path);
    let request = handler::Request {
        head: &view,
        path,
        ..*request
    };
    (filter, call_handlers(current, handlers, &request, kind))
}

/// A route's handlers in turn until one answers.
fn call_handlers<'h>(
    current: &Current,
    handlers: impl Iterator<Item = &'h (usize, u32)>,
    request: &handler::Request<'_>,
    kind: &mut u8,
) -> Option<Answer> {
    for &(m, tag) in handlers {
        match current.services[m].call(&handler::Request { tag, ..*request }) {
            Answer::Pass => continue,
            a => {
                *kind = current.gen.kinds[m];
                return Some(a);
            }
        }
    }
    None
}
