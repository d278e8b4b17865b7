//! The upstream HTTP/1.1 client: per worker and per upstream, a pool of keep-alive
//! connections on hyper's client connection API, at most `max_connections` of them, with
//! connect and response timeouts and the upstream's circuit breaker in front.
//!
//! Why not hyper-util's pooled client: it wants a `Send` executor and has no cap on
//! connections per host. A worker is single threaded, so the pool is a `RefCell`'d stack
//! of idle senders and a semaphore; only the connection driver (which is `Send`) is
//! spawned, with `tokio::spawn`, which on a current-thread runtime runs on this thread.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant, Sleep};

use crate::breaker::{Breaker, BreakerState, Ticket};
use crate::config::{secs, UpstreamConfig};
use crate::error::UpstreamError;

type Sender = SendRequest<Full<Bytes>>;

pub(crate) struct Upstream {
    pub(crate) name: String,
    addresses: Vec<String>,
    next_address: Cell<usize>,
    /// `path_prefix`: prepended to every request's path.
    path_prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    permits: Arc<Semaphore>,
    idle: RefCell<Vec<Sender>>,
    max_idle: usize,
    breaker: Breaker,
    /// Connections opened so far (for tests and metrics: reuse shows as a low count).
    opened: Cell<u64>,
}

/// A connection checked out of the pool, with its permit. [`Pooled::release`] returns it
/// for reuse once its response is fully read; dropping it closes the connection.
pub(crate) struct Pooled {
    sender: Option<Sender>,
    upstream: Rc<Upstream>,
    _permit: OwnedSemaphorePermit,
}

impl Pooled {
    pub(crate) fn response_timeout(&self) -> Duration {
        self.upstream.response_timeout
    }

    pub(crate) fn release(mut self) {
        if let Some(s) = self.sender.take() {
            let mut idle = self.upstream.idle.borrow_mut();
            if !s.is_closed() && idle.len() < self.upstream.max_idle {
                idle.push(s);
            }
        }
    }
}

/// Reports a call to the breaker when the call ends, also when it is dropped midway
/// (the client went away): a lost half-open probe would otherwise leave the breaker
/// refusing calls for good. A call that did not finish counts as a failure.
struct Outcome<'a> {
    breaker: &'a Breaker,
    ticket: Ticket,
    success: bool,
}

impl Drop for Outcome<'_> {
    fn drop(&mut self) {
        self.breaker.record(self.ticket, self.success);
    }
}

/// One upstream's counters, for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamStats {
    /// TCP connections opened since start.
    pub connections_opened: u64,
    /// Idle keep-alive connections in the pool now.
    pub idle: usize,
    /// The circuit breaker's state.
    pub breaker: BreakerState,
}

impl Upstream {
    pub(crate) fn new(c: &UpstreamConfig) -> Upstream {
        Upstream {
            name: c.name.clone(),
            addresses: c.addresses.clone(),
            next_address: Cell::new(0),
            path_prefix: c.path_prefix.clone(),
            connect_timeout: secs(c.connect_timeout),
            response_timeout: secs(c.response_timeout),
            permits: Arc::new(Semaphore::new(c.max_connections)),
            idle: RefCell::new(Vec::new()),
            max_idle: c.max_idle,
            breaker: Breaker::new(&c.name, c.breaker_failures, secs(c.breaker_cool_down)),
            opened: Cell::new(0),
        }
    }

    pub(crate) fn stats(&self) -> UpstreamStats {
        UpstreamStats {
            connections_opened: self.opened.get(),
            idle: self.idle.borrow().len(),
            breaker: self.breaker.state(),
        }
    }

