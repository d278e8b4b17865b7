//! Upstream bodies in a content coding: a template or fragment that an origin sent
//! gzip-, Brotli- or zstd-encoded is decoded (within the size limit, so a decompression
//! bomb costs at most the limit) before it is compiled or spliced into a page. A
//! non-ESI response is never decoded here: it passes through as it came.

use bytes::Bytes;
use compress::Coding;
use evloop::time::Instant;
use handler::FieldList;

use crate::error::UpstreamError;
use crate::upstream::client::Pooled;
use crate::upstream::read as client;

/// The content coding of a response: `Some(Identity)` without one, `None` for one the
/// proxy cannot decode (or several stacked).
pub(crate) fn coding(fields: &FieldList) -> Option<Coding> {
    let mut values = fields.get_all(b"content-encoding");
    let Some(first) = values.next() else {
        return Some(Coding::Identity);
    };
    if values.next().is_some() || first.contains(&b',') {
        return None;
    }
    Coding::from_token(first)
}

/// Whether the proxy can read a body with these headers (identity, or a coding it
/// decodes).
pub(crate) fn readable(fields: &FieldList) -> bool {
    coding(fields).is_some()
}

/// A whole body in `coding` (as [`coding`] says), decoded: at most `limit` bytes as
/// received and `limit` once decoded.
pub(crate) async fn read_bytes(
    pooled: Pooled,
    coding: Option<Coding>,
    limit: usize,
    deadline: Instant,
) -> Result<Bytes, UpstreamError> {
    match coding {
        Some(Coding::Identity) => client::read_bytes(pooled, limit, deadline).await,
        coding => {
            let upstream = pooled.upstream_name().to_string();
            let raw = client::read_bytes(pooled, limit, deadline).await?;
            decode(&upstream, coding, &raw, limit)
        }
    }
}

/// A whole body compiled as ESI (decoded first when encoded), with the buffers its text
/// points into.
pub(crate) async fn read_template_with_source(
    pooled: Pooled,
    coding: Option<Coding>,
    limit: usize,
    deadline: Instant,
) -> Result<(esi::Template, Vec<Bytes>), UpstreamError> {
    if coding == Some(Coding::Identity) {
        return client::read_template_with_source(pooled, limit, deadline).await;
    }
    let body = read_bytes(pooled, coding, limit, deadline).await?;
    let mut compiler = esi::Compiler::new(&esi::Options::default());
    compiler.feed(body.clone());
    Ok((compiler.finish(), vec![body]))
}

/// [`read_template_with_source`] without the source.
pub(crate) async fn read_template(
    pooled: Pooled,
    coding: Option<Coding>,
    limit: usize,
    deadline: Instant,
) -> Result<esi::Template, UpstreamError> {
    if coding == Some(Coding::Identity) {
        return client::read_template(pooled, limit, deadline).await;
    }
    Ok(read_template_with_source(pooled, coding, limit, deadline)
        .await?
        .0)
}

/// Decodes a body, refusing one that does not decode or expands beyond `limit`. The
/// refusal is logged with the upstream's name: an operator must see which origin sends
/// bombs or broken bodies.
fn decode(
    upstream: &str,
    coding: Option<Coding>,
    raw: &[u8],
    limit: usize,
) -> Result<Bytes, UpstreamError> {
    let result = match coding {
        Some(c) => compress::decode(c, raw, limit).map_err(|e| e.to_string()),
        None => Err("unknown content coding".to_string()),
    };
    result.map_err(|message| {
        tracing::warn!(%upstream, error = %message, "upstream body refused");
        UpstreamError::Decode {
            upstream: upstream.to_string(),
            message,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codings_the_proxy_reads() {
        let mut h = FieldList::new();
        assert_eq!(coding(&h), Some(Coding::Identity));
        h.insert(b"content-encoding", b"gzip");
        assert_eq!(coding(&h), Some(Coding::Gzip));
        h.insert(b"content-encoding", b"ZSTD");
        assert_eq!(coding(&h), Some(Coding::Zstd));
        h.insert(b"content-encoding", b"gzip, br");
        assert_eq!(coding(&h), None);
        h.insert(b"content-encoding", b"compress");
        assert!(!readable(&h));
    }

    #[test]
    fn a_bomb_is_refused_at_the_limit() {
        let zeros = vec![0u8; 1 << 20];
        let bomb = compress::compress(Coding::Gzip, 1, &[&zeros]).unwrap();
        let e = decode("origin", Some(Coding::Gzip), &bomb, 4096).unwrap_err();
        assert!(e.to_string().contains("origin"), "{e}");
        let ok = decode("origin", Some(Coding::Gzip), &bomb, 1 << 20).unwrap();
        assert_eq!(ok.len(), 1 << 20);
    }
}
