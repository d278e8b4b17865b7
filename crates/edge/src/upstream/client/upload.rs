//! A request whose body streams from the client (`request_buffering = false`): its head,
//! then each piece of the body as the client's connection hands it over (with the length
//! the client declared, or chunked), then the response head. Nothing of the body is kept:
//! once a byte of it is sent, the request cannot be sent again (see `attempt`'s retries).
//!
//! The response timeout does not run while the body is sent (a large upload from a slow
//! client takes as long as the client does, and `timeouts.body` bounds the client's
//! silences); what it bounds here is a write the peer does not take (it reads nothing),
//! and then, as for every request, the wait for the response head after the body.
//!
//! While the body goes out the peer is watched: an error head from it (a status of 400
//! or more) before the body's end (an origin that refuses the upload with its own 413 or
//! 401, and may stop reading) is its answer, and the rest of the body is not sent. Any
//! other head is read after the body (an origin answering while it reads, full duplex,
//! gets the whole body), and interim heads (`100 Continue` for a client's `Expect`) are
//! passed over.

use std::future::poll_fn;
use std::io;
use std::task::Poll;
use std::time::Duration;

use evloop::time::{timeout, timeout_at};
use handler::RequestBody;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{Attempt, BodyState, Conn, Head, Outgoing, Upstream, MAX_FIELDS, MAX_HEAD, READ_ROOM};
use crate::error::UpstreamError;

/// How long an origin whose connection broke while the body was sent is given for an
/// answer it may have sent before it closed (a 413 of its own): it is in the socket's
/// buffer already when it is there at all.
const EARLY_ANSWER: Duration = Duration::from_millis(200);

impl Upstream {
    /// Sends `req` with its streamed `body` on `conn` and reads the response head.
    pub(super) async fn send_streamed(
        &self,
        conn: &mut Conn,
        req: &Outgoing<'_>,
        (hop, head_request): (Option<trace::Hop>, bool),
        body: &RequestBody,
    ) -> Result<(Head, BodyState, bool), Attempt> {
        req.encode(&mut conn.write, &self.path_prefix, hop);
        let chunked = body.length().is_none();
        let head = std::mem::take(&mut conn.write);
        let stall = self.response_timeout;
        let written = conn
            .write_body(&head, body, (chunked, head_request), stall)
            .await;
        conn.write = head;
        match written {
            Ok(()) => {}
            Err(Sending::Answered) => {
                // Its answer, on a connection that cannot carry another request (the
                // body it was promised was cut short).
                let deadline = evloop::time::now() + self.response_timeout;
                let read = timeout_at(deadline, self.read_head(conn, head_request, false));
                return match read.await {
                    Ok(Ok((head, state, _))) => Ok((head, state, false)),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(self.timed_out()),
                };
            }
            Err(Sending::Stalled) => return Err(self.timed_out()),
            Err(Sending::Client(message)) => return Err(Attempt::Body(message)),
            Err(Sending::Broken(e)) => {
                // The origin may have answered without reading the rest, then closed.
                let early = timeout(EARLY_ANSWER, self.read_head(conn, head_request, false));
                if let Ok(Ok((head, state, _))) = early.await {
                    return Ok((head, state, false));
                }
                return Err(Attempt::Broken(e));
            }
        }
        let deadline = evloop::time::now() + self.response_timeout;
        match timeout_at(deadline, self.read_head(conn, head_request, false)).await {
            Ok(read) => read,
            Err(_) => Err(self.timed_out()),
        }
    }

    fn timed_out(&self) -> Attempt {
        Attempt::Failed(UpstreamError::ResponseTimeout {
            upstream: self.name.clone(),
        })
    }
}

/// Why sending a streamed body stopped.
enum Sending {
    /// The peer took no byte for the response timeout.
    Stalled,
    /// The connection broke.
    Broken(io::Error),
    /// The client's body broke off (it went away, or passed a limit).
    Client(String),
    /// The peer sent an error head before the body's end.
    Answered,
}

