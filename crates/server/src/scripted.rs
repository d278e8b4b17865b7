//! Requests under a `[[script]]` mount: the glue between a connection and its worker's
//! Lua engine. Requests elsewhere never come here, so static files keep their
//! allocation-free path.
//!
//! A script answers in one of two ways. Most `content` phases finish on their first poll
//! (they await nothing): the response goes into the connection's output batch like a
//! static one, pipelining included. A phase that awaits an upstream call or a timer, or a
//! request with a body to read first, becomes a [`ScriptJob`]: the connection flushes
//! what it has and finishes the job asynchronously (like a proxied request), while the
//! worker serves its other connections.

use std::net::SocketAddr;

use script::{Call, Content, Engine, MountId, Outcome, PendingContent, RequestHead};
use wire::{bodiless, is_framing_field, BodyFraming, Framing, Request, Version};

use crate::files;
use crate::output::{Mark, Output};
use crate::worker::Worker;

/// What [`answer`] did.
pub(crate) enum Handled {
    /// The response is in the output batch.
    Done,
    /// To be finished asynchronously after a flush.
    Later(Box<ScriptJob>),
    /// `access` let the request through to the other handlers; the call is kept for
    /// `header_filter` and `log`.
    Pass(Call),
}

/// A scripted request finished outside the read loop.
pub(crate) struct ScriptJob {
    pub call: Call,
    /// The running `content` phase; `None` until the request body is read.
    pub content: Option<PendingContent>,
    /// The phase already finished with this outcome (its body was too large for the
    /// output batch).
    pub finished: Option<Outcome>,
    pub framing: BodyFraming,
    pub expect_continue: bool,
    pub keep_alive: bool,
    pub head_only: bool,
    pub version: Version,
    /// The request head as received, for the access log.
    pub raw_head: Vec<u8>,
}

/// Runs the phases that can run now for a request under mount `m`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer(
    worker: &Worker,
    engine: &Engine,
    m: MountId,
    req: &Request<'_, '_>,
    client: SocketAddr,
    keep_alive: bool,
    out: &mut Output,
    pending: &[u8],
) -> Handled {
    let call = engine.begin(
        m,
        RequestHead {
            method: req.method_token.as_bytes(),
            target: req.path,
            headers: req.headers.iter().map(|h| (h.name.as_bytes(), h.value)),
            client,
        },
    );
    let head_only = req.method == wire::Method::Head;
    match engine.access(&call) {
        Outcome::Continue => {}
        outcome => {
            write_response(
                worker,
                engine,
                &call,
                outcome,
                head_only,
                req.version,
                keep_alive,
                out.buf(),
            );
            engine.finish(call);
            return Handled::Done;
        }
    }
    if !engine.has_content(m) {
        return Handled::Pass(call);
    }
    let mut job = ScriptJob {
        call,
        content: None,
        finished: None,
        framing: req.body,
        expect_continue: req.expect_continue,
        keep_alive,
        head_only,
        version: req.version,
        raw_head: Vec::new(),
    };
    if req.body == BodyFraming::None {
        match engine.content(&job.call) {
            Content::Done(outcome) if !too_large(engine, &job.call) => {
                write_response(
                    worker,
                    engine,
                    &job.call,
                    outcome,
                    head_only,
                    req.version,
                    keep_alive,
                    out.buf(),
                );
                engine.finish(job.call);
                return Handled::Done;
            }
            Content::Done(outcome) => job.finished = Some(outcome),
            Content::Pending(p) => job.content = Some(p),
        }
    }
    job.raw_head = pending[..req.head_len].to_vec();
    Handled::Later(Box::new(job))
}

/// Responses larger than this are written on their own, not into the output batch, whose
/// buffer is sized for heads and small bodies and would otherwise grow for good.
const MAX_BATCHED_BODY: usize = 16 * 1024;

fn too_large(engine: &Engine, call: &Call) -> bool {
    engine
        .context(call, |c| c.body_out().len() > MAX_BATCHED_BODY)
        .unwrap_or(false)
}

/// Writes the response in the call's context (after its `header_filter`), or a 500.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_response(
    worker: &Worker,
    engine: &Engine,
    call: &Call,
    mut outcome: Outcome,
    head_only: bool,
    version: Version,
    keep_alive: bool,
    buf: &mut Vec<u8>,
) {
    if outcome != Outcome::Failed && engine.header_filter(call) == Outcome::Failed {
        outcome = Outcome::Failed;
    }
    if outcome == Outcome::Failed {
        engine.context(call, |c| c.set_status(500));
        files::write_simple(worker, buf, 500, b"", head_only, version, keep_alive);
        return;
    }
    engine.context(call, |c| {
        let status = c.status();
        files::start_head(worker, buf, status);
        let mut typed = false;
        for (name, value) in c.headers_out() {
            if is_framing_field(name) {
                continue;
            }
            typed |= name.eq_ignore_ascii_case(b"content-type");
            wire::write_field(buf, name, value);
        }
        let bodiless = bodiless(status);
        let framing = if bodiless {
            Framing::None
        } else {
            if !typed {
                // nginx's default_type, as OpenResty answers ngx.say.
                buf.extend_from_slice(b"Content-Type: text/plain\r\n");
            }
            Framing::Length(c.body_out().len() as u64)
        };
        wire::write_framing(buf, framing, version, keep_alive);
        if !head_only && !bodiless {
            buf.extend_from_slice(c.body_out());
        }
    });
}

