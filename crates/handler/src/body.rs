//! A response body as a handler hands it to the connection.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::Pooled;

/// Why a streamed body broke off after its head was sent (logged; the connection closes
/// without a final chunk, so the client sees it is truncated).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// The chunks of a body that arrives over time (a proxied response, an ESI page being
/// assembled), in order.
pub trait Chunks {
    /// The next chunk; `None` at the end.
    fn poll_chunk(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>>;

    /// For a `101 Switching Protocols` response: the upstream connection to splice the
    /// client's to, taken once. `None` (the default) for every other body; a 101 without
    /// one is answered 502.
    fn take_tunnel(self: Pin<&mut Self>) -> Option<Tunnel> {
        None
    }

    /// After the last chunk: the trailers that end the body (an HTTP/2 upstream's, gRPC's
    /// `grpc-status`), taken once. `None` (the default) for a body without them. An
    /// HTTP/2 client gets them as a trailing header block; HTTP/1.1 clients do not.
    fn take_trailers(self: Pin<&mut Self>) -> Option<crate::FieldList> {
        None
    }

    /// The next piece, for a connection that can send a file's bytes itself (cleartext
    /// HTTP/1, with `sendfile(2)`): a body kept in a file (the cache's disk tier) gives
    /// regions of it, not its bytes. The default gives [`Chunks::poll_chunk`]'s bytes, so
    /// a body that wraps another (a compressor) gives bytes.
    fn poll_piece(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Piece, BodyError>>> {
        self.poll_chunk(cx).map(|c| c.map(|r| r.map(Piece::Bytes)))
    }
}

/// A part of a body: bytes, or a region of a file that the connection sends without
/// reading it ([`Chunks::poll_piece`]).
pub enum Piece {
    Bytes(Bytes),
    File(FileRegion),
}

/// `len` bytes of `file` from `offset`. The body that gives one has made sure they are in
/// the page cache, so that sending them does not wait on the disk.
#[derive(Debug, Clone)]
pub struct FileRegion {
    pub file: Arc<std::fs::File>,
    pub offset: u64,
    pub len: u64,
}

/// An upgraded connection (WebSocket and other `Upgrade` protocols) to splice with the
/// client's after the 101 head: bytes are copied both ways until either side closes.
/// A plain `std` socket so that the seam names no runtime: the server registers it with
/// its own.
#[derive(Debug)]
pub struct Tunnel {
    /// The upstream connection, non-blocking.
    pub upstream: std::net::TcpStream,
    /// Bytes the upstream sent after its 101 head, for the client first.
    pub early: Bytes,
    /// The tunnel closes after this long with no byte either way.
    pub idle_timeout: std::time::Duration,
    /// The tunnel closes after this long whatever happens; `None`: never.
    pub max_duration: Option<std::time::Duration>,
}

/// A filter on the bytes of one response body, in order (Lua's `body_filter`), made by
/// the route's filter ([`crate::Attached::body_filter`]) once the head is final.
pub trait BodyFilter {
    /// What to send in place of `chunk` (empty: nothing now); `eof` on the last call.
    /// `Err` cuts the response off: the connection closes (HTTP/1) or the stream is
    /// reset (HTTP/2), as the head has gone out.
    fn filter(&mut self, chunk: Bytes, eof: bool) -> Result<Bytes, BodyError>;
}

/// [`Body::filtered`]'s stream.
struct Filtered {
    inner: Body,
    filter: Box<dyn BodyFilter>,
    done: bool,
    /// The next piece of a [`Body::Ready`].
    next: usize,
}

impl Chunks for Filtered {
    fn poll_chunk(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let (chunk, eof) = match &mut this.inner {
                Body::Stream { chunks, .. } => match chunks.as_mut().poll_chunk(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(chunk))) => (chunk, false),
                    Poll::Ready(None) => (Bytes::new(), true),
                    Poll::Ready(Some(Err(e))) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                },
                // A body in stored pieces (a cached page): one call per piece, the last
                // with `eof`, without copying them together.
                Body::Ready(chunks) => {
                    let piece = chunks.get(this.next).cloned().unwrap_or_default();
                    this.next += 1;
                    (piece, this.next >= chunks.len())
                }
                whole => match std::mem::replace(whole, Body::Empty) {
                    Body::Full(b) => (b, true),
                    _ => (Bytes::new(), true),
                },
            };
            if eof {
                this.done = true;
                this.inner = Body::Empty;
            }
            match this.filter.filter(chunk, eof) {
                // Nothing to send for this piece: on to the next.
                Ok(out) if out.is_empty() && !eof => {}
                Ok(out) => return Poll::Ready(Some(Ok(out))),
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }
}

/// What follows a response head.
pub enum Body {
    Empty,
    /// A whole body in memory.
    Full(Bytes),
    /// A whole body in pieces (a cached page: its fragments as stored), written with one
    /// vectored write together with the head.
    Ready(Arc<[Bytes]>),
    /// A body that arrives over time; `length` when known in advance. Made with
    /// [`Body::stream`].
    Stream {
        length: Option<u64>,
        chunks: Pin<Pooled<dyn Chunks>>,
    },
}

impl Body {
    /// [`Body::Stream`] of `chunks`, in recycled memory ([`Pooled`]).
    pub fn stream<C: Chunks + 'static>(length: Option<u64>, chunks: C) -> Body {
        // SAFETY: the unsizing coercion; the value never moves (see `Pooled`).
        let chunks =
            unsafe { Pin::new_unchecked(Pooled::new(chunks).unsize(|p| p as *mut dyn Chunks)) };
        Body::Stream { length, chunks }
    }

