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
