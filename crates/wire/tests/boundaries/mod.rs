//! Where does each request in a byte stream start and end? Asked of tessera's parser
//! (`wire::parse_request` plus `wire::ChunkedDecoder`, driven the way the server drives
//! them) and of hyper's HTTP/1 server (over an in-memory duplex), so that the two can be
//! compared: every disagreement about a message boundary between two parsers is a
//! request-smuggling hole when one sits in front of the other.
//!
//! Shared by the property test (`tests/differential.rs`) and the `differential` fuzz
//! target (`fuzz/`, which includes this file by path), so both check the same thing.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::{BodyFraming, Chunk, ChunkedDecoder, HeaderStorage, Limits, Method};

/// One request as a server saw it: enough to tell where it started and where it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    /// The path and query (origin form, or the path of an absolute-form target).
    pub path: String,
    pub body: Vec<u8>,
    /// CONNECT or an `Upgrade` header: what follows is no longer HTTP/1 for a server
    /// that agrees to switch, so boundaries after it are not comparable.
    pub switches: bool,
}

/// The requests tessera accepts from `input`, in order, each with its whole body. Stops
/// at the first refusal, at an incomplete request, and after a request that closes the
/// connection, as the server does.
pub fn tessera(input: &[u8]) -> Vec<Seen> {
    let limits = Limits::default();
    let mut seen = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        let mut storage = HeaderStorage::new();
        let req = match wire::parse_request(&input[pos..], &mut storage, &limits) {
            Ok(Some(req)) => req,
            Ok(None) | Err(_) => break,
        };
        let body_start = pos + req.head_len;
        let (body, end) = match req.body {
            BodyFraming::None => (Vec::new(), body_start),
            BodyFraming::Length(n) => {
                let Some(end) = usize::try_from(n)
                    .ok()
                    .and_then(|n| body_start.checked_add(n))
                    .filter(|&end| end <= input.len())
                else {
                    break;
                };
                (input[body_start..end].to_vec(), end)
            }
            BodyFraming::Chunked => {
                match dechunk(
                    &input[body_start..],
                    limits.max_head_size,
                    limits.max_body_size,
                ) {
                    Some((body, used)) => (body, body_start + used),
                    None => break,
                }
            }
        };
        seen.push(Seen {
            method: req.method_token.to_string(),
            path: match req.path {
                // "http://host?q" has the path "?q", which stands for "/?q".
                [b'?', ..] => format!("/{}", String::from_utf8_lossy(req.path)),
                path => String::from_utf8_lossy(path).into_owned(),
            },
            body,
            switches: req.method == Method::Connect || req.header("upgrade").is_some(),
        });
        if !req.keep_alive {
            break;
        }
        pos = end;
    }
    seen
}

/// A whole chunked body from the start of `input`: the data and the bytes it took, or
/// `None` if it is malformed, too large or incomplete.
fn dechunk(input: &[u8], max_trailer: usize, max_body: u64) -> Option<(Vec<u8>, usize)> {
    let mut decoder = ChunkedDecoder::new(max_trailer);
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let (used, chunk) = decoder.decode(&input[pos..]).ok()?;
        pos += used;
        match chunk {
            Chunk::Data(data) => {
                body.extend_from_slice(data);
                if body.len() as u64 > max_body {
                    return None;
                }
            }
            Chunk::Done => return Some((body, pos)),
            Chunk::NeedMore => return None,
        }
    }
}

/// The requests hyper's HTTP/1 server accepts from `input`, in order, each with its
/// whole body (a request whose body fails to arrive or to decode is not counted).
pub fn hyper(input: &[u8]) -> Vec<Seen> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let recorded = recorded.clone();
        async move {
            let method = req.method().as_str().to_string();
            let uri = req.uri();
            let path = match (uri.scheme(), uri.authority()) {
                // Authority form (CONNECT): the authority is the whole target.
                (None, Some(authority)) => authority.as_str().to_string(),
                _ => match uri.query() {
                    Some(query) => format!("{}?{query}", uri.path()),
                    None => uri.path().to_string(),
                },
            };
            let switches = req.method() == hyper::Method::CONNECT
                || req.headers().contains_key(hyper::header::UPGRADE);
            if let Ok(body) = req.into_body().collect().await {
                recorded.lock().unwrap().push(Seen {
                    method,
                    path,
                    body: body.to_bytes().to_vec(),
                    switches,
                });
            }
            Ok::<_, Infallible>(hyper::Response::new(Empty::<Bytes>::new()))
        }
    });
    runtime.block_on(async {
        // Room for the whole input, so writing it never waits for hyper.
        let (mut client, server) = tokio::io::duplex(input.len().max(1) + 64 * 1024);
        client.write_all(input).await.expect("write input");
        client.shutdown().await.expect("shut down input");
        let connection = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let responses = async move {
            let mut sink = Vec::new();
            let _ = client.read_to_end(&mut sink).await;
        };
        let (_, ()) = tokio::join!(connection, responses);
    });
    let seen = seen.lock().unwrap().clone();
    seen
}

/// Compares the two servers' views of `input`: for every request both accept (the
/// common prefix of the two sequences, up to the first protocol switch), they must
/// agree on method, path and body, which is to say on where each request ends.
pub fn check(input: &[u8]) -> Result<(), String> {
    let ours = tessera(input);
    let theirs = hyper(input);
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        // A request that switches protocols (CONNECT, Upgrade) is where HTTP/1 ends for a
        // server that agrees to switch; hyper and tessera differ on whether its body is
        // HTTP/1 at all, so only its request line is compared.
        let switches = a.switches || b.switches;
        let same = if switches {
            (&a.method, &a.path) == (&b.method, &b.path)
        } else {
            a == b
        };
        if !same {
            return Err(format!(
                "request {i} differs:\n tessera {a:?}\n hyper   {b:?}\n input {:?}",
                String::from_utf8_lossy(input)
            ));
        }
        if switches {
            break;
        }
    }
    Ok(())
}
