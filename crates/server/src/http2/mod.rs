//! HTTP/2 (RFC 9113), framed by tessera's own codec (`h2codec`: frames, HPACK and the
//! connection's state machine, without I/O). Each stream is answered by the same
//! `dispatch` as an HTTP/1 request, so the static files, the proxy, ESI, the cache and
//! Lua answer both protocols with one code path ([`stream`]). The hand-written HTTP/1
//! loop (`conn`) stays as it is: a connection is HTTP/2 when TLS negotiated ALPN `h2` or
//! when its first bytes are the HTTP/2 preface (prior knowledge, cleartext).
//!
//! One task per connection reads, frames and writes. A response ready at once (a file
//! from the cache, a refusal, a cached page) is framed on it as its request is read;
//! one that waits (a handler's, a large file) is answered on a task of its own, which
//! hands its head and body to the connection through the stream's [`slot::Slot`].
//!
//! A connection holds one slot of the fixed connection budget, whatever its streams;
//! the slot's state is the connection's: `Idle` with no stream open (so
//! `timeouts.idle` closes it and an eviction may take it), `Handling` while streams are
//! answered, `Writing` while a response waits for the client's flow-control window or
//! socket (so `timeouts.write` closes a client that stops reading).

pub(crate) mod head;
mod link;
pub(crate) mod request;
mod send;
mod slot;
mod stream;
mod streams;
mod upload;

use streams::Streams;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use h2codec::conn::{Conn, Event, IdMap, OUTPUT_HIGH};
use h2codec::frame::Reason;
use pool::SlotId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::facts::{Origin, TlsFacts};
use crate::metrics::GoAway;
use crate::net::transport::Stream;
use crate::worker::Worker;

/// Room made in the read buffer before each read.
const READ_ROOM: usize = 16 * 1024;

/// Serves one HTTP/2 connection to its end and frees its slot. `prefix` holds the bytes
/// already read from the stream (the preface of a cleartext connection).
pub(crate) async fn serve(
    stream: Stream,
    prefix: Bytes,
    origin: Origin,
    worker: Rc<Worker>,
    slot: SlotId,
    tls: Option<TlsFacts>,
) {
    worker.mark_http2(slot, true);
    let current = worker.current();
    let config = &current.gen.config.http2;
    let streams = Rc::new(Streams {
        worker: worker.clone(),
        slot,
        facts: origin.facts(tls),
        active: Cell::new(0),
        blocked: Cell::new(0),
        write_blocked: Cell::new(false),
        started: Cell::new(false),
        max_streams: config.max_concurrent_streams,
        cancelled: Cell::new(0),
        finished: Cell::new(0),
        max_resets: config.max_reset_streams as u64,
        max_queued: config.max_send_buffer as usize,
        abusive: Cell::new(false),
        ended: Cell::new(false),
        slots: RefCell::new(IdMap::default()),
        poked: Cell::new(false),
        more: Cell::new(false),
        sending: Cell::new(0),
        give_back: Cell::new(0),
        waker: RefCell::new(None),
    });
    drop(current);
    let mut io = Counted {
        inner: stream,
        streams: streams.clone(),
    };
    let ended = Ended(&streams);
    run(&mut io, prefix, &streams).await;
    drop(ended);
    worker.free(slot);
}

/// Marks the connection ended when dropped: after `run`, or when the connection's task
/// is dropped in the middle (it panicked; its slot is then freed by the worker), so that
/// stream tasks still holding `Streams` leave the slot alone, which another connection
/// may take next; and tells those tasks their streams are gone.
struct Ended<'a>(&'a Streams);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.ended.set(true);
        self.0.worker.mark_http2(self.0.slot, false);
        link::abandon(self.0);
    }
}

/// How one wait of the connection's task ended.
enum Woke {
    /// Bytes were read, written, or a slot or the shutdown wants attention.
    Progress,
    /// The client closed the connection, or the socket failed.
    Closed,
}

