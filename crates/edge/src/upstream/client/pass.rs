//! A response body passed through as it arrives, with its idle timeout.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use evloop::time::Sleep;

use super::Pooled;
use crate::error::UpstreamError;

/// A response body passed through as it arrives; the connection goes back to the pool
/// when the body ends, and is closed if the body is dropped before.
pub(crate) struct PassBody {
    pooled: Pooled,
    idle_timeout: Duration,
    /// Reset whenever bytes arrive: the longest silence allowed inside the body.
    idle: Pin<handler::Pooled<Sleep>>,
}

impl PassBody {
    pub(crate) fn new(pooled: Pooled) -> PassBody {
        let idle_timeout = pooled.busy.upstream.response_timeout;
        PassBody {
            pooled,
            idle_timeout,
            idle: handler::pin(evloop::time::sleep(idle_timeout)),
        }
    }

    /// The trailers that ended the body (HTTP/2 upstreams only).
    pub(crate) fn take_trailers(&mut self) -> Option<handler::FieldList> {
        self.pooled.take_trailers()
    }

    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        match self.pooled.poll_chunk(cx) {
            Poll::Pending => {
                if self.idle.as_mut().poll(cx).is_ready() {
                    self.pooled.abandon();
                    return Poll::Ready(Some(Err(UpstreamError::ResponseTimeout {
                        upstream: self.pooled.busy.upstream.name.clone(),
                    })));
                }
                Poll::Pending
            }
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => {
                self.pooled.abandon();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Ok(Some(data))) => {
                let deadline = evloop::time::now() + self.idle_timeout;
                self.idle.as_mut().reset(deadline);
                Poll::Ready(Some(Ok(data)))
            }
        }
    }
}
