//! Lua's figures for `/metrics`: calls into scripts per phase, their failures by cause
//! (an error, the time limit, the memory limit, a panic), and scripts loaded.
//!
//! One block of counters per worker thread, registered the first time the thread counts
//! and summed at scrape time: a thread writes only its own block (a relaxed load and
//! store, no locked instruction, no cache line another thread writes). The blocks are the
//! process's, not an engine's, so the figures go on across reloads.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use handler::{bump, PerThread};

/// A script's phase: the `phase` label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Phase {
    Access,
    Content,
    HeaderFilter,
    BodyFilter,
    Log,
    /// A `tessera.timer.at` callback.
    Timer,
    /// An upstream's `balancer_script`.
    Balancer,
    /// `[tls] certificate_script`.
    Certificate,
}

const PHASES: [&str; 8] = [
    "access",
    "content",
    "header_filter",
    "body_filter",
    "log",
    "timer",
    "balancer",
    "certificate",
];

/// Why a call failed: the `reason` label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failure {
    Error,
    TimeLimit,
    MemoryLimit,
    Panic,
}

const FAILURES: [&str; 4] = ["error", "time_limit", "memory_limit", "panic"];

impl Failure {
    /// The cause of a failed call: the memory limit (mlua's memory error), the time limit
    /// (the watchdog's error), or any other error.
    pub(crate) fn of(e: &mlua::Error) -> Failure {
        match e {
            mlua::Error::MemoryError(_) => Failure::MemoryLimit,
            mlua::Error::CallbackError { cause, .. } => Failure::of(cause),
            e if e.to_string().contains(crate::guard::TIME_LIMIT_MESSAGE) => Failure::TimeLimit,
            _ => Failure::Error,
        }
    }
}

#[repr(align(128))]
#[derive(Default)]
struct Tally {
    calls: [AtomicU64; PHASES.len()],
    failures: [[AtomicU64; FAILURES.len()]; PHASES.len()],
    /// Scripts loaded (at a worker's start and at each reload): ok, failed.
    loads: [AtomicU64; 2],
    /// Bytes into and out of `body_filter` calls.
    filtered: [AtomicU64; 2],
    /// Responses whose bodies went through a `body_filter`: begun, ended.
    filter_streams: [AtomicU64; 2],
}

static ALL: PerThread<Tally> = PerThread::new();

thread_local! {
    static MINE: Arc<Tally> = ALL.register();
}

fn mine(count: impl FnOnce(&Tally)) {
    // During a thread's teardown there is no block to count in: the event goes uncounted.
    let _ = MINE.try_with(|t| count(t));
}

/// Counts a call into a script's `phase`.
pub(crate) fn call(phase: Phase) {
    mine(|t| bump(&t.calls[phase as usize], 1));
}

/// Counts a failed call of `phase`.
pub(crate) fn failed(phase: Phase, why: Failure) {
    mine(|t| bump(&t.failures[phase as usize][why as usize], 1));
}

/// Counts a script loaded by a worker's state, or one that failed to load.
pub(crate) fn loaded(ok: bool) {
    mine(|t| bump(&t.loads[usize::from(!ok)], 1));
}

/// Counts bytes given to a `body_filter` call and bytes it returned.
pub(crate) fn body_filtered(into: usize, out: usize) {
    mine(|t| {
        bump(&t.filtered[0], into as u64);
        bump(&t.filtered[1], out as u64);
    });
}

/// Counts a response body that begins (`true`) or ends going through a `body_filter`.
pub(crate) fn filter_stream(begins: bool) {
    mine(|t| bump(&t.filter_streams[usize::from(!begins)], 1));
}

/// Writes the Lua families, summed over every thread.
pub(crate) fn write(out: &mut handler::Metrics) {
    let sum = |pick: &dyn Fn(&Tally) -> &AtomicU64| -> u64 { ALL.sum(pick) };
    for (p, phase) in PHASES.iter().enumerate() {
        out.counter(
            "tessera_lua_calls_total",
            "Calls into Lua scripts, by phase.",
            &[("phase", phase)],
            sum(&|t| &t.calls[p]),
        );
    }
    for (p, phase) in PHASES.iter().enumerate() {
        for (f, reason) in FAILURES.iter().enumerate() {
            out.counter(
                "tessera_lua_errors_total",
                "Calls into Lua scripts that failed, by phase and cause: an error, stopped by \
                 the time limit or the memory limit, a panic.",
                &[("phase", phase), ("reason", reason)],
                sum(&|t| &t.failures[p][f]),
            );
        }
    }
    for (i, direction) in ["in", "out"].iter().enumerate() {
        out.counter(
            "tessera_lua_body_filter_bytes_total",
            "Bytes of response bodies given to body_filter calls (in) and returned by them \
             (out).",
            &[("direction", direction)],
            sum(&|t| &t.filtered[i]),
        );
    }
    let begun = sum(&|t| &t.filter_streams[0]);
    let ended = sum(&|t| &t.filter_streams[1]);
    out.gauge(
        "tessera_lua_body_filter_streams",
        "Response bodies going through a body_filter now.",
        &[],
        begun.saturating_sub(ended) as f64,
    );
    for (i, result) in ["ok", "failed"].iter().enumerate() {
        out.counter(
            "tessera_lua_script_loads_total",
            "Scripts loaded by a worker's Lua state (each worker loads each script at start \
             and at each reload), by result.",
            &[("result", result)],
            sum(&|t| &t.loads[i]),
        );
    }
}
