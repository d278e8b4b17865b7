//! The handler interface: what a module answers, filters and exposes, as the server sees
//! it. One request/response model for every protocol (HTTP/1 now, HTTP/2 later).

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;

use crate::pooled::{LocalFuture, Pooled};
use crate::request_body::RequestBody;
use crate::{Body, ResponseHead};

/// A request as a handler sees it: the parsed head (borrowed from the connection's read
/// buffer), its path decoded and normalised once, the client, and which of the module's
/// routes took it.
pub struct Request<'a> {
    pub head: &'a wire::Request<'a, 'a>,
    /// The decoded, normalised path without the query (`wire::normalize_path`).
    pub path: &'a [u8],
    /// The request's client: the socket's peer, or the address a trusted proxy named
    /// (its PROXY header, its `X-Forwarded-For` or `Forwarded`).
    pub client: SocketAddr,
    /// The socket's peer: the proxy in front, when there is one.
    pub peer: SocketAddr,
    /// The TLVs of the connection's PROXY v2 header, raw (`wire::Tlvs` reads them);
    /// empty without one.
    pub proxy_tlvs: &'a [u8],
    /// When the client was read from `X-Forwarded-For`: how many of its items (across its
    /// lines) lie before the client's. A proxy forwards those, then the client, so that
    /// the trusted hops after it are not taken for clients further on. `None`: the field
    /// is forwarded whole and the client appended.
    pub forwarded_for: Option<usize>,
    /// The tag the module gave the route that matched ([`Route::tag`]).
    pub tag: u32,
    /// Whether the request came over TLS (the proxy says `X-Forwarded-Proto: https`).
    pub secure: bool,
    /// Where to note the upstream attempts and the cache's result for the access log,
    /// when the site's log writes them ([`crate::LogNotes`]); `None`: note nothing.
    pub notes: Option<&'a crate::LogNotes>,
    /// The request's id, for a handler to send on (the proxy's `X-Request-Id`): when its
    /// site's rules or access log use one, and no `request_headers` rule of its route
    /// sets `X-Request-Id` itself.
    pub request_id: Option<u128>,
    /// The request's trace context, with `[tracing]` on: a handler that sends the request
    /// on (the proxy, an ESI fragment) sends it as a child span ([`trace::Hop`]).
    pub trace: Option<trace::Context>,
}

/// A response: its head as data and its body.
pub struct Response {
    pub head: ResponseHead,
    pub body: Body,
    /// Relayed from an upstream: its fields go out as they came (its Date, its Server);
    /// the server adds Date only when it has none. A response made here (`false`) gets
    /// the server's Server and Date fields first.
    pub relayed: bool,
}

impl Response {
    /// The server's page for a status it answers itself (an error, a refusal), the same
    /// small HTML page nginx sends; no body for 204 and 304.
    pub fn status_page(status: u16) -> Response {
        let mut head = ResponseHead::new(status);
        if wire::bodiless(status) {
            return Response {
                head,
                body: Body::Empty,
                relayed: false,
            };
        }
        head.append(b"Content-Type", STATUS_PAGE_TYPE);
        let mut page = Vec::with_capacity(status_page_len(status));
        write_status_page(&mut page, status);
        Response {
            head,
            body: Body::Full(page.into()),
            relayed: false,
        }
    }

    /// Whether its body is framed already, for [`Attached::response`].
    pub fn framed(&self) -> bool {
        !matches!(self.body, Body::Empty | Body::Full(_))
    }
}

/// The media type of a status page.
pub const STATUS_PAGE_TYPE: &[u8] = b"text/html; charset=utf-8";

/// The length of the page [`write_status_page`] writes.
pub fn status_page_len(status: u16) -> usize {
    // <html><head><title>404 Not Found</title></head><body><h1>404 Not Found</h1></body></html>\n
    2 * (3 + 1 + wire::reason(status).len()) + 64
}

/// Appends the status page of `status`: the one place it is written.
pub fn write_status_page(buf: &mut Vec<u8>, status: u16) {
    let start = buf.len();
    let code = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    let reason = wire::reason(status).as_bytes();
    for part in [
        &b"<html><head><title>"[..],
        &code,
        b" ",
        reason,
        b"</title></head><body><h1>",
        &code,
        b" ",
        reason,
        b"</h1></body></html>\n",
    ] {
        buf.extend_from_slice(part);
    }
    debug_assert_eq!(buf.len() - start, status_page_len(status));
}

/// What a handler did with a request.
pub enum Answer {
    /// The response, ready now.
    Now(Response),
    /// The response comes later: the connection flushes what it has, reads the request
    /// body and awaits [`Deferred::respond`], while the worker serves its other
    /// connections.
    Later(Later),
    /// Not this handler's: the handler of the next shorter prefix is asked, and when none
    /// is left the server's own handler (static files) answers.
    Pass,
    /// The server's static files answer, whatever handlers of shorter prefixes there
    /// are: a files route under a proxied one (`location /docs { root ...; }` inside
    /// nginx's `location / { proxy_pass ...; }`).
    Files,
}

