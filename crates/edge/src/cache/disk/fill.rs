//! A streaming fill: an object too large for the memory tier written to disk as its
//! body arrives, chunk by chunk, instead of being read whole first. The file is written
//! under `tmp/` by the tier's I/O threads, one operation after another per fill (a
//! fill's operations are queued on its own list and drained by one job at a time, so a
//! slow origin holds no thread), and put in place once the body is whole; a body that
//! breaks off or a write that fails leaves nothing to find. The flight's other requests get the object at
//! once, its body read from the file as it is written ([`super::stream::Progress`]);
//! once the file is in place, new requests find it in the index.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::file::Header;
use super::shared::{Queue, Shared};
use super::stream::{OnDisk, Progress};

/// What a fill does once it ends, whole (`true`: its file in place) or not.
pub(crate) type Done = Box<dyn FnOnce(bool) + Send>;

enum Op {
    Chunk(Bytes),
    Finish,
    Abort,
}

/// The fill as the I/O threads see it.
struct State {
    queue: Queue,
    /// The operations not yet done, and whether a job is draining them.
    ops: Mutex<(VecDeque<Op>, bool)>,
    /// Written on the I/O threads only, one job at a time.
    work: Mutex<Work>,
}

struct Work {
    header: Header,
    generation: u64,
    temp: PathBuf,
    file: Option<Arc<File>>,
    /// What the readers of the body being written see.
    progress: Arc<Progress>,
    /// The record's head, written first.
    head: Option<Bytes>,
    head_crc: crc32fast::Hasher,
    crc: crc32fast::Hasher,
    header_len: u64,
    written: u64,
    body_len: u64,
    failed: bool,
    done: Option<Done>,
}

/// Readers of a fill under way ([`DiskFill::reader`]): each gets the body read from the
/// file as it is written.
#[derive(Clone)]
pub(crate) struct FillReader {
    queue: Queue,
    body: (u64, u64, Arc<Progress>),
}

impl FillReader {
    /// The body, read from the file as it is written, of the object under `key`.
    pub(crate) fn body(&self, key: String) -> OnDisk {
        let (offset, len, progress) = &self.body;
        OnDisk::filling((self.queue.clone(), key), progress.clone(), (*offset, *len))
    }

    /// Whether `other` reads the same fill.
    pub(super) fn same(&self, other: &FillReader) -> bool {
        Arc::ptr_eq(&self.body.2, &other.body.2)
    }
}

/// The worker's side of a fill: chunks go in as they pass through; dropped before
/// [`DiskFill::finish`], the fill is given up.
pub(crate) struct DiskFill {
    state: Arc<State>,
    finished: bool,
    /// Where the body starts in the file, its length, and what its readers see.
    body: (u64, u64, Arc<Progress>),
}

impl DiskFill {
    /// Starts a fill of the object of `header` (its record length still to be set),
    /// whose record head is `head` and body `body_len` bytes; `generation` is the
    /// index's now.
    pub(super) fn start(
        queue: &Queue,
        mut header: Header,
        head: Bytes,
        body_len: u64,
        (generation, done): (u64, Done),
    ) -> DiskFill {
        header.record_len = head.len() as u64 + body_len;
        header.align_body(head.len(), body_len);
        let temp = queue.shared.temp_path(&header.key);
        let progress = Arc::<Progress>::default();
        let body_offset = (header.encode().len() + head.len()) as u64;
        let state = Arc::new(State {
            queue: queue.clone(),
            ops: Mutex::new((VecDeque::new(), false)),
            work: Mutex::new(Work {
                header,
                generation,
                temp,
                file: None,
                progress: progress.clone(),
                head: Some(head),
                head_crc: crc32fast::Hasher::new(),
                crc: crc32fast::Hasher::new(),
                header_len: 0,
                written: 0,
                body_len,
                failed: false,
                done: Some(done),
            }),
        });
        DiskFill {
            state,
            finished: false,
            body: (body_offset, body_len, progress),
        }
    }

    /// The body, read from the file as it is written, for the requests that wait for
    /// the object under `key`.
    pub(crate) fn filling_body(&self, key: String) -> OnDisk {
        self.reader().body(key)
    }

    /// What the fill's readers need, to make more of them while it goes on.
    pub(crate) fn reader(&self) -> FillReader {
        FillReader {
            queue: self.state.queue.clone(),
            body: self.body.clone(),
        }
    }

