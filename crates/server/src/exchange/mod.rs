//! Where a request meets the seam (`handler`): routed once on its normalised path, its
//! route's filter and handlers called through the `handler` traits (the modules `cli`
//! built: the proxy, Lua scripts), the static files answering what no handler takes.
//! A response ready now goes into the connection's output batch; one that waits becomes
//! an [`Exchange`] the connection finishes after a flush.

pub(crate) mod access;
mod admit;
mod challenge;
pub(crate) mod checks;
pub(crate) mod edited;
pub(crate) mod filter;
pub(crate) mod finish;
pub(crate) mod kept_head;
mod limited;
mod marks;
pub(crate) mod modules;
pub(crate) mod pages;
pub(crate) mod served;
pub(crate) mod subrequest;
pub(crate) mod tunnel;

use compress::HeadPolicy;
use handler::{Answer, Attached, Body, Filter, Pooled, Response, ResponseHead};
use wire::{BodyFraming, Framing, Version};

use crate::facts::ConnFacts;
use crate::files;
use crate::generation::Generation;
use crate::metrics::{self, Answered};
use crate::net::output::{Mark, Output};
use crate::reply;
use crate::routing;
use crate::worker::{Recycled, Worker};
use admit::{admit, copy_fields};
use edited::Rerouted;
use filter::filter_response;
use marks::{marks, sent};
use pages::{error_page, Again, Pages};

pub(crate) use checks::Checked;

/// A request whose response comes after the batch is flushed: a handler that waits (its
/// [`handler::Deferred`]) or a response too large for the batch. It holds what the
/// connection needs once the request's bytes have left the read buffer.
pub(crate) struct Exchange {
    pub work: Work,
    /// The route's filter, to see the response head; dropping it ends its exchange.
    pub filter: Option<Box<dyn Attached>>,
    pub framing: BodyFraming,
    pub expect_continue: bool,
    pub keep_alive: bool,
    pub head_only: bool,
    pub version: Version,
    /// The request head as received, for the access log (empty without one).
    pub raw_head: crate::reply::HeadBuf,
    /// Who answered, for metrics.
    pub answered: Answered,
    /// The route's error pages (`error_page`), when it or its host has any.
    pub pages: Option<Pages>,
    /// The request as it would go again to an upstream an error page names.
    pub again: Option<pages::Again>,
    /// The site that answers, and what the request's Accept-Encoding allows, for the
    /// compression filter.
    pub site: usize,
    pub accepted: compress::Accepted,
    /// Its place among the requests of its key in flight (`limit_conn`), given back
    /// when the exchange ends.
    pub held: Option<crate::limit::Held>,
    /// What the handler notes for the access log, when the site's log writes it.
    pub notes: Option<handler::LogNotes>,
}

impl Exchange {
    /// Whether its response may be added to the connection's output batch instead of
    /// being written on its own: a handler's response to a request without a body, on a
    /// connection that stays open (its size is known only once it comes).
    pub(crate) fn may_join_batch(&self) -> bool {
        matches!(self.work, Work::Deferred(_))
            && self.framing == BodyFraming::None
            && self.keep_alive
    }
}

pub(crate) enum Work {
    /// Read the request body, then await the handler's response.
    Deferred(handler::Later),
    /// The response is ready (its body too large for the batch); the request body, if
    /// any, is skipped.
    Ready(Response),
}

/// What [`answer`] did with a request.
pub(crate) enum Dispatched {
    /// The response is in the output batch (the connection skips the request body).
    Done(Answered),
    /// The connection flushes, then finishes this.
    Later(Pooled<Exchange>),
    /// A check of the request waits (`checks.rs`): the connection awaits this, then
    /// answers the same request again with what it found.
    Wait(handler::LocalFuture<Checked>),
}

/// Responses larger than this are written on their own, not into the output batch, whose
/// buffer is sized for heads and small bodies and would otherwise grow for good.
pub(crate) const MAX_BATCHED_BODY: usize = 16 * 1024;

