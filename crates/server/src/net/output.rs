//! The responses of one batch, gathered so they go out with as few system calls as
//! possible: heads and small bodies in one `writev`, large bodies with `sendfile(2)`.
//! Writes are attempted without waiting; only when the socket is full does the
//! connection wait for writability (and only then counts as "writing" for timeouts).

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use crate::net::reactor::Socket;
use crate::sys;
use tokio::io::Interest;

use crate::files::open::{EntryFields, FileEntry};

/// Most iovecs handed to one writev; a batch of 100 pipelined responses needs 200 (head
/// and body each), so they go out in a few calls. Kept on the stack of a synchronous
/// function, never in a connection's future.
const MAX_IOVECS: usize = 64;

/// Most segments queued before the batch is flushed (fixed, so it never reallocates).
const MAX_SEGMENTS: usize = 128;

/// Most segments one response adds: a multipart/byteranges response has a head and a
/// body segment per range, then the closing boundary. The segment list has room for this
/// beyond `MAX_SEGMENTS`, so a response started on an almost-full batch still fits.
const MAX_SEGMENTS_PER_RESPONSE: usize = 2 * wire::range::MAX_RANGES + 2;

enum Segment {
    /// Bytes `start..end` of `Output::buf` (response heads, small generated bodies).
    Buf { start: usize, end: usize },
    /// Bytes `start..end` of the in-memory body of a cached file, written without copying.
    Memory {
        entry: Arc<FileEntry>,
        start: usize,
        end: usize,
    },
    /// `len` bytes of the file from `offset`, sent with sendfile.
    File {
        entry: Arc<FileEntry>,
        offset: u64,
        len: u64,
    },
}

/// Responses waiting to be written. Allocated once per buffer set and reused, so the
/// steady state does not allocate: the batch is flushed before it could outgrow them.
pub(crate) struct Output {
    buf: Vec<u8>,
    segments: Vec<Segment>,
    /// Where the bytes in `buf` not yet covered by a segment start.
    pending_from: usize,
    /// Write progress: the segment being written and how much of it has gone out.
    index: usize,
    skip: u64,
    /// Room kept free in `buf` for one more response head.
    reserve: usize,
    /// Bytes queued outside `buf` (in-memory and file bodies), for access logs.
    outside: u64,
    /// The connection closes once this batch is out ([`Output::close_after`]).
    closing: bool,
    /// For HTTP/2: the head of the response being made, as fields (`reply::HeadWriter`
    /// writes there instead of into `buf`); its body still goes into the batch.
    fields: Option<FieldsHead>,
    /// The response edits to apply to the next head `reply::HeadWriter` writes as HTTP/1
    /// lines, as they are written: the site and route whose `rules::LinePlan` they are
    /// (set by `exchange` around a static response), and whether a head took them.
    pub(crate) edits: Option<(usize, Option<usize>)>,
    pub(crate) edited: bool,
}

/// A head written as fields (HTTP/2): the fields the server wrote, with an open file's
/// fields shared with its cache entry in their place among them, not copied.
pub(crate) struct FieldsHead {
    pub(crate) head: handler::ResponseHead,
    /// The file's fields, and how many of `head`'s come before them.
    block: Option<(EntryFields, usize)>,
}

impl FieldsHead {
    pub(crate) fn new(head: handler::ResponseHead) -> FieldsHead {
        FieldsHead { head, block: None }
    }

    pub(crate) fn status(&self) -> u16 {
        self.head.status()
    }

    /// Starts again with `status` and no field.
    pub(crate) fn reset(&mut self, status: u16) {
        self.head.reset(status);
        self.block = None;
    }

    pub(crate) fn append(&mut self, name: &[u8], value: &[u8]) {
        self.head.append(name, value);
    }

    /// Places a file's fields after those appended so far (one block per head).
    pub(crate) fn set_block(&mut self, block: EntryFields) {
        debug_assert!(self.block.is_none(), "one block per head");
        self.block = Some((block, self.head.len()));
    }

