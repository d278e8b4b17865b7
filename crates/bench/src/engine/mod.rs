//! The load engine: one thread per core, each a single-threaded event loop over
//! `mio` (edge-triggered epoll) with its own connections. Requests are
//! serialized once (see [`crate::config::Plan`]); responses are framed in place
//! by [`crate::response::ResponseParser`]. Nothing is allocated per request.
//!
//! Closed model: each connection keeps `pipeline` requests in flight and sends
//! the next as soon as a response completes. Open model: each thread owns a
//! schedule of intended send times (`rate / threads` per second) and hands each
//! due request to an idle connection; latency is measured both from the actual
//! send time (uncorrected) and from the intended one (corrected), so a stalled
//! server shows up in the percentiles instead of silently lowering the rate.
//!
//! This module starts the run's threads, one [`Worker`] each, together behind a
//! barrier, and merges their measurements when they end.

mod progress;
mod quic;
mod worker;

pub use progress::Progress;
use worker::{Share, Worker};

use crate::config::Plan;
use crate::os::{process_cpu, thread_cpu};
use crate::stats::ThreadStats;
use crate::Error;
use mio::Poll;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// What the workers measured, merged.
pub(crate) struct Measured {
    pub stats: ThreadStats,
    pub elapsed: Duration,
    pub process_cpu: Duration,
    /// Highest CPU time / wall time of any worker thread.
    pub busiest_thread: f64,
}

pub(crate) fn run(plan: &Plan, progress: Option<Arc<Progress>>) -> Result<Measured, Error> {
    let threads = plan.threads;
    let plan = Arc::new(plan.clone());
    let progress = progress.unwrap_or_default();
    let barrier = Arc::new(Barrier::new(threads + 1));
    let start_cell: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let cpu_before = process_cpu();
    let mut handles = Vec::new();
    for index in 0..threads {
        let plan = plan.clone();
        let progress = progress.clone();
        let barrier = barrier.clone();
        let start_cell = start_cell.clone();
        let handle = std::thread::Builder::new()
            .name(format!("bench-{index}"))
            .spawn(move || -> Result<ThreadStats, Error> {
                let share = Share::of(&plan, index);
                // Build the event loop before the start line so setup is not measured.
                let poll = Poll::new();
                barrier.wait();
                let start = start_cell
                    .lock()
                    .map_err(|_| Error::WorkerPanicked)?
                    .expect("start is set before the barrier opens");
                if plan.http3 {
                    drop(poll);
                    let mut stats = quic::run(plan.clone(), share, start, progress)?;
                    stats.cpu = thread_cpu();
                    return Ok(stats);
                }
                let mut w = Worker::new(&plan, share, poll?, start, progress)?;
                w.run()?;
                w.stats.cpu = thread_cpu();
                Ok(w.stats)
            })
            .map_err(Error::Io)?;
        handles.push(handle);
    }
    *start_cell.lock().map_err(|_| Error::WorkerPanicked)? = Some(Instant::now());
    barrier.wait();
    let start = start_cell
        .lock()
        .map_err(|_| Error::WorkerPanicked)?
        .expect("set above");
    let mut merged: Option<ThreadStats> = None;
    let mut first_error = None;
    let mut busiest: f64 = 0.0;
    let mut results = Vec::new();
    for h in handles {
        results.push(h.join().map_err(|_| Error::WorkerPanicked)?);
    }
    let elapsed = start.elapsed();
    for r in results {
        match r {
            Ok(s) => {
                busiest = busiest.max(s.cpu.as_secs_f64() / elapsed.as_secs_f64().max(1e-9));
                match &mut merged {
                    Some(m) => m.merge(&s),
                    None => merged = Some(s),
                }
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let process_cpu = process_cpu().saturating_sub(cpu_before);
    let elapsed = match plan.duration {
        // A timed run is over at the deadline, whatever the stragglers did.
        Some(d) => d.min(elapsed),
        None => elapsed,
    };
    Ok(Measured {
        stats: merged.expect("at least one thread"),
        elapsed,
        process_cpu,
        busiest_thread: busiest,
    })
}
