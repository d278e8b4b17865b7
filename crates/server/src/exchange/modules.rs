//! A request's route through the seam: its filter (a script's `access`), then its
//! handlers in turn until one answers (`handler::Service`), as the filter left the
//! request (`edited.rs`).

use handler::{Answer, Attached, Filtered, LocalFuture, Response};

use super::checks::Checked;
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
/// the count of `X-Forwarded-For` items before its client, how often it has been routed
/// again, what its checks found when it waited on them (its filter's end among it), where
/// its handler notes what the access log writes, the id it sends on, and its trace context.
pub(crate) type Asked<'a> = (
    &'a wire::Request<'a, 'a>,
    &'a [u8],
    &'a ConnFacts,
    (
        (
            Option<usize>,
            Option<Rerouted>,
            Option<&'a Checked>,
            (Option<&'a handler::LogNotes>, Option<u128>),
        ),
        Option<trace::Context>,
    ),
);

/// What the route's filter left attached to the exchange and the answer, or the filter's
/// wait (`Err`) to await before the request is answered again.
type Called = Result<(Option<Box<dyn Attached>>, Option<Answer>), LocalFuture<Checked>>;

/// The route's filter, then its handlers in turn until one answers: what the filter
/// left attached to the exchange, and the answer (`None`: every handler passed). `kind`
/// becomes the metrics kind of the module that answered. A filter's edits go into
/// `edited`, and the handlers see the request as edited; when they moved it to another
/// path, no handler is called: the exchange routes it again (`rerouted` times so far).
pub(crate) fn call(
    current: &Current,
    route: Handlers<'_>,
    (req, path, conn, ((forwarded_for, rerouted, checked, (notes, request_id)), trace)): Asked<'_>,
    kind: &mut u8,
    edited: &mut Option<Edited>,
) -> Called {
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
        trace,
    };
    let mut filter = None;
    if let Some((m, tag)) = route.filter {
        request.tag = tag;
        // A filter that waited on this path ended with this: it is not called again.
        let waited = checked.and_then(|c| {
            let mut filtered = c.filtered.borrow_mut();
            let filter = (current.gen.number, m, tag);
            let ours = matches!(&*filtered, Some((f, p, _)) if *f == filter && p[..] == *path);
            ours.then(|| filtered.take().map(|(_, _, f)| f)).flatten()
        });
        match waited.unwrap_or_else(|| current.services[m].filter(request)) {
            Filtered::Continue(attached) => filter = attached,
            Filtered::Edited(attached, e) => {
                (filter, *edited) = (attached, Some(Edited::new(e, request.path)))
            }
            Filtered::Answer(a) => {
                *kind = current.gen.kinds[m];
                return Ok((filter, Some(a)));
            }
            Filtered::Later(waiting) => {
                let filter = (current.gen.number, m, tag);
                return Err(wait(waiting, (filter, path), checked));
            }
        }
    }
    let handlers = route.chosen.iter().chain(route.by_prefix);
    let Some(e) = edited.as_ref() else {
        return Ok((filter, call_handlers(current, handlers, request, kind)));
    };
    if e.refused() {
        return Ok((filter, Some(Answer::Now(Response::status_page(400)))));
    }
    if e.moved() {
        // Routed again by the exchange, unless it has been too often: a loop.
        if rerouted < rules::MAX_REWRITES {
            return Ok((filter, None));
        }
        tracing::error!(
            "a filter gave a request a new path more than {} times: answered 500",
            rules::MAX_REWRITES
        );
        return Ok((filter, Some(Answer::Now(Response::status_page(500)))));
    }
    let mut fields = Vec::new();
    let view = e.view(request.head, &mut fields);
    let path = e.path().unwrap_or(request.path);
    let request = handler::Request {
        head: &view,
        path,
        ..*request
    };
    Ok((filter, call_handlers(current, handlers, &request, kind)))
}

/// A filter's wait, as the exchange's: what it ends with goes into what the checks found
/// so far (`checked`), for the request's next answer. A filter that would wait again is
/// a 500 (a filter waits once).
fn wait(
    waiting: LocalFuture<Filtered>,
    (filter, path): ((u64, usize, u32), &[u8]),
    checked: Option<&Checked>,
) -> LocalFuture<Checked> {
    let held = (filter, path.to_vec(), Filtered::Continue(None));
    let mut found = Checked::with_filtered(checked, held);
    handler::local_future(async move {
        let filtered = match waiting.await {
            Filtered::Later(_) => {
                tracing::error!("a request filter waited twice: answered 500");
                Filtered::Answer(Answer::Now(Response::status_page(500)))
            }
            filtered => filtered,
        };
        if let Some((_, _, end)) = found.filtered.get_mut() {
            *end = filtered;
        }
        found
    })
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