    /// Every field in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let before = self.block.as_ref().map_or(usize::MAX, |(_, at)| *at);
        let block = self.block.iter().flat_map(|(block, _)| block.iter());
        let fields = || self.head.iter();
        fields()
            .take(before)
            .chain(block)
            .chain(fields().skip(before))
    }

    /// The fields as one [`handler::ResponseHead`], the file's copied in: for a filter,
    /// which may change any of them.
    pub(crate) fn head_mut(&mut self) -> &mut handler::ResponseHead {
        if self.block.is_some() {
            let mut merged = handler::ResponseHead::with_capacity(self.status(), 12, 320);
            for (name, value) in self.iter() {
                merged.append(name, value);
            }
            self.head = merged;
            self.block = None;
        }
        &mut self.head
    }

    /// The head as HTTP/1 lines (status line, fields, blank line): for the access log.
    pub(crate) fn write_lines(&self, buf: &mut Vec<u8>) {
        wire::write_status_line(buf, self.status());
        let before = self.block.as_ref().map_or(usize::MAX, |(_, at)| *at);
        for (name, value) in self.head.iter().take(before) {
            wire::write_field(buf, name, value);
        }
        if let Some((block, _)) = &self.block {
            buf.extend_from_slice(block.lines());
        }
        for (name, value) in self.head.iter().skip(before) {
            wire::write_field(buf, name, value);
        }
        buf.extend_from_slice(b"\r\n");
    }

    /// The length of [`FieldsHead::write_lines`] without writing them: what the metrics
    /// count for a head.
    pub(crate) fn lines_len(&self) -> u64 {
        let status_line = "HTTP/1.1 200 \r\n".len() + wire::reason(self.status()).len();
        let fields: usize = self.head.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let block = self
            .block
            .as_ref()
            .map_or(0, |(block, _)| block.lines().len());
        (status_line + fields + block + 2) as u64
    }
}

/// Where the output stood before a response was added (see [`Output::since`]).
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    buf: usize,
    outside: u64,
    segments: usize,
}

/// A part of a response body taken out of the batch ([`Output::take_pieces`]).
pub(crate) enum Piece {
    Bytes(bytes::Bytes),
    /// Bytes `start..end` of a file the file cache holds in memory: shared, not copied.
    Memory {
        entry: Arc<FileEntry>,
        start: usize,
        end: usize,
    },
    /// `len` bytes of the file from `offset`.
    File {
        entry: Arc<FileEntry>,
        offset: u64,
        len: u64,
    },
}

impl Piece {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::Memory { start, end, .. } => (end - start) as u64,
            Piece::File { len, .. } => *len,
        }
    }

    /// The bytes it holds of its own, which count against a stream's send buffer (a
    /// file's bytes, in the file cache or on disk, do not).
    pub(crate) fn queued(&self) -> usize {
        match self {
            Piece::Bytes(b) => b.len(),
            Piece::Memory { .. } | Piece::File { .. } => 0,
        }
    }
}

/// What one write attempt achieved.
pub(crate) enum Progress {
    /// Everything went out; the output is empty again.
    Done,
    /// The socket is full; wait for writability and call again.
    Blocked { wrote: bool },
}

impl Output {
    /// `reserve` is the largest response head the server can generate (it echoes the
    /// request target in redirects, so it depends on `max_uri_length`).
    pub fn new(reserve: usize) -> Self {
        Output {
            buf: Vec::with_capacity((2 * reserve).max(16 * 1024)),
            segments: Vec::with_capacity(MAX_SEGMENTS + MAX_SEGMENTS_PER_RESPONSE),
            pending_from: 0,
            index: 0,
            skip: 0,
            reserve,
            outside: 0,
            closing: false,
            fields: None,
            edits: None,
            edited: false,
        }
    }

    /// From now on, heads go into `head` as fields (HTTP/2), until [`Output::take_fields`].
    pub(crate) fn want_fields(&mut self, head: handler::ResponseHead) {
        self.fields = Some(FieldsHead::new(head));
    }