impl Conn {
    /// Writes `head`, then the body's pieces as they come, each with its chunked framing
    /// when `chunked`, and the last chunk at the end. The head goes out with the first
    /// piece when that is here already (one write), else on its own at once, so that the
    /// origin sees the request while the client is still sending.
    async fn write_body(
        &mut self,
        head: &[u8],
        body: &RequestBody,
        (chunked, head_request): (bool, bool),
        stall: Duration,
    ) -> Result<(), Sending> {
        let mut pending: &[u8] = head;
        let watch = (stall, head_request);
        loop {
            let next = match poll_fn(|cx| Poll::Ready(body.poll_chunk(cx))).await {
                Poll::Ready(next) => next,
                Poll::Pending => {
                    self.write_parts(&[pending], watch).await?;
                    pending = b"";
                    // The client's next piece, unless the peer answers first.
                    poll_fn(|cx| match body.poll_chunk(cx) {
                        Poll::Ready(next) => Poll::Ready(Ok(next)),
                        Poll::Pending => self.poll_answer(cx, head_request).map(Err),
                    })
                    .await?
                }
            };
            match next {
                None => {
                    let last: &[u8] = if chunked { wire::LAST_CHUNK } else { b"" };
                    return self.write_parts(&[pending, last], watch).await;
                }
                Some(Err(e)) => return Err(Sending::Client(e.0)),
                Some(Ok(chunk)) if chunked => {
                    let mut size = [0u8; 20];
                    let n = wire::chunk_size_line(chunk.len(), &mut size);
                    self.write_parts(&[pending, &size[..n], &chunk, b"\r\n"], watch)
                        .await?;
                }
                Some(Ok(chunk)) => self.write_parts(&[pending, &chunk], watch).await?,
            }
            pending = b"";
        }
    }

    /// Writes up to four pieces whole with as few vectored writes as the socket takes;
    /// `Stalled` when one write waits `stall` for the peer; `Answered` when the peer
    /// answers while a write waits.
    async fn write_parts(
        &mut self,
        parts: &[&[u8]],
        (stall, head_request): (Duration, bool),
    ) -> Result<(), Sending> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut done = 0;
        while done < total {
            let mut slices = [io::IoSlice::new(&[]); 4];
            let k = wire::unsent(parts, done, &mut slices);
            // The write, unless the peer answers while it waits.
            let write = poll_fn(|cx| {
                let stream = std::pin::Pin::new(&mut self.stream);
                match stream.poll_write_vectored(cx, &slices[..k]) {
                    Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(Sending::Broken(e))),
                    Poll::Pending => self.poll_answer(cx, head_request).map(Err),
                }
            });
            let n = match timeout(stall, write).await {
                Err(_) => return Err(Sending::Stalled),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(0)) => return Err(Sending::Broken(io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => n,
            };
            done += n;
        }
        // Nothing for TCP; TLS may hold records the socket did not take yet (the peer is
        // not watched meanwhile: that is a record at most).
        match timeout(stall, self.stream.flush()).await {
            Err(_) => Err(Sending::Stalled),
            Ok(Err(e)) => Err(Sending::Broken(e)),
            Ok(Ok(())) => Ok(()),
        }
    }
}

impl Conn {
    /// Ready when the peer sent something while the body is still going out: an error
    /// head (`Answered`; also bytes that do not parse, which `read_head` then refuses),
    /// or its end (`Broken`). Interim heads are consumed and passed over; a head still
    /// arriving is waited for; any other head waits for the body's end in the buffer.
    fn poll_answer(
        &mut self,
        cx: &mut std::task::Context<'_>,
        head_request: bool,
    ) -> Poll<Sending> {
        loop {
            while !self.read.is_empty() {
                let mut storage = wire::HeaderStorage::new();
                let read = &self.read;
                match wire::parse_response(read, &mut storage, head_request, MAX_HEAD, MAX_FIELDS) {
                    Ok(Some(r)) if r.is_interim() => {
                        let used = r.head_len;
                        bytes::Buf::advance(&mut self.read, used);
                    }
                    Ok(None) => break,
                    Ok(Some(r)) if r.status < 400 => return Poll::Pending,
                    Ok(Some(_)) | Err(_) => return Poll::Ready(Sending::Answered),
                }
            }
            match self.poll_fill(cx, READ_ROOM) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Sending::Broken(e)),
            }
        }
    }
}
