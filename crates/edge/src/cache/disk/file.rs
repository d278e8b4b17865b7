//! One object on disk: where its file is (levels of its key's hash as directories, as
//! nginx's `levels=1:2`), and its format. A file is a header and a record:
//!
//! ```text
//! "TSDC" | version u16 | flags u16 | header length u32 | record length u64 |
//! record crc32 u32 | stored (Unix ms) u64 | useless after (Unix ms) u64 |
//! Vary marker good until (Unix ms) u64 | object key | base key | Vary field names |
//! surrogate keys | padding length u32 | padding | header crc32 u32
//! ```
//!
//! then the record, the stored response as the Redis tier encodes it (status, fields,
//! freshness, body or ESI source: `Entry::encode`). The padding (version 2; version 1
//! files have none and still load) puts the body of an object of [`ALIGN_ABOVE`] bytes
//! or more at a multiple of 4096 in its file: `sendfile(2)` from an offset that is not
//! page-aligned cost 1.5-2.4x more per 1 MiB here (the static path, the same file from
//! offset 0 and from 700: 103-105 against 157-252 µs per request; docs/benchmarks.md). Numbers are big-endian, texts a u32
//! length and their bytes. A file is written under `tmp/` and renamed into place once
//! whole, so a fill that fails leaves nothing to find; a file whose lengths or checksums
//! are wrong (truncated, corrupted) is refused when read and when loaded.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use bytes::{Buf, BufMut, Bytes, BytesMut};

const MAGIC: &[u8; 4] = b"TSDC";
const VERSION: u16 = 2;
/// Bodies from this size on start on a page boundary; a smaller one is read whole or in
/// a few reads, and would pay up to 4 KiB of padding.
pub(crate) const ALIGN_ABOVE: u64 = 64 << 10;
const PAGE: usize = 4096;
/// The fixed part of a header, before the texts.
const FIXED: usize = 4 + 2 + 2 + 4 + 8 + 4 + 8 + 8 + 8;
/// Headers longer than this are refused (keys, field names and surrogate keys).
const MAX_HEADER: usize = 1 << 20;

/// What a file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    /// The key the object is stored under (a variant's key when the response varies).
    pub(crate) key: String,
    /// The request's key (the same as `key` when the response does not vary).
    pub(crate) base: String,
    /// The `Vary` field names, when it varies.
    pub(crate) vary: Vec<String>,
    /// Until when the Vary marker holds (Unix ms).
    pub(crate) vary_until: u64,
    /// When it was written (Unix ms): a ban made later does not concern it.
    pub(crate) stored_ms: u64,
    /// When it stops being of any use (past its lifetime, stale windows and keep).
    pub(crate) useless_ms: u64,
    /// Its surrogate keys.
    pub(crate) tags: Vec<Box<str>>,
    /// The record's length and checksum.
    pub(crate) record_len: u64,
    pub(crate) record_crc: u32,
    /// Zero bytes at the header's end, so that the body starts on a page ([`Header::align_body`]).
    pub(crate) pad: u32,
}

