//! The access log's writer thread: the buffers the workers hand it, written in the order
//! they come.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

/// How long the writer sleeps between looks at its channel when no worker is running
/// short of buffers. Waking it for every buffer instead (a futex wake, and the writer
/// preempting the worker on its core) cost 1.8% of a proxied request's CPU time with a
/// JSON log of every field (`bench/observability.sh`; 5,300 context switches of the
/// writer and 5,500 preemptions of the worker per 279,000 requests).
const WRITER_PERIOD: Duration = Duration::from_millis(10);

/// Shared between the workers and the writer thread.
pub(crate) struct Shared {
    /// Lines written to the files (counted by the writer threads).
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    /// Incremented by each SIGUSR1; every writer (one per log file) reopens its file
    /// when it sees a number it has not seen.
    pub reopen: AtomicU64,
}

pub(super) fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The writer thread: writes the buffers in the order they come, in writes that end on a
/// [`BLOCK`] boundary of the file while more is coming, returns each buffer written to a
/// worker that needs one, and reopens the file when asked. Ends when every worker has
/// dropped its end.
pub(super) fn writer(
    file: File,
    path: PathBuf,
    (from_workers, waiting): (Receiver<(Vec<u8>, u64)>, &AtomicUsize),
    returns: Vec<SyncSender<Vec<u8>>>,
    shared: Arc<Shared>,
) {
    let mut out = Blocks::new(file, returns);
    let mut seen = shared.reopen.load(Ordering::Relaxed);
    let mut reopen_if_asked = |out: &mut Blocks| {
        let asked = shared.reopen.load(Ordering::Relaxed);
        if asked != std::mem::replace(&mut seen, asked) {
            // What came before the signal goes to the old file.
            out.write(usize::MAX, &shared, &path);
            match open(&path) {
                Ok(new) => out.replace(new),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "cannot reopen access log")
                }
            }
        }
    };
    // Whether the last look at the channel found nothing: the lines held back (less than a
    // block) are written when a whole period passes without more.
    let mut idle = false;
    loop {
        // Checked while idle too, so a rotated file is released promptly.
        reopen_if_asked(&mut out);
        match from_workers.try_recv() {
            Ok(full) => {
                waiting.fetch_sub(1, Ordering::Relaxed);
                // And right before writing: lines that arrive after SIGUSR1 go to the
                // new file.
                reopen_if_asked(&mut out);
                out.held.push_back(full);
                // With what else waits, in fewer and larger writes.
                while out.held.len() < MAX_SLICES {
                    match from_workers.try_recv() {
                        Ok(full) => {
                            waiting.fetch_sub(1, Ordering::Relaxed);
                            out.held.push_back(full);
                        }
                        Err(_) => break,
                    }
                }
                out.write(BLOCK, &shared, &path);
                idle = false;
            }
            Err(TryRecvError::Empty) if idle && !out.held.is_empty() => {
                out.write(usize::MAX, &shared, &path)
            }
            Err(TryRecvError::Empty) => {
                std::thread::park_timeout(WRITER_PERIOD);
                idle = true;
            }
            Err(TryRecvError::Disconnected) => break,
        }
    }
    out.write(usize::MAX, &shared, &path);
}

/// The writer's writes end on a multiple of this in the file while lines keep coming.
/// The page cache then fills whole large folios, each allocated once: 2 GiB appended in
/// writes of 64 KiB cost 160 ns of CPU per 650-byte line when each write began on a
/// 64 KiB boundary, 230-245 when it began 100 bytes past one or was 61,440 or 60,000
/// bytes long (this machine's ext4 on Linux 6.18; three rounds each, CPU time of the
/// writing process).
const BLOCK: usize = 64 * 1024;

/// The most buffers one write takes.
const MAX_SLICES: usize = 16;

/// The buffers the writer holds, the file and where it is in it.
struct Blocks {
    file: File,
    /// Where the file ends, as far as this writer knows (alignment only: a wrong guess
    /// costs speed, never a line).
    end: u64,
    /// Buffers not wholly written yet and their line counts; the first one's first
    /// `done` bytes are written.
    held: VecDeque<(Vec<u8>, u64)>,
    done: usize,
    /// Where written buffers go back to, and the worker the next goes to (round robin).
    returns: Vec<SyncSender<Vec<u8>>>,
    next_return: usize,
}

impl Blocks {
    fn new(file: File, returns: Vec<SyncSender<Vec<u8>>>) -> Blocks {
        let end = file.metadata().map_or(0, |m| m.len());
        Blocks {
            file,
            end,
            held: VecDeque::new(),
            done: 0,
            returns,
            next_return: 0,
        }
    }

    fn replace(&mut self, file: File) {
        self.end = file.metadata().map_or(0, |m| m.len());
        self.file = file;
    }

