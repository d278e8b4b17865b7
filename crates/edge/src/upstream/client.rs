//! The upstream HTTP/1.1 client: per worker, per upstream and per peer, a pool of
//! keep-alive connections, at most `max_connections` of them, with connect and response
//! timeouts; the peer chosen by the upstream's balancer among those its shared health
//! ([`crate::upstream::peers`]) lets through, and a request that fails to connect, or whose
//! connection breaks before any response byte, retried on another peer within `retries`
//! and the retry budget.
//!
//! Written on `wire`'s codec rather than on hyper's client (which it replaced; measured in
//! docs/benchmarks.md, issue 26): hyper's connection is a task of its own that the request
//! reaches through a channel, so every proxied request cost two task switches, a request
//! and a header map built and cloned for it, and two writes; here the request is encoded
//! once into the connection's own buffer and written with one system call by the task
//! that awaits the response, whose head is parsed in the connection's read buffer
//! (`wire::parse_response`, as strict as the request parser) and whose body is handed on
//! as slices of that buffer. A worker is single threaded, so the pool is a `RefCell`'d
//! stack of idle connections and a semaphore.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use evloop::time::{timeout_at, Instant};
use handler::FieldList;
use http::{Method, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wire::{ChunkedDecoder, ResponseFraming};

use crate::config::{secs, Balance, Protocol, UpstreamConfig};
use crate::error::UpstreamError;
use crate::metrics::{self, UpstreamCounts};
use crate::upstream::balance::{self, Balancer, HashKey};
pub(crate) use crate::upstream::outgoing::{Fields, Outgoing};
use crate::upstream::peers::{PeerSet, PeerState, Ticket};
use crate::upstream::stream::{OpenError, Stream};

/// Largest response head accepted from an upstream (status line and fields). 64 KiB:
/// four times the request limit, for origins that set many cookies.
const MAX_HEAD: usize = 64 * 1024;
/// Most fields in a response head.
const MAX_FIELDS: usize = wire::MAX_HEADERS_CAP;
/// Room a connection's read buffer starts with and keeps free before each read: most
/// heads and small bodies arrive in one read.
const READ_ROOM: usize = 16 * 1024;
/// A request body up to this size is copied behind the head and written with it; a
/// larger one goes out in a vectored write.
const COPY_BODY: usize = 16 * 1024;
/// How much shorter than the response timeout a caller's deadline must be to be its own
/// (see `Failure::peer_fault`).
const CALLERS_MARGIN: Duration = Duration::from_millis(10);
/// Most bytes one read asks for: a body of 64 KiB arrives in one read when the socket
/// has it all.
const MAX_READ: usize = 64 * 1024;

pub(crate) struct Upstream {
    pub(crate) name: String,
    /// The peers and their health, shared with every worker.
    pub(crate) set: Arc<PeerSet>,
    /// This worker's pool for each peer of `set`, in the same order.
    peers: Box<[PeerPool]>,
    balancer: Balancer,
    /// `balancer_script`: chooses before `balancer`, which chooses when it does not.
    hook: Option<Arc<dyn handler::BalancerHook>>,
    /// Whether the requests in flight are counted: the balance reads them (least_conn,
    /// random_two), or the metrics (an HTTP/2 upstream's streams).
    counts_in_flight: bool,
    hash_key: HashKey,
    send_proxy: Option<crate::config::SendProxy>,
    retries: u32,
    fail_status: Vec<u16>,
    /// `path_prefix`: prepended to every request's path.
    path_prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `protocol`, and with HTTP/2 `max_streams_per_connection`.
    protocol: Protocol,
    max_streams_per_connection: u32,
    /// Connections opened by every worker, for the operator.
    opened_total: Arc<AtomicU64>,
    /// This worker's figures for every upstream; this one's at `figures_index`.
    figures: Arc<[UpstreamCounts]>,
    figures_index: usize,
}

/// One worker's connections to one peer.
struct PeerPool {
    permits: Arc<Semaphore>,
    /// Boxed: a connection moves between the pool and a response body, which stay small,
    /// and moving it is a pointer copy.
    #[allow(clippy::vec_box)]
    idle: RefCell<Vec<Box<Conn>>>,
    max_idle: usize,
    /// Connections opened by this worker (for tests: reuse shows as a low count).
    opened: Cell<u64>,
    /// With `protocol = "h2"`/`"h2c"`: the connections and their streams.
    h2: crate::upstream::h2::H2Pool,
}

/// A request in flight to a peer, from sending to the end of its response body: counted
/// in the peer's count shared by every worker ([`PeerSet::in_flight`], for least_conn
/// and random_two) while it lives, so the count goes back down on every path: a
/// success, an error, or a request dropped half way (a client gone, a timeout). It holds
/// the worker's `Rc`, not an `Arc`: no atomic reference count per request. Counted only
/// when the upstream's balance reads the counts: round robin and hash pay nothing for
/// them (two writes per request to a line every worker writes).
struct Busy {
    upstream: Rc<Upstream>,
    peer: u32,
    counted: bool,
}

impl Busy {
    fn new(upstream: &Rc<Upstream>, peer: usize) -> Busy {
        let counted = upstream.counts_in_flight;
        if counted {
            upstream.set.begin(peer);
        }
        Busy {
            upstream: upstream.clone(),
            peer: peer as u32,
            counted,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.counted {
            self.upstream.set.end(self.peer as usize);
        }
    }
}

/// One open connection to an upstream, with its buffers (kept while it is pooled, so a
/// reused connection allocates nothing).
struct Conn {
    stream: Stream,
    /// Response bytes read and not yet handed on.
    read: BytesMut,
    /// The request being written.
    write: Vec<u8>,
    /// The client its PROXY header named (`send_proxy`): it carries no one else's.
    client: Option<SocketAddr>,
}

/// A response head as the proxy reads it: its fields in the seam's form, names
/// lower-cased, so that passed through they become the response's head as they are.
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) version: http::Version,
    pub(crate) headers: FieldList,
}

