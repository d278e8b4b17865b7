//! `logs report`: the operator's questions of a log (what was fetched, what failed, who
//! sent the traffic, when) answered in one pass.
//!
//! Each thread tallies into its own maps, looked up by slices of the log (a key is copied
//! only the first time the thread sees it). Unique visitors are distinct
//! (client, day, user agent), as GoAccess counts them. Clients and agents are numbered per
//! thread when first seen, and each line appends its (client, agent, day) as one integer
//! to a list that is sorted and deduplicated when it grows large and at the end: a
//! sequential write per line instead of a set lookup per line, which (as a set, then as
//! per-client lists) cost a third of the report's time in profiles. The merge translates
//! the numbers into global ones.

use serde::Serialize;

use crate::format::LogFormat;
use crate::input::{Job, Opened, Options, Progress};
use crate::key::{first_n, Key};
use crate::sections::{Sections, SectionsReport};
use crate::time::{format_hour, HourCache};
use crate::Error;

type Map<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// Hits and bytes of one URL, client or hour.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    pub hits: u64,
    pub bytes: u64,
}

impl Traffic {
    #[inline]
    fn add(&mut self, bytes: u64) {
        self.hits += 1;
        self.bytes += bytes;
    }
    fn absorb(&mut self, other: Traffic) {
        self.hits += other.hits;
        self.bytes += other.bytes;
    }
}

/// A `report` query: the format and which referrer hosts are the site's own.
#[derive(Debug, Clone)]
pub struct ReportQuery {
    format: LogFormat,
    /// Lower-cased host names whose referrers are internal navigation, not referrals.
    own_hosts: Vec<Vec<u8>>,
}

/// Everything the report is made from, merged from all threads.
#[derive(Debug, Default, Clone)]
pub struct Analysis {
    /// Non-empty lines read.
    pub lines: u64,
    /// Lines that did not fit the format; counted and skipped.
    pub malformed: u64,
    pub hits: u64,
    pub bytes: u64,
    urls: Map<Key, Traffic>,
    not_found: Map<Key, u64>,
    referrers: Map<Key, u64>,
    statuses: Map<u16, u64>,
    hours: Map<i64, Traffic>,
    /// Traffic and number (in order of first appearance) of each client.
    clients: Map<Key, ClientTally>,
    agents: Map<Key, (u64, u32)>,
    visitors: VisitorSet,
    sections: Sections,
}

/// The distinct visits of a total: a sorted, deduplicated list, and the visits merged in
/// since, folded into the list once they are as many as it holds (so that merging many
/// streamed blocks stays n log n). A sorted merge instead of a hash set: inserting each
/// thread's visits into a set was three quarters of the (single-threaded) merge.
#[derive(Debug, Default, Clone)]
struct VisitorSet {
    sorted: Vec<u128>,
    pending: Vec<u128>,
}

impl VisitorSet {
    fn extend(&mut self, visits: impl IntoIterator<Item = u128>) {
        self.pending.extend(visits);
        if self.pending.len() >= self.sorted.len().max(1 << 16) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_unstable();
        pending.dedup();
        self.sorted = merge_sorted(&self.sorted, &pending);
    }

    fn len(&self) -> usize {
        if self.pending.is_empty() {
            self.sorted.len()
        } else {
            let mut all = self.clone();
            all.flush();
            all.sorted.len()
        }
    }
}

/// The union of two sorted, deduplicated lists, sorted and deduplicated.
fn merge_sorted(a: &[u128], b: &[u128]) -> Vec<u128> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        out.push(x.min(y));
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// One visit: (client number, agent number, day) packed into one integer so that a
/// thread's visits sort and deduplicate as plain numbers.
#[inline]
fn pack_visit(client: u32, agent: u32, day: i32) -> u128 {
    (client as u128) << 64 | (agent as u128) << 32 | day as u32 as u128
}

fn unpack_visit(visit: u128) -> (u32, u32, i32) {
    (
        (visit >> 64) as u32,
        (visit >> 32) as u32,
        visit as u32 as i32,
    )
}

