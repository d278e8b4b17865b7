//! Stitching a compressed page from compressed pieces (Varnish's gzip ESI delivery,
//! `cache_esi_deliver.c`): a page assembled per request from cached parts (template
//! text, cached fragment bodies) is sent compressed without compressing those parts
//! again. Each part is compressed once, on its own, and kept; a page is its parts'
//! compressed forms laid end to end:
//!
//! - gzip: one gzip member. Each part is raw deflate ended by a sync flush (byte
//!   aligned, no final block), so the parts concatenate into one deflate stream; the
//!   member's header comes first, then an empty final block and the trailer, whose
//!   CRC-32 is the parts' CRCs combined (`crc32_combine`) and whose length is their sum.
//!   One member, not one per part: several concatenated gzip members are valid, but some
//!   clients (curl among them) stop after the first.
//! - zstd: each part is an independent frame; concatenated frames are a valid stream.
//!
//! Brotli has no such concatenation: the server's filter compresses those pages whole.
//! This is written here, not taken from a library, because no crate stitches streams.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Write;

use bytes::Bytes;
use compress::Coding;

/// Most bytes (compressed parts and the sources they keep alive) a worker keeps; past
/// it the whole store is dropped and refills with what pages use next.
const BUDGET: usize = 32 << 20;

/// gzip's member header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
/// An empty final deflate block (fixed Huffman, end of block at once).
const DEFLATE_END: [u8; 2] = [0x03, 0x00];

/// One worker's compressed parts, by the identity of the buffer they were made from and
/// the coding and level they were made with (routes may compress at different levels).
#[derive(Default)]
pub(crate) struct Parts {
    made: RefCell<HashMap<(usize, usize, Coding, i32), Part>>,
    bytes: Cell<usize>,
}

struct Part {
    /// The part's own bytes, kept so that its address cannot be reused by another
    /// buffer while it is a key here.
    _source: Bytes,
    compressed: Bytes,
    crc: flate2::Crc,
}

impl Parts {
    /// The page made of `chunks`, in `coding` (gzip or zstd), at `level`, and how many
    /// of its parts had to be compressed now. `None` for another coding, or when a
    /// compressor fails.
    pub(crate) fn stitch(
        &self,
        coding: Coding,
        level: i32,
        chunks: &[Bytes],
    ) -> Option<(Bytes, usize)> {
        if !matches!(coding, Coding::Gzip | Coding::Zstd) {
            return None;
        }
        let mut made_now = 0;
        let mut out = Vec::new();
        if coding == Coding::Gzip {
            out.extend_from_slice(&GZIP_HEADER);
        }
        let mut crc = flate2::Crc::new();
        for chunk in chunks.iter().filter(|c| !c.is_empty()) {
            let key = (chunk.as_ptr() as usize, chunk.len(), coding, level);
            let mut made = self.made.borrow_mut();
            if !made.contains_key(&key) {
                let part = compress_part(coding, level, chunk)?;
                made_now += 1;
                let size = part.compressed.len() + chunk.len();
                if self.bytes.get() + size > BUDGET {
                    made.clear();
                    self.bytes.set(0);
                }
                self.bytes.set(self.bytes.get() + size);
                made.insert(key, part);
            }
            let part = &made[&key];
            out.extend_from_slice(&part.compressed);
            crc.combine(&part.crc);
        }
        if coding == Coding::Gzip {
            out.extend_from_slice(&DEFLATE_END);
            out.extend_from_slice(&crc.sum().to_le_bytes());
            out.extend_from_slice(&crc.amount().to_le_bytes());
        }
        Some((out.into(), made_now))
    }
}

/// One part, compressed on its own.
fn compress_part(coding: Coding, level: i32, data: &Bytes) -> Option<Part> {
    let compressed = match coding {
        Coding::Gzip => {
            let level = flate2::Compression::new(level.clamp(1, 9) as u32);
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), level);
            e.write_all(data).ok()?;
            // A sync flush ends the part byte-aligned with no final block, so the next
            // part's blocks may follow it. The encoder is then dropped unfinished.
            e.flush().ok()?;
            std::mem::take(e.get_mut())
        }
        Coding::Zstd => zstd::bulk::compress(data, level).ok()?,
        _ => return None,
    };
    let mut crc = flate2::Crc::new();
    if coding == Coding::Gzip {
        crc.update(data);
    }
    Some(Part {
        _source: data.clone(),
        compressed: compressed.into(),
        crc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn page() -> Vec<Bytes> {
        let shared = Bytes::from("<div>a fragment shared by every page</div>\n".repeat(40));
        vec![
            Bytes::from_static(b"<html><body>\n"),
            shared.clone(),
            Bytes::from("per request: 17\n"),
            shared,
            Bytes::new(),
            Bytes::from_static(b"</body></html>\n"),
        ]
    }

    fn whole(chunks: &[Bytes]) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[test]
    fn a_stitched_gzip_page_is_one_member_that_decodes_whole() {
        let parts = Parts::default();
        let chunks = page();
        let (gz, made) = parts.stitch(Coding::Gzip, 2, &chunks).unwrap();
        assert_eq!(made, 4, "the shared fragment is compressed once");
        // GzDecoder reads one member only: the whole page must be in it.
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, whole(&chunks));
        let (again, made) = parts.stitch(Coding::Gzip, 2, &chunks).unwrap();
        assert_eq!((made, again), (0, gz));
    }

    #[test]
    fn a_stitched_zstd_page_is_concatenated_frames() {
        let parts = Parts::default();
        let chunks = page();
        let (z, _) = parts.stitch(Coding::Zstd, 3, &chunks).unwrap();
        assert_eq!(zstd::decode_all(&z[..]).unwrap(), whole(&chunks));
        assert!(parts.stitch(Coding::Brotli, 3, &chunks).is_none());
    }

    #[test]
    fn parts_made_at_one_level_are_not_used_at_another() {
        let parts = Parts::default();
        let chunks = page();
        let (fast, _) = parts.stitch(Coding::Gzip, 1, &chunks).unwrap();
        let (best, made) = parts.stitch(Coding::Gzip, 9, &chunks).unwrap();
        assert_eq!(made, 4, "made anew at level 9");
        assert_ne!(fast, best);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&best[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, whole(&chunks));
    }
}
