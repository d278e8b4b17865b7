//! W3C trace context for requests, and the exporter of their spans.
//!
//! # What it is for
//!
//! - [`Context`]: one request's place in a trace (the W3C `traceparent`: a trace id, the
//!   caller's span, this server's span, the sampled flag), taken from a trusted client's
//!   `traceparent` ([`parse_traceparent`]) or begun here ([`Sampler`]). It is `Copy` and
//!   holds no heap memory: a request that is not sampled costs two random numbers and
//!   nothing allocated.
//! - [`Hop`]: a request this server sends on (to an origin, for an ESI fragment) as a
//!   child span of the request's, and the `traceparent` it carries.
//! - [`export`]: spans of sampled requests, sent with OTLP over HTTP/protobuf in batches
//!   by a thread of its own; a queue that is full or a receiver that is down drops spans
//!   and counts them, and never holds a request up.
//!
//! # What it is not for
//!
//! Tracing the server's own code (the `tracing` crate's events) or metrics. It knows no
//! HTTP of the request path: the server decides when a request has a context, the proxy
//! writes the `traceparent` of each hop.
//!
//! # How it fits
//!
//! A leaf: `server` makes a request's [`Context`] and exports its server span when the
//! response is logged; `handler` carries the context to the modules; `edge` writes a
//! [`Hop`]'s `traceparent` into each upstream request and exports its client span.

pub mod export;

pub use export::{emit, Attribute, Kind, SpanRecord};

/// A request's place in a trace: the W3C `traceparent` it was given or began, and its
/// own span. `Copy`, with nothing on the heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The trace's id (never zero).
    pub trace_id: u128,
    /// This server's span for the request (never zero).
    pub span_id: u64,
    /// The caller's span, from the `traceparent` it sent; zero for a trace begun here.
    pub parent_id: u64,
    /// The `sampled` flag: only a sampled request's spans are exported.
    pub sampled: bool,
    /// The trace came from the client (`trust_incoming`): its `tracestate` goes on as it
    /// came. Else any `tracestate` the client sent is not passed on.
    pub incoming: bool,
}

/// An incoming `traceparent`: the trace, the caller's span and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: u128,
    pub span_id: u64,
    pub flags: u8,
}

/// A request sent on by this server as a child span of the request's: its own span id
/// (the `parent-id` of the `traceparent` it carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    pub context: Context,
    pub span_id: u64,
}

/// How requests get a context: the sampling rate of traces begun here, and whether a
/// client's `traceparent` is honoured (`[tracing]`).
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    /// A trace begun here is sampled when a random `u64` falls below this.
    threshold: u64,
    /// Every trace begun here is sampled (`sampling = 1`).
    always: bool,
    trust_incoming: bool,
}

impl Sampler {
    /// `sampling`: the share of traces begun here that are sampled, 0 to 1.
    pub fn new(sampling: f64, trust_incoming: bool) -> Sampler {
        let sampling = sampling.clamp(0.0, 1.0);
        Sampler {
            threshold: (sampling * u64::MAX as f64) as u64,
            always: sampling >= 1.0,
            trust_incoming,
        }
    }

    /// The context of a request whose `traceparent` field is `incoming` (if it sent
    /// one): the client's trace, with a span of its own, when it is trusted and valid
    /// (sampled as the client says); else a new trace, sampled at the configured rate.
    pub fn context(&self, incoming: Option<&[u8]>) -> Context {
        let parent = incoming
            .filter(|_| self.trust_incoming)
            .and_then(parse_traceparent);
        match parent {
            Some(p) => Context {
                trace_id: p.trace_id,
                span_id: span_id(),
                parent_id: p.span_id,
                sampled: p.flags & 1 == 1,
                incoming: true,
            },
            None => Context {
                trace_id: fastrand::u128(1..),
                span_id: span_id(),
                parent_id: 0,
                sampled: self.always || fastrand::u64(..) < self.threshold,
                incoming: false,
            },
        }
    }
}

/// A new span id: random, never zero (W3C: an all-zero id is invalid).
pub fn span_id() -> u64 {
    fastrand::u64(1..)
}

impl Context {
    /// A child span for a request sent on.
    pub fn hop(&self) -> Hop {
        Hop {
            context: *self,
            span_id: span_id(),
        }
    }

    /// The `traceparent` naming this request's own span (`%{traceparent}x`).
    pub fn traceparent(&self) -> [u8; TRACEPARENT_LEN] {
        format_traceparent(self.trace_id, self.span_id, self.sampled)
    }

