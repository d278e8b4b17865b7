//! A compiled format's items, and the steps they are written in.

use super::noted;

/// One item of a compiled log format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Item {
    Literal(Vec<u8>),
    /// Nothing: a step that only writes its prefix.
    Nothing,
    ClientIp,
    Dash,
    Time,
    RequestLine,
    Method,
    Path,
    Query,
    Protocol,
    Status,
    /// Body bytes, `-` for none (`%b`).
    BytesClf,
    /// Body bytes, `0` for none (`%B`).
    Bytes,
    /// Microseconds from the request's arrival to its response being queued (`%D`).
    Micros,
    /// The same in whole seconds (`%T`).
    Seconds,
    RequestHeader(String),
    ResponseHeader(String),
    /// `%{tls_version}x`: `TLSv1.3`, `TLSv1.2`, `-` in cleartext.
    TlsVersion,
    /// `%{tls_cipher}x`: the suite's IANA name, `-` in cleartext.
    TlsCipher,
    /// `%{tls_sni}x`: the server name the client sent in SNI, `-` without one.
    TlsSni,
    /// `%I`: bytes received, the request head as received (HTTP/2: as HTTP/1 lines) and
    /// its body's Content-Length: JSON's `bytes_received`.
    BytesReceived,
    /// `%{request_id}x`: the request's id, as `$request_id` (`-` for a request refused
    /// before it was routed).
    RequestId,
    /// `%{traceparent}x`: the request's own span in its trace, as a W3C `traceparent`
    /// (`-` without `[tracing]`).
    TraceParent,
    /// `%v`: the name of the `[[host]]` that served it (its first), or, for the top-level
    /// site, the request's Host without its port.
    Host,
    /// `%{route}x`: the routing rule that chose the request's handling (`route[3]`,
    /// `host[0].route[1]`, `script[0]`), `-` when none did.
    Route,
    /// The time as ISO 8601 in UTC (`2026-11-28T08:30:00Z`): JSON's `time`.
    TimeIso,
    /// The request target's path and query as sent: JSON's `uri`.
    Target,
    /// Head and body bytes sent: JSON's `bytes_sent`, as nginx's `$bytes_sent`.
    BytesSent,
    /// Seconds from the request's arrival to its response being queued, to the
    /// microsecond: JSON's `duration`, as nginx's `$request_time`.
    Duration,
    /// `%{peer}x` (or Apache's `%{c}a`): the socket's peer, where `%a` is the client a
    /// trusted proxy named.
    PeerIp,
    /// `%{proxy_tlv_0xNN}x`: the value of the connection's PROXY v2 TLV of type NN
    /// (hex), its bytes escaped as a field's are; `-` without one.
    ProxyTlv(u8),
    /// What the handler noted: `%{upstream_addr}x` and the other upstream fields,
    /// `%{cache}x`, `%{esi_fragments}x`, `%{esi_failed}x` (`noted.rs`).
    Noted(noted::Field),
    /// `%{var_NAME}x`: the variable `NAME` a script wrote, `-` when none did.
    Var(Box<str>),
}

/// The longest literal written as a [`Step`]'s prefix.
const SHORT: usize = 32;

/// One step of a compiled format: a short literal (a JSON line's `,"name":`), then an
/// item. The prefix is padded and copied as the whole array, a copy of known size that
/// needs no call to `memcpy`, then cut to its length; and a field costs one dispatch on
/// its item, not two. Formatting a JSON line of 27 fields in a loop (2 million lines,
/// `perf`) spent 14% of its time in `memcpy` calls for literals and values, and a fifth
/// of the rest in the dispatch on items, each literal an item of its own then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Step {
    pub prefix: [u8; SHORT],
    pub len: u8,
    pub item: Item,
}

/// `items` as steps: each literal of at most [`SHORT`] bytes joined to the item after it.
pub(super) fn steps(items: Vec<Item>) -> Vec<Step> {
    let mut steps = Vec::with_capacity(items.len());
    let mut prefix: Option<Vec<u8>> = None;
    for item in items.into_iter().map(Some).chain([None]) {
        let item = match (prefix.take(), item) {
            (None, Some(Item::Literal(bytes))) => {
                prefix = Some(bytes);
                continue;
            }
            (None, Some(item)) => Step::of(item),
            (None, None) => break,
            (Some(bytes), item) if bytes.len() <= SHORT => {
                let mut short = [0; SHORT];
                short[..bytes.len()].copy_from_slice(&bytes);
                let item = match item {
                    Some(Item::Literal(next)) => {
                        prefix = Some(next);
                        Item::Nothing
                    }
                    Some(item) => item,
                    None => Item::Nothing,
                };
                Step {
                    prefix: short,
                    len: bytes.len() as u8,
                    item,
                }
            }
            (Some(bytes), item) => {
                steps.push(Step::of(Item::Literal(bytes)));
                match item {
                    Some(Item::Literal(next)) => {
                        prefix = Some(next);
                        continue;
                    }
                    Some(item) => Step::of(item),
                    None => break,
                }
            }
        };
        steps.push(item);
    }
    steps
}

impl Step {
    pub(super) fn of(item: Item) -> Step {
        Step {
            prefix: [0; SHORT],
            len: 0,
            item,
        }
    }
}
