//! Request limits (docs/security.md, "Request limits"): `[[limit]]` zones, each a key
//! (variables as in the routing rules) and nginx's `limit_req` bucket, named by the
//! `limit` list of a `[[route]]` or a `[[host]]`; and `limit_conn`, the requests of a key
//! in flight at once (nginx's `limit_conn`). A zone's state is a [`table::Table`] of
//! fixed size that every worker shares; a zone lives across reloads while its settings
//! stay the same.
//!
//! On the request path: the zones of the request's route (else of its host), the key
//! expanded (the client's address is hashed as its bytes, nothing formatted), one hash,
//! one compare-and-swap per zone. Several zones on one route are checked as nginx does:
//! each is looked at first, and only when none refuses are they all counted. A zone
//! with `redis = true` spends tokens it takes from Redis in batches (`cluster.rs`);
//! `limit_conn` and `limit_conn_per_client` count what is in flight (`conns.rs`).

mod cluster;
mod config;
pub(crate) mod conns;
mod key;
pub(crate) mod table;
mod zone;

use std::sync::Arc;

pub use cluster::LimitRedis;
pub use config::LimitConfig;
pub(crate) use config::{size, MAX_PER_REQUEST};
use conns::InFlight;
pub(crate) use conns::{Held, PerClient};
pub(crate) use zone::Verdict;
use zone::{Zone, RESULTS};

/// What a host or a route says of limits: its site, its `limit` and its `limit_conn`.
pub(crate) struct Named<'a> {
    pub site: usize,
    pub limit: &'a [String],
    pub limit_conn: Option<&'a rules::config::LimitConn>,
}

/// What a site's host or one of its routes is limited by.
#[derive(Default, Clone)]
struct Lists {
    /// Indices of `Limits::zones`.
    zones: Box<[u16]>,
    /// Its `limit_conn`.
    in_flight: Option<Arc<InFlight>>,
}

/// The zones of one configuration and who names them.
#[derive(Default)]
pub(crate) struct Limits {
    zones: Vec<Arc<Zone>>,
    /// Per site: its host's lists, for requests no route with its own takes.
    by_site: Vec<Lists>,
    /// Per site, per route (its index among the site's routes): its own lists.
    by_rule: Vec<Vec<Own>>,
}

/// A route's own `limit` and `limit_conn` (`None`: its host's).
#[derive(Clone, Default)]
struct Own {
    zones: Option<Box<[u16]>>,
    in_flight: Option<Arc<InFlight>>,
}

