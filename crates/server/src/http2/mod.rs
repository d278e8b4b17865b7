//! HTTP/2 (RFC 9113): the `h2` crate (hyper's codec) frames the connection; each stream
//! is answered by the same `dispatch` as an HTTP/1 request, so the static files, the
//! proxy, ESI, the cache and Lua answer both protocols with one code path
//! ([`stream`]). The hand-written HTTP/1 loop (`conn`) stays as it is: a connection is
//! HTTP/2 when TLS negotiated ALPN `h2` or when its first bytes are the HTTP/2 preface
//! (prior knowledge, cleartext).
//!
//! A connection holds one slot of the fixed connection budget, whatever its streams;
//! the slot's state is the connection's: `Idle` with no stream open (so
//! `timeouts.idle` closes it and an eviction may take it), `Handling` while streams are
//! answered, `Writing` while a response waits for the client's flow-control window or
//! socket (so `timeouts.write` closes a client that stops reading).

mod config;
mod stream;

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use pool::SlotId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

pub(crate) use config::bool_or_table;
pub use config::Http2Config;

use crate::metrics::GoAway;
use crate::tls::TlsFacts;
use crate::transport::Stream;
use crate::worker::{ConnState, Worker};

/// The client connection preface (RFC 9113 section 3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection's streams tell it, and what it tells them.
pub(crate) struct Streams {
    worker: Rc<Worker>,
    slot: SlotId,
    peer: SocketAddr,
    tls: Option<TlsFacts>,
    /// Streams being answered.
    active: Cell<u32>,
    /// Of those, streams waiting for the client's window or the socket.
    blocked: Cell<u32>,
    /// The socket did not take the last write: the connection waits for the client to
    /// read (whether or not a stream is still counted: a response queued whole ends its
    /// stream before its bytes leave).
    write_blocked: Cell<bool>,
    /// The handshake is done: the slot's state follows the streams from then on.
    started: Cell<bool>,
    /// `[http2] max_concurrent_streams`: h2 frees a stream's place as soon as the client
    /// cancels it, so the streams still being answered are bounded here too.
    max_streams: u32,
    /// Streams the client cancelled before their response finished, and streams whose
    /// response finished (Rapid Reset accounting).
    cancelled: Cell<u64>,
    finished: Cell<u64>,
    /// `[http2] max_reset_streams` of the configuration the connection started with.
    max_resets: u64,
    /// The client has cancelled too many streams: the connection sends GOAWAY.
    abusive: Cell<bool>,
    /// The connection has ended (its slot is free, maybe another connection's already):
    /// streams still finishing must not touch the slot.
    ended: Cell<bool>,
    wake: Notify,
}

impl Streams {
    /// Moves the connection's slot to the state its streams put it in. Returns false if
    /// a timeout or eviction closed it.
    fn settle(&self) -> bool {
        if self.ended.get() {
            return false;
        }
        if !self.started.get() {
            return true;
        }
        let state = if self.blocked.get() > 0 || self.write_blocked.get() {
            ConnState::Writing
        } else if self.active.get() > 0 {
            ConnState::Handling
        } else {
            ConnState::Idle
        };
        self.worker.enter(self.slot, state)
    }

    /// The socket took a write (`false`) or refused one (`true`).
    fn write_waits(&self, blocked: bool) {
        if self.write_blocked.get() != blocked {
            self.write_blocked.set(blocked);
            self.settle();
        }
    }

    /// A stream ended: `cancelled` when the client reset it before its response was
    /// complete.
    fn ended(&self, cancelled: bool) {
        self.active.set(self.active.get() - 1);
        if let Some(metrics) = self.worker.metrics() {
            metrics.http2_stream(cancelled);
        }
        if cancelled {
            self.cancelled.set(self.cancelled.get() + 1);
            if self.cancelled.get() > self.finished.get() + self.max_resets {
                self.abusive.set(true);
            }
        } else {
            self.finished.set(self.finished.get() + 1);
        }
        self.settle();
        self.wake.notify_one();
    }
}