/// A connection checked out of the pool with its permit, positioned at the start of a
/// response body. Reading the body to its end returns the connection to the pool;
/// dropping it before closes the connection.
pub(crate) struct Pooled {
    conn: Option<Box<Conn>>,
    body: BodyState,
    keep_alive: bool,
    _permit: OwnedSemaphorePermit,
    busy: Busy,
}

enum BodyState {
    /// This many bytes left.
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the upstream closes.
    Close,
    Done,
    /// An HTTP/2 stream's DATA, until its end.
    H2(crate::upstream::h2::H2Stream),
}

impl Conn {
    /// Reads more bytes into the buffer, `want` more at most (a body's remaining length
    /// when known, so a large body arrives in few reads and a small one does not grow the
    /// buffer); `UnexpectedEof` when the upstream closed.
    fn poll_fill(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<()>> {
        let room = want.clamp(READ_ROOM, MAX_READ);
        if self.read.capacity() - self.read.len() < room / 4 {
            self.read.reserve(room);
        }
        // A read through `AsyncRead` (not `try_read`): after a short read tokio forgets
        // the socket's readiness, so the next wait goes to epoll instead of first making
        // a read that can only say EAGAIN (the response to the next request is never
        // there yet when it is sent).
        let read = tokio::io::AsyncReadExt::read_buf(&mut self.stream, &mut self.read);
        match ready!(std::pin::pin!(read).poll(cx)) {
            Ok(0) => Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Writes the encoded request head and the body: one write when the body is small.
    async fn send(&mut self, body: &Bytes) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        if body.len() <= COPY_BODY {
            self.write.extend_from_slice(body);
            self.stream.write_all(&self.write).await?;
            // Nothing for TCP; TLS may hold records the socket did not take yet.
            return self.stream.flush().await;
        }
        let mut head_left = &self.write[..];
        let mut body_left = &body[..];
        while !head_left.is_empty() {
            let slices = [io::IoSlice::new(head_left), io::IoSlice::new(body_left)];
            let n = self.stream.write_vectored(&slices).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let from_head = n.min(head_left.len());
            head_left = &head_left[from_head..];
            body_left = &body_left[n - from_head..];
        }
        self.stream.write_all(body_left).await?;
        self.stream.flush().await
    }

    /// Whether a pooled connection is still usable before a request that must not be sent
    /// twice: the upstream may have closed it (or sent something unasked) while it was
    /// idle. Costs one system call, so it is done only for such requests.
    fn still_open(&mut self) -> bool {
        self.stream.still_open()
    }
}

/// Reports a request to its peer's health when it ends. A probe dropped midway (the
/// client went away) counts as a failure, or the peer would wait for it for good; any
/// other request dropped midway is not counted: the peer did nothing wrong.
struct Outcome<'a> {
    set: &'a PeerSet,
    ticket: Ticket,
    /// `Some(success)` once known.
    result: Option<bool>,
}

impl Drop for Outcome<'_> {
    fn drop(&mut self) {
        match self.result {
            Some(success) => self.set.record(self.ticket, success),
            None if self.ticket.is_probe() => self.set.record(self.ticket, false),
            None => {}
        }
    }
}

