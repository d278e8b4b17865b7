//! A stream's request seen as the request model every handler takes: a
//! `wire::Request`, version `Http2`.

use h2codec::conn::Request;
use wire::{BodyFraming, Version};

/// The request as the handlers see it, and why it is refused, if it is. The Host
/// field is the :authority (a client that sends both must send the same host, RFC 9113
/// section 8.3.1); cookies split over several fields are joined as one (section 8.2.3).
pub(super) fn view<'a>(
    request: Request<'a>,
    end_stream: bool,
    cookie: &'a mut Vec<u8>,
    fields: &'a mut Vec<wire::Header<'a>>,
    limits: &wire::Limits,
) -> (wire::Request<'a, 'a>, Option<wire::Error>) {
    let authority = request.authority();
    let method = std::str::from_utf8(request.method()).unwrap_or("");
    let method_kind = wire::Method::from_token(method);
    let mut refusal = None;
    // A method the server knows is a token; only another is checked byte by byte.
    if method_kind == wire::Method::Other
        && (method.is_empty() || !method.bytes().all(wire::is_tchar))
    {
        refusal = Some(wire::Error::BadMethod);
    }
    let target: &[u8] = match (method, request.path()) {
        ("CONNECT", _) => authority.unwrap_or(b""),
        (_, Some(path)) => path,
        (_, None) => b"/",
    };
    if !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        refusal = Some(wire::Error::BadTarget);
    }
    let named = request
        .fields()
        // Names are lower-case tokens (checked by the codec), so ASCII.
        .map(|(name, value)| (std::str::from_utf8(name).unwrap_or(""), value));
    let (length, bad_host) = gather(authority, named, cookie, fields);
    refusal = bad_host.or(refusal);
    let framing = if end_stream {
        BodyFraming::None
    } else {
        match length {
            Some(length) => match std::str::from_utf8(length)
                .ok()
                .and_then(|l| l.parse().ok())
            {
                Some(n) => BodyFraming::Length(n),
                None => {
                    refusal = Some(wire::Error::BadContentLength);
                    BodyFraming::None
                }
            },
            None => BodyFraming::Chunked,
        }
    };
    if request.oversize() {
        refusal = Some(wire::Error::HeadTooLarge);
    } else if let Some(e) = over_limits(limits, target, fields, framing) {
        refusal = Some(e);
    }
    let fields: &'a [wire::Header<'a>] = fields;
    let req = wire::Request {
        method: method_kind,
        method_token: method,
        target,
        path: target,
        version: Version::Http2,
        headers: fields,
        head_len: 0,
        body: framing,
        keep_alive: true,
        expect_continue: false,
    };
    (req, refusal)
}

/// A request's fields as the handlers see them, from HTTP/2's or HTTP/3's (lower-case
/// names): the `:authority` first, as Host (a Host field that names another host
/// refuses the request, RFC 9113 section 8.3.1 and RFC 9114 section 4.3.1; one that
/// agrees is dropped); cookies split over several fields joined as one (RFC 9113
/// section 8.2.3, RFC 9114 section 4.2.1). Returns the declared content-length, and
/// `BadHost` for a Host that disagrees.
pub(crate) fn gather<'a>(
    authority: Option<&'a [u8]>,
    named: impl Iterator<Item = (&'a str, &'a [u8])>,
    cookie: &'a mut Vec<u8>,
    fields: &mut Vec<wire::Header<'a>>,
) -> (Option<&'a [u8]>, Option<wire::Error>) {
    let mut refusal = None;
    if let Some(authority) = authority {
        fields.push(wire::Header {
            name: "host",
            value: authority,
        });
    }
    let mut length = None;
    for (name, value) in named {
        match name {
            "host" => {
                if authority.is_some_and(|a| !a.eq_ignore_ascii_case(value)) {
                    refusal = Some(wire::Error::BadHost);
                }
                if authority.is_none() {
                    fields.push(wire::Header { name, value });
                }
            }
            "cookie" => {
                if !cookie.is_empty() {
                    cookie.extend_from_slice(b"; ");
                }
                cookie.extend_from_slice(value);
            }
            _ => {
                if name == "content-length" {
                    length = Some(value);
                }
                fields.push(wire::Header { name, value });
            }
        }
    }
    let cookie: &'a [u8] = cookie;
    if !cookie.is_empty() {
        fields.push(wire::Header {
            name: "cookie",
            value: cookie,
        });
    }
    (length, refusal)
}

/// The request limits an HTTP/2 or HTTP/3 request head breaks, the first of them: its
/// target's length, its fields' count, its declared body's size.
pub(crate) fn over_limits(
    limits: &wire::Limits,
    target: &[u8],
    fields: &[wire::Header<'_>],
    framing: BodyFraming,
) -> Option<wire::Error> {
    if target.len() > limits.max_uri_length {
        Some(wire::Error::UriTooLong)
    } else if fields.len() > limits.max_headers {
        Some(wire::Error::TooManyHeaders)
    } else if matches!(framing, BodyFraming::Length(n) if n > limits.max_body_size) {
        Some(wire::Error::BodyTooLarge)
    } else {
        None
    }
}
