//! Reading a response body from its connection (HTTP/1.1: as its framing says; HTTP/2:
//! its stream's DATA), and handing the connection back to the pool at its end.

use std::io;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use wire::Chunk;

use super::{BodyState, Conn, Pooled, MAX_READ};
use crate::error::UpstreamError;

impl Pooled {
    /// The connection of a `101 Switching Protocols`, for the server to splice with the
    /// client's, with the bytes that came after the head. The pool never sees it again.
    pub(crate) fn into_tunnel(mut self) -> Option<(std::net::TcpStream, Bytes)> {
        let conn = self.conn.take()?;
        let Conn {
            stream, mut read, ..
        } = *conn;
        let early = read.split().freeze();
        stream.into_tcp()?.into_std().ok().map(|s| (s, early))
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.busy.upstream.response_timeout
    }

    /// The whole body when it is already buffered (a small response arrives with its
    /// head): the connection goes back to the pool at once, and the response can be
    /// written with its head in one go. `None` when more is to be read.
    pub(crate) fn take_whole(&mut self) -> Option<Bytes> {
        if let BodyState::H2(stream) = &self.body {
            let whole = stream.take_whole()?;
            self.body = BodyState::Done;
            return Some(whole);
        }
        let conn = self.conn.as_mut()?;
        let whole = match self.body {
            BodyState::Done => Bytes::new(),
            BodyState::Length(n) if conn.read.len() as u64 >= n => {
                conn.read.split_to(n as usize).freeze()
            }
            _ => return None,
        };
        self.body = BodyState::Done;
        self.release();
        Some(whole)
    }

    /// The next piece of the body (`None` at its end, when the connection goes back to
    /// the pool if it may carry another request).
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, UpstreamError>> {
        let protocol = |message: String| UpstreamError::Protocol {
            upstream: self.busy.upstream.name.clone(),
            message,
        };
        if let BodyState::H2(stream) = &self.body {
            return match ready!(stream.poll_data(cx)) {
                // The stream stays until the response is dropped: its trailers follow.
                Ok(data) => Poll::Ready(Ok(data)),
                Err(e) => Poll::Ready(Err(protocol(e.to_string()))),
            };
        }
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(Ok(None));
            };
            let buffered = conn.read.len();
            let want = match self.body {
                BodyState::Length(n) => n.min(MAX_READ as u64) as usize,
                _ => MAX_READ,
            };
            match &mut self.body {
                BodyState::Done => {
                    self.release();
                    return Poll::Ready(Ok(None));
                }
                BodyState::Length(0) => self.body = BodyState::Done,
                BodyState::Length(left) if buffered > 0 => {
                    let take = (*left).min(buffered as u64);
                    *left -= take;
                    return Poll::Ready(Ok(Some(conn.read.split_to(take as usize).freeze())));
                }
                BodyState::Close if buffered > 0 => {
                    return Poll::Ready(Ok(Some(conn.read.split().freeze())));
                }
                BodyState::Chunked(decoder) if buffered > 0 => match decoder.decode(&conn.read) {
                    Err(e) => return Poll::Ready(Err(protocol(format!("chunked body: {e}")))),
                    Ok((used, Chunk::Data(data))) => {
                        let len = data.len();
                        let start = used - len;
                        conn.read.advance(start);
                        return Poll::Ready(Ok(Some(conn.read.split_to(len).freeze())));
                    }
                    Ok((used, Chunk::Done)) => {
                        conn.read.advance(used);
                        self.body = BodyState::Done;
                    }
                    Ok((used, Chunk::NeedMore)) => {
                        conn.read.advance(used);
                        if let Err(e) = ready!(conn.poll_fill(cx, MAX_READ)) {
                            return Poll::Ready(Err(protocol(e.to_string())));
                        }
                    }
                },
                _ => match ready!(conn.poll_fill(cx, want)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        if matches!(self.body, BodyState::Close) {
                            self.keep_alive = false;
                            self.body = BodyState::Done;
                        } else {
                            return Poll::Ready(Err(protocol(
                                "connection closed before the body ended".into(),
                            )));
                        }
                    }
                    Err(e) => return Poll::Ready(Err(protocol(e.to_string()))),
                },
            }
        }
    }

    /// Back to the pool, when the connection may carry another request and nothing is
    /// left over in its buffer (bytes beyond the response would be a broken upstream).
    pub(super) fn release(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if !self.keep_alive || !conn.read.is_empty() {
            return;
        }
        let pool = &self.busy.upstream.peers[self.busy.peer as usize];
        let mut idle = pool.idle.borrow_mut();
        if idle.len() < pool.max_idle {
            // Reclaims the buffer's room once the pieces handed on are gone.
            conn.read.clear();
            idle.push(conn);
        }
    }
}

impl Pooled {
    /// The trailers that ended an HTTP/2 response's body, taken once.
    pub(crate) fn take_trailers(&mut self) -> Option<handler::FieldList> {
        match &self.body {
            BodyState::H2(stream) => stream.take_trailers(),
            _ => None,
        }
    }

    /// Gives the response up half way (a timeout, an error): the HTTP/1.1 connection is
    /// closed, the HTTP/2 stream reset.
    pub(crate) fn abandon(&mut self) {
        self.conn = None;
        self.body = BodyState::Done;
    }
}
