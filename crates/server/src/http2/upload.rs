//! A stream's request body streamed to its handler as it arrives (`request_buffering =
//! false`): a DATA frame's bytes are taken from the stream (which gives them back to the
//! client's flow-control window) only when the handler's pipe has room, so the client
//! sends no faster than the handler (the proxy, and so the origin) takes the body, and
//! the stream holds at most its window.

use std::future::poll_fn;
use std::time::Duration;

use handler::{BodyFailure, BodyWriter};

use super::link::{Cancelled, Link};
use crate::exchange::finish::Pumped;
use crate::worker::Worker;

/// Streams the body into `writer`, within `limits.max_body_size` (413 past it) and
/// `timeouts.body`, the longest wait for the client's next bytes (408 past it); a wait
/// for the handler to take them does not count.
pub(super) async fn pump_body(
    worker: &Worker,
    link: &Link<'_>,
    end_stream: bool,
    writer: BodyWriter,
) -> Result<Pumped, Cancelled> {
    if end_stream {
        writer.finish();
        return Ok(Pumped::Done);
    }
    let max = worker.shared.limits.max_body_size;
    let wait = Duration::from_secs_f64(worker.current().gen.config.timeouts.body);
    let mut seen = 0u64;
    loop {
        let room = tokio::select! {
            biased;
            () = poll_fn(|cx| link.poll_cancelled(cx)) => None,
            room = writer.room() => Some(room),
        };
        match room {
            None => {
                writer.fail(BodyFailure::ClientGone);
                return Err(Cancelled);
            }
            Some(false) => {
                link.stop_reading();
                return Ok(Pumped::Stopped);
            }
            Some(true) => {}
        }
        let next = tokio::select! {
            biased;
            () = poll_fn(|cx| writer.poll_reader_gone(cx)) => {
                link.stop_reading();
                return Ok(Pumped::Stopped);
            }
            next = evloop::time::timeout(wait, link.body_chunk()) => next,
        };
        match next {
            Err(_) => {
                link.stop_reading();
                writer.fail(BodyFailure::TimedOut);
                return Ok(Pumped::Refused(408));
            }
            Ok(Err(Cancelled)) => {
                writer.fail(BodyFailure::ClientGone);
                return Err(Cancelled);
            }
            Ok(Ok(None)) => {
                link.stop_reading();
                writer.finish();
                return Ok(Pumped::Done);
            }
            Ok(Ok(Some(chunk))) => {
                seen += chunk.len() as u64;
                if seen > max {
                    link.stop_reading();
                    writer.fail(BodyFailure::TooLarge);
                    return Ok(Pumped::Refused(413));
                }
                writer.push(chunk);
            }
        }
    }
}
