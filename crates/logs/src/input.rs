//! Inputs and the parallel driver shared by every analysis.
//!
//! Regular files are memory-mapped and cut into chunks at newlines; worker threads (one per
//! core) take chunks from a shared counter and aggregate into their own tally, looked up
//! by byte slices of the map, so the hot loop neither locks nor copies (beyond a key's
//! first sighting). The tallies are
//! merged once at the end. Gzip-compressed files, standard input and anything
//! that cannot be mapped (pipes) are streamed instead: read in large blocks that end at a
//! newline, each block tallied and merged into the total.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use memmap2::Mmap;

use crate::Error;

/// One input named on the command line: a file, or `-` for standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file; gzip-compressed files are recognised by their magic bytes, not their name.
    Path(PathBuf),
    /// Standard input (plain or gzip).
    Stdin,
}

impl Input {
    /// `-` means standard input, anything else a path.
    pub fn from_arg(arg: impl Into<PathBuf>) -> Input {
        let path = arg.into();
        if path.as_os_str() == "-" {
            Input::Stdin
        } else {
            Input::Path(path)
        }
    }
}

/// How the work is split. The defaults suit real logs; tests shrink `min_chunk` to force
/// many chunks on small inputs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Worker threads. Default: the number of cores.
    pub threads: usize,
    /// Smallest chunk a mapped file is cut into. Default 1 MiB: below that, starting a
    /// thread costs more than it saves.
    pub min_chunk: usize,
    /// Block size for streamed (gzip, stdin) input. Default 8 MiB: large enough that the
    /// per-block merge is noise, small enough to stay in cache-friendly territory.
    pub block_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            min_chunk: 1 << 20,
            block_size: 8 << 20,
        }
    }
}

/// An analysis the driver can run: scan blocks of whole lines into a per-thread tally,
/// then merge the tallies into the total once.
pub(crate) trait Job: Sync {
    type Tally: Send;
    type Total: Send;
    fn tally(&self) -> Self::Tally;
    /// `block` holds whole lines; only the last may lack its newline.
    fn scan(&self, tally: &mut Self::Tally, block: &[u8]);
    /// Last work on a tally, on its own thread, before it is merged on the main one.
    fn finish(&self, _tally: &mut Self::Tally) {}
    fn merge(&self, total: &mut Self::Total, tally: Self::Tally);
}

/// A progress callback: called from worker threads with the number of bytes of mapped
/// input just finished (streams are not counted; their size is unknown up front).
pub type Progress<'p> = &'p (dyn Fn(u64) + Sync);

struct Stream {
    input: Option<PathBuf>,
    /// Bytes already read from `reader` (by [`Opened::first_line`]) and not yet scanned.
    pending: Vec<u8>,
    reader: Box<dyn Read + Send>,
}

/// Opened inputs: mapped files and streams, ready to be scanned once.
pub struct Opened {
    maps: Vec<Mmap>,
    streams: Vec<Stream>,
    /// Input order, to find the first line of the first input.
    order: Vec<Source>,
}

#[derive(Clone, Copy)]
enum Source {
    Map(usize),
    Stream(usize),
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens every input. Regular files are mapped unless they are gzip, which is streamed.
pub fn open(inputs: &[Input]) -> Result<Opened, Error> {
    let mut opened = Opened {
        maps: Vec::new(),
        streams: Vec::new(),
        order: Vec::new(),
    };
    for input in inputs {
        match input {
            Input::Stdin => {
                let reader: Box<dyn Read + Send> = Box::new(io::stdin());
                opened.push_stream(None, reader)?;
            }
            Input::Path(path) => {
                let file = File::open(path).map_err(|e| Error::io(Some(path), e))?;
                let meta = file.metadata().map_err(|e| Error::io(Some(path), e))?;
                if !meta.is_file() {
                    opened.push_stream(Some(path), Box::new(file))?;
                    continue;
                }
                if meta.len() == 0 {
                    continue;
                }
                // SAFETY: the map is read-only. If another process truncates the file while
                // we read it, the kernel sends SIGBUS; that is the accepted cost of mapping
                // logs (the same trade ripgrep makes), and log files are appended, not cut.
                let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(Some(path), e))?;
                if map.starts_with(&GZIP_MAGIC) {
                    drop(map);
                    opened.push_stream(Some(path), Box::new(file))?;
                } else {
                    let _ = map.advise(memmap2::Advice::Sequential);
                    opened.order.push(Source::Map(opened.maps.len()));
                    opened.maps.push(map);
                }
            }
        }
    }
    Ok(opened)
}