/// One upstream's counters, for tests and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamStats {
    /// TCP connections opened since start (by this worker, to every peer).
    pub connections_opened: u64,
    /// Idle keep-alive connections in the pools now.
    pub idle: usize,
    /// Each peer's address and state.
    pub peers: Vec<(String, PeerState)>,
}

/// Why one attempt on a connection failed.
enum Attempt {
    /// The connection broke before any response byte came: a pooled connection the
    /// upstream had closed, worth another try for an idempotent request.
    Broken(io::Error),
    Failed(UpstreamError),
    /// The client's streamed body broke off: nothing the peer did.
    Body(String),
}

/// Why one attempt on a peer failed, and whether another peer may be tried.
struct Failure {
    error: UpstreamError,
    /// Nothing of the request can have been acted on: the connection was refused or not
    /// accepted in time, or an idempotent request's connection broke before any response
    /// byte.
    retryable: bool,
    /// Whether the peer's health hears of it: not when the caller's own deadline (an
    /// include's timeout shorter than the response timeout) or this worker's connection
    /// limit ran out, which says nothing about the peer.
    peer_fault: bool,
}

impl Failure {
    fn of(error: UpstreamError, retryable: bool, peer_fault: bool) -> Failure {
        Failure {
            error,
            retryable,
            peer_fault,
        }
    }
}

impl Upstream {
    /// `set`: the upstream's peers and health, shared by every worker. `figures`: this
    /// worker's counters for every upstream, this one's at `index`. `seed` varies the
    /// worker's random choices.
    pub(crate) fn new(
        c: &UpstreamConfig,
        set: Arc<PeerSet>,
        opened_total: Arc<AtomicU64>,
        figures: Arc<[UpstreamCounts]>,
        index: usize,
        seed: u64,
    ) -> Upstream {
        let peers = set
            .peers
            .iter()
            .map(|p| PeerPool {
                permits: Arc::new(Semaphore::new(p.max_connections)),
                idle: RefCell::new(Vec::new()),
                max_idle: p.max_idle,
                opened: Cell::new(0),
                h2: Default::default(),
            })
            .collect::<Box<[_]>>();
        Upstream {
            name: c.name.clone(),
            balancer: Balancer::new(c.balance, peers.len(), seed),
            hook: c.balancer_hook.clone(),
            counts_in_flight: matches!(c.balance, Balance::LeastConn | Balance::RandomTwo)
                || c.protocol != Protocol::H1,
            peers,
            set,
            hash_key: HashKey::parse(&c.hash_key),
            send_proxy: c.send_proxy,
            retries: c.retries,
            fail_status: c.fail_status.clone(),
            path_prefix: c.path_prefix.clone(),
            connect_timeout: secs(c.connect_timeout),
            response_timeout: secs(c.response_timeout),
            protocol: c.protocol,
            max_streams_per_connection: c.max_streams_per_connection,
            opened_total,
            figures,
            figures_index: index,
        }
    }

    pub(crate) fn stats(&self) -> UpstreamStats {
        UpstreamStats {
            connections_opened: self.peers.iter().map(|p| p.opened.get()).sum(),
            idle: self.peers.iter().map(|p| p.idle.borrow().len()).sum(),
            peers: (0..self.peers.len())
                .map(|i| (self.set.peers[i].address.to_string(), self.set.state(i)))
                .collect(),
        }
    }

    /// Whether the peers are spoken to in HTTP/2.
    pub(crate) fn speaks_h2(&self) -> bool {
        self.protocol != Protocol::H1
    }

