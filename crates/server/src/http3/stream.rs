//! One HTTP/3 request stream, answered by `exchange` exactly as an HTTP/1 request or an
//! HTTP/2 stream is: the server's own answers (files, refusals, redirects) written as
//! fields and pieces, a handler's through the one finisher (`exchange::finish`), with
//! the stream as its [`Sink`].

use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use h3::error::Code;
use handler::{Body, LocalFuture, Response, ResponseHead, Tunnel};
use wire::{BodyFraming, Version};

use super::conn::{self, Conn};
use crate::exchange::finish::{self, BodyRead, Pumped, Sink};
use crate::exchange::served::{self, Sent};
use crate::exchange::{self, Checked, Dispatched, Exchange};
use crate::facts::ConnFacts;
use crate::http2::head::{is_connection_specific, Made};
use crate::net::output::{FieldsHead, Piece};
use crate::reply::Terms;
use crate::worker::Worker;

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Awaits one write to `$stream` (`$send`), bounded by `$wait` (`timeouts.write`): a
/// client that takes nothing (gives no flow-control credit) for that long has the
/// stream reset, as a TCP client that reads nothing is closed. `Err(Gone)` when the
/// stream broke or was reset.
macro_rules! written {
    ($stream:expr, $wait:expr, $send:expr) => {{
        let done = evloop::time::timeout($wait, $send).await;
        match done {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err(Gone),
            Err(_) => {
                $stream.stop_stream(Code::H3_REQUEST_CANCELLED);
                Err(Gone)
            }
        }
    }};
}
type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// Bytes of a file read and handed to QUIC at a time: QUIC's flow control then holds
/// the next read until the client has taken enough.
const FILE_CHUNK: usize = 64 * 1024;

/// What answering a request at once came to.
enum Step {
    /// The server's own answer (a file, a refusal), logged already.
    Ready(FieldsHead, Vec<Piece>),
    /// A check to await, then the request answered again.
    Wait(LocalFuture<Checked>),
    /// A handler's answer, finished by `exchange::finish`.
    Later(handler::Pooled<Exchange>),
}

/// Answers one request stream.
pub(super) async fn serve(resolver: Resolver, conn: Rc<Conn>) {
    let _answered = conn::Answered(&conn);
    // An oversized field section (past `limits.max_head_size`) is answered 431 by h3; a
    // stream whose head does not come within `timeouts.head` is dropped.
    let timeouts = conn.worker.current().gen.config.timeouts.clone();
    let head_wait = Duration::from_secs_f64(timeouts.head);
    let write_wait = Duration::from_secs_f64(timeouts.write);
    let Ok(Ok((request, mut stream))) =
        evloop::time::timeout(head_wait, resolver.resolve_request()).await
    else {
        return;
    };
    let read_at = conn::now();
    if !conn.confirmed.get() && !is_safe(request.method()) {
        // Sent in 0-RTT data, which could be a replay: answered once the handshake
        // proves the client is live (docs/http3.md), never if the connection is lost
        // first.
        if !conn.confirmed().await {
            return;
        }
    }
    conn.worker.clock.refresh();
    let mut checked = None;
    loop {
        match start(&conn, &request, read_at, checked.as_ref()) {
            Step::Ready(head, pieces) => {
                let head_only = request.method() == http::Method::HEAD;
                let _ = send_fields(&mut stream, head, pieces, (head_only, write_wait)).await;
                return;
            }
            Step::Wait(check) => checked = Some(check.await),
            Step::Later(exchange) => {
                let mut task = Task {
                    conn: &conn,
                    request: &request,
                    stream: &mut stream,
                    read_at,
                };
                let _ = finish::finish(&mut task, exchange).await;
                return;
            }
        }
    }
}

/// GET, HEAD and OPTIONS: what 0-RTT may carry (RFC 9110 section 9.2.1's safe methods).
fn is_safe(method: &http::Method) -> bool {
    [http::Method::GET, http::Method::HEAD, http::Method::OPTIONS].contains(method)
}

/// Answers the request as far as it can without waiting.
fn start(
    conn: &Conn,
    request: &http::Request<()>,
    read_at: Option<Instant>,
    checked: Option<&Checked>,
) -> Step {
    let worker: &Worker = &conn.worker;
    let mut cookie = Vec::new();
    let mut fields = Vec::with_capacity(request.headers().len() + 1);
    let limits = &worker.shared.limits;
    let (req, refusal) = view(request, &mut cookie, &mut fields, limits);
    let mut buffers = worker.take_buffers();
    let out = &mut buffers.out;
    out.want_fields(ResponseHead::with_capacity(0, 12, 320));
    let mark = out.mark();
    let dispatched = exchange::answer_stream(worker, &conn.facts, (&req, refusal), checked, out);
    let step = match dispatched {
        Dispatched::Done(answered) => {
            let request = Some((&req, answered));
            served::log(worker, &conn.facts, read_at, request, b"", out, mark);
            let head = out
                .take_fields()
                .unwrap_or_else(|| FieldsHead::new(ResponseHead::default()));
            Step::Ready(head, out.take_pieces(0))
        }
        Dispatched::Later(exchange) => Step::Later(exchange),
        Dispatched::Wait(check) => Step::Wait(check),
    };
    worker.give_back(buffers);
    step
}