    /// Writes what is held up to the last multiple of `block` in the file
    /// (`usize::MAX`: all of it). A write that fails drops every line held (counted).
    fn write(&mut self, block: usize, shared: &Shared, path: &Path) {
        loop {
            let held = self.held.iter().map(|(b, _)| b.len()).sum::<usize>() - self.done;
            let left = match block {
                usize::MAX => held,
                block => {
                    // Nothing when no boundary lies within what is held.
                    let end = self.end + held as u64;
                    held.saturating_sub((end % block as u64) as usize)
                }
            };
            if left == 0 {
                return;
            }
            let mut slices = [io::IoSlice::new(&[]); MAX_SLICES];
            let mut count = 0;
            let mut want = left;
            for (i, (buffer, _)) in self.held.iter().take(slices.len()).enumerate() {
                let from = if i == 0 { self.done } else { 0 };
                let part = &buffer[from..buffer.len().min(from + want)];
                slices[count] = io::IoSlice::new(part);
                count += 1;
                want -= part.len();
                if want == 0 {
                    break;
                }
            }
            match self.file.write_vectored(&slices[..count]) {
                Ok(0) => self.failed(shared, path, io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.end += n as u64;
                    self.advance(n, shared);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.failed(shared, path, e),
            }
        }
    }

    /// `n` more bytes written: buffers wholly written are counted and given back.
    fn advance(&mut self, mut n: usize, shared: &Shared) {
        while let Some((buffer, lines)) = self.held.front() {
            let rest = buffer.len() - self.done;
            if n < rest {
                self.done += n;
                return;
            }
            n -= rest;
            shared.written.fetch_add(*lines, Ordering::Relaxed);
            self.done = 0;
            if let Some((buffer, _)) = self.held.pop_front() {
                self.give_back(buffer);
            }
        }
    }

    /// A write failed: the first buffer held is dropped (its lines counted, as the old
    /// writer dropped the buffer whose write failed) and the others are tried again.
    fn failed(&mut self, shared: &Shared, path: &Path, e: io::Error) {
        if let Some((buffer, lines)) = self.held.pop_front() {
            shared.dropped.fetch_add(lines, Ordering::Relaxed);
            tracing::error!(path = %path.display(), error = %e, lines, "access log write failed; lines dropped");
            self.give_back(buffer);
        }
        self.done = 0;
        self.end = self.file.metadata().map_or(0, |m| m.len());
    }

    /// Gives an empty buffer back to whichever worker has room for it.
    fn give_back(&mut self, mut buffer: Vec<u8>) {
        buffer.clear();
        let returns = &self.returns;
        for i in 0..returns.len() {
            let target = (self.next_return + i) % returns.len();
            match returns[target].try_send(buffer) {
                Ok(()) => {
                    self.next_return = target + 1;
                    return;
                }
                Err(
                    std::sync::mpsc::TrySendError::Full(b)
                    | std::sync::mpsc::TrySendError::Disconnected(b),
                ) => buffer = b,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_end_on_block_boundaries_until_told_to_write_all() {
        let path = std::env::temp_dir().join(format!("tessera-blocks-{}", std::process::id()));
        std::fs::write(&path, [b'x'; 100]).unwrap();
        let shared = Shared {
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            reopen: AtomicU64::new(0),
        };
        let (give, spare) = std::sync::mpsc::sync_channel(8);
        let mut out = Blocks::new(open(&path).unwrap(), vec![give]);
        let len = || std::fs::metadata(&path).unwrap().len();
        out.held.push_back((vec![b'a'; 60_000], 3));
        out.write(BLOCK, &shared, &path);
        assert_eq!((len(), shared.written.load(Ordering::Relaxed)), (100, 0));
        out.held.push_back((vec![b'b'; 60_000], 4));
        out.write(BLOCK, &shared, &path);
        // Up to the first 64 KiB boundary: the first buffer whole, given back.
        assert_eq!((len(), shared.written.load(Ordering::Relaxed)), (65_536, 3));
        assert_eq!(spare.try_iter().count(), 1);
        out.write(usize::MAX, &shared, &path);
        assert_eq!(
            (len(), shared.written.load(Ordering::Relaxed)),
            (120_100, 7)
        );
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[100..60_100].iter().all(|&b| b == b'a'));
        assert!(bytes[60_100..].iter().all(|&b| b == b'b'));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_failed_write_drops_one_buffer_and_tries_the_others() {
        let shared = Shared {
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            reopen: AtomicU64::new(0),
        };
        let (give, spare) = std::sync::mpsc::sync_channel(8);
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut out = Blocks::new(full, vec![give]);
        out.held.push_back((vec![b'a'; 100], 3));
        out.held.push_back((vec![b'b'; 100], 4));
        out.write(usize::MAX, &shared, Path::new("/dev/full"));
        assert_eq!(shared.dropped.load(Ordering::Relaxed), 7);
        assert_eq!(shared.written.load(Ordering::Relaxed), 0);
        assert!(out.held.is_empty());
        assert_eq!(spare.try_iter().count(), 2);
    }
}