impl Answer {
    /// [`Answer::Later`] with `deferred`.
    pub fn later<D: Deferred + 'static>(deferred: D) -> Answer {
        Answer::Later(Later::new(deferred))
    }
}

/// A response that waits on something (the request body, an upstream, a timer).
pub trait Deferred {
    /// The response to the request, given its body (empty when it has none). `Err` is a
    /// status the server answers with its own status page (a 502 from the proxy, a 500
    /// from a failed script). Make the future with [`crate::local_future`].
    fn respond(self, body: Bytes) -> LocalFuture<Result<Response, u16>>;

    /// Whether it takes the request body as it arrives ([`Deferred::respond_streamed`],
    /// the proxy's `request_buffering = false`) rather than whole. Default: whole.
    fn streams_body(&self) -> bool {
        false
    }

    /// The response to the request, given its body as it arrives: the server reads the
    /// client while the future runs, as fast as the future takes the bytes (within
    /// `limits.max_body_size`). Called only when [`Deferred::streams_body`]; the default
    /// reads the body whole, then calls [`Deferred::respond`].
    fn respond_streamed(self, body: RequestBody) -> LocalFuture<Result<Response, u16>>
    where
        Self: Sized + 'static,
    {
        crate::local_future(async move {
            match body.collect().await {
                Ok(whole) => self.respond(whole).await,
                Err(_) => Err(400),
            }
        })
    }
}

/// A [`Deferred`] of any type, in recycled memory ([`Pooled`]): what the server holds
/// while it reads the request body.
pub struct Later(Pooled<dyn Respond>);

/// [`Deferred::respond`] through a pointer: the deferred state is taken out once.
trait Respond {
    fn respond(&mut self, body: Bytes) -> Option<LocalFuture<Result<Response, u16>>>;
    fn streams_body(&self) -> bool;
    fn respond_streamed(&mut self, body: RequestBody)
        -> Option<LocalFuture<Result<Response, u16>>>;
}

impl<D: Deferred + 'static> Respond for Option<D> {
    fn respond(&mut self, body: Bytes) -> Option<LocalFuture<Result<Response, u16>>> {
        self.take().map(|d| d.respond(body))
    }

    fn streams_body(&self) -> bool {
        self.as_ref().is_some_and(|d| d.streams_body())
    }

    fn respond_streamed(
        &mut self,
        body: RequestBody,
    ) -> Option<LocalFuture<Result<Response, u16>>> {
        self.take().map(|d| d.respond_streamed(body))
    }
}

impl Later {
    pub fn new<D: Deferred + 'static>(deferred: D) -> Later {
        // SAFETY: the unsizing coercion.
        Later(unsafe { Pooled::new(Some(deferred)).unsize(|p| p as *mut dyn Respond) })
    }

    /// The deferred response, given the request body ([`Deferred::respond`]).
    pub fn respond(mut self, body: Bytes) -> LocalFuture<Result<Response, u16>> {
        match self.0.respond(body) {
            Some(future) => future,
            // `Later` is consumed here, and its state taken only here.
            None => unreachable!("a deferred response is taken once"),
        }
    }

    /// Whether it takes the request body as it arrives ([`Deferred::streams_body`]).
    pub fn streams_body(&self) -> bool {
        self.0.streams_body()
    }

    /// The deferred response, given the request body as it arrives
    /// ([`Deferred::respond_streamed`]).
    pub fn respond_streamed(mut self, body: RequestBody) -> LocalFuture<Result<Response, u16>> {
        match self.0.respond_streamed(body) {
            Some(future) => future,
            None => unreachable!("a deferred response is taken once"),
        }
    }
}

/// What a request filter did (Lua's `access` phase).
pub enum Filtered {
    /// The request goes on to its handler; the filter may stay attached to see the
    /// response head and the end of the exchange.
    Continue(Option<Box<dyn Attached>>),
    /// As `Continue`, with the request as the filter changed it: the handler and the
    /// static files see this target and these fields instead of the received ones.
    Edited(Option<Box<dyn Attached>>, EditedRequest),
    /// The filter answered itself; the handler is not called.
    Answer(Answer),
    /// The filter waits (Lua's `access` awaiting an upstream call or a timer): the server
    /// serves its other connections, then goes on with what this resolves to (which is
    /// never `Later` again) as if the filter had returned it.
    Later(LocalFuture<Filtered>),
}

/// A request as a filter changed it (Lua's `r:set_req_header`, `r:set_path`...): a new
/// target (origin form), all of its fields as they are now, or both; in one buffer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EditedRequest {
    bytes: Vec<u8>,
    target: Option<Span>,
    /// Each field's name and value.
    fields: Option<Vec<(Span, Span)>>,
}

/// A byte range of [`EditedRequest`]'s buffer.
type Span = (usize, usize);

impl EditedRequest {
    fn push(&mut self, bytes: &[u8]) -> Span {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        (start, self.bytes.len())
    }

