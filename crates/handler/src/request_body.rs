//! A request body handed to a handler as it arrives (`request_buffering = false`, the
//! proxy's default): the connection writes what it reads from the client into a small
//! pipe, the handler (the proxy, sending it to an origin) takes it out. The pipe holds
//! its capacity and one piece more at most (the writer asks for room before each piece),
//! so a body never sits in memory whole: when the handler stops
//! taking (an origin that reads slowly), the connection stops reading the client (TCP's
//! window, or HTTP/2's, closes), and when the client is slow the handler waits.
//!
//! Both ends live on one worker's thread, so the pipe is an `Rc<RefCell>` with a waker per
//! side, no channel and no lock.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::BodyError;

/// Default bytes the pipe holds before the writer waits: 64 KiB, a few reads of the
/// client and one or two writes to the origin, so both sockets stay busy.
pub const PIPE_CAPACITY: usize = 64 * 1024;

/// Why a body stopped short, as the handler reading it is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFailure {
    /// The client went away (or reset the stream) before the end of the body.
    ClientGone,
    /// The body passed `limits.max_body_size` (the client is answered 413).
    TooLarge,
    /// The client sent nothing for `timeouts.body` (answered 408, or closed).
    TimedOut,
    /// The body broke its framing (a bad chunk): the connection closes.
    Malformed,
}

impl BodyFailure {
    fn message(self) -> &'static str {
        match self {
            BodyFailure::ClientGone => "the client went away before the end of the request body",
            BodyFailure::TooLarge => "the request body passed max_body_size",
            BodyFailure::TimedOut => "the client sent no request body bytes within timeouts.body",
            BodyFailure::Malformed => "the request body broke its framing",
        }
    }
}

struct Pipe {
    chunks: VecDeque<Bytes>,
    buffered: usize,
    capacity: usize,
    /// The body's length when the client declared it (Content-Length).
    length: Option<u64>,
    /// Bytes the reader took out.
    taken: u64,
    /// Set by the writer: `Ok` at the end of the body, `Err` when it stopped short.
    end: Option<Result<(), BodyFailure>>,
    reader_gone: bool,
    /// Handles on the reader's end ([`RequestBody::share`]): the reader is gone when the
    /// last is dropped.
    readers: u32,
    /// Handles on the writer's end ([`BodyWriter::share`]): the body ends short (the
    /// client gone) when the last is dropped before it ended.
    writers: u32,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

impl Pipe {
    fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    fn wake_writer(&mut self) {
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
}

/// The handler's end: the body's bytes in order, as the client sends them.
pub struct RequestBody(Rc<RefCell<Pipe>>);

/// The connection's end.
pub struct BodyWriter(Rc<RefCell<Pipe>>);

/// A pipe for a body of `length` (when declared) holding about `capacity` bytes.
pub fn body_pipe(length: Option<u64>, capacity: usize) -> (BodyWriter, RequestBody) {
    let pipe = Rc::new(RefCell::new(Pipe {
        chunks: VecDeque::new(),
        buffered: 0,
        capacity,
        length,
        taken: 0,
        end: None,
        reader_gone: false,
        readers: 1,
        writers: 1,
        reader: None,
        writer: None,
    }));
    (BodyWriter(pipe.clone()), RequestBody(pipe))
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pipe = self.0.borrow();
        f.debug_struct("RequestBody")
            .field("length", &pipe.length)
            .field("taken", &pipe.taken)
            .field("buffered", &pipe.buffered)
            .finish()
    }
}

impl RequestBody {
    /// The length the client declared (Content-Length); `None`: it is known at the end.
    pub fn length(&self) -> Option<u64> {
        self.0.borrow().length
    }

    /// Bytes taken out so far: once any is, the body cannot be sent again.
    pub fn taken(&self) -> u64 {
        self.0.borrow().taken
    }

