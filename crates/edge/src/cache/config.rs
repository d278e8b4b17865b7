//! `[cache]`, `[cache.redis]` and `[cache.disk]` of tessera's TOML file (re-exported by
//! `crate::config`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;

/// `[cache]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Whether proxied responses are cached. Default true: the proxy honours
    /// Cache-Control and Surrogate-Control, and stores nothing that does not say how
    /// long it is fresh.
    pub enabled: bool,
    /// Memory budget of the in-process tier, in bytes (bodies, templates, headers and
    /// keys). Default 256 MiB.
    pub max_size: u64,
    /// Largest object stored, in bytes. Default 8 MiB; larger responses pass through.
    pub max_object_size: usize,
    /// Seconds a stale object may be served while one background request refreshes it,
    /// when the response has no `stale-while-revalidate`. Default 0.
    pub stale_while_revalidate: f64,
    /// Seconds a stale object may be served when the origin fails or its breaker is
    /// open, when the response has no `stale-if-error` (or Surrogate-Control `+M`).
    /// Default 0.
    pub stale_if_error: f64,
    /// Whether responses with Set-Cookie are stored (the Set-Cookie field is then
    /// dropped from the stored copy). Default false: they are not stored.
    pub store_set_cookie: bool,
    /// Client addresses allowed to `PURGE` and `BAN`. Default none.
    pub purge_allow: Vec<IpAddr>,
    /// A token that allows `PURGE` and `BAN` from any address when sent as
    /// `X-Purge-Token`. Default empty: no token works.
    pub purge_token: String,
    /// Whether proxied responses carry RFC 9211's `Cache-Status` field saying what the
    /// cache did (`tessera; hit; ttl=N`, `tessera; fwd=miss; stored`...). Default false:
    /// it tells clients how the cache is used.
    pub cache_status: bool,
    /// `[cache.redis]`: the shared tier. Default none (memory only).
    pub redis: Option<RedisConfig>,
    /// `[cache.disk]`: this node's disk tier, between memory and Redis. Default none.
    pub disk: Option<DiskConfig>,
}

/// `[cache.disk]`. Sizes are a number of bytes or a text with `k`, `m` or `g`
/// (`"10g"`); durations a number of seconds or a text with `ms`, `s`, `m`, `h` or `d`
/// (`"7d"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskConfig {
    /// The directory that holds the objects (made when missing). Required.
    pub path: PathBuf,
    /// Bytes of objects on disk at most (files, headers included); the least recently
    /// used go first. Default `"1g"`.
    pub max_size: SizeText,
    /// Largest object kept on disk. Default `"64m"`.
    pub max_object_size: SizeText,
    /// An object not used for this long is removed. Default `"7d"`.
    pub inactive: DurationText,
    /// Requests for a key before its object is written to disk. Default 1.
    pub min_uses: u32,
    /// The size of the slices an object larger than it is fetched from the origin in
    /// (`Range` requests), each kept on disk as an object of its own. Default none: an
    /// object is fetched whole.
    pub slice: Option<SizeText>,
    /// Files the loader reads per second at start, while requests are served. Default
    /// 1000.
    pub loader_rate: u32,
    /// The tier's own I/O threads: how many reads and writes of files are made at once
    /// (nginx's `thread_pool ... threads=`). Default 4.
    pub io_threads: usize,
    /// Reads and writes waiting for an I/O thread at most; beyond, a lookup is a miss and
    /// a write is not made (nginx's `thread_pool ... max_queue=`). Default 1024.
    pub io_queue: usize,
}

/// A size: bytes, or a text such as `"10g"`, `"512k"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SizeText {
    Bytes(u64),
    Text(String),
}

/// A duration: seconds, or a text such as `"7d"`, `"30s"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum DurationText {
    Secs(f64),
    Text(String),
}

