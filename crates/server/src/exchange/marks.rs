//! What a request carries for its rules, its log and its trace, made only when they use
//! it: its id, its handler's notes, its trace context.

use crate::facts::ConnFacts;
use crate::generation::Generation;
use crate::routing;

/// The id a request sends its origin as `X-Request-Id`: its own, unless its route's
/// `request_headers` set that field themselves.
pub(super) fn sent(
    gen: &Generation,
    site: usize,
    id: Option<u128>,
    edits: Option<&routing::RequestEdits>,
) -> Option<u128> {
    id.filter(|_| !routing::sets_request_id(&gen.rules[site], edits))
}

/// What a request on `site` carries for its rules and its log, only when they use it:
/// its id, where its handler notes upstream attempts and the cache's result, and its
/// trace context (with `[tracing]`). The id is the `X-Request-Id` a trusted proxy
/// (`trusted_proxies`) sent, when it reads as one (32 hex digits, or a UUID), else 128
/// random bits.
pub(super) fn marks(
    gen: &Generation,
    site: usize,
    conn: &ConnFacts,
    req: &wire::Request<'_, '_>,
) -> (
    Option<u128>,
    Option<handler::LogNotes>,
    Option<trace::Context>,
) {
    let incoming = || {
        let trusted = gen.identity[site].trusted.contains(conn.peer.ip());
        trusted
            .then(|| {
                req.header("x-request-id")
                    .and_then(crate::facts::parse_request_id)
            })
            .flatten()
    };
    let id = gen.request_ids[site].then(|| incoming().unwrap_or_else(|| fastrand::u128(..)));
    let trace = gen.tracing.map(|t| t.context(req.header("traceparent")));
    (
        id,
        gen.log_notes[site].then(handler::LogNotes::default),
        trace,
    )
}
