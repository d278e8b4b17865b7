//! Incremental HTTP/1.1 response framing: heads with `httparse`, bodies by
//! Content-Length, chunked coding or connection close. Body bytes are skipped,
//! never copied, and nothing is allocated per response.

/// Most response heads carry far fewer headers; a head with more is refused.
const MAX_HEADERS: usize = 64;

/// Why a response could not be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadResponse {
    /// The head did not parse as HTTP/1.x.
    Head,
    /// Content-Length was not a number, or appeared twice with different values.
    ContentLength,
    /// A chunk size line was malformed.
    Chunk,
}

/// A response that has been read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Complete {
    pub status: u16,
    /// The server will close the connection after this response.
    pub close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body { remaining: u64 },
    Chunked(Chunk),
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size {
        value: u64,
        digits: u8,
    },
    Extension {
        value: u64,
    },
    SizeLf {
        value: u64,
    },
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    /// Trailer section; counts the bytes of the current line (CR excluded).
    Trailer {
        line: u32,
    },
}

/// Frames one response after another on a connection.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    state: State,
    status: u16,
    close: bool,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseParser {
    pub fn new() -> Self {
        ResponseParser {
            state: State::Head,
            status: 0,
            close: false,
        }
    }

    /// Start over, e.g. on a new connection.
    pub fn reset(&mut self) {
        self.state = State::Head;
    }

    /// True while nothing of the current response has been consumed.
    pub fn at_head(&self) -> bool {
        self.state == State::Head
    }

    /// Feed bytes. Returns how many were consumed and, when a response ended,
    /// its status. `head_request` says the request was HEAD (no body follows).
    /// When the head is incomplete nothing is consumed: the caller keeps the bytes
    /// and calls again with more.
    pub fn feed(
        &mut self,
        data: &[u8],
        head_request: bool,
    ) -> Result<(usize, Option<Complete>), BadResponse> {
        let mut used = 0;
        loop {
            match self.state {
                State::Head => {
                    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let mut response = httparse::Response::new(&mut headers);
                    let n = match response.parse(&data[used..]) {
                        Ok(httparse::Status::Complete(n)) => n,
                        Ok(httparse::Status::Partial) => return Ok((used, None)),
                        Err(_) => return Err(BadResponse::Head),
                    };
                    used += n;
                    let status = response.code.unwrap_or(0);
                    if (100..200).contains(&status) && status != 101 {
                        // Interim response (100 Continue, 103 Early Hints): the real one follows.
                        continue;
                    }
                    let http10 = response.version == Some(0);
                    let mut length: Option<u64> = None;
                    let mut chunked = false;
                    let mut close = http10;
                    for h in response.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let v = parse_decimal(h.value).ok_or(BadResponse::ContentLength)?;
                            if length.is_some_and(|l| l != v) {
                                return Err(BadResponse::ContentLength);
                            }
                            length = Some(v);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = last_token_is(h.value, b"chunked");
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            if has_token(h.value, b"close") {
                                close = true;
                            } else if has_token(h.value, b"keep-alive") {
                                close = false;
                            }
                        }
                    }
                    self.status = status;
                    self.close = close;
                    let bodiless = head_request || status == 204 || status == 304 || status == 101;
                    self.state = if bodiless {
                        State::Body { remaining: 0 }
                    } else if chunked {
                        State::Chunked(Chunk::Size {
                            value: 0,
                            digits: 0,
                        })
                    } else if let Some(l) = length {
                        State::Body { remaining: l }
                    } else {
                        State::UntilClose
                    };
                }
                State::Body { remaining } => {
                    let take = remaining.min((data.len() - used) as u64);
                    used += take as usize;
                    if take == remaining {
                        return Ok((used, Some(self.finish())));
                    }
                    self.state = State::Body {
                        remaining: remaining - take,
                    };
                    return Ok((used, None));
                }
                State::Chunked(_) => {
                    let (n, done) = self.feed_chunked(&data[used..])?;
                    used += n;
                    if done {
                        return Ok((used, Some(self.finish())));
                    }
                    return Ok((used, None));
                }
                State::UntilClose => return Ok((data.len(), None)),
            }
        }
    }

    /// The connection reached end of file. Returns the response it completed,
    /// if the body was delimited by the close.
    pub fn eof(&mut self) -> Option<Complete> {
        if self.state == State::UntilClose {
            self.close = true;
            Some(self.finish())
        } else {
            None
        }
    }

    fn finish(&mut self) -> Complete {
        self.state = State::Head;
        Complete {
            status: self.status,
            close: self.close,
        }
    }

    fn feed_chunked(&mut self, data: &[u8]) -> Result<(usize, bool), BadResponse> {
        let State::Chunked(mut chunk) = self.state else {
            unreachable!("feed_chunked outside chunked state")
        };
        let mut i = 0;
        let mut done = false;
        while i < data.len() {
            let b = data[i];
            chunk = match chunk {
                Chunk::Data { remaining } => {
                    let take = remaining.min((data.len() - i) as u64);
                    i += take as usize;
                    if take == remaining {
                        Chunk::DataCr
                    } else {
                        Chunk::Data {
                            remaining: remaining - take,
                        }
                    }
                }
                Chunk::Size { value, digits } => {
                    i += 1;
                    match b {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            if digits >= 15 {
                                return Err(BadResponse::Chunk);
                            }
                            let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                            Chunk::Size {
                                value: value * 16 + d,
                                digits: digits + 1,
                            }
                        }
                        _ if digits == 0 => return Err(BadResponse::Chunk),
                        b';' | b' ' | b'\t' => Chunk::Extension { value },
                        b'\r' => Chunk::SizeLf { value },
                        b'\n' => after_size(value),
                        _ => return Err(BadResponse::Chunk),
                    }
                }
                Chunk::Extension { value } => {
                    i += 1;
                    if b == b'\n' {
                        after_size(value)
                    } else {
                        Chunk::Extension { value }
                    }
                }
                Chunk::SizeLf { value } => {
                    i += 1;
                    if b != b'\n' {
                        return Err(BadResponse::Chunk);
                    }
                    after_size(value)
                }
                Chunk::DataCr => {
                    i += 1;
                    match b {
                        b'\r' => Chunk::DataLf,
                        b'\n' => Chunk::Size {
                            value: 0,
                            digits: 0,
                        },
                        _ => return Err(BadResponse::Chunk),
                    }
                }
                Chunk::DataLf => {
                    i += 1;
                    if b != b'\n' {
                        return Err(BadResponse::Chunk);
                    }
                    Chunk::Size {
                        value: 0,
                        digits: 0,
                    }
                }
                Chunk::Trailer { line } => {
                    i += 1;
                    match b {
                        b'\n' if line == 0 => {
                            done = true;
                            break;
                        }
                        b'\n' => Chunk::Trailer { line: 0 },
                        b'\r' => Chunk::Trailer { line },
                        _ => Chunk::Trailer {
                            line: line.saturating_add(1),
                        },
                    }
                }
            };
        }
        self.state = State::Chunked(chunk);
        Ok((i, done))
    }
}