/// Serves one HTTP/2 connection to its end and frees its slot. `prefix` holds the bytes
/// already read from the stream (the preface of a cleartext connection).
pub(crate) async fn serve(
    stream: Stream,
    prefix: Bytes,
    peer: SocketAddr,
    worker: Rc<Worker>,
    slot: SlotId,
    tls: Option<TlsFacts>,
) {
    worker.mark_http2(slot, true);
    if let Some(metrics) = worker.metrics() {
        metrics.http2_connection();
    }
    let current = worker.current();
    let config = &current.gen.config.http2;
    let streams = Rc::new(Streams {
        worker: worker.clone(),
        slot,
        peer,
        tls,
        active: Cell::new(0),
        blocked: Cell::new(0),
        write_blocked: Cell::new(false),
        started: Cell::new(false),
        max_streams: config.max_concurrent_streams,
        cancelled: Cell::new(0),
        finished: Cell::new(0),
        max_resets: config.max_reset_streams as u64,
        abusive: Cell::new(false),
        ended: Cell::new(false),
        wake: Notify::new(),
    });
    drop(current);
    let io = Rewind::new(
        prefix,
        Counted {
            inner: stream,
            streams: streams.clone(),
        },
    );
    let ended = Ended(&streams);
    run(io, &streams).await;
    drop(ended);
    worker.free(slot);
}

/// Marks the connection ended when dropped: after `run`, or when the connection's task
/// is dropped in the middle (it panicked; its slot is then freed by the worker), so that
/// stream tasks still holding `Streams` leave the slot alone, which another connection
/// may take next.
struct Ended<'a>(&'a Streams);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.ended.set(true);
        self.0.worker.mark_http2(self.0.slot, false);
    }
}

async fn run(io: Rewind<Counted>, streams: &Rc<Streams>) {
    let worker = &streams.worker;
    let peer = streams.peer;
    let current = worker.current();
    let config = &current.gen.config.http2;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(config.max_concurrent_streams)
        .initial_window_size(config.initial_stream_window)
        .initial_connection_window_size(config.initial_connection_window)
        .max_frame_size(config.max_frame_size)
        .header_table_size(config.hpack_table_size)
        .max_send_buffer_size(config.max_send_buffer as usize)
        // One budget for a request head, whichever protocol carries it: the decoded
        // fields (name, value and 32 bytes each, RFC 9113 section 6.5.2) of a HEADERS
        // frame and its CONTINUATIONs. h2 stops decoding past it, so neither endless
        // CONTINUATION frames nor an HPACK bomb grows memory beyond it.
        .max_header_list_size(current.gen.config.limits.max_head_size as u32)
        // Streams cancelled before they were accepted are counted with the others in
        // `Streams::ended`; this bound only keeps h2's own queue from growing between
        // two accepts.
        .max_pending_accept_reset_streams(config.max_reset_streams as usize)
        .max_concurrent_reset_streams(config.max_concurrent_streams as usize);
    let max_resets = config.max_reset_streams as u64;
    let settings = config.clone();
    let mut generation = current.gen.number;
    drop(current);
    // The handshake (the preface and the first SETTINGS) happens in `ReadingHead`, where
    // the slot has been since accept: `timeouts.head` bounds it.
    let mut conn = match builder.handshake::<_, Bytes>(io).await {
        Ok(conn) => conn,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "HTTP/2 handshake failed");
            return;
        }
    };
    streams.started.set(true);
    if !streams.settle() {
        return;
    }
    let mut going_away = false;
    let mut calmed = false;
    // Streams answered in this pass, framed together once no more are waiting (each
    // poll of the connection writes what is queued: framing them one by one would cost
    // a write, and a TLS record, per response).
    let mut ready: Vec<stream::Ready> = Vec::new();
    // When the streams now being accepted were read: the clock is read once for all the
    // streams of one read (ten requests in a read cost one pair of clock reads, not ten).
    let mut read_at: Option<Option<Instant>> = None;
    loop {
        if !going_away && worker.shared.generation.load(Ordering::Relaxed) != generation {
            // A reload: streams take the new configuration as HTTP/1 requests do, but
            // the SETTINGS this connection announced are fixed; when `[http2]` changed,
            // GOAWAY sends the client to a new connection that gets the new ones.
            let current = worker.current();
            generation = current.gen.number;
            if current.gen.config.http2 != settings {
                going_away = true;
                goaway(worker, GoAway::Reload);
                conn.graceful_shutdown();
            }
        }
        if !going_away && worker.is_shutting_down() {
            // GOAWAY with the last stream accepted: the streams in flight finish, the
            // client opens new ones on a new connection.
            going_away = true;
            goaway(worker, GoAway::Shutdown);
            conn.graceful_shutdown();
        }
        if streams.abusive.get() && !calmed {
            calmed = true;
            rapid_reset(worker, peer, streams.cancelled.get());
            conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
        }
        let polled = std::future::poll_fn(|cx| Poll::Ready(conn.poll_accept(cx))).await;
        let next = match polled {
            Poll::Ready(next) => next,
            Poll::Pending if !ready.is_empty() => {
                read_at = None;
                for answered in ready.drain(..) {
                    let cancelled = answered.send();
                    streams.ended(cancelled);
                }
                continue;
            }
            Poll::Pending => {
                read_at = None;
                tokio::select! {
                    biased;
                    next = conn.accept() => next,
                    _ = streams.wake.notified() => continue,
                    _ = worker.shutdown.notified(), if !going_away => continue,
                }
            }
        };
        match next {
            Some(Ok((_, mut respond))) if streams.active.get() >= streams.max_streams => {
                // Cancelled streams still being answered (until they notice) count
                // against the limit the client was told.
                respond.send_reset(h2::Reason::REFUSED_STREAM);
            }
            Some(Ok((request, respond))) => {
                streams.active.set(streams.active.get() + 1);
                if !streams.settle() {
                    break;
                }
                let read_at = *read_at.get_or_insert_with(|| {
                    worker.clock.refresh();
                    let timed = worker.shared.metrics_on || worker.log.borrow().is_some();
                    timed.then(Instant::now)
                });
                match stream::start(streams, request, respond, read_at) {
                    stream::Rest::Ended(cancelled) => streams.ended(cancelled),
                    stream::Rest::Ready(answered) => ready.push(answered),
                    stream::Rest::Later(pending) => {
                        tokio::task::spawn_local(stream::finish(streams.clone(), pending));
                    }
                }
            }
            Some(Err(e)) => {
                // h2 counts the streams cancelled before they were accepted itself (all
                // those of one read, before this loop sees them): past the same limit it
                // has sent GOAWAY.
                if e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) && !e.is_remote() && !calmed {
                    rapid_reset(worker, peer, streams.cancelled.get() + max_resets);
                }
                tracing::debug!(%peer, error = %e, "HTTP/2 connection ended");
                break;
            }
            None => break,
        }
    }
    // Answered but not framed when the connection ended: counted as ended all the same.
    for answered in ready.drain(..) {
        let cancelled = answered.send();
        streams.ended(cancelled);
    }
}

