//! On-demand certificates (`[acme] on_demand`, Caddy's on-demand TLS): before the
//! handshake of a connection whose SNI names a host no certificate covers, the
//! connection asks the ACME client for one and waits for it, at most `timeouts.head`.
//!
//! rustls picks the certificate inside the handshake, synchronously, and the unbuffered
//! connection (`stream`) has no way to pause there. So the ClientHello is read first
//! without being taken from the socket (`MSG_PEEK`) and parsed by rustls' own
//! `Acceptor`; the handshake that follows reads it again, and its resolver finds the
//! certificate installed meanwhile (or, when none came, does what it does without
//! `on_demand`). Only a listener of a configuration with `on_demand` pays for the peek.

use std::future::poll_fn;
use std::io;
use std::time::Duration;

use rustls::server::Acceptor;

use super::acme::AcmeCerts;
use super::certs::{Resolver, ACME_TLS_ALPN};
use crate::net::reactor::Socket;

/// The most of a ClientHello looked at: one TLS record. A ClientHello spread over
/// more (none seen in practice) is handshaken without waiting for an order.
const PEEK: usize = 5 + 16 * 1024;
/// What is looked at first, on the stack: a ClientHello is 200 bytes to 2 KB (with a
/// post-quantum key share). bench/acme.sh measured the handshakes of on-demand names
/// at x1.044 the CPU of configured ones with a zeroed 16 KiB heap buffer per
/// connection; only a longer ClientHello pays for that buffer now.
const PEEK_FIRST: usize = 2560;

/// Waits, at most `wait`, for `acme` to get a certificate for the name the connection's
/// ClientHello asks for, when the resolver says that name may have one on demand and
/// it has none yet. Returns at once otherwise, and whatever happens: the handshake
/// after it decides.
pub(crate) async fn wait_for_certificate(
    tcp: &Socket,
    resolver: &Resolver,
    acme: &AcmeCerts,
    wait: Duration,
) {
    let Ok(Some(name)) = server_name(tcp).await else {
        return;
    };
    if !resolver.on_demand(&name) || acme.certificate(&name).is_some() {
        return;
    }
    let Some(answer) = acme.demand(&name) else {
        tracing::warn!(
            name,
            "on-demand certificate: the ACME client's queue is full"
        );
        return;
    };
    match evloop::time::timeout(wait, answer).await {
        Ok(Ok(true)) => {}
        Ok(_) => tracing::info!(
            name,
            "TLS handshake without an on-demand certificate: not allowed or not obtained"
        ),
        Err(_) => tracing::warn!(
            name,
            wait = ?wait,
            "on-demand certificate not there in time: the handshake goes on without it"
        ),
    }
}

/// The server name (lowercase) of the ClientHello at the front of the socket, left
/// there; `None` without SNI, for a TLS-ALPN-01 validation (answered by its challenge
/// certificate) and for what rustls would refuse anyway.
async fn server_name(tcp: &Socket) -> io::Result<Option<String>> {
    let mut first = [0; PEEK_FIRST];
    let mut whole = Vec::new();
    loop {
        poll_fn(|cx| tcp.poll_read_ready(cx)).await?;
        let buf = match whole.is_empty() {
            true => &mut first[..],
            false => &mut whole[..],
        };
        let n = match tcp.try_peek(buf) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut acceptor = Acceptor::default();
        acceptor.read_tls(&mut &buf[..n])?;
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                let validation = hello
                    .alpn()
                    .is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS_ALPN));
                if validation {
                    return Ok(None);
                }
                return Ok(hello.server_name().map(str::to_ascii_lowercase));
            }
            Ok(None) if n < buf.len() => tcp.wait_for_more(),
            // More than the first look holds is there: look at all of it.
            Ok(None) if whole.is_empty() => whole = vec![0; PEEK],
            Ok(None) | Err(_) => return Ok(None),
        }
    }
}
