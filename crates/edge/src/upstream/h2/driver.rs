//! The task that owns an HTTP/2 connection's socket, on the worker's event loop: it
//! opens the connection, writes what the state gathered in `out` (requests' frames,
//! acknowledgements, window updates), reads and applies the peer's frames, and checks
//! an idle connection's liveness with PING. It ends when the connection breaks, when the
//! peer went away (GOAWAY) and its last stream is done, or when nothing holds the
//! connection any more (the pool was dropped by a reload).

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use evloop::time::sleep;
use tokio::io::AsyncWrite;

use super::state::{Failed, Shared};
use crate::upstream::stream::Stream;

/// Silence on a connection without streams after which a PING asks whether the peer is
/// still there (RFC 9113 section 6.7): a connection that a firewall or a dead peer
/// dropped without a word is found out before a request is sent on it.
const PING_IDLE: Duration = Duration::from_secs(30);
/// How long the answer to that PING may take.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// Room the read buffer keeps free before each read.
const READ_ROOM: usize = 32 * 1024;

/// Drives a connection: `opening` connects (TCP, TLS with ALPN h2); a failure fails
/// every stream opened on it meanwhile.
pub(super) async fn drive(
    shared: Rc<RefCell<Shared>>,
    opening: impl Future<Output = Result<Stream, crate::error::UpstreamError>>,
) {
    let stream = match opening.await {
        Ok(stream) => stream,
        Err(e) => {
            shared.borrow_mut().close(Failed::Connect(e));
            return;
        }
    };
    let why = run(&shared, stream).await;
    shared.borrow_mut().close(why);
}

async fn run(shared: &Rc<RefCell<Shared>>, mut stream: Stream) -> Failed {
    let mut read = BytesMut::with_capacity(READ_ROOM);
    let mut writing: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut written = 0;
    let mut flushed = true;
    let mut ping = pin!(sleep(PING_IDLE));
    let mut pinged = false;
    poll_fn(|cx| loop {
        let mut progress = false;
        if written == writing.len() {
            let mut s = shared.borrow_mut();
            if !s.out.is_empty() {
                writing.clear();
                written = 0;
                std::mem::swap(&mut writing, &mut s.out);
                // Senders waiting for `out` to drain may go on.
                for w in s.senders.drain(..) {
                    w.wake();
                }
                progress = true;
            }
        }
        while written < writing.len() {
            match Pin::new(&mut stream).poll_write(cx, &writing[written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Failed::Broken("write zero".into())),
                Poll::Ready(Ok(n)) => {
                    written += n;
                    flushed = false;
                    progress = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Failed::Broken(e.to_string())),
                Poll::Pending => break,
            }
        }
        if written == writing.len() && !flushed {
            // Nothing for TCP; TLS may hold records the socket did not take yet.
            match Pin::new(&mut stream).poll_flush(cx) {
                Poll::Ready(Ok(())) => flushed = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Failed::Broken(e.to_string())),
                Poll::Pending => {}
            }
        }
        if read.capacity() - read.len() < READ_ROOM / 4 {
            read.reserve(READ_ROOM);
        }
        let filled = {
            let reading = tokio::io::AsyncReadExt::read_buf(&mut stream, &mut read);
            match pin!(reading).poll(cx) {
                Poll::Ready(result) => Some(result),
                Poll::Pending => None,
            }
        };
        let mut s = shared.borrow_mut();
        match filled {
            Some(Ok(0)) => {
                return Poll::Ready(Failed::Broken("the peer closed the connection".into()))
            }
            Some(Ok(_)) => {
                if let Err(e) = s.feed(&mut read) {
                    return Poll::Ready(Failed::Broken(format!("HTTP/2: {e}")));
                }
                progress = true;
            }
            Some(Err(e)) => return Poll::Ready(Failed::Broken(e.to_string())),
            None => {}
        }
        if std::mem::take(&mut s.heard) {
            pinged = false;
            ping.as_mut().reset(evloop::time::now() + PING_IDLE);
        }
        if progress {
            continue;
        }
        let unheld = Rc::strong_count(shared) == 1;
        if s.streams.is_empty() && (s.going_away || unheld) && written == writing.len() {
            return Poll::Ready(Failed::Broken("the connection was closed".into()));
        }
        if ping.as_mut().poll(cx).is_ready() {
            if pinged {
                return Poll::Ready(Failed::Broken("no answer to a PING".into()));
            }
            if s.streams.is_empty() {
                h2codec::frame::write_ping(&mut s.out, *b"tessera!");
                pinged = true;
                ping.as_mut().reset(evloop::time::now() + PING_TIMEOUT);
            } else {
                // Busy streams have their own response timeout.
                ping.as_mut().reset(evloop::time::now() + PING_IDLE);
            }
            continue;
        }
        s.driver = Some(cx.waker().clone());
        return Poll::Pending;
    })
    .await
}
