//! Measures the memory one compressing stream holds, per coding and level at the
//! encoder's window: the figures `compress::stream_state_bytes` reserves from
//! the streaming budget (docs/compression.md, "Streaming").
//!
//! gzip and Brotli allocate through Rust's allocator, so a counting allocator sees their
//! state: the bytes live after a page was written through the encoder with a flush every
//! 4 KiB, its output taken (as the filter does). zstd allocates inside the C library;
//! `ZSTD_sizeof_CCtx` reports its context, set up as the encoder sets it up.
//!
//! `cargo run --release -p compress --example stream_memory -- FILE`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use compress::{Coding, Encoder};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live =
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let live = LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed)
            + new as isize
            - layout.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        System.realloc(ptr, layout, new)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: f64 = 1024.0 * 1024.0;

fn main() {
    let path = std::env::args().nth(1).expect("usage: stream_memory FILE");
    let data = std::fs::read(&path).expect("read FILE");
    println!(
        "{path}: {} bytes, written in 4 KiB pieces, flushed after each",
        data.len()
    );
    println!("coding level  held (MiB)  peak (MiB)");
    let gzip = (1..=9).map(|l| (Coding::Gzip, l));
    let brotli = (0..=11).map(|l| (Coding::Brotli, l));
    let zstd = (1..=19).map(|l| (Coding::Zstd, l));
    for (coding, level) in gzip.chain(brotli).chain(zstd) {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let mut encoder = Encoder::new(coding, level).unwrap();
        for piece in data.chunks(4096) {
            encoder.write(piece).unwrap();
            encoder.flush().unwrap();
            drop(encoder.take());
        }
        let held = LIVE.load(Ordering::Relaxed) - before;
        let peak = PEAK.load(Ordering::Relaxed) - before;
        println!(
            "{:6} {:5} {:11.2} {:11.2}",
            coding.token(),
            level,
            held as f64 / MIB,
            peak as f64 / MIB
        );
        drop(encoder);
    }
    // The zstd lines above are only its Rust side (the writer's buffers).
    for level in 1..=19 {
        zstd_context(&data, level);
    }
}

/// zstd at `level` with the encoder's 256 KiB window: the context's own size report.
fn zstd_context(data: &[u8], level: i32) {
    use zstd::zstd_safe::{CCtx, CParameter, InBuffer, OutBuffer};
    let mut cctx = CCtx::create();
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .unwrap();
    cctx.set_parameter(CParameter::WindowLog(18)).unwrap();
    cctx.set_parameter(CParameter::ChecksumFlag(false)).unwrap();
    let mut out = vec![0u8; 1 << 20];
    let mut written = 0;
    for piece in data.chunks(4096) {
        let mut input = InBuffer::around(piece);
        let mut output = OutBuffer::around_pos(&mut out[..], written);
        while input.pos() < piece.len() {
            cctx.compress_stream(&mut output, &mut input).unwrap();
        }
        cctx.flush_stream(&mut output).unwrap();
        written = output.pos();
    }
    let context = cctx.sizeof() as f64 / MIB;
    println!("zstd  {level:6} {context:11.2}           - (its C context, ZSTD_sizeof_CCtx)");
}
