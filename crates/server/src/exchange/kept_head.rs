//! An HTTP/1 request head kept for the access log of a response that comes later: its
//! bytes, and after them where the parse found each part, so that the log reads the
//! request without parsing it again. Parsing it again (`parse_request` with its
//! checks, `httparse`) was 0.18 µs of a proxied 1 KB request with a JSON log
//! (`perf record` of the proxy under load against the same with the log off).
//!
//! The layout after the head's bytes, in native-endian `u32`s: for the method token,
//! the target, the path and each header's name and value, an offset into the head and a
//! length; then the version, the body's framing (a kind and a length), the connection's
//! two flags, the number of headers, the head's length and, last, [`MAGIC`]. A head whose parts do
//! not all lie in its bytes (a path the parser made up, `/` for an empty one) or that
//! has more headers than [`INLINE`] keeps no layout and is parsed again.

use crate::reply::HeadBuf;
use wire::{BodyFraming, Header, Request, Version};

/// The most headers a kept head is read back with without parsing.
const INLINE: usize = 32;

/// The last word of a layout (a head's own last four bytes are `\r\n\r\n`).
const MAGIC: u32 = 0x7e55_e7a1;

/// A copy of `head` (the bytes `req` was parsed from) and its layout.
pub(crate) fn keep(req: &Request<'_, '_>, head: &[u8]) -> HeadBuf {
    // HTTP/2, HTTP/3 and subrequests keep nothing: an empty head of length 0.
    debug_assert!(head.len() >= req.head_len);
    let head = &head[..req.head_len];
    let mut buf = HeadBuf::copy(head);
    if req.headers.len() > INLINE {
        return buf;
    }
    let base = head.as_ptr() as usize;
    let push = |buf: &mut HeadBuf, n: u32| buf.extend_from_slice(&n.to_ne_bytes());
    let parts = [req.method_token.as_bytes(), req.target, req.path];
    let fields = req
        .headers
        .iter()
        .flat_map(|h| [h.name.as_bytes(), h.value]);
    for part in parts.into_iter().chain(fields) {
        let start = (part.as_ptr() as usize).wrapping_sub(base);
        if start > head.len() || part.len() > head.len() - start {
            // Not in the head (a path the parser made up): no layout.
            buf.truncate(head.len());
            return buf;
        }
        push(&mut buf, start as u32);
        push(&mut buf, part.len() as u32);
    }
    let (kind, length) = match req.body {
        BodyFraming::None => (0, 0),
        BodyFraming::Length(n) => (1, n),
        BodyFraming::Chunked => (2, 0),
    };
    let version = match req.version {
        Version::Http10 => 0,
        _ => 1,
    };
    let flags = [u32::from(req.keep_alive), u32::from(req.expect_continue)];
    let framing = [version, kind, length as u32, (length >> 32) as u32];
    let counts = [req.headers.len() as u32, req.head_len as u32, MAGIC];
    for n in framing.into_iter().chain(flags).chain(counts) {
        push(&mut buf, n);
    }
    buf
}

/// Calls `record` with the request read back from a kept head, without parsing it;
/// `false` (nothing called) when the head keeps no layout.
pub(crate) fn read(kept: &[u8], record: &mut dyn FnMut(Option<&Request<'_, '_>>)) -> bool {
    // From the end: the mark, the head's length, the number of headers, then the rest.
    let word = |i: usize| -> Option<u32> {
        let end = kept.len().checked_sub(4 * i)?;
        let bytes = kept.get(end.checked_sub(4)?..end)?;
        Some(u32::from_ne_bytes(bytes.try_into().ok()?))
    };
    if word(0) != Some(MAGIC) {
        return false;
    }
    let (Some(head_len), Some(headers)) = (word(1), word(2)) else {
        return false;
    };
    let (head_len, headers) = (head_len as usize, headers as usize);
    let fixed = 9;
    let spans = 3 + 2 * headers;
    if headers > INLINE || kept.len() != head_len + 4 * (fixed + 2 * spans) {
        return false;
    }
    let (head, layout) = kept.split_at(head_len);
    let at = |i: usize| {
        u32::from_ne_bytes([
            layout[4 * i],
            layout[4 * i + 1],
            layout[4 * i + 2],
            layout[4 * i + 3],
        ])
    };
    let part = |n: usize| -> Option<&[u8]> {
        let (start, len) = (at(2 * n) as usize, at(2 * n + 1) as usize);
        head.get(start..start + len)
    };
    let text = |n: usize| part(n).and_then(|p| std::str::from_utf8(p).ok());
    let mut fields = [Header {
        name: "",
        value: b"",
    }; INLINE];
    for (i, field) in fields.iter_mut().take(headers).enumerate() {
        match (text(3 + 2 * i), part(4 + 2 * i)) {
            (Some(name), Some(value)) => *field = Header { name, value },
            _ => return false,
        }
    }
    let (Some(method_token), Some(target), Some(path)) = (text(0), part(1), part(2)) else {
        return false;
    };
    let rest = 2 * spans;
    let length = u64::from(at(rest + 2)) | u64::from(at(rest + 3)) << 32;
    let request = Request {
        method: wire::Method::from_token(method_token),
        method_token,
        target,
        path,
        version: match at(rest) {
            0 => Version::Http10,
            _ => Version::Http11,
        },
        headers: &fields[..headers],
        head_len,
        body: match at(rest + 1) {
            1 => BodyFraming::Length(length),
            2 => BodyFraming::Chunked,
            _ => BodyFraming::None,
        },
        keep_alive: at(rest + 4) != 0,
        expect_continue: at(rest + 5) != 0,
    };
    record(Some(&request));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &[u8], check: impl Fn(&Request<'_, '_>, &Request<'_, '_>)) {
        let mut storage = wire::HeaderStorage::new();
        let limits = wire::Limits {
            max_body_size: u64::MAX,
            ..wire::Limits::default()
        };
        let req = wire::parse_request(head, &mut storage, &limits)
            .unwrap()
            .unwrap();
        let kept = keep(&req, head);
        let mut called = false;
        assert!(read(&kept, &mut |back| {
            check(&req, back.unwrap());
            called = true;
        }));
        assert!(called);
    }

    #[test]
    fn reads_back_what_was_parsed() {
        let head = b"POST /a/b?c=d HTTP/1.1\r\nHost: example.test\r\nUser-Agent: x \"y\"\r\n\
                     Content-Length: 5000000000\r\nExpect: 100-continue\r\n\r\nbody";
        parsed(head, |req, back| {
            assert_eq!(format!("{req:?}"), format!("{back:?}"));
        });
        parsed(b"GET / HTTP/1.0\r\n\r\n", |req, back| {
            assert_eq!(format!("{req:?}"), format!("{back:?}"));
        });
        parsed(
            b"GET /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            |req, back| assert_eq!(format!("{req:?}"), format!("{back:?}")),
        );
    }

    #[test]
    fn a_head_without_layout_is_not_read() {
        // An absolute-form target with an empty path: the parser's `/` is not in the head.
        let head = b"GET http://example.test HTTP/1.1\r\nHost: example.test\r\n\r\n";
        let mut storage = wire::HeaderStorage::new();
        let limits = wire::Limits::default();
        let req = wire::parse_request(head, &mut storage, &limits)
            .unwrap()
            .unwrap();
        let kept = keep(&req, head);
        assert_eq!(&kept[..], &head[..]);
        assert!(!read(&kept, &mut |_| panic!("read without a layout")));
        assert!(!read(b"", &mut |_| panic!("read from nothing")));
    }
}
