//! The report's sections over what a plain access log lacks: the site of each request
//! (`by host`), the time taken (`slowest routes`), the upstream attempts (`upstream
//! peers`), the cache's answer (`cache by route`) and the ESI includes that failed
//! (`failing ESI fragments`). A format without those fields
//! leaves the sections empty and costs nothing: each tally looks at a field only when the
//! line has it.
//!
//! A route is the log's `route` field (tessera's `%{route}x`); in a log without one
//! (nginx's), the path's first segment stands for it (`/api/v1/x?y` is `/api/`, `/a.css`
//! is `/a.css`). Times are kept in a log-linear histogram per key (16 steps per power of
//! two: a percentile is within 1/16 of the true value), and a map holds at most
//! [`MAX_KEYS`] keys per section: lines past that are counted under `(other)`, so a log
//! of a million distinct paths cannot make the report use gigabytes.

use serde::Serialize;

use crate::format::{seconds_to_micros, Record};
use crate::key::{first_n, Key};

type Map<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// Keys per section and thread (and in the merged total) before `(other)` takes the rest.
pub const MAX_KEYS: usize = 2048;
const OTHER: &[u8] = b"(other)";

/// Log-linear buckets: values below 16 exactly, then 16 per power of two.
const BUCKETS: usize = 16 * 61;

/// Times in microseconds, as a histogram.
#[derive(Debug, Clone)]
struct Latency {
    counts: Box<[u32; BUCKETS]>,
    n: u64,
    max: u64,
}

impl Default for Latency {
    fn default() -> Latency {
        Latency {
            counts: Box::new([0; BUCKETS]),
            n: 0,
            max: 0,
        }
    }
}

fn bucket(micros: u64) -> usize {
    if micros < 16 {
        return micros as usize;
    }
    let exp = 63 - micros.leading_zeros() as usize; // 4 and up
    let step = ((micros >> (exp - 4)) & 15) as usize;
    ((exp - 3) * 16 + step).min(BUCKETS - 1)
}

/// The largest value bucket `i` holds.
fn bucket_top(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let exp = i / 16 + 3;
    let step = (i % 16) as u64;
    let top = (u128::from(16 + step + 1) << (exp - 4)) - 1;
    top.min(u128::from(u64::MAX)) as u64
}

impl Latency {
    #[inline]
    fn add(&mut self, micros: u64) {
        self.counts[bucket(micros)] += 1;
        self.n += 1;
        self.max = self.max.max(micros);
    }

    fn absorb(&mut self, other: Latency) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.n += other.n;
        self.max = self.max.max(other.max);
    }

    /// The `p`-th percentile (0 < p <= 100): the top of the bucket that holds it, never
    /// more than the largest value seen.
    fn percentile(&self, p: u64) -> u64 {
        let rank = (self.n * p).div_ceil(100).max(1);
        let mut seen = 0;
        for (i, &count) in self.counts.iter().enumerate() {
            seen += u64::from(count);
            if seen >= rank {
                return bucket_top(i).min(self.max);
            }
        }
        self.max
    }
}

#[derive(Debug, Default, Clone)]
struct HostTally {
    hits: u64,
    bytes: u64,
    client_errors: u64,
    server_errors: u64,
}

#[derive(Debug, Default, Clone)]
struct PeerTally {
    /// Attempts by status class: 1xx to 5xx; [0] for an attempt without a status (the
    /// peer could not be reached or did not answer: nginx's `-` or `502` without one).
    classes: [u64; 6],
    latency: Latency,
}

/// The cache results counted by name; anything else is `other`.
pub const CACHE_RESULTS: [&str; 10] = [
    "hit",
    "miss",
    "stale",
    "expired",
    "updating",
    "revalidated",
    "collapsed",
    "bypass",
    "pass",
    "other",
];
/// The results that answered without a full fetch from the origin for this request.
const SERVED_FROM_CACHE: [&str; 5] = ["hit", "stale", "updating", "revalidated", "collapsed"];

/// One thread's (or the total's) counts for the sections.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sections {
    hosts: Map<Key, HostTally>,
    routes: Map<Key, Latency>,
    peers: Map<Key, PeerTally>,
    cache: Map<Key, [u64; CACHE_RESULTS.len()]>,
    /// Failures by ESI include URL.
    fragments: Map<Key, u64>,
}

