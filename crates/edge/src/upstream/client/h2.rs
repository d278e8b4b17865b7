//! One attempt on a peer spoken to in HTTP/2 (`protocol = "h2"`/`"h2c"`): a stream on
//! one of the worker's connections to the peer (a new connection when none has room),
//! the request's head and body sent on it, and its response head awaited. A stream the
//! peer did not process (above a GOAWAY's last stream, or refused) is sent again on
//! another connection, as RFC 9113 section 8.7 allows for any method.

use std::rc::Rc;
use std::time::Duration;

use evloop::time::{timeout_at, Instant};
use tokio::sync::OwnedSemaphorePermit;

use super::{Busy, Failure, Head, Outgoing, Pooled, Upstream};
use crate::config::Protocol;
use crate::error::UpstreamError;
use crate::upstream::h2::{request_fields, Failed, H2Sender, H2Stream};

/// How many times a request the peer did not process is sent again on another
/// connection of the same peer before the attempt fails (and another peer may be tried):
/// enough for a burst of requests larger than what a peer takes per connection (nginx
/// answers `keepalive_requests` streams, then GOAWAY), few enough to give up soon on a
/// peer that refuses every stream.
const RESENDS: u32 = 32;

impl Upstream {
    /// One attempt on `peer` over HTTP/2, holding `permit` (a stream of the peer's
    /// `max_connections`) and `busy` until the response ends. `callers`: the deadline is
    /// the caller's own, not the response timeout.
    pub(super) async fn attempt_h2(
        self: &Rc<Self>,
        (peer, hop): (usize, Option<trace::Hop>),
        req: &Outgoing<'_>,
        (deadline, callers): (Instant, bool),
        (permit, busy): (OwnedSemaphorePermit, Busy),
    ) -> Result<(Head, Pooled), Failure> {
        let protocol = |message: String| UpstreamError::Protocol {
            upstream: self.name.clone(),
            message,
        };
        if req.upgrade.is_some() {
            let message = "an upgrade (WebSocket) cannot be sent over HTTP/2".to_string();
            return Err(Failure::of(protocol(message), false, false));
        }
        let mut h1 = Vec::with_capacity(512);
        req.encode(&mut h1, &self.path_prefix, hop);
        let fields = request_fields(&h1, self.protocol == Protocol::H2);
        let has_body = req.streamed.is_some() || !req.body.is_empty();
        let grpc = match &req.fields {
            super::Fields::Plain(fields) => crate::grpc::is_grpc(fields),
            super::Fields::Forwarded(f) => crate::grpc::is_grpc(f.client_headers),
        };
        let mut resends = RESENDS;
        loop {
            let conn = self.peers[peer].h2.with_room().unwrap_or_else(|| {
                self.opened_connection(peer);
                let me = self.clone();
                let opening = async move { me.connect_stream(peer, deadline, None).await };
                let max = self.max_streams_per_connection;
                self.peers[peer].h2.open(max, opening)
            });
            let stream = H2Stream::open(conn, fields.iter().copied(), !has_body);
            let mut pump = None;
            let result = match req.streamed {
                // The body goes out on a task of its own while the response comes back,
                // both ways at once (gRPC's streams). As for HTTP/1.1, the response
                // timeout does not run while it is sent (a slow client's upload takes as
                // long as it does), only from its end.
                Some(body) => {
                    let mut sending = evloop::spawn_local(pump_body(
                        stream.sender(),
                        body.share(),
                        self.response_timeout,
                    ));
                    pump = Some(sending.abort_handle());
                    let head = tokio::select! {
                        head = self.head_h2(&stream) => Some(head),
                        _ = &mut sending => None,
                    };
                    match head {
                        // A head before the body's end is passed on at once for gRPC
                        // (its streams go both ways) and for an error (the origin's
                        // refusal); any other waits for the body's end, as over HTTP/1.1,
                        // so that a client that cannot send and receive at once (an
                        // HTTP/1.1 one) gets the whole of both.
                        Some(Ok(head)) if !grpc && head.status.as_u16() < 400 => {
                            let _ = (&mut sending).await;
                            Ok(Ok(head))
                        }
                        Some(head) => Ok(head),
                        None => {
                            timeout_at(
                                deadline.max(evloop::time::now() + self.response_timeout),
                                self.head_h2(&stream),
                            )
                            .await
                        }
                    }
                }
                None => {
                    timeout_at(deadline, async {
                        if has_body {
                            if let Err(e) = stream.send(req.body.clone(), true).await {
                                // An origin may answer before it read the whole body.
                                return self.head_h2(&stream).await.map_err(|_| e);
                            }
                        }
                        self.head_h2(&stream).await
                    })
                    .await
                }
            };
            if result.as_ref().map_or(true, |r| r.is_err()) {
                // No response: the body's task must not take more of the body.
                if let Some(pump) = pump {
                    pump.abort();
                }
            }
            let resendable = req.streamed.map_or(true, |b| b.taken() == 0);
            match result {
                Err(_) => {
                    let error = UpstreamError::ResponseTimeout {
                        upstream: self.name.clone(),
                    };
                    return Err(Failure::of(error, false, !callers));
                }
                Ok(Ok(head)) => {
                    let pooled = Pooled {
                        conn: None,
                        body: super::BodyState::H2(stream),
                        keep_alive: false,
                        _permit: permit,
                        busy,
                    };
                    return Ok((head, pooled));
                }
                Ok(Err(Failed::Unprocessed)) if resendable && resends > 0 => {
                    resends -= 1;
                    tracing::debug!(upstream = %self.name, "stream not processed (GOAWAY or refused); sending it on another connection");
                }
                Ok(Err(Failed::Unprocessed)) => {
                    let error = protocol(Failed::Unprocessed.to_string());
                    return Err(Failure::of(error, resendable, true));
                }
                Ok(Err(Failed::Connect(error))) => return Err(Failure::of(error, true, true)),
                Ok(Err(Failed::ClientBody(message))) => {
                    let upstream = self.name.clone();
                    let error = UpstreamError::RequestBody { upstream, message };
                    return Err(Failure::of(error, false, false));
                }
                Ok(Err(Failed::Broken(message))) => {
                    let retryable = req.idempotent() && resendable;
                    return Err(Failure::of(protocol(message), retryable, true));
                }
            }
        }
    }

