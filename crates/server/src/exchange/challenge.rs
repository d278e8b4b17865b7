//! HTTP-01 (RFC 8555 section 8.3): a CA asks `http://NAME/.well-known/acme-challenge/TOKEN`
//! on port 80 and expects the token's key authorization. Answered here, before the
//! site is chosen, so that no route, redirect to HTTPS, access rule or limit of the
//! site stands in the way; only on cleartext connections, and only while the ACME
//! client has a token out (one atomic load otherwise).

use wire::Framing;

use crate::facts::ConnFacts;
use crate::net::output::Output;
use crate::reply;
use crate::worker::Worker;

const PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// Writes the answer to an HTTP-01 validation request; false when `req` is not one.
pub(super) fn answer(
    worker: &Worker,
    conn: &ConnFacts,
    req: &wire::Request<'_, '_>,
    keep_alive: bool,
    out: &mut Output,
) -> bool {
    let Some(acme) = worker.shared.acme.as_ref() else {
        return false;
    };
    if conn.tls.is_some() {
        return false;
    }
    let Some(token) = req.path.strip_prefix(PREFIX) else {
        return false;
    };
    let token = memchr::memchr(b'?', token).map_or(token, |q| &token[..q]);
    let Some(key_authorization) = acme.http_challenge(token) else {
        return false;
    };
    let mut head = reply::HeadWriter::start(worker, conn, out, 200);
    head.field(b"Content-Type", b"application/octet-stream");
    let len = key_authorization.len() as u64;
    head.end(Framing::Length(len), req.version, keep_alive);
    if req.method != wire::Method::Head {
        out.buf().extend_from_slice(key_authorization.as_bytes());
    }
    true
}