/// The slot of `key` in `map`, or `(other)`'s when the map is full.
fn slot<'m, V: Default>(map: &'m mut Map<Key, V>, key: &[u8]) -> &'m mut V {
    let key = if map.len() >= MAX_KEYS && !map.contains_key(key) {
        OTHER
    } else {
        key
    };
    map.entry_ref(key).or_default()
}

/// A line's route: its `route` field, else its path's first segment.
fn route_of<'a>(r: &Record<'a>) -> &'a [u8] {
    if !r.route.is_empty() {
        return r.route;
    }
    let path = match memchr::memchr(b'?', r.path) {
        Some(q) => &r.path[..q],
        None => r.path,
    };
    match path.iter().skip(1).position(|&b| b == b'/') {
        Some(i) => &path[..i + 2],
        None => path,
    }
}

/// The attempts of an nginx-style list: `a, b : c`.
fn attempts(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',' || b == b':')
        .map(|s| s.trim_ascii())
        .filter(|s| !s.is_empty())
}

/// Attempts split on `, ` and ` : ` only (an address holds `:` before its port).
fn peer_list(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = list;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = (0..rest.len())
            .find(|&i| rest[i..].starts_with(b", ") || rest[i..].starts_with(b" : "))
            .unwrap_or(rest.len());
        let item = &rest[..end];
        rest = rest
            .get(end + 2..)
            .map_or(&[][..], <[u8]>::trim_ascii_start);
        Some(item.trim_ascii())
    })
}

impl Sections {
    #[inline]
    pub(crate) fn add(&mut self, r: &Record<'_>) {
        if !r.vhost.is_empty() {
            let host = slot(&mut self.hosts, r.vhost);
            host.hits += 1;
            host.bytes += r.bytes;
            match r.status {
                400..=499 => host.client_errors += 1,
                500..=599 => host.server_errors += 1,
                _ => {}
            }
        }
        if let Some(micros) = r.micros {
            slot(&mut self.routes, route_of(r)).add(micros);
        }
        if !r.upstream_addr.is_empty() {
            self.add_attempts(r);
        }
        if !r.cache.is_empty() {
            let name = r.cache.to_ascii_lowercase();
            let i = CACHE_RESULTS
                .iter()
                .position(|n| n.as_bytes() == name)
                .unwrap_or(CACHE_RESULTS.len() - 1);
            slot(&mut self.cache, route_of(r))[i] += 1;
        }
        if !r.esi_failed.is_empty() {
            self.add_failed_fragments(r.esi_failed);
        }
    }

    #[cold]
    fn add_failed_fragments(&mut self, list: &[u8]) {
        for url in peer_list(list) {
            *slot(&mut self.fragments, url) += 1;
        }
    }

    #[cold]
    fn add_attempts(&mut self, r: &Record<'_>) {
        let mut statuses = attempts(r.upstream_status);
        let mut times = attempts(r.upstream_time);
        for peer in peer_list(r.upstream_addr) {
            let status = statuses.next().unwrap_or_default();
            let time = times.next().and_then(seconds_to_micros);
            let tally = slot(&mut self.peers, peer);
            let class = match status {
                [c @ b'1'..=b'5', _, _] => usize::from(c - b'0'),
                _ => 0,
            };
            tally.classes[class] += 1;
            if let Some(micros) = time {
                tally.latency.add(micros);
            }
        }
    }

    pub(crate) fn absorb(&mut self, other: Sections) {
        merge(&mut self.hosts, other.hosts, |a, b| {
            a.hits += b.hits;
            a.bytes += b.bytes;
            a.client_errors += b.client_errors;
            a.server_errors += b.server_errors;
        });
        merge(&mut self.routes, other.routes, Latency::absorb);
        merge(&mut self.peers, other.peers, |a, b| {
            for (x, y) in a.classes.iter_mut().zip(b.classes) {
                *x += y;
            }
            a.latency.absorb(b.latency);
        });
        merge(&mut self.cache, other.cache, |a, b| {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        });
        merge(&mut self.fragments, other.fragments, |a, b| *a += b);
    }