    /// Whether every peer is out now (a request would fail at once).
    pub(crate) fn all_down(&self) -> bool {
        self.set.healthy() == 0
    }

    /// The hash key of a request, when the upstream balances by hash.
    fn hash_of(&self, req: &Outgoing<'_>) -> Option<u64> {
        let fields = match &req.fields {
            Fields::Plain(fields) => *fields,
            Fields::Forwarded(f) => f.client_headers,
        };
        self.hash_key.of(
            req.target,
            req.client().map(|c| c.ip()),
            |name| fields.get(name),
            fields.get_all(http::header::COOKIE).iter(),
        )
    }

    /// Sends `req` and waits for the response head, by `deadline` at the latest (and
    /// within the response timeout), on the peer the balancer picks; when that fails
    /// before anything of the request can have been acted on, on another peer, up to
    /// `retries` times within the retry budget. Each peer's health hears how its attempt
    /// went: errors and the statuses of `fail_status` count as failures. The figures
    /// count each attempt by outcome, and the time to its response head.
    pub(crate) async fn send(
        self: &Rc<Self>,
        req: &Outgoing<'_>,
        deadline: Instant,
    ) -> Result<(Head, Pooled), UpstreamError> {
        let counts = &self.figures[self.figures_index];
        let key = match self.balancer_hashes() {
            true => self.hash_of(req),
            false => None,
        };
        self.set.budget.deposit();
        let mut tried = Vec::new();
        let mut retries = self.retries;
        loop {
            let hooked = self.hook.as_deref();
            let pick =
                balance::hooked(hooked, (&self.name, &self.set), req, &tried).or_else(|| {
                    let in_flight = |i| self.set.in_flight(i);
                    self.balancer.pick(&self.set, in_flight, key, &tried)
                });
            let ticket = pick.and_then(|i| self.set.claim(i, self.set.now_ms()));
            let Some(ticket) = ticket else {
                if pick.is_some() {
                    // Another worker took that peer's probe a moment ago: look again.
                    tried.push(pick.unwrap_or_default());
                    continue;
                }
                counts.record(metrics::BREAKER_OPEN, None);
                return Err(UpstreamError::Unavailable {
                    upstream: self.name.clone(),
                });
            };
            let mut outcome = Outcome {
                set: &self.set,
                ticket,
                result: None,
            };
            // The loop turn's clock (`evloop::time`): the attempt's deadlines below are
            // early, and its times (the histogram's, the access log's upstream times)
            // off, by at most how long the turn has run, as nginx's cached msec; no
            // clock read per attempt.
            let started = evloop::time::now();
            let connected = Cell::new(None);
            let span = req.trace.map(super::outgoing::Span::begin);
            let at = (ticket.peer, span.as_ref().map(|s| s.hop));
            let result = self.attempt(at, req, deadline, &connected).await;
            if let Some(span) = span {
                let status = result.as_ref().ok().map(|(head, _)| head.status.as_u16());
                span.end(
                    req,
                    (&self.name, &self.set.peers[ticket.peer].address),
                    status,
                );
            }
            let elapsed = evloop::time::now().saturating_duration_since(started);
            let micros = elapsed.as_micros() as u64;
            if let Some(notes) = req.notes {
                let times = (started, elapsed, connected.get());
                self.note(notes, ticket.peer, &result, times);
            }
            match result {
                Ok((head, pooled)) => {
                    let status = head.status.as_u16();
                    counts.record(metrics::outcome(Ok(status)), Some(micros));
                    outcome.result = Some(!self.fail_status.contains(&status));
                    return Ok((head, pooled));
                }
                Err(failure) => {
                    counts.record(metrics::outcome(Err(&failure.error)), None);
                    outcome.result = failure.peer_fault.then_some(false);
                    drop(outcome);
                    let others = retries > 0 && tried.len() + 1 < self.peers.len();
                    if !failure.retryable && others && req.streamed.is_some_and(|b| b.taken() > 0) {
                        tracing::warn!(upstream = %self.name, peer = %self.set.peers[ticket.peer].address,
                            error = %failure.error, "not retried on another peer: the request body was sent");
                        if let Some(notes) = req.notes {
                            notes.not_retried("body_sent");
                        }
                    }
                    let now = self.set.now_ms();
                    if !failure.retryable
                        || retries == 0
                        || evloop::time::now() >= deadline
                        || !self.set.budget.withdraw(now)
                    {
                        return Err(failure.error);
                    }
                    retries -= 1;
                    tried.push(ticket.peer);
                    if tried.len() >= self.peers.len() {
                        return Err(failure.error);
                    }
                    tracing::debug!(upstream = %self.name, peer = %self.set.peers[ticket.peer].address,
                        error = %failure.error, "retrying on another peer");
                }
            }
        }
    }

