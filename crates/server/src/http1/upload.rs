//! A request body streamed to its handler as it arrives (`request_buffering = false`):
//! what the read buffer holds goes into the handler's pipe as the pipe has room, then the
//! next read: for a body of declared length straight into a piece of the pipe (`PIECE`),
//! for a chunked one into the read buffer, for its decoder. So the pipe, a read past its
//! capacity and the piece the handler is sending are in memory, not the body. While the
//! pipe is full the connection reads nothing, and TCP's window tells the client to wait:
//! the origin's pace is the client's.

use std::io;
use std::rc::Rc;

use bytes::BufMut;
use handler::{BodyFailure, BodyWriter};
use tokio::io::AsyncReadExt;
use wire::{BodyFraming, Chunk, ChunkedDecoder};

use super::Conn;
use crate::conn_state::ConnState;
use crate::exchange::finish::Pumped;
use crate::worker::Worker;

/// The most one read of a body of declared length takes from the client: the pipe's
/// capacity. Such a body is read straight into pieces of the pipe, not through the
/// connection's read buffer: no copy of it in user space, and reads of up to this, not
/// of the read buffer's size (`limits.max_head_size`). Measured with
/// bench/upstream-protocols.sh's upload part (8 MiB POSTs): docs/benchmarks.md, "Upload
/// bodies read straight into the pipe".
const PIECE: usize = handler::PIPE_CAPACITY;

/// A piece's buffer with less room than this left is replaced by a new one (a read into
/// a sliver would cost a system call for a few bytes).
const MIN_PIECE: usize = 16 * 1024;

/// `read`, unless the handler drops its end of the pipe first (it answered and wants no
/// more of the body): then `None`, and the client is not read.
async fn unless_gone<F: std::future::Future<Output = io::Result<usize>>>(
    writer: &BodyWriter,
    read: F,
) -> Option<io::Result<usize>> {
    tokio::select! {
        biased;
        () = std::future::poll_fn(|cx| writer.poll_reader_gone(cx)) => None,
        n = read => Some(n),
    }
}