/// A request of an HTTP/2 or HTTP/3 stream, whose head the stream's view checked:
/// refused with `refusal`'s status (counted, answered with the server's own page) when
/// it broke a rule, else [`answer`]ed.
pub(crate) fn answer_stream(
    worker: &Worker,
    conn: &ConnFacts,
    (req, refusal): (&wire::Request<'_, '_>, Option<wire::Error>),
    checked: Option<&Checked>,
    out: &mut Output,
) -> Dispatched {
    let Some(e) = refusal else {
        return answer(worker, conn, req, (true, checked), out, &[]);
    };
    worker.refused(conn.peer, e);
    crate::reply::simple(worker, conn, out, req, true, e.status(), &[]);
    let current = worker.current();
    let site = current.gen.sites.hosts.select(req);
    Dispatched::Done(crate::metrics::Answered {
        host: current.gen.host_labels[site],
        kind: crate::metrics::kind_index("static"),
        method: crate::metrics::method_index(req.method),
        request_id: None,
        route: None,
        trace: None,
    })
}

/// Answers one parsed request: route, checks, filter, handlers, static files. `pending`
/// is the read buffer from the request's first byte (its head is copied for the access
/// log of a response that comes later). `checked`: what the checks that waited found,
/// when the request is answered again after [`Dispatched::Wait`].
pub(crate) fn answer(
    worker: &Worker,
    conn: &ConnFacts,
    req: &wire::Request<'_, '_>,
    (keep_alive, checked): (bool, Option<&Checked>),
    out: &mut Output,
    pending: &[u8],
) -> Dispatched {
    // Before the site is chosen: no route, redirect or limit stands in its way.
    if challenge::answer(worker, conn, req, keep_alive, out) {
        let gen = &worker.current().gen;
        let site = gen.sites.hosts.select(req);
        return Dispatched::Done(by_files(gen, site, req, (None, None, None)));
    }
    let at = (pending, None, checked);
    answer_in(worker, conn, req, keep_alive, out, at)
}