/// Visits appended per line, compacted (sorted, deduplicated) whenever the list reaches
/// `compact_at`, so memory follows the number of distinct visitors, not of lines.
struct Visits {
    list: Vec<u128>,
    compact_at: usize,
}

impl Visits {
    /// 1 Mi visits (16 MiB) before the first compaction.
    const FIRST_COMPACTION: usize = 1 << 20;

    fn new() -> Visits {
        Visits {
            list: Vec::new(),
            compact_at: Self::FIRST_COMPACTION,
        }
    }

    #[inline]
    fn push(&mut self, visit: u128) {
        self.list.push(visit);
        if self.list.len() >= self.compact_at {
            self.compact();
            // Mostly distinct visits: compacting again soon would gain little.
            if self.list.len() > self.compact_at / 2 {
                self.compact_at *= 2;
            }
        }
    }

    fn compact(&mut self) {
        self.list.sort_unstable();
        self.list.dedup();
    }
}

/// A thread's tally. Keys are copied out of the log the first time they are seen (see
/// [`Key`]): a key borrowed from the map would point back to wherever in the file it
/// first appeared, and every later lookup would pay a cache miss to compare against it.
pub(crate) struct Tally {
    lines: u64,
    malformed: u64,
    hits: u64,
    bytes: u64,
    urls: Map<Key, Traffic>,
    not_found: Map<Key, u64>,
    referrers: Map<Key, u64>,
    statuses: Vec<u64>,
    hours: Map<i64, Traffic>,
    /// The hour of the lines just read and their traffic, added to `hours` when the hour
    /// changes: a log is in time order, so this saves a map lookup per line.
    hour: Option<(i64, Traffic)>,
    hour_cache: HourCache,
    clients: Map<Key, ClientTally>,
    agents: Map<Key, (u64, u32)>,
    visits: Visits,
    sections: Sections,
}

/// A client as a thread sees it: traffic, number, and which of its visits on `day` were
/// appended already. A client's lines mostly repeat one of its few visits of the day
/// (same browser, same day): those need not be appended again, which keeps the visit
/// list (and its sorting) near the number of distinct visits instead of lines.
#[derive(Debug, Clone)]
struct ClientTally {
    traffic: Traffic,
    id: u32,
    /// The day of the visits `agents` and `last_agent` record.
    day: i32,
    /// Bit `a` set: the visit (this client, agent `a`, `day`) was appended, for the
    /// first 32 agent numbers (the common agents, numbered when first seen).
    agents: u32,
    /// The last agent numbered 32 or more appended on `day`, or `NO_AGENT`.
    last_agent: u32,
}

/// No agent has this number: a thread would need 2^32 distinct agents first.
const NO_AGENT: u32 = u32::MAX;

impl ClientTally {
    fn new(id: u32) -> ClientTally {
        ClientTally {
            traffic: Traffic::default(),
            id,
            day: 0,
            agents: 0,
            last_agent: NO_AGENT,
        }
    }

    /// Whether (this client, `agent`, `day`) is a visit not yet appended; records it.
    #[inline]
    fn first_visit(&mut self, agent: u32, day: i32) -> bool {
        if day != self.day {
            self.day = day;
            self.agents = 0;
            self.last_agent = NO_AGENT;
        }
        if agent < 32 {
            let bit = 1 << agent;
            let first = self.agents & bit == 0;
            self.agents |= bit;
            first
        } else {
            let first = self.last_agent != agent;
            self.last_agent = agent;
            first
        }
    }
}