    /// Sends `req` and waits for the response head, by `deadline` at the latest (and
    /// within the response timeout). The breaker hears of the outcome: connect errors,
    /// timeouts and 5xx count as failures.
    pub(crate) async fn send(
        self: &Rc<Self>,
        mut req: http::Request<Full<Bytes>>,
        deadline: Instant,
    ) -> Result<(http::Response<Incoming>, Pooled), UpstreamError> {
        if !self.path_prefix.is_empty() {
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
            if let Ok(uri) = format!("{}{target}", self.path_prefix).parse() {
                *req.uri_mut() = uri;
            }
        }
        let Some(ticket) = self.breaker.try_call() else {
            return Err(UpstreamError::BreakerOpen {
                upstream: self.name.clone(),
            });
        };
        let mut outcome = Outcome {
            breaker: &self.breaker,
            ticket,
            success: false,
        };
        let result = self.send_inner(req, deadline).await;
        outcome.success = matches!(&result, Ok((resp, _)) if !resp.status().is_server_error());
        result
    }

    async fn send_inner(
        self: &Rc<Self>,
        req: http::Request<Full<Bytes>>,
        deadline: Instant,
    ) -> Result<(http::Response<Incoming>, Pooled), UpstreamError> {
        let deadline = deadline.min(Instant::now() + self.response_timeout);
        let timed_out = || UpstreamError::ResponseTimeout {
            upstream: self.name.clone(),
        };
        let permit = timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .expect("the pool's semaphore is never closed");
        let idempotent = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
        // A pooled connection may have been closed by the origin a moment ago; an
        // idempotent request that fails on one is retried on the next pooled connection,
        // or a new one (RFC 9110 9.2.2 allows retrying idempotent requests).
        loop {
            let (mut sender, reused) = match self.take_idle() {
                Some(s) => (s, true),
                None => (self.connect(deadline).await?, false),
            };
            let sent = clone_request(&req);
            match timeout_at(deadline, sender.send_request(sent)).await {
                Err(_) => return Err(timed_out()),
                Ok(Ok(resp)) => {
                    let pooled = Pooled {
                        sender: Some(sender),
                        upstream: self.clone(),
                        _permit: permit,
                    };
                    return Ok((resp, pooled));
                }
                Ok(Err(e)) if reused && idempotent => {
                    tracing::debug!(upstream = %self.name, error = %e, "stale pooled connection; retrying");
                }
                Ok(Err(e)) => {
                    return Err(UpstreamError::Protocol {
                        upstream: self.name.clone(),
                        message: e.to_string(),
                    })
                }
            }
        }
    }

    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.borrow_mut();
        while let Some(s) = idle.pop() {
            if !s.is_closed() && s.is_ready() {
                return Some(s);
            }
        }
        None
    }

    /// Opens a connection to the next address in turn; when that one refuses, the
    /// following ones are tried, all within one connect timeout.
    async fn connect(&self, deadline: Instant) -> Result<Sender, UpstreamError> {
        let connect_deadline = deadline.min(Instant::now() + self.connect_timeout);
        let failed = |message: String| UpstreamError::Connect {
            upstream: self.name.clone(),
            message,
        };
        let mut last_error = None;
        let mut stream = None;
        for _ in 0..self.addresses.len() {
            let i = self.next_address.get();
            self.next_address.set(i.wrapping_add(1));
            let address = &self.addresses[i % self.addresses.len()];
            match timeout_at(connect_deadline, TcpStream::connect(address.as_str())).await {
                Err(_) => {
                    return Err(UpstreamError::ConnectTimeout {
                        upstream: self.name.clone(),
                    })
                }
                Ok(Err(e)) => last_error = Some(failed(format!("{address}: {e}"))),
                Ok(Ok(s)) => {
                    stream = Some(s);
                    break;
                }
            }
        }
        let Some(stream) = stream else {
            return Err(last_error.unwrap_or_else(|| failed("no addresses".into())));
        };
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.opened.set(self.opened.get() + 1);
        let name = self.name.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(upstream = %name, error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }
}

/// Requests are sent with a `Full` body, which clones cheaply (`Bytes`).
fn clone_request(req: &http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let mut r = http::Request::new(req.body().clone());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = req.uri().clone();
    *r.version_mut() = req.version();
    *r.headers_mut() = req.headers().clone();
    r
}

