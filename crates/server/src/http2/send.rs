//! Responses framed: a head the HTTP/1 encoder wrote, sent as HPACK fields without the
//! connection-specific ones (RFC 9113 section 8.2.2), and bodies as DATA within the
//! windows and the output's bound, file ranges read straight into the output.

use bytes::Buf;
use h2codec::conn::{Conn, OUTPUT_HIGH};
use h2codec::frame::Reason;

use super::head::Head;
use super::slot::Slot;
use super::streams::Streams;
use crate::net::output::Piece;

/// Largest DATA payload read from a file at a time.
const FILE_CHUNK: usize = 16 * 1024;

/// A response ready now: a file's, a refusal, a cached object. Its head and what of
/// its body the windows take are framed on the connection's task; the rest waits in a
/// slot of its own, read from the file as it is sent.
pub(super) struct Ready {
    pub(super) id: u32,
    pub(super) head: Head,
    pub(super) body: Vec<Piece>,
}

impl Ready {
    /// Frames it; returns whether the client had cancelled the stream.
    pub(super) fn send(self, streams: &Streams, conn: &mut Conn) -> bool {
        let empty = self.body.iter().all(|p| p.len() == 0);
        if (self.head)
            .send(conn, self.id, empty, &streams.worker, &streams.facts)
            .is_err()
        {
            return true;
        }
        if empty {
            return false;
        }
        let body = self.body;
        // A small body in memory (a small file, a cached object), the common case: framed
        // whole when the windows take it, with no slot.
        let small = match &body[..] {
            [Piece::Bytes(bytes)] => Some(&bytes[..]),
            [Piece::Memory { entry, start, end }] => Some(&entry.body()[*start..*end]),
            _ => None,
        };
        if let Some(bytes) = small {
            if bytes.len() <= FILE_CHUNK
                && conn.output().len() < OUTPUT_HIGH
                && conn.capacity(self.id) >= bytes.len()
            {
                return conn.send_data(self.id, bytes, true).is_err();
            }
        }
        let mut slot = Slot::new(false);
        slot.queued = body.iter().map(Piece::queued).sum();
        slot.data = body.into();
        slot.end = true;
        // Framed now as far as the windows and the output allow; the rest by `pump`.
        if frame_pieces(conn, self.id, &mut slot).is_err() {
            return true;
        }
        if !slot.data.is_empty() {
            streams.slots.borrow_mut().insert(self.id, slot);
        }
        false
    }
}

/// What stopped [`frame_pieces`] before the slot's body was all framed.
pub(super) enum Stop {
    /// The output is full: more once it is written.
    Output,
    /// The client's window.
    Window,
}

/// Frames what it can of a slot's body. `Err` when the stream is gone (reset, or its
/// file broke under it).
pub(super) fn frame_pieces(conn: &mut Conn, id: u32, slot: &mut Slot) -> Result<Option<Stop>, ()> {
    loop {
        if conn.output().len() >= OUTPUT_HIGH {
            return Ok(Some(Stop::Output));
        }
        let last = slot.end && slot.data.len() == 1 && slot.trailers.is_none();
        let Some(front) = slot.data.front_mut() else {
            if let Some(trailers) = slot.trailers.take() {
                conn.send_trailers(id, trailers.iter()).map_err(|_| ())?;
            }
            return Ok(None);
        };
        match front {
            Piece::Bytes(bytes) => {
                let (n, take) = send_some(conn, id, bytes, last)?;
                slot.queued -= n;
                if n < bytes.len() {
                    bytes.advance(n);
                    if n < take {
                        return Ok(Some(Stop::Window));
                    }
                    continue;
                }
            }
            Piece::Memory { entry, start, end } => {
                let (n, take) = send_some(conn, id, &entry.body()[*start..*end], last)?;
                *start += n;
                if start < end {
                    if n < take {
                        return Ok(Some(Stop::Window));
                    }
                    continue;
                }
            }
            Piece::File { entry, offset, len } => {
                let want = (*len).min(FILE_CHUNK as u64) as usize;
                let n = conn.begin_data(id, want).map_err(|_| ())?;
                if n == 0 {
                    return Ok(Some(Stop::Window));
                }
                if read_into(conn.payload(), &entry.file, *offset, n).is_err() {
                    // The file shrank or broke under us: its length is promised, so
                    // the stream is cut off, not completed.
                    conn.finish_data(false);
                    conn.reset(id, Reason::INTERNAL_ERROR);
                    return Err(());
                }
                *offset += n as u64;
                *len -= n as u64;
                conn.finish_data(last && *len == 0);
                if *len > 0 {
                    continue;
                }
            }
        }
        slot.data.pop_front();
    }
}