impl Opened {
    fn push_stream(
        &mut self,
        path: Option<&Path>,
        mut reader: Box<dyn Read + Send>,
    ) -> Result<(), Error> {
        // Peek at the first bytes to tell gzip from plain text.
        let mut pending = Vec::with_capacity(64 << 10);
        while pending.len() < 2 {
            let n =
                read_some(&mut reader, &mut pending, 64 << 10).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
        }
        let reader: Box<dyn Read + Send> = if pending.starts_with(&GZIP_MAGIC) {
            let raw = io::Cursor::new(std::mem::take(&mut pending)).chain(reader);
            Box::new(flate2::read::MultiGzDecoder::new(
                io::BufReader::with_capacity(256 << 10, raw),
            ))
        } else {
            reader
        };
        self.order.push(Source::Stream(self.streams.len()));
        self.streams.push(Stream {
            input: path.map(Path::to_path_buf),
            pending,
            reader,
        });
        Ok(())
    }

    /// The first line of the first non-empty input (without its line ending), used to
    /// detect the log format. Reads ahead at most 64 KiB of a stream; the bytes are kept
    /// and scanned later.
    pub fn first_line(&mut self) -> Result<Vec<u8>, Error> {
        for source in self.order.clone() {
            let head: &[u8] = match source {
                Source::Map(i) => &self.maps[i],
                Source::Stream(i) => {
                    let stream = &mut self.streams[i];
                    while memchr::memchr(b'\n', &stream.pending).is_none()
                        && stream.pending.len() < 64 << 10
                    {
                        let n = read_some(&mut stream.reader, &mut stream.pending, 64 << 10)
                            .map_err(|e| Error::io(stream.input.as_deref(), e))?;
                        if n == 0 {
                            break;
                        }
                    }
                    &stream.pending
                }
            };
            let line = match memchr::memchr(b'\n', head) {
                Some(end) => &head[..end],
                None => head,
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                return Ok(line.to_vec());
            }
        }
        Ok(Vec::new())
    }

    /// Total size of the mapped inputs, for a progress bar. Streams are not counted.
    pub fn mapped_bytes(&self) -> u64 {
        self.maps.iter().map(|m| m.len() as u64).sum()
    }

    /// The mapped inputs cut into blocks of whole lines of about `target` bytes, in input
    /// order; then each stream read to its end in blocks of `block_size`, in order. For
    /// work whose output keeps the order of the lines (`export`); `blocks` runs on the
    /// calling thread and may hand the blocks to others.
    pub(crate) fn in_order<E: From<Error>>(
        &mut self,
        target: usize,
        block_size: usize,
        blocks: impl FnOnce(&[&[u8]]) -> Result<(), E>,
        streamed: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut chunks = Vec::new();
        for map in &self.maps {
            chunks.extend(split_lines(map, target));
        }
        blocks(&chunks)?;
        for stream in &mut self.streams {
            stream_blocks(stream, block_size, streamed)?;
        }
        Ok(())
    }

