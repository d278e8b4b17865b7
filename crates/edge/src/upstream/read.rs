//! Reading a whole upstream body within a deadline and a size limit: as bytes of its
//! own, or compiled as ESI while it arrives.

use bytes::Bytes;
use evloop::time::{timeout_at, Instant};

use crate::error::UpstreamError;
use crate::upstream::client::Pooled;

/// Reads a whole body by `deadline`, at most `limit` bytes, handing each chunk to
/// `chunk`; the connection goes back to the pool at its end.
async fn read_chunks(
    mut pooled: Pooled,
    limit: usize,
    deadline: Instant,
    mut chunk: impl FnMut(Bytes),
) -> Result<(), UpstreamError> {
    let name = pooled.upstream_name().to_string();
    let mut len = 0;
    loop {
        match timeout_at(deadline, std::future::poll_fn(|cx| pooled.poll_chunk(cx))).await {
            Err(_) => return Err(UpstreamError::ResponseTimeout { upstream: name }),
            Ok(Err(e)) => return Err(e),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(data))) => {
                len += data.len();
                if len > limit {
                    return Err(UpstreamError::TooLarge { upstream: name });
                }
                chunk(data);
            }
        }
    }
}

/// A whole body as bytes of its own (see [`read_chunks`]). A chunk is a slice of the
/// connection's read buffer, which is far larger than a small body: kept in the cache, it
/// would hold the whole buffer alive beyond the cache's weight. So the body is always
/// copied once into an exact-size buffer (once per fill; a hit shares it, uncopied).
pub(crate) async fn read_bytes(
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
) -> Result<Bytes, UpstreamError> {
    let mut parts: Vec<Bytes> = Vec::new();
    read_chunks(pooled, limit, deadline, |b| parts.push(b)).await?;
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => Bytes::copy_from_slice(&parts[0]),
        _ => Bytes::from(parts.concat()),
    })
}

/// A whole body compiled as ESI while it arrives (see [`read_chunks`]): each chunk goes
/// to the compiler as it comes (tags may straddle chunks; text stays zero-copy slices of
/// the chunks), so the body is never copied into one buffer.
pub(crate) async fn read_template(
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
) -> Result<esi::Template, UpstreamError> {
    let mut compiler = esi::Compiler::new(&esi::Options::default());
    read_chunks(pooled, limit, deadline, |b| compiler.feed(b)).await?;
    Ok(compiler.finish())
}

/// [`read_template`], also keeping the chunks (the buffers the template's text points
/// into, so keeping them costs no memory) for the cache's shared tier. Each chunk is
/// first copied into an exact-size buffer, so a stored template does not keep the
/// connection's larger read buffers alive (see [`read_bytes`]).
pub(crate) async fn read_template_with_source(
    pooled: Pooled,
    limit: usize,
    deadline: Instant,
) -> Result<(esi::Template, Vec<Bytes>), UpstreamError> {
    let mut compiler = esi::Compiler::new(&esi::Options::default());
    let mut source = Vec::new();
    read_chunks(pooled, limit, deadline, |b| {
        let b = Bytes::copy_from_slice(&b);
        source.push(b.clone());
        compiler.feed(b)
    })
    .await?;
    Ok((compiler.finish(), source))
}