    /// Notes an attempt on `peer` for the access log: begun at `started`, ended (its
    /// response head read, or failed) after `elapsed`, connected after `connect` (zero on
    /// a pooled connection).
    fn note(
        &self,
        notes: &handler::LogNotes,
        peer: usize,
        result: &Result<(Head, Pooled), Failure>,
        (started, elapsed, connect): (Instant, Duration, Option<Duration>),
    ) {
        let (status, timed_out) = match result {
            Ok((head, _)) => (Some(head.status.as_u16()), false),
            Err(f) => {
                let timed_out = matches!(
                    f.error,
                    UpstreamError::ConnectTimeout { .. } | UpstreamError::ResponseTimeout { .. }
                );
                (None, timed_out)
            }
        };
        notes.attempt(handler::UpstreamAttempt {
            peer: self.set.peers[peer].address.clone(),
            status,
            timed_out,
            connect,
            header: status.map(|_| elapsed),
            started: started.into_std(),
            // The answering attempt's time runs until its response is sent.
            total: result.is_err().then_some(elapsed),
        });
    }

    fn balancer_hashes(&self) -> bool {
        self.set.hashes()
    }

    /// One attempt on peer `peer`, as the trace's span `hop`; `connected` says how long
    /// connecting took (zero on a pooled connection), once it has.
    async fn attempt(
        self: &Rc<Self>,
        (peer, hop): (usize, Option<trace::Hop>),
        req: &Outgoing<'_>,
        deadline: Instant,
        connected: &Cell<Option<Duration>>,
    ) -> Result<(Head, Pooled), Failure> {
        let busy = Busy::new(self, peer);
        let pool = &self.peers[peer];
        let own = evloop::time::now() + self.response_timeout;
        // The caller's own deadline, when clearly shorter than the response timeout (a
        // page's is the response timeout, computed a moment before; a retry's is later).
        let callers = deadline + CALLERS_MARGIN < own;
        let deadline = deadline.min(own);
        let timed_out = |peer_fault: bool| Failure {
            error: UpstreamError::ResponseTimeout {
                upstream: self.name.clone(),
            },
            retryable: false,
            peer_fault,
        };
        let permit = timeout_at(deadline, pool.permits.clone().acquire_owned())
            .await
            .map_err(|_| timed_out(false))?
            .expect("the pool's semaphore is never closed");
        if self.protocol != Protocol::H1 {
            let at = (peer, hop);
            return self
                .attempt_h2(at, req, (deadline, callers), (permit, busy))
                .await;
        }
        let idempotent = req.idempotent();
        // A pooled connection may have been closed by the upstream a moment ago; an
        // idempotent request that fails on one before any response byte is retried on
        // the next pooled connection of the same peer, or a new one. A streamed body
        // cannot be sent twice: its pooled connection is checked first.
        let resends = idempotent && req.streamed.is_none();
        loop {
            // Timed only when the access log writes it; zero on a pooled connection.
            let (mut conn, reused) = match self.take_idle(peer, resends, req.client()) {
                Some(c) => {
                    connected.set(req.notes.map(|_| Duration::ZERO));
                    (c, true)
                }
                None => {
                    let connecting = req.notes.map(|_| evloop::time::now());
                    let conn =
                        self.connect(peer, deadline, req.client())
                            .await
                            .map_err(|error| Failure {
                                error,
                                retryable: true,
                                peer_fault: true,
                            })?;
                    connected
                        .set(connecting.map(|t| evloop::time::now().saturating_duration_since(t)));
                    (conn, false)
                }
            };
            let head_request = *req.method == Method::HEAD;
            let attempt = match req.streamed {
                Some(body) => {
                    self.send_streamed(&mut conn, req, (hop, head_request), body)
                        .await
                }
                None => timeout_at(deadline, async {
                    req.encode(&mut conn.write, &self.path_prefix, hop);
                    conn.send(req.body).await.map_err(Attempt::Broken)?;
                    self.read_head(&mut conn, head_request, req.upgrade.is_some())
                        .await
                })
                .await
                .map_err(|_| timed_out(!callers))?,
            };
            // Once a byte of a streamed body went out, the request cannot be sent again.
            let resendable = req.streamed.map_or(true, |b| b.taken() == 0);
            match attempt {
                Ok((head, body, keep_alive)) => {
                    let pooled = Pooled {
                        conn: Some(conn),
                        body,
                        keep_alive,
                        _permit: permit,
                        busy,
                    };
                    return Ok((head, pooled));
                }
                Err(Attempt::Broken(e)) if reused && idempotent && resendable => {
                    tracing::debug!(upstream = %self.name, error = %e, "stale pooled connection; retrying");
                }
                Err(Attempt::Broken(e)) => {
                    let message = match resendable {
                        true => e.to_string(),
                        false => format!("{e} (not retried: the request body was sent)"),
                    };
                    let error = UpstreamError::Protocol {
                        upstream: self.name.clone(),
                        message,
                    };
                    let retryable = idempotent && resendable;
                    return Err(Failure::of(error, retryable, true));
                }
                Err(Attempt::Failed(error)) => return Err(Failure::of(error, false, true)),
                Err(Attempt::Body(message)) => {
                    let upstream = self.name.clone();
                    let error = UpstreamError::RequestBody { upstream, message };
                    return Err(Failure::of(error, false, false));
                }
            }
        }
    }

