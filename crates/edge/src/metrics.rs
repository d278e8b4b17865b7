//! Edge's figures for `/metrics`, all in one place: per upstream, requests by outcome
//! and the time to the response head; and the proxy's own, ESI pages assembled,
//! fragments fetched and their latency, what the failure policies did with failed
//! includes, and what the cache stored, evicted and invalidated.
//!
//! Every counter is written by one thread only and summed at scrape time: a relaxed load
//! and store, no locked instruction, no cache line another thread writes.
//!
//! - Per upstream: each worker's `Edge` gets a block of counters of its own for every
//!   upstream (the same block again if it builds its `Edge` anew).
//! - The proxy's own: one block per thread (a worker, or the Redis tier's thread when it
//!   evicts), registered the first time the thread counts. The blocks are the process's,
//!   not a module's, so the figures go on across reloads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use handler::{bump, PerThread};

use crate::error::UpstreamError;

/// What became of a request sent to an upstream, up to its response head: the `outcome`
/// label.
pub(crate) const OUTCOMES: [&str; 7] = [
    "response",
    "server_error",
    "connect_error",
    "connect_timeout",
    "timeout",
    "protocol_error",
    "breaker_open",
];

/// The index of `breaker_open` in [`OUTCOMES`]: not sent, every peer being down (the
/// label kept from the breaker per upstream that peer health replaced, for dashboards).
pub(crate) const BREAKER_OPEN: usize = 6;

/// Upper bounds of the latency buckets (upstream responses, fragments) in microseconds:
/// 100 us to 10 s, as the server's request duration histogram.
const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// The index in [`OUTCOMES`] of a request's result: a response (`server_error` for a
/// 5xx), or the error that ended it before one.
pub(crate) fn outcome(result: Result<u16, &UpstreamError>) -> usize {
    match result {
        Ok(status) if status >= 500 => 1,
        Ok(_) => 0,
        Err(UpstreamError::Connect { .. }) => 2,
        Err(UpstreamError::ConnectTimeout { .. }) => 3,
        Err(UpstreamError::ResponseTimeout { .. }) => 4,
        Err(UpstreamError::Unavailable { .. }) => BREAKER_OPEN,
        Err(
            UpstreamError::Protocol { .. }
            | UpstreamError::TooLarge { .. }
            | UpstreamError::Decode { .. }
            | UpstreamError::Coalesced { .. }
            | UpstreamError::RequestBody { .. },
        ) => 5,
    }
}

/// One worker's counters for one upstream. Aligned so that two workers' never share a
/// cache line.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct UpstreamCounts {
    outcomes: [AtomicU64; OUTCOMES.len()],
    /// Responses per bucket (not cumulative; the last is above every bound).
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl UpstreamCounts {
    /// Counts one request; `micros` to its response head when one came.
    pub(crate) fn record(&self, outcome: usize, micros: Option<u64>) {
        bump(&self.outcomes[outcome], 1);
        if let Some(micros) = micros {
            let bucket = BUCKETS_US.partition_point(|&le| le < micros);
            bump(&self.buckets[bucket], 1);
            bump(&self.sum_us, micros);
        }
    }
}

/// Every worker's counters, per upstream (in the configuration's order).
pub(crate) struct UpstreamFigures {
    upstreams: usize,
    /// By worker index; a worker's block has one `UpstreamCounts` per upstream.
    workers: Mutex<Vec<Option<Arc<[UpstreamCounts]>>>>,
}

impl UpstreamFigures {
    pub(crate) fn new(upstreams: usize) -> UpstreamFigures {
        UpstreamFigures {
            upstreams,
            workers: Mutex::new(Vec::new()),
        }
    }

    /// The worker's block, made the first time it asks (off the request path: when the
    /// worker builds its `Edge`).
    pub(crate) fn for_worker(&self, worker: usize) -> Arc<[UpstreamCounts]> {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if workers.len() <= worker {
            workers.resize(worker + 1, None);
        }
        workers[worker]
            .get_or_insert_with(|| (0..self.upstreams).map(|_| Default::default()).collect())
            .clone()
    }

    /// Upstream `i`'s figures summed over every worker.
    fn totals(&self, i: usize) -> Totals {
        let mut totals = Totals::default();
        for block in self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flatten()
        {
            let c = &block[i];
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            for (t, o) in totals.outcomes.iter_mut().zip(&c.outcomes) {
                *t += load(o);
            }
            for (t, b) in totals.buckets.iter_mut().zip(&c.buckets) {
                *t += load(b);
            }
            totals.sum_us += load(&c.sum_us);
        }
        totals
    }

    /// Whether some worker's proxy still counts into these figures (holds its block).
    fn in_use(&self) -> bool {
        let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers.iter().flatten().any(|b| Arc::strong_count(b) > 1)
    }

