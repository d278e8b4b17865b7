//! The one finisher of a request answered later, whatever protocol carries it (nginx's
//! one request finaliser): the request body read for the handler or skipped, its
//! response awaited, the route's filter and the compression filter run on it, a switch
//! of protocols answered, the head and body handed to the protocol, the response counted
//! and logged, the filter's exchange ended. What differs between HTTP/1 and HTTP/2 (how
//! bytes are read and written, how a client's going away is seen) is a [`Sink`].

use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use handler::{LocalFuture, Response, Tunnel};
use wire::BodyFraming;

use super::served::{self, Sent};
use super::{handled, Exchange, Work};
use crate::facts::ConnFacts;
use crate::metrics;
use crate::reply::Terms;
use crate::worker::Worker;

/// What reading a request body for its handler came to.
pub(crate) enum BodyRead {
    /// The whole body (empty when the request has none).
    Body(Bytes),
    /// Refused with this status (413 past `max_body_size`, 408 past `timeouts.body`),
    /// which the server answers with its status page.
    Refused(u16),
    /// Refused, and the connection ends without an answer (an HTTP/1 body that breaks
    /// its framing: nothing after it can be trusted).
    Close,
}

/// What streaming a request body to its handler came to ([`Sink::pump_body`]).
pub(crate) enum Pumped {
    /// The whole body went to the handler.
    Done,
    /// The handler dropped its end before the body's end (it answered without the
    /// rest): what is left of the body is not read.
    Stopped,
    /// Refused with this status (413 past `limits.max_body_size`, 408 past
    /// `timeouts.body`): the handler's work is dropped (an upstream request aborted, its
    /// connection closed) and the server answers with its status page.
    Refused(u16),
    /// The connection ends without an answer (an HTTP/1 body that breaks its framing).
    Close,
}

/// One protocol's side of a request answered later.
pub(crate) trait Sink {
    /// Why the exchange stopped short: the connection failed or the client went away.
    type Gone;
    /// A sent head, as the protocol keeps it.
    type Head: AsRef<[u8]>;
    /// Whether the protocol switches protocols (HTTP/1's `101`; HTTP/2 has no such
    /// thing, RFC 9113 section 8.6, so an upstream's 101 is a bad answer there: 502).
    const SWITCHES: bool;

    fn worker(&self) -> &Rc<Worker>;
    fn facts(&self) -> ConnFacts;
    /// When the read that brought the request in was taken (for `%D` and the latency).
    fn read_at(&self) -> Option<Instant>;

    /// Reads the request body for the handler, within `limits.max_body_size`.
    async fn read_body(
        &mut self,
        framing: BodyFraming,
        expect_continue: bool,
    ) -> Result<BodyRead, Self::Gone>;
    /// Hands the request body to the handler as it arrives (`writer`'s pipe), reading
    /// the client only as fast as the handler takes the bytes, within
    /// `limits.max_body_size` and `timeouts.body`.
    async fn pump_body(
        &mut self,
        framing: BodyFraming,
        expect_continue: bool,
        writer: handler::BodyWriter,
    ) -> Result<Pumped, Self::Gone>;
    /// The handler answered before the request body's end: the rest is not read (HTTP/1
    /// closes after the response, lingering; HTTP/2 gives the window back and drops it).
    fn abandon_body(&mut self);
    /// Leaves a body nobody reads behind (a response made without it).
    async fn skip_body(&mut self, framing: BodyFraming);
    /// Awaits the handler's response.
    async fn respond(
        &mut self,
        responding: LocalFuture<Result<Response, u16>>,
    ) -> Result<Result<Response, u16>, Self::Gone>;
    /// Sends the response, head and body.
    async fn send(
        &mut self,
        response: Response,
        terms: Terms,
    ) -> Result<Sent<Self::Head>, Self::Gone>;
    /// Whether the protocol reads a request body on while it sends the response, when the
    /// handler answered before the body's end (HTTP/2: gRPC's streams both ways).
    const DUPLEX: bool = false;
    /// [`Sink::send`] while the request body goes on streaming to the handler through
    /// `writer` (only when [`Sink::DUPLEX`]).
    async fn send_duplex(
        &mut self,
        response: Response,
        terms: Terms,
        writer: handler::BodyWriter,
    ) -> Result<Sent<Self::Head>, Self::Gone> {
        drop(writer);
        self.abandon_body();
        self.send(response, terms).await
    }
    /// Answers a `101` (only when [`Sink::SWITCHES`]): its head, and the tunnel to splice
    /// once it is logged (none when the handler handed over none: then it was a 502).
    async fn switch(
        &mut self,
        response: Response,
    ) -> Result<(Sent<Self::Head>, Option<Tunnel>), Self::Gone>;
    /// Splices the connection with the tunnel until either side ends.
    async fn tunnel(&mut self, tunnel: Tunnel);
    /// Calls `record` with the request as the access log sees it (rebuilt from what the
    /// protocol kept of it; `raw_head` is an HTTP/1 request's head as received).
    fn with_request(&self, raw_head: &[u8], record: &mut dyn FnMut(Option<&wire::Request<'_, '_>>));
}

/// What every handler's response goes through before a protocol sends it, whether it
/// waited or not: a `101` where the protocol has no switch becomes a 502, and a page
/// assembled from fragments is counted as ESI.
pub(crate) fn settle(
    worker: &Worker,
    response: &mut Response,
    answered: &mut metrics::Answered,
    switches: bool,
) {
    if response.head.status() == 101 && !switches {
        *response = Response::status_page(502);
    }
    if response.head.assembled() {
        answered.kind = worker.shared.kinds.assembled(answered.kind);
    }
}