/// Frames what the windows take of `bytes`, at most what the output has room for (a
/// frame at least), so that a client with a huge window cannot make it hold a whole
/// large body. Returns the bytes framed and the most that were offered.
fn send_some(conn: &mut Conn, id: u32, bytes: &[u8], last: bool) -> Result<(usize, usize), ()> {
    let room = OUTPUT_HIGH
        .saturating_sub(conn.output().len())
        .max(FILE_CHUNK);
    let take = bytes.len().min(room);
    let n = conn
        .send_data(id, &bytes[..take], last && take == bytes.len())
        .map_err(|_| ())?;
    Ok((n, take))
}

/// Reads exactly `n` bytes of `file` at `offset` onto the end of `out`: pread(2) into
/// its spare room, so the bytes are neither zeroed first nor copied after.
pub(super) fn read_into(
    out: &mut Vec<u8>,
    file: &std::fs::File,
    offset: u64,
    n: usize,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    out.reserve(n);
    let mut got = 0;
    while got < n {
        let spare = &mut out.spare_capacity_mut()[..n - got];
        match crate::sys::pread(file.as_raw_fd(), spare, offset + got as u64) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
            Ok(r) => {
                // SAFETY: pread initialised the `r` bytes after the old length.
                unsafe { out.set_len(out.len() + r) };
                got += r;
            }
        }
    }
    Ok(())
}

/// Frames what the slots hold, as far as the windows allow: heads, body bytes, the
/// body bytes read (given back to the client), resets. Wakes the tasks that may queue
/// more.
pub(super) fn pump(streams: &Streams, conn: &mut Conn) {
    let given = streams.give_back.replace(0);
    if given > 0 {
        conn.release(0, given);
    }
    let mut slots = streams.slots.borrow_mut();
    streams.more.set(false);
    if slots.is_empty() {
        let was = (streams.blocked.replace(0), streams.sending.replace(0));
        if was != (0, 0) {
            streams.settle();
        }
        return;
    }
    let max_queued = streams.max_queued;
    let before = conn.output().len();
    let mut blocked = 0;
    let mut sending = 0;
    let mut more = false;
    slots.retain(|&id, slot| {
        if slot.cancelled {
            conn.release(id, slot.unread());
            return slot.tasked;
        }
        if slot.released > 0 {
            conn.release(id, slot.released);
            slot.released = 0;
        }
        if let Some((head, end)) = slot.head.take() {
            if head
                .send(conn, id, end, &streams.worker, &streams.facts)
                .is_err()
            {
                slot.cancelled = true;
            }
        }
        if !slot.cancelled {
            match frame_pieces(conn, id, slot) {
                Ok(None) => {}
                Ok(Some(Stop::Window)) => blocked += 1,
                Ok(Some(Stop::Output)) => more = true,
                Err(()) => {
                    // Its file broke: the stream was reset.
                    slot.cancelled = true;
                    slot.reset_by_us = true;
                }
            }
        }
        if let Some(reason) = slot.reset.take() {
            conn.reset(id, reason);
            slot.cancelled = true;
            slot.reset_by_us = true;
        }
        if slot.cancelled {
            slot.data.clear();
            slot.queued = 0;
            conn.release(id, slot.unread());
        }
        let drained = slot.drained();
        if slot.cancelled || (slot.want && (slot.queued < max_queued || drained)) {
            slot.want = false;
            slot.wake();
        }
        if !drained {
            sending += 1;
        }
        slot.tasked || !slot.drained()
    });
    drop(slots);
    if conn.output().len() > before {
        // Progress for a stream that waits on the window: the write timeout starts over.
        streams.worker.touch(streams.slot);
    }
    streams.more.set(more);
    let was = (
        streams.blocked.replace(blocked),
        streams.sending.replace(sending),
    );
    if was != (blocked, sending) {
        streams.settle();
    }
}