/// [`answer`], or, with `rerouted`, the same request routed again on its site after its
/// route's filter gave it another path (`edited.rs`).
fn answer_in(
    worker: &Worker,
    conn: &ConnFacts,
    req: &wire::Request<'_, '_>,
    keep_alive: bool,
    out: &mut Output,
    (pending, mut rerouted, checked): (&[u8], Option<Rerouted>, Option<&Checked>),
) -> Dispatched {
    let raw = memchr::memchr(b'?', req.path).map_or(req.path, |q| &req.path[..q]);
    // As parsed from `pending`, for the log (`req` is shadowed below by edited views).
    let parsed = req;
    let (current, received) = (worker.current(), conn);
    let gen = &current.gen;
    let chosen = || choose_site(worker, conn, gen, req, keep_alive, out);
    let site = match rerouted.map_or_else(chosen, |r| Ok(r.site)) {
        Ok(site) => site,
        Err(site) => return Dispatched::Done(by_files(gen, site, req, (None, None, None))),
    };
    let (by_field, forwarded_for) = named_client(gen, site, conn, req);
    let conn = by_field.as_ref().unwrap_or(conn);
    let (mut path, normal) = normalized(worker, raw);
    let (id, notes, trace) = marks(gen, site, conn, req); // each only when used
    let mut decided = decide(worker, conn, (gen, site), req, (normal, id), &mut path);
    let seen = (&mut decided, &path[..], &mut rerouted); // limits, access checks
    let (held, copied) = match admit(worker, conn, (gen, site), req, checked, seen) {
        Ok(admitted) => admitted,
        Err(wait) => return Dispatched::Wait(wait),
    };
    let (mut auth_fields, mut fields) = (Vec::new(), Vec::new());
    let auth_view = copy_fields(req, copied.as_ref(), &mut auth_fields);
    let req = auth_view.as_ref().unwrap_or(req);
    let rule = decided.rule.map(|rule| (site as u16, rule as u16));
    let files_answered = by_files(gen, site, req, (id, rule, trace));
    let mut headers = Recycled::headers(worker);
    let edits = (decided.request_edits.as_ref(), decided.target.as_deref());
    let view = request_view(&gen.rules[site], req, edits, &mut headers.list);
    let req = view.as_ref().unwrap_or(req);
    let routed = match normal && decided.response.is_none() && !decided.files {
        true => modules::handlers(gen, site, &path, decided.rule),
        false => None,
    };
    let (mut answered, mut edited) = (files_answered, None);
    let (filter, mut answer) = match (decided.response, routed) {
        (Some(response), _) => (None, Some(Answer::Now(response))),
        (None, Some(route)) => {
            let id = sent(gen, site, id, decided.request_edits.as_ref());
            let marks = (forwarded_for, rerouted, checked, (notes.as_ref(), id));
            let asked = (req, &path[..], conn, (marks, trace));
            match modules::call(&current, route, asked, &mut answered.kind, &mut edited) {
                Ok(called) => called,
                Err(wait) => return Dispatched::Wait(wait),
            }
        }
        (None, None) => (None, None),
    };
    let edited_view = edited::apply(edited.as_ref(), req, &mut fields, &mut path);
    let req = edited_view.as_ref().unwrap_or(req);
    if let Some(again) = edited::again(edited.as_ref(), answer.is_none(), site, rerouted) {
        drop((path, filter));
        let at = (pending, Some(again), checked);
        return answer_in(worker, received, req, keep_alive, out, at);
    }
    // The response edits run first, then the route's filter (a script's header_filter);
    // boxed only for a response that comes later.
    let (mut edits, mut filter) = chain(decided.edits, filter);
    let edits_alone = edits.as_ref().is_some_and(routing::EditFilter::alone);
    // Edits a file's head takes as it is written (HTTP/1), not after.
    let as_written = edits.as_ref().and_then(routing::EditFilter::as_written);
    let filters = first(&mut edits, &mut filter);
    let root = gen.sites.serving(site, decided.alias);
    let asked = (req, normal.then_some(&path[..]));
    filter::files_for_body_filter(&mut answer, filters.as_ref(), asked, worker, root);
    let pages = Pages::of(gen, site, decided.rule, conn);
    let fallback = pages.as_ref().filter(|p| p.any_fallback());
    let later = |work, filter| {
        Dispatched::Later(Pooled::new(Exchange {
            work,
            filter,
            framing: req.body,
            expect_continue: req.expect_continue,
            keep_alive,
            head_only: req.method == wire::Method::Head,
            version: req.version,
            raw_head: raw_head(worker, pending, parsed),
            answered,
            again: fallback.map(|_| Again::of(req)),
            pages: pages.clone(),
            site,
            accepted: accepted(req),
            held: held.take(),
            notes: notes.clone(),
        }))
    };
    match answer {
        None | Some(Answer::Pass) | Some(Answer::Files) => {
            let mark = out.mark();
            continue_first(req, pending, out);
            out.edits = as_written.map(|rule| (site, rule));
            files::respond(req, asked.1, worker, conn, root, out, keep_alive);
            let edited = std::mem::take(&mut out.edited);
            out.edits = None;
            let mut filters = filters;
            match error_page(worker, (out, mark), pages.as_ref(), &mut filters, req) {
                Some(Ok(page)) => {
                    let terms = terms(req, keep_alive);
                    return match batch(worker, conn, (site, accepted(req)), out, page, terms) {
                        None => Dispatched::Done(files_answered),
                        Some(page) => later(Work::Ready(page), boxed(edits, filter)),
                    };
                }
                Some(Err(again)) => {
                    return fallen_back(later(Work::Deferred(again), boxed(edits, filter)))
                }
                None => {}
            }
            if edited {
                // Taken as it was written.
            } else if edits_alone && out.fields().is_none() {
                if let Some(edits) = &edits {
                    edit_written(edits, out, mark);
                }
            } else if let Some(filters) = filters {
                filter_written(filters, out, mark);
            }
            Dispatched::Done(files_answered)
        }
        Some(Answer::Later(deferred)) => later(Work::Deferred(deferred), boxed(edits, filter)),
        Some(Answer::Now(mut response)) => {
            let status = response.head.status();
            if let Some(Answer::Later(again)) = pages::fallback(worker, pages.as_ref(), status, req)
            {
                return fallen_back(later(Work::Deferred(again), boxed(edits, filter)));
            }
            if let Some(pages) = &pages {
                pages.replace(worker, &mut response);
            }
            if let Some(f) = filters {
                filter_response(f, &mut response);
            }
            let terms = terms(req, keep_alive);
            match batch(worker, conn, (site, accepted(req)), out, response, terms) {
                None => Dispatched::Done(answered),
                // Filtered already: only its end (a script's log phase) is left.
                Some(response) => later(Work::Ready(response), boxed(edits, filter)),
            }
        }
    }
}

