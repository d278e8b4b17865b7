//! Integration tests of the load generator against the scripted in-process
//! test server (`bench::testserver`).

mod closed;
mod errors;
mod open;
mod reports;
mod schema;

use bench::{Config, Invocation, Report, RequestSpec};

pub fn config(url: &str) -> Config {
    let mut c = Config::new(vec![RequestSpec::get(url)]);
    c.threads = 1;
    c.connections = 1;
    c
}

pub fn run(c: &Config) -> Report {
    bench::run(
        c,
        &Invocation {
            tessera_version: "test".into(),
            args: vec!["tessera".into(), "bench".into()],
        },
        None,
    )
    .expect("the run starts")
}
