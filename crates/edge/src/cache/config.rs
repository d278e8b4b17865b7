//! `[cache]` and `[cache.redis]` of tessera's TOML file (re-exported by `crate::config`).

use std::net::IpAddr;

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
        Ok(())
    }
}