/// The status a `header_filter` may give a response that is already framed (a static
/// file whose body is queued, a proxied one whose body follows): the filter's, unless
/// it would turn a response with a body into one without (204, 304) or the reverse,
/// which would desynchronise the connection. Then the original stays, and the refusal
/// is logged.
fn framed_status(engine: &Engine, call: &Call, original: u16, filtered: u16) -> u16 {
    if bodiless(original) == bodiless(filtered) {
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

/// Runs `header_filter` on a response another handler wrote since `mark` (a static
/// file), rewriting its head when the filter changed something. The framing headers and
/// Date/Server stay as they were.
pub(crate) fn filter_written(engine: &Engine, call: &Call, out: &mut Output, mark: Mark) {
    if !engine.has_header_filter_of(call) {
        return;
    }
    let (at, head) = out.head_since(mark);
    let head = head.to_vec();
    let Some((status, fields)) = parse_head(&head) else {
        return;
    };
    let mut kept: Vec<(&[u8], &[u8])> = Vec::new();
    engine.context(call, |c| {
        c.set_status(status);
        let headers = c.headers_out_mut();
        headers.clear();
        for (name, value) in &fields {
            if is_framing_field(name)
                || name.eq_ignore_ascii_case(b"date")
                || name.eq_ignore_ascii_case(b"server")
            {
                kept.push((name, value));
            } else {
                headers.push((name.to_vec(), value.to_vec()));
            }
        }
    });
    let outcome = engine.header_filter(call);
    if outcome == Outcome::Failed {
        // The body is already queued: keep the response as the file handler wrote it.
        return;
    }
    let mut new_head = Vec::with_capacity(head.len() + 64);
    let filtered = engine.context(call, |c| c.status()).unwrap_or(status);
    let new_status = framed_status(engine, call, status, filtered);
    engine.context(call, |c| {
        c.set_status(new_status);
        wire::write_status_line(&mut new_head, new_status);
        for (name, value) in kept.iter().copied().filter(|(n, _)| !is_framing_field(n)) {
            wire::write_field(&mut new_head, name, value);
        }
        for (name, value) in c.headers_out() {
            if !is_framing_field(name) {
                wire::write_field(&mut new_head, name, value);
            }
        }
        for (name, value) in kept.iter().copied().filter(|(n, _)| is_framing_field(n)) {
            wire::write_field(&mut new_head, name, value);
        }
        new_head.extend_from_slice(b"\r\n");
    });
    out.replace_head(at, head.len(), &new_head);
}

type Field<'a> = (&'a [u8], &'a [u8]);

/// The status and fields of a response head we wrote ourselves.
fn parse_head(head: &[u8]) -> Option<(u16, Vec<Field<'_>>)> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next()?;
    let status = std::str::from_utf8(status_line.get(9..12)?)
        .ok()?
        .parse()
        .ok()?;
    let mut fields = Vec::new();
    for line in lines {
        if line.is_empty() {
            break;
        }
        let colon = line.iter().position(|&b| b == b':')?;
        let value = &line[colon + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        fields.push((&line[..colon], value));
    }
    Some((status, fields))
}

/// A call kept for a proxied request under a mount: its `header_filter` adjusts the
/// upstream's response, and dropping it (however the request ends) queues `log`.
pub(crate) struct Kept {
    engine: std::rc::Rc<Engine>,
    call: Option<Call>,
}

impl Kept {
    pub(crate) fn new(engine: std::rc::Rc<Engine>, call: Call) -> Kept {
        Kept {
            engine,
            call: Some(call),
        }
    }

    /// Runs `header_filter` on a proxied response's status and headers. The framing
    /// headers stay the upstream's; a failing filter leaves the response as it was.
    pub(crate) fn filter(&self, status: &mut http::StatusCode, headers: &mut http::HeaderMap) {
        let Some(call) = &self.call else { return };
        let engine = &*self.engine;
        if !engine.has_header_filter_of(call) {
            return;
        }
        engine.context(call, |c| {
            c.set_status(status.as_u16());
            let out = c.headers_out_mut();
            out.clear();
            for (name, value) in headers.iter() {
                if !is_framing_field(name.as_str().as_bytes()) {
                    out.push((name.as_str().as_bytes().to_vec(), value.as_bytes().to_vec()));
                }
            }
        });
        if engine.header_filter(call) == Outcome::Failed {
            return;
        }
        let original = status.as_u16();
        let filtered = engine.context(call, |c| c.status()).unwrap_or(original);
        let new_status = framed_status(engine, call, original, filtered);
        engine.context(call, |c| {
            c.set_status(new_status);
            let others: Vec<http::HeaderName> = headers
                .keys()
                .filter(|name| !is_framing_field(name.as_str().as_bytes()))
                .cloned()
                .collect();
            for name in others {
                headers.remove(name);
            }
            for (name, value) in c.headers_out() {
                if let (Ok(name), Ok(value)) = (
                    http::HeaderName::from_bytes(name),
                    http::HeaderValue::from_bytes(value),
                ) {
                    if !is_framing_field(name.as_str().as_bytes()) {
                        headers.append(name, value);
                    }
                }
            }
            if let Ok(s) = http::StatusCode::from_u16(new_status) {
                *status = s;
            }
        });
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.engine.finish(call);
        }
    }
}
