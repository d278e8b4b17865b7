//! Fuzzes the parser of response heads from upstreams (`wire::parse_response`) the way
//! `edge`'s client drives it: parse a head (skipping interim 1xx responses), frame its
//! body (Content-Length, chunked through `ChunkedDecoder`, or to the close), repeat on what
//! follows while the connection may be reused. Besides "never panics", it checks:
//!
//! - a complete head ends with an empty line (CRLF or a bare LF, after the last line's
//!   LF) within the input, has no bare CR and no NUL, parses the same when nothing
//!   follows it, and no strict prefix of it is complete;
//! - a bare LF reads as a CRLF: the head with each bare LF made a CRLF parses to the same
//!   status, fields, framing and reuse, and ends at its end;
//! - a response to HEAD, a 1xx, 204 or 304 has no body, whatever its fields say;
//! - a reusable connection never has a body that runs to the close.
//!
//! The first input byte says whether the request was HEAD.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::{Chunk, ChunkedDecoder, HeaderStorage, ResponseFraming};

const MAX_HEAD: usize = 64 * 1024;
const MAX_FIELDS: usize = 256;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let head_request = flags & 1 == 1;
    let mut pos = 0;
    while pos < input.len() {
        let buf = &input[pos..];
        let mut storage = HeaderStorage::new();
        let (status, head_len, body, keep_alive, interim) =
            match wire::parse_response(buf, &mut storage, head_request, MAX_HEAD, MAX_FIELDS) {
                Ok(Some(r)) => (r.status, r.head_len, r.body, r.keep_alive, r.is_interim()),
                Ok(None) | Err(_) => return,
            };
        check_head(buf, head_len, head_request);
        assert!((100..=999).contains(&status));
        if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
            assert_eq!(body, ResponseFraming::None, "a bodiless response got a body");
        }
        if keep_alive {
            assert_ne!(body, ResponseFraming::Close, "a reusable connection without framing");
        }
        let body_start = pos + head_len;
        if interim {
            pos = body_start;
            continue;
        }
        pos = match body {
            ResponseFraming::None => body_start,
            ResponseFraming::Close => return,
            ResponseFraming::Length(n) => match usize::try_from(n)
                .ok()
                .and_then(|n| body_start.checked_add(n))
            {
                Some(end) if end <= input.len() => end,
                _ => return,
            },
            ResponseFraming::Chunked => match dechunk(&input[body_start..]) {
                Some(used) => body_start + used,
                None => return,
            },
        };
        if !keep_alive {
            return;
        }
    }
});

fn check_head(buf: &[u8], head_len: usize, head_request: bool) {
    assert!(head_len <= buf.len() && head_len <= MAX_HEAD);
    let head = &buf[..head_len];
    assert!(
        head.ends_with(b"\n\n") || head.ends_with(b"\n\r\n"),
        "head does not end with an empty line"
    );
    assert!(!head.contains(&0), "NUL accepted in a head");
    for (i, &b) in head.iter().enumerate() {
        if b == b'\r' {
            assert_eq!(head.get(i + 1), Some(&b'\n'), "bare CR accepted");
        }
    }
    let mut storage = HeaderStorage::new();
    let alone = wire::parse_response(head, &mut storage, head_request, MAX_HEAD, MAX_FIELDS)
        .expect("a head that parsed with bytes after it fails alone")
        .expect("a head that parsed with bytes after it is incomplete alone");
    assert_eq!(alone.head_len, head_len);
    let read = summary(&alone);
    let mut crlf = Vec::with_capacity(head.len() * 2);
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' && (i == 0 || head[i - 1] != b'\r') {
            crlf.push(b'\r');
        }
        crlf.push(b);
    }
    if crlf.len() > MAX_HEAD {
        return;
    }
    let mut storage = HeaderStorage::new();
    let as_crlf = wire::parse_response(&crlf, &mut storage, head_request, MAX_HEAD, MAX_FIELDS)
        .expect("a head fails with CRLF line endings")
        .expect("a head is incomplete with CRLF line endings");
    assert_eq!(as_crlf.head_len, crlf.len(), "CRLF head ends elsewhere");
    assert_eq!(summary(&as_crlf), read, "a bare LF reads otherwise than CRLF");
    let mut storage = HeaderStorage::new();
    assert!(
        !matches!(
            wire::parse_response(&head[..head_len - 1], &mut storage, head_request, MAX_HEAD, MAX_FIELDS),
            Ok(Some(_))
        ),
        "a strict prefix of a head is complete"
    );
}

/// Status, fields, framing and reuse of a parsed head.
#[allow(clippy::type_complexity)]
fn summary(r: &wire::ParsedResponse<'_, '_>) -> (u16, Vec<(String, Vec<u8>)>, ResponseFraming, bool) {
    let fields = r
        .headers
        .iter()
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect();
    (r.status, fields, r.body, r.keep_alive)
}

/// Bytes a whole chunked body uses, `None` if incomplete or refused.
fn dechunk(input: &[u8]) -> Option<usize> {
    let mut decoder = ChunkedDecoder::new(MAX_HEAD);
    let mut pos = 0;
    loop {
        let (used, chunk) = decoder.decode(&input[pos..]).ok()?;
        pos += used;
        match chunk {
            Chunk::Data(data) => assert!(!data.is_empty(), "empty Data chunk"),
            Chunk::Done => return Some(pos),
            Chunk::NeedMore => return None,
        }
    }
}
