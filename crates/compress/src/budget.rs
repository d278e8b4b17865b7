//! The memory of compressing streams, counted in the server's fixed budget: one budget
//! in bytes for the whole process (`compression_memory`), from which each response
//! compressed while it streams reserves its compressor's state, measured per coding and
//! level ([`stream_state_bytes`]), and gives it back when its body is dropped: finished,
//! failed, or abandoned by a client that went away. A stream that would pass the budget
//! is sent uncompressed. It does not grow with the number of sites or routes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Coding;

/// The default `compression_memory`: 128 MiB, about 70 zstd, 145 Brotli or 290 gzip
/// streams compressing at once at the default levels.
pub const DEFAULT_STREAM_MEMORY: u64 = 128 << 20;

/// The process's budget (set from the configuration at start and at each reload).
pub static STREAM_MEMORY: StreamMemory = StreamMemory::new(DEFAULT_STREAM_MEMORY);

/// The bytes one compressing stream of `coding` at `level` holds, at the encoder's
/// windows, measured with `cargo run --release -p compress --example stream_memory --
/// bench/compression-page.html` (a counting allocator for gzip and Brotli,
/// `ZSTD_sizeof_CCtx` for zstd's C context; docs/compression.md, "Streaming"): the peak,
/// plus up to 16 KiB of output waiting to be taken, rounded up to 64 KiB. A level out of
/// range counts as the nearest one (as the encoder clamps it).
pub fn stream_state_bytes(coding: Coding, level: i32) -> u64 {
    const KIB: u64 = 1024;
    let kib = match coding {
        // Measured 0.40 MiB at every level: deflate's window, hash chains and pending
        // buffer do not depend on the level.
        Coding::Gzip => 448,
        // Brotli's hashers grow with the quality up to 9 (32.9 MiB); 10 and 11 use the
        // Zopfli-like search over the 256 KiB window instead (3.6 MiB).
        Coding::Brotli => BROTLI_KIB[level.clamp(0, 11) as usize],
        // The C context (its hash and chain tables grow with the level even at
        // `windowLog` 18) and 0.03 MiB of the writer's buffers.
        Coding::Zstd => ZSTD_KIB[level.clamp(1, 19) as usize - 1],
        Coding::Identity => 0,
    };
    kib * KIB
}

/// Per quality 0-11, KiB (measured peaks 0.05, 0.06, 0.84, 0.83, 1.15, 1.68, 2.68, 8.71,
/// 16.71, 32.90, 3.48, 3.57 MiB).
const BROTLI_KIB: [u64; 12] = [
    128, 128, 896, 896, 1216, 1792, 2816, 8960, 17152, 33728, 3648, 3712,
];

/// Per level 1-19, KiB (measured contexts 1.06, 1.24, 1.74, 2.99, 3.49, 3.49, 5.99,
/// 5.99, 10.99, 20.99, 20.99, 40.99, 32.99, 48.99, 64.99, 33.14, 49.14, 49.75, 81.75 MiB).
const ZSTD_KIB: [u64; 19] = [
    1152, 1344, 1856, 3136, 3648, 3648, 6208, 6208, 11328, 21568, 21568, 42048, 33856, 50240,
    66624, 34048, 50432, 51008, 83776,
];

/// A budget of bytes that streams reserve and give back.
#[derive(Debug)]
pub struct StreamMemory {
    capacity: AtomicU64,
    reserved: AtomicU64,
    /// Streams that got their reservation, and those refused for want of room.
    compressed: AtomicU64,
    refused: AtomicU64,
}

impl StreamMemory {
    pub const fn new(capacity: u64) -> StreamMemory {
        StreamMemory {
            capacity: AtomicU64::new(capacity),
            reserved: AtomicU64::new(0),
            compressed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// A new budget (a reload); reservations held keep their bytes until released.
    pub fn set_capacity(&self, bytes: u64) {
        self.capacity.store(bytes, Ordering::Relaxed);
    }

    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Bytes reserved by the streams compressing now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Streams compressed since start, and streams sent uncompressed for want of room.
    pub fn streams(&self) -> (u64, u64) {
        (
            self.compressed.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }

    /// Reserves `bytes`, or `None` when that would pass the budget.
    pub fn reserve(&'static self, bytes: u64) -> Option<Reservation> {
        let capacity = self.capacity();
        let taken = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |r| {
                r.checked_add(bytes).filter(|&total| total <= capacity)
            });
        if taken.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Reservation {
            memory: self,
            bytes,
        })
    }
}

/// Bytes held of a [`StreamMemory`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    memory: &'static StreamMemory,
    bytes: u64,
}

