//! Decoding a body on its way to a client that does not accept its coding: an upstream
//! sent gzip, br or zstd (an origin that ignored the `identity` it was asked for, a
//! precompressed file), and the client's Accept-Encoding refuses it. The body is
//! decoded, as it streams, so the filter can send it as identity or recompress it in a
//! coding the client takes.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::Coding;
use handler::{BodyError, Chunks, Pooled};

/// The most one chunk of input may expand to (input is fed in small slices, and a slice
/// past this stops the body: a decompression bomb costs at most about this much).
const MAX_EXPANSION_PER_CHUNK: usize = 32 << 20;
/// Input is fed to the decoder this much at a time, so the expansion check runs often.
const SLICE: usize = 4096;

/// A streaming decoder writing into a `Vec` the caller empties.
enum Decoder {
    Gzip(Box<flate2::write::MultiGzDecoder<Vec<u8>>>),
    Brotli(Box<brotli::DecompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
}

impl Decoder {
    fn new(coding: Coding) -> Option<Decoder> {
        Some(match coding {
            Coding::Gzip => Decoder::Gzip(Box::new(flate2::write::MultiGzDecoder::new(Vec::new()))),
            Coding::Brotli => {
                Decoder::Brotli(Box::new(brotli::DecompressorWriter::new(Vec::new(), 4096)))
            }
            Coding::Zstd => {
                let mut d = zstd::stream::write::Decoder::new(Vec::new()).ok()?;
                d.window_log_max(23).ok()?;
                Decoder::Zstd(d)
            }
            Coding::Identity => return None,
        })
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Decoder::Gzip(d) => d.write_all(data),
            Decoder::Brotli(d) => d.write_all(data),
            Decoder::Zstd(d) => d.write_all(data),
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        match self {
            Decoder::Gzip(d) => d.try_finish(),
            Decoder::Brotli(d) => d.close().map_err(std::io::Error::other),
            Decoder::Zstd(d) => d.flush(),
        }
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Decoder::Gzip(d) => d.get_mut(),
            Decoder::Brotli(d) => d.get_mut(),
            Decoder::Zstd(d) => d.get_mut(),
        }
    }

    /// Decodes one chunk, returning what it decoded to.
    fn decode(&mut self, chunk: &[u8]) -> Result<Bytes, BodyError> {
        for slice in chunk.chunks(SLICE) {
            self.write(slice)
                .map_err(|e| BodyError(format!("cannot decode the upstream body: {e}")))?;
            if self.output().len() > MAX_EXPANSION_PER_CHUNK {
                return Err(BodyError("the upstream body expands too much".into()));
            }
        }
        if let Decoder::Zstd(d) = self {
            // zstd's writer keeps decoded bytes in its own buffer until flushed.
            d.flush()
                .map_err(|e| BodyError(format!("cannot decode the upstream body: {e}")))?;
        }
        Ok(Bytes::from(std::mem::take(self.output())))
    }
}

/// A streamed body decoded as it arrives.
pub(crate) struct Decoding {
    inner: Pin<Pooled<dyn Chunks>>,
    decoder: Decoder,
    done: bool,
}

impl Decoding {
    /// `Err` gives the body back when no decoder can start.
    pub(crate) fn new(
        inner: Pin<Pooled<dyn Chunks>>,
        coding: Coding,
    ) -> Result<Decoding, Pin<Pooled<dyn Chunks>>> {
        match Decoder::new(coding) {
            Some(decoder) => Ok(Decoding {
                inner,
                decoder,
                done: false,
            }),
            None => Err(inner),
        }
    }
}

/// Decodes a whole body (for a body at hand), with the same bound per chunk.
pub(crate) fn decode_whole(coding: Coding, pieces: &[&[u8]]) -> Result<Bytes, BodyError> {
    let mut decoder = Decoder::new(coding).ok_or_else(|| BodyError("identity".into()))?;
    let mut out = Vec::new();
    for piece in pieces {
        out.extend_from_slice(&decoder.decode(piece)?);
    }
    decoder
        .finish()
        .map_err(|e| BodyError(format!("cannot decode the upstream body: {e}")))?;
    out.extend_from_slice(decoder.output());
    Ok(out.into())
}

impl Chunks for Decoding {
    fn poll_chunk(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.inner.as_mut().poll_chunk(cx) {
            Poll::Ready(Some(Ok(chunk))) => Poll::Ready(Some(this.decoder.decode(&chunk))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => {
                this.done = true;
                if let Err(e) = this.decoder.finish() {
                    return Poll::Ready(Some(Err(BodyError(format!(
                        "cannot decode the upstream body: {e}"
                    )))));
                }
                Poll::Ready(Some(Ok(Bytes::from(std::mem::take(this.decoder.output())))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coding_decodes_whole_and_bombs_stop() {
        let text = "<p>decoded for a client that takes no coding</p>\n".repeat(500);
        for coding in Coding::COMPRESSED {
            let encoded = crate::compress(coding, 3, &[text.as_bytes()]).unwrap();
            let (a, b) = encoded.split_at(encoded.len() / 2);
            assert_eq!(decode_whole(coding, &[a, b]).unwrap(), text.as_bytes());
        }
        let zeros = vec![0u8; 40 << 20];
        let bomb = crate::compress(Coding::Gzip, 1, &[&zeros]).unwrap();
        assert!(decode_whole(Coding::Gzip, &[&bomb]).is_err());
    }
}
