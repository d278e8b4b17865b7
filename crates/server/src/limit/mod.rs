//! Request limits (docs/security.md, "Request limits"): `[[limit]]` zones, each a key
//! (variables as in the routing rules) and nginx's `limit_req` bucket, named by the
//! `limit` list of a `[[route]]` or a `[[host]]`. A zone's state is a [`table::Table`]
//! of fixed size that every worker shares; a zone lives across reloads while its
//! settings stay the same.
//!
//! On the request path: the zones of the request's route (else of its host), the key
//! expanded (the client's address is hashed as its bytes, nothing formatted), one hash,
//! one compare-and-swap per zone. Several zones on one route are checked as nginx does:
//! each is looked at first, and only when none refuses are they all counted.

pub(crate) mod table;

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Deserialize;

use table::{Bucket, Table};

/// One `[[limit]]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitConfig {
    /// How routes and hosts name the zone in their `limit` lists. Required, unique.
    pub name: String,
    /// What a request is counted by: variables as in the routing rules (`$remote_addr`,
    /// `$http_NAME`, `$cookie_NAME`, `$arg_NAME`, `$host`, `$uri`...), several joined by
    /// spaces. A request whose key is empty is not limited (nginx). Default
    /// `$remote_addr`, the client (the one a trusted proxy names).
    pub key: String,
    /// `Nr/s` or `Nr/m`. Required.
    pub rate: String,
    /// Requests over the rate a key may have in excess (nginx `burst`). Default 0.
    pub burst: u64,
    /// Pass the requests within the burst at once instead of spacing them out at the
    /// rate (nginx `nodelay`). Default false.
    pub nodelay: bool,
    /// Pass this many of the burst's requests at once and space out the rest (nginx
    /// `delay=N`). Default 0 (all spaced out), or the whole burst with `nodelay`.
    pub delay: Option<u64>,
    /// The status of a refused request. Default 429.
    pub status: u16,
    /// Count (and log) what would be delayed or refused, but delay and refuse nothing
    /// (nginx `limit_req_dry_run`). Default false.
    pub dry_run: bool,
    /// The zone's table: `16m`, `512k`, `1g` or bytes; 16 bytes per key. Default `16m`
    /// (1,048,576 keys).
    pub memory: String,
    /// Share the zone with every node through the Redis of `[cache.redis]`. Default
    /// false.
    pub redis: bool,
}

impl Default for LimitConfig {
    fn default() -> LimitConfig {
        LimitConfig {
            name: String::new(),
            key: "$remote_addr".into(),
            rate: String::new(),
            burst: 0,
            nodelay: false,
            delay: None,
            status: 429,
            dry_run: false,
            memory: "16m".into(),
            redis: false,
        }
    }
}

/// Most requests a second a zone may allow (and most of a burst): its millirequests fit
/// the table's 40-bit fields with room to spare.
const MAX_RATE: u64 = 1_000_000;

/// Most zones one route or host names.
const MAX_PER_REQUEST: usize = 8;

/// `Nr/s` or `Nr/m` in millirequests per second (nginx's `ctx->rate`).
fn rate(text: &str) -> Result<u64, String> {
    let (n, scale) = match (text.strip_suffix("r/s"), text.strip_suffix("r/m")) {
        (Some(n), _) => (n, 1),
        (_, Some(n)) => (n, 60),
        _ => return Err(format!("`{text}` is not `Nr/s` or `Nr/m`")),
    };
    match n.parse::<u64>() {
        Ok(n) if (1..=MAX_RATE).contains(&n) => Ok(n * 1000 / scale),
        _ => Err(format!("`{text}`: the number must be 1 to {MAX_RATE}")),
    }
}

/// `16m`, `512k`, `1g` or a number of bytes.
pub(crate) fn size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let unit = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "`{text}` is not a size (`16m`, `512k`, `1g` or bytes)"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("`{text}` is not a size (`16m`, `512k`, `1g` or bytes)"))
}