    /// Whether a request field named `name` (lower case) is left out of a request sent
    /// on with this context: `traceparent` always (the hop's own is written instead),
    /// `tracestate` unless the trace came from the client.
    pub fn replaces(&self, name: &[u8]) -> bool {
        name == b"traceparent" || (!self.incoming && name == b"tracestate")
    }
}

impl Hop {
    /// The `traceparent` this hop sends: the trace, and the hop's span as the parent.
    pub fn traceparent(&self) -> [u8; TRACEPARENT_LEN] {
        format_traceparent(self.context.trace_id, self.span_id, self.context.sampled)
    }
}

/// The length of a version-00 `traceparent`: `00-` 32 hex `-` 16 hex `-` 2 hex.
pub const TRACEPARENT_LEN: usize = 55;

/// `00-{trace_id}-{span_id}-{flags}` in lower-case hex, as W3C Trace Context writes it.
pub fn format_traceparent(trace_id: u128, span_id: u64, sampled: bool) -> [u8; TRACEPARENT_LEN] {
    let mut out = [b'-'; TRACEPARENT_LEN];
    out[..2].copy_from_slice(b"00");
    hex(&mut out[3..35], trace_id);
    hex(&mut out[36..52], u128::from(span_id));
    out[53..].copy_from_slice(if sampled { b"01" } else { b"00" });
    out
}

/// `value`'s low `out.len()` hex digits, most significant first: a byte at a time from
/// its big-endian bytes (a `u128` shifted by a variable amount per digit cost a few
/// instructions each, for 48 digits a request when tracing is on).
fn hex(out: &mut [u8], value: u128) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    debug_assert!(out.len() % 2 == 0 && out.len() <= 32);
    let bytes = value.to_be_bytes();
    let from = bytes.len() - out.len() / 2;
    for (pair, byte) in out.chunks_exact_mut(2).zip(&bytes[from..]) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
}

/// Reads a `traceparent` field as W3C Trace Context (level 1) says a receiver must:
/// version 00 exactly 55 characters; a later version at least that, its first four
/// parts read the same and the rest ignored; version `ff`, upper-case hex, an all-zero
/// trace or parent id are invalid (`None`: the request begins a trace of its own).
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    let value = value.trim_ascii();
    if value.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = read_hex(&value[..2])?;
    let longer_ok = version != 0 && value.len() > TRACEPARENT_LEN && value[55] == b'-';
    if version == 0xff || (value.len() != TRACEPARENT_LEN && !longer_ok) {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = read_hex(&value[3..35])?;
    let span_id = read_hex(&value[36..52])? as u64;
    let flags = read_hex(&value[53..55])? as u8;
    (trace_id != 0 && span_id != 0).then_some(Parent {
        trace_id,
        span_id,
        flags,
    })
}

/// Lower-case hex digits as a number; `None` for anything else.
fn read_hex(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |acc, &b| {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u128::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_the_specs_example_and_writes_it_back() {
        let p = parse_traceparent(EXAMPLE).unwrap();
        assert_eq!(p.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(p.span_id, 0x00f067aa0ba902b7);
        assert_eq!(p.flags, 1);
        assert_eq!(
            &format_traceparent(p.trace_id, p.span_id, true)[..],
            EXAMPLE
        );
    }

    #[test]
    fn refuses_what_the_spec_calls_invalid() {
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"",
        ] {
            assert_eq!(
                parse_traceparent(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // A later version may carry more after its four parts.
        let later = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(parse_traceparent(later).is_some());
    }

    #[test]
    fn a_trusted_parent_is_continued_an_untrusted_one_is_not() {
        let trusting = Sampler::new(0.0, true);
        let c = trusting.context(Some(EXAMPLE));
        assert_eq!(c.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(c.parent_id, 0x00f067aa0ba902b7);
        assert!(c.sampled && c.incoming);
        assert_ne!(c.span_id, c.parent_id);
        let hop = c.hop();
        assert_eq!(&hop.traceparent()[3..35], &EXAMPLE[3..35]);
        assert_ne!(hop.span_id, c.span_id);
        let wary = Sampler::new(0.0, false).context(Some(EXAMPLE));
        assert_ne!(wary.trace_id, c.trace_id);
        assert!(!wary.sampled && !wary.incoming && wary.parent_id == 0);
        assert!(Sampler::new(1.0, false).context(None).sampled);
        assert!(wary.replaces(b"tracestate") && !c.replaces(b"tracestate"));
    }
}