/// Finishes a request answered later. Returns whether the connection may go on.
///
/// The exchange comes in its pooled memory and is taken out here, in the future: taken
/// out by the caller, its 0.5 KB were a by-value argument, which made the future's
/// not-yet-started form 1.1 KB copied once more per request (perf's `memmove`).
pub(crate) async fn finish<S: Sink>(
    sink: &mut S,
    exchange: handler::Pooled<Exchange>,
) -> Result<bool, S::Gone> {
    let worker = sink.worker().clone();
    let Exchange {
        work,
        mut filter,
        framing,
        expect_continue,
        mut keep_alive,
        head_only,
        version,
        raw_head,
        mut answered,
        pages,
        again,
        site,
        accepted,
        held: _in_flight,
        notes,
    } = exchange.into_inner();
    // The request body's writer, when the handler answered before its end and the
    // protocol reads it on while the response is sent.
    let mut duplex = None;
    let mut response = match work {
        Work::Ready(response) => {
            sink.skip_body(framing).await;
            response
        }
        Work::Deferred(deferred) => {
            let answer = if deferred.streams_body() && framing != BodyFraming::None {
                match streamed(sink, deferred, framing, expect_continue).await? {
                    Some((answer, whole, writer)) => {
                        keep_alive &= whole;
                        duplex = writer;
                        answer
                    }
                    None => return Ok(false),
                }
            } else {
                match sink.read_body(framing, expect_continue).await? {
                    BodyRead::Body(body) => sink.respond(deferred.respond(body)).await?,
                    BodyRead::Refused(status) => Err(status),
                    BodyRead::Close => return Ok(false),
                }
            };
            // An error an upstream answers in place of (`@upstream:NAME`): sent again.
            let status = match &answer {
                Ok(response) => response.head.status(),
                Err(status) => *status,
            };
            let upstream = pages.as_ref().and_then(|p| p.fallback(status));
            let upstreams = worker.current().upstreams.clone();
            let (answer, fell_back) = match (again, upstream, upstreams) {
                (Some(again), Some(upstream), Some(upstreams)) => {
                    if duplex.take().is_some() {
                        sink.abandon_body();
                    }
                    let sent = again.send(upstreams, upstream.to_string());
                    (sink.respond(handler::local_future(sent)).await?, true)
                }
                _ => (answer, false),
            };
            worker.clock.refresh();
            // The fallback's answer goes out as it is, whatever its status.
            let pages = pages.as_ref().filter(|_| !fell_back);
            handled(
                &worker,
                answer,
                (&mut filter, pages),
                site,
                accepted,
                head_only,
            )
        }
    };
    settle(&worker, &mut response, &mut answered, S::SWITCHES);
    let switching = response.head.status() == 101;
    let (sent, tunnel) = match switching {
        true => sink.switch(response).await?,
        false => {
            let terms = Terms {
                head_only,
                version,
                keep_alive,
            };
            match duplex.take() {
                Some(writer) => (sink.send_duplex(response, terms, writer).await?, None),
                None => (sink.send(response, terms).await?, None),
            }
        }
    };
    worker.clock.refresh();
    let (facts, read_at) = (sink.facts(), sink.read_at());
    let noted = (answered, notes.as_ref());
    served::account(&worker, &facts, read_at, noted, &sent, |record| {
        sink.with_request(&raw_head, record)
    });
    // Ends the exchange for the filter (it may have work of its own to finish).
    drop(filter);
    if switching {
        // The connection ends with the tunnel, or at once when there was none.
        if let Some(tunnel) = tunnel {
            sink.tunnel(tunnel).await;
        }
        return Ok(false);
    }
    Ok(sent.complete && keep_alive)
}

/// A handler's answer to a request whose body streams to it (`request_buffering = false`):
/// the body is pumped from the client while the handler's future runs, so that the
/// handler (the proxy) sends each piece on as it comes. Returns the answer and whether the
/// body was read to its end (else the connection closes after the response), and, for a
/// [`Sink::DUPLEX`] protocol whose handler answered first, the body's writer to go on
/// with; `None`: the connection ends without an answer.
async fn streamed<S: Sink>(
    sink: &mut S,
    deferred: handler::Later,
    framing: BodyFraming,
    expect_continue: bool,
) -> Result<Option<(Result<Response, u16>, bool, Option<handler::BodyWriter>)>, S::Gone> {
    let length = match framing {
        BodyFraming::Length(n) => Some(n),
        _ => None,
    };
    let (writer, reader) = handler::body_pipe(length, handler::PIPE_CAPACITY);
    let mut responding = deferred.respond_streamed(reader);
    let spare = S::DUPLEX.then(|| writer.share());
    let pumped = tokio::select! {
        biased;
        pumped = sink.pump_body(framing, expect_continue, writer) => pumped?,
        // The handler answered first (an origin that answers before reading the whole
        // body, or an upstream that failed before a byte was sent; a gRPC stream).
        answer = &mut responding => {
            let duplex = spare.filter(|_| answer.is_ok());
            if duplex.is_none() {
                sink.abandon_body();
            }
            return Ok(Some((answer, false, duplex)));
        }
    };
    drop(spare);
    Ok(match pumped {
        Pumped::Done => Some((sink.respond(responding).await?, true, None)),
        Pumped::Stopped => {
            sink.abandon_body();
            Some((sink.respond(responding).await?, false, None))
        }
        // Dropping the handler's future aborts its upstream request.
        Pumped::Refused(status) => Some((Err(status), false, None)),
        Pumped::Close => None,
    })
}
