//! A connection from accept to its end: the TLS handshake on a `tls_listen` listener,
//! then the choice of HTTP/1.1 or HTTP/2, made here and nowhere else, from the
//! listener's kind (`h2c_listen` speaks HTTP/2 only), ALPN (over TLS), or the first
//! bytes (the HTTP/2 preface on a cleartext `listen` port, prior knowledge, which the
//! HTTP/1 connection looks for and hands over to what this module gives it).
//!
//! The connection's slot was taken at accept, in `ReadingHead`: a handshake counts
//! against the connection budget and is closed by the worker's check after
//! `timeouts.head`, like a slow request head. Whatever protocol serves the connection
//! frees the slot when it ends.
//!
//! On a `proxy_protocol` listener the PROXY header comes first, before TLS or HTTP,
//! read within `timeouts.proxy_protocol`; a connection without a valid one is closed
//! and counted (`tessera_access_denied_total{reason="proxy_protocol"}`).
//!
//! Each kind's future is started on its own rather than as one future that matches on
//! the kind: a connection's future lives in a room of fixed size (`net::tasks`), and an
//! `async fn` keeps its parameters beside the futures they move into.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;
use pool::SlotId;

use crate::config::Kind;
use crate::facts::{Origin, Proxied, TlsFacts};
use crate::http1::{self, Conn, Handoff};
use crate::http2;
use crate::metrics::Handshake;
use crate::net::reactor::Socket;
use crate::net::tls::on_demand;
use crate::net::tls::stream::TlsStream;
use crate::net::tls::ACME_TLS_ALPN;
use crate::net::transport::Stream;
use crate::worker::Worker;

/// Starts the task of a connection accepted on a listener of `kind`, in its slot's room;
/// `proxied`: the listener is one of `proxy_protocol`'s.
pub(crate) fn start(
    (kind, proxied): (Kind, bool),
    socket: Socket,
    peer: SocketAddr,
    worker: Rc<Worker>,
    slot: SlotId,
) {
    let tasks = worker.clone();
    let tasks = &tasks.tasks;
    if !proxied && !admitted(&worker, peer.ip(), slot) {
        worker.free(slot);
        return;
    }
    if proxied {
        tasks.start(slot.index(), proxy_header(kind, socket, peer, worker, slot));
        return;
    }
    let origin = Origin::Direct(peer);
    match kind {
        Kind::Plain => {
            let conn = Conn::new(Stream::Plain(socket), origin, worker, slot);
            tasks.start(slot.index(), http1::serve(conn, after_preface));
        }
        Kind::Tls
            if worker
                .shared
                .acme
                .as_ref()
                .is_some_and(|a| a.takes_demands()) =>
        {
            let tls = Box::pin(tls_on_demand(socket, origin, worker, slot));
            tasks.start(slot.index(), tls);
        }
        Kind::Tls => tasks.start(slot.index(), tls(socket, origin, worker, slot)),
        // The codec reads the preface and closes a connection that does not start with it.
        Kind::H2c => {
            let stream = Stream::Plain(socket);
            let http2 = http2_boxed(stream, Bytes::new(), origin, worker, slot, None);
            tasks.start(slot.index(), http2);
        }
        // A UDP socket has no accept loop (`http3`).
        Kind::Quic => worker.free(slot),
    }
}

/// The PROXY header, then the connection as its listener's kind serves it. What serves
/// it is boxed: this future and that one would not fit in the room together (one
/// allocation more per connection, on these listeners only).
async fn proxy_header(
    kind: Kind,
    socket: Socket,
    peer: SocketAddr,
    worker: Rc<Worker>,
    slot: SlotId,
) {
    let timeout = worker.current().gen.config.timeouts.proxy_protocol;
    let timeout = std::time::Duration::from_secs_f64(timeout);
    let read = crate::net::proxy::read_header(&socket);
    let header = match evloop::time::timeout(timeout, read).await {
        Ok(Ok(header)) => header,
        outcome => {
            let reason = match outcome {
                Ok(Err(e)) => e.to_string(),
                _ => "no PROXY header within timeouts.proxy_protocol".into(),
            };
            tracing::debug!(%peer, reason, "connection refused: PROXY protocol");
            if let Some(metrics) = worker.metrics() {
                metrics.proxy_refused();
            }
            worker.free(slot);
            return;
        }
    };
    let origin = match (header.source, header.tlvs.is_empty()) {
        // v1 UNKNOWN, v2 LOCAL: the proxy's own connection, a health check.
        (None, true) => Origin::Direct(peer),
        (source, _) => {
            let client = source.map_or(peer, |source| {
                let trusted = &worker.current().gen.identity[0].trusted;
                crate::client::of_connection(trusted, peer, source)
            });
            let tlvs = header.tlvs;
            Origin::Proxied(Rc::new(Proxied { peer, client, tlvs }))
        }
    };
    if !admitted(&worker, origin.client().ip(), slot) {
        worker.free(slot);
        return;
    }
    match kind {
        Kind::Plain => {
            let conn = Conn::new(Stream::Plain(socket), origin, worker, slot);
            Box::pin(http1::serve(conn, after_preface)).await;
        }
        Kind::Tls => Box::pin(tls_on_demand(socket, origin, worker, slot)).await,
        Kind::H2c => {
            let stream = Stream::Plain(socket);
            http2_boxed(stream, Bytes::new(), origin, worker, slot, None).await;
        }
        Kind::Quic => worker.free(slot),
    }
}