    /// The fields head, when heads go there.
    pub(crate) fn fields(&self) -> Option<&FieldsHead> {
        self.fields.as_ref()
    }

    pub(crate) fn fields_mut(&mut self) -> Option<&mut FieldsHead> {
        self.fields.as_mut()
    }

    pub(crate) fn take_fields(&mut self) -> Option<FieldsHead> {
        self.fields.take()
    }

    /// Body bytes added since `mark` (in the buffer and outside it), for a response whose
    /// head went into the fields head.
    pub(crate) fn added_since(&self, mark: Mark) -> u64 {
        (self.buf.len() - mark.buf) as u64 + (self.outside - mark.outside)
    }

    pub fn mark(&self) -> Mark {
        Mark {
            buf: self.buf.len(),
            outside: self.outside,
            segments: self.segments.len(),
        }
    }

    /// Takes back the response added since `mark`, when it lies in the buffer alone (a
    /// head and a small body: the server's own error pages); `false` when it cannot.
    pub(crate) fn rewind(&mut self, mark: Mark) -> bool {
        if self.segments.len() != mark.segments || self.pending_from > mark.buf {
            return false;
        }
        self.buf.truncate(mark.buf);
        if let Some(head) = &mut self.fields {
            head.reset(0);
        }
        true
    }

    /// The response added since `mark`: its status, head, and body length.
    pub fn since(&self, mark: Mark) -> (u16, &[u8], u64) {
        let added = &self.buf[mark.buf..];
        // Skip an interim 100 Continue written before the final response.
        let start = if added.starts_with(b"HTTP/1.1 100 ") {
            head_len(added).unwrap_or(0)
        } else {
            0
        };
        let (status, head, body) = split_response(&added[start..]);
        (status, head, body + (self.outside - mark.outside))
    }

    /// The head of the response added since `mark` (after an interim 100 Continue), for
    /// a script's `header_filter`.
    pub fn head_since(&self, mark: Mark) -> (usize, &[u8]) {
        let added = &self.buf[mark.buf..];
        let start = if added.starts_with(b"HTTP/1.1 100 ") {
            head_len(added).unwrap_or(0)
        } else {
            0
        };
        let len = head_len(&added[start..]).unwrap_or(added.len() - start);
        (mark.buf + start, &added[start..start + len])
    }

    /// Replaces `old_len` bytes of head at `at` (from [`Output::head_since`]) with
    /// `head`, keeping the queued segments' places in `buf` right.
    pub fn replace_head(&mut self, at: usize, old_len: usize, head: &[u8]) {
        let end = at + old_len;
        self.buf.splice(at..end, head.iter().copied());
        let delta = head.len() as isize - old_len as isize;
        let shift = |x: &mut usize| *x = (*x as isize + delta) as usize;
        for segment in &mut self.segments {
            if let Segment::Buf { start, end: e } = segment {
                if *start >= end {
                    shift(start);
                    shift(e);
                } else if *e >= end {
                    shift(e);
                }
            }
        }
        if self.pending_from >= end {
            shift(&mut self.pending_from);
        }
    }

