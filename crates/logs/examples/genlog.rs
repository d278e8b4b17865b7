//! Writes a deterministic synthetic combined-format access log to stdout.
//!
//! ```text
//! cargo run --release -p logs --example genlog -- --lines 1000000 --seed 1 > access.log
//! ```
//!
//! `--tricky` mixes in awkward and malformed lines (CRLF, escaped quotes, garbage).

use std::io::{BufWriter, Write};

fn main() {
    let mut lines: u64 = 1_000_000;
    let mut options = logs::synth::SynthOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> u64 {
            let text = args
                .next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")));
            text.parse()
                .unwrap_or_else(|_| usage(&format!("{name}: not a number: {text}")))
        };
        match arg.as_str() {
            "--lines" => lines = value("--lines"),
            "--seed" => options.seed = value("--seed"),
            "--tricky" => options.tricky = true,
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let stdout = std::io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 20, stdout);
    let result = logs::synth::generate(lines, &options, &mut out).and_then(|()| out.flush());
    if let Err(e) = result {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("genlog: {e}");
            std::process::exit(1);
        }
    }
}

fn usage(problem: &str) -> ! {
    eprintln!("genlog: {problem}\nusage: genlog [--lines N] [--seed S] [--tricky]");
    std::process::exit(2);
}
