//! Lua scripts as a module of the server (`handler::Module`): each mount is a request
//! filter (its `access`, `header_filter` and `log` phases wrap whichever handler answers
//! under its prefix) and a handler (its `content` phase, when the script has one; else it
//! passes to the next handler).
//!
//! A `content` phase that finishes on its first poll (it awaits nothing) answers at once
//! ([`Answer::Now`]), so the response goes into the connection's batch like a static
//! one; one that awaits an upstream or a timer, or a request with a body to read first,
//! answers later ([`Answer::Later`]) while the worker serves its other connections.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bytes::Bytes;
use handler::{
    Answer, Attached, Body, Deferred, Filter, Filtered, KindLabels, LocalFuture, Module, Request,
    Response, ResponseHead, Role, Route, Service, UpstreamsFactory,
};

use crate::context::RequestHead;
use crate::engine::{Call, Content, Engine, MountId, Outcome, PendingContent, Scripts};

/// The scripts of `[[script]]`, with the upstream client their `tessera.http.request`
/// uses (none when no `[[upstream]]` is configured).
pub struct ScriptModule {
    scripts: Arc<Scripts>,
    upstreams: Option<Arc<dyn UpstreamsFactory>>,
}

impl ScriptModule {
    /// The `kind` label of its responses in request metrics.
    pub const KINDS: KindLabels = KindLabels {
        answered: "script",
        assembled: None,
    };

    pub fn new(scripts: Arc<Scripts>, upstreams: Option<Arc<dyn UpstreamsFactory>>) -> Self {
        ScriptModule { scripts, upstreams }
    }
}

impl Module for ScriptModule {
    fn routes(&self) -> Vec<Route> {
        self.scripts
            .prefixes()
            .enumerate()
            .flat_map(|(i, (prefix, site, rule))| {
                [Role::Filter, Role::Handler].map(|role| Route {
                    prefix: prefix.to_string(),
                    role,
                    tag: i as u32,
                    site,
                    rule,
                })
            })
            .collect()
    }

    fn kinds(&self) -> KindLabels {
        ScriptModule::KINDS
    }

    fn metrics(&self, out: &mut handler::Metrics) {
        crate::tally::write(out);
        crate::socket::write_metrics(out);
    }

    fn start(&self, worker: usize) -> Rc<dyn Service> {
        let upstreams = self.upstreams.as_ref().and_then(|f| f.upstreams(worker));
        let engine = Engine::new(self.scripts.clone(), worker, upstreams);
        engine.spawn_background();
        Rc::new(ScriptService {
            engine,
            current: Rc::new(RefCell::new(Current::None)),
        })
    }
}

/// One worker's scripts.
struct ScriptService {
    engine: Rc<Engine>,
    /// The call the filter began for the request being routed, for its `content` phase:
    /// a mount's filter runs just before its handler, on the same thread (an `access`
    /// that waits sets it when it is done).
    current: Rc<RefCell<Current>>,
}

/// The call of the request being routed, between its filter and its handler.
enum Current {
    None,
    /// Held here alone (the script watches no response): taken by `content`, or ended
    /// when the next request under a mount replaces it.
    Held(Rc<ScriptCall>),
    /// Held by the filter attached to the exchange, so that it ends with the exchange
    /// even when another handler answers (a longer route under the mount).
    Attached(Weak<ScriptCall>),
}

/// One request's script call, shared by the filter attached to the exchange and the
/// content phase; when the last holder lets go, `log` is queued.
struct ScriptCall {
    engine: Rc<Engine>,
    call: Option<Call>,
    /// Whether the script answered (`content`, or `access` with `exit`): its response
    /// then gets nginx's default_type when it has no Content-Type.
    answered: Cell<bool>,
}

impl ScriptCall {
    fn call(&self) -> &Call {
        self.call.as_ref().expect("taken only on drop")
    }
}

impl Drop for ScriptCall {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.engine.finish(call);
        }
    }
}

impl Service for ScriptService {
    fn filter(&self, req: &Request<'_>) -> Filtered {
        let engine = &self.engine;
        let call = engine.begin(
            MountId(req.tag as usize),
            RequestHead {
                method: req.head.method_token.as_bytes(),
                target: req.head.path,
                headers: req
                    .head
                    .headers
                    .iter()
                    .map(|h| (h.name.as_bytes(), h.value)),
                client: req.client,
                peer: req.peer,
                proxy_tlvs: req.proxy_tlvs,
            },
        );
        let (declared, regex) = engine.declared(MountId(req.tag as usize));
        engine.context(&call, |c| {
            c.set_facts(req.secure, req.request_id);
            c.set_vars(declared, req.notes, regex);
        });
        let call = Rc::new(ScriptCall {
            engine: engine.clone(),
            call: Some(call),
            answered: Cell::new(false),
        });
        let mount = MountId(req.tag as usize);
        match engine.access(call.call()) {
            Content::Done(outcome) => accessed(&self.current, call, outcome, mount),
            // `access` awaits an upstream call or a timer: the server awaits it, and the
            // rest happens when it is done, just before the server goes on to the
            // handler (nothing runs on this thread in between, so `current` is this
            // request's when the handler takes it).
            Content::Pending(running) => {
                let current = self.current.clone();
                Filtered::Later(handler::local_future(async move {
                    let outcome = running.await;
                    accessed(&current, call, outcome, mount)
                }))
            }
        }
    }

