//! A response filter (response edits, a script's `header_filter`) run on a response
//! that is not yet encoded.

use handler::{Attached, Filter, Response};

/// Runs the route's filter on a response not yet encoded; a filter that fails makes an
/// unframed response a 500.
pub(crate) fn filter_response(filter: &mut dyn Attached, response: &mut Response) {
    let framed = response.framed();
    if filter.response(&mut response.head, framed) == Filter::Failed && !framed {
        *response = Response::status_page(500);
    }
}