impl Limits {
    /// The zones of `zones` (their state taken from `previous` where the settings did
    /// not change) and the lists of the sites' hosts and routes (each route with its
    /// site, in file order).
    /// `redis`: where zones with `redis = true` keep their counts.
    pub fn new(
        (zones, redis): (&[LimitConfig], Option<&LimitRedis>),
        (hosts, routes): (&[Named<'_>], &[Named<'_>]),
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
                .and_then(|p| p.zones.iter().find(|z| z.same(config, redis)))
                .cloned();
            let zone = match kept {
                Some(zone) => zone,
                None => Arc::new(
                    Zone::new(config, workers, redis)
                        .map_err(|(key, e)| format!("`limit[{i}].{key}`: {e}"))?,
                ),
            };
            limits.zones.push(zone);
        }
        let zones = &limits.zones;
        let previous_in_flight = |at: &str| -> Vec<Arc<InFlight>> {
            let Some(p) = previous else {
                return Vec::new();
            };
            let sites = p.by_site.iter().filter_map(|l| l.in_flight.clone());
            let rules = p
                .by_rule
                .iter()
                .flatten()
                .filter_map(|r| r.in_flight.clone());
            sites.chain(rules).filter(|f| f.at == at).collect()
        };
        let lists = |named: &Named<'_>, at: &str| -> Result<Lists, String> {
            let in_flight = match named.limit_conn {
                Some(config) => {
                    let kept = previous_in_flight(at).into_iter().find(|f| f.same(config));
                    Some(match kept {
                        Some(kept) => kept,
                        None => Arc::new(InFlight::new(config, at)?),
                    })
                }
                None => None,
            };
            Ok(Lists {
                zones: find(zones, named.limit, at)?,
                in_flight,
            })
        };
        limits.by_site = vec![Lists::default()];
        for host in hosts {
            let list = lists(host, &format!("host[{}]", host.site - 1))?;
            limits.by_site.push(list);
        }
        let mut by_rule: Vec<Vec<_>> = vec![Vec::new(); hosts.len() + 1];
        for route in routes {
            let site_routes = &mut by_rule[route.site];
            let at = match route.site {
                0 => format!("route[{}]", site_routes.len()),
                s => format!("host[{}].route[{}]", s - 1, site_routes.len()),
            };
            let list = lists(route, &at)?;
            site_routes.push(Own {
                zones: (!route.limit.is_empty()).then_some(list.zones),
                in_flight: list.in_flight,
            });
        }
        limits.by_rule = by_rule;
        Ok(limits)
    }

    /// Whether any route or host names a zone or has a `limit_conn` (else requests skip
    /// the limits at once).
    pub fn any(&self) -> bool {
        self.by_site
            .iter()
            .any(|l| !l.zones.is_empty() || l.in_flight.is_some())
            || (self.by_rule.iter().flatten()).any(|o| o.zones.is_some() || o.in_flight.is_some())
    }

    /// The zones of a request of `site` that `rule` routed (else its host's).
    pub fn of(&self, site: usize, rule: Option<usize>) -> &[u16] {
        let own = rule.and_then(|r| self.by_rule.get(site)?.get(r)?.zones.as_deref());
        own.or_else(|| self.by_site.get(site).map(|l| &l.zones[..]))
            .unwrap_or_default()
    }

    /// Takes a place among the requests of its key in flight for a request of `site`
    /// that `rule` routed, per its route's `limit_conn` (else its host's): `Ok(None)`
    /// without one or when the key is empty, `Err(status)` when the key has `max`
    /// requests in flight already.
    pub fn hold(
        &self,
        site: usize,
        rule: Option<usize>,
        ctx: &rules::Ctx<'_>,
    ) -> Result<Option<Held>, u16> {
        let own = rule.and_then(|r| self.by_rule.get(site)?.get(r)?.in_flight.as_ref());
        let in_flight = own.or_else(|| self.by_site.get(site)?.in_flight.as_ref());
        match in_flight {
            Some(in_flight) => in_flight.take(ctx),
            None => Ok(None),
        }
    }

    /// Counts a request in `zones` at `now` (the worker's clock, milliseconds; and the
    /// wall clock's, for zones shared through Redis) and says whether it passes, waits
    /// or is refused, as nginx's `limit_req` would.
    pub fn check(
        &self,
        zones: &[u16],
        ctx: &rules::Ctx<'_>,
        now: (u64, u64),
        worker: usize,
    ) -> Verdict {
        let [only] = zones else {
            return self.check_all(zones, ctx, now, worker);
        };
        let zone = &self.zones[*only as usize];
        match zone.key.hash(ctx) {
            Some(hash) => zone.decide(hash, now, worker),
            None => Verdict::Pass,
        }
    }

    /// [`Limits::check`] for several zones: refused by the first that refuses, with none
    /// counted; else counted in each, and delayed by the longest delay. A zone shared
    /// through Redis is not looked at first: it counts when it is reached.
    fn check_all(
        &self,
        zones: &[u16],
        ctx: &rules::Ctx<'_>,
        now: (u64, u64),
        worker: usize,
    ) -> Verdict {
        let mut hashes = [None; MAX_PER_REQUEST];
        for (i, z) in zones.iter().enumerate().take(hashes.len()) {
            let zone = &self.zones[*z as usize];
            let Some(hash) = zone.key.hash(ctx) else {
                continue;
            };
            hashes[i] = Some(hash);
            if zone.cluster.is_some() {
                continue;
            }
            if let Err(excess) = zone.table.take(hash, now.0, &zone.bucket, false) {
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
            let verdict = zone.decide(hash, now, worker);
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

/// The zones of `names` (`at`: where they were named, for errors).
fn find(zones: &[Arc<Zone>], names: &[String], at: &str) -> Result<Box<[u16]>, String> {
    if names.len() > MAX_PER_REQUEST {
        return Err(format!("`{at}.limit`: at most {MAX_PER_REQUEST} zones"));
    }
    (names.iter())
        .map(
            |name| match zones.iter().position(|z| z.config.name == *name) {
                Some(i) => Ok(i as u16),
                None => Err(format!("`{at}.limit`: no `[[limit]]` is named `{name}`")),
            },
        )
        .collect()
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
    for (zone, cluster) in (limits.zones.iter()).filter_map(|z| Some((z, z.cluster.as_ref()?))) {
        let name = zone.config.name.as_str();
        out.gauge(
            "tessera_limit_redis_up",
            "Whether a [[limit]] zone shared through Redis reached it the last time it asked \
             (0: its local limits decide alone until it answers again).",
            &[("zone", name)],
            if cluster.up() { 1.0 } else { 0.0 },
        );
        out.counter(
            "tessera_limit_redis_fallbacks_total",
            "Requests a [[limit]] zone shared through Redis decided by its local limits \
             alone, Redis being unreachable.",
            &[("zone", name)],
            cluster.fallbacks(),
        );
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

    fn zone(extra: &str) -> LimitConfig {
        let rate = match extra.contains("rate") {
            true => "",
            false => "rate = \"10r/s\"",
        };
        toml::from_str(&format!("name = \"z\"\n{rate}\n{extra}")).unwrap()
    }

    #[test]
    fn a_bad_zone_is_refused_naming_its_key() {
        let limits = |z: LimitConfig| {
            Limits::new((&[z], None), (&[], &[]), 1, None)
                .err()
                .unwrap()
        };
        assert_eq!(
            limits(zone("rate = \"fast\"")),
            "`limit[0].rate`: `fast` is not `Nr/s` or `Nr/m`"
        );
        assert!(limits(zone("burst = 2\ndelay = 3")).starts_with("`limit[0].delay`"));
        assert!(limits(zone("nodelay = true\ndelay = 0")).starts_with("`limit[0].delay`"));
        assert!(limits(zone("memory = \"lots\"")).starts_with("`limit[0].memory`"));
        assert!(limits(zone("status = 200")).starts_with("`limit[0].status`"));
        assert!(limits(zone("key = \"$nope\"")).starts_with("`limit[0].key`"));
        let names = ["y".to_string()];
        let route = Named {
            site: 0,
            limit: &names,
            limit_conn: None,
        };
        let unknown = Limits::new((&[zone("")], None), (&[], &[route]), 1, None);
        let e = unknown.err().unwrap();
        assert_eq!(e, "`route[0].limit`: no `[[limit]]` is named `y`");
    }

    #[test]
    fn a_zone_carries_over_a_reload_while_its_settings_stay() {
        let first = Limits::new((&[zone("")], None), (&[], &[]), 1, None).unwrap();
        let same = Limits::new((&[zone("")], None), (&[], &[]), 1, Some(&first)).unwrap();
        assert!(Arc::ptr_eq(&first.zones[0], &same.zones[0]));
        let other = Limits::new((&[zone("burst = 1")], None), (&[], &[]), 1, Some(&first)).unwrap();
        assert!(!Arc::ptr_eq(&first.zones[0], &other.zones[0]));
    }
}
