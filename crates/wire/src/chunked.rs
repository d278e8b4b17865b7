//! Decoder for the chunked transfer coding (RFC 9112 section 7.1), strict: hex sizes
//! only (no sign, no `0x`, at most 16 digits), CRLF everywhere, chunk extensions held to
//! their grammar (`;name`, `;name=token`, `;name="quoted"`), trailer lines checked for
//! bare CR/LF and control bytes. Extensions and trailers are skipped, never stored.
//!
//! Why the extension grammar: parsers that disagree on where a chunk-size line ends (a
//! bare LF inside an extension, a quoted CRLF, garbage after the size) disagree on where
//! the body ends, which is request smuggling. Anything outside the grammar is refused.

use crate::request::is_tchar;
use crate::Error;

/// What [`ChunkedDecoder::decode`] found in its input.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Body bytes (a slice of the input).
    Data(&'a [u8]),
    /// The input was consumed without finishing; call again with more bytes.
    NeedMore,
    /// The last chunk and the trailer section are complete.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size {
        digits: u8,
    },
    /// Whitespace after the size: only more of it or `;` may follow (RFC 9112 section
    /// 7.1 allows whitespace there only before a chunk extension; strict llhttp refuses
    /// `5 \r\n`, and framing must be what every parser agrees on).
    SizeBws,
    /// Whitespace after an extension: only `;` or CR may follow.
    SizeWs,
    /// After `;`: optional whitespace, then the extension name.
    ExtNameStart,
    ExtName,
    /// After the name: whitespace, `=`, `;` or CR.
    ExtAfterName,
    /// After `=`: optional whitespace, then a token or a quoted string.
    ExtValueStart,
    ExtToken,
    ExtQuoted,
    ExtQuotedPair,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerLineStart,
    /// Inside a trailer field name: tchars up to the colon.
    TrailerName,
    TrailerLine,
    TrailerLf {
        end: bool,
    },
    Done,
}

/// Incremental chunked decoder: feed it whatever bytes arrived; it never buffers.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    /// Bytes of chunk extensions and trailer section seen, to bound them.
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

