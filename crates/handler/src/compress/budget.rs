//! The memory of compressing streams, counted in the server's fixed budget: one budget
//! in bytes for the whole process (`compression_memory`), from which each response
//! compressed while it streams reserves its compressor's state, measured per coding
//! ([`stream_state_bytes`]), and gives it back when its body is dropped: finished,
//! failed, or abandoned by a client that went away. A stream that would pass the budget
//! is sent uncompressed. It does not grow with the number of sites or routes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Coding;

/// The default `compression_memory`: 128 MiB, about 70 zstd, 150 Brotli or 300 gzip
/// streams compressing at once.
pub const DEFAULT_STREAM_MEMORY: u64 = 128 << 20;

/// The process's budget (set from the configuration at start and at each reload).
pub static STREAM_MEMORY: StreamMemory = StreamMemory::new(DEFAULT_STREAM_MEMORY);

/// The bytes one compressing stream of `coding` holds, at the windows and default levels
/// chosen here, measured with `cargo run --release -p handler --example stream_memory --
/// bench/compression-page.html` (a counting allocator for gzip and Brotli,
/// `ZSTD_sizeof_CCtx` for zstd's C context; docs/compression.md, "Streaming"), plus up
/// to 16 KiB of output waiting to be taken, rounded up.
pub fn stream_state_bytes(coding: Coding) -> u64 {
    const KIB: u64 = 1024;
    match coding {
        // Measured 0.39 MiB: deflate's window, hash chains and pending buffer.
        Coding::Gzip => 432 * KIB,
        // Measured 0.83 MiB with the 256 KiB window.
        Coding::Brotli => 896 * KIB,
        // Measured 1.74 MiB of C context and 0.03 MiB of the writer's buffers.
        Coding::Zstd => 1856 * KIB,
        Coding::Identity => 0,
    }
}

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
        self.compressed.fetch_add(1, Ordering::Relaxed);
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

impl Drop for Reservation {
    fn drop(&mut self) {
        self.memory.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_budget_and_are_given_back() {
        static MEMORY: StreamMemory = StreamMemory::new(1000);
        let first = MEMORY.reserve(600).unwrap();
        assert!(MEMORY.reserve(600).is_none(), "past the budget");
        let small = MEMORY.reserve(400).unwrap();
        assert_eq!(MEMORY.reserved(), 1000);
        drop(first);
        drop(small);
        assert_eq!(MEMORY.reserved(), 0);
        assert_eq!(MEMORY.streams(), (2, 1));
        MEMORY.set_capacity(0);
        assert!(MEMORY.reserve(1).is_none());
    }

    #[test]
    fn each_coding_reserves_its_measured_state() {
        assert!(stream_state_bytes(Coding::Gzip) < stream_state_bytes(Coding::Brotli));
        assert!(stream_state_bytes(Coding::Brotli) < stream_state_bytes(Coding::Zstd));
        assert_eq!(stream_state_bytes(Coding::Identity), 0);
    }
}