    /// The buffer to append response heads and small bodies to.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.segments.is_empty()
    }

    /// Whether `len` more bytes fit the batch's buffer without growing it.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.buf.len() + len <= self.buf.capacity() && self.segments.len() + 3 <= MAX_SEGMENTS
    }

    /// Whether the batch must be flushed before another response is added.
    pub fn is_full(&self) -> bool {
        self.buf.len() + self.reserve > self.buf.capacity()
            || self.segments.len() + 3 > MAX_SEGMENTS
    }

    fn close_buf_segment(&mut self) {
        if self.buf.len() > self.pending_from {
            self.segments.push(Segment::Buf {
                start: self.pending_from,
                end: self.buf.len(),
            });
            self.pending_from = self.buf.len();
        }
    }

    /// Bytes `start..end` of `entry`'s in-memory body.
    pub fn push_memory(&mut self, entry: Arc<FileEntry>, start: usize, end: usize) {
        self.close_buf_segment();
        self.outside += (end - start) as u64;
        self.segments.push(Segment::Memory { entry, start, end });
    }

    pub fn push_file(&mut self, entry: Arc<FileEntry>, offset: u64, len: u64) {
        self.close_buf_segment();
        self.outside += len;
        self.segments.push(Segment::File { entry, offset, len });
    }

    /// Says that the connection closes right after this batch: its writes then hold
    /// back a last part smaller than a segment, which leaves with the FIN that the
    /// close (or a lingering close's shutdown) sends, in one packet instead of two;
    /// nginx's `tcp_nopush` gets the same from TCP_CORK before its last response. On
    /// loopback a packet costs the server's core both its sending and its receiving
    /// side, so a connection per request costs one packet's work less.
    pub(crate) fn close_after(&mut self) {
        self.closing = true;
    }

    pub(crate) fn clear(&mut self) {
        self.closing = false;
        self.buf.clear();
        self.segments.clear();
        self.pending_from = 0;
        self.index = 0;
        self.skip = 0;
        self.outside = 0;
        // A buffer set lent to an HTTP/1 connection next must write lines.
        self.fields = None;
    }

    /// Writes as much as the socket takes without waiting.
    pub fn try_write(&mut self, stream: &Socket) -> io::Result<Progress> {
        self.close_buf_segment();
        let mut wrote = false;
        while self.index < self.segments.len() {
            let written = match &self.segments[self.index] {
                Segment::File { entry, offset, len } => send_file(
                    stream,
                    entry.file.as_raw_fd(),
                    offset + self.skip,
                    len - self.skip,
                ),
                _ => self.write_memory_segments(stream),
            };
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    wrote = true;
                    self.advance(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(Progress::Blocked { wrote });
                }
                Err(e) => {
                    self.clear();
                    return Err(e);
                }
            }
        }
        self.clear();
        Ok(Progress::Done)
    }

    /// One writev of the memory segments starting at `index` (up to a file segment).
    fn write_memory_segments(&self, stream: &Socket) -> io::Result<usize> {
        let mut iovecs = [IoSlice::new(&[]); MAX_IOVECS];
        let mut count = 0;
        let mut file_follows = false;
        for segment in &self.segments[self.index..] {
            let bytes: &[u8] = match segment {
                Segment::Buf { start, end } => &self.buf[*start..*end],
                Segment::Memory { entry, start, end } => &entry.body()[*start..*end],
                Segment::File { .. } => {
                    file_follows = true;
                    break;
                }
            };
            let skip = if count == 0 { self.skip as usize } else { 0 };
            iovecs[count] = IoSlice::new(&bytes[skip..]);
            count += 1;
            if count == MAX_IOVECS {
                break;
            }
        }
        if !file_follows && !self.closing {
            return write_joined(stream, &iovecs[..count]);
        }
        // A response head followed by a sendfile body: MSG_MORE holds the head back so it
        // leaves in the same packets as the start of the body instead of as a small
        // packet of its own (what nginx's tcp_nopush does with TCP_CORK). The last
        // batch of a closing connection: the same, until the close sends it with the
        // FIN (`close_after`).
        let socket = stream.as_raw_fd();
        stream.try_io(Interest::WRITABLE, || {
            sys::sendmsg(
                socket,
                &iovecs[..count],
                libc::MSG_MORE | libc::MSG_NOSIGNAL,
            )
        })
    }

    /// The response queued (one, from the start of the batch), without its first `skip`
    /// bytes (its head), as owned pieces, and the batch emptied: for HTTP/2, which
    /// frames the body itself and may send it long after the buffers are lent to
    /// another stream. Bytes written into the batch are copied; a file the cache holds
    /// in memory is shared, not copied, unless it follows bytes (a multipart part head,
    /// joined with its part into one copy); file ranges stay ranges, read as they are
    /// sent.
    pub(crate) fn take_pieces(&mut self, mut skip: usize) -> Vec<Piece> {
        self.close_buf_segment();
        let mut pieces = Vec::new();
        for segment in &self.segments {
            let bytes: &[u8] = match segment {
                Segment::Buf { start, end } => &self.buf[*start..*end],
                // Shared unless it joins bytes before it (below).
                Segment::Memory { entry, start, end }
                    if skip == 0 && !matches!(pieces.last(), Some(Piece::Bytes(_))) =>
                {
                    if end > start {
                        pieces.push(Piece::Memory {
                            entry: entry.clone(),
                            start: *start,
                            end: *end,
                        });
                    }
                    continue;
                }
                Segment::Memory { entry, start, end } => &entry.body()[*start..*end],
                Segment::File { entry, offset, len } => {
                    debug_assert_eq!(skip, 0, "a file segment inside a head");
                    pieces.push(Piece::File {
                        entry: entry.clone(),
                        offset: *offset,
                        len: *len,
                    });
                    continue;
                }
            };
            let cut = skip.min(bytes.len());
            skip -= cut;
            if bytes.len() > cut {
                match pieces.last_mut() {
                    // Adjacent bytes (a part head and its body in a multipart/byteranges
                    // response) go out as one DATA frame.
                    Some(Piece::Bytes(last)) => {
                        let mut joined = bytes::BytesMut::from(&last[..]);
                        joined.extend_from_slice(&bytes[cut..]);
                        *last = joined.freeze();
                    }
                    _ => pieces.push(Piece::Bytes(bytes::Bytes::copy_from_slice(&bytes[cut..]))),
                }
            }
        }
        self.clear();
        pieces
    }

    /// Whether everything queued has been taken (written, or copied out and taken).
    pub(crate) fn is_taken(&mut self) -> bool {
        self.close_buf_segment();
        self.index >= self.segments.len()
    }

    /// Copies what is left to write, from where writing stands, into `to` (file bodies
    /// read with pread(2)), without moving on: [`Output::advance`] does once the bytes
    /// are taken. For TLS, which encrypts in memory what sendfile would have sent.
    pub(crate) fn copy_out(&mut self, to: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        self.close_buf_segment();
        let mut n = 0;
        let mut skip = self.skip;
        for segment in &self.segments[self.index..] {
            let room = &mut to[n..];
            if room.is_empty() {
                break;
            }
            let (got, whole) = match segment {
                Segment::Buf { start, end } => copy(&self.buf[start + skip as usize..*end], room),
                Segment::Memory { entry, start, end } => {
                    copy(&entry.body()[start + skip as usize..*end], room)
                }
                Segment::File { entry, offset, len } => {
                    let want = (len - skip).min(room.len() as u64) as usize;
                    let got = entry.file.read_at(&mut room[..want], offset + skip)?;
                    if got == 0 && want > 0 {
                        // The file shrank under us: its length is already promised.
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    (got, got as u64 == len - skip)
                }
            };
            n += got;
            skip = 0;
            if !whole {
                break;
            }
        }
        Ok(n)
    }

    pub(crate) fn advance(&mut self, mut written: u64) {
        while written > 0 && self.index < self.segments.len() {
            let len = match &self.segments[self.index] {
                Segment::Buf { start, end } => (end - start) as u64,
                Segment::Memory { start, end, .. } => (end - start) as u64,
                Segment::File { len, .. } => *len,
            } - self.skip;
            if written >= len {
                written -= len;
                self.index += 1;
                self.skip = 0;
            } else {
                self.skip += written;
                written = 0;
            }
        }
        // Zero-length segments (an empty in-memory body) need no write.
        while let Some(Segment::Memory { start, end, .. }) = self.segments.get(self.index) {
            if start != end {
                break;
            }
            self.index += 1;
        }
    }
}