impl Conn {
    /// Streams the request body into `writer` (see the module's comment), within
    /// `limits.max_body_size` (past it: 413) and `timeouts.body`, which here is the
    /// longest the client may leave the server waiting for its next bytes (a wait for the
    /// origin to take them does not count). A client that closes mid-body ends the pipe
    /// with an error (its handler aborts the upstream request) and the connection.
    pub(super) async fn pump_body(
        &mut self,
        framing: BodyFraming,
        expect_continue: bool,
        writer: BodyWriter,
    ) -> io::Result<Pumped> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let limits = &worker.shared.limits;
        let max = limits.max_body_size;
        let mut left = match framing {
            BodyFraming::None | BodyFraming::Length(0) => {
                writer.finish();
                return Ok(Pumped::Done);
            }
            BodyFraming::Length(n) => n,
            BodyFraming::Chunked => u64::MAX,
        };
        let mut decoder = match framing {
            BodyFraming::Chunked => Some(ChunkedDecoder::new(limits.max_head_size)),
            _ => None,
        };
        if expect_continue && self.start == self.end {
            self.send(wire::CONTINUE).await?;
        }
        let mut seen = 0u64;
        let mut piece = bytes::BytesMut::new();
        loop {
            // Hand over what the buffer holds, as the pipe has room.
            while self.start < self.end {
                if !self.wait_room(&writer).await {
                    return Ok(Pumped::Stopped);
                }
                let Some(buffers) = self.buffers.as_ref() else {
                    return Ok(Pumped::Close);
                };
                let available = &buffers.read[self.start..self.end];
                let Some(decoder) = decoder.as_mut() else {
                    let take = left.min(available.len() as u64) as usize;
                    writer.push(bytes::Bytes::copy_from_slice(&available[..take]));
                    self.start += take;
                    left -= take as u64;
                    if left == 0 {
                        writer.finish();
                        return Ok(Pumped::Done);
                    }
                    continue;
                };
                match decoder.decode(available) {
                    Ok((used, Chunk::Data(data))) => {
                        seen += data.len() as u64;
                        if seen > max {
                            worker.refused(self.origin.peer(), wire::Error::BodyTooLarge);
                            self.refused = true;
                            writer.fail(BodyFailure::TooLarge);
                            return Ok(Pumped::Refused(413));
                        }
                        writer.push(bytes::Bytes::copy_from_slice(data));
                        self.start += used;
                    }
                    Ok((used, Chunk::Done)) => {
                        self.start += used;
                        writer.finish();
                        return Ok(Pumped::Done);
                    }
                    Ok((used, Chunk::NeedMore)) => {
                        self.start += used;
                        break;
                    }
                    Err(e) => {
                        worker.refused(self.origin.peer(), e);
                        self.refused = true;
                        writer.fail(BodyFailure::Malformed);
                        return Ok(Pumped::Close);
                    }
                }
            }
            // A body of declared length: what the buffer held went over above, and the
            // rest is read straight into pieces of the pipe (see `PIECE`) once it has
            // room. A chunked one goes through the read buffer, for its decoder.
            let direct = decoder.is_none();
            if direct && !self.wait_room(&writer).await {
                return Ok(Pumped::Stopped);
            }
            if !direct {
                // Need more bytes: keep what is left unread (the decoder keeps its own
                // state, so this is at most a piece it could not use yet) at the front.
                if let Some(buffers) = self.buffers.as_mut() {
                    buffers.read.copy_within(self.start..self.end, 0);
                }
                self.end -= self.start;
                self.start = 0;
            }
            if !worker.enter(self.slot, ConnState::ReadingBody) {
                writer.fail(BodyFailure::TimedOut);
                return Ok(Pumped::Close);
            }
            let n = if direct {
                let want = left.min(PIECE as u64) as usize;
                if piece.capacity() < want.min(MIN_PIECE) {
                    // The rest of a small body takes its own size (at least MIN_PIECE).
                    piece = bytes::BytesMut::with_capacity(want.max(MIN_PIECE));
                }
                let mut room = (&mut piece).limit(want);
                unless_gone(&writer, self.stream.read_buf(&mut room)).await
            } else {
                let Some(buffers) = self.buffers.as_mut() else {
                    return Ok(Pumped::Close);
                };
                if self.end == buffers.read.len() {
                    // A chunk's size line longer than the buffer: the decoder refuses it
                    // first; this only keeps a broken decoder from spinning.
                    writer.fail(BodyFailure::Malformed);
                    return Ok(Pumped::Close);
                }
                let read = self.stream.read(&mut buffers.read[self.end..]);
                unless_gone(&writer, read).await
            };
            let n = match n {
                None => return Ok(Pumped::Stopped),
                Some(Ok(0)) => {
                    writer.fail(BodyFailure::ClientGone);
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Some(Ok(n)) => n,
                Some(Err(e)) => {
                    writer.fail(BodyFailure::ClientGone);
                    return Err(e);
                }
            };
            // Progress: `timeouts.body` counts from the last bytes.
            worker.touch(self.slot);
            if let Some(metrics) = worker.metrics() {
                metrics.received(n);
            }
            if !direct {
                self.end += n;
                continue;
            }
            writer.push(piece.split().freeze());
            left -= n as u64;
            if left == 0 {
                writer.finish();
                return Ok(Pumped::Done);
            }
        }
    }

    /// Waits for room in the pipe; `false` when the handler dropped its end. A wait is
    /// the origin's, not the client's: the connection counts as handling meanwhile.
    async fn wait_room(&mut self, writer: &BodyWriter) -> bool {
        if writer.is_full() {
            let _ = self.worker.enter(self.slot, ConnState::Handling);
        }
        writer.room().await
    }
}