async fn run(io: &mut Counted, prefix: Bytes, streams: &Rc<Streams>) {
    let worker = &streams.worker;
    let current = worker.current();
    let config = &current.gen.config.http2;
    let mut conn = Conn::new(h2codec::conn::Config {
        max_concurrent_streams: config.max_concurrent_streams,
        initial_stream_window: config.initial_stream_window,
        initial_connection_window: config.initial_connection_window,
        max_frame_size: config.max_frame_size,
        header_table_size: config.hpack_table_size,
        // One budget for a request head, whichever protocol carries it: the decoded
        // fields (name, value and 32 bytes each, RFC 9113 section 6.5.2) of a HEADERS
        // frame and its CONTINUATIONs; a header block four times as large ends the
        // connection, so neither endless CONTINUATION frames nor an HPACK bomb grows
        // memory beyond it.
        max_header_list_size: current.gen.config.limits.max_head_size as u32,
    });
    let settings = config.clone();
    let mut generation = current.gen.number;
    drop(current);
    let mut read = BytesMut::with_capacity(READ_ROOM.max(prefix.len()));
    read.extend_from_slice(&prefix);
    let mut going_away = false;
    let mut calmed = false;
    let mut client_gone = false;
    let mut flush = false;
    // Streams answered in this pass, framed together once every frame read is handled
    // (so that a stream the client cancelled in the same read is counted as cancelled,
    // and the responses leave in one write).
    let mut ready: Vec<send::Ready> = Vec::new();
    let mut shutdown = std::pin::pin!(worker.shutdown.notified());
    loop {
        go_away_if_due(
            streams,
            &mut conn,
            &settings,
            &mut generation,
            &mut going_away,
            &mut calmed,
        );
        let failed = match read_frames(streams, &mut conn, &mut read, &mut ready) {
            Frames::Read => false,
            Frames::Failed => true,
            Frames::GoneAway => {
                client_gone = true;
                false
            }
            Frames::SlotClosed => return,
        };
        for answered in ready.drain(..) {
            let cancelled = answered.send(streams, &mut conn);
            streams.ended(cancelled);
        }
        if !streams.started.get() && conn.started() {
            streams.started.set(true);
            // Counted once the handshake is done: on an `h2c_listen` port, a
            // connection that never sends the preface did not speak HTTP/2.
            if let Some(metrics) = worker.metrics() {
                metrics.http2_connection();
            }
            if !streams.settle() {
                return;
            }
        }
        send::pump(streams, &mut conn);
        let finished = streams.active.get() == 0 && streams.slots.borrow().is_empty();
        if failed || ((going_away || client_gone) && finished) {
            // What is owed (GOAWAY, the last frames) goes out, within the write
            // timeout like any write, and the connection ends.
            if write_all(io, &mut conn, &mut flush).await.is_ok() {
                linger(io, worker).await;
            }
            return;
        }
        // The output went past its bound while frames wait in the read buffer: they are
        // read once it is written.
        let backed_up = conn.output().len() > OUTPUT_HIGH;
        if finished && conn.output().is_empty() {
            // Idle: the memory of a large response framed earlier goes back.
            conn.shrink();
        }
        let woke = std::future::poll_fn(|cx| {
            // Writes first: while the output is backed up no more frames are read.
            while !conn.output().is_empty() {
                match Pin::new(&mut *io).poll_write(cx, conn.output()) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Woke::Closed),
                    Poll::Ready(Ok(n)) => {
                        conn.written(n);
                        flush = true;
                    }
                    Poll::Pending => break,
                }
            }
            if flush && conn.output().is_empty() {
                match Pin::new(&mut *io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => flush = false,
                    Poll::Ready(Err(_)) => return Poll::Ready(Woke::Closed),
                    Poll::Pending => {}
                }
            }
            if conn.output().is_empty() && streams.more.get() {
                // A file waits to be read into the output, which is empty now.
                return Poll::Ready(Woke::Progress);
            }
            if backed_up && conn.output().len() <= OUTPUT_HIGH {
                return Poll::Ready(Woke::Progress);
            }
            if conn.output().len() <= OUTPUT_HIGH {
                if read.capacity() - read.len() < READ_ROOM {
                    read.reserve(READ_ROOM);
                }
                match poll_read_buf(Pin::new(&mut *io), cx, &mut read) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Woke::Closed),
                    Poll::Ready(Ok(_)) => return Poll::Ready(Woke::Progress),
                    Poll::Pending => {}
                }
            }
            if streams.poked.replace(false) {
                return Poll::Ready(Woke::Progress);
            }
            if !going_away && shutdown.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Woke::Progress);
            }
            let mut waker = streams.waker.borrow_mut();
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
        if let Woke::Closed = woke {
            return;
        }
    }
}

