//! Fuzzes tessera's request parser the way the server drives it: parse a head, frame its
//! body (Content-Length, or chunked through `ChunkedDecoder`), repeat on what follows.
//! Besides "never panics", it checks the properties the server relies on:
//!
//! - a complete head ends with CRLFCRLF within the input, contains no bare CR or LF and
//!   no NUL, and parses the same when nothing follows it;
//! - no strict prefix of a complete head is itself complete;
//! - a chunked body decodes to the same bytes, length and outcome whether it arrives
//!   in one piece or in pieces of any size (the first input byte picks the size).

#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::{BodyFraming, Chunk, ChunkedDecoder, Error, HeaderStorage, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    let step = usize::from(step % 16) + 1;
    let limits = Limits::default();
    let mut pos = 0;
    while pos < input.len() {
        let buf = &input[pos..];
        let mut storage = HeaderStorage::new();
        let (head_len, body, keep_alive) = match wire::parse_request(buf, &mut storage, &limits) {
            Ok(Some(req)) => (req.head_len, req.body, req.keep_alive),
            Ok(None) | Err(_) => return,
        };
        check_head(buf, head_len, &limits);
        let body_start = pos + head_len;
        pos = match body {
            BodyFraming::None => body_start,
            BodyFraming::Length(n) => {
                assert!(n > 0 && n <= limits.max_body_size);
                match usize::try_from(n)
                    .ok()
                    .and_then(|n| body_start.checked_add(n))
                {
                    Some(end) if end <= input.len() => end,
                    _ => return,
                }
            }
            BodyFraming::Chunked => {
                let whole = dechunk(&input[body_start..], input.len() - body_start);
                let pieces = dechunk(&input[body_start..], step);
                assert_eq!(
                    whole, pieces,
                    "chunked decoding depends on how bytes arrive"
                );
                match whole {
                    Ok(Some((_, used))) => body_start + used,
                    _ => return,
                }
            }
        };
        if !keep_alive {
            return;
        }
    }
});

fn check_head(buf: &[u8], head_len: usize, limits: &Limits) {
    assert!(head_len <= buf.len() && head_len <= limits.max_head_size);
    let head = &buf[..head_len];
    assert!(
        head.ends_with(b"\r\n\r\n"),
        "head does not end with CRLFCRLF"
    );
    assert!(!head.contains(&0), "NUL accepted in a head");
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && head[i - 1] == b'\r', "bare LF accepted");
        }
        if b == b'\r' {
            assert_eq!(head.get(i + 1), Some(&b'\n'), "bare CR accepted");
        }
    }
    let mut storage = HeaderStorage::new();
    let alone = wire::parse_request(head, &mut storage, limits)
        .expect("a head that parsed with bytes after it fails alone")
        .expect("a head that parsed with bytes after it is incomplete alone");
    assert_eq!(alone.head_len, head_len);
    let mut storage = HeaderStorage::new();
    assert!(
        !matches!(
            wire::parse_request(&head[..head_len - 1], &mut storage, limits),
            Ok(Some(_))
        ),
        "a strict prefix of a head is complete"
    );
}

/// Body bytes and bytes used, `Ok(None)` if incomplete, or the refusal.
fn dechunk(input: &[u8], step: usize) -> Result<Option<(Vec<u8>, usize)>, Error> {
    let mut decoder = ChunkedDecoder::new(Limits::default().max_head_size);
    let mut body = Vec::new();
    let mut pos = 0;
    let mut end = step.min(input.len());
    loop {
        let (used, chunk) = decoder.decode(&input[pos..end])?;
        assert!(used <= end - pos);
        pos += used;
        match chunk {
            Chunk::Data(data) => {
                assert!(!data.is_empty(), "empty Data chunk");
                body.extend_from_slice(data);
            }
            Chunk::Done => {
                assert!(decoder.is_done());
                return Ok(Some((body, pos)));
            }
            Chunk::NeedMore => {
                assert_eq!(pos, end, "NeedMore without consuming the input");
                if end == input.len() {
                    return Ok(None);
                }
                end = (end + step).min(input.len());
            }
        }
    }
}