/// The filter that sees a response first: the response edits (which run the route's
/// filter after them), else the route's filter.
fn first<'a>(
    edits: &'a mut Option<routing::EditFilter>,
    filter: &'a mut Option<Box<dyn Attached>>,
) -> Option<&'a mut dyn Attached> {
    match (edits, filter) {
        (Some(edits), _) => Some(edits),
        (None, Some(filter)) => Some(&mut **filter),
        (None, None) => None,
    }
}

/// The request head as received, for the access log of a response that comes later:
/// only the access log reads it, so no copy without one.
fn raw_head(worker: &Worker, pending: &[u8], req: &wire::Request<'_, '_>) -> crate::reply::HeadBuf {
    match worker.log.borrow().is_some() {
        true => kept_head::keep(req, pending),
        false => crate::reply::HeadBuf::none(),
    }
}

/// An error sent again to an upstream (`@upstream:NAME`): its answer is not replaced in
/// turn, whatever its status (nor sent again when it fails), as nginx without
/// `recursive_error_pages`.
fn fallen_back(mut dispatched: Dispatched) -> Dispatched {
    if let Dispatched::Later(exchange) = &mut dispatched {
        exchange.pages = None;
        exchange.again = None;
    }
    dispatched
}

/// A request answered by the static files (or the server itself) on `site`, for the
/// metrics and the log.
fn by_files(
    gen: &Generation,
    site: usize,
    req: &wire::Request<'_, '_>,
    (request_id, route, trace): (Option<u128>, Option<(u16, u16)>, Option<trace::Context>),
) -> Answered {
    Answered {
        host: gen.host_labels[site],
        kind: metrics::kind_index("static"),
        method: metrics::method_index(req.method),
        request_id,
        route,
        trace,
    }
}

/// Compresses a handler's response ready now and adds it to the output batch; gives it
/// back when it goes out on its own instead: a large body, or HTTP/2 (an output that
/// takes fields), which frames a handler's head from its fields.
fn batch(
    worker: &Worker,
    conn: &ConnFacts,
    (site, accepted): (usize, compress::Accepted),
    out: &mut Output,
    mut response: Response,
    terms: reply::Terms,
) -> Option<Response> {
    compress(worker, site, accepted, terms.head_only, &mut response);
    let small = match &response.body {
        Body::Empty => true,
        Body::Full(b) => b.len() <= MAX_BATCHED_BODY,
        _ => false,
    };
    if !small || out.fields().is_some() {
        return Some(response);
    }
    let buf = out.buf();
    let reply::Terms {
        head_only,
        version,
        keep_alive,
    } = terms;
    let framing = write_head(worker, conn, buf, &response, head_only, version, keep_alive);
    if let (Body::Full(body), false) = (&response.body, framing.is_none()) {
        buf.extend_from_slice(body);
    }
    None
}

/// How a request's response is framed.
fn terms(req: &wire::Request<'_, '_>, keep_alive: bool) -> reply::Terms {
    reply::Terms {
        head_only: req.method == wire::Method::Head,
        version: req.version,
        keep_alive,
    }
}

/// The response edits with the route's filter after them, when there are edits; else
/// the route's filter alone.
fn chain(
    edits: Option<routing::EditFilter>,
    filter: Option<Box<dyn Attached>>,
) -> (Option<routing::EditFilter>, Option<Box<dyn Attached>>) {
    match edits {
        Some(mut edits) => {
            edits.inner = filter;
            (Some(edits), None)
        }
        None => (None, filter),
    }
}

/// The response edits and the route's filter as the one filter a response that comes
/// later carries.
fn boxed(
    edits: Option<routing::EditFilter>,
    filter: Option<Box<dyn Attached>>,
) -> Option<Box<dyn Attached>> {
    match edits {
        Some(edits) => Some(Box::new(edits)),
        None => filter,
    }
}

/// `req` as its rules made it (`None`: unchanged): the target they rewrote it to, the
/// fields its route's `request_headers` made (into `list`).
fn request_view<'l, 't: 'l>(
    table: &'t rules::Table,
    req: &'l wire::Request<'t, 't>,
    (edits, target): (Option<&'t routing::RequestEdits>, Option<&'l [u8]>),
    list: &'l mut Vec<wire::Header<'t>>,
) -> Option<wire::Request<'l, 'l>> {
    let headers = match edits {
        Some(edits) => {
            routing::edit_request(table, edits, req.headers, list);
            Some(&list[..])
        }
        None => None,
    };
    routing::edited(req, target, headers)
}