/// The request as the handlers see it, version `Http3`, and why it is refused, if it
/// is: the `:authority` is the Host (a client that sends both must send the same host,
/// RFC 9114 section 4.3.1); cookies split over several fields are joined as one.
fn view<'a>(
    request: &'a http::Request<()>,
    cookie: &'a mut Vec<u8>,
    fields: &'a mut Vec<wire::Header<'a>>,
    limits: &wire::Limits,
) -> (wire::Request<'a, 'a>, Option<wire::Error>) {
    let method = request.method().as_str();
    let authority = request.uri().authority().map(|a| a.as_str().as_bytes());
    let target: &[u8] = match (method, request.uri().path_and_query()) {
        ("CONNECT", _) => authority.unwrap_or(b""),
        (_, Some(path)) => path.as_str().as_bytes(),
        (_, None) => b"/",
    };
    let named = request
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()));
    let (length, mut refusal) = crate::http2::request::gather(authority, named, cookie, fields);
    let method_kind = wire::Method::from_token(method);
    // HTTP/3 says whether a body follows only when the stream ends: a declared length
    // says so, and the methods that carry none in practice are taken to have none.
    let framing = match length {
        Some(length) => match std::str::from_utf8(length)
            .ok()
            .and_then(|l| l.parse().ok())
        {
            Some(0) => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
            None => {
                refusal = Some(wire::Error::BadContentLength);
                BodyFraming::None
            }
        },
        None if is_safe(request.method()) || method == "DELETE" => BodyFraming::None,
        None => BodyFraming::Chunked,
    };
    if let Some(e) = crate::http2::request::over_limits(limits, target, fields, framing) {
        refusal = Some(e);
    }
    let fields: &'a [wire::Header<'a>] = fields;
    let req = wire::Request {
        method: method_kind,
        method_token: method,
        target,
        path: target,
        version: Version::Http3,
        headers: fields,
        head_len: 0,
        body: framing,
        keep_alive: true,
        expect_continue: false,
    };
    (req, refusal)
}

/// A head as h3 takes it, from fields (names are lower-cased by `http`).
fn response<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Option<http::Response<()>> {
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(status).ok()?;
    let headers = response.headers_mut();
    for (name, value) in fields.filter(|(name, _)| !is_connection_specific(name)) {
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    Some(response)
}

/// Sends the server's own answer: its head, then its pieces (a file read as QUIC's flow
/// control takes it).
async fn send_fields(
    stream: &mut Stream,
    head: FieldsHead,
    pieces: Vec<Piece>,
    (head_only, wait): (bool, Duration),
) -> Result<(), Gone> {
    let Some(response) = response(head.status(), head.iter()) else {
        stream.stop_stream(Code::H3_INTERNAL_ERROR);
        return Ok(());
    };
    written!(stream, wait, stream.send_response(response))?;
    if !wire::no_body(head_only, head.status()) {
        for piece in pieces {
            match piece {
                Piece::Bytes(bytes) => written!(stream, wait, stream.send_data(bytes))?,
                Piece::Memory { entry, start, end } => {
                    let body = &entry.body()[start..end];
                    for chunk in body.chunks(FILE_CHUNK) {
                        written!(
                            stream,
                            wait,
                            stream.send_data(Bytes::copy_from_slice(chunk))
                        )?;
                    }
                }
                Piece::File {
                    entry,
                    mut offset,
                    mut len,
                } => {
                    while len > 0 {
                        let n = len.min(FILE_CHUNK as u64) as usize;
                        let mut chunk = vec![0; n];
                        if entry.file.read_exact_at(&mut chunk, offset).is_err() {
                            // The file shrank or broke under us: its length is
                            // promised, so the stream is cut off, not completed.
                            stream.stop_stream(Code::H3_INTERNAL_ERROR);
                            return Ok(());
                        }
                        written!(stream, wait, stream.send_data(Bytes::from(chunk)))?;
                        offset += n as u64;
                        len -= n as u64;
                    }
                }
            }
        }
    }
    written!(stream, wait, stream.finish())
}

/// HTTP/3's side of a request answered by a handler (`exchange::finish`).
struct Task<'a> {
    conn: &'a Rc<Conn>,
    request: &'a http::Request<()>,
    stream: &'a mut Stream,
    read_at: Option<Instant>,
}

