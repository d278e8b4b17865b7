//! Property test: tessera's parser and hyper's agree on message boundaries (where each
//! request ends, and its body) for every input both accept. Inputs are built from the
//! pieces request smuggling is made of (framing headers in their odd spellings, chunked
//! bodies with extensions and trailers, pipelined requests) and then mutated.

mod boundaries;

use proptest::prelude::*;

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "GET", "POST", "HEAD", "PUT", "OPTIONS", "FOO", "get", "DELETE", "CONNECT",
    ])
}

fn target() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "/",
        "/a?b=c",
        "/%2e%2e/x",
        "http://h/p",
        "HTTP://h",
        "http://h?q",
        "h:443",
        "*",
        "/a b",
        "/\u{e9}",
    ])
}

fn version() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        12 => Just("HTTP/1.1"),
        3 => Just("HTTP/1.0"),
        1 => prop::sample::select(vec!["HTTP/1.10", "HTTP/2.0", "HTTP/0.9"]),
    ]
}

/// Headers that do not frame the body.
fn other_header() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "X-A: b",
        "X-A:",
        "Accept: */*",
        "Connection: keep-alive",
        "Connection: close",
        "Expect: 100-continue",
        "Upgrade: websocket",
        "Host: h",
    ])
}

fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(b"abcGET /\r\n0123456789:".to_vec()),
        0..30,
    )
}

/// A chunked body: chunks with extensions in several spellings, then trailers.
fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    let chunk = (
        body_bytes(),
        prop::sample::select(vec!["", ";a", ";a=b", ";a=\"x;y\"", " ;a", ";a=\"\\\"\""]),
        prop::bool::ANY,
    )
        .prop_map(|(data, ext, upper)| {
            let size = if upper {
                format!("{:X}", data.len())
            } else {
                format!("{:04x}", data.len())
            };
            let mut out = format!("{size}{ext}\r\n").into_bytes();
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\r\n");
            out
        });
    let trailer = prop::sample::select(vec!["", "", "X-T: 1\r\n", "X-T: 1\r\nY: 2\r\n"]);
    (prop::collection::vec(chunk, 0..4), trailer).prop_map(|(chunks, trailer)| {
        let mut out: Vec<u8> = chunks.concat();
        out.extend_from_slice(format!("0\r\n{trailer}\r\n").as_bytes());
        out
    })
}

/// Framing header lines and the body they announce: mostly coherent (in the spellings
/// both parsers should accept), sometimes conflicting in the ways smuggling needs.
fn framing() -> impl Strategy<Value = (Vec<String>, Vec<u8>)> {
    let none = Just((Vec::new(), Vec::new()));
    let length = (
        body_bytes(),
        prop::sample::select(vec![
            "Content-Length: {}",
            "content-length:{} ",
            "Content-Length: 00{}",
        ]),
    )
        .prop_map(|(body, spelling)| (vec![spelling.replace("{}", &body.len().to_string())], body));
    let chunked = (
        chunked_body(),
        prop::sample::select(vec![
            "Transfer-Encoding: chunked",
            "transfer-encoding: Chunked",
            "Transfer-Encoding:  chunked\t",
        ]),
    )
        .prop_map(|(body, spelling)| (vec![spelling.to_string()], body));
    let hostile = (chunked_body(), body_bytes(), 0usize..8, 0usize..10).prop_map(
        |(chunked, raw, kind, delta)| {
            let n = raw.len();
            let (headers, body): (Vec<String>, Vec<u8>) = match kind {
                0 => (
                    vec![
                        format!("Content-Length: {}", chunked.len().saturating_sub(delta)),
                        "Transfer-Encoding: chunked".into(),
                    ],
                    chunked,
                ),
                1 => (
                    vec![
                        "Transfer-Encoding: chunked".into(),
                        format!("Content-Length: {delta}"),
                    ],
                    chunked,
                ),
                2 => (vec!["Transfer-Encoding: gzip, chunked".into()], chunked),
                3 => (
                    vec![
                        format!("Content-Length: {n}"),
                        format!("Content-Length: {n}"),
                    ],
                    raw,
                ),
                4 => (vec![format!("Content-Length: {n}, {n}")], raw),
                5 => (vec![format!("Content-Length: +{n}")], raw),
                6 => (
                    vec![format!("Content-Length: {}", n.saturating_sub(delta))],
                    raw,
                ),
                _ => (vec!["Transfer-Encoding: chunked, identity".into()], chunked),
            };
            (headers, body)
        },
    );
    prop_oneof![3 => none, 3 => length, 3 => chunked, 2 => hostile]
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        method(),
        target(),
        version(),
        prop::collection::vec(other_header(), 0..3),
        framing(),
    )
        .prop_map(|(method, target, version, others, (framing, body))| {
            let mut out = format!("{method} {target} {version}\r\nHost: h\r\n").into_bytes();
            for h in others.iter().map(|s| s.to_string()).chain(framing) {
                out.extend_from_slice(h.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&body);
            out
        })
}

/// Up to three pipelined requests, then a few byte-level mutations (insert, delete,
/// overwrite) at arbitrary positions.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let edits = prop::collection::vec(
        (
            0u8..3,
            any::<prop::sample::Index>(),
            prop::sample::select(b"\r\n \t:;,0aA\"\\\x00".to_vec()),
        ),
        0..2,
    );
    (prop::collection::vec(request(), 1..4), edits).prop_map(|(requests, edits)| {
        let mut bytes = requests.concat();
        for (kind, at, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => {}
            }
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn tessera_and_hyper_agree_on_message_boundaries(input in stream()) {
        if let Err(difference) = boundaries::check(&input) {
            prop_assert!(false, "{}", difference);
        }
    }
}

/// The comparison must have teeth: on a plain pipeline both sides see every request.
#[test]
fn both_parsers_see_a_plain_pipeline() {
    let input = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n\
        POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello\
        POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n\
        GET /d HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    let ours = boundaries::tessera(input);
    let theirs = boundaries::hyper(input);
    assert_eq!(ours.len(), 4);
    assert_eq!(ours, theirs);
    assert_eq!(ours[2].body, b"abc");
    boundaries::check(input).unwrap();
}