    /// The next piece (`None` at the end of the body; an error when it stopped short).
    pub fn poll_chunk(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        let mut pipe = self.0.borrow_mut();
        if let Some(chunk) = pipe.chunks.pop_front() {
            pipe.buffered -= chunk.len();
            pipe.taken += chunk.len() as u64;
            if pipe.buffered < pipe.capacity {
                pipe.wake_writer();
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
        match pipe.end {
            Some(Ok(())) => Poll::Ready(None),
            Some(Err(failure)) => Poll::Ready(Some(Err(BodyError(failure.message().into())))),
            None => {
                // Empty: the writer may be waiting for room it has now.
                pipe.wake_writer();
                pipe.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// [`RequestBody::poll_chunk`] as a future.
    pub async fn next_chunk(&self) -> Option<Result<Bytes, BodyError>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// The whole body, read to its end (for a handler that needs it whole; the writer
    /// keeps it within `max_body_size`).
    pub async fn collect(self) -> Result<Bytes, BodyError> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk().await {
            all.extend_from_slice(&chunk?);
        }
        Ok(all.into())
    }
}

impl RequestBody {
    /// Another handle on the reader's end, for a task that goes on reading the body after
    /// the handler returned its response (a request streamed to an HTTP/2 upstream in
    /// both directions at once, gRPC's). The reader is gone once every handle is.
    pub fn share(&self) -> RequestBody {
        self.0.borrow_mut().readers += 1;
        RequestBody(self.0.clone())
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let mut pipe = self.0.borrow_mut();
        pipe.readers -= 1;
        if pipe.readers > 0 {
            return;
        }
        pipe.reader_gone = true;
        pipe.chunks.clear();
        pipe.buffered = 0;
        pipe.wake_writer();
    }
}

impl BodyWriter {
    /// Ready when the pipe has room for more (`true`), or when the handler dropped its
    /// end and wants no more (`false`).
    pub fn poll_room(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut pipe = self.0.borrow_mut();
        if pipe.reader_gone {
            return Poll::Ready(false);
        }
        if pipe.buffered < pipe.capacity {
            return Poll::Ready(true);
        }
        pipe.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// [`BodyWriter::poll_room`] as a future.
    pub async fn room(&self) -> bool {
        std::future::poll_fn(|cx| self.poll_room(cx)).await
    }

    /// Whether the pipe is full (the next [`BodyWriter::room`] waits for the reader).
    pub fn is_full(&self) -> bool {
        let pipe = self.0.borrow();
        !pipe.reader_gone && pipe.buffered >= pipe.capacity
    }

    /// Ready when the handler dropped its end (it answered without the rest of the body).
    pub fn poll_reader_gone(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut pipe = self.0.borrow_mut();
        if pipe.reader_gone {
            return Poll::Ready(());
        }
        pipe.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether the handler dropped its end.
    pub fn reader_gone(&self) -> bool {
        self.0.borrow().reader_gone
    }

    /// Adds a piece of the body (the pipe may pass its capacity by this piece: the
    /// writer asks for room before each).
    pub fn push(&self, chunk: Bytes) {
        let mut pipe = self.0.borrow_mut();
        if pipe.reader_gone || chunk.is_empty() {
            return;
        }
        pipe.buffered += chunk.len();
        pipe.chunks.push_back(chunk);
        pipe.wake_reader();
    }

    /// The body ended whole.
    pub fn finish(self) {
        self.end(Ok(()));
    }

    /// The body stopped short: the handler reading it is told why.
    pub fn fail(self, why: BodyFailure) {
        self.end(Err(why));
    }

    fn end(&self, end: Result<(), BodyFailure>) {
        let mut pipe = self.0.borrow_mut();
        if pipe.end.is_none() {
            pipe.end = Some(end);
            pipe.wake_reader();
        }
    }
}

impl BodyWriter {
    /// Another handle on the writer's end: for a connection that hands the body's
    /// writing from one task to another (HTTP/2 reading the request body on while the
    /// response is sent, both ways at once).
    pub fn share(&self) -> BodyWriter {
        self.0.borrow_mut().writers += 1;
        BodyWriter(self.0.clone())
    }
}

impl Drop for BodyWriter {
    /// The last writer dropped before the end (its connection's task ended) is a client
    /// gone.
    fn drop(&mut self) {
        let last = {
            let mut pipe = self.0.borrow_mut();
            pipe.writers -= 1;
            pipe.writers == 0
        };
        if last {
            self.end(Err(BodyFailure::ClientGone));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    fn cx() -> Context<'static> {
        let waker: &'static Waker = Box::leak(Box::new(Waker::from(Arc::new(Noop))));
        Context::from_waker(waker)
    }

    #[test]
    fn the_writer_waits_while_the_pipe_is_full_and_the_reader_sees_the_end() {
        let (writer, reader) = body_pipe(Some(6), 4);
        assert_eq!(writer.poll_room(&mut cx()), Poll::Ready(true));
        writer.push(Bytes::from_static(b"abcd"));
        assert_eq!(writer.poll_room(&mut cx()), Poll::Pending);
        match reader.poll_chunk(&mut cx()) {
            Poll::Ready(Some(Ok(b))) => assert_eq!(&b[..], b"abcd"),
            _ => panic!("a chunk was buffered"),
        }
        assert_eq!(reader.taken(), 4);
        assert_eq!(writer.poll_room(&mut cx()), Poll::Ready(true));
        writer.push(Bytes::from_static(b"ef"));
        writer.finish();
        assert!(matches!(
            reader.poll_chunk(&mut cx()),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(matches!(reader.poll_chunk(&mut cx()), Poll::Ready(None)));
    }

    #[test]
    fn a_writer_dropped_early_is_a_client_gone_and_a_reader_dropped_stops_the_writer() {
        let (writer, reader) = body_pipe(None, 4);
        drop(writer);
        match reader.poll_chunk(&mut cx()) {
            Poll::Ready(Some(Err(e))) => assert!(e.0.contains("went away"), "{e}"),
            _ => panic!("the end was not seen"),
        }
        let (writer, reader) = body_pipe(None, 4);
        drop(reader);
        assert_eq!(writer.poll_room(&mut cx()), Poll::Ready(false));
        assert!(writer.reader_gone());
    }
}