/// Reads a whole body by `deadline`, at most `limit` bytes, handing each chunk to
/// `chunk`, then releases the connection to the pool.
async fn read_chunks(
    mut body: Incoming,
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
    mut chunk: impl FnMut(Bytes),
) -> Result<(), UpstreamError> {
    let name = pooled.upstream.name.clone();
    let mut len = 0;
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(UpstreamError::ResponseTimeout { upstream: name }),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(UpstreamError::Protocol {
                    upstream: name,
                    message: e.to_string(),
                })
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    len += data.len();
                    if len > limit {
                        return Err(UpstreamError::TooLarge { upstream: name });
                    }
                    chunk(data);
                }
            }
        }
    }
    pooled.release();
    Ok(())
}

/// A whole body as bytes of its own (see [`read_chunks`]). A frame is a slice of the
/// connection's read buffer, which is far larger than a small body: kept in the cache, it
/// would hold the whole buffer alive beyond the cache's weight. So the body is always
/// copied once into an exact-size buffer (once per fill; a hit shares it, uncopied).
pub(crate) async fn read_bytes(
    body: Incoming,
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
) -> Result<Bytes, UpstreamError> {
    let mut parts: Vec<Bytes> = Vec::new();
    read_chunks(body, pooled, limit, deadline, |b| parts.push(b)).await?;
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => Bytes::copy_from_slice(&parts[0]),
        _ => Bytes::from(parts.concat()),
    })
}

/// A whole body compiled as ESI while it arrives (see [`read_chunks`]): each chunk goes
/// to the compiler as it comes (tags may straddle chunks; text stays zero-copy slices of
/// the chunks), so the body is never copied into one buffer.
pub(crate) async fn read_template(
    body: Incoming,
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
) -> Result<esi::Template, UpstreamError> {
    let mut compiler = esi::Compiler::new(&esi::Options::default());
    read_chunks(body, pooled, limit, deadline, |b| compiler.feed(b)).await?;
    Ok(compiler.finish())
}

/// [`read_template`], also keeping the chunks (the buffers the template's text points
/// into, so keeping them costs no memory) for the cache's shared tier. Each chunk is
/// first copied into an exact-size buffer, so a stored template does not keep the
/// connection's larger read buffers alive (see [`read_bytes`]).
pub(crate) async fn read_template_with_source(
    body: Incoming,
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
) -> Result<(esi::Template, Vec<Bytes>), UpstreamError> {
    let mut compiler = esi::Compiler::new(&esi::Options::default());
    let mut source = Vec::new();
    read_chunks(body, pooled, limit, deadline, |b| {
        let b = Bytes::copy_from_slice(&b);
        source.push(b.clone());
        compiler.feed(b)
    })
    .await?;
    Ok((compiler.finish(), source))
}

/// A response body passed through as it arrives; the connection goes back to the pool
/// when the body ends, and is closed if the body is dropped before.
pub(crate) struct PassBody {
    body: Incoming,
    pooled: Option<Pooled>,
    idle_timeout: Duration,
    /// Reset whenever a frame arrives: the longest silence allowed inside the body.
    idle: Pin<Box<Sleep>>,
}

impl PassBody {
    pub(crate) fn new(body: Incoming, pooled: Pooled) -> PassBody {
        let idle_timeout = pooled.upstream.response_timeout;
        PassBody {
            body,
            pooled: Some(pooled),
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
        }
    }

    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        let Some(pooled) = self.pooled.as_ref() else {
            return Poll::Ready(None);
        };
        let name = pooled.upstream.name.clone();
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => {
                    if self.idle.as_mut().poll(cx).is_ready() {
                        self.pooled = None;
                        return Poll::Ready(Some(Err(UpstreamError::ResponseTimeout {
                            upstream: name,
                        })));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(None) => {
                    if let Some(p) = self.pooled.take() {
                        p.release();
                    }
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    self.pooled = None;
                    return Poll::Ready(Some(Err(UpstreamError::Protocol {
                        upstream: name,
                        message: e.to_string(),
                    })));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let deadline = Instant::now() + self.idle_timeout;
                    self.idle.as_mut().reset(deadline);
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            return Poll::Ready(Some(Ok(data)));
                        }
                    }
                }
            }
        }
    }
}
