//! The proxy's figures that are not an upstream's, for `/metrics`: ESI pages assembled,
//! fragments fetched and their latency, what the failure policies did with failed
//! includes, and what the cache stored, evicted and invalidated.
//!
//! One block of counters per thread (a worker, or the Redis tier's thread when it
//! evicts), registered the first time the thread counts and summed at scrape time: a
//! thread writes only its own block (a relaxed load and store, no locked instruction, no
//! cache line another thread writes). The blocks are the process's, not a module's, so
//! the figures go on across reloads.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use handler::{bump, PerThread};

/// How an ESI page's assembly ended: the `result` label of `tessera_esi_pages_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Page {
    /// Assembled whole (streamed, or at once from cached fragments).
    Complete,
    /// An include failed that nothing absorbed, under `on_failure = "fail"`.
    Failed,
    /// The client went away first.
    Abandoned,
}

const PAGES: [&str; 3] = ["complete", "failed", "abandoned"];

/// What became of one fragment request (an include's `src` or `alt`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fragment {
    Ok,
    Error,
    Timeout,
}

const FRAGMENTS: [&str; 3] = ["ok", "error", "timeout"];

/// What absorbed an include that failed: the `outcome` label of
/// `tessera_esi_include_failures_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Absorbed {
    /// Its `src` failed and its `alt` answered.
    Alt,
    /// Its own `onerror="continue"`: it yields nothing.
    Continue,
    /// The `esi:except` of an enclosing `esi:try`.
    Except,
    /// Nothing in the template: the page policy `on_failure = "continue"` left it out.
    Omitted,
    /// Nothing: the page failed (`on_failure = "fail"`).
    PageFailed,
}

const ABSORBED: [&str; 5] = ["alt", "continue", "except", "omitted", "page_failed"];

/// Why the memory cache let an object go: the `reason` label of
/// `tessera_cache_evictions_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Evicted {
    /// Room for others (the memory budget).
    Capacity,
    Purge,
    Ban,
}

const EVICTED: [&str; 3] = ["capacity", "purge", "ban"];

/// Upper bounds of the fragment latency buckets in microseconds: 100 us to 10 s.
const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// One thread's counters. Aligned so that two threads' never share a cache line.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Tally {
    pages: [AtomicU64; PAGES.len()],
    fragments: [AtomicU64; FRAGMENTS.len()],
    /// Fragment requests per latency bucket (not cumulative; the last is above every
    /// bound).
    fragment_buckets: [AtomicU64; BUCKETS_US.len() + 1],
    fragment_sum_us: AtomicU64,
    absorbed: [AtomicU64; ABSORBED.len()],
    stores: AtomicU64,
    passes: AtomicU64,
    evictions: [AtomicU64; EVICTED.len()],
    /// PURGE and BAN requests answered.
    purges: AtomicU64,
    bans: AtomicU64,
}

/// Every thread's block.
static ALL: PerThread<Tally> = PerThread::new();

thread_local! {
    static MINE: Arc<Tally> = ALL.register();
}

/// This thread's counters.
fn mine(count: impl FnOnce(&Tally)) {
    // During a thread's teardown there is no block to count in: the event goes uncounted.
    let _ = MINE.try_with(|t| count(t));
}

pub(crate) fn page(result: Page) {
    mine(|t| bump(&t.pages[result as usize], 1));
}

pub(crate) fn fragment(result: Fragment, micros: u64) {
    mine(|t| {
        bump(&t.fragments[result as usize], 1);
        let bucket = BUCKETS_US.partition_point(|&le| le < micros);
        bump(&t.fragment_buckets[bucket], 1);
        bump(&t.fragment_sum_us, micros);
    });
}

pub(crate) fn absorbed(how: Absorbed) {
    mine(|t| bump(&t.absorbed[how as usize], 1));
}

pub(crate) fn stored() {
    mine(|t| bump(&t.stores, 1));
}

pub(crate) fn passed() {
    mine(|t| bump(&t.passes, 1));
}

pub(crate) fn evicted(reason: Evicted, n: u64) {
    mine(|t| bump(&t.evictions[reason as usize], n));
}

pub(crate) fn invalidated(ban: bool) {
    mine(|t| bump(if ban { &t.bans } else { &t.purges }, 1));
}

/// The `pass` count (cache lookups not made: the request or its response may not be
/// stored), for `tessera_cache_requests_total`.
pub(crate) fn passes() -> u64 {
    sum(&|t| &t.passes)
}

fn sum(pick: &dyn Fn(&Tally) -> &AtomicU64) -> u64 {
    ALL.sum(pick)
}

/// Writes the cache's families (stores, evictions, invalidations).
pub(crate) fn write_cache(out: &mut handler::Metrics) {
    out.counter(
        "tessera_cache_stores_total",
        "Objects stored in the memory cache (fetched from an origin or copied from Redis).",
        &[],
        sum(&|t| &t.stores),
    );
    for (i, reason) in EVICTED.iter().enumerate() {
        out.counter(
            "tessera_cache_evictions_total",
            "Objects the memory cache let go, by reason.",
            &[("reason", reason)],
            sum(&|t| &t.evictions[i]),
        );
    }
    let invalidations = "PURGE and BAN requests the proxy carried out.";
    for (method, n) in [("purge", sum(&|t| &t.purges)), ("ban", sum(&|t| &t.bans))] {
        out.counter(
            "tessera_cache_invalidations_total",
            invalidations,
            &[("method", method)],
            n,
        );
    }
}

/// Writes the ESI families.
pub(crate) fn write_esi(out: &mut handler::Metrics) {
    for (i, result) in PAGES.iter().enumerate() {
        out.counter(
            "tessera_esi_pages_total",
            "ESI pages assembled, by how the assembly ended.",
            &[("result", result)],
            sum(&|t| &t.pages[i]),
        );
    }
    for (i, result) in FRAGMENTS.iter().enumerate() {
        out.counter(
            "tessera_esi_fragments_total",
            "Fragment requests of ESI pages (an include's src or alt), by result.",
            &[("result", result)],
            sum(&|t| &t.fragments[i]),
        );
    }
    for (i, outcome) in ABSORBED.iter().enumerate() {
        out.counter(
            "tessera_esi_include_failures_total",
            "Includes whose src failed, by what the failure policy made of it.",
            &[("outcome", outcome)],
            sum(&|t| &t.absorbed[i]),
        );
    }
    let mut cumulative = 0;
    let mut buckets = Vec::with_capacity(BUCKETS_US.len());
    for (b, le) in BUCKETS_US.iter().enumerate() {
        cumulative += sum(&|t| &t.fragment_buckets[b]);
        buckets.push((*le as f64 / 1e6, cumulative));
    }
    let count = cumulative + sum(&|t| &t.fragment_buckets[BUCKETS_US.len()]);
    out.histogram(
        "tessera_esi_fragment_seconds",
        "Time to fetch one fragment (from the cache or its upstream), its wait for the \
         page's concurrency limit included.",
        &[],
        &buckets,
        count,
        sum(&|t| &t.fragment_sum_us) as f64 / 1e6,
    );
}
