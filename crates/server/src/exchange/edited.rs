//! A request as its route's filter edited it (Lua's `r:set_req_header`,
//! `r:add_req_header`, `r:set_path`, `r:set_query` in `access`): the view the handlers
//! and the static files see. It is built on the request as the rules made it
//! (`routing::edited`, `routing::view`), so the configuration's `request_headers` come
//! first and a script's edits after them. A request given another path is routed again
//! on its site (rules, prefixes, filter and handlers), as nginx's `rewrite ... last`.

use handler::EditedRequest;

use crate::routing;

pub(crate) struct Edited {
    request: EditedRequest,
    /// The new target's normalised path, when the target changed (`Some(None)`: it does
    /// not normalise, a 400).
    normal: Option<Option<Vec<u8>>>,
    /// Whether that path differs from the one the request was routed by.
    moved: bool,
}

/// A request routed again on its site, and how many times it has been.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rerouted {
    pub site: usize,
    pub times: usize,
    /// The request limits counted it already, on a route it came to before (they count
    /// a request once, as nginx's `limit_req` does).
    pub counted: bool,
    /// It is a subrequest (`tessera.location.capture`): no connection limit holds a slot
    /// for it (its maker holds one), as nginx's `limit_conn` counts main requests only.
    pub sub: bool,
}

impl Edited {
    /// The edits of a request routed by the normalised path `routed`.
    pub(crate) fn new(request: EditedRequest, routed: &[u8]) -> Edited {
        let normal = request.target().map(|t| {
            let raw = memchr::memchr(b'?', t).map_or(t, |q| &t[..q]);
            let mut path = Vec::new();
            wire::normalize_path(raw, &mut path).ok().map(|_| path)
        });
        let moved = matches!(&normal, Some(Some(p)) if p[..] != *routed);
        Edited {
            request,
            normal,
            moved,
        }
    }

    /// Whether the request has another path to be routed by.
    pub(crate) fn moved(&self) -> bool {
        self.moved
    }

    /// Whether the new target's path does not normalise (`/../x`): answered 400.
    pub(crate) fn refused(&self) -> bool {
        matches!(self.normal, Some(None))
    }

    /// The normalised path of the new target, when it changed.
    pub(crate) fn path(&self) -> Option<&[u8]> {
        self.normal.as_ref().and_then(|n| n.as_deref())
    }

    /// `req` as edited; its fields, when they changed, go into `fields`.
    pub(crate) fn view<'a>(
        &'a self,
        req: &wire::Request<'a, 'a>,
        fields: &'a mut Vec<wire::Header<'a>>,
    ) -> wire::Request<'a, 'a> {
        let headers = self.request.fields().map(|all| {
            fields.clear();
            // Names are checked to be tokens where they are set: ASCII.
            fields.extend(all.filter_map(|(name, value)| {
                let name = std::str::from_utf8(name).ok()?;
                Some(wire::Header { name, value })
            }));
            &fields[..]
        });
        routing::edited(req, self.request.target(), headers)
            .unwrap_or_else(|| routing::view(req, None, req.headers))
    }
}

/// The request the files and the exchange see after the filter's edits, if it made any
/// (its fields into `fields`); `path`, the normalised path, becomes the new one.
pub(crate) fn apply<'a>(
    edited: Option<&'a Edited>,
    req: &wire::Request<'a, 'a>,
    fields: &'a mut Vec<wire::Header<'a>>,
    path: &mut Vec<u8>,
) -> Option<wire::Request<'a, 'a>> {
    let edited = edited?;
    if let Some(new) = edited.path() {
        path.clear();
        path.extend_from_slice(new);
    }
    Some(edited.view(req, fields))
}

/// When the request must be routed again: its filter moved it and nothing answered it
/// (the route's handlers were not called).
pub(crate) fn again(
    edited: Option<&Edited>,
    unanswered: bool,
    site: usize,
    rerouted: Option<Rerouted>,
) -> Option<Rerouted> {
    let moved = edited.is_some_and(Edited::moved) && unanswered;
    moved.then(|| Rerouted {
        site,
        times: rerouted.map_or(0, |r| r.times) + 1,
        counted: rerouted.is_some_and(|r| r.counted),
        sub: rerouted.is_some_and(|r| r.sub),
    })
}