impl SizeText {
    /// Its bytes, or what is wrong with it.
    pub(crate) fn bytes(&self) -> Result<u64, String> {
        let text = match self {
            SizeText::Bytes(n) => return Ok(*n),
            SizeText::Text(t) => t,
        };
        let lower = text.trim().to_ascii_lowercase();
        let split = lower
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(lower.len());
        let (digits, unit) = lower.split_at(split);
        let unit: u64 = match unit.trim() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => u64::MAX,
        };
        digits
            .parse::<u64>()
            .ok()
            .filter(|_| unit != u64::MAX)
            .and_then(|n| n.checked_mul(unit))
            .ok_or_else(|| format!("{text:?} is not a size (\"10g\", \"512m\", \"64k\" or bytes)"))
    }
}

impl DurationText {
    /// Its length, or what is wrong with it.
    pub(crate) fn duration(&self) -> Result<Duration, String> {
        let found = match self {
            DurationText::Secs(s) => Duration::try_from_secs_f64(*s).ok(),
            DurationText::Text(t) => super::policy::parse_duration(t),
        };
        found.ok_or_else(|| match self {
            DurationText::Secs(s) => format!("{s} is not a duration"),
            DurationText::Text(t) => {
                format!("{t:?} is not a duration (\"7d\", \"12h\", \"30m\" or seconds)")
            }
        })
    }
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            path: PathBuf::new(),
            max_size: SizeText::Text("1g".into()),
            max_object_size: SizeText::Text("64m".into()),
            inactive: DurationText::Text("7d".into()),
            min_uses: 1,
            slice: None,
            loader_rate: 1000,
            io_threads: 4,
            io_queue: 1024,
        }
    }
}

/// `[cache.disk]` checked, in numbers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DiskSettings {
    pub(crate) path: PathBuf,
    pub(crate) max_size: u64,
    pub(crate) max_object_size: u64,
    pub(crate) inactive: Duration,
    pub(crate) min_uses: u32,
    pub(crate) loader_rate: u32,
    /// `slice`: the bytes of a slice, when objects are fetched in slices.
    pub(crate) slice: Option<u64>,
    pub(crate) io_threads: usize,
    pub(crate) io_queue: usize,
}

/// `io_threads` at most: more threads than this wait on the disk's own queue.
const MAX_IO_THREADS: usize = 256;
/// `io_queue` at most (nginx's default `max_queue` is 65536).
const MAX_IO_QUEUE: usize = 1 << 20;

/// The largest object the disk tier keeps: its record holds the body's length in 32
/// bits.
const MAX_DISK_OBJECT: u64 = (4 << 30) - (1 << 20);

impl DiskConfig {
    /// Checks every key; errors name it (`cache.disk.max_size`).
    pub(crate) fn settings(&self) -> Result<DiskSettings, ConfigError> {
        let bad = |key: &str, what: String| {
            Err(ConfigError::Invalid(format!("`cache.disk.{key}`: {what}")))
        };
        if self.path.as_os_str().is_empty() {
            return bad(
                "path",
                "required: the directory that holds the objects".into(),
            );
        }
        let size = |key: &str, v: &SizeText| {
            v.bytes()
                .map_err(|e| ConfigError::Invalid(format!("`cache.disk.{key}`: {e}")))
        };
        let max_size = size("max_size", &self.max_size)?;
        let max_object_size = size("max_object_size", &self.max_object_size)?;
        if max_size == 0 {
            return bad("max_size", "must be above 0".into());
        }
        if max_object_size == 0 || max_object_size > max_size {
            return bad(
                "max_object_size",
                format!("must be above 0 and at most max_size ({max_size} bytes)"),
            );
        }
        if max_object_size > MAX_DISK_OBJECT {
            return bad(
                "max_object_size",
                format!("must be at most {MAX_DISK_OBJECT} bytes (4g less 1m)"),
            );
        }
        let slice = match &self.slice {
            Some(slice) => Some(size("slice", slice)?),
            None => None,
        };
        if let Some(slice) = slice {
            if slice < 4096 || slice > max_object_size {
                return bad(
                    "slice",
                    format!(
                        "must be at least 4k and at most max_object_size ({max_object_size} bytes)"
                    ),
                );
            }
        }
        let inactive = match self.inactive.duration() {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => return bad("inactive", "must be above 0".into()),
            Err(e) => return bad("inactive", e),
        };
        if self.min_uses == 0 {
            return bad("min_uses", "must be at least 1".into());
        }
        if self.loader_rate == 0 {
            return bad("loader_rate", "must be at least 1 (files a second)".into());
        }
        if !(1..=MAX_IO_THREADS).contains(&self.io_threads) {
            return bad("io_threads", format!("must be 1 to {MAX_IO_THREADS}"));
        }
        if !(1..=MAX_IO_QUEUE).contains(&self.io_queue) {
            return bad("io_queue", format!("must be 1 to {MAX_IO_QUEUE}"));
        }
        Ok(DiskSettings {
            io_threads: self.io_threads,
            io_queue: self.io_queue,
            path: self.path.clone(),
            max_size,
            max_object_size,
            inactive,
            min_uses: self.min_uses,
            loader_rate: self.loader_rate,
            slice,
        })
    }
}

