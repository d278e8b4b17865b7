//! A proxied response's body: an upstream body passed through, an ESI page being
//! assembled, a cached object (in memory, or read from disk as it is sent), or an
//! upgraded connection handed to the server.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use evloop::AbortHandle;
use tokio::sync::mpsc;

use crate::cache::disk::fill::DiskFill;
use crate::cache::disk::stream::DiskStream;
use crate::error::PageError;
use crate::upstream::client::pass::PassBody;

/// A response body: an upstream body passed through as it arrives, or an ESI page
/// assembled as its fragments arrive.
pub struct Body {
    pub(crate) kind: BodyKind,
    pub(crate) length: Option<u64>,
}

pub(crate) enum BodyKind {
    Pass(PassBody),
    Page {
        first: Option<Bytes>,
        rx: mpsc::Receiver<Result<Bytes, PageError>>,
        writer: AbortHandle,
    },
    /// Whole already, in one piece (a cached object, a small upstream body that came
    /// with its head), until it is taken.
    Whole(Option<Bytes>),
    /// Whole already (from the cache): the chunks in order, shared with the cache's
    /// memo of the page when there is one.
    Ready {
        chunks: Arc<[Bytes]>,
        next: usize,
    },
    /// A 101's upgraded connection, until the server takes it (no body).
    Tunnel(Option<handler::Tunnel>),
    /// A disk object's body (or a range of it), read as it is sent.
    Disk(Box<DiskStream>),
    /// A body passed through whose chunks are also written to the disk tier (a
    /// streaming fill), put in place when the body ends whole.
    Tee(Box<(Body, DiskFill)>),
    /// An object fetched in slices, read from its slices as it is sent
    /// (`crate::slices`).
    Sliced(Box<dyn Pieces>),
}

/// A body that gives pieces (bytes, or regions of files when `regions`) in order: an
/// object read from its slices (`crate::slices`, which knows the proxy this module
/// does not).
pub(crate) trait Pieces {
    fn poll_piece(
        &mut self,
        cx: &mut Context<'_>,
        regions: bool,
    ) -> Poll<Option<Result<handler::Piece, PageError>>>;
}

impl Body {
    /// The body's length when known in advance (a passed-through body with
    /// Content-Length). `None` for an assembled page or a chunked upstream body: an
    /// HTTP/1.1 client gets it chunked, an HTTP/1.0 client gets it buffered
    /// ([`Body::collect`]) or close-delimited.
    pub fn content_length(&self) -> Option<u64> {
        self.length
    }

    /// Whether this body is an ESI page being assembled.
    pub fn is_assembled(&self) -> bool {
        matches!(self.kind, BodyKind::Page { .. })
    }

    /// Whether this body is an ESI page: being assembled, or assembled already.
    pub fn is_page(&self) -> bool {
        matches!(&self.kind, BodyKind::Page { .. })
            || matches!(&self.kind, BodyKind::Ready { chunks, .. } if !chunks.is_empty())
    }

    /// A body whose chunks are all here (a cache hit), its length known.
    pub(crate) fn ready(chunks: impl Into<Arc<[Bytes]>>) -> Body {
        let chunks = chunks.into();
        let length = chunks.iter().map(|c| c.len() as u64).sum();
        Body {
            kind: BodyKind::Ready { chunks, next: 0 },
            length: Some(length),
        }
    }

    /// A disk object's body, read as it is sent.
    pub(crate) fn disk(stream: DiskStream) -> Body {
        Body {
            length: Some(stream.remaining()),
            kind: BodyKind::Disk(Box::new(stream)),
        }
    }

    /// This body, its chunks also written to disk by `fill` as they pass.
    pub(crate) fn tee(self, fill: DiskFill) -> Body {
        Body {
            length: self.length,
            kind: BodyKind::Tee(Box::new((self, fill))),
        }
    }

    /// A body in one piece that is already here.
    pub(crate) fn whole(bytes: Bytes) -> Body {
        Body {
            length: Some(bytes.len() as u64),
            kind: BodyKind::Whole(Some(bytes)),
        }
    }

    /// The chunks not yet taken, when the whole body is already here (a cache hit: the
    /// cached buffers themselves), so the server can write them with one vectored
    /// write. `None` for a body still arriving.
    pub fn ready_chunks(&self) -> Option<&[Bytes]> {
        match &self.kind {
            BodyKind::Ready { chunks, next } => Some(&chunks[*next..]),
            BodyKind::Whole(whole) => Some(whole.as_slice()),
            _ => None,
        }
    }

    /// The whole body when it is one piece already here and untouched; else the body
    /// back.
    pub fn into_whole(mut self) -> Result<Bytes, Body> {
        match &mut self.kind {
            BodyKind::Whole(whole @ Some(_)) => Ok(whole.take().unwrap_or_default()),
            _ => Err(self),
        }
    }

    /// The whole body when it is already here and untouched (a cache hit): the cached
    /// chunks themselves, shared, not copied; else the body back.
    pub fn into_ready(mut self) -> Result<Arc<[Bytes]>, Body> {
        match &mut self.kind {
            BodyKind::Ready { chunks, next: 0 } => Ok(std::mem::replace(chunks, Arc::new([]))),
            _ => Err(self),
        }
    }

