//! One connection: read, parse every complete request in the buffer, answer them in
//! order into one batch, flush the batch, repeat. The hot path is this loop.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::{BodyFraming, Chunk, ChunkedDecoder, HeaderStorage, Version};

use crate::files;
use crate::output::Output;
use crate::worker::Worker;

/// Flush a batch once this much is queued, before parsing more pipelined requests, so a
/// deep pipeline cannot grow the output buffer without bound.
const FLUSH_AT: usize = 64 * 1024;

/// A body being skipped so that the next request on the connection starts at the right
/// byte. Static files take no bodies, but clients may still send them.
enum Discard {
    None,
    Length(u64),
    Chunked { decoder: ChunkedDecoder, seen: u64 },
}

pub(crate) async fn serve(mut stream: TcpStream, worker: &Worker) {
    let mut buf = vec![0u8; worker.shared.limits.max_head_size].into_boxed_slice();
    let mut out = Output::new();
    let result = run(&mut stream, worker, &mut buf, &mut out).await;
    if let Ok(Ending::Linger) = result {
        linger(&mut stream, &mut buf).await;
    }
}

enum Ending {
    /// The peer closed, or we are shutting down after finishing the responses.
    Closed,
    /// We decided to close after a response: half-close and drain before closing.
    Linger,
}

async fn run(
    stream: &mut TcpStream,
    worker: &Worker,
    buf: &mut [u8],
    out: &mut Output,
) -> io::Result<Ending> {
    let limits = &worker.shared.limits;
    let (mut start, mut end) = (0usize, 0usize);
    let mut discard = Discard::None;
    loop {
        worker.date.refresh();
        let mut close = false;
        // Stopped parsing with complete requests still buffered (batch full).
        let mut more = false;
        loop {
            if !skip_body(&mut discard, buf, &mut start, end, limits.max_body_size)? {
                break;
            }
            if start == end {
                break;
            }
            if out.queued() >= FLUSH_AT {
                more = true;
                break;
            }
            let mut storage = HeaderStorage::new();
            match wire::parse_request(&buf[start..end], &mut storage, limits) {
                Ok(Some(req)) => {
                    let keep_alive = req.keep_alive && !worker.is_shutting_down();
                    if req.expect_continue && end - start == req.head_len {
                        // The client waits for this before sending the body we will read.
                        out.buf()
                            .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    files::respond(&req, worker, out, keep_alive);
                    start += req.head_len;
                    discard = match req.body {
                        BodyFraming::None => Discard::None,
                        BodyFraming::Length(n) => Discard::Length(n),
                        BodyFraming::Chunked => Discard::Chunked {
                            decoder: ChunkedDecoder::new(limits.max_head_size),
                            seen: 0,
                        },
                    };
                    if !keep_alive {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "refusing request");
                    files::write_simple(
                        worker,
                        out.buf(),
                        e.status(),
                        b"",
                        false,
                        Version::Http11,
                        false,
                    );
                    close = true;
                    break;
                }
            }
        }
        if !out.is_empty() {
            out.flush(stream).await?;
        }
        if close {
            return Ok(Ending::Linger);
        }
        if worker.is_shutting_down() {
            return Ok(Ending::Closed);
        }
        if more {
            continue;
        }
        if start == end {
            start = 0;
            end = 0;
        } else if start > 0 {
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
        }
        let n = stream.read(&mut buf[end..]).await?;
        if n == 0 {
            return Ok(Ending::Closed);
        }
        end += n;
    }
}

/// Consumes body bytes from `buf[*start..end]`. Returns whether the body is complete
/// (and the next request may be parsed). A malformed or oversized chunked body is an
/// error: the response has gone out already, so all we can do is close.
fn skip_body(
    discard: &mut Discard,
    buf: &[u8],
    start: &mut usize,
    end: usize,
    max_body_size: u64,
) -> io::Result<bool> {
    match discard {
        Discard::None => Ok(true),
        Discard::Length(left) => {
            let take = (*left).min((end - *start) as u64);
            *start += take as usize;
            *left -= take;
            if *left == 0 {
                *discard = Discard::None;
                return Ok(true);
            }
            Ok(false)
        }
        Discard::Chunked { decoder, seen } => loop {
            let (used, chunk) = decoder
                .decode(&buf[*start..end])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            *start += used;
            match chunk {
                Chunk::Data(data) => {
                    *seen += data.len() as u64;
                    if *seen > max_body_size {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            wire::Error::BodyTooLarge,
                        ));
                    }
                }
                Chunk::Done => {
                    *discard = Discard::None;
                    return Ok(true);
                }
                Chunk::NeedMore => return Ok(false),
            }
        },
    }
}

/// Closing right after a response while the client may still be sending would make the
/// kernel answer with RST, which can destroy the response before the client reads it.
/// So: half-close, then read and drop what arrives for a bounded time and amount
/// (nginx's lingering close).
async fn linger(stream: &mut TcpStream, buf: &mut [u8]) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut total = 0usize;
        while let Ok(n) = stream.read(buf).await {
            total += n;
            if n == 0 || total > 256 * 1024 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}
