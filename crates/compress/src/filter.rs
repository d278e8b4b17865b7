//! The compression body filter: decides per response whether and how to compress, and
//! wraps the body in a compressing stream. One link of the filter chain (DESIGN.md,
//! "Filters stack"): it knows nothing of the handler that made the response.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::{Accepted, Coding, Compression, Encoder};
use handler::{Body, BodyError, Chunks, Pooled, Response, ResponseHead};

/// A streamed body's compressed output is handed on once this much has built up, even
/// when the handler has more ready: the client starts decoding sooner, and the buffer
/// stays bounded.
const MAX_BUFFERED_OUTPUT: usize = 16 * 1024;

/// What the filter did with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressed {
    /// Nothing: not compressible, or not this filter's to change (a Content-Encoding
    /// already, 206, 204, 304, no-transform, opted out).
    Untouched,
    /// Sent as it is, but the choice depended on Accept-Encoding (Vary added).
    Identity,
    /// Compressed with this coding.
    With(Coding),
    /// The client refuses identity and accepts none of the codings offered: the response
    /// became a 406 (RFC 9110 section 12.5.3).
    NotAcceptable,
}

/// What the filter reads of a head, found in one pass over its fields: the filter runs
/// on every response of a site with compression, and one scan of the fields per
/// question (seven for a response sent as it is) cost 6% of a proxied request's
/// instructions (callgrind).
#[derive(Clone, Copy, Default)]
struct Facts {
    /// The first Content-Encoding names a coding other than identity.
    encoded: bool,
    /// That coding, when it is one this server knows.
    coding: Option<Coding>,
    /// The first Content-Type is one the policy compresses.
    compressible_type: bool,
    /// Cache-Control has `no-transform` (RFC 9111 5.2.2.6).
    no_transform: bool,
    /// Vary names Accept-Encoding, or is `*`.
    varies: bool,
}

impl Facts {
    /// The head's facts; `compressible_type` only with a `policy`.
    fn of(head: &ResponseHead, policy: Option<&Compression>) -> Facts {
        let mut facts = Facts::default();
        let (mut encoding_seen, mut type_seen) = (false, false);
        for (name, value) in head.iter() {
            let is = |wanted: &[u8]| name.eq_ignore_ascii_case(wanted);
            if is(b"content-encoding") {
                if !std::mem::replace(&mut encoding_seen, true) {
                    facts.encoded = !wire::trim_ows(value).eq_ignore_ascii_case(b"identity");
                    facts.coding = Coding::from_token(value);
                }
            } else if is(b"content-type") {
                if !std::mem::replace(&mut type_seen, true) {
                    facts.compressible_type = policy.is_some_and(|p| p.compresses_type(value));
                }
            } else if is(b"cache-control") {
                facts.no_transform |= value
                    .split(|&b| b == b',')
                    .any(|d| wire::trim_ows(d).eq_ignore_ascii_case(b"no-transform"));
            } else if is(b"vary") {
                facts.varies |= value.split(|&b| b == b',').any(|t| {
                    let t = wire::trim_ows(t);
                    t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
                });
            }
        }
        facts
    }
}

/// Whether the response is one the policy would compress for a client that accepts a
/// coding: everything but the client's Accept-Encoding is checked. `length` is the
/// identity body's, when known.
pub fn compressible(policy: &Compression, head: &ResponseHead, length: Option<u64>) -> bool {
    compressible_with(policy, head, Facts::of(head, Some(policy)), length)
}

/// [`compressible`], with the head's facts read already (with `policy`).
fn compressible_with(
    policy: &Compression,
    head: &ResponseHead,
    facts: Facts,
    length: Option<u64>,
) -> bool {
    let status = head.status();
    if !(200..300).contains(&status) || status == 204 || status == 206 {
        return false;
    }
    if head.identity_only() || facts.encoded || facts.no_transform || !facts.compressible_type {
        return false;
    }
    // An empty body stays empty (an empty gzip body would not decode), whatever the
    // minimum says.
    length.map_or(true, |l| l > 0 && l >= policy.min_length)
}

/// Adds `Vary: Accept-Encoding` unless the head's Vary names it (or `*`) already.
pub fn add_vary(head: &mut ResponseHead) {
    let varies = Facts::of(head, None).varies;
    add_vary_unless(head, varies);
}

fn add_vary_unless(head: &mut ResponseHead, varies: bool) {
    if !varies {
        head.append(b"Vary", b"Accept-Encoding");
    }
}

/// Marks a head as the `coding` variant of its identity form: Content-Encoding, Vary,
/// a strong ETag made weak (the bytes differ from the identity body's, which keeps the
/// strong one), no Content-Length (the framing says the new length) and no
/// Accept-Ranges (ranges are served of the identity body only).
pub fn mark_encoded(head: &mut ResponseHead, coding: Coding) {
    weaken_etag(head);
    head.remove(b"content-length");
    head.remove(b"accept-ranges");
    head.append(b"Content-Encoding", coding.token().as_bytes());
    add_vary(head);
}