fn after_size(value: u64) -> Chunk {
    if value == 0 {
        Chunk::Trailer { line: 0 }
    } else {
        Chunk::Data { remaining: value }
    }
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as u64;
    }
    Some(n)
}

fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

fn last_token_is(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .next_back()
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `data` in pieces of `step` bytes the way the engine does (unconsumed
    /// bytes are kept and offered again) and returns the statuses completed.
    fn run(data: &[u8], step: usize, head: bool) -> Result<Vec<u16>, BadResponse> {
        let mut p = ResponseParser::new();
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for piece in data.chunks(step) {
            pending.extend_from_slice(piece);
            loop {
                let (n, done) = p.feed(&pending, head)?;
                pending.drain(..n);
                match done {
                    Some(c) => out.push(c.status),
                    None => break,
                }
            }
        }
        if let Some(c) = p.eof() {
            out.push(c.status);
        }
        Ok(out)
    }

    #[test]
    fn content_length_and_pipelined_in_any_split() {
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
        for step in 1..two.len() {
            assert_eq!(
                run(two, step, false).unwrap(),
                vec![200, 404],
                "step {step}"
            );
        }
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nz";
        for step in 1..r.len() {
            assert_eq!(run(r, step, false).unwrap(), vec![200, 201], "step {step}");
        }
    }

    #[test]
    fn body_until_close_and_bodiless_statuses() {
        let r = b"HTTP/1.0 200 OK\r\n\r\nanything at all";
        assert_eq!(run(r, 4, false).unwrap(), vec![200]);
        let r = b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(run(r, 3, false).unwrap(), vec![204, 304]);
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(run(r, 7, true).unwrap(), vec![200]);
    }

    #[test]
    fn interim_responses_are_skipped() {
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(run(r, 5, false).unwrap(), vec![200]);
    }

    #[test]
    fn close_is_reported() {
        let mut p = ResponseParser::new();
        let (_, c) = p
            .feed(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                false,
            )
            .unwrap();
        assert!(c.unwrap().close);
        let (_, c) = p
            .feed(
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
                false,
            )
            .unwrap();
        assert!(!c.unwrap().close);
    }

    #[test]
    fn rejects_garbage_and_bad_framing() {
        assert_eq!(run(b"garbage\r\n\r\n", 100, false), Err(BadResponse::Head));
        assert_eq!(
            run(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 100, false),
            Err(BadResponse::ContentLength)
        );
        assert_eq!(
            run(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                100,
                false
            ),
            Err(BadResponse::ContentLength)
        );
        assert_eq!(
            run(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                100,
                false
            ),
            Err(BadResponse::Chunk)
        );
    }
}