/// Sends GOAWAY when it is due: a reload changed `[http2]` (streams take the new
/// configuration as HTTP/1 requests do, but the SETTINGS this connection announced are
/// fixed, so the client is sent to a new connection that gets the new ones), the worker
/// shuts down (the streams in flight finish, the client opens new ones elsewhere), or
/// the client cancelled too many streams (Rapid Reset).
fn go_away_if_due(
    streams: &Streams,
    conn: &mut Conn,
    settings: &crate::config::http2::Http2Config,
    generation: &mut u64,
    going_away: &mut bool,
    calmed: &mut bool,
) {
    let worker = &streams.worker;
    let peer = streams.facts.peer;
    if !*going_away && worker.shared.generation.load(Ordering::Relaxed) != *generation {
        // A reload: streams take the new configuration as HTTP/1 requests do, but
        // the SETTINGS this connection announced are fixed; when `[http2]` changed,
        // GOAWAY sends the client to a new connection that gets the new ones.
        let current = worker.current();
        *generation = current.gen.number;
        if current.gen.config.http2 != *settings {
            *going_away = true;
            goaway(worker, GoAway::Reload);
            conn.go_away(Reason::NO_ERROR);
        }
    }
    if !*going_away && worker.is_shutting_down() {
        // GOAWAY with the last stream read: the streams in flight finish, the
        // client opens new ones on a new connection.
        *going_away = true;
        goaway(worker, GoAway::Shutdown);
        conn.go_away(Reason::NO_ERROR);
    }
    if streams.abusive.get() && !*calmed {
        *calmed = true;
        rapid_reset(worker, peer, streams.cancelled.get());
        conn.go_away(Reason::ENHANCE_YOUR_CALM);
    }
}

/// What reading the frames in the buffer came to.
enum Frames {
    /// Every complete frame was handled.
    Read,
    /// The client broke the protocol: the connection ends (after what it owes).
    Failed,
    /// The client sent GOAWAY: the connection ends once its streams are answered.
    GoneAway,
    /// A timeout or eviction closed the connection's slot.
    SlotClosed,
}

