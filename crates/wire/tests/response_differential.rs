//! Property test: tessera's parser of origin responses and hyper's HTTP/1 client agree on
//! the status and the whole body of the response to a request (and so on where it ends)
//! for every input both accept. Inputs are built from status lines with and without a
//! reason, interim 1xx responses, framing fields in odd spellings and conflicts, chunked
//! bodies, each line ended by CRLF or a bare LF, and then mutated.

mod response_boundaries;

use proptest::prelude::*;

fn status_line() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "HTTP/1.1 200 OK",
        "HTTP/1.0 200 OK",
        "HTTP/1.1 200",
        "HTTP/1.1 200 ",
        "HTTP/1.1 204 No Content",
        "HTTP/1.1 304 Not Modified",
        "HTTP/1.1 404 Not Found",
        "HTTP/1.0 500 x y",
    ])
}

fn interim() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::select(vec![
        vec![],
        vec![],
        vec!["HTTP/1.1 100 Continue", ""],
        vec!["HTTP/1.1 103 Early Hints", "Link: </a.css>", ""],
    ])
}

/// Fields that do not frame the body.
fn other_field() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "X-A: b",
        "X-A:",
        "Connection: close",
        "Connection: keep-alive",
        "Content-Type: text/html",
    ])
}

fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(b"abcHTTP/1.1 200\r\n0123456789:".to_vec()),
        0..30,
    )
}

fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    let chunk =
        (body_bytes(), prop::sample::select(vec!["", ";a", ";a=b"])).prop_map(|(data, ext)| {
            let mut out = format!("{:x}{ext}\r\n", data.len()).into_bytes();
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\r\n");
            out
        });
    let trailer = prop::sample::select(vec!["", "", "X-T: 1\r\n"]);
    (prop::collection::vec(chunk, 0..3), trailer).prop_map(|(chunks, trailer)| {
        let mut out: Vec<u8> = chunks.concat();
        out.extend_from_slice(format!("0\r\n{trailer}\r\n").as_bytes());
        out
    })
}

/// Framing fields and the body they announce: mostly coherent, sometimes conflicting.
fn framing() -> impl Strategy<Value = (Vec<String>, Vec<u8>)> {
    let none = body_bytes().prop_map(|body| (Vec::new(), body));
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
        ]),
    )
        .prop_map(|(body, spelling)| (vec![spelling.to_string()], body));
    let hostile = (chunked_body(), body_bytes(), 0usize..6, 0usize..10).prop_map(
        |(chunked, raw, kind, delta)| {
            let n = raw.len();
            match kind {
                0 => (
                    vec![
                        format!("Content-Length: {}", chunked.len().saturating_sub(delta)),
                        "Transfer-Encoding: chunked".into(),
                    ],
                    chunked,
                ),
                1 => (vec!["Transfer-Encoding: gzip".into()], raw),
                2 => (
                    vec![
                        format!("Content-Length: {n}"),
                        format!("Content-Length: 0{n}"),
                    ],
                    raw,
                ),
                3 => (
                    vec![
                        format!("Content-Length: {n}"),
                        format!("Content-Length: {}", n + delta + 1),
                    ],
                    raw,
                ),
                4 => (vec![format!("Content-Length: {n}, {n}")], raw),
                _ => (
                    vec![format!("Content-Length: {}", n.saturating_sub(delta))],
                    raw,
                ),
            }
        },
    );
    prop_oneof![2 => none, 3 => length, 3 => chunked, 2 => hostile]
}

/// A whole answer to one request: the HEAD flag byte, interim responses, the final head
/// (each line ended by CRLF or a bare LF) and its body, then a few byte-level mutations.
fn answer() -> impl Strategy<Value = Vec<u8>> {
    let edits = prop::collection::vec(
        (
            0u8..3,
            any::<prop::sample::Index>(),
            prop::sample::select(b"\r\n \t:;,0aA\x00".to_vec()),
        ),
        0..2,
    );
    (
        any::<bool>(),
        interim(),
        status_line(),
        prop::collection::vec(other_field(), 0..3),
        framing(),
        prop::collection::vec(any::<bool>(), 1..6),
        edits,
    )
        .prop_map(
            |(head_request, interim, status, others, (framing, body), bare_lf, edits)| {
                let mut lines: Vec<String> = interim.iter().map(|l| l.to_string()).collect();
                lines.push(status.to_string());
                lines.extend(others.iter().map(|s| s.to_string()));
                lines.extend(framing);
                lines.push(String::new());
                let mut bytes = vec![u8::from(head_request)];
                for (i, line) in lines.iter().enumerate() {
                    bytes.extend_from_slice(line.as_bytes());
                    let lf: &[u8] = if bare_lf[i % bare_lf.len()] {
                        b"\n"
                    } else {
                        b"\r\n"
                    };
                    bytes.extend_from_slice(lf);
                }
                bytes.extend_from_slice(&body);
                for (kind, at, byte) in edits {
                    // Never the flag byte.
                    let i = 1 + at.index(bytes.len());
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
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn tessera_and_hyper_agree_on_where_a_response_ends(input in answer()) {
        if let Err(difference) = response_boundaries::check(&input) {
            prop_assert!(false, "{}", difference);
        }
    }
}

/// The heads of issue 52, which both must read alike (and tessera now reads at all).
#[test]
fn bare_lf_heads_are_read_alike() {
    for input in [
        &b"\x00HTTP/1.0 200 OK\nConnection: close\n\nbody until the close"[..],
        b"\x00HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
        b"\x00HTTP/1.1 200\nTransfer-Encoding: chunked\n\n5\r\nhello\r\n0\r\n\r\n",
        b"\x00HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok",
        b"\x01HTTP/1.1 200 OK\nContent-Length: 5\n\n",
    ] {
        let ours = response_boundaries::tessera(&input[1..], input[0] == 1);
        assert!(ours.is_some(), "{:?}", String::from_utf8_lossy(input));
        assert_eq!(ours, response_boundaries::hyper(&input[1..], input[0] == 1));
    }
}

/// The comparison only counts where both accept: most generated answers must be such,
/// or the property test would pass by comparing nothing.
#[test]
fn most_generated_answers_are_compared() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = answer();
    let (mut both, mut bare_lf) = (0, 0);
    for _ in 0..500 {
        let input = strategy.new_tree(&mut runner).unwrap().current();
        let head_request = input[0] == 1;
        let ours = response_boundaries::tessera(&input[1..], head_request);
        if ours.is_some() && response_boundaries::hyper(&input[1..], head_request).is_some() {
            both += 1;
            bare_lf += usize::from(input.windows(2).any(|w| w[0] != b'\r' && w[1] == b'\n'));
        }
    }
    eprintln!("{both} of 500 compared, {bare_lf} of them with a bare LF");
    assert!(
        both >= 200 && bare_lf >= 100,
        "{both} compared, {bare_lf} with a bare LF"
    );
}
