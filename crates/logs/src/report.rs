//! `logs report`: the operator's questions of a log (what was fetched, what failed, who
//! sent the traffic, when) answered in one pass.
//!
//! Each thread tallies into maps keyed by slices of the log. Clients and user agents get
//! a per-thread number when first seen, so the unique-visitor set (client, day, agent, as
//! GoAccess counts visitors) is keyed by three integers instead of hashing the long agent
//! string a second time. The merge translates those numbers into global ones.

use std::collections::HashMap;

use serde::Serialize;

use crate::format::{format_hour, LogFormat};
use crate::input::{Job, Opened, Options, Progress};
use crate::Error;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

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
    pub urls: HashMap<Vec<u8>, Traffic>,
    pub not_found: HashMap<Vec<u8>, u64>,
    pub referrers: HashMap<Vec<u8>, u64>,
    pub statuses: HashMap<u16, u64>,
    pub hours: HashMap<i64, Traffic>,
    clients: HashMap<Vec<u8>, (Traffic, u32)>,
    agents: HashMap<Vec<u8>, (u64, u32)>,
    visitors: Set<(u32, u32, i64)>,
}

pub(crate) struct Tally<'a> {
    lines: u64,
    malformed: u64,
    hits: u64,
    bytes: u64,
    urls: Map<&'a [u8], Traffic>,
    not_found: Map<&'a [u8], u64>,
    referrers: Map<&'a [u8], u64>,
    statuses: Vec<u64>,
    hours: Map<i64, Traffic>,
    clients: Map<&'a [u8], (Traffic, u32)>,
    client_names: Vec<&'a [u8]>,
    agents: Map<&'a [u8], (u64, u32)>,
    agent_names: Vec<&'a [u8]>,
    visitors: Set<(u32, u32, i64)>,
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
        inputs.run(self, Analysis::default(), opts, progress)
    }

    /// Analyses one block of lines on the calling thread.
    pub fn analyse_block(&self, block: &[u8]) -> Analysis {
        let mut tally = self.tally();
        self.scan(&mut tally, block);
        let mut total = Analysis::default();
        self.merge(&mut total, tally);
        total
    }

    fn is_own_referrer(&self, referer: &[u8], vhost: &[u8]) -> bool {
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
    let start = memchr::memmem::find(url, b"://")? + 3;
    let rest = &url[start..];
    let end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b':' | b'?' | b'#'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

impl Job for ReportQuery {
    type Tally<'a> = Tally<'a>;
    type Total = Analysis;

    fn tally<'a>(&self) -> Tally<'a> {
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
            clients: Map::default(),
            client_names: Vec::new(),
            agents: Map::default(),
            agent_names: Vec::new(),
            visitors: Set::default(),
        }
    }

    fn scan<'a>(&self, t: &mut Tally<'a>, block: &'a [u8]) {
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
            let Some(r) = self.format.parse_line(line) else {
                t.malformed += 1;
                continue;
            };
            t.hits += 1;
            t.bytes += r.bytes;
            t.statuses[r.status as usize] += 1;
            if !r.path.is_empty() {
                t.urls.entry(r.path).or_default().add(r.bytes);
                if r.status == 404 {
                    *t.not_found.entry(r.path).or_default() += 1;
                }
            }
            if !r.referer.is_empty()
                && r.referer != b"-"
                && !self.is_own_referrer(r.referer, r.vhost)
            {
                *t.referrers.entry(r.referer).or_default() += 1;
            }
            let next_id = t.client_names.len() as u32;
            let client = t.clients.entry(r.client).or_insert_with(|| {
                t.client_names.push(r.client);
                (Traffic::default(), next_id)
            });
            client.0.add(r.bytes);
            let client_id = client.1;
            let next_id = t.agent_names.len() as u32;
            let agent = t.agents.entry(r.user_agent).or_insert_with(|| {
                t.agent_names.push(r.user_agent);
                (0, next_id)
            });
            agent.0 += 1;
            let agent_id = agent.1;
            let day = match r.hour {
                Some(hour) => {
                    t.hours.entry(hour).or_default().add(r.bytes);
                    hour.div_euclid(24)
                }
                None => i64::MIN,
            };
            t.visitors.insert((client_id, agent_id, day));
        }
    }

    fn merge(&self, total: &mut Analysis, t: Tally<'_>) {
        total.lines += t.lines;
        total.malformed += t.malformed;
        total.hits += t.hits;
        total.bytes += t.bytes;
        for (url, traffic) in t.urls {
            match total.urls.get_mut(url) {
                Some(sum) => sum.absorb(traffic),
                None => {
                    total.urls.insert(url.to_vec(), traffic);
                }
            }
        }
        merge_counts(&mut total.not_found, t.not_found);
        merge_counts(&mut total.referrers, t.referrers);
        for (status, &n) in t.statuses.iter().enumerate() {
            if n > 0 {
                *total.statuses.entry(status as u16).or_default() += n;
            }
        }
        for (hour, traffic) in t.hours {
            total.hours.entry(hour).or_default().absorb(traffic);
        }
        // Translate this thread's client and agent numbers into the total's.
        let mut client_ids = vec![0u32; t.client_names.len()];
        for (name, (traffic, id)) in t.clients {
            let next = total.clients.len() as u32;
            let entry = match total.clients.get_mut(name) {
                Some(entry) => entry,
                None => total
                    .clients
                    .entry(name.to_vec())
                    .or_insert((Traffic::default(), next)),
            };
            entry.0.absorb(traffic);
            client_ids[id as usize] = entry.1;
        }
        let mut agent_ids = vec![0u32; t.agent_names.len()];
        for (name, (hits, id)) in t.agents {
            let next = total.agents.len() as u32;
            let entry = match total.agents.get_mut(name) {
                Some(entry) => entry,
                None => total.agents.entry(name.to_vec()).or_insert((0, next)),
            };
            entry.0 += hits;
            agent_ids[id as usize] = entry.1;
        }
        total.visitors.reserve(t.visitors.len());
        for (client, agent, day) in t.visitors {
            total
                .visitors
                .insert((client_ids[client as usize], agent_ids[agent as usize], day));
        }
    }
}