    /// Reads and parses the response head (skipping interim 1xx responses), leaving the
    /// body's first bytes in the buffer.
    async fn read_head(
        &self,
        conn: &mut Conn,
        head_request: bool,
        upgrade: bool,
    ) -> Result<(Head, BodyState, bool), Attempt> {
        let mut received = false;
        loop {
            if !conn.read.is_empty() {
                received = true;
                let mut storage = wire::HeaderStorage::new();
                let parsed = if upgrade {
                    wire::parse_upgrade_response(&conn.read, &mut storage, MAX_HEAD, MAX_FIELDS)
                } else {
                    wire::parse_response(
                        &conn.read,
                        &mut storage,
                        head_request,
                        MAX_HEAD,
                        MAX_FIELDS,
                    )
                }
                .map_err(|e| {
                    // The operator's one clue to a 502 that the origin caused (nginx logs
                    // "upstream sent invalid header" the same way).
                    tracing::warn!(upstream = %self.name, reason = %e, "upstream response head refused");
                    self.protocol(format!("response head: {e}"))
                })?;
                if let Some(r) = parsed {
                    let head_len = r.head_len;
                    if r.is_interim() {
                        conn.read.advance(head_len);
                        continue;
                    }
                    let head = self.head(&r, head_len)?;
                    let body = match r.body {
                        ResponseFraming::None => BodyState::Done,
                        ResponseFraming::Length(n) => BodyState::Length(n),
                        ResponseFraming::Chunked => {
                            BodyState::Chunked(ChunkedDecoder::new(MAX_HEAD))
                        }
                        ResponseFraming::Close => BodyState::Close,
                    };
                    let keep_alive = r.keep_alive;
                    conn.read.advance(head_len);
                    return Ok((head, body, keep_alive));
                }
            }
            match std::future::poll_fn(|cx| conn.poll_fill(cx, READ_ROOM)).await {
                Ok(()) => {}
                Err(e) if !received => return Err(Attempt::Broken(e)),
                Err(e) => return Err(self.protocol(e.to_string())),
            }
        }
    }

    /// The head of `r` (`head_len` bytes long), its fields copied into one list whose
    /// buffers are those of a head this worker sent before (no allocation). The parser
    /// let through only token names and the values a field may hold.
    fn head(&self, r: &wire::ParsedResponse<'_, '_>, head_len: usize) -> Result<Head, Attempt> {
        // Room for every name and value (the head holds them, and more), and for the Via
        // that the proxy appends.
        let mut headers = FieldList::with_capacity(r.headers.len() + 1, head_len + 32);
        for h in r.headers {
            headers.append_lowercase(h.name.as_bytes(), h.value);
        }
        Ok(Head {
            status: StatusCode::from_u16(r.status)
                .map_err(|_| self.protocol(format!("status {}", r.status)))?,
            version: match r.version {
                wire::Version::Http10 => http::Version::HTTP_10,
                wire::Version::Http11 => http::Version::HTTP_11,
                wire::Version::Http2 => http::Version::HTTP_2,
                wire::Version::Http3 => http::Version::HTTP_3,
            },
            headers,
        })
    }