/// The hash of a key that names its file: 16 bytes of its SHA-256, in hex.
pub(crate) fn name_of(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let mut hex = String::with_capacity(32);
    for b in &digest.as_ref()[..16] {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// The file of `key` under `root`: `root/c/ab/<hash>` where the hash ends in `abc`
/// (nginx's `levels=1:2`).
pub(crate) fn path_of(root: &Path, key: &str) -> PathBuf {
    let name = name_of(key);
    let n = name.len();
    root.join(&name[n - 1..])
        .join(&name[n - 3..n - 1])
        .join(name)
}

/// The directory of files being written.
pub(crate) fn temp_dir(root: &Path) -> PathBuf {
    root.join("tmp")
}

impl Header {
    /// The header's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut texts = BytesMut::new();
        let text = |out: &mut BytesMut, t: &[u8]| {
            out.put_u32(t.len() as u32);
            out.put_slice(t);
        };
        text(&mut texts, self.key.as_bytes());
        text(&mut texts, self.base.as_bytes());
        text(&mut texts, self.vary.join(",").as_bytes());
        texts.put_u32(self.tags.len() as u32);
        for t in &self.tags {
            text(&mut texts, t.as_bytes());
        }
        texts.put_u32(self.pad);
        texts.put_bytes(0, self.pad as usize);
        let len = FIXED + texts.len() + 4;
        let mut out = BytesMut::with_capacity(len);
        out.put_slice(MAGIC);
        out.put_u16(VERSION);
        out.put_u16(0);
        out.put_u32(len as u32);
        out.put_u64(self.record_len);
        out.put_u32(self.record_crc);
        out.put_u64(self.stored_ms);
        out.put_u64(self.useless_ms);
        out.put_u64(self.vary_until);
        out.put_slice(&texts);
        let crc = crc32fast::hash(&out);
        out.put_u32(crc);
        out.to_vec()
    }

    /// Sets the padding so that a body of `body_len` bytes after a record head of
    /// `head_len` bytes starts at a multiple of 4096 in the file, when it is
    /// [`ALIGN_ABOVE`] bytes or more (none otherwise).
    pub(crate) fn align_body(&mut self, head_len: usize, body_len: u64) {
        self.pad = 0;
        if body_len >= ALIGN_ABOVE {
            let at = self.encode().len() + head_len;
            self.pad = ((PAGE - at % PAGE) % PAGE) as u32;
        }
    }

    /// A header read back; `None` when it is not one version 1 or 2 wrote whole.
    fn decode(raw: &[u8]) -> Option<Header> {
        if raw.len() < FIXED + 4 || &raw[..4] != MAGIC {
            return None;
        }
        let (body, crc) = raw.split_at(raw.len() - 4);
        if crc32fast::hash(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let mut b = &body[4..];
        let version = b.get_u16();
        if !(1..=VERSION).contains(&version) {
            return None;
        }
        let _flags = b.get_u16();
        let _len = b.get_u32();
        let record_len = b.get_u64();
        let record_crc = b.get_u32();
        let stored_ms = b.get_u64();
        let useless_ms = b.get_u64();
        let vary_until = b.get_u64();
        fn text(b: &mut &[u8]) -> Option<String> {
            let n = (b.remaining() >= 4).then(|| b.get_u32())? as usize;
            let t = b.get(..n)?;
            let s = std::str::from_utf8(t).ok()?.to_string();
            b.advance(n);
            Some(s)
        }
        let key = text(&mut b)?;
        let base = text(&mut b)?;
        let vary = text(&mut b)?;
        let count = (b.remaining() >= 4).then(|| b.get_u32())? as usize;
        let mut tags = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            tags.push(text(&mut b)?.into_boxed_str());
        }
        let mut pad = 0;
        if version >= 2 {
            pad = (b.remaining() >= 4).then(|| b.get_u32())?;
            b.advance(b.get(..pad as usize)?.len());
        }
        if b.has_remaining() {
            return None;
        }
        let vary = match vary.as_str() {
            "" => Vec::new(),
            v => v.split(',').map(str::to_string).collect(),
        };
        Some(Header {
            key,
            base,
            vary,
            vary_until,
            stored_ms,
            useless_ms,
            tags,
            record_len,
            record_crc,
            pad,
        })
    }
}

/// Why a file is not served.
#[derive(Debug)]
pub(crate) enum Refused {
    /// It could not be read (gone, permissions...).
    Io(io::Error),
    /// Its header, length or checksum is wrong, or it holds another key.
    Corrupt(&'static str),
}

impl From<io::Error> for Refused {
    fn from(e: io::Error) -> Self {
        Refused::Io(e)
    }
}

/// Bytes read at a time, for the checksum of a file the loader only checks.
const CHUNK: usize = 256 << 10;

/// Opens the file at `path`, reads its header and checks it against the file's length:
/// the file (at the start of its record), its header, and the header's length.
pub(crate) fn open(path: &Path) -> Result<(File, Header, u64), Refused> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut fixed = [0u8; FIXED];
    file.read_exact(&mut fixed)
        .map_err(|_| Refused::Corrupt("shorter than a header"))?;
    let header_len = u32::from_be_bytes(fixed[8..12].try_into().unwrap_or_default()) as usize;
    if !(FIXED + 4..=MAX_HEADER).contains(&header_len) {
        return Err(Refused::Corrupt("header length"));
    }
    let mut raw = fixed.to_vec();
    raw.resize(header_len, 0);
    file.read_exact(&mut raw[FIXED..])
        .map_err(|_| Refused::Corrupt("shorter than its header"))?;
    let header = Header::decode(&raw).ok_or(Refused::Corrupt("header"))?;
    if (header_len as u64).checked_add(header.record_len) != Some(len) {
        return Err(Refused::Corrupt("length"));
    }
    Ok((file, header, header_len as u64))
}

/// The record of `file` ([`open`]ed), read whole and checked against `header`.
pub(crate) fn read_record(file: &mut File, header: &Header) -> Result<Bytes, Refused> {
    let mut record = BytesMut::zeroed(header.record_len as usize);
    file.read_exact(&mut record)
        .map_err(|_| Refused::Corrupt("shorter than its length"))?;
    if crc32fast::hash(&record) != header.record_crc {
        return Err(Refused::Corrupt("checksum"));
    }
    Ok(record.freeze())
}

/// The file at `path` read whole and checked (its key must be `key` when given): its
/// header and record.
#[cfg(test)]
fn read(path: &Path, key: Option<&str>) -> Result<(Header, Bytes), Refused> {
    let (mut file, header, _) = open(path)?;
    if key.is_some_and(|k| k != header.key) {
        return Err(Refused::Corrupt("another key"));
    }
    let record = read_record(&mut file, &header)?;
    Ok((header, record))
}

/// The file at `path` checked (lengths and checksums) without keeping its record: what
/// the loader does with each file. Its header, and its size.
pub(crate) fn check(path: &Path) -> Result<(Header, u64), Refused> {
    let (mut file, header, header_len) = open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK.min(header.record_len as usize).max(1)];
    let mut left = header.record_len;
    while left > 0 {
        let n = (left as usize).min(buf.len());
        file.read_exact(&mut buf[..n])
            .map_err(|_| Refused::Corrupt("shorter than its length"))?;
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    if hasher.finalize() != header.record_crc {
        return Err(Refused::Corrupt("checksum"));
    }
    let size = header_len + header.record_len;
    Ok((header, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            key: "example.com/a\0accept-encoding=gzip\0".into(),
            base: "example.com/a".into(),
            vary: vec!["accept-encoding".into()],
            vary_until: 7,
            stored_ms: 1,
            useless_ms: 2,
            tags: vec!["product-1".into(), "all".into()],
            record_len: 5,
            record_crc: crc32fast::hash(b"hello"),
            pad: 0,
        }
    }

    #[test]
    fn a_large_body_starts_on_a_page() {
        for head_len in [0, 1, 300, 4095, 4096, 9000] {
            let mut h = header();
            h.align_body(head_len, ALIGN_ABOVE);
            let raw = h.encode();
            assert_eq!((raw.len() + head_len) % 4096, 0, "head {head_len}");
            assert_eq!(Header::decode(&raw), Some(h.clone()));
            h.align_body(head_len, ALIGN_ABOVE - 1);
            assert_eq!(h.pad, 0);
        }
    }

    #[test]
    fn a_version_1_header_still_reads() {
        // Version 1 wrote no padding length: the same bytes without it.
        let h = header();
        let mut raw = h.encode();
        raw.truncate(raw.len() - 8);
        raw[4..6].copy_from_slice(&1u16.to_be_bytes());
        let len = (raw.len() + 4) as u32;
        raw[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32fast::hash(&raw);
        raw.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(Header::decode(&raw), Some(h));
    }

    #[test]
    fn a_header_reads_back_as_written() {
        let h = header();
        assert_eq!(Header::decode(&h.encode()), Some(h));
    }

    #[test]
    fn a_changed_byte_of_a_header_is_refused() {
        let raw = header().encode();
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 0x20;
            assert_eq!(Header::decode(&bad), None, "byte {i}");
        }
    }

    #[test]
    fn files_are_truncated_corrupted_and_refused() {
        let dir = std::env::temp_dir().join(format!("tessera-disk-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let mut whole = header().encode();
        whole.extend_from_slice(b"hello");
        std::fs::write(&path, &whole).unwrap();
        assert_eq!(read(&path, Some(&header().key)).unwrap().1, &b"hello"[..]);
        assert_eq!(check(&path).unwrap().1, whole.len() as u64);
        assert!(matches!(
            read(&path, Some("other")),
            Err(Refused::Corrupt(_))
        ));
        std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();
        assert!(matches!(check(&path), Err(Refused::Corrupt("length"))));
        let mut bad = whole.clone();
        *bad.last_mut().unwrap() = b'!';
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(check(&path), Err(Refused::Corrupt("checksum"))));
        assert!(matches!(
            read(&path, None),
            Err(Refused::Corrupt("checksum"))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paths_have_two_levels() {
        let p = path_of(Path::new("/c"), "k");
        let name = name_of("k");
        assert_eq!(name.len(), 32);
        assert_eq!(
            p,
            Path::new("/c")
                .join(&name[31..])
                .join(&name[29..31])
                .join(&name)
        );
    }
}