/// Makes a strong ETag weak: the body sent is not the one it names byte for byte.
fn weaken_etag(head: &mut ResponseHead) {
    let etag = head
        .get(b"etag")
        .filter(|v| v.first() == Some(&b'"'))
        .map(|v| {
            let mut weak = b"W/".to_vec();
            weak.extend_from_slice(v);
            weak
        });
    if let Some(weak) = etag {
        head.remove(b"etag");
        head.append(b"ETag", &weak);
    }
}

/// Decodes a response in a coding the client refuses (an upstream's gzip, br or zstd
/// passed through), so that it goes on as identity (and may be compressed again in a
/// coding the client takes). A body that does not decode goes out as it came. `facts`
/// are the head's; returns whether the head changed.
fn decode_refused(
    accepted: Accepted,
    head_only: bool,
    response: &mut Response,
    facts: Facts,
) -> bool {
    let status = response.head.status();
    if !(200..300).contains(&status)
        || status == 206
        || response.head.identity_only()
        || facts.no_transform
    {
        return false;
    }
    let Some(coding) = facts
        .coding
        .filter(|&c| c != Coding::Identity && !accepted.accepts(c))
    else {
        return false;
    };
    if !head_only {
        let body = std::mem::replace(&mut response.body, Body::Empty);
        response.body = match body {
            Body::Full(b) => match super::decoding::decode_whole(coding, &[&b]) {
                Ok(decoded) => Body::Full(decoded),
                Err(_) => {
                    response.body = Body::Full(b);
                    return false;
                }
            },
            Body::Ready(chunks) => {
                let pieces: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
                match super::decoding::decode_whole(coding, &pieces) {
                    Ok(decoded) => Body::Full(decoded),
                    Err(_) => {
                        response.body = Body::Ready(chunks);
                        return false;
                    }
                }
            }
            Body::Stream { chunks, length } => {
                match super::decoding::Decoding::new(chunks, coding) {
                    Ok(d) => Body::stream(None, d),
                    Err(chunks) => {
                        response.body = Body::Stream { chunks, length };
                        return false;
                    }
                }
            }
            Body::Empty => Body::Empty,
        };
    }
    let head = &mut response.head;
    weaken_etag(head);
    head.remove(b"content-encoding");
    head.remove(b"content-length");
    head.remove(b"accept-ranges");
    add_vary(head);
    true
}

/// Decodes the body of a 2xx `response` an upstream sent in a coding this server knows
/// (gzip, br, zstd), as it streams, for a filter that must see identity bytes (a Lua
/// `body_filter`); not one with `Cache-Control: no-transform`. Whether it did.
pub fn decode_response(response: &mut Response) -> bool {
    let facts = Facts::of(&response.head, None);
    decode_refused(Accepted::IDENTITY, false, response, facts)
}

