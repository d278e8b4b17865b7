//! Decoder for the chunked transfer coding (RFC 9112 section 7.1), strict: hex sizes
//! only (no sign, no `0x`, at most 16 digits), CRLF everywhere, extensions and trailers
//! skipped but checked for bare CR/LF and control bytes.

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
    Size { digits: u8 },
    Extension { quoted: bool, escaped: bool },
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerLineStart,
    TrailerLine,
    TrailerLf { end: bool },
    Done,
}

/// Incremental chunked decoder: feed it whatever bytes arrived; it never buffers.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    /// Bytes of trailer section seen, to bound it.
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

impl ChunkedDecoder {
    /// `max_trailer_bytes` bounds the trailer section (use the head size limit).
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
                    b';' | b' ' | b'\t' if digits > 0 => {
                        self.state = State::Extension {
                            quoted: false,
                            escaped: false,
                        }
                    }
                    b'\r' if digits > 0 => self.state = State::SizeLf,
                    _ => return Err(Error::BadChunk),
                },
                State::Extension { quoted, escaped } => match b {
                    b'\r' if !quoted => self.state = State::SizeLf,
                    b'\r' | b'\n' | 0 => return Err(Error::BadChunk),
                    b'"' if !escaped => {
                        self.state = State::Extension {
                            quoted: !quoted,
                            escaped: false,
                        }
                    }
                    b'\\' if quoted && !escaped => {
                        self.state = State::Extension {
                            quoted,
                            escaped: true,
                        }
                    }
                    0x01..=0x08 | 0x0a..=0x1f | 0x7f => return Err(Error::BadChunk),
                    _ => {
                        self.state = State::Extension {
                            quoted,
                            escaped: false,
                        }
                    }
                },
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
                        b'\n' | 0 | b' ' | b'\t' => return Err(Error::BadChunk),
                        _ => self.state = State::TrailerLine,
                    }
                }
                State::TrailerLine => {
                    self.count_trailer()?;
                    match b {
                        b'\r' => self.state = State::TrailerLf { end: false },
                        b'\n' | 0 => return Err(Error::BadChunk),
                        _ => {}
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
    fn bounds_the_trailer_section() {
        let mut input = b"0\r\n".to_vec();
        for _ in 0..200 {
            input.extend_from_slice(b"X-Long: aaaaaaaaaa\r\n");
        }
        input.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&input, input.len()), Err(Error::BadChunk));
    }
}