fn merge_counts(total: &mut HashMap<Vec<u8>, u64>, part: Map<&[u8], u64>) {
    for (key, n) in part {
        match total.get_mut(key) {
            Some(sum) => *sum += n,
            None => {
                total.insert(key.to_vec(), n);
            }
        }
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
    pub top_referrers: Vec<KeyRow>,
    /// Every status seen, in numeric order.
    pub statuses: Vec<StatusRow>,
    /// Every hour from the first to the last (hours with no hits included), unless the
    /// log spans more than a year, when only hours with hits are listed.
    pub hours: Vec<HourRow>,
    pub top_user_agents: Vec<KeyRow>,
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
fn top_by<V, W: Ord>(
    map: &HashMap<Vec<u8>, V>,
    n: usize,
    weight: impl Fn(&V) -> W,
) -> Vec<(&[u8], &V)> {
    let mut rows: Vec<(&[u8], &V)> = map.iter().map(|(k, v)| (k.as_slice(), v)).collect();
    rows.sort_unstable_by(|a, b| weight(b.1).cmp(&weight(a.1)).then_with(|| a.0.cmp(b.0)));
    rows.truncate(n);
    rows
}

const MAX_DENSE_HOURS: i64 = 366 * 24;

impl Analysis {
    /// Unique visitors: distinct (client, day, user agent).
    pub fn visitors(&self) -> u64 {
        self.visitors.len() as u64
    }

    /// Builds the report with `n` rows per top list.
    pub fn report(&self, format: &LogFormat, n: usize) -> Report {
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
            top_clients: top_by(&self.clients, n, |(t, _)| t.hits)
                .into_iter()
                .map(|(client, (t, _))| ClientRow {
                    client: text(client),
                    hits: t.hits,
                    bytes: t.bytes,
                })
                .collect(),
            top_referrers: top_by(&self.referrers, n, |&h| h)
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
        }
    }
}