/// Copies what fits of `from` into `to`: (bytes copied, whether that was all of it).
fn copy(from: &[u8], to: &mut [u8]) -> (usize, bool) {
    let n = from.len().min(to.len());
    to[..n].copy_from_slice(&from[..n]);
    (n, n == from.len())
}

/// Bytes joined by a send(2) costs less than by a writev(2): writev goes through the VFS
/// layer (`vfs_writev`, `rw_verify_area`, the iovec import) on top of the socket's own
/// work. Measured here with a C loop over a loopback TCP connection, 150 + 12 bytes a
/// call: writev of two buffers 1.0 us, send of the same 162 bytes 0.72 us, with the copy
/// into one buffer 0.78-0.9 us. A static 12-byte response costs about 5.8 us of CPU in
/// all, so small batches are copied into one buffer on the stack and sent.
const JOIN_AT_MOST: usize = 2048;

fn write_joined(stream: &Socket, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    if let [one] = bufs {
        return stream.try_write(one);
    }
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total > JOIN_AT_MOST {
        return stream.try_write_vectored(bufs);
    }
    let mut joined = [0u8; JOIN_AT_MOST];
    let mut at = 0;
    for b in bufs {
        joined[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
    stream.try_write(&joined[..total])
}

/// One sendfile(2) of up to `len` bytes from `offset` on the non-blocking socket. When
/// the socket buffer is full it returns WouldBlock and the connection waits for
/// writability, resuming at the saved offset: a slow reader holds only its own
/// connection, never the worker (nginx's ngx_linux_sendfile_chain, the Yaws sendfile
/// driver). A return of 0 means the file shrank under us. Static files (`Segment::File`)
/// and the cache's disk objects (`http1::later`) go out through it.
pub(crate) fn send_file(
    stream: &Socket,
    file: std::os::fd::RawFd,
    offset: u64,
    len: u64,
) -> io::Result<usize> {
    let socket = stream.as_raw_fd();
    let mut offset = offset as libc::off_t;
    // Linux moves at most 0x7ffff000 bytes per call.
    let chunk = len.min(0x7fff_f000) as usize;
    stream.try_io(Interest::WRITABLE, || {
        sys::sendfile(socket, file, &mut offset, chunk)
    })
}

/// The length of the head at the start of `bytes`, its blank line included. The
/// searcher is built once: `memmem::find` builds one on every call, which cost 2.7% of
/// an HTTP/2 worker's time for a small file (perf).
fn head_len(bytes: &[u8]) -> Option<usize> {
    static BLANK_LINE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));
    BLANK_LINE.find(bytes).map(|i| i + 4)
}