    /// The next chunk of the body. Past the tier's budget of bytes waiting to be
    /// written, the fill is given up (the response goes on).
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if self.finished {
            return;
        }
        let s = &self.state.queue.shared;
        let n = chunk.len() as u64;
        if s.pending_bytes.fetch_add(n, Ordering::AcqRel) + n > s.write_budget() {
            s.pending_bytes.fetch_sub(n, Ordering::AcqRel);
            self.give_up();
            return;
        }
        push(&self.state, Op::Chunk(chunk));
    }

    /// Whether it was finished or given up.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// The body is whole: the file is put in place.
    pub(crate) fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            push(&self.state, Op::Finish);
        }
    }

    /// Gives the fill up: nothing is kept.
    pub(crate) fn give_up(&mut self) {
        if !self.finished {
            self.finished = true;
            push(&self.state, Op::Abort);
        }
    }
}

impl Drop for DiskFill {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Queues `op`, and a job to drain the fill's operations unless one is draining them.
fn push(state: &Arc<State>, op: Op) {
    let start = {
        let mut ops = state.ops.lock().unwrap_or_else(|e| e.into_inner());
        ops.0.push_back(op);
        !std::mem::replace(&mut ops.1, true)
    };
    if start {
        let drained = state.clone();
        if !state.queue.always(move |s: &Shared| drain(s, &drained)) {
            // The tier is gone: nothing will be written, nor is anything waiting.
            state.ops.lock().unwrap_or_else(|e| e.into_inner()).1 = false;
        }
    }
}

/// Does the fill's operations in order until none is left.
fn drain(s: &Shared, state: &Arc<State>) {
    loop {
        let op = {
            let mut ops = state.ops.lock().unwrap_or_else(|e| e.into_inner());
            match ops.0.pop_front() {
                Some(op) => op,
                None => {
                    ops.1 = false;
                    return;
                }
            }
        };
        let mut work = state.work.lock().unwrap_or_else(|e| e.into_inner());
        match op {
            Op::Chunk(chunk) => {
                s.pending_bytes
                    .fetch_sub(chunk.len() as u64, Ordering::AcqRel);
                if !work.failed {
                    if let Err(e) = work.write(&chunk) {
                        work.fail(s, Some(&e));
                    }
                }
            }
            Op::Finish => work.finish(s),
            Op::Abort => work.fail(s, None),
        }
    }
}

impl Work {
    /// Writes a chunk of the body (the file made, with its header and the record's
    /// head, first).
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            // Read and write: once in place, the waiting requests read the body from it.
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&self.temp)?;
            // The header's checksum of the record is written at the end.
            let header = self.header.encode();
            f.write_all(&header)?;
            let head = self.head.take().unwrap_or_default();
            f.write_all(&head)?;
            self.head_crc.update(&head);
            self.crc = self.head_crc.clone();
            self.header_len = header.len() as u64;
            let f = Arc::new(f);
            self.progress.opened(f.clone());
            self.file = Some(f);
        }
        if self.written + chunk.len() as u64 > self.body_len {
            return Err(std::io::Error::other("longer than its Content-Length"));
        }
        if let Some(f) = &self.file {
            (&**f).write_all(chunk)?;
        }
        self.crc.update(chunk);
        self.written += chunk.len() as u64;
        self.progress.wrote(self.written);
        Ok(())
    }

    /// The body is whole: the header rewritten with the record's checksum, the file put
    /// in place and indexed, and the waiting requests given the object.
    fn finish(&mut self, s: &Shared) {
        if self.failed {
            return;
        }
        if self.file.is_none() {
            // An empty body: the file is made now.
            if let Err(e) = self.write(&[]) {
                return self.fail(s, Some(&e));
            }
        }
        if self.written != self.body_len {
            let short = std::io::Error::other("shorter than its Content-Length");
            return self.fail(s, Some(&short));
        }
        self.header.record_crc = self.crc.clone().finalize();
        let size = self.header_len + self.header.record_len;
        let placed = self.file.as_ref().map_or(Ok(false), |f| {
            f.write_all_at(&self.header.encode(), 0)?;
            s.place(&self.temp, &self.header, size, self.generation)
        });
        match placed {
            Ok(true) => {}
            Ok(false) => return self.fail(s, None),
            Err(e) => return self.fail(s, Some(&e)),
        }
        self.progress.ended(true);
        self.file = None;
        if let Some(done) = self.done.take() {
            done(true);
        }
    }

    /// The fill failed (`e`) or was given up: nothing kept, the waiting requests told.
    fn fail(&mut self, s: &Shared, e: Option<&std::io::Error>) {
        if !self.failed {
            self.failed = true;
            self.file = None;
            self.progress.ended(false);
            match e {
                Some(e) => s.write_failed(&self.temp, e),
                None => {
                    let _ = std::fs::remove_file(&self.temp);
                }
            }
        }
        if let Some(done) = self.done.take() {
            done(false);
        }
    }
}
