//! gRPC through the proxy: a request with `content-type: application/grpc` to an
//! HTTP/2 upstream. Its bodies stream both ways and its trailers (`grpc-status`,
//! `grpc-message`) pass through like any HTTP/2 response's; what is gRPC's own is here:
//! its `grpc-timeout` bounds the wait for the response, and a failure before the
//! response (no peer reachable, no answer in time) is answered as nginx's `grpc_pass`
//! answers it, with a gRPC status a client can read (14 UNAVAILABLE, 4
//! DEADLINE_EXCEEDED) rather than an HTTP 502 it cannot. gRPC-Web is not handled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::HeaderMap;

use crate::error::{ProxyError, UpstreamError};

/// Whether `headers` are a gRPC request's (`application/grpc`, `application/grpc+proto`...).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.as_bytes().get(..16))
        .is_some_and(|p| p.eq_ignore_ascii_case(b"application/grpc"))
        && !headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes()[16..].starts_with(b"-web"))
}

/// The request's `grpc-timeout`: digits (at most 8) and a unit, `H`, `M`, `S`, `m`
/// (milliseconds), `u` or `n` (gRPC's PROTOCOL-HTTP2.md). `None` when absent or invalid.
pub(crate) fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.as_bytes();
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// gRPC calls answered, by status (0 to 16; 17 counts any other value): every worker's.
static ANSWERED: [AtomicU64; 18] = [const { AtomicU64::new(0) }; 18];

/// Counts the `grpc-status` of a call's trailers (or of a trailers-only head), if any.
pub(crate) fn count(fields: &handler::FieldList) {
    if let Some(value) = fields.get("grpc-status") {
        let status = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<usize>().ok());
        ANSWERED[status.unwrap_or(17).min(17)].fetch_add(1, Ordering::Relaxed);
    }
}

/// `tessera_grpc_responses_total`.
pub(crate) fn metrics(out: &mut handler::Metrics) {
    for (status, n) in ANSWERED.iter().enumerate() {
        let n = n.load(Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        let label = match status {
            17 => "other".to_string(),
            s => s.to_string(),
        };
        out.counter(
            "tessera_grpc_responses_total",
            "gRPC calls answered through HTTP/2 upstreams, by grpc-status (the origin's, \
             or 14 or 4 for a call the proxy could not pass on).",
            &[("status", &label)],
            n,
        );
    }
}

/// DEADLINE_EXCEEDED, for a `grpc-timeout` that ran out before the response head.
pub(crate) const DEADLINE_EXCEEDED: u32 = 4;

/// The gRPC status of a proxy error: 4 DEADLINE_EXCEEDED for a timeout, 14 UNAVAILABLE
/// for the rest (no peer reachable, a broken connection), as nginx's `grpc_pass` maps its
/// 504 and 502.
pub(crate) fn status_of(e: &ProxyError) -> u32 {
    match e {
        ProxyError::Upstream(
            UpstreamError::ConnectTimeout { .. } | UpstreamError::ResponseTimeout { .. },
        ) => DEADLINE_EXCEEDED,
        _ => 14,
    }
}

/// A gRPC error as a "trailers-only" response: status 200 with `content-type`,
/// `grpc-status` and `grpc-message` (percent-encoded as gRPC says) in its head, no body.
pub(crate) fn error_response(status: u32, message: &str) -> handler::Response {
    let mut fields = handler::FieldList::with_capacity(3, 64 + message.len() * 3);
    fields.append(b"content-type", b"application/grpc");
    fields.append(b"grpc-status", status.to_string().as_bytes());
    let mut encoded = Vec::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            encoded.push(b);
        } else {
            encoded.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    fields.append(b"grpc-message", &encoded);
    count(&fields);
    handler::Response {
        head: handler::ResponseHead::from_fields(200, fields),
        body: handler::Body::Empty,
        relayed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_grpc_timeouts() {
        let mut h = HeaderMap::new();
        for (v, d) in [
            ("100m", Some(Duration::from_millis(100))),
            ("2S", Some(Duration::from_secs(2))),
            ("1H", Some(Duration::from_secs(3600))),
            ("5", None),
            ("123456789m", None),
            ("m", None),
        ] {
            h.insert("grpc-timeout", v.parse().unwrap());
            assert_eq!(timeout(&h), d, "{v}");
        }
    }

    #[test]
    fn knows_grpc_but_not_grpc_web() {
        let mut h = HeaderMap::new();
        h.insert("content-type", "application/grpc+proto".parse().unwrap());
        assert!(is_grpc(&h));
        h.insert("content-type", "application/grpc-web".parse().unwrap());
        assert!(!is_grpc(&h));
        h.insert("content-type", "application/json".parse().unwrap());
        assert!(!is_grpc(&h));
    }
}