    pub(crate) fn report(&self, n: usize) -> SectionsReport {
        let text = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        let mut hosts: Vec<_> = self.hosts.iter().map(|(k, v)| (&k[..], v)).collect();
        first_n(&mut hosts, n, |a, b| {
            b.1.hits.cmp(&a.1.hits).then_with(|| a.0.cmp(b.0))
        });
        let mut routes: Vec<_> = self.routes.iter().map(|(k, v)| (&k[..], v)).collect();
        first_n(&mut routes, n, |a, b| {
            let (pa, pb) = (a.1.percentile(95), b.1.percentile(95));
            pb.cmp(&pa).then_with(|| a.0.cmp(b.0))
        });
        let mut peers: Vec<_> = self.peers.iter().map(|(k, v)| (&k[..], v)).collect();
        let attempts = |p: &PeerTally| p.classes.iter().sum::<u64>();
        first_n(&mut peers, n, |a, b| {
            attempts(b.1).cmp(&attempts(a.1)).then_with(|| a.0.cmp(b.0))
        });
        let mut cache: Vec<_> = self.cache.iter().map(|(k, v)| (&k[..], v)).collect();
        let total = |c: &[u64; CACHE_RESULTS.len()]| c.iter().sum::<u64>();
        first_n(&mut cache, n, |a, b| {
            total(b.1).cmp(&total(a.1)).then_with(|| a.0.cmp(b.0))
        });
        let mut fragments: Vec<_> = self.fragments.iter().map(|(k, v)| (&k[..], *v)).collect();
        first_n(&mut fragments, n, |a, b| {
            b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0))
        });
        SectionsReport {
            failing_esi_fragments: fragments
                .into_iter()
                .map(|(k, failures)| FragmentRow {
                    fragment: text(k),
                    failures,
                })
                .collect(),
            hosts: hosts
                .into_iter()
                .map(|(k, h)| HostRow {
                    host: text(k),
                    hits: h.hits,
                    bytes: h.bytes,
                    client_errors: h.client_errors,
                    server_errors: h.server_errors,
                })
                .collect(),
            slowest_routes: routes
                .into_iter()
                .map(|(k, l)| LatencyRow {
                    route: text(k),
                    hits: l.n,
                    p50_us: l.percentile(50),
                    p95_us: l.percentile(95),
                    p99_us: l.percentile(99),
                    max_us: l.max,
                })
                .collect(),
            upstream_peers: peers
                .into_iter()
                .map(|(k, p)| PeerRow {
                    peer: text(k),
                    attempts: attempts(p),
                    no_status: p.classes[0],
                    status_2xx: p.classes[2],
                    status_3xx: p.classes[3],
                    status_4xx: p.classes[4],
                    status_5xx: p.classes[5],
                    p50_us: (p.latency.n > 0).then(|| p.latency.percentile(50)),
                    p95_us: (p.latency.n > 0).then(|| p.latency.percentile(95)),
                    p99_us: (p.latency.n > 0).then(|| p.latency.percentile(99)),
                })
                .collect(),
            cache_by_route: cache
                .into_iter()
                .map(|(k, counts)| CacheRow {
                    route: text(k),
                    total: total(counts),
                    served_from_cache: CACHE_RESULTS
                        .iter()
                        .zip(counts)
                        .filter(|(name, _)| SERVED_FROM_CACHE.contains(name))
                        .map(|(_, n)| n)
                        .sum(),
                    results: CACHE_RESULTS
                        .iter()
                        .zip(counts)
                        .filter(|(_, &n)| n > 0)
                        .map(|(name, &n)| KeyCount {
                            key: name.to_string(),
                            hits: n,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Adds `counts` into `total`, keeping at most [`MAX_KEYS`] keys (the rest into `(other)`).
fn merge<V: Default>(total: &mut Map<Key, V>, counts: Map<Key, V>, add: impl Fn(&mut V, V)) {
    if total.is_empty() {
        *total = counts;
        return;
    }
    for (key, value) in counts {
        add(slot(total, &key), value);
    }
}

/// The sections of the finished report; each list is empty when the log lacks its fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SectionsReport {
    /// By site (`%v`, `$host`, JSON `host`), most hits first.
    pub hosts: Vec<HostRow>,
    /// By route (or first path segment), the highest 95th percentile first.
    pub slowest_routes: Vec<LatencyRow>,
    /// By upstream peer, one count per attempt, most attempts first.
    pub upstream_peers: Vec<PeerRow>,
    /// The cache's answers by route (or first path segment), most requests first.
    pub cache_by_route: Vec<CacheRow>,
    /// ESI includes that failed (`%{esi_failed}x`, JSON `esi_failed`), by URL, most
    /// failures first.
    pub failing_esi_fragments: Vec<FragmentRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FragmentRow {
    /// The include's URL as logged (resolved against its page).
    pub fragment: String,
    /// Pages whose assembly it failed in (its `alt` counts apart, under its own URL).
    pub failures: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRow {
    pub host: String,
    pub hits: u64,
    pub bytes: u64,
    /// 4xx responses.
    pub client_errors: u64,
    /// 5xx responses.
    pub server_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatencyRow {
    pub route: String,
    pub hits: u64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerRow {
    pub peer: String,
    pub attempts: u64,
    /// Attempts without a status: the peer could not be reached or did not answer.
    pub no_status: u64,
    pub status_2xx: u64,
    pub status_3xx: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    /// Percentiles of the attempts' times (`None` when the log has no times).
    pub p50_us: Option<u64>,
    pub p95_us: Option<u64>,
    pub p99_us: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheRow {
    pub route: String,
    /// Requests with a cache result.
    pub total: u64,
    /// Of those, answered without a full fetch from the origin: hit, stale, updating,
    /// revalidated, collapsed.
    pub served_from_cache: u64,
    /// The count of each result seen (names lower-cased; unknown ones as `other`).
    pub results: Vec<KeyCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyCount {
    pub key: String,
    pub hits: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values_within_a_sixteenth() {
        for v in [
            0,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            999,
            1_000,
            65_535,
            1 << 40,
            u64::MAX,
        ] {
            let i = bucket(v);
            assert!(
                bucket_top(i) >= v,
                "{v}: bucket {i} tops at {}",
                bucket_top(i)
            );
            if v >= 16 && i < BUCKETS - 1 {
                assert!(bucket_top(i) - v <= v / 16, "{v}: {}", bucket_top(i));
            }
            if i > 0 {
                assert!(bucket_top(i - 1) < v, "{v}");
            }
        }
    }

    #[test]
    fn percentiles_of_a_known_spread() {
        let mut l = Latency::default();
        for v in 1..=1000 {
            l.add(v * 100);
        }
        for (p, want) in [(50, 50_000u64), (95, 95_000), (99, 99_000)] {
            let got = l.percentile(p);
            assert!(got >= want && got - want <= want / 16, "p{p}: {got}");
        }
        assert_eq!(l.percentile(100), 100_000);
    }

    #[test]
    fn nginx_attempt_lists_split_like_nginx_writes_them() {
        let peers: Vec<_> = peer_list(b"10.0.0.1:80, 10.0.0.2:80 : unix:/run/a.sock").collect();
        assert_eq!(
            peers,
            [&b"10.0.0.1:80"[..], b"10.0.0.2:80", b"unix:/run/a.sock"]
        );
        let statuses: Vec<_> = attempts(b"502, 504 : 200").collect();
        assert_eq!(statuses, [&b"502"[..], b"504", b"200"]);
    }

    #[test]
    fn routes_fall_back_to_the_first_segment() {
        let r = |path: &'static [u8], route: &'static [u8]| Record {
            path,
            route,
            ..Record::default()
        };
        assert_eq!(route_of(&r(b"/api/v1/x?y=1", b"")), b"/api/");
        assert_eq!(route_of(&r(b"/a.css?v=2", b"")), b"/a.css");
        assert_eq!(route_of(&r(b"/", b"")), b"/");
        assert_eq!(route_of(&r(b"/api/v1", b"route[2]")), b"route[2]");
    }

    #[test]
    fn keys_past_the_limit_go_to_other() {
        let mut s = Sections::default();
        for i in 0..MAX_KEYS + 10 {
            let path = format!("/p{i}");
            s.add(&Record {
                path: path.as_bytes(),
                micros: Some(5),
                ..Record::default()
            });
        }
        assert_eq!(s.routes.len(), MAX_KEYS + 1);
        assert_eq!(s.routes[OTHER].n, 10);
    }
}