impl ChunkedDecoder {
    /// `max_trailer_bytes` bounds the trailer section and all chunk extensions together
    /// (use the head size limit): they are metadata nobody needs in bulk, and an endless
    /// extension would otherwise keep a connection busy without ever counting as body.
    pub fn new(max_trailer_bytes: usize) -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            size: 0,
            trailer_bytes: 0,
            max_trailer_bytes,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`. Returns how many bytes were consumed and what was found.
    /// `Data` is returned as soon as some body bytes are available; call again with the
    /// rest of the input.
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Chunk<'a>), Error> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size { digits } => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits == 16 {
                            return Err(Error::BadChunk);
                        }
                        let v = (b as char).to_digit(16).unwrap_or(0) as u64;
                        self.size = (self.size << 4) | v;
                        self.state = State::Size { digits: digits + 1 };
                    }
                    b';' if digits > 0 => self.state = State::ExtNameStart,
                    b' ' | b'\t' if digits > 0 => self.state = State::SizeBws,
                    b'\r' if digits > 0 => self.state = State::SizeLf,
                    _ => return Err(Error::BadChunk),
                },
                State::SizeBws => {
                    self.count_trailer()?;
                    match b {
                        b' ' | b'\t' => {}
                        b';' => self.state = State::ExtNameStart,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::SizeWs | State::ExtAfterName => {
                    self.count_trailer()?;
                    match b {
                        b' ' | b'\t' => {}
                        b';' => self.state = State::ExtNameStart,
                        b'=' if self.state == State::ExtAfterName => {
                            self.state = State::ExtValueStart
                        }
                        b'\r' => self.state = State::SizeLf,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::ExtNameStart => {
                    self.count_trailer()?;
                    match b {
                        b' ' | b'\t' => {}
                        _ if is_tchar(b) => self.state = State::ExtName,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::ExtName => {
                    self.count_trailer()?;
                    match b {
                        _ if is_tchar(b) => {}
                        b' ' | b'\t' => self.state = State::ExtAfterName,
                        b'=' => self.state = State::ExtValueStart,
                        b';' => self.state = State::ExtNameStart,
                        b'\r' => self.state = State::SizeLf,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::ExtValueStart => {
                    self.count_trailer()?;
                    match b {
                        b' ' | b'\t' => {}
                        b'"' => self.state = State::ExtQuoted,
                        _ if is_tchar(b) => self.state = State::ExtToken,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::ExtToken => {
                    self.count_trailer()?;
                    match b {
                        _ if is_tchar(b) => {}
                        b' ' | b'\t' => self.state = State::SizeWs,
                        b';' => self.state = State::ExtNameStart,
                        b'\r' => self.state = State::SizeLf,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::ExtQuoted => {
                    self.count_trailer()?;
                    match b {
                        b'"' => self.state = State::SizeWs,
                        b'\\' => self.state = State::ExtQuotedPair,
                        b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff => {}
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::ExtQuotedPair => {
                    self.count_trailer()?;
                    match b {
                        b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff => self.state = State::ExtQuoted,
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(Error::BadChunk);
                    }
                    self.state = if self.size == 0 {
                        State::TrailerLineStart
                    } else {
                        State::Data
                    };
                }
                State::Data => {
                    let available = (input.len() - i) as u64;
                    let take = available.min(self.size) as usize;
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                    return Ok((i + take, Chunk::Data(&input[i..i + take])));
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(Error::BadChunk);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(Error::BadChunk);
                    }
                    self.state = State::Size { digits: 0 };
                }
                State::TrailerLineStart => {
                    self.count_trailer()?;
                    match b {
                        b'\r' => self.state = State::TrailerLf { end: true },
                        _ if is_tchar(b) => self.state = State::TrailerName,
                        // Whitespace here would be obs-fold; anything else is not a field.
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::TrailerName => {
                    self.count_trailer()?;
                    match b {
                        _ if is_tchar(b) => {}
                        b':' => self.state = State::TrailerLine,
                        // A trailer line that is not `name: value` (a request line, say)
                        // means the sender and we disagree about where the body ends.
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::TrailerLine => {
                    self.count_trailer()?;
                    match b {
                        b'\r' => self.state = State::TrailerLf { end: false },
                        b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                        _ => return Err(Error::BadChunk),
                    }
                }
                State::TrailerLf { end } => {
                    if b != b'\n' {
                        return Err(Error::BadChunk);
                    }
                    if end {
                        self.state = State::Done;
                        return Ok((i + 1, Chunk::Done));
                    }
                    self.state = State::TrailerLineStart;
                }
                State::Done => return Ok((i, Chunk::Done)),
            }
            i += 1;
        }
        if self.state == State::Done {
            return Ok((i, Chunk::Done));
        }
        Ok((i, Chunk::NeedMore))
    }

    /// Counts one byte of extension or trailer against the bound.
    fn count_trailer(&mut self) -> Result<(), Error> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.max_trailer_bytes {
            return Err(Error::BadChunk);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; returns the body and bytes consumed.
    fn decode_all(input: &[u8], step: usize) -> Result<(Vec<u8>, usize), Error> {
        let mut d = ChunkedDecoder::new(1024);
        let mut body = Vec::new();
        let mut pos = 0;
        let mut end = step.min(input.len());
        loop {
            let (n, chunk) = d.decode(&input[pos..end])?;
            pos += n;
            match chunk {
                Chunk::Data(data) => body.extend_from_slice(data),
                Chunk::Done => return Ok((body, pos)),
                Chunk::NeedMore => {
                    if end == input.len() {
                        return Err(Error::BadChunk);
                    }
                    end = (end + step).min(input.len());
                }
            }
        }
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers_in_any_split() {
        let input = b"5;name=\"a;b\"\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for step in 1..input.len() {
            let (body, used) = decode_all(input, step).unwrap();
            assert_eq!(body, b"hello0123456789");
            assert_eq!(&input[used..], b"NEXT");
        }
    }

    #[test]
    fn rejects_bad_sizes() {
        for bad in [
            &b"-5\r\nhello\r\n0\r\n\r\n"[..],
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"5_0\r\n",
            b"11111111111111111\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"0\r\n\n",
            b"0\r\nX: 1\n\r\n",
            b"0\r\nX: 1\r\n folded\r\n\r\n",
            b"0\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
            b"0\r\nX : 1\r\n\r\n",
            b"0\r\n: 1\r\n\r\n",
            b"0\r\nX: \x01\r\n\r\n",
            b"\r\n",
        ] {
            assert!(
                decode_all(bad, bad.len()).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn accepts_extensions_in_their_grammar() {
        for good in [
            &b"5;a\r\nhello\r\n0\r\n\r\n"[..],
            b"5 ; a = b ; c\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"x;y\\\"z\"\r\nhello\r\n0\r\n\r\n",
            b"5\t;x\r\nhello\r\n0;last=1\r\n\r\n",
        ] {
            let (body, used) = decode_all(good, 1).unwrap();
            assert_eq!((body.as_slice(), used), (&b"hello"[..], good.len()));
        }
    }

    #[test]
    fn rejects_extensions_outside_their_grammar() {
        for bad in [
            // Garbage after the size: some parsers read "5 x" as size 5, others refuse.
            &b"5 x\r\nhello\r\n0\r\n\r\n"[..],
            // Whitespace after the size with no extension to follow (llhttp strict refuses).
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"5\t\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n0 \r\n\r\n",
            b"5;\r\nhello\r\n0\r\n\r\n",
            b"5;=x\r\nhello\r\n0\r\n\r\n",
            b"5;a=\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"unterminated\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"x\"y\r\nhello\r\n0\r\n\r\n",
            b"5;a\nhello\r\n0\r\n\r\n",
            b"5;a=b\rhello\r\n0\r\n\r\n",
            b"5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n",
            b"5;a@b\r\nhello\r\n0\r\n\r\n",
        ] {
            assert_eq!(
                decode_all(bad, bad.len()),
                Err(Error::BadChunk),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn bounds_chunk_extensions() {
        let mut input = b"1;x=".to_vec();
        input.extend_from_slice(&[b'a'; 2000]);
        input.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
        assert_eq!(decode_all(&input, 7), Err(Error::BadChunk));
    }

    #[test]
    fn bounds_the_trailer_section() {
        let mut input = b"0\r\n".to_vec();
        for _ in 0..200 {
            input.extend_from_slice(b"X-Long: aaaaaaaaaa\r\n");
        }
        input.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&input, input.len()), Err(Error::BadChunk));
    }
}