    fn call(&self, req: &Request<'_>) -> Answer {
        let call = match std::mem::replace(&mut *self.current.borrow_mut(), Current::None) {
            Current::Held(call) => call,
            Current::Attached(call) => match call.upgrade() {
                Some(call) => call,
                None => return Answer::Pass,
            },
            Current::None => return Answer::Pass,
        };
        let engine = &self.engine;
        if !engine.has_content(MountId(req.tag as usize)) {
            return Answer::Pass;
        }
        if req.head.body != wire::BodyFraming::None {
            return Answer::later(Later {
                call,
                content: None,
            });
        }
        match engine.content(call.call()) {
            Content::Done(outcome) => Answer::Now(content_response(&call, outcome)),
            Content::Pending(running) => Answer::later(Later {
                call,
                content: Some(running),
            }),
        }
    }
}

/// What `access` ended with, as the server takes it: the request goes on (with the
/// script attached to its exchange when the script watches responses, and with its
/// edits), or the script's answer (`exit`, a redirect, a failure).
fn accessed(
    current: &RefCell<Current>,
    call: Rc<ScriptCall>,
    outcome: Outcome,
    mount: MountId,
) -> Filtered {
    let engine = &call.engine;
    if outcome != Outcome::Continue {
        // `exit` or a redirect from `access`: its response, after `header_filter`.
        let mut filtering = Filtering { call };
        let response = filtering.respond(outcome);
        return Filtered::Answer(Answer::Now(response));
    }
    // A script that watches responses stays attached to the exchange; one that does not
    // (only `access` and `content`, the common case) costs nothing more.
    let attached: Option<Box<dyn Attached>> = match engine.watches_responses(mount) {
        true => {
            *current.borrow_mut() = Current::Attached(Rc::downgrade(&call));
            Some(Box::new(Filtering { call: call.clone() }))
        }
        false => None,
    };
    let edited = engine
        .context(call.call(), |c| c.edited_request())
        .flatten();
    if attached.is_none() {
        *current.borrow_mut() = Current::Held(call);
    }
    match edited {
        Some(edited) => Filtered::Edited(attached, edited),
        None => Filtered::Continue(attached),
    }
}

/// A `content` phase that waits: for the request body (then it starts), or on what the
/// script awaits.
struct Later {
    call: Rc<ScriptCall>,
    content: Option<PendingContent>,
}

impl Deferred for Later {
    fn respond(self, body: Bytes) -> LocalFuture<Result<Response, u16>> {
        handler::local_future(async move {
            let Later { call, content } = self;
            let engine = &call.engine;
            let outcome = match content {
                Some(running) => running.await,
                None => {
                    engine.context(call.call(), |c| c.set_body(body));
                    match engine.content(call.call()) {
                        Content::Done(outcome) => outcome,
                        Content::Pending(running) => running.await,
                    }
                }
            };
            Ok(content_response(&call, outcome))
        })
    }
}

/// The response a script's `content` (or `access`) left in its context, or the 500 page
/// when it failed. The default Content-Type is added by `Filtering`, after
/// `header_filter` has seen the fields as the script set them.
fn content_response(call: &ScriptCall, outcome: Outcome) -> Response {
    if outcome == Outcome::Failed {
        call.engine.context(call.call(), |c| c.set_status(500));
        return Response::status_page(500);
    }
    call.answered.set(true);
    let engine = &call.engine;
    // Without a `header_filter` nothing sees the fields before they go out: the default
    // type goes in now (else `Filtering` adds it after the filter).
    let default_type = !engine.has_header_filter_of(call.call());
    engine
        .context(call.call(), |c| {
            let mut head = ResponseHead::new(c.status());
            head.set_identity_only(c.no_compress());
            let mut typed = false;
            for (name, value) in c.headers_out() {
                typed |= name.eq_ignore_ascii_case(b"content-type");
                head.append(name, value);
            }
            if default_type && !typed && !wire::bodiless(c.status()) {
                // nginx's default_type, as OpenResty answers ngx.say.
                head.append(b"Content-Type", b"text/plain");
            }
            Response {
                head,
                body: Body::Full(Bytes::copy_from_slice(c.body_out())),
                relayed: false,
            }
        })
        .unwrap_or_else(|| Response::status_page(500))
}