impl ReportQuery {
    /// `own_hosts` are host names (any case) whose referrers are left out of the top
    /// referrers; with a vhost field in the format, the line's own vhost is too.
    pub fn new(format: LogFormat, own_hosts: &[String]) -> ReportQuery {
        let own_hosts = own_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase().into_bytes())
            .collect();
        ReportQuery { format, own_hosts }
    }

    pub fn format(&self) -> &LogFormat {
        &self.format
    }

    /// Runs the report over opened inputs.
    pub fn run(
        &self,
        inputs: &mut Opened,
        opts: &Options,
        progress: Option<Progress<'_>>,
    ) -> Result<Analysis, Error> {
        let mut total = inputs.run(self, Analysis::default(), opts, progress)?;
        total.visitors.flush();
        Ok(total)
    }

    /// Analyses one block of lines on the calling thread.
    pub fn analyse_block(&self, block: &[u8]) -> Analysis {
        let mut tally = self.tally();
        self.scan(&mut tally, block);
        let mut total = Analysis::default();
        self.merge(&mut total, tally);
        total.visitors.flush();
        total
    }

    fn is_own_referrer(&self, referer: &[u8], vhost: &[u8]) -> bool {
        if vhost.is_empty() && self.own_hosts.is_empty() {
            return false;
        }
        let Some(host) = referrer_host(referer) else {
            return false;
        };
        (!vhost.is_empty() && host.eq_ignore_ascii_case(vhost))
            || self
                .own_hosts
                .iter()
                .any(|own| host.eq_ignore_ascii_case(own))
    }
}

