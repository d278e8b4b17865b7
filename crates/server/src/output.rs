//! The responses of one batch, gathered so they go out with as few system calls as
//! possible: heads and small bodies in one `writev`, large bodies with `sendfile(2)`.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::rc::Rc;

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::files::FileEntry;

/// Most iovecs handed to one writev; a batch of 100 pipelined responses needs 200 (head
/// and body each), so they go out in a few calls. Kept on the stack.
const MAX_IOVECS: usize = 64;

enum Segment {
    /// Bytes `start..end` of `Output::buf` (response heads, small generated bodies).
    Buf { start: usize, end: usize },
    /// The whole in-memory body of a cached file, written without copying.
    Memory(Rc<FileEntry>),
    /// `len` bytes of the file from `offset`, sent with sendfile.
    File {
        entry: Rc<FileEntry>,
        offset: u64,
        len: u64,
    },
}

/// Responses waiting to be written. The buffers keep their capacity between batches, so
/// the steady state does not allocate.
pub(crate) struct Output {
    buf: Vec<u8>,
    segments: Vec<Segment>,
    /// Where the bytes in `buf` not yet covered by a segment start.
    pending_from: usize,
}

impl Output {
    pub fn new() -> Self {
        Output {
            buf: Vec::with_capacity(4096),
            segments: Vec::with_capacity(16),
            pending_from: 0,
        }
    }

    /// The buffer to append response heads and small bodies to.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.segments.is_empty()
    }

    /// Bytes queued so far (to decide when a batch is big enough to flush).
    pub fn queued(&self) -> usize {
        self.buf.len() + self.segments.len() * 1024
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

    pub fn push_memory(&mut self, entry: Rc<FileEntry>) {
        self.close_buf_segment();
        self.segments.push(Segment::Memory(entry));
    }

    pub fn push_file(&mut self, entry: Rc<FileEntry>, offset: u64, len: u64) {
        self.close_buf_segment();
        self.segments.push(Segment::File { entry, offset, len });
    }

    /// Writes everything queued. On return the output is empty and reusable.
    pub async fn flush(&mut self, stream: &mut TcpStream) -> io::Result<()> {
        self.close_buf_segment();
        let result = self.write_segments(stream).await;
        self.buf.clear();
        self.segments.clear();
        self.pending_from = 0;
        result
    }

    async fn write_segments(&mut self, stream: &mut TcpStream) -> io::Result<()> {
        let mut index = 0;
        // Bytes of segments[index] already written.
        let mut skip = 0usize;
        while index < self.segments.len() {
            if let Segment::File { entry, offset, len } = &self.segments[index] {
                send_file(stream, entry, *offset, *len).await?;
                index += 1;
                continue;
            }
            let mut iovecs = [IoSlice::new(&[]); MAX_IOVECS];
            let mut count = 0;
            for segment in &self.segments[index..] {
                let bytes: &[u8] = match segment {
                    Segment::Buf { start, end } => &self.buf[*start..*end],
                    Segment::Memory(entry) => entry.body(),
                    Segment::File { .. } => break,
                };
                iovecs[count] = IoSlice::new(if count == 0 { &bytes[skip..] } else { bytes });
                count += 1;
                if count == MAX_IOVECS {
                    break;
                }
            }
            let mut written = stream.write_vectored(&iovecs[..count]).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            // Advance past what went out.
            while written > 0 {
                let len = match &self.segments[index] {
                    Segment::Buf { start, end } => end - start,
                    Segment::Memory(entry) => entry.body().len(),
                    Segment::File { .. } => unreachable!("writev never covers a file segment"),
                } - skip;
                if written >= len {
                    written -= len;
                    index += 1;
                    skip = 0;
                } else {
                    skip += written;
                    written = 0;
                }
            }
        }
        Ok(())
    }
}

/// Sends `len` bytes of the file from `offset` with sendfile(2) on the non-blocking
/// socket. When the socket buffer is full (EAGAIN) the task waits for writability and
/// resumes at the saved offset, so a slow reader holds only its own connection, never the
/// worker (the design of nginx's ngx_linux_sendfile_chain and the Yaws sendfile driver).
async fn send_file(
    stream: &mut TcpStream,
    entry: &FileEntry,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    let socket = stream.as_raw_fd();
    let file = entry.file.as_raw_fd();
    let mut offset = offset as libc::off_t;
    let mut left = len;
    while left > 0 {
        // Linux moves at most 0x7ffff000 bytes per call.
        let chunk = left.min(0x7fff_f000) as usize;
        let result = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the duration of the call and offset
            // points to a live off_t.
            let n = unsafe { libc::sendfile(socket, file, &mut offset, chunk) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as u64)
            }
        });
        match result {
            // The file shrank under us: the promised Content-Length can no longer be met,
            // and the caller closes the connection.
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => left -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