    /// The request's new target: a path starting with `/`, and a query after `?`.
    pub fn set_target(&mut self, target: &[u8]) {
        self.target = Some(self.push(target));
    }

    /// The request's fields, all of them, as they now are.
    pub fn set_fields<'a>(&mut self, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) {
        let mut spans = Vec::new();
        for (name, value) in fields {
            spans.push((self.push(name), self.push(value)));
        }
        self.fields = Some(spans);
    }

    pub fn target(&self) -> Option<&[u8]> {
        self.target.map(|(a, b)| &self.bytes[a..b])
    }

    /// The fields (name, value), when they changed.
    pub fn fields(&self) -> Option<impl Iterator<Item = (&[u8], &[u8])>> {
        self.fields.as_ref().map(|spans| {
            spans
                .iter()
                .map(|&((n0, n1), (v0, v1))| (&self.bytes[n0..n1], &self.bytes[v0..v1]))
        })
    }
}

/// A filter attached to one exchange (Lua's `header_filter` and `log` phases).
/// Dropping it ends the exchange for the filter (Lua queues its `log` phase).
pub trait Attached {
    /// Changes the response head before it is encoded. `framed` is true when the body is
    /// already framed (a file queued, a proxied body on its way): a status that would add
    /// or remove the body (204, 304) must then be refused. `Failed` on a response that is
    /// not framed makes it a 500; on a framed one the response goes out as it was.
    fn response(&mut self, head: &mut ResponseHead, framed: bool) -> Filter;

    /// Whether it filters the response body ([`Attached::body_filter`]): asked before a
    /// static file is served, which then comes as a stream the filter can see instead of
    /// being sent from the file. Default: no.
    fn filters_body(&self) -> bool {
        false
    }

    /// The filter of this response's body, asked once after [`Attached::response`] on a
    /// response that has a body; `None` (the default): the body goes out as it is.
    fn body_filter(&mut self) -> Option<Box<dyn crate::BodyFilter>> {
        None
    }
}

/// What a response filter did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    Done,
    Failed,
}

/// One worker's instance of a module: built on the worker's thread, used only there.
pub trait Service {
    /// Answers a request on one of the module's [`Role::Handler`] routes.
    fn call(&self, req: &Request<'_>) -> Answer {
        let _ = req;
        Answer::Pass
    }

    /// Filters a request on one of the module's [`Role::Filter`] routes, before its
    /// handler.
    fn filter(&self, req: &Request<'_>) -> Filtered {
        let _ = req;
        Filtered::Continue(None)
    }
}

/// What a route does for the paths under its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Answers them (`Service::call`).
    Handler,
    /// Filters them before whichever handler answers (`Service::filter`).
    Filter,
}

/// A path prefix a module takes on one site, with the module's own tag for it.
#[derive(Debug, Clone)]
pub struct Route {
    pub prefix: String,
    pub role: Role,
    pub tag: u32,
    /// The site whose requests it takes ([`crate::Hosts`]): 0 for the top-level
    /// configuration, `i + 1` for `[[host]]` number `i`.
    pub site: usize,
    /// The configuration rule (its place among its site's rules: `[[script]]`s with
    /// rule keys, then `[[route]]`s) that chooses it (a regex, an exact path, a header...:
    /// the server's `rules`); `None`: it is chosen by its prefix alone.
    pub rule: Option<usize>,
}

/// A feature of the server (the proxy, Lua scripts), built once per process by `cli` and
/// handed to the server, which starts one [`Service`] per worker.
pub trait Module: Send + Sync {
    /// The prefixes it answers or filters.
    fn routes(&self) -> Vec<Route>;

    /// This worker's client of named upstreams, when the module has one (the proxy):
    /// the server sends a request there for an `@upstream:NAME` error page.
    fn upstreams(&self, worker: usize) -> Option<Rc<dyn crate::Upstreams>> {
        let _ = worker;
        None
    }

    /// This worker's instance; called on the worker's thread before it serves anything.
    fn start(&self, worker: usize) -> Rc<dyn Service>;

    /// What this module adds to a scrape of `/metrics` (its cache, its upstreams...),
    /// read from its counters at scrape time.
    fn metrics(&self, _out: &mut crate::Metrics) {}

    /// The `kind` labels of request metrics its responses count under.
    fn kinds(&self) -> KindLabels {
        KindLabels::UNNAMED
    }
}

/// The `kind` labels of request metrics a module's responses count under
/// ([`Module::kinds`]). The binary registers those of every module it can build when it
/// binds the server, so that a scrape lists the same families whatever modules the
/// configuration uses; a label that was not registered counts as `module`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindLabels {
    /// A response it answers: `proxy`, `script`...
    pub answered: &'static str,
    /// A response it marks assembled from fragments ([`ResponseHead::set_assembled`]):
    /// the proxy's `esi`. `None`: those count as `answered`.
    pub assembled: Option<&'static str>,
}

impl KindLabels {
    /// A module that names no kind of its own.
    pub const UNNAMED: KindLabels = KindLabels {
        answered: "module",
        assembled: None,
    };
}