    /// The next chunk, `None` at the end. An `Err` means the body broke off (an include
    /// failed after the head was sent, or the upstream body broke): the server must close
    /// the connection without ending the body properly (no final chunk), so no cache
    /// downstream stores a truncated page.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, PageError>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, PageError>>> {
        match &mut self.kind {
            BodyKind::Pass(p) => p
                .poll_next(cx)
                .map(|r| r.map(|r| r.map_err(PageError::from))),
            BodyKind::Page { first, rx, .. } => match first.take() {
                Some(b) => Poll::Ready(Some(Ok(b))),
                None => rx.poll_recv(cx),
            },
            BodyKind::Whole(whole) => Poll::Ready(whole.take().map(Ok)),
            BodyKind::Tunnel(_) => Poll::Ready(None),
            BodyKind::Disk(stream) => stream
                .poll_chunk(cx)
                .map(|c| c.map(|r| r.map_err(PageError::Disk))),
            BodyKind::Sliced(sliced) => sliced.poll_piece(cx, false).map(|c| {
                c.map(|r| match r? {
                    handler::Piece::Bytes(bytes) => Ok(bytes),
                    handler::Piece::File(_) => Err(PageError::Disk("a region for bytes".into())),
                })
            }),
            BodyKind::Tee(tee) => {
                let (body, fill) = &mut **tee;
                let chunk = body.poll_chunk(cx);
                match &chunk {
                    Poll::Ready(Some(Ok(c))) => fill.push(c.clone()),
                    Poll::Ready(None) => fill.finish(),
                    Poll::Ready(Some(Err(_))) => fill.give_up(),
                    Poll::Pending => {}
                }
                chunk
            }
            BodyKind::Ready { chunks, next } => {
                let chunk = chunks.get(*next).cloned();
                *next += 1;
                Poll::Ready(chunk.map(Ok))
            }
        }
    }

    /// [`Body::poll_chunk`], but a disk object's body gives regions of its file, for a
    /// connection that sends them with `sendfile(2)` ([`handler::Chunks::poll_piece`]).
    pub(crate) fn poll_piece(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<handler::Piece, PageError>>> {
        match &mut self.kind {
            BodyKind::Disk(stream) => stream
                .poll_piece(cx)
                .map(|c| c.map(|r| r.map_err(PageError::Disk))),
            BodyKind::Sliced(sliced) => sliced.poll_piece(cx, true),
            _ => self
                .poll_chunk(cx)
                .map(|c| c.map(|r| r.map(handler::Piece::Bytes))),
        }
    }

    /// The upgraded connection of a 101 response, once.
    /// The trailers of a body passed through from an HTTP/2 upstream, after its end.
    pub fn take_trailers(&mut self) -> Option<handler::FieldList> {
        match &mut self.kind {
            BodyKind::Pass(pass) => {
                let trailers = pass.take_trailers()?;
                crate::grpc::count(&trailers);
                Some(trailers)
            }
            BodyKind::Tee(tee) => tee.0.take_trailers(),
            _ => None,
        }
    }

    pub fn take_tunnel(&mut self) -> Option<handler::Tunnel> {
        match &mut self.kind {
            BodyKind::Tunnel(tunnel) => tunnel.take(),
            _ => None,
        }
    }

    /// The whole body, for a client that needs a length (HTTP/1.0 with keep-alive, or a
    /// cache).
    pub async fn collect(mut self) -> Result<Bytes, PageError> {
        let mut parts = Vec::new();
        while let Some(chunk) = self.next_chunk().await {
            parts.push(chunk?);
        }
        Ok(Bytes::from(parts.concat()))
    }
}

/// The same chunks as [`Body::next_chunk`], for code that composes streams.
impl futures_core::Stream for Body {
    type Item = Result<Bytes, PageError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx)
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        // A page nobody reads is not assembled further: its writer and include tasks stop.
        if let BodyKind::Page { writer, .. } = &self.kind {
            writer.abort();
        }
        // A streaming fill whose client went away is finished in the background, for
        // the requests reading it and the ones to come (as Varnish and nginx do), on
        // the worker's loop; without one (its end) it is given up.
        let unfinished = matches!(&self.kind, BodyKind::Tee(tee) if !tee.1.is_finished());
        if unfinished && evloop::has_loop() {
            if let BodyKind::Tee(tee) = std::mem::replace(&mut self.kind, BodyKind::Whole(None)) {
                let (body, fill) = *tee;
                evloop::spawn_local(finish_fill(body, fill));
            }
        }
    }
}

/// Reads the rest of `body` into `fill`.
pub(crate) async fn finish_fill(mut body: Body, mut fill: DiskFill) {
    while let Some(chunk) = body.next_chunk().await {
        match chunk {
            Ok(chunk) => fill.push(chunk),
            Err(_) => return fill.give_up(),
        }
    }
    fill.finish();
}