    /// Writes `tessera_upstream_requests_total` and `tessera_upstream_response_seconds`,
    /// `names` being the upstreams' names in the configuration's order and `earlier`
    /// (when not empty) what the proxies a reload replaced counted for each.
    pub(crate) fn write(&self, out: &mut handler::Metrics, names: &[&str], earlier: &[Earlier]) {
        for (i, name) in names.iter().enumerate().take(self.upstreams) {
            let mut t = self.totals(i);
            if let Some(e) = earlier.get(i) {
                t.add(&e.totals());
            }
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                out.counter(
                    "tessera_upstream_requests_total",
                    "Requests sent to each upstream, by what became of them up to the response head.",
                    &[("upstream", name), ("outcome", outcome)],
                    t.outcomes[o],
                );
            }
            let mut cumulative = 0;
            let mut buckets = Vec::with_capacity(BUCKETS_US.len());
            for (b, le) in BUCKETS_US.iter().enumerate() {
                cumulative += t.buckets[b];
                buckets.push((*le as f64 / 1e6, cumulative));
            }
            let count = cumulative + t.buckets[BUCKETS_US.len()];
            out.histogram(
                "tessera_upstream_response_seconds",
                "Time from sending a request to an upstream (taking or opening a connection \
                 included) to its response head.",
                &[("upstream", name)],
                &buckets,
                count,
                t.sum_us as f64 / 1e6,
            );
        }
    }
}

/// One upstream's figures summed.
#[derive(Clone, Default)]
struct Totals {
    outcomes: [u64; OUTCOMES.len()],
    buckets: [u64; BUCKETS_US.len() + 1],
    sum_us: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        for (a, b) in self.outcomes.iter_mut().zip(&other.outcomes) {
            *a += b;
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.sum_us += other.sum_us;
    }
}

/// What the proxies that reloads replaced counted for an upstream the reloads left
/// unchanged, so that its counters go on instead of starting again from zero: the
/// figures still counted into (a request in flight on a replaced proxy), and the sum of
/// those no proxy counts into any more.
#[derive(Clone, Default)]
pub(crate) struct Earlier {
    live: Vec<(Arc<UpstreamFigures>, usize)>,
    retired: Totals,
}

impl Earlier {
    /// For an upstream that was number `i` of the module being replaced, whose figures
    /// are `figures` and whose own earlier ones `before`.
    pub(crate) fn after(before: &Earlier, figures: &Arc<UpstreamFigures>, i: usize) -> Earlier {
        let mut retired = before.retired.clone();
        let mut live = Vec::new();
        for (f, j) in before.live.iter().cloned().chain([(figures.clone(), i)]) {
            if f.in_use() {
                live.push((f, j));
            } else {
                retired.add(&f.totals(j));
            }
        }
        Earlier { live, retired }
    }

    fn totals(&self) -> Totals {
        let mut t = self.retired.clone();
        for (f, i) in &self.live {
            t.add(&f.totals(*i));
        }
        t
    }
}

// The proxy's own figures: one block per thread.

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
    revalidations: AtomicU64,
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

pub(crate) fn revalidated() {
    mine(|t| bump(&t.revalidations, 1));
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
    out.counter(
        "tessera_cache_revalidations_total",
        "Expired objects the origin confirmed with a 304 to a conditional request \
         (refreshed without their body being sent again).",
        &[],
        sum(&|t| &t.revalidations),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_workers_counts() {
        let figures = UpstreamFigures::new(2);
        let first = figures.for_worker(0);
        let second = figures.for_worker(1);
        assert!(
            Arc::ptr_eq(&first, &figures.for_worker(0)),
            "one block a worker"
        );
        first[1].record(0, Some(150));
        first[1].record(1, Some(20_000_000));
        second[1].record(0, Some(100));
        second[1].record(2, None);
        let mut out = handler::Metrics::new();
        figures.write(&mut out, &["a", "b"], &[]);
        let text = out.render(false);
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("{needle} in {text}"))
                .rsplit_once(' ')
                .unwrap()
                .1
                .to_string()
        };
        let requests = "tessera_upstream_requests_total";
        assert_eq!(
            line(&format!(
                "{requests}{{upstream=\"b\",outcome=\"response\"}}"
            )),
            "2"
        );
        assert_eq!(
            line(&format!(
                "{requests}{{upstream=\"b\",outcome=\"server_error\"}}"
            )),
            "1"
        );
        assert_eq!(
            line(&format!(
                "{requests}{{upstream=\"b\",outcome=\"connect_error\"}}"
            )),
            "1"
        );
        assert_eq!(
            line(&format!(
                "{requests}{{upstream=\"a\",outcome=\"response\"}}"
            )),
            "0"
        );
        let bucket = "tessera_upstream_response_seconds_bucket{upstream=\"b\",le=";
        assert_eq!(line(&format!("{bucket}\"0.0001\"}}")), "1");
        assert_eq!(line(&format!("{bucket}\"0.00025\"}}")), "2");
        assert_eq!(line(&format!("{bucket}\"10\"}}")), "2");
        assert_eq!(line(&format!("{bucket}\"+Inf\"}}")), "3");
        assert_eq!(
            line("tessera_upstream_response_seconds_count{upstream=\"b\"}"),
            "3"
        );
        assert_eq!(
            line("tessera_upstream_response_seconds_sum{upstream=\"b\"}"),
            "20.00025"
        );
    }
}