    fn protocol(&self, message: String) -> Attempt {
        Attempt::Failed(UpstreamError::Protocol {
            upstream: self.name.clone(),
            message,
        })
    }

    /// The most recently used idle connection to `peer` (its buffers and the peer's
    /// socket state are warmest). Before a request that must not be sent twice, one the
    /// peer closed meanwhile is skipped.
    fn take_idle(
        &self,
        peer: usize,
        idempotent: bool,
        client: Option<SocketAddr>,
    ) -> Option<Box<Conn>> {
        let mut idle = self.peers[peer].idle.borrow_mut();
        if self.send_proxy.is_some() {
            // Only a connection whose PROXY header named this client will do.
            let mine = idle.iter().rposition(|c| c.client == client)?;
            let mut c = idle.remove(mine);
            return (idempotent || c.still_open()).then_some(c);
        }
        while let Some(mut c) = idle.pop() {
            if idempotent || c.still_open() {
                return Some(c);
            }
        }
        None
    }

    /// Opens a connection to `peer` within the connect timeout.
    async fn connect(
        &self,
        peer: usize,
        deadline: Instant,
        client: Option<SocketAddr>,
    ) -> Result<Box<Conn>, UpstreamError> {
        let stream = self.connect_stream(peer, deadline, client).await?;
        self.opened_connection(peer);
        Ok(Box::new(Conn {
            stream,
            read: BytesMut::with_capacity(READ_ROOM),
            write: Vec::with_capacity(1024),
            client,
        }))
    }

    /// Counts a connection opened to `peer`.
    fn opened_connection(&self, peer: usize) {
        let opened = &self.peers[peer].opened;
        opened.set(opened.get() + 1);
        self.opened_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Opens a connection to `peer` within the connect timeout: TCP, the PROXY header,
    /// TLS (with ALPN h2 for `protocol = "h2"`, which the peer must choose).
    async fn connect_stream(
        &self,
        peer: usize,
        deadline: Instant,
        client: Option<SocketAddr>,
    ) -> Result<Stream, UpstreamError> {
        let connect_deadline = deadline.min(evloop::time::now() + self.connect_timeout);
        let address = &self.set.peers[peer].address;
        let send_proxy = self.send_proxy.map(|v| (v, client));
        let opening = crate::upstream::stream::open(&self.set, peer, send_proxy);
        match timeout_at(connect_deadline, opening).await {
            Err(_) => Err(UpstreamError::ConnectTimeout {
                upstream: self.name.clone(),
            }),
            Ok(Err(e)) => {
                if let OpenError::Tls(reason) = &e {
                    // The operator's one clue to the 502 (nginx logs "upstream SSL
                    // certificate verify error" the same way).
                    tracing::warn!(upstream = %self.name, peer = %address, %reason,
                        "TLS handshake with the peer failed");
                }
                Err(UpstreamError::Connect {
                    upstream: self.name.clone(),
                    message: format!("{address}: {e}"),
                })
            }
            Ok(Ok(stream)) if self.protocol == Protocol::H2 && !stream.speaks_h2() => {
                tracing::warn!(upstream = %self.name, peer = %address,
                    "protocol = \"h2\" but the peer did not choose h2 by ALPN");
                Err(UpstreamError::Connect {
                    upstream: self.name.clone(),
                    message: format!("{address}: the peer did not choose h2 by ALPN"),
                })
            }
            Ok(Ok(stream)) => Ok(stream),
        }
    }
}

/// The name of the upstream a response comes from (for errors and log lines).
impl Pooled {
    pub(crate) fn upstream_name(&self) -> &str {
        &self.busy.upstream.name
    }
}

mod body;
mod h2;
pub(crate) mod pass;
#[cfg(test)]
mod tests;
mod upload;