/// Who the client is, when the site believes a trusted proxy's forwarding field: the
/// facts of this request with that client, and, for `X-Forwarded-For`, how many of its
/// items lie before the client's (`handler::Request::forwarded_for`). A site that reads
/// no field costs one test.
fn named_client(
    gen: &Generation,
    site: usize,
    conn: &ConnFacts,
    req: &wire::Request<'_, '_>,
) -> (Option<ConnFacts>, Option<usize>) {
    if !gen.reads_fields {
        return (None, None);
    }
    let identity = &gen.identity[site];
    let Some(found) = identity.of_request(conn, req) else {
        return (None, None);
    };
    let facts = ConnFacts {
        client: found.addr,
        ..conn.clone()
    };
    let before = identity.reads_x_forwarded_for().then_some(found.before);
    (Some(facts), before)
}

/// The one normalisation of the path, into the worker's path buffer, and whether it
/// normalised. Routes match the normalised path (`/%61pi`, `//api` and `/x/../api` are
/// `/api`), the form files are found by, so no spelling of a path reaches a file or an
/// upstream past the filter that guards its prefix. A path that does not normalise goes
/// to the static files, which answer 400.
fn normalized<'w>(worker: &'w Worker, raw: &[u8]) -> (crate::worker::PathBuf<'w>, bool) {
    let mut path = worker.path_buf();
    let normal = wire::normalize_path(raw, &mut path).is_ok();
    (path, normal)
}

/// What the site's rules decide for a request whose path normalised (into `path`): its
/// matchers, actions and edits, first; a site without any costs one test.
fn decide(
    worker: &Worker,
    conn: &ConnFacts,
    (gen, site): (&Generation, usize),
    req: &wire::Request<'_, '_>,
    (normal, request_id): (bool, Option<u128>),
    path: &mut Vec<u8>,
) -> routing::Decided {
    let table = &gen.rules[site];
    if !normal || table.is_empty() {
        return routing::Decided::default();
    }
    let files = &gen.sites.all()[site];
    let exists = |p: &[u8]| files::exists(p, worker, files);
    let seen = routing::Seen {
        req,
        client: (conn.client, conn.secure()),
        exists: &exists,
        request_id,
    };
    routing::route(table, seen, path)
}

/// The site that answers a request: on TLS the one the SNI chose (and its certificate);
/// a request for another configured host is misdirected (RFC 9110 section 15.5.20),
/// one that names none is the SNI's site's; without SNI, every request is the default
/// site's. `Err(site)` when the request is answered here already (a redirect to HTTPS
/// or a 421), with the site it is counted for.
fn choose_site(
    worker: &Worker,
    conn: &ConnFacts,
    gen: &Generation,
    req: &wire::Request<'_, '_>,
    keep_alive: bool,
    out: &mut Output,
) -> Result<usize, usize> {
    let hosts = &gen.sites.hosts;
    let config = &gen.config;
    match &conn.tls {
        // Without a TLS listener of its own, TLS ends in front of this server: the
        // proxy there says which requests came over it.
        None if config.tls.redirect_https
            && !(config.tls_listen.is_empty() && forwarded_https(req)) =>
        {
            let port = config.tls.redirect_https_port.unwrap_or_else(|| {
                let first = config.tls_listen.first().map(|a| a.port());
                // The bound port (port 0 is a free one chosen at start).
                worker.shared.https_port.or(first).unwrap_or(443)
            });
            redirect_https(worker, conn, req, port, keep_alive, out);
            Err(hosts.select(req))
        }
        None => Ok(hosts.select(req)),
        Some(tls) if tls.sni.is_none() => Ok(tls.site as usize),
        Some(tls) => match hosts.select_named(req) {
            Some(named) if named != tls.site as usize => {
                reply::simple(worker, conn, out, req, keep_alive, 421, &[]);
                Err(tls.site as usize)
            }
            _ => Ok(tls.site as usize),
        },
    }
}

