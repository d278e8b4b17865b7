//! One `[[limit]]` zone: its bucket, its key, its table and its counts by result.

use std::sync::atomic::{AtomicU64, Ordering};

use super::config::{rate, size, LimitConfig, MAX_RATE};
use super::key::KeyHasher;
use super::table::{self, Bucket, Table};

/// What the limits decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pass,
    /// Passes after this many milliseconds.
    Delay(u64),
    /// Refused with this status, `Retry-After` seconds.
    Refuse {
        status: u16,
        retry_after: u64,
    },
}

/// A zone's counts by result, one line per worker (no two workers write one line).
#[repr(align(64))]
#[derive(Default)]
struct Counts([AtomicU64; RESULTS.len()]);

/// The results of `tessera_limit_requests_total`, in the order of [`Counts`].
pub(crate) const RESULTS: [&str; 4] = ["passed", "delayed", "refused", "dry_run"];

/// One zone: its settings, its key's hasher and its table.
pub(crate) struct Zone {
    pub config: LimitConfig,
    pub key: KeyHasher,
    pub bucket: Bucket,
    pub table: Table,
    counts: Box<[Counts]>,
}

impl Zone {
    /// The zone of `config`; else the key at fault and what is wrong.
    pub fn new(config: &LimitConfig, workers: usize) -> Result<Zone, (&'static str, String)> {
        if config.name.is_empty() {
            return Err(("name", "is required".into()));
        }
        if config.rate.is_empty() {
            return Err(("rate", "is required (`10r/s`, `600r/m`)".into()));
        }
        if config.redis {
            return Err((
                "redis",
                "a zone shared through Redis is not built yet".into(),
            ));
        }
        let rate = rate(&config.rate).map_err(|e| ("rate", e))?;
        if config.burst > MAX_RATE {
            return Err(("burst", format!("{} is above {MAX_RATE}", config.burst)));
        }
        let delay = match (config.delay, config.nodelay) {
            (Some(_), true) => return Err(("delay", "give `delay` or `nodelay`, not both".into())),
            (Some(d), false) if d > config.burst => {
                return Err(("delay", format!("{d} is above `burst` ({})", config.burst)))
            }
            (Some(d), false) => d * 1000,
            (None, true) => u64::MAX,
            (None, false) => 0,
        };
        if !(400..=599).contains(&config.status) {
            return Err(("status", format!("{} is not 400-599", config.status)));
        }
        let memory = size(&config.memory).map_err(|e| ("memory", e))?;
        if !(64..=1 << 40).contains(&memory) {
            return Err((
                "memory",
                format!("`{}` is not 64 bytes to 1 TiB", config.memory),
            ));
        }
        let key = KeyHasher::new(&config.key).map_err(|e| ("key", e))?;
        Ok(Zone {
            config: config.clone(),
            key,
            bucket: Bucket {
                rate,
                burst: config.burst * 1000,
                delay,
            },
            table: Table::new(memory),
            counts: (0..workers.max(1)).map(|_| Counts::default()).collect(),
        })
    }

    fn count(&self, worker: usize, result: usize) {
        if let Some(c) = self.counts.get(worker) {
            c.0[result].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests counted, by result ([`RESULTS`]).
    pub fn counted(&self, result: usize) -> u64 {
        self.counts
            .iter()
            .map(|c| c.0[result].load(Ordering::Relaxed))
            .sum()
    }

    /// Whether `config` would make the same zone (its state carries over a reload).
    pub fn same(&self, config: &LimitConfig) -> bool {
        self.config == *config
    }
}

impl Zone {
    /// A request that fit the burst with `excess` left: passed, or delayed beyond the
    /// zone's `delay`.
    pub fn passed(&self, worker: usize, excess: u64) -> Verdict {
        match table::delay_ms(excess, &self.bucket) {
            0 => {
                self.count(worker, 0);
                Verdict::Pass
            }
            _ if self.config.dry_run => {
                self.count(worker, 3);
                Verdict::Pass
            }
            ms => {
                self.count(worker, 1);
                Verdict::Delay(ms)
            }
        }
    }

    /// A request over the burst at `excess`.
    pub fn refused(&self, worker: usize, excess: u64) -> Verdict {
        if self.config.dry_run {
            self.count(worker, 3);
            tracing::info!(zone = %self.config.name, excess = excess as f64 / 1000.0, "limiting requests, dry run");
            return Verdict::Pass;
        }
        self.count(worker, 2);
        Verdict::Refuse {
            status: self.config.status,
            retry_after: table::retry_after(excess, &self.bucket),
        }
    }
}
