//! Measures each coding at each level on one file: compressed size and CPU time per
//! compression, the figures docs/compression.md chose the default levels from.
//!
//! `cargo run --release -p compress --example levels -- FILE`

use std::time::Instant;

use compress::{compress, Coding};

fn main() {
    let path = std::env::args().nth(1).expect("usage: levels FILE");
    let data = std::fs::read(&path).expect("read FILE");
    println!("{path}: {} bytes", data.len());
    println!("coding level     bytes  ratio  us/compression");
    for (coding, levels) in [
        (Coding::Gzip, &[1, 2, 3, 4, 5, 6, 9][..]),
        (Coding::Brotli, &[0, 1, 2, 3, 4, 5, 6, 9, 11][..]),
        (Coding::Zstd, &[1, 2, 3, 4, 6, 9, 19][..]),
    ] {
        for &level in levels {
            let once = compress(coding, level, &[&data]).unwrap();
            // Enough rounds for about 0.3 s per figure.
            let start = Instant::now();
            let mut rounds = 0u32;
            while start.elapsed().as_millis() < 300 {
                std::hint::black_box(compress(coding, level, &[&data]).unwrap());
                rounds += 1;
            }
            let micros = start.elapsed().as_secs_f64() * 1e6 / rounds as f64;
            println!(
                "{:6} {:5} {:9} {:6.2} {:15.1}",
                coding.token(),
                level,
                once.len(),
                data.len() as f64 / once.len() as f64,
                micros
            );
        }
    }
}