/// The host of an absolute URL: between `://` and the next `/`, `:`, `?` or `#`.
fn referrer_host(url: &[u8]) -> Option<&[u8]> {
    let colon = memchr::memchr(b':', url)?;
    let rest = url[colon + 1..].strip_prefix(b"//")?;
    let end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b':' | b'?' | b'#'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

impl Job for ReportQuery {
    type Tally = Tally;
    type Total = Analysis;

    fn tally(&self) -> Tally {
        Tally {
            lines: 0,
            malformed: 0,
            hits: 0,
            bytes: 0,
            urls: Map::default(),
            not_found: Map::default(),
            referrers: Map::default(),
            statuses: vec![0; 1000],
            hours: Map::default(),
            hour: None,
            hour_cache: HourCache::default(),
            clients: Map::default(),
            agents: Map::default(),
            visits: Visits::new(),
            sections: Sections::default(),
        }
    }

    fn scan(&self, t: &mut Tally, block: &[u8]) {
        let mut rest = block;
        while !rest.is_empty() {
            let (line, next) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            rest = next;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            t.lines += 1;
            let Some(r) = self.format.parse_line_with(line, &mut t.hour_cache) else {
                t.malformed += 1;
                continue;
            };
            t.hits += 1;
            t.bytes += r.bytes;
            t.sections.add(&r);
            t.statuses[r.status as usize] += 1;
            if !r.path.is_empty() {
                t.urls.entry_ref(r.path).or_default().add(r.bytes);
                if r.status == 404 {
                    *t.not_found.entry_ref(r.path).or_default() += 1;
                }
            }
            if !r.referer.is_empty()
                && r.referer != b"-"
                && !self.is_own_referrer(r.referer, r.vhost)
            {
                *t.referrers.entry_ref(r.referer).or_default() += 1;
            }
            let next_id = t.agents.len() as u32;
            let agent = t.agents.entry_ref(r.user_agent).or_insert((0, next_id));
            agent.0 += 1;
            let agent_id = agent.1;
            let day = match r.hour {
                Some(hour) => {
                    match &mut t.hour {
                        Some((current, traffic)) if *current == hour => traffic.add(r.bytes),
                        current => {
                            if let Some((done, traffic)) = current.take() {
                                t.hours.entry(done).or_default().absorb(traffic);
                            }
                            let mut traffic = Traffic::default();
                            traffic.add(r.bytes);
                            *current = Some((hour, traffic));
                        }
                    }
                    hour.div_euclid(24) as i32
                }
                None => i32::MIN,
            };
            let next_id = t.clients.len() as u32;
            let client = t
                .clients
                .entry_ref(r.client)
                .or_insert_with(|| ClientTally::new(next_id));
            client.traffic.add(r.bytes);
            if client.first_visit(agent_id, day) {
                t.visits.push(pack_visit(client.id, agent_id, day));
            }
        }
    }

    fn finish(&self, t: &mut Tally) {
        t.visits.compact();
    }

    fn merge(&self, total: &mut Analysis, t: Tally) {
        total.lines += t.lines;
        total.malformed += t.malformed;
        total.hits += t.hits;
        total.bytes += t.bytes;
        total.sections.absorb(t.sections);
        absorb(&mut total.urls, t.urls, Traffic::absorb);
        absorb(&mut total.not_found, t.not_found, |a, b| *a += b);
        absorb(&mut total.referrers, t.referrers, |a, b| *a += b);
        for (status, &n) in t.statuses.iter().enumerate() {
            if n > 0 {
                *total.statuses.entry(status as u16).or_default() += n;
            }
        }
        for (hour, traffic) in t.hours.into_iter().chain(t.hour) {
            total.hours.entry(hour).or_default().absorb(traffic);
        }
        let mut visits = t.visits;
        visits.compact(); // already done by `finish`, except for streamed blocks
        if total.agents.is_empty() && total.clients.is_empty() {
            // The first tally: its numbers become the total's, and its visits (sorted,
            // distinct) the total's as they are.
            total.agents = t.agents;
            total.clients = t.clients;
            total.visitors.extend(visits.list);
            return;
        }
        // Translate this thread's agent numbers into the total's.
        let mut agent_ids = vec![0u32; t.agents.len()];
        for (name, (hits, id)) in t.agents {
            let next = total.agents.len() as u32;
            let entry = total.agents.entry(name).or_insert((0, next));
            entry.0 += hits;
            agent_ids[id as usize] = entry.1;
        }
        let mut client_ids = vec![0u32; t.clients.len()];
        for (name, client) in t.clients {
            let next = total.clients.len() as u32;
            let entry = total
                .clients
                .entry(name)
                .or_insert_with(|| ClientTally::new(next));
            entry.traffic.absorb(client.traffic);
            client_ids[client.id as usize] = entry.id;
        }
        total.visitors.extend(visits.list.into_iter().map(|visit| {
            let (client, agent, day) = unpack_visit(visit);
            pack_visit(client_ids[client as usize], agent_ids[agent as usize], day)
        }));
    }
}

/// Adds a thread's counts to the total's; the first thread's map simply becomes it.
fn absorb<V>(total: &mut Map<Key, V>, counts: Map<Key, V>, add: impl Fn(&mut V, V))
where
    V: Default,
{
    if total.is_empty() {
        *total = counts;
        return;
    }
    for (key, n) in counts {
        add(total.entry(key).or_default(), n);
    }
}

/// The finished report: what `--json` prints and the text and HTML pages show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The log format used.
    pub format: String,
    pub lines: u64,
    pub malformed: u64,
    pub hits: u64,
    pub bytes: u64,
    /// Distinct (client, day, user agent) triples.
    pub visitors: u64,
    pub unique_urls: u64,
    pub unique_clients: u64,
    pub top_urls_by_hits: Vec<UrlRow>,
    pub top_urls_by_bytes: Vec<UrlRow>,
    pub top_not_found: Vec<KeyRow>,
    pub top_clients: Vec<ClientRow>,
    /// Host names taken as the site itself: those given with `--site`, or else the ones
    /// inferred from the referrers (see `logs report` in docs/logs.md).
    pub own_hosts: Vec<String>,
    /// Referrers from other sites (and the vhost's own, with a vhost format, excluded).
    pub top_referrers: Vec<KeyRow>,
    /// Every status seen, in numeric order.
    pub statuses: Vec<StatusRow>,
    /// Every hour from the first to the last (hours with no hits included), unless the
    /// log spans more than a year, when only hours with hits are listed.
    pub hours: Vec<HourRow>,
    pub top_user_agents: Vec<KeyRow>,
    /// By host, slowest routes, upstream peers, cache by route: empty lists when the log
    /// lacks their fields.
    #[serde(flatten)]
    pub sections: SectionsReport,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UrlRow {
    pub url: String,
    pub hits: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientRow {
    pub client: String,
    pub hits: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyRow {
    pub key: String,
    pub hits: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusRow {
    pub status: u16,
    pub hits: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HourRow {
    /// `2026-11-21 13:00`, on the log's own clock.
    pub hour: String,
    pub hits: u64,
    pub bytes: u64,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `n` largest entries by `weight`, ties broken by key.
fn top_by<V, W: Ord>(map: &Map<Key, V>, n: usize, weight: impl Fn(&V) -> W) -> Vec<(&[u8], &V)> {
    let mut rows: Vec<(&[u8], &V)> = map.iter().map(|(k, v)| (&k[..], v)).collect();
    first_n(&mut rows, n, |a, b| {
        weight(b.1).cmp(&weight(a.1)).then_with(|| a.0.cmp(b.0))
    });
    rows
}

const MAX_DENSE_HOURS: i64 = 366 * 24;

impl Analysis {
    /// Unique visitors: distinct (client, day, user agent).
    pub fn visitors(&self) -> u64 {
        self.visitors.len() as u64
    }

    /// Hosts that look like the site itself: at least three distinct referrer URLs from
    /// the host, and at least half of their paths are URLs this log served. A search
    /// engine sends one or two URLs (`/`, `/search?...`), rarely paths of this site;
    /// internal navigation sends many, nearly all of them pages of the site.
    fn inferred_own_hosts(&self) -> Vec<Vec<u8>> {
        let mut per_host: Map<Vec<u8>, (u32, u32)> = Map::default();
        for referrer in self.referrers.keys() {
            let Some(host) = referrer_host(referrer) else {
                continue;
            };
            let after = &referrer[memchr::memmem::find(referrer, host).unwrap_or(0) + host.len()..];
            let path = match memchr::memchr(b'/', after) {
                Some(slash) => &after[slash..],
                None => b"/",
            };
            let entry = per_host.entry(host.to_ascii_lowercase()).or_default();
            entry.0 += 1;
            entry.1 += u32::from(self.urls.contains_key(path));
        }
        let mut hosts: Vec<Vec<u8>> = per_host
            .into_iter()
            .filter(|(_, (distinct, served))| *distinct >= 3 && served * 2 >= *distinct)
            .map(|(host, _)| host)
            .collect();
        hosts.sort();
        hosts
    }

    /// Builds the report with `n` rows per top list.
    pub fn report(&self, query: &ReportQuery, n: usize) -> Report {
        let format = &query.format;
        // Hosts named with `--site` were left out while scanning; without any, guess.
        let (own_hosts, inferred) = if query.own_hosts.is_empty() {
            (self.inferred_own_hosts(), true)
        } else {
            (query.own_hosts.clone(), false)
        };
        let referrers: Map<Key, u64> = if inferred && !own_hosts.is_empty() {
            self.referrers
                .iter()
                .filter(|(referrer, _)| match referrer_host(referrer) {
                    Some(host) => !own_hosts.iter().any(|own| host.eq_ignore_ascii_case(own)),
                    None => true,
                })
                .map(|(k, &v)| (k.clone(), v))
                .collect()
        } else {
            self.referrers.clone()
        };
        let url_row = |(url, t): (&[u8], &Traffic)| UrlRow {
            url: text(url),
            hits: t.hits,
            bytes: t.bytes,
        };
        let key_row = |(key, hits): (&[u8], &u64)| KeyRow {
            key: text(key),
            hits: *hits,
        };
        let mut statuses: Vec<StatusRow> = self
            .statuses
            .iter()
            .map(|(&status, &hits)| StatusRow { status, hits })
            .collect();
        statuses.sort_unstable_by_key(|row| row.status);
        let hour_row = |hour: i64, t: Traffic| HourRow {
            hour: format_hour(hour),
            hits: t.hits,
            bytes: t.bytes,
        };
        let hours = match (self.hours.keys().min(), self.hours.keys().max()) {
            (Some(&first), Some(&last)) if last - first <= MAX_DENSE_HOURS => (first..=last)
                .map(|h| hour_row(h, self.hours.get(&h).copied().unwrap_or_default()))
                .collect(),
            _ => {
                let mut hours: Vec<_> = self.hours.iter().map(|(&h, &t)| (h, t)).collect();
                hours.sort_unstable_by_key(|&(h, _)| h);
                hours.into_iter().map(|(h, t)| hour_row(h, t)).collect()
            }
        };
        Report {
            format: format.spec().to_string(),
            lines: self.lines,
            malformed: self.malformed,
            hits: self.hits,
            bytes: self.bytes,
            visitors: self.visitors(),
            unique_urls: self.urls.len() as u64,
            unique_clients: self.clients.len() as u64,
            top_urls_by_hits: top_by(&self.urls, n, |t| t.hits)
                .into_iter()
                .map(url_row)
                .collect(),
            top_urls_by_bytes: top_by(&self.urls, n, |t| t.bytes)
                .into_iter()
                .map(url_row)
                .collect(),
            top_not_found: top_by(&self.not_found, n, |&h| h)
                .into_iter()
                .map(key_row)
                .collect(),
            top_clients: top_by(&self.clients, n, |c| c.traffic.hits)
                .into_iter()
                .map(|(client, c)| ClientRow {
                    client: text(client),
                    hits: c.traffic.hits,
                    bytes: c.traffic.bytes,
                })
                .collect(),
            own_hosts: own_hosts.iter().map(|h| text(h)).collect(),
            top_referrers: top_by(&referrers, n, |&h| h)
                .into_iter()
                .map(key_row)
                .collect(),
            statuses,
            hours,
            top_user_agents: top_by(&self.agents, n, |(h, _)| *h)
                .into_iter()
                .map(|(agent, (hits, _))| KeyRow {
                    key: text(agent),
                    hits: *hits,
                })
                .collect(),
            sections: self.sections.report(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visitor_set_merges_to_the_distinct_union() {
        let mut set = VisitorSet::default();
        let mut reference = std::collections::BTreeSet::new();
        // Batches large enough to fold into the sorted list, and small ones left pending.
        for (batch, n) in [(0u128, 70_000u128), (1, 10), (2, 100_000), (3, 5)] {
            let visits: Vec<u128> = (0..n).map(|i| (i * 7 + batch) % 90_001).collect();
            reference.extend(visits.iter().copied());
            set.extend(visits);
            assert_eq!(set.len(), reference.len(), "batch {batch}");
        }
        set.flush();
        assert!(set.pending.is_empty());
        assert_eq!(set.sorted, reference.into_iter().collect::<Vec<_>>());
        assert_eq!(merge_sorted(&[1, 3, 5], &[2, 3, 6]), vec![1, 2, 3, 5, 6]);
        assert_eq!(merge_sorted(&[], &[4]), vec![4]);
    }

    #[test]
    fn visits_pack_round_trip() {
        for (c, a, d) in [
            (0, 0, 0),
            (7, 9, 20_778),
            (u32::MAX, u32::MAX, i32::MIN),
            (1, 2, -3),
        ] {
            assert_eq!(unpack_visit(pack_visit(c, a, d)), (c, a, d));
        }
    }

    #[test]
    fn a_client_appends_each_visit_of_a_day_once() {
        let mut c = ClientTally::new(0);
        // Agents below 32 by bit, above by the last one; a new day starts over.
        let steps = [
            (3, 10, true),
            (3, 10, false),
            (5, 10, true),
            (3, 10, false),
            (40, 10, true),
            (40, 10, false),
            (41, 10, true),
            (40, 10, true), // only the last agent >= 32 is remembered: appended again
            (5, 10, false),
            (3, 11, true),
            (5, 11, true),
            (3, 10, true), // back to an earlier day (unsorted log): appended again
            (0, 0, true),  // day 0 is a day like any other, not "none"
            (0, 0, false),
            (31, 0, true),
            (31, 0, false),
        ];
        for (i, &(agent, day, first)) in steps.iter().enumerate() {
            assert_eq!(c.first_visit(agent, day), first, "step {i}");
        }
    }

    #[test]
    fn visits_compact_to_the_distinct_set_and_grow_when_mostly_distinct() {
        let mut visits = Visits {
            list: Vec::new(),
            compact_at: 8,
        };
        let mut distinct = std::collections::BTreeSet::new();
        for i in 0..1000u32 {
            let visit = pack_visit(i % 37, i % 5, 1);
            distinct.insert(visit);
            visits.push(visit);
            assert!(visits.list.len() <= visits.compact_at);
        }
        visits.compact();
        assert_eq!(visits.list, distinct.into_iter().collect::<Vec<_>>());
        // 185 distinct visits cannot fit in compactions of 8: the threshold grew.
        assert!(visits.compact_at >= 256, "{}", visits.compact_at);
    }
}
