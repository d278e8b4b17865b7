//! A response filter (response edits, a script's `header_filter` and `body_filter`) run
//! on a response that is not yet encoded.

use handler::{Answer, Attached, Body, Filter, Response};

use crate::files;
use crate::sites::Site;
use crate::worker::Worker;

/// Runs the route's filter on a response not yet encoded; a filter that fails makes an
/// unframed response a 500. A filter of the body (a script's `body_filter`) then takes
/// the body as it goes: decoded first when an upstream sent it encoded (the filter sees
/// identity bytes; compression runs after it), its length dropped (the filter may change
/// it), so that the connection frames it anew.
pub(crate) fn filter_response(filter: &mut dyn Attached, response: &mut Response) {
    let framed = response.framed();
    if filter.response(&mut response.head, framed) == Filter::Failed {
        if !framed {
            *response = Response::status_page(500);
        }
        return;
    }
    if wire::bodiless(response.head.status()) {
        return;
    }
    if let Some(body_filter) = filter.body_filter() {
        compress::decode_response(response);
        response.head.remove(b"content-length");
        let body = std::mem::replace(&mut response.body, Body::Empty);
        response.body = body.filtered(body_filter);
    }
}

/// What the static files answer for a route whose filter rewrites bodies: a file's
/// response made for the filter ([`files::filtered`]) in place of the files' own
/// answer, when there is one. Everything else is kept. In place: the answer (152 bytes)
/// taken and given back by value was two `memmove` calls on every request.
pub(crate) fn files_for_body_filter(
    answer: &mut Option<Answer>,
    filter: Option<&&mut dyn Attached>,
    (req, path): (&wire::Request<'_, '_>, Option<&[u8]>),
    worker: &Worker,
    site: &Site,
) {
    let by_files = matches!(answer, None | Some(Answer::Pass | Answer::Files));
    if by_files && filter.is_some_and(|f| f.filters_body()) {
        if let Some(response) = files::filtered(req, path, worker, site) {
            *answer = Some(Answer::Now(response));
        }
    }
}
