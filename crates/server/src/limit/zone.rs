//! One `[[limit]]` zone: its bucket, its key, its table and its counts by result.

use std::sync::atomic::{AtomicU64, Ordering};

use super::cluster::{Cluster, LimitRedis, Take};
use super::config::{rate, size, window, LimitConfig, MAX_RATE};
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
    /// Its counts in Redis, for a zone shared by every node (`redis = true`).
    pub cluster: Option<Cluster>,
    refusals: Refusals,
}

/// Refusals not logged yet, and the second of the last line logged.
#[derive(Default)]
struct Refusals {
    unlogged: AtomicU64,
    logged: AtomicU64,
}

impl Zone {
    /// The zone of `config`; else the key at fault and what is wrong.
    pub fn new(
        config: &LimitConfig,
        workers: usize,
        redis: Option<&LimitRedis>,
    ) -> Result<Zone, (&'static str, String)> {
        if config.name.is_empty() {
            return Err(("name", "is required".into()));
        }
        if config.rate.is_empty() {
            return Err(("rate", "is required (`10r/s`, `600r/m`)".into()));
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
        // Every node hashes a shared zone's keys alike: its Redis keys are the hashes.
        let seed = match config.redis {
            true => config.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            }),
            false => fastrand::u64(..),
        };
        let key = KeyHasher::new(&config.key, seed).map_err(|e| ("key", e))?;
        let cluster = match (config.redis, redis) {
            (false, _) => None,
            (true, None) => return Err((
                "redis",
                "needs the Redis of `[cache.redis] url` (a Redis Cluster is not used for limits)"
                    .into(),
            )),
            (true, Some(target)) => {
                let per_window = window(&config.rate).map_err(|e| ("rate", e))?;
                let at = (config.name.as_str(), memory);
                Some(Cluster::new(target, at, per_window, config.burst))
            }
        };
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
            cluster,
            refusals: Refusals::default(),
        })
    }

    /// Counts a request's result on `worker`'s own line: only that worker writes it, so
    /// a plain load and store (no locked instruction), as the server's other counters.
    fn count(&self, worker: usize, result: usize) {
        if let Some(c) = self.counts.get(worker) {
            handler::bump(&c.0[result], 1);
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
    pub fn same(&self, config: &LimitConfig, redis: Option<&LimitRedis>) -> bool {
        self.config == *config
            && self.cluster.as_ref().map(Cluster::target) == redis.filter(|_| config.redis)
    }

    /// Counts a request of the key of `hash` (`now`: the worker's clock; `unix_ms`: the
    /// wall clock, for a shared zone's windows) and says what comes of it.
    pub fn decide(&self, hash: u64, (now, unix_ms): (u64, u64), worker: usize) -> Verdict {
        let local = || match self.table.take(hash, now, &self.bucket, true) {
            Ok(excess) => self.passed(worker, excess),
            Err(excess) => self.refused(worker, excess),
        };
        let Some(cluster) = &self.cluster else {
            return local();
        };
        match cluster.take(hash, unix_ms) {
            Take::Local => local(),
            Take::Pass => {
                self.count(worker, 0);
                Verdict::Pass
            }
            Take::Refuse => self.refused_by_cluster(worker, unix_ms),
            Take::Credit => match self.table.take(hash, now, &self.bucket, true) {
                Ok(_) => {
                    cluster.credit(hash, unix_ms);
                    self.count(worker, 0);
                    Verdict::Pass
                }
                Err(excess) => self.refused(worker, excess),
            },
        }
    }

    /// A request Redis has no room for: refused (or counted, in a dry run) until the
    /// window ends (`Retry-After`).
    fn refused_by_cluster(&self, worker: usize, unix_ms: u64) -> Verdict {
        self.log_refusal(self.bucket.burst + 1000);
        if self.config.dry_run {
            self.count(worker, 3);
            return Verdict::Pass;
        }
        self.count(worker, 2);
        let window_ms = self.cluster.as_ref().map_or(1000, Cluster::window_ms);
        Verdict::Refuse {
            status: self.config.status,
            retry_after: (window_ms - unix_ms % window_ms).div_ceil(1000).max(1),
        }
    }
}

impl Zone {
    /// Logs a refusal (`dry run`: one it would make), as nginx's "limiting requests", at
    /// most one line a second per zone, which says how many since the last.
    fn log_refusal(&self, excess: u64) {
        let refused = self.refusals.unlogged.fetch_add(1, Ordering::Relaxed) + 1;
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.refusals.logged.load(Ordering::Relaxed);
        if last == second
            || (self.refusals.logged)
                .compare_exchange(last, second, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let refused = self
            .refusals
            .unlogged
            .swap(0, Ordering::Relaxed)
            .max(refused);
        tracing::warn!(
            zone = %self.config.name,
            excess = excess as f64 / 1000.0,
            requests = refused,
            dry_run = self.config.dry_run,
            "limiting requests (the requests refused, or a dry run's that would be, since the last line)"
        );
    }

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
        self.log_refusal(excess);
        if self.config.dry_run {
            self.count(worker, 3);
            return Verdict::Pass;
        }
        self.count(worker, 2);
        Verdict::Refuse {
            status: self.config.status,
            retry_after: table::retry_after(excess, &self.bucket),
        }
    }
}