/// What a zone counts a request by.
enum Key {
    /// `$remote_addr` alone: the client's address, hashed as its bytes.
    Client,
    Template(rules::Template),
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
    key: Key,
    bucket: Bucket,
    /// Seeded at random per zone, so that a client cannot choose keys that crowd one
    /// group of the table.
    hasher: foldhash::quality::FixedState,
    pub table: Table,
    counts: Box<[Counts]>,
}

impl Zone {
    /// The zone of `config`; else the key at fault and what is wrong.
    fn new(config: &LimitConfig, workers: usize) -> Result<Zone, (&'static str, String)> {
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
        let key = match config.key.trim() {
            "$remote_addr" => Key::Client,
            text => Key::Template(
                rules::Template::compile(text, None).map_err(|e| ("key", e.to_string()))?,
            ),
        };
        Ok(Zone {
            config: config.clone(),
            key,
            bucket: Bucket {
                rate,
                burst: config.burst * 1000,
                delay,
            },
            hasher: foldhash::quality::FixedState::with_seed(fastrand::u64(..)),
            table: Table::new(memory),
            counts: (0..workers.max(1)).map(|_| Counts::default()).collect(),
        })
    }

    /// The hash of the request's key; `None` when the key is empty (not limited).
    fn hash(&self, ctx: &rules::Ctx<'_>) -> Option<u64> {
        let mut hasher = self.hasher.build_hasher();
        match &self.key {
            Key::Client => match ctx.peer.ip() {
                IpAddr::V4(a) => hasher.write(&a.octets()),
                IpAddr::V6(a) => hasher.write(&a.octets()),
            },
            Key::Template(t) => {
                let empty = KEY.with_borrow_mut(|key| {
                    key.clear();
                    t.expand(ctx, (b"", &[]), key);
                    hasher.write(key);
                    key.is_empty() || key.len() > 65535
                });
                if empty {
                    return None;
                }
            }
        }
        Some(hasher.finish())
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
    fn same(&self, config: &LimitConfig) -> bool {
        self.config == *config
    }
}

thread_local! {
    /// A key being expanded, reused from request to request.
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

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

/// The zones of one configuration and who names them.
#[derive(Default)]
pub(crate) struct Limits {
    pub zones: Vec<Arc<Zone>>,
    /// Per site: its host's `limit` (zone indices), for requests no route with its own
    /// list takes.
    by_site: Vec<Box<[u16]>>,
    /// Per site, per route (its index among the site's routes): its `limit`.
    by_rule: Vec<Vec<Option<Box<[u16]>>>>,
}

impl Limits {
    /// The zones of `zones` (their state taken from `previous` where the settings did
    /// not change) and the lists of the site's hosts and routes. `hosts`: each
    /// `[[host]]`'s `limit`; `routes`: each route's site and `limit`, in file order.
    pub fn new(
        zones: &[LimitConfig],
        hosts: &[&[String]],
        routes: &[(usize, &[String])],
        workers: usize,
        previous: Option<&Limits>,
    ) -> Result<Limits, String> {
        let mut limits = Limits::default();
        for (i, config) in zones.iter().enumerate() {
            if zones[..i].iter().any(|z| z.name == config.name) {
                return Err(format!(
                    "`limit[{i}].name`: `{}` is named twice",
                    config.name
                ));
            }
            let kept = previous
                .and_then(|p| p.zones.iter().find(|z| z.same(config)))
                .cloned();
            let zone = match kept {
                Some(zone) => zone,
                None => Arc::new(
                    Zone::new(config, workers)
                        .map_err(|(key, e)| format!("`limit[{i}].{key}`: {e}"))?,
                ),
            };
            limits.zones.push(zone);
        }
        let find = |names: &[String], key: &str| -> Result<Box<[u16]>, String> {
            if names.len() > MAX_PER_REQUEST {
                return Err(format!("`{key}.limit`: at most {MAX_PER_REQUEST} zones"));
            }
            names
                .iter()
                .map(
                    |name| match limits.zones.iter().position(|z| z.config.name == *name) {
                        Some(i) => Ok(i as u16),
                        None => Err(format!("`{key}.limit`: no `[[limit]]` is named `{name}`")),
                    },
                )
                .collect()
        };
        let mut by_site = vec![Box::default()];
        for (i, names) in hosts.iter().enumerate() {
            by_site.push(find(names, &format!("host[{i}]"))?);
        }
        let mut by_rule: Vec<Vec<Option<Box<[u16]>>>> = vec![Vec::new(); hosts.len() + 1];
        for (site, names) in routes {
            let site_routes = &mut by_rule[*site];
            let key = match site {
                0 => format!("route[{}]", site_routes.len()),
                s => format!("host[{}].route[{}]", s - 1, site_routes.len()),
            };
            let list = (!names.is_empty()).then(|| find(names, &key)).transpose()?;
            site_routes.push(list);
        }
        limits.by_site = by_site;
        limits.by_rule = by_rule;
        Ok(limits)
    }

    /// Whether any route or host names a zone (else requests skip the limits at once).
    pub fn any(&self) -> bool {
        self.by_site.iter().any(|z| !z.is_empty())
            || self.by_rule.iter().flatten().any(Option::is_some)
    }

    /// The zones of a request of `site` that `rule` routed (else its host's).
    pub fn of(&self, site: usize, rule: Option<usize>) -> &[u16] {
        let own = rule.and_then(|r| self.by_rule.get(site)?.get(r)?.as_deref());
        own.or_else(|| self.by_site.get(site).map(|z| &z[..]))
            .unwrap_or_default()
    }

    /// Counts a request in `zones` at `now` (the worker's clock, milliseconds) and says
    /// whether it passes, waits or is refused, as nginx's `limit_req` would.
    pub fn check(&self, zones: &[u16], ctx: &rules::Ctx<'_>, now: u64, worker: usize) -> Verdict {
        let zone = |z: &u16| &self.zones[*z as usize];
        let [only] = zones else {
            return self.check_all(zones, ctx, now, worker);
        };
        let zone = zone(only);
        let Some(hash) = zone.hash(ctx) else {
            return Verdict::Pass;
        };
        match zone.table.take(hash, now, &zone.bucket, true) {
            Ok(excess) => zone.passed(worker, excess),
            Err(excess) => zone.refused(worker, excess),
        }
    }

    /// [`Limits::check`] for several zones: refused by the first that refuses, with none
    /// counted; else counted in each, and delayed by the longest delay.
    fn check_all(&self, zones: &[u16], ctx: &rules::Ctx<'_>, now: u64, worker: usize) -> Verdict {
        let mut hashes = [None; MAX_PER_REQUEST];
        for (i, z) in zones.iter().enumerate().take(hashes.len()) {
            let zone = &self.zones[*z as usize];
            let Some(hash) = zone.hash(ctx) else {
                continue;
            };
            hashes[i] = Some(hash);
            if let Err(excess) = zone.table.take(hash, now, &zone.bucket, false) {
                let verdict = zone.refused(worker, excess);
                if verdict != Verdict::Pass {
                    return verdict;
                }
                // A zone in dry run that would refuse: the others still count.
                hashes[i] = None;
            }
        }
        let mut longest = Verdict::Pass;
        for (i, z) in zones.iter().enumerate().take(hashes.len()) {
            let (zone, Some(hash)) = (&self.zones[*z as usize], hashes[i]) else {
                continue;
            };
            let verdict = match zone.table.take(hash, now, &zone.bucket, true) {
                Ok(excess) => zone.passed(worker, excess),
                Err(excess) => zone.refused(worker, excess),
            };
            match (verdict, longest) {
                (Verdict::Refuse { .. }, _) => return verdict,
                (Verdict::Delay(ms), Verdict::Delay(longer)) if longer >= ms => {}
                (Verdict::Delay(_), _) => longest = verdict,
                _ => {}
            }
        }
        longest
    }
}

impl Zone {
    /// A request that fit the burst with `excess` left: passed, or delayed beyond the
    /// zone's `delay`.
    fn passed(&self, worker: usize, excess: u64) -> Verdict {
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
    fn refused(&self, worker: usize, excess: u64) -> Verdict {
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

/// `tessera_limit_requests_total{zone,result}` and `tessera_limit_keys{zone}`, for the
/// zones of the configuration serving.
pub(crate) fn write_metrics(out: &mut handler::Metrics, limits: &Limits) {
    for zone in &limits.zones {
        let name = zone.config.name.as_str();
        for (i, result) in RESULTS.iter().enumerate() {
            out.counter(
                "tessera_limit_requests_total",
                "Requests counted by a [[limit]] zone, by result: passed, delayed, refused, \
                 or dry_run (would have been delayed or refused).",
                &[("zone", name), ("result", result)],
                zone.counted(i),
            );
        }
    }
    for zone in &limits.zones {
        out.gauge(
            "tessera_limit_keys",
            "Keys a [[limit]] zone's table holds (at most its memory / 16 bytes).",
            &[("zone", zone.config.name.as_str())],
            zone.table.keys() as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_sizes_read_as_nginx_writes_them() {
        assert_eq!(rate("10r/s"), Ok(10_000));
        assert_eq!(rate("600r/m"), Ok(10_000));
        assert_eq!(rate("1r/m"), Ok(16));
        assert!(rate("10/s").is_err());
        assert!(rate("0r/s").is_err());
        assert_eq!(size("16m"), Ok(16 << 20));
        assert_eq!(size("512K"), Ok(512 << 10));
        assert_eq!(size("4096"), Ok(4096));
        assert!(size("16x").is_err());
        assert!(size("m").is_err());
    }

    fn zone(extra: &str) -> LimitConfig {
        let rate = match extra.contains("rate") {
            true => "",
            false => "rate = \"10r/s\"",
        };
        toml::from_str(&format!("name = \"z\"\n{rate}\n{extra}")).unwrap()
    }

    #[test]
    fn a_bad_zone_is_refused_naming_its_key() {
        let limits = |z: LimitConfig| Limits::new(&[z], &[], &[], 1, None).err().unwrap();
        assert_eq!(
            limits(zone("rate = \"fast\"")),
            "`limit[0].rate`: `fast` is not `Nr/s` or `Nr/m`"
        );
        assert!(limits(zone("burst = 2\ndelay = 3")).starts_with("`limit[0].delay`"));
        assert!(limits(zone("nodelay = true\ndelay = 0")).starts_with("`limit[0].delay`"));
        assert!(limits(zone("memory = \"lots\"")).starts_with("`limit[0].memory`"));
        assert!(limits(zone("status = 200")).starts_with("`limit[0].status`"));
        assert!(limits(zone("key = \"$nope\"")).starts_with("`limit[0].key`"));
        let unknown = Limits::new(&[zone("")], &[], &[(0, &["y".to_string()][..])], 1, None);
        let e = unknown.err().unwrap();
        assert_eq!(e, "`route[0].limit`: no `[[limit]]` is named `y`");
    }

    #[test]
    fn a_zone_carries_over_a_reload_while_its_settings_stay() {
        let first = Limits::new(&[zone("")], &[], &[], 1, None).unwrap();
        let same = Limits::new(&[zone("")], &[], &[], 1, Some(&first)).unwrap();
        assert!(Arc::ptr_eq(&first.zones[0], &same.zones[0]));
        let other = Limits::new(&[zone("burst = 1")], &[], &[], 1, Some(&first)).unwrap();
        assert!(!Arc::ptr_eq(&first.zones[0], &other.zones[0]));
    }
}
