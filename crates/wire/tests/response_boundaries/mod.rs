//! Where does the response to a request end, and what is its body? Asked of tessera's
//! parser (`wire::parse_response` plus `wire::ChunkedDecoder`, driven the way `edge`'s
//! upstream client drives them) and of hyper's HTTP/1 client (over an in-memory duplex,
//! the origin's side writing the input), so that the two can be compared: a proxy that
//! frames an origin's response differently from another client is a response-splitting
//! hole. The response twin of `tests/boundaries`.
//!
//! Shared by the property test (`tests/response_differential.rs`) and the
//! `differential_response` fuzz target (`fuzz/`, which includes this file by path).

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::{Chunk, ChunkedDecoder, HeaderStorage, ResponseFraming};

/// As `edge`'s client (crates/edge/src/client.rs).
const MAX_HEAD: usize = 64 * 1024;
/// hyper's client reads at most 100 fields by default; so does tessera here.
const MAX_FIELDS: usize = 100;

/// The final response to one request, as a client read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The final response tessera reads from `input` (interim 1xx skipped) with its whole
/// body; `None` if it refuses the head, or the head or body is incomplete.
pub fn tessera(input: &[u8], head_request: bool) -> Option<Seen> {
    let mut pos = 0;
    loop {
        let mut storage = HeaderStorage::new();
        let r = wire::parse_response(
            &input[pos..],
            &mut storage,
            head_request,
            MAX_HEAD,
            MAX_FIELDS,
        )
        .ok()??;
        let start = pos + r.head_len;
        if r.is_interim() {
            pos = start;
            continue;
        }
        let body = match r.body {
            ResponseFraming::None => Vec::new(),
            ResponseFraming::Length(n) => {
                let end = start.checked_add(usize::try_from(n).ok()?)?;
                input.get(start..end)?.to_vec()
            }
            ResponseFraming::Chunked => dechunk(&input[start..])?,
            ResponseFraming::Close => input[start..].to_vec(),
        };
        return Some(Seen {
            status: r.status,
            body,
        });
    }
}

/// A whole chunked body from the start of `input`, `None` if malformed or incomplete.
fn dechunk(input: &[u8]) -> Option<Vec<u8>> {
    let mut decoder = ChunkedDecoder::new(MAX_HEAD);
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let (used, chunk) = decoder.decode(&input[pos..]).ok()?;
        pos += used;
        match chunk {
            Chunk::Data(data) => body.extend_from_slice(data),
            Chunk::Done => return Some(body),
            Chunk::NeedMore => return None,
        }
    }
}

/// The final response hyper's HTTP/1 client reads from `input` with its whole body:
/// the client sends one GET (or HEAD) and the origin answers with `input`, then hangs
/// up. `None` if hyper refuses the response or its body.
pub fn hyper(input: &[u8], head_request: bool) -> Option<Seen> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let (client_io, mut origin) = tokio::io::duplex(input.len().max(1) + 64 * 1024);
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(client_io))
            .await
            .ok()?;
        let answer = async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match origin.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = origin.write_all(input).await;
            let _ = origin.shutdown().await;
            let mut sink = Vec::new();
            let _ = origin.read_to_end(&mut sink).await;
        };
        let exchange = async move {
            let method = if head_request {
                hyper::Method::HEAD
            } else {
                hyper::Method::GET
            };
            let request = hyper::Request::builder()
                .method(method)
                .uri("/")
                .header("host", "h")
                .body(Empty::<Bytes>::new())
                .expect("request");
            let response = sender.send_request(request).await.ok()?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Some(Seen {
                status,
                body: body.to_vec(),
            })
        };
        let (seen, _, ()) = tokio::join!(exchange, connection, answer);
        seen
    })
}

/// Compares the two clients' views of `input` (the first byte says whether the request
/// was HEAD): when both accept the response they must agree on its status and its whole
/// body, which is to say on where it ends. Where only one accepts, tessera is meant to be
/// the stricter (Content-Length with Transfer-Encoding, a coding other than chunked), and
/// a refusal closes the connection, so it cannot desynchronise anything.
pub fn check(data: &[u8]) -> Result<(), String> {
    let Some((&flags, input)) = data.split_first() else {
        return Ok(());
    };
    let head_request = flags & 1 == 1;
    let (Some(ours), Some(theirs)) = (tessera(input, head_request), hyper(input, head_request))
    else {
        return Ok(());
    };
    if ours != theirs {
        return Err(format!(
            "the response differs (HEAD: {head_request}):\n tessera {ours:?}\n hyper   {theirs:?}\n input {:?}",
            String::from_utf8_lossy(input)
        ));
    }
    Ok(())
}