fn goaway(worker: &Worker, reason: GoAway) {
    if let Some(metrics) = worker.metrics() {
        metrics.http2_goaway(reason);
    }
}

/// Counts and logs a connection closed for Rapid Reset (the log at most a line every
/// 10 s per worker).
fn rapid_reset(worker: &Worker, peer: SocketAddr, cancelled: u64) {
    goaway(worker, GoAway::RapidReset);
    worker.http2_resets.event(worker.clock.millis(), |n| {
        tracing::warn!(
            worker = worker.id,
            %peer,
            cancelled,
            connections = n,
            "HTTP/2 client cancelled too many streams (Rapid Reset): sent GOAWAY and closed"
        );
    });
}

/// A stream with bytes already read from it put back in front: the preface a cleartext
/// connection started with, read before the connection knew its protocol.
pub(crate) struct Rewind<T> {
    prefix: Option<Bytes>,
    inner: T,
}

impl<T> Rewind<T> {
    pub(crate) fn new(prefix: Bytes, inner: T) -> Rewind<T> {
        Rewind {
            prefix: (!prefix.is_empty()).then_some(prefix),
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(mut prefix) = self.prefix.take() {
            let n = prefix.len().min(buf.remaining());
            buf.put_slice(&prefix.split_to(n));
            if !prefix.is_empty() {
                self.prefix = Some(prefix);
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The connection's stream, counting the bytes read from the client for
/// `tessera_received_bytes_total` (HTTP/1 counts them at its own reads) and telling the
/// connection when the socket stops taking writes (the slot is then `writing`, so
/// `timeouts.write` applies and an eviction passes it by).
pub(crate) struct Counted {
    inner: Stream,
    streams: Rc<Streams>,
}

impl Counted {
    fn wrote<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.streams.write_waits(polled.is_pending());
        polled
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(metrics)) = (&polled, self.streams.worker.metrics()) {
            metrics.received(buf.filled().len() - before);
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.wrote(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