/// The mount's filter on one exchange: `header_filter` on its response head; dropping
/// it queues `log`.
struct Filtering {
    call: Rc<ScriptCall>,
}

impl Filtering {
    /// The response to an `access` phase that answered (through `body_filter` too: no
    /// filter of the server's is attached to it).
    fn respond(&mut self, outcome: Outcome) -> Response {
        let mut response = content_response(&self.call, outcome);
        if outcome != Outcome::Failed && self.response(&mut response.head, false) == Filter::Failed
        {
            self.call
                .engine
                .context(self.call.call(), |c| c.set_status(500));
            return Response::status_page(500);
        }
        if outcome != Outcome::Failed && !wire::bodiless(response.head.status()) {
            if let Some(filter) = self.body_filter() {
                let body = std::mem::replace(&mut response.body, Body::Empty);
                response.body = body.filtered(filter);
            }
        }
        response
    }
}

/// A script's `body_filter` on one response body; it holds the request's call, so `log`
/// runs after the body has gone out.
struct BodyFiltering {
    call: Rc<ScriptCall>,
}

impl BodyFiltering {
    fn new(call: Rc<ScriptCall>) -> BodyFiltering {
        crate::tally::filter_stream(true);
        BodyFiltering { call }
    }
}

impl handler::BodyFilter for BodyFiltering {
    fn filter(&mut self, chunk: Bytes, eof: bool) -> Result<Bytes, handler::BodyError> {
        let call = &self.call;
        call.engine
            .body_filter(call.call(), &chunk, eof)
            .map_err(handler::BodyError)
    }
}

impl Drop for BodyFiltering {
    fn drop(&mut self) {
        crate::tally::filter_stream(false);
    }
}

impl Attached for Filtering {
    fn response(&mut self, head: &mut ResponseHead, framed: bool) -> Filter {
        let engine = &self.call.engine;
        let call = self.call.call();
        let header_filter = engine.has_header_filter_of(call);
        if header_filter || engine.has_body_filter_of(call) {
            // What `r:status()` and `r:resp_header()` read in either filter.
            engine.context(call, |c| {
                c.set_status(head.status());
                let out = c.headers_out_mut();
                out.clear();
                for (name, value) in head.iter() {
                    if !wire::is_framing_field(name) {
                        out.push((name.to_vec(), value.to_vec()));
                    }
                }
            });
        }
        if header_filter {
            if engine.header_filter(call) == Outcome::Failed {
                return Filter::Failed;
            }
            let original = head.status();
            let filtered = engine.context(call, |c| c.status()).unwrap_or(original);
            let status = if framed {
                framed_status(engine, call, original, filtered)
            } else {
                filtered
            };
            engine.context(call, |c| {
                c.set_status(status);
                head.set_status(status);
                if c.no_compress() {
                    head.set_identity_only(true);
                }
                head.retain(|name, _| wire::is_framing_field(name));
                for (name, value) in c.headers_out() {
                    if !wire::is_framing_field(name) {
                        head.append(name, value);
                    }
                }
            });
        }
        if self.call.answered.get()
            && !wire::bodiless(head.status())
            && !head.contains(b"content-type")
        {
            // nginx's default_type, as OpenResty answers ngx.say.
            head.append(b"Content-Type", b"text/plain");
        }
        Filter::Done
    }

    fn filters_body(&self) -> bool {
        self.call.engine.has_body_filter_of(self.call.call())
    }

    fn body_filter(&mut self) -> Option<Box<dyn handler::BodyFilter>> {
        self.filters_body().then(|| {
            Box::new(BodyFiltering::new(self.call.clone())) as Box<dyn handler::BodyFilter>
        })
    }
}

/// The status a `header_filter` may give a response that is already framed (a static
/// file whose body is queued, a proxied one whose body follows): the filter's, unless it
/// would turn a response with a body into one without (204, 304) or the reverse, which
/// would desynchronise the connection. Then the original stays, and the refusal is
/// logged.
fn framed_status(engine: &Engine, call: &Call, original: u16, filtered: u16) -> u16 {
    if wire::bodiless(original) == wire::bodiless(filtered) {
        return filtered;
    }
    tracing::warn!(
        script = %engine.script_name(call),
        from = original,
        to = filtered,
        "header_filter cannot change whether a response has a body (204, 304); the status stays"
    );
    original
}