/// A response as written into a buffer: its status, its head, and the length of the
/// body that follows the head in the same buffer.
pub(crate) fn split_response(response: &[u8]) -> (u16, &[u8], u64) {
    let head_len = head_len(response).unwrap_or(response.len());
    let status = match response.get(9..12) {
        Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => 0,
    };
    (
        status,
        &response[..head_len],
        (response.len() - head_len) as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_found_up_to_its_blank_line_whatever_follows() {
        for (written, head) in [
            (
                &b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n"[..],
                &b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n"[..],
            ),
            (
                b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody\r\n\r\nmore",
                b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n",
            ),
            // No blank line (never, for heads written here): all of it.
            (b"HTTP/1.1 200 OK\r\nA: b", b"HTTP/1.1 200 OK\r\nA: b"),
            (
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\n\r\nx",
                b"HTTP/1.1 404 Not Found\r\n\r\n",
            ),
        ] {
            let mut out = Output::new(0);
            out.buf().extend_from_slice(b"before");
            let mark = out.mark();
            out.buf().extend_from_slice(written);
            let (at, found) = out.head_since(mark);
            assert_eq!(found, head, "{:?}", String::from_utf8_lossy(written));
            assert_eq!(&out.buf[at..at + found.len()], head);
            let (_, since_head, body) = out.since(mark);
            assert_eq!(since_head, head);
            assert_eq!(body as usize, written.len() - (at - 6) - head.len());
        }
    }
}