/// Whether the request's `X-Forwarded-Proto` (its first value, when a chain of proxies
/// listed several) is `https`.
fn forwarded_https(req: &wire::Request<'_, '_>) -> bool {
    req.header("x-forwarded-proto").is_some_and(|v| {
        let first = v.split(|&b| b == b',').next().unwrap_or_default();
        first.trim_ascii().eq_ignore_ascii_case(b"https")
    })
}

/// 308 to the same target on https, at `port` (`[tls] redirect_https`). The host is the
/// request's (without its port); a request without one, or with one too long to be a
/// name, is refused (400).
fn redirect_https(
    worker: &Worker,
    conn: &ConnFacts,
    req: &wire::Request<'_, '_>,
    port: u16,
    keep_alive: bool,
    out: &mut Output,
) {
    let host = req
        .header("host")
        .map(|h| match h.iter().rposition(|&b| b == b':') {
            Some(colon) if !h.ends_with(b"]") => &h[..colon],
            _ => h,
        });
    let is_name = |h: &&[u8]| {
        !h.is_empty()
            && h.len() <= 255
            && h.iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
    };
    let Some(host) = host.filter(is_name) else {
        reply::simple(worker, conn, out, req, keep_alive, 400, &[]);
        return;
    };
    // The Location, built in the worker's reused C-path buffer (no allocation; no file
    // is opened meanwhile).
    let mut location = worker.cpath.borrow_mut();
    location.clear();
    location.extend_from_slice(b"https://");
    location.extend_from_slice(host);
    if port != 443 {
        location.push(b':');
        wire::write_decimal(&mut location, port as u64);
    }
    location.extend_from_slice(if req.target.starts_with(b"/") {
        req.target
    } else {
        b"/"
    });
    let mut head = reply::HeadWriter::start(worker, conn, out, 308);
    head.field(b"Location", &location);
    head.end(wire::Framing::Length(0), req.version, keep_alive);
}

/// What a request's Accept-Encoding allows (read without allocating).
fn accepted(req: &wire::Request<'_, '_>) -> compress::Accepted {
    compress::Accepted::parse(req.header("accept-encoding"))
}

/// The compression body filter on a handler's response, per its route's
/// `[route.compression]` or else its site's `[compression]` (after the route's response
/// filter, so a Lua `header_filter` sees the identity head).
pub(crate) fn compress(
    worker: &Worker,
    site: usize,
    accepted: compress::Accepted,
    head_only: bool,
    response: &mut Response,
) {
    // A route's own `[route.compression]`, set on the head by the module that answered.
    if let Some(policy) = response.head.compression() {
        compress::compress_response(&policy, accepted, head_only, response);
        return;
    }
    // The site of the configuration the request was routed with, or, after a reload
    // since, the one now at that index (the policy is looked up once per response).
    let current = worker.current.borrow().clone();
    if let Some(policy) = current
        .gen
        .sites
        .all()
        .get(site)
        .and_then(|s| s.compression.as_ref())
    {
        compress::compress_response(policy, accepted, head_only, response);
    }
}

/// Before the static files answer a request whose body they will skip: `100 Continue`,
/// which a client that sent `Expect: 100-continue` (and no body yet) waits for.
fn continue_first(req: &wire::Request<'_, '_>, pending: &[u8], out: &mut Output) {
    if req.expect_continue && pending.len() == req.head_len {
        out.buf().extend_from_slice(wire::CONTINUE);
    }
}

/// What a deferred handler answered, as either protocol sends it: through the route's
/// filter and the compression filter, or the server's status page for its error status
/// (either replaced by the site's error page for it, when it has one).
pub(crate) fn handled(
    worker: &Worker,
    answer: Result<Response, u16>,
    (filter, pages): (&mut Option<Box<dyn Attached>>, Option<&Pages>),
    site: usize,
    accepted: compress::Accepted,
    head_only: bool,
) -> Response {
    // One response, changed in place from here on: the matches this replaced moved it
    // (152 bytes) three times on every request answered later (perf's `memmove`).
    let (mut response, compressed) = match (answer, pages) {
        (Ok(mut response), pages) => {
            if let Some(pages) = pages {
                pages.replace(worker, &mut response);
            }
            (response, true)
        }
        (Err(status), Some(pages)) => {
            let page = pages.page(worker, status);
            (page.unwrap_or_else(|| Response::status_page(status)), true)
        }
        // The server's own page for the handler's failure (a 502): the filter sees it too
        // (response edits with `always`, a script's header_filter), as nginx's error
        // pages; it is not compressed.
        (Err(status), None) => (Response::status_page(status), false),
    };
    if let Some(filter) = filter.as_deref_mut() {
        filter_response(filter, &mut response);
    }
    if compressed {
        compress(worker, site, accepted, head_only, &mut response);
    }
    response
}