impl Reservation {
    /// Counts its stream as compressed (once its compressor was made): a reservation
    /// given back before, its compressor failing to start, counts as neither.
    pub fn started(self) -> Reservation {
        self.memory.compressed.fetch_add(1, Ordering::Relaxed);
        self
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.memory.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use super::*;
    use crate::Encoder;

    #[test]
    fn reservations_stay_within_the_budget_and_are_given_back() {
        static MEMORY: StreamMemory = StreamMemory::new(1000);
        let first = MEMORY.reserve(600).unwrap().started();
        assert!(MEMORY.reserve(600).is_none(), "past the budget");
        let small = MEMORY.reserve(400).unwrap().started();
        // One whose compressor did not start: given back, counted as neither.
        drop(MEMORY.reserve(0).unwrap());
        assert_eq!(MEMORY.reserved(), 1000);
        drop(first);
        drop(small);
        assert_eq!(MEMORY.reserved(), 0);
        assert_eq!(MEMORY.streams(), (2, 1));
        MEMORY.set_capacity(0);
        assert!(MEMORY.reserve(1).is_none());
    }

    /// Counts this thread's live and peak heap bytes (tests run on threads of their
    /// own, so others' allocations do not mix in).
    struct Counting;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    fn count(change: isize) {
        let _ = LIVE.try_with(|live| {
            live.set(live.get() + change);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
        });
    }

    // SAFETY: forwards to the system allocator, only counting bytes.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count(layout.size() as isize);
            System.alloc(layout)
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            count(-(layout.size() as isize));
            System.dealloc(ptr, layout)
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
            count(new as isize - layout.size() as isize);
            System.realloc(ptr, layout, new)
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// 64 KiB of HTML-like text, written in 4 KiB pieces with a flush after each.
    fn page() -> Vec<u8> {
        let mut page = Vec::new();
        let mut n = 0u32;
        while page.len() < 64 << 10 {
            n = n.wrapping_mul(1_103_515_245).wrapping_add(12345);
            page.extend_from_slice(
                format!("<li class=\"item-{}\">row {n}</li>\n", n % 97).as_bytes(),
            );
        }
        page
    }

    /// The peak of heap bytes (Rust's allocator) while a stream of `coding` at `level`
    /// compresses `page` as the filter does.
    fn rust_peak(coding: Coding, level: i32, page: &[u8]) -> u64 {
        let before = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(before));
        let mut encoder = Encoder::new(coding, level).unwrap();
        for piece in page.chunks(4096) {
            encoder.write(piece).unwrap();
            encoder.flush().unwrap();
            drop(encoder.take());
        }
        let peak = PEAK.with(Cell::get) - before;
        drop(encoder);
        peak as u64
    }

    /// zstd's C context at `level` with the encoder's window, after compressing `page`.
    fn zstd_context(level: i32, page: &[u8]) -> u64 {
        use zstd::zstd_safe::{CCtx, CParameter, InBuffer, OutBuffer};
        let mut cctx = CCtx::create();
        cctx.set_parameter(CParameter::CompressionLevel(level))
            .unwrap();
        cctx.set_parameter(CParameter::WindowLog(18)).unwrap();
        cctx.set_parameter(CParameter::ChecksumFlag(false)).unwrap();
        let mut out = vec![0u8; 1 << 20];
        let mut written = 0;
        for piece in page.chunks(4096) {
            let mut input = InBuffer::around(piece);
            let mut output = OutBuffer::around_pos(&mut out[..], written);
            while input.pos() < piece.len() {
                cctx.compress_stream(&mut output, &mut input).unwrap();
            }
            cctx.flush_stream(&mut output).unwrap();
            written = output.pos();
        }
        cctx.sizeof() as u64
    }

    #[test]
    fn every_level_reserves_at_least_the_state_it_holds() {
        let page = page();
        let output = 16 << 10;
        let levels = (1..=9)
            .map(|l| (Coding::Gzip, l))
            .chain((0..=11).map(|l| (Coding::Brotli, l)))
            .chain((1..=19).map(|l| (Coding::Zstd, l)));
        for (coding, level) in levels {
            let mut held = rust_peak(coding, level, &page) + output;
            if coding == Coding::Zstd {
                held += zstd_context(level, &page);
            }
            let reserved = stream_state_bytes(coding, level);
            assert!(
                reserved >= held,
                "{} {level}: reserves {reserved}, holds {held}",
                coding.token()
            );
        }
        // Past the range: as the nearest level, as the encoder clamps.
        assert_eq!(
            stream_state_bytes(Coding::Zstd, 22),
            stream_state_bytes(Coding::Zstd, 19)
        );
        assert_eq!(stream_state_bytes(Coding::Identity, 0), 0);
    }
}