/// Handles every complete frame in `read`: new streams are answered (those ready at
/// once into `ready`, framed together after the pass), request bodies handed to their
/// streams, resets cancel them.
fn read_frames(
    streams: &Rc<Streams>,
    conn: &mut Conn,
    read: &mut BytesMut,
    ready: &mut Vec<send::Ready>,
) -> Frames {
    let worker = &streams.worker;
    let peer = streams.facts.peer;
    let mut read_at: Option<Option<Instant>> = None;
    let mut outcome = Frames::Read;
    // The slot's state is settled by the first new stream of a pass (nothing outside
    // this task moves it before the pass ends) and by any that makes the connection
    // busy again; the others leave it as it is.
    let mut settled = false;
    loop {
        let event = match conn.next(read) {
            Ok(Some(event)) => event,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "HTTP/2 connection ended");
                return Frames::Failed;
            }
        };
        match event {
            Event::Request { stream: id, .. } if streams.active.get() >= streams.max_streams => {
                // Cancelled streams still being answered (until they notice) count
                // against the limit the client was told.
                conn.reset(id, Reason::REFUSED_STREAM);
            }
            Event::Request {
                stream: id,
                end_stream,
            } => {
                streams.active.set(streams.active.get() + 1);
                if !settled || streams.active.get() == 1 {
                    settled = true;
                    if !streams.settle() {
                        return Frames::SlotClosed;
                    }
                }
                let read_at = *read_at.get_or_insert_with(|| {
                    worker.clock.refresh();
                    let timed = worker.shared.metrics_on || worker.log.borrow().is_some();
                    // The turn's clock, as HTTP/1's `read_at`.
                    timed.then(|| evloop::time::now().into_std())
                });
                let ids = (id, end_stream);
                match stream::start(streams, conn.request(), ids, read_at, None) {
                    stream::Rest::Ended => {
                        conn.reset(id, Reason::INTERNAL_ERROR);
                        streams.ended(false);
                    }
                    stream::Rest::Ready(answered) => ready.push(answered),
                    stream::Rest::Later(pending) => {
                        streams.slots.borrow_mut().insert(id, slot::Slot::new(true));
                        evloop::spawn_local(stream::finish(streams.clone(), id, pending));
                    }
                }
            }
            Event::Data {
                stream: id,
                data,
                end_stream,
            } => link::body(streams, conn, id, data, end_stream),
            Event::Reset { stream: id, .. } => {
                // Cancelled before its answer was framed (a Rapid Reset client
                // sends both in one write): ended here, its answer never sent.
                match ready.iter().rposition(|r| r.id == id) {
                    Some(i) => {
                        ready.remove(i);
                        streams.ended(true);
                    }
                    None => link::cancel(streams, conn, id),
                }
            }
            Event::Window => {}
            Event::GoAway { .. } => outcome = Frames::GoneAway,
        }
    }
    outcome
}

/// Reads into the spare room of `buf`.
fn poll_read_buf(
    io: Pin<&mut Counted>,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    let spare = buf.spare_capacity_mut();
    let mut read = ReadBuf::uninit(spare);
    match io.poll_read(cx, &mut read) {
        Poll::Ready(Ok(())) => {
            let n = read.filled().len();
            // SAFETY: `ReadBuf` hands out only the bytes the read initialised as
            // `filled`, and they are the first `n` of the spare room.
            unsafe { buf.set_len(buf.len() + n) };
            Poll::Ready(Ok(n))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Pending,
    }
}

/// Writes the whole output and flushes it (the last frames of a connection).
async fn write_all(io: &mut Counted, conn: &mut Conn, flush: &mut bool) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    while !conn.output().is_empty() {
        let n = io.write(conn.output()).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        conn.written(n);
        *flush = true;
    }
    if *flush {
        io.flush().await?;
    }
    Ok(())
}

/// Closing while the client may still be sending would make the kernel answer with
/// RST, which can destroy the GOAWAY before the client reads it. So, as HTTP/1 does
/// (`conn`'s lingering close): close the sending side (TLS close_notify, then FIN), then
/// read and drop what arrives, for at most 2 s and 256 KiB.
async fn linger(io: &mut Counted, worker: &Worker) {
    worker
        .shared
        .lingering_closes
        .fetch_add(1, Ordering::Relaxed);
    let mut buffers = worker.take_buffers();
    let drain = async {
        let _ = std::future::poll_fn(|cx| Pin::new(&mut *io).poll_shutdown(cx)).await;
        let tcp = io.inner.tcp();
        let mut total = 0usize;
        while total <= 256 * 1024 {
            if tcp.readable().await.is_err() {
                break;
            }
            match tcp.try_read(&mut buffers.read) {
                Ok(n) if n > 0 => total += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                _ => break,
            }
        }
    };
    let _ = evloop::time::timeout(std::time::Duration::from_secs(2), drain).await;
    worker.give_back(buffers);
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

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.wrote(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