/// The stream failed or the client reset it.
struct Gone;

impl Task<'_> {
    fn body_wait(&self) -> Duration {
        Duration::from_secs_f64(self.conn.worker.current().gen.config.timeouts.body)
    }

    /// The next piece of the request body (`None` at its end).
    async fn chunk(&mut self) -> Result<Option<Bytes>, Gone> {
        match self.stream.recv_data().await {
            Ok(Some(mut data)) => Ok(Some(data.copy_to_bytes(data.remaining()))),
            Ok(None) => Ok(None),
            Err(_) => Err(Gone),
        }
    }
}

impl Sink for Task<'_> {
    type Gone = Gone;
    type Head = Bytes;
    const SWITCHES: bool = false;

    fn worker(&self) -> &Rc<Worker> {
        &self.conn.worker
    }

    fn facts(&self) -> ConnFacts {
        self.conn.facts.clone()
    }

    fn read_at(&self) -> Option<Instant> {
        self.read_at
    }

    async fn read_body(&mut self, framing: BodyFraming, _: bool) -> Result<BodyRead, Gone> {
        if framing == BodyFraming::None {
            return Ok(BodyRead::Body(Bytes::new()));
        }
        let max = self.conn.worker.shared.limits.max_body_size;
        let wait = self.body_wait();
        let mut all = BytesMut::new();
        let read = async {
            while let Some(chunk) = self.chunk().await? {
                if !within(framing, all.len() as u64 + chunk.len() as u64) {
                    return Ok(Err(400));
                }
                if all.len() as u64 + chunk.len() as u64 > max {
                    return Ok(Err(413));
                }
                all.extend_from_slice(&chunk);
            }
            if !complete(framing, all.len() as u64) {
                return Ok(Err(400));
            }
            Ok(Ok(()))
        };
        Ok(match evloop::time::timeout(wait, read).await {
            Ok(Ok(Ok(()))) => BodyRead::Body(all.freeze()),
            Ok(Ok(Err(status))) => BodyRead::Refused(status),
            Ok(Err(gone)) => return Err(gone),
            Err(_) => BodyRead::Refused(408),
        })
    }

    async fn pump_body(
        &mut self,
        framing: BodyFraming,
        _: bool,
        writer: handler::BodyWriter,
    ) -> Result<Pumped, Gone> {
        if framing == BodyFraming::None {
            writer.finish();
            return Ok(Pumped::Done);
        }
        let max = self.conn.worker.shared.limits.max_body_size;
        let wait = self.body_wait();
        let mut seen = 0u64;
        loop {
            if !writer.room().await {
                return Ok(Pumped::Stopped);
            }
            match evloop::time::timeout(wait, self.chunk()).await {
                Err(_) => {
                    writer.fail(handler::BodyFailure::TimedOut);
                    return Ok(Pumped::Refused(408));
                }
                Ok(Err(gone)) => {
                    writer.fail(handler::BodyFailure::ClientGone);
                    return Err(gone);
                }
                Ok(Ok(None)) if !complete(framing, seen) => {
                    writer.fail(handler::BodyFailure::Malformed);
                    return Ok(Pumped::Refused(400));
                }
                Ok(Ok(None)) => {
                    writer.finish();
                    return Ok(Pumped::Done);
                }
                Ok(Ok(Some(chunk))) => {
                    seen += chunk.len() as u64;
                    if !within(framing, seen) {
                        // More than its content-length: nothing of it goes on (an HTTP/1.1
                        // origin would read the rest as another request).
                        writer.fail(handler::BodyFailure::Malformed);
                        self.stream.stop_sending(Code::H3_MESSAGE_ERROR);
                        return Ok(Pumped::Refused(400));
                    }
                    if seen > max {
                        writer.fail(handler::BodyFailure::TooLarge);
                        return Ok(Pumped::Refused(413));
                    }
                    writer.push(chunk);
                }
            }
        }
    }

    fn abandon_body(&mut self) {
        self.stream.stop_sending(Code::H3_NO_ERROR);
    }

    async fn skip_body(&mut self, framing: BodyFraming) {
        // A response made without the body: the rest is not read (STOP_SENDING).
        if framing != BodyFraming::None {
            self.stream.stop_sending(Code::H3_NO_ERROR);
        }
    }

    async fn respond(
        &mut self,
        responding: LocalFuture<Result<Response, u16>>,
    ) -> Result<Result<Response, u16>, Gone> {
        Ok(responding.await)
    }

    async fn send(&mut self, mut response: Response, terms: Terms) -> Result<Sent<Bytes>, Gone> {
        let worker = &self.conn.worker;
        let facts = &self.conn.facts;
        let lines = match worker.log.borrow().is_some() {
            true => {
                let mut lines = Vec::with_capacity(512);
                let version = Version::Http3;
                exchange::write_head(
                    worker,
                    facts,
                    &mut lines,
                    &response,
                    terms.head_only,
                    version,
                    true,
                );
                Bytes::from(lines)
            }
            false => Bytes::new(),
        };
        let (made, content) = Made::take(&mut response, terms.head_only);
        let status = made.status();
        let head_len = match (lines.is_empty(), worker.shared.metrics_on) {
            (false, _) => lines.len() as u64,
            (true, true) => made.lines_len(worker, facts),
            (true, false) => 0,
        };
        let head = made.with_fields(worker, facts, |fields| response_of(status, fields));
        let mut sent = 0u64;
        let result = match head {
            Some(head) => {
                let wait = Duration::from_secs_f64(worker.current().gen.config.timeouts.write);
                match written!(self.stream, wait, self.stream.send_response(head)) {
                    Ok(()) if content => {
                        send_body(self.stream, response.body, &mut sent, wait).await
                    }
                    Ok(()) => written!(self.stream, wait, self.stream.finish()),
                    Err(gone) => Err(gone),
                }
            }
            None => {
                self.stream.stop_stream(Code::H3_INTERNAL_ERROR);
                Err(Gone)
            }
        };
        Ok(Sent {
            status,
            head: lines,
            head_len,
            body: sent,
            complete: result.is_ok(),
        })
    }

    async fn switch(&mut self, _: Response) -> Result<(Sent<Bytes>, Option<Tunnel>), Gone> {
        unreachable!("HTTP/3 does not switch protocols: finish answers a 101 with 502")
    }

    async fn tunnel(&mut self, _: Tunnel) {
        unreachable!("HTTP/3 does not switch protocols: finish answers a 101 with 502")
    }

    fn with_request(&self, _: &[u8], record: &mut dyn FnMut(Option<&wire::Request<'_, '_>>)) {
        let mut cookie = Vec::new();
        let mut fields = Vec::with_capacity(self.request.headers().len() + 1);
        let limits = &self.conn.worker.shared.limits;
        let (req, _) = view(self.request, &mut cookie, &mut fields, limits);
        record(Some(&req));
    }
}