    /// A streamed body's trailers, after its last chunk ([`Chunks::take_trailers`]).
    pub fn take_trailers(&mut self) -> Option<crate::FieldList> {
        match self {
            Body::Stream { chunks, .. } => chunks.as_mut().take_trailers(),
            _ => None,
        }
    }

    /// The length, when known before the body is sent.
    pub fn length(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Full(b) => Some(b.len() as u64),
            Body::Ready(chunks) => Some(chunks.iter().map(|c| c.len() as u64).sum()),
            Body::Stream { length, .. } => *length,
        }
    }

    /// The next chunk of a streamed body (`None` at its end; the whole body for the
    /// others, once).
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, BodyError>> {
        match std::mem::replace(self, Body::Empty) {
            Body::Empty => None,
            Body::Full(b) => Some(Ok(b)),
            Body::Ready(chunks) => {
                let whole: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
                Some(Ok(whole.into()))
            }
            Body::Stream { length, mut chunks } => {
                let next = std::future::poll_fn(|cx| chunks.as_mut().poll_chunk(cx)).await;
                *self = Body::Stream { length, chunks };
                next
            }
        }
    }

    /// This body passed through `filter` chunk by chunk (a Lua `body_filter`): a stream of
    /// unknown length, so the connection frames it anew (chunked on HTTP/1.1, DATA frames
    /// on HTTP/2). The filter sees each piece as it comes, then an empty one with `eof`;
    /// a whole body ([`Body::Full`]) is one piece with `eof`, one in stored pieces
    /// ([`Body::Ready`]) its pieces, the last with `eof`. An error
    /// from the filter (or from the body) ends the stream with that error.
    pub fn filtered(self, filter: Box<dyn BodyFilter>) -> Body {
        Body::stream(
            None,
            Filtered {
                inner: self,
                filter,
                done: false,
                next: 0,
            },
        )
    }

    /// [`Body::next_chunk`], but a streamed body kept in a file gives regions of it
    /// ([`Chunks::poll_piece`]): for a connection that sends them with `sendfile(2)`.
    pub async fn next_piece(&mut self) -> Option<Result<Piece, BodyError>> {
        match self {
            Body::Stream { chunks, .. } => {
                std::future::poll_fn(|cx| chunks.as_mut().poll_piece(cx)).await
            }
            _ => self.next_chunk().await.map(|c| c.map(Piece::Bytes)),
        }
    }

    /// The whole body, read to its end.
    pub async fn collect(mut self) -> Result<Bytes, BodyError> {
        if let Body::Full(b) = self {
            return Ok(b);
        }
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk().await {
            all.extend_from_slice(&chunk?);
        }
        Ok(all.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each call a filter had: (its piece, eof).
    type Calls = Vec<(Vec<u8>, bool)>;

    /// Upper-cases, and records each call.
    struct Recorder(std::rc::Rc<std::cell::RefCell<Calls>>);

    impl BodyFilter for Recorder {
        fn filter(&mut self, chunk: Bytes, eof: bool) -> Result<Bytes, BodyError> {
            self.0.borrow_mut().push((chunk.to_vec(), eof));
            Ok(chunk.to_ascii_uppercase().into())
        }
    }

    /// Everything a filtered body yields, and the calls its filter had.
    fn run(body: Body) -> (Vec<Vec<u8>>, Calls) {
        let calls = std::rc::Rc::default();
        let Body::Stream { mut chunks, length } =
            body.filtered(Box::new(Recorder(std::rc::Rc::clone(&calls))))
        else {
            panic!("a filtered body is a stream");
        };
        assert_eq!(length, None);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        while let Poll::Ready(Some(piece)) = chunks.as_mut().poll_chunk(&mut cx) {
            out.push(piece.unwrap().to_vec());
        }
        let calls = calls.borrow().clone();
        (out, calls)
    }

    #[test]
    fn a_filter_sees_stored_pieces_one_by_one_and_a_whole_body_at_once() {
        let ready = Body::Ready(vec![Bytes::from("ab"), Bytes::from("cd")].into());
        let (out, calls) = run(ready);
        assert_eq!(out, [b"AB".to_vec(), b"CD".to_vec()]);
        assert_eq!(calls, [(b"ab".to_vec(), false), (b"cd".to_vec(), true)]);
        let (out, calls) = run(Body::Full(Bytes::from("whole")));
        assert_eq!(out, [b"WHOLE".to_vec()]);
        assert_eq!(calls, [(b"whole".to_vec(), true)]);
        // An empty body still gets its one call with eof (to append, say).
        let (_, calls) = run(Body::Empty);
        assert_eq!(calls, [(Vec::new(), true)]);
    }
}