    pub(crate) fn run<J: Job>(
        &mut self,
        job: &J,
        mut total: J::Total,
        opts: &Options,
        progress: Option<Progress<'_>>,
    ) -> Result<J::Total, Error> {
        let tick = |n: usize| {
            if let Some(p) = progress {
                p(n as u64)
            }
        };
        let chunks = split_maps(&self.maps, opts);
        let maps = &self.maps;
        let scan_chunk = |tally: &mut J::Tally, &(map, chunk): &(usize, &[u8])| {
            // Map the chunk's pages in one call rather than taking a page fault every few
            // pages (faults were an eighth of the report's time). Older kernels refuse
            // the advice; then the faults happen as before.
            #[cfg(target_os = "linux")]
            {
                let offset = chunk.as_ptr() as usize - maps[map].as_ptr() as usize;
                let _ = maps[map].advise_range(memmap2::Advice::PopulateRead, offset, chunk.len());
            }
            #[cfg(not(target_os = "linux"))]
            let _ = (maps, map);
            job.scan(tally, chunk);
            tick(chunk.len());
        };
        let workers = opts.threads.max(1).min(chunks.len());
        if workers <= 1 {
            let mut tally = job.tally();
            for chunk in &chunks {
                scan_chunk(&mut tally, chunk);
            }
            job.finish(&mut tally);
            job.merge(&mut total, tally);
        } else {
            let next = AtomicUsize::new(0);
            let tallies = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut tally = job.tally();
                            loop {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                let Some(chunk) = chunks.get(i) else { break };
                                scan_chunk(&mut tally, chunk);
                            }
                            job.finish(&mut tally);
                            tally
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect::<Vec<_>>()
            });
            for tally in tallies {
                job.merge(&mut total, tally);
            }
        }
        for stream in &mut self.streams {
            scan_stream(job, &mut total, stream, opts.block_size)?;
        }
        Ok(total)
    }
}

/// Cuts every map into chunks of whole lines: about 64 per thread, never smaller than
/// `min_chunk` nor larger than 64 MiB. Small chunks keep the threads finishing together:
/// with eight per thread, one thread still had a chunk to go when the other was done, for
/// a median 12 ms of a 150 ms report; a chunk costs one `madvise` call.
fn split_maps<'m>(maps: &'m [Mmap], opts: &Options) -> Vec<(usize, &'m [u8])> {
    let total: usize = maps.iter().map(|m| m.len()).sum();
    let target = (total / (opts.threads.max(1) * 64))
        .clamp(opts.min_chunk.max(1), (64 << 20).max(opts.min_chunk));
    let mut chunks = Vec::new();
    for (i, map) in maps.iter().enumerate() {
        chunks.extend(split_lines(map, target).into_iter().map(|chunk| (i, chunk)));
    }
    chunks
}

/// Splits `data` into pieces of about `target` bytes, each ending just after a newline
/// (the last one at the end of the data).
pub fn split_lines(data: &[u8], target: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < data.len() {
        let want = start.saturating_add(target.max(1));
        let end = if want >= data.len() {
            data.len()
        } else {
            match memchr::memchr(b'\n', &data[want - 1..]) {
                Some(i) => want + i,
                None => data.len(),
            }
        };
        pieces.push(&data[start..end]);
        start = end;
    }
    pieces
}

fn scan_stream<J: Job>(
    job: &J,
    total: &mut J::Total,
    stream: &mut Stream,
    block_size: usize,
) -> Result<(), Error> {
    stream_blocks::<Error>(stream, block_size, &mut |block| {
        let mut tally = job.tally();
        job.scan(&mut tally, block);
        job.merge(total, tally);
        Ok(())
    })
}

/// Reads a stream to its end in blocks of whole lines (of about `block_size` bytes; a
/// longer line makes its block grow), handing each to `each` in order.
fn stream_blocks<E: From<Error>>(
    stream: &mut Stream,
    block_size: usize,
    each: &mut dyn FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let pending = std::mem::take(&mut stream.pending);
    let mut buf = vec![0u8; block_size.max(pending.len()).max(1)];
    buf[..pending.len()].copy_from_slice(&pending);
    let mut filled = pending.len();
    loop {
        let mut eof = false;
        while filled < buf.len() {
            match stream.reader.read(&mut buf[filled..]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(stream.input.as_deref(), e).into()),
            }
        }
        if eof {
            if filled > 0 {
                each(&buf[..filled])?;
            }
            return Ok(());
        }
        match memchr::memrchr(b'\n', &buf[..filled]) {
            Some(last) => {
                each(&buf[..=last])?;
                buf.copy_within(last + 1..filled, 0);
                filled -= last + 1;
            }
            // One line longer than the whole block: grow until it fits.
            None => buf.resize(buf.len() * 2, 0),
        }
    }
}

/// Reads once into the spare room of `buf` (up to `limit` bytes in total).
fn read_some(reader: &mut dyn Read, buf: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
    let start = buf.len();
    let want = limit.saturating_sub(start).max(1);
    buf.resize(start + want, 0);
    loop {
        match reader.read(&mut buf[start..]) {
            Ok(n) => {
                buf.truncate(start + n);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        }
    }
}
