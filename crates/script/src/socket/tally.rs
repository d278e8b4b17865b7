//! The cosockets' figures for `/metrics`, beside the other Lua families: connections
//! made, taken from the keep-alive pool or failed; errors returned to scripts by kind;
//! connections idle in the pools. One block per worker thread, summed at scrape time
//! (as `crate::tally`'s).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use handler::{bump, PerThread};

use super::conn::Kind;

const CONNECTS: [&str; 3] = ["new", "pooled", "failed"];
const ERRORS: [&str; 6] = ["timeout", "closed", "refused", "resolve", "tls", "other"];

#[repr(align(128))]
#[derive(Default)]
struct Tally {
    connects: [AtomicU64; CONNECTS.len()],
    errors: [AtomicU64; ERRORS.len()],
    /// Connections put in a pool, and taken out or closed there.
    idle: [AtomicU64; 2],
}

static ALL: PerThread<Tally> = PerThread::new();

thread_local! {
    static MINE: Arc<Tally> = ALL.register();
}

fn mine(count: impl FnOnce(&Tally)) {
    let _ = MINE.try_with(|t| count(t));
}

/// How a `connect` ended.
#[derive(Clone, Copy)]
pub(super) enum Connect {
    New,
    Pooled,
    Failed,
}

pub(super) fn connect(how: Connect) {
    mine(|t| bump(&t.connects[how as usize], 1));
}

pub(super) fn error(kind: Kind) {
    let i = match kind {
        Kind::Timeout => 0,
        Kind::Closed => 1,
        Kind::Refused => 2,
        Kind::Resolve => 3,
        Kind::Tls => 4,
        Kind::Other => 5,
    };
    mine(|t| bump(&t.errors[i], 1));
}

/// Counts connections put in a pool (`by` > 0) or leaving it (`by` < 0).
pub(super) fn idle(by: i64) {
    mine(|t| {
        if by > 0 {
            bump(&t.idle[0], by as u64)
        } else {
            bump(&t.idle[1], by.unsigned_abs())
        }
    });
}

/// Writes the cosocket families, summed over every thread.
pub(crate) fn write(out: &mut handler::Metrics) {
    for (i, how) in CONNECTS.iter().enumerate() {
        out.counter(
            "tessera_lua_socket_connects_total",
            "Cosocket connects by scripts: a new connection, one taken from the keep-alive \
             pool, or a failure.",
            &[("result", how)],
            ALL.sum(&|t| &t.connects[i]),
        );
    }
    for (i, error) in ERRORS.iter().enumerate() {
        out.counter(
            "tessera_lua_socket_errors_total",
            "Errors returned to scripts by cosocket operations, by kind.",
            &[("error", error)],
            ALL.sum(&|t| &t.errors[i]),
        );
    }
    let put = ALL.sum(&|t| &t.idle[0]);
    let left = ALL.sum(&|t| &t.idle[1]);
    out.gauge(
        "tessera_lua_socket_pool_idle",
        "Cosocket connections idle in the workers' keep-alive pools.",
        &[],
        put.saturating_sub(left) as f64,
    );
}
