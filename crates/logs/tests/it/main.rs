//! Integration tests of the `logs` library: one binary, a module per feature.

mod formats;
mod parallel;
mod report;
mod top;

use std::path::PathBuf;

use logs::synth::{generate, SynthOptions};

/// A synthetic log of `lines` lines (with awkward and malformed lines when `tricky`).
pub fn synthetic(lines: u64, seed: u64, tricky: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let options = SynthOptions {
        seed,
        tricky,
        no_final_newline: seed & 1 == 0,
    };
    generate(lines, &options, &mut out).unwrap();
    out
}

/// Options that cut even a small file into many chunks across several threads.
pub fn many_chunks(threads: usize, min_chunk: usize) -> logs::Options {
    logs::Options {
        threads,
        min_chunk,
        block_size: 4096,
    }
}

/// Writes `bytes` to a new file in `dir`.
pub fn write_file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Gzip-compresses `bytes`.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}
