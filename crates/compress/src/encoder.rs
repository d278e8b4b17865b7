//! The compressors and decompressors behind the filter, one type over the three
//! libraries: flate2 (zlib-rs backend) for gzip, brotli, zstd. Each keeps its output in
//! a `Vec` that the caller takes as it fills.

use std::io::{Read, Write};

use bytes::Bytes;

use super::Coding;

/// Brotli's window: 2^18 = 256 KiB, enough for any page an edge compresses on the fly,
/// and it bounds the encoder's memory (the default 4 MiB window would not be).
const BROTLI_WINDOW_LOG: u32 = 18;
/// zstd's window, for the same reason (level 3 would take 2 MiB).
const ZSTD_WINDOW_LOG: u32 = 18;
/// The largest window a zstd frame from an upstream may ask its decoder for (8 MiB); a
/// frame declaring more is refused rather than allocated.
const ZSTD_MAX_WINDOW_LOG: u32 = 23;

/// A streaming compressor.
pub struct Encoder {
    inner: Inner,
}

enum Inner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// `None` once finished (finishing consumes it).
    Brotli(Option<Box<brotli::CompressorWriter<Vec<u8>>>>, Vec<u8>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    /// A compressor for `coding` (not identity) at `level`.
    pub fn new(coding: Coding, level: i32) -> std::io::Result<Encoder> {
        let inner = match coding {
            Coding::Gzip => Inner::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level.clamp(1, 9) as u32),
            )),
            Coding::Brotli => Inner::Brotli(
                Some(Box::new(brotli::CompressorWriter::new(
                    Vec::new(),
                    4096,
                    level.clamp(0, 11) as u32,
                    BROTLI_WINDOW_LOG,
                ))),
                Vec::new(),
            ),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), level)?;
                e.window_log(ZSTD_WINDOW_LOG)?;
                e.include_checksum(false)?;
                Inner::Zstd(e)
            }
            Coding::Identity => {
                return Err(std::io::Error::other("identity is not a compressor"));
            }
        };
        Ok(Encoder { inner })
    }

    /// Compresses `data` (the output may stay inside until a flush).
    pub fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.inner {
            Inner::Gzip(e) => e.write_all(data),
            Inner::Brotli(Some(e), _) => e.write_all(data),
            Inner::Brotli(None, _) => Err(std::io::Error::other("write after finish")),
            Inner::Zstd(e) => e.write_all(data),
        }
    }

    /// Makes everything written so far decodable by the client (a sync flush), so a
    /// piece of a streamed page can go out before the next is ready.
    pub fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.inner {
            Inner::Gzip(e) => e.flush(),
            Inner::Brotli(Some(e), _) => e.flush(),
            Inner::Brotli(None, _) => Ok(()),
            Inner::Zstd(e) => e.flush(),
        }
    }

    /// Ends the stream (the trailer, the last block).
    pub fn finish(&mut self) -> std::io::Result<()> {
        match &mut self.inner {
            Inner::Gzip(e) => e.try_finish(),
            Inner::Brotli(e, done) => {
                if let Some(e) = e.take() {
                    *done = e.into_inner();
                }
                Ok(())
            }
            Inner::Zstd(e) => e.do_finish(),
        }
    }

    /// How many compressed bytes wait to be taken.
    pub fn output_len(&self) -> usize {
        match &self.inner {
            Inner::Gzip(e) => e.get_ref().len(),
            Inner::Brotli(Some(e), _) => e.get_ref().len(),
            Inner::Brotli(None, done) => done.len(),
            Inner::Zstd(e) => e.get_ref().len(),
        }
    }

    /// The compressed bytes produced so far and not yet taken.
    pub fn take(&mut self) -> Bytes {
        let out = match &mut self.inner {
            Inner::Gzip(e) => e.get_mut(),
            Inner::Brotli(Some(e), _) => e.get_mut(),
            Inner::Brotli(None, done) => done,
            Inner::Zstd(e) => e.get_mut(),
        };
        Bytes::from(std::mem::take(out))
    }
}

/// Compresses a whole body at once.
pub fn compress(coding: Coding, level: i32, pieces: &[&[u8]]) -> std::io::Result<Bytes> {
    let mut e = Encoder::new(coding, level)?;
    for piece in pieces {
        e.write(piece)?;
    }
    e.finish()?;
    Ok(e.take())
}

/// Why an encoded body could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// It expands beyond the limit (a decompression bomb, or just too large).
    #[error("decoded body exceeds {limit} bytes")]
    TooLarge { limit: usize },
    #[error("corrupt {coding} body: {source}")]
    Corrupt {
        coding: &'static str,
        source: std::io::Error,
    },
}

/// Decodes a whole body in `coding`, refusing it once it expands beyond `limit` bytes
/// (the decoder stops there: a bomb costs at most `limit` bytes of memory).
pub fn decode(coding: Coding, data: &[u8], limit: usize) -> Result<Bytes, DecodeError> {
    let corrupt = |source| DecodeError::Corrupt {
        coding: coding.token(),
        source,
    };
    let reader: Box<dyn Read + '_> = match coding {
        Coding::Identity => return Ok(Bytes::copy_from_slice(data)),
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(data)),
        Coding::Brotli => Box::new(brotli::Decompressor::new(data, 4096)),
        Coding::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(data).map_err(corrupt)?;
            d.window_log_max(ZSTD_MAX_WINDOW_LOG).map_err(corrupt)?;
            Box::new(d)
        }
    };
    let mut out = Vec::with_capacity(data.len().saturating_mul(4).min(limit));
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(corrupt)?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coding_round_trips_through_flushes() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("<p>line {i}</p>\n").into_bytes())
            .collect();
        for coding in Coding::COMPRESSED {
            let mut e = Encoder::new(coding, 3).unwrap();
            let mut out = Vec::new();
            for piece in text.chunks(7000) {
                e.write(piece).unwrap();
                e.flush().unwrap();
                let flushed = e.take();
                assert!(!flushed.is_empty(), "{coding:?} flushed nothing");
                out.extend_from_slice(&flushed);
            }
            e.finish().unwrap();
            out.extend_from_slice(&e.take());
            assert!(out.len() < text.len() / 4, "{coding:?}: {}", out.len());
            assert_eq!(decode(coding, &out, text.len()).unwrap(), text);
        }
    }

    #[test]
    fn decoding_stops_at_the_limit() {
        let zeros = vec![0u8; 1 << 20];
        for coding in Coding::COMPRESSED {
            let bomb = compress(coding, 1, &[&zeros]).unwrap();
            assert!(matches!(
                decode(coding, &bomb, 64 * 1024),
                Err(DecodeError::TooLarge { .. })
            ));
            assert_eq!(decode(coding, &bomb, 1 << 20).unwrap().len(), 1 << 20);
        }
        assert!(matches!(
            decode(Coding::Gzip, b"not gzip", 100),
            Err(DecodeError::Corrupt { .. })
        ));
    }
}
