//! Differential fuzzing: tessera's parser and hyper's HTTP/1 server must agree on
//! message boundaries (method, path and body of each request) for every input both
//! accept. The comparison is the one the property test in crates/wire/tests uses.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/wire/tests/boundaries/mod.rs"]
mod boundaries;

fuzz_target!(|data: &[u8]| {
    if let Err(difference) = boundaries::check(data) {
        panic!("{difference}");
    }
});