fn response_of<'a>(
    status: u16,
    fields: &mut dyn Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Option<http::Response<()>> {
    response(status, fields)
}

/// A handler's body, sent as it arrives (an ESI page as its fragments come).
async fn send_body(
    stream: &mut Stream,
    body: Body,
    sent: &mut u64,
    wait: Duration,
) -> Result<(), Gone> {
    let length = body.length();
    match body {
        Body::Empty => {}
        Body::Full(bytes) => {
            *sent += bytes.len() as u64;
            written!(stream, wait, stream.send_data(bytes))?;
        }
        Body::Ready(chunks) => {
            for chunk in chunks.iter().filter(|c| !c.is_empty()) {
                *sent += chunk.len() as u64;
                written!(stream, wait, stream.send_data(chunk.clone()))?;
            }
        }
        mut body @ Body::Stream { .. } => {
            while let Some(next) = body.next_chunk().await {
                match next {
                    Ok(chunk) if chunk.is_empty() => {}
                    Ok(chunk) => {
                        *sent += chunk.len() as u64;
                        written!(stream, wait, stream.send_data(chunk))?;
                    }
                    Err(e) => {
                        // Broken off after the head went out: a reset tells the client
                        // (and any cache) the body is incomplete.
                        tracing::debug!(error = %e, "body failed while streaming");
                        stream.stop_stream(Code::H3_INTERNAL_ERROR);
                        return Ok(());
                    }
                }
            }
            if length.is_some_and(|l| l != *sent) {
                stream.stop_stream(Code::H3_INTERNAL_ERROR);
                return Ok(());
            }
        }
    }
    written!(stream, wait, stream.finish())
}

/// Whether `seen` body bytes fit the request's declared length (RFC 9114 section 4.1.2:
/// DATA past `content-length` makes the request malformed).
fn within(framing: BodyFraming, seen: u64) -> bool {
    match framing {
        BodyFraming::Length(n) => seen <= n,
        _ => true,
    }
}

/// Whether a body that ended after `seen` bytes is as long as it said (one that ends
/// short is malformed too).
fn complete(framing: BodyFraming, seen: u64) -> bool {
    match framing {
        BodyFraming::Length(n) => seen == n,
        _ => true,
    }
}
