//! Writes the conformance table's templates as seeds for the `esi` fuzz target:
//! `cargo run -p esi --example fuzz_seeds -- fuzz/seeds/esi`.
//! Each seed is the target's 3 control bytes followed by one template.

#[allow(dead_code)]
#[path = "../tests/it/conformance.rs"]
mod conformance;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/seeds/esi".to_string());
    std::fs::create_dir_all(&dir)?;
    for (i, case) in conformance::CASES.iter().enumerate() {
        // Chunk size 7, includes 1 and 3 fail, default-ish limits.
        let mut seed = vec![6u8, 0b1010, 255];
        seed.extend_from_slice(case.template.as_bytes());
        std::fs::write(format!("{dir}/case-{i:03}"), seed)?;
    }
    Ok(())
}