    /// The stream's response head, as the proxy reads heads.
    async fn head_h2(&self, stream: &H2Stream) -> Result<Head, Failed> {
        let (status, headers) = std::future::poll_fn(|cx| stream.poll_head(cx)).await?;
        let status = http::StatusCode::from_u16(status)
            .map_err(|_| Failed::Broken(format!("status {status}")))?;
        Ok(Head {
            status,
            version: http::Version::HTTP_2,
            headers,
        })
    }
}

/// Sends the client's body as it arrives on the stream of `sender`; a piece the peer
/// takes nothing of for `stall` (the response timeout), or a body that broke off on the
/// client's side, resets the stream.
async fn pump_body(sender: H2Sender, body: handler::RequestBody, stall: Duration) {
    loop {
        let next = std::future::poll_fn(|cx| body.poll_chunk(cx)).await;
        let (chunk, end) = match next {
            None => (bytes::Bytes::new(), true),
            Some(Err(e)) => return sender.fail(Failed::ClientBody(e.0)),
            Some(Ok(chunk)) => (chunk, false),
        };
        match evloop::time::timeout(stall, sender.send(chunk, end)).await {
            Err(_) => {
                let why = "the peer took no request body byte in time".into();
                return sender.fail(Failed::Broken(why));
            }
            Ok(Err(_)) => return,
            Ok(Ok(())) if end => return,
            Ok(Ok(())) => {}
        }
    }
}