/// Counts a connection of `client` among its open ones (`limit_conn_per_client`, one
/// test when it is 0); false when it has that many already: the connection is closed
/// at once, without a byte, and counted in
/// `tessera_access_denied_total{host="",reason="limit_conn"}`.
fn admitted(worker: &Worker, client: std::net::IpAddr, slot: SlotId) -> bool {
    let max = worker.current.borrow().gen.config.limit_conn_per_client;
    if max == 0 {
        return true;
    }
    match worker.shared.per_client.take(client, max) {
        Ok(counted) => {
            worker.per_client[slot.index()].set(counted.map_or(0, |c| c + 1));
            true
        }
        Err(()) => {
            tracing::debug!(%client, max, "connection refused: limit_conn_per_client");
            if let Some(metrics) = worker.metrics() {
                metrics.client_conns_refused();
            }
            false
        }
    }
}

/// A cleartext connection that began with the HTTP/2 preface: the bytes read so far go
/// to the HTTP/2 connection.
fn after_preface(handoff: Handoff) -> Pin<Box<impl Future<Output = ()>>> {
    let Handoff {
        stream,
        prefix,
        origin,
        worker,
        slot,
    } = handoff;
    http2_boxed(stream, prefix, origin, worker, slot, None)
}

/// The TLS handshake (which picks the certificate, and with it the site, by SNI), then
/// the protocol ALPN chose.
async fn tls(tcp: Socket, origin: Origin, worker: Rc<Worker>, slot: SlotId) {
    let Some(tls) = worker.shared.tls.as_ref() else {
        worker.free(slot);
        return;
    };
    let current = worker.current();
    match TlsStream::accept(tcp, tls.current(), &current.gen.sites.hosts).await {
        Ok(mut stream) => {
            // The connection is served by whichever generation each request finds.
            drop(current);
            if let Some(metrics) = worker.metrics() {
                let resumed = stream.tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                metrics.handshake(if resumed {
                    Handshake::Resumed
                } else {
                    Handshake::Full
                });
            }
            if stream.tls.alpn_protocol() == Some(ACME_TLS_ALPN) {
                // A CA's TLS-ALPN-01 validator: it has seen the challenge certificate,
                // and sends nothing more (RFC 8737 section 3).
                worker.free(slot);
                return;
            }
            if stream.facts.h2 {
                // HTTP/2 writes the frames of a pass, then flushes once.
                let facts = stream.facts.clone();
                stream.hold_writes_until_flush();
                let stream = Stream::Tls(stream);
                http2_boxed(stream, Bytes::new(), origin, worker, slot, Some(facts)).await;
            } else {
                // Over TLS, HTTP/2 is what ALPN chose (RFC 9113 section 3.3): this
                // connection negotiated HTTP/1.1, and its first bytes are not looked at.
                let conn = Conn::new(Stream::Tls(stream), origin, worker, slot);
                http1::serve(conn, after_preface).await;
            }
        }
        Err(e) => {
            tracing::debug!(peer = %origin.peer(), error = %e, "TLS handshake failed");
            if let Some(metrics) = worker.metrics() {
                metrics.handshake(Handshake::Failed);
            }
            worker.free(slot);
        }
    }
}

/// [`tls`] after, with `[acme] on_demand`, the wait for a certificate for a name first
/// seen (`net::tls::on_demand`). Boxed by its callers: this future and `tls`'s would
/// not fit in the room together (one allocation more per connection, with
/// `on_demand` only).
async fn tls_on_demand(tcp: Socket, origin: Origin, worker: Rc<Worker>, slot: SlotId) {
    let acme = worker.shared.acme.clone().filter(|a| a.takes_demands());
    if let (Some(acme), Some(tls)) = (acme, worker.shared.tls.as_ref()) {
        let wait = std::time::Duration::from_secs_f64(worker.current().gen.config.timeouts.head);
        on_demand::wait_for_certificate(&tcp, &tls.resolver(), &acme, wait).await;
    }
    tls(tcp, origin, worker, slot).await;
}

/// An HTTP/2 connection, boxed: its future is several KiB, and every connection's room
/// would otherwise be sized for it.
fn http2_boxed(
    stream: Stream,
    prefix: Bytes,
    origin: Origin,
    worker: Rc<Worker>,
    slot: SlotId,
    tls: Option<TlsFacts>,
) -> Pin<Box<impl Future<Output = ()>>> {
    Box::pin(http2::serve(stream, prefix, origin, worker, slot, tls))
}