/// Compresses `response` for a client whose Accept-Encoding is `accepted`, per `policy`.
/// `head_only`: the request was HEAD, so the head is changed as its GET's would be and
/// no body is made.
pub fn compress_response(
    policy: &Compression,
    accepted: Accepted,
    head_only: bool,
    response: &mut Response,
) -> Compressed {
    let mut facts = Facts::of(&response.head, Some(policy));
    if decode_refused(accepted, head_only, response, facts) {
        facts = Facts::of(&response.head, Some(policy));
    }
    let length = if head_only && response.relayed {
        response
            .head
            .get(b"content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
    } else {
        response.body.length()
    };
    if !compressible_with(policy, &response.head, facts, length) {
        return Compressed::Untouched;
    }
    let varies = facts.varies;
    let Some(coding) = accepted.choose(&policy.order) else {
        if !accepted.accepts(Coding::Identity) {
            *response = Response::status_page(406);
            add_vary(&mut response.head);
            return Compressed::NotAcceptable;
        }
        add_vary_unless(&mut response.head, varies);
        return Compressed::Identity;
    };
    let level = policy.level(coding);
    let body = std::mem::replace(&mut response.body, Body::Empty);
    response.body = if head_only {
        // The fields its GET would get; the length is not known without compressing.
        Body::stream(None, Nothing)
    } else {
        match body {
            Body::Full(b) => match super::compress(coding, level, &[&b]) {
                Ok(c) => Body::Full(c),
                Err(_) => {
                    response.body = Body::Full(b);
                    add_vary(&mut response.head);
                    return Compressed::Identity;
                }
            },
            Body::Ready(chunks) => {
                let pieces: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
                match super::compress(coding, level, &pieces) {
                    Ok(c) => Body::Full(c),
                    Err(_) => {
                        response.body = Body::Ready(chunks);
                        add_vary(&mut response.head);
                        return Compressed::Identity;
                    }
                }
            }
            Body::Stream { chunks, length } => {
                // The compressor is made only with its room reserved, and the stream
                // counts as compressed only once it is made.
                let started = super::STREAM_MEMORY
                    .reserve(super::stream_state_bytes(coding, level))
                    .and_then(|reserved| Some((Encoder::new(coding, level).ok()?, reserved)));
                match started {
                    Some((encoder, reserved)) => Body::stream(
                        None,
                        Compressing {
                            inner: chunks,
                            encoder,
                            unflushed: false,
                            done: false,
                            _reserved: reserved.started(),
                        },
                    ),
                    // Past `compression_memory` (or a compressor that cannot start): as
                    // it is.
                    None => {
                        response.body = Body::Stream { chunks, length };
                        add_vary(&mut response.head);
                        return Compressed::Identity;
                    }
                }
            }
            Body::Empty => Body::Empty,
        }
    };
    mark_encoded(&mut response.head, coding);
    Compressed::With(coding)
}

/// The body of a HEAD response: no chunks.
struct Nothing;

impl Chunks for Nothing {
    fn poll_chunk(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        Poll::Ready(None)
    }
}

/// A streamed body compressed as it arrives. What the handler has ready is compressed
/// together; when it has nothing more ready (an ESI page waiting on a fragment, an
/// upstream between reads) the compressor is flushed and what it made goes out, so the
/// client sees each ready piece of the page without waiting for the next.
struct Compressing {
    inner: Pin<Pooled<dyn Chunks>>,
    encoder: Encoder,
    /// Input written since the last flush.
    unflushed: bool,
    done: bool,
    /// Its compressor's share of `compression_memory`, given back when the stream is
    /// dropped (finished, failed, or abandoned by its client).
    _reserved: super::Reservation,
}

impl Chunks for Compressing {
    fn poll_chunk(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        let this = self.get_mut();
        let failed = |e: std::io::Error| Poll::Ready(Some(Err(BodyError(e.to_string()))));
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match this.inner.as_mut().poll_chunk(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Err(e) = this.encoder.write(&chunk) {
                        return failed(e);
                    }
                    this.unflushed = true;
                    if this.encoder.output_len() >= MAX_BUFFERED_OUTPUT {
                        return Poll::Ready(Some(Ok(this.encoder.take())));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    this.done = true;
                    if let Err(e) = this.encoder.finish() {
                        return failed(e);
                    }
                    return Poll::Ready(Some(Ok(this.encoder.take())));
                }
                Poll::Pending => {
                    if this.unflushed {
                        this.unflushed = false;
                        if let Err(e) = this.encoder.flush() {
                            return failed(e);
                        }
                        let out = this.encoder.take();
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(out)));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(min_length: u64) -> Compression {
        crate::CompressionConfig {
            min_length,
            ..Default::default()
        }
        .build()
        .unwrap()
        .unwrap()
    }

    fn html(status: u16) -> ResponseHead {
        let mut head = ResponseHead::new(status);
        head.append(b"Content-Type", b"text/html");
        head
    }

    #[test]
    fn what_is_never_compressed() {
        let p = policy(0);
        assert!(compressible(&p, &html(200), Some(10)));
        assert!(!compressible(&p, &html(200), Some(0)), "an empty body");
        for status in [204, 206, 304, 404, 500] {
            assert!(!compressible(&p, &html(status), Some(10)), "{status}");
        }
        let mut h = html(200);
        h.append(b"Cache-Control", b"public, No-Transform");
        assert!(!compressible(&p, &h, Some(10)));
        let mut h = html(200);
        h.append(b"Content-Encoding", b"gzip");
        assert!(!compressible(&p, &h, Some(10)));
        let mut h = html(200);
        h.set_identity_only(true);
        assert!(!compressible(&p, &h, Some(10)));
        assert!(!compressible(&policy(1024), &html(200), Some(1023)));
        assert!(compressible(&policy(1024), &html(200), None), "a stream");
    }

    #[test]
    fn an_encoded_head_has_a_weak_etag_and_one_vary() {
        let mut h = html(200);
        h.append(b"ETag", b"\"abc\"");
        h.append(b"Vary", b"Accept-Encoding, Cookie");
        h.append(b"Content-Length", b"99");
        mark_encoded(&mut h, Coding::Zstd);
        assert_eq!(h.get(b"etag"), Some(&b"W/\"abc\""[..]));
        assert_eq!(h.get(b"content-encoding"), Some(&b"zstd"[..]));
        assert_eq!(h.get(b"content-length"), None);
        assert_eq!(
            h.iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"vary"))
                .count(),
            1
        );
    }
}