/// Writes the head of a response a handler returned: status line, Server and Date for
/// a response made here, its fields (and Date after a relayed response's fields when it
/// has none), the framing. Returns the
/// framing, or `None` when no content follows (HEAD, 1xx, 204, 304).
pub(crate) fn write_head(
    worker: &Worker,
    conn: &ConnFacts,
    buf: &mut Vec<u8>,
    response: &Response,
    head_only: bool,
    version: Version,
    keep_alive: bool,
) -> Option<Framing> {
    let head = &response.head;
    let status = head.status();
    if response.relayed {
        wire::write_status_line(buf, status);
        head.write_fields_h1(buf);
        if !head.has_date() {
            worker.clock.write_date(buf);
        }
        if head.get(b"strict-transport-security").is_none() {
            reply::hsts(worker, conn, buf);
        }
        if head.get(b"alt-svc").is_none() {
            reply::write_alt_svc(worker, conn, buf);
        }
    } else {
        reply::start_head(worker, conn, buf, status);
        head.write_fields_h1(buf);
    }
    let (framing, content) = framing(response, head_only);
    wire::write_framing(buf, framing, version, keep_alive);
    content.then_some(framing)
}

/// How a handler's response is framed, whatever the protocol, and whether content
/// follows its head (not for HEAD, 1xx, 204, 304).
pub(crate) fn framing(response: &Response, head_only: bool) -> (Framing, bool) {
    let head = &response.head;
    let status = head.status();
    let no_body = wire::no_body(head_only, status);
    let framing = match response.body.length() {
        // No content follows. A relayed HEAD (or 304) answer keeps the length the
        // upstream declared; one made here declares the length its GET would have.
        _ if no_body && response.relayed => head
            .get(b"content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .map_or(Framing::None, Framing::Length),
        Some(length) if !wire::bodiless(status) => Framing::Length(length),
        _ if no_body => Framing::None,
        Some(length) => Framing::Length(length),
        None => Framing::Chunked,
    };
    (framing, !no_body)
}

/// Runs a filter on a static response already written since `mark`, rewriting its head
/// when the filter changed something. The file handler writes its heads as bytes (its
/// cached heads are pre-encoded, so the hot path copies them whole); this is the one
/// place such a head is read back, and only under a filter. Date, Server and the
/// framing stay as they were.
fn filter_written(filter: &mut dyn Attached, out: &mut Output, mark: Mark) {
    if let Some(fields) = out.fields_mut() {
        filter_fields(filter, fields.head_mut());
        return;
    }
    // Recycled buffers and head: no allocation in the steady state (response edits on
    // every file of a site go through here).
    let mut written = reply::HeadBuf::take();
    let (at, head) = out.head_since(mark);
    written.extend_from_slice(head);
    let Some((status, fields)) = parse_head(&written) else {
        return;
    };
    let kept = |name: &[u8]| {
        wire::is_framing_field(name)
            || name.eq_ignore_ascii_case(b"date")
            || name.eq_ignore_ascii_case(b"server")
    };
    let mut head = ResponseHead::with_capacity(status, 12, 320);
    for (name, value) in fields.clone().filter(|(n, _)| !kept(n)) {
        head.append(name, value);
    }
    if filter.response(&mut head, true) == Filter::Failed {
        // The body is already queued: keep the response as the file handler wrote it.
        return;
    }
    let mut new_head = reply::HeadBuf::take();
    wire::write_status_line(&mut new_head, head.status());
    let kept_fields = || fields.clone().filter(|(n, _)| kept(n));
    for (name, value) in kept_fields().filter(|(n, _)| !wire::is_framing_field(n)) {
        wire::write_field(&mut new_head, name, value);
    }
    head.write_fields_h1(&mut new_head);
    for (name, value) in kept_fields().filter(|(n, _)| wire::is_framing_field(n)) {
        wire::write_field(&mut new_head, name, value);
    }
    new_head.extend_from_slice(b"\r\n");
    out.replace_head(at, written.len(), &new_head);
}

/// The response edits alone on a head the files wrote as HTTP/1 lines since `mark`:
/// edited line by line into a recycled buffer, with no field list made of it.
fn edit_written(edits: &routing::EditFilter, out: &mut Output, mark: Mark) {
    let mut new_head = reply::HeadBuf::take();
    let (at, head) = out.head_since(mark);
    let len = head.len();
    if edits.edit_lines(head, &mut new_head) {
        out.replace_head(at, len, &new_head);
    }
}

/// [`filter_written`] for a head written as fields (HTTP/2): the filter sees it without
/// Date, Server and the framing, which stay as the file handler wrote them.
fn filter_fields(filter: &mut dyn Attached, written: &mut ResponseHead) {
    let kept_field = |name: &[u8]| {
        wire::is_framing_field(name)
            || name.eq_ignore_ascii_case(b"date")
            || name.eq_ignore_ascii_case(b"server")
    };
    let mut head = ResponseHead::new(written.status());
    for (name, value) in written.iter().filter(|(n, _)| !kept_field(n)) {
        head.append(name, value);
    }
    if filter.response(&mut head, true) == Filter::Failed {
        return;
    }
    let mut new = ResponseHead::new(head.status());
    let kept = || written.iter().filter(|(n, _)| kept_field(n));
    for (name, value) in kept().filter(|(n, _)| !wire::is_framing_field(n)) {
        new.append(name, value);
    }
    for (name, value) in head.iter() {
        new.append(name, value);
    }
    for (name, value) in kept().filter(|(n, _)| wire::is_framing_field(n)) {
        new.append(name, value);
    }
    *written = new;
}

type Field<'a> = (&'a [u8], &'a [u8]);

/// The status of a response head this server wrote, and its fields. `None` when the
/// status line has no status (never, for heads written here).
fn parse_head(head: &[u8]) -> Option<(u16, HeadFields<'_>)> {
    let digits = head.get(9..12)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let status = digits
        .iter()
        .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    let rest = memchr::memchr(b'\n', head).map_or(&[][..], |end| &head[end + 1..]);
    Some((status, HeadFields { rest }))
}

/// The fields of a head, in order, found as they are read (no list of them is built).
#[derive(Clone)]
struct HeadFields<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for HeadFields<'a> {
    type Item = Field<'a>;

    /// The next field, up to the blank line (or a line without a colon, which a head
    /// written here never has).
    fn next(&mut self) -> Option<Field<'a>> {
        let end = memchr::memchr(b'\n', self.rest).unwrap_or(self.rest.len());
        let line = &self.rest[..end];
        self.rest = self.rest.get(end + 1..).unwrap_or_default();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // Names are short: a plain loop beats a call to memchr.
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            self.rest = &[];
            return None;
        };
        let value = &line[colon + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        Some((&line[..colon], value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(head: &[u8]) -> Option<(u16, Vec<Field<'_>>)> {
        parse_head(head).map(|(status, fields)| (status, fields.collect()))
    }

    #[test]
    fn a_written_head_is_read_back_field_by_field() {
        let head =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Empty:\r\n: v\r\nA:b\r\n\r\nbody";
        let expected: Vec<Field> = vec![
            (b"Content-Type", b"text/plain"),
            (b"X-Empty", b""),
            (b"", b"v"),
            (b"A", b"b"),
        ];
        assert_eq!(fields(head), Some((200, expected)));
        // A line without its colon ends the fields; a head of only its status line, or
        // without the blank line, is read as far as it goes.
        let first: Vec<Field> = vec![(b"A", b"b")];
        assert_eq!(
            fields(b"HTTP/1.1 200 OK\r\nA: b\r\nBroken\r\nC: d\r\n\r\n"),
            Some((200, first))
        );
        assert_eq!(fields(b"HTTP/1.1 204 No Content"), Some((204, vec![])));
        let cut: Vec<Field> = vec![(b"A", b"b")];
        assert_eq!(fields(b"HTTP/1.1 404 Not Found\r\nA: b"), Some((404, cut)));
        assert_eq!(fields(b"HTTP/1.1 2x0 OK\r\n\r\n"), None);
    }
}
