//! Differential fuzzing of origin responses: tessera's upstream parser and hyper's HTTP/1
//! client must agree on the status and the whole body of the response to a request (so
//! on where it ends) for every input both accept. The first input byte says whether the
//! request was HEAD. The comparison is the one the property test in crates/wire/tests
//! uses.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/wire/tests/response_boundaries/mod.rs"]
mod response_boundaries;

fuzz_target!(|data: &[u8]| {
    if let Err(difference) = response_boundaries::check(data) {
        panic!("{difference}");
    }
});