/// `[cache.redis]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port[/db]`. Required unless `cluster` is given.
    pub url: String,
    /// Redis Cluster seed nodes (`redis://host:port` each); when set, `url` is unused.
    pub cluster: Vec<String>,
    /// Prefix of every key tessera writes. Default `"tessera:"`.
    pub key_prefix: String,
    /// Seconds a lookup may take before it counts as a miss (and a failure). Default
    /// 0.05: Redis on the LAN answers in a millisecond; slower than this it is costing
    /// more than the origin would.
    pub timeout: f64,
    /// Consecutive failures that open the Redis breaker. Default 3.
    pub breaker_failures: u32,
    /// Seconds the open breaker skips Redis before trying again. Default 5.
    pub breaker_cool_down: f64,
    /// Writes queued for Redis at most; beyond it writes are dropped (and counted), so a
    /// slow Redis never holds memory or a response. Default 1024.
    pub max_pending_writes: usize,
    /// Whether purges, soft purges, purges by surrogate key and bans are sent to every
    /// other tessera process sharing this Redis (and theirs applied here), through Redis
    /// pub/sub. Default true: a PURGE sent to one process reaches them all.
    pub fan_out: bool,
    /// How many recent invalidations Redis keeps for processes that were disconnected
    /// to catch up from. Default 1000: a process that missed more drops its memory
    /// tier, as it cannot know what it missed.
    pub fan_out_log: usize,
}

/// The longest invalidation log a process reads back when it catches up (each entry a
/// purge or ban of a few hundred bytes at most).
const MAX_FAN_OUT_LOG: usize = 100_000;

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_size: 256 << 20,
            max_object_size: 8 << 20,
            stale_while_revalidate: 0.0,
            stale_if_error: 0.0,
            store_set_cookie: false,
            purge_allow: Vec::new(),
            purge_token: String::new(),
            cache_status: false,
            redis: None,
            disk: None,
        }
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: String::new(),
            cluster: Vec::new(),
            key_prefix: "tessera:".into(),
            timeout: 0.05,
            breaker_failures: 3,
            breaker_cool_down: 5.0,
            max_pending_writes: 1024,
            fan_out: true,
            fan_out_log: 1000,
        }
    }
}

impl CacheConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.into()));
        for (key, v) in [
            ("cache.stale_while_revalidate", self.stale_while_revalidate),
            ("cache.stale_if_error", self.stale_if_error),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(&format!("{key} must be >= 0"));
            }
        }
        if let Some(r) = &self.redis {
            if r.url.is_empty() && r.cluster.is_empty() {
                return bad("cache.redis needs url (or cluster)");
            }
            for (key, v) in [
                ("cache.redis.timeout", r.timeout),
                ("cache.redis.breaker_cool_down", r.breaker_cool_down),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return bad(&format!("{key} must be > 0"));
                }
            }
            if !(1..=MAX_FAN_OUT_LOG).contains(&r.fan_out_log) {
                return bad(&format!(
                    "cache.redis.fan_out_log must be between 1 and {MAX_FAN_OUT_LOG}"
                ));
            }
        }
        if let Some(disk) = &self.disk {
            disk.settings()?;
        }
        Ok(())
    }
}
