//! The peers of an upstream and what is known of their health, shared by every worker:
//! passive health (failures counted per peer within `fail_window`; `max_fails` of them
//! take the peer out for `fail_timeout`, then one probe request decides), the active
//! checks' verdict ([`crate::upstream::health`]), slow start, and the consistent-hash ring.
//!
//! One [`PeerSet`] per upstream per process, behind an `Arc`: its state is atomics, so a
//! worker reads it on the request path without a lock, and a change made by one worker
//! (or by the health checker's thread) is seen by all. Each state change is made by one
//! compare-and-swap, and only its winner logs it, so every change is logged once.
//!
//! This replaces the circuit breaker per upstream and per worker: a peer that fails is
//! skipped by every worker while the others take its share, and an upstream is refused
//! at once only when all of its peers are out.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use evloop::time::Instant;

use crate::config::{secs, UpstreamConfig};
use crate::upstream::budget::RetryBudget;
use crate::upstream::tls::UpstreamTls;

/// What is known of one peer (see [`crate::UpstreamStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Takes requests.
    Up,
    /// Taken out by passive health until its `fail_timeout` ends.
    Down,
    /// Its `fail_timeout` ended and one probe request is in flight; others wait for it.
    Probing,
    /// Taken out by the active health checks (`unhealthy_after` failed checks).
    Unhealthy,
}

const UP: u8 = 0;
const DOWN: u8 = 1;
const PROBING: u8 = 2;

/// Points on the hash ring per unit of weight. nginx's `hash ... consistent` and Pingora's
/// Ketama use 160, which leaves a peer's share of keys up to 20% off its due (measured: 401
/// of 1,000 keys on one of three loopback peers); 1,000 points keep it within about 5%, for
/// 16 KB of ring per peer and one more step of binary search.
const POINTS_PER_WEIGHT: u32 = 1000;

pub(crate) struct PeerShared {
    /// `ip:port` once resolved (or the name as written, when it did not resolve: then
    /// each connection resolves it). Shared, not copied, by each request's log notes.
    pub(crate) address: Arc<str>,
    pub(crate) weight: u32,
    /// This peer's `max_connections` and `max_idle`, per worker.
    pub(crate) max_connections: usize,
    pub(crate) max_idle: usize,
    /// How it is reached.
    pub(crate) transport: Transport,
    /// Whether it stops at TLS 1.2 (a TLS peer; [`crate::upstream::tls`]).
    pub(crate) tls_learned: crate::upstream::tls::Learned,
    /// What is known of it: kept by a reload that keeps the peer ([`Inherited`]).
    health: Arc<PeerHealth>,
}

/// How a peer is reached.
pub(crate) enum Transport {
    Tcp,
    /// TLS over TCP, with this server name (sent as SNI unless it is an IP address, and
    /// verified in the peer's certificate).
    Tls(rustls::pki_types::ServerName<'static>),
    /// A Unix domain socket at this path (`unix:PATH`).
    Unix(std::path::PathBuf),
}

/// The state of one peer that every worker shares, and that a reload carries over to the
/// new configuration's peer of the same upstream name and address: its passive health,
/// the active checks' verdict, its slow start, and the requests in flight to it.
#[derive(Default)]
pub(crate) struct PeerHealth {
    /// `UP` (0, so a new peer starts up), `DOWN` or `PROBING`.
    state: AtomicU8,
    /// Milliseconds (of [`PeerSet::now_ms`]) until which a `DOWN` peer stays out.
    down_until: AtomicU64,
    /// Failures counted in the window that began at `window_start`.
    fails: AtomicU32,
    window_start: AtomicU64,
    /// When the peer last came back (for slow start); 0: up since the start.
    up_since: AtomicU64,
    /// The active checks' verdict: true once `unhealthy_after` checks failed in a row,
    /// false again after `healthy_after` passed.
    unhealthy: AtomicBool,
    /// Which checker checks the peer: each one that starts takes the next number, and an
    /// older one (of a configuration a reload replaced, still held by a long request)
    /// stops at its next turn instead of checking with the old settings.
    checker: AtomicU64,
    /// Requests in flight to the peer from every worker, from sending to the end of the
    /// response body (least_conn, random_two). One atomic per peer, in a line of its own
    /// so that counting does not slow the reads of the state beside it.
    in_flight: CacheLine<AtomicU64>,
}

/// A value alone in its 64-byte cache line.
#[derive(Default)]
#[repr(align(64))]
struct CacheLine<T>(T);

/// The health of the peers of the configuration a reload replaces, for the new one's
/// peers of the same upstream name and address; with the clock its times are counted on.
#[derive(Default)]
pub(crate) struct Inherited {
    epoch: Option<Instant>,
    peers: Vec<(String, String, Arc<PeerHealth>)>,
}

impl Inherited {
    pub(crate) fn from(sets: &[Arc<PeerSet>]) -> Inherited {
        Inherited {
            epoch: sets.first().map(|s| s.epoch),
            peers: sets
                .iter()
                .flat_map(|s| {
                    s.peers
                        .iter()
                        .map(|p| (s.name.clone(), p.address.to_string(), p.health.clone()))
                })
                .collect(),
        }
    }

    /// The clock the new sets count on: the old one, so that kept times stay right.
    pub(crate) fn epoch(&self) -> Instant {
        self.epoch.unwrap_or_else(Instant::now)
    }
}

/// The peers of one upstream and their shared state.
pub(crate) struct PeerSet {
    pub(crate) name: String,
    pub(crate) peers: Box<[PeerShared]>,
    max_fails: u32,
    fail_window_ms: u64,
    fail_timeout_ms: u64,
    slow_start_ms: u64,
    /// Ketama ring: (point, peer) sorted by point. Empty unless `balance = "hash"`.
    ring: Box<[(u64, u32)]>,
    epoch: Instant,
    /// The upstream's retry budget, shared by every worker.
    pub(crate) budget: RetryBudget,
    /// The upstream's TLS, when a peer speaks it: its session store is every worker's.
    pub(crate) tls: Option<Arc<UpstreamTls>>,
    /// The peers speak HTTP/2 (`protocol = "h2"`/`"h2c"`): health checks do too, and the
    /// requests in flight are counted (they are the streams of the metrics).
    pub(crate) h2: bool,
}

/// Permission to send one request to a peer; report how it went with
/// [`PeerSet::record`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    pub(crate) peer: usize,
    probe: bool,
}

/// Host names resolved now (at start, and at each reload, which builds the sets anew;
/// a Unix socket's path is kept as it is):
/// a name with several addresses becomes one peer per address, each with the name's
/// weight and limits. A name that does not resolve stays as written (each connection
/// then tries again, and fails as a connect error until it resolves).
fn resolve(peers: Vec<crate::config::Peer>) -> Vec<crate::config::Peer> {
    use std::net::{SocketAddr, ToSocketAddrs};
    let mut out = Vec::with_capacity(peers.len());
    for p in peers {
        if p.unix.is_some() || p.address.parse::<SocketAddr>().is_ok() {
            out.push(p);
            continue;
        }
        match p.address.to_socket_addrs() {
            Ok(addrs) => {
                let mut seen: Vec<SocketAddr> = Vec::new();
                for a in addrs {
                    if !seen.contains(&a) {
                        seen.push(a);
                    }
                }
                if seen.is_empty() {
                    out.push(p);
                    continue;
                }
                for a in seen {
                    out.push(crate::config::Peer {
                        address: a.to_string(),
                        ..p.clone()
                    });
                }
            }
            Err(e) => {
                tracing::warn!(peer = %p.address, error = %e, "cannot resolve; trying again per connection");
                out.push(p);
            }
        }
    }
    out
}

impl Ticket {
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }
}

/// FNV-1a, then a 64-bit finaliser (splitmix64) so that nearby inputs land far apart on
/// the ring. Stable across processes and versions, so every tessera node of a fleet puts
/// a key on the same peer.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl PeerSet {
    /// `ring`: whether to build the hash ring (`balance = "hash"`).
    #[cfg(test)]
    pub(crate) fn new(c: &UpstreamConfig, ring: bool) -> PeerSet {
        PeerSet::inheriting(c, ring, &Inherited::default(), Instant::now(), None)
    }

    /// As [`PeerSet::new`] at a reload: a peer of the same upstream name and address as
    /// one of `inherited` keeps its health, slow start and requests in flight; `epoch`
    /// ([`Inherited::epoch`]) is the clock of every set of the configuration; `tls`: the
    /// upstream's ([`UpstreamTls::build`]).
    pub(crate) fn inheriting(
        c: &UpstreamConfig,
        ring: bool,
        inherited: &Inherited,
        epoch: Instant,
        tls: Option<Arc<UpstreamTls>>,
    ) -> PeerSet {
        let mut taken = vec![false; inherited.peers.len()];
        let peers: Box<[PeerShared]> = resolve(c.peer_list())
            .into_iter()
            .map(|p| {
                let kept = inherited
                    .peers
                    .iter()
                    .enumerate()
                    .position(|(i, (u, a, _))| !taken[i] && *u == c.name && *a == p.address);
                let health = match kept {
                    Some(i) => {
                        taken[i] = true;
                        inherited.peers[i].2.clone()
                    }
                    None => Arc::default(),
                };
                // Nothing checks it any more: the old checker stops, its verdict goes.
                if c.health.is_none() {
                    health.checker.fetch_add(1, Ordering::Relaxed);
                    if health.unhealthy.swap(false, Ordering::Relaxed) {
                        tracing::info!(upstream = %c.name, peer = %p.address,
                            "peer up: health checks no longer configured");
                    }
                }
                let transport = match (&p.unix, p.tls) {
                    (Some(path), _) => Transport::Unix(path.clone()),
                    (None, true) => {
                        Transport::Tls(crate::upstream::tls::server_name(c.sni.as_deref(), &p.host))
                    }
                    (None, false) => Transport::Tcp,
                };
                PeerShared {
                    transport,
                    tls_learned: Default::default(),
                    address: p.address.into(),
                    weight: p.weight.max(1),
                    max_connections: p.max_connections,
                    max_idle: p.max_idle,
                    health,
                }
            })
            .collect();
        // Consistent hashing: Ketama (a ring of points per peer) rather than Maglev (a
        // lookup table). When a peer is out, Ketama sends each of its keys to the next
        // point on the ring, so no key of a healthy peer moves, and the walk needs
        // nothing rebuilt: health changes many times a minute and is read per request,
        // lock-free. Maglev spreads more evenly but moves some other keys when its table
        // is rebuilt, and would need a rebuild (and a swap) per health change. Removing a
        // peer from the configuration moves only its keys (about 1/N) with either.
        let mut points = Vec::new();
        if ring {
            for (i, p) in peers.iter().enumerate() {
                for n in 0..p.weight * POINTS_PER_WEIGHT {
                    points.push((hash(format!("{}-{n}", p.address).as_bytes()), i as u32));
                }
            }
            points.sort_unstable();
        }
        let max_fails = c.max_fails.unwrap_or(if peers.len() > 1 { 1 } else { 0 });
        PeerSet {
            name: c.name.clone(),
            peers,
            // As nginx: never for a lone peer, unless set.
            max_fails,
            fail_window_ms: secs(c.fail_window).as_millis() as u64,
            fail_timeout_ms: secs(c.fail_timeout).as_millis() as u64,
            slow_start_ms: secs(c.slow_start).as_millis() as u64,
            ring: points.into_boxed_slice(),
            epoch,
            budget: RetryBudget::new(c.retry_budget),
            tls,
            h2: c.protocol != crate::config::Protocol::H1,
        }
    }

    /// Whether requests are balanced by hash (the set has a ring).
    pub(crate) fn hashes(&self) -> bool {
        !self.ring.is_empty()
    }

    /// Milliseconds since this set was made, from 1: on a worker, as of its loop's turn
    /// (`evloop::time::now`), which is at most the turn's length behind; a peer's
    /// `fail_timeout` (seconds) and retry budget (per millisecond) do not see that.
    pub(crate) fn now_ms(&self) -> u64 {
        let now = evloop::time::now();
        now.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    pub(crate) fn state(&self, i: usize) -> PeerState {
        let p = &self.peers[i];
        if p.health.unhealthy.load(Ordering::Relaxed) {
            return PeerState::Unhealthy;
        }
        match p.health.state.load(Ordering::Relaxed) {
            UP => PeerState::Up,
            PROBING => PeerState::Probing,
            _ if self.now_ms() >= p.health.down_until.load(Ordering::Relaxed) => PeerState::Probing,
            _ => PeerState::Down,
        }
    }

    /// Whether peer `i` may be chosen now: up, or down with its time out over (the
    /// request that gets it will be its probe).
    pub(crate) fn available(&self, i: usize, now: u64) -> bool {
        let p = &self.peers[i];
        if p.health.unhealthy.load(Ordering::Relaxed) {
            return false;
        }
        match p.health.state.load(Ordering::Relaxed) {
            UP => true,
            DOWN => now >= p.health.down_until.load(Ordering::Relaxed),
            _ => false,
        }
    }

    /// Peers that take requests now (for metrics and for failing at once).
    pub(crate) fn healthy(&self) -> usize {
        let now = self.now_ms();
        (0..self.peers.len())
            .filter(|&i| self.available(i, now))
            .count()
    }

    /// Takes peer `i` for one request, or `None` when another worker just took its probe.
    pub(crate) fn claim(&self, i: usize, now: u64) -> Option<Ticket> {
        let p = &self.peers[i];
        match p.health.state.load(Ordering::Relaxed) {
            UP => Some(Ticket {
                peer: i,
                probe: false,
            }),
            DOWN if now >= p.health.down_until.load(Ordering::Relaxed) => p
                .health
                .state
                .compare_exchange(DOWN, PROBING, Ordering::AcqRel, Ordering::Relaxed)
                .ok()
                .map(|_| Ticket {
                    peer: i,
                    probe: true,
                }),
            _ => None,
        }
    }

    /// Hears how a request went: a failure counts towards `max_fails` (a failed probe
    /// takes the peer out again at once), a good probe brings the peer back.
    pub(crate) fn record(&self, ticket: Ticket, success: bool) {
        if success && !ticket.probe {
            // The common case: nothing to change, not even a clock to read.
            return;
        }
        let p = &self.peers[ticket.peer];
        let now = self.now_ms();
        if ticket.probe {
            if success {
                p.health.fails.store(0, Ordering::Relaxed);
                self.bring_back(ticket.peer, PROBING, "a probe request succeeded");
            } else {
                p.health
                    .down_until
                    .store(now + self.fail_timeout_ms, Ordering::Relaxed);
                if p.health
                    .state
                    .compare_exchange(PROBING, DOWN, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    tracing::warn!(upstream = %self.name, peer = %p.address,
                        "peer still down: its probe request failed");
                }
            }
            return;
        }
        if success || self.max_fails == 0 {
            return;
        }
        let start = p.health.window_start.load(Ordering::Relaxed);
        let fails = if start == 0 || now.saturating_sub(start) > self.fail_window_ms {
            p.health.window_start.store(now, Ordering::Relaxed);
            p.health.fails.store(1, Ordering::Relaxed);
            1
        } else {
            p.health.fails.fetch_add(1, Ordering::Relaxed) + 1
        };
        if fails >= self.max_fails {
            p.health
                .down_until
                .store(now + self.fail_timeout_ms, Ordering::Relaxed);
            if p.health
                .state
                .compare_exchange(UP, DOWN, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                tracing::warn!(upstream = %self.name, peer = %p.address, fails,
                    fail_timeout_ms = self.fail_timeout_ms, "peer down (passive health)");
            }
        }
    }

    /// `from` → up, logged once; slow start begins. Whether this call made the change.
    fn bring_back(&self, i: usize, from: u8, why: &str) -> bool {
        let p = &self.peers[i];
        let changed = p
            .health
            .state
            .compare_exchange(from, UP, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if changed {
            p.health.window_start.store(0, Ordering::Relaxed);
            p.health.up_since.store(self.now_ms(), Ordering::Relaxed);
            // Good news: info, where going down is a warning.
            tracing::info!(upstream = %self.name, peer = %p.address, "peer up: {why}");
        }
        changed
    }

    /// The active checks' verdict on peer `i`, logged when it changes it: once, even
    /// while the checker of the configuration a reload replaced has not yet stopped.
    pub(crate) fn set_checked(&self, i: usize, healthy: bool) {
        let p = &self.peers[i];
        let was_healthy = !p.health.unhealthy.swap(!healthy, Ordering::Relaxed);
        if was_healthy == healthy {
            return;
        }
        if healthy {
            // A peer the checks find healthy is back for passive health too.
            if !self.bring_back(i, DOWN, "health checks pass") {
                p.health.up_since.store(self.now_ms(), Ordering::Relaxed);
                tracing::info!(upstream = %self.name, peer = %p.address,
                    "peer up: health checks pass");
            }
        } else {
            tracing::warn!(upstream = %self.name, peer = %p.address, "peer unhealthy (active checks)");
        }
    }

    /// Whether the active checks last found peer `i` unhealthy (where a new checker
    /// starts from).
    pub(crate) fn checked_unhealthy(&self, i: usize) -> bool {
        self.peers[i].health.unhealthy.load(Ordering::Relaxed)
    }

    /// Makes the caller peer `i`'s checker; the number to give [`PeerSet::checks`].
    pub(crate) fn take_checks(&self, i: usize) -> u64 {
        self.peers[i].health.checker.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether the checker that took number `checker` still checks peer `i`.
    pub(crate) fn checks(&self, i: usize, checker: u64) -> bool {
        self.peers[i].health.checker.load(Ordering::Relaxed) == checker
    }

    /// Requests in flight to peer `i` from every worker.
    pub(crate) fn in_flight(&self, i: usize) -> u64 {
        self.peers[i].health.in_flight.0.load(Ordering::Relaxed)
    }

    /// One more request in flight to peer `i`; the caller's guard calls [`PeerSet::end`]
    /// on every path (the client's `Busy`).
    pub(crate) fn begin(&self, i: usize) {
        self.peers[i]
            .health
            .in_flight
            .0
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn end(&self, i: usize) {
        self.peers[i]
            .health
            .in_flight
            .0
            .fetch_sub(1, Ordering::Relaxed);
    }

    /// Peer `i`'s weight now, in thousandths: its configured weight, ramped up over
    /// `slow_start` after it came back (from a thousandth of it, never zero).
    pub(crate) fn effective_weight(&self, i: usize, now: u64) -> u64 {
        let p = &self.peers[i];
        let full = p.weight as u64 * 1000;
        let since = p.health.up_since.load(Ordering::Relaxed);
        if self.slow_start_ms == 0 || since == 0 {
            return full;
        }
        let elapsed = now.saturating_sub(since);
        if elapsed >= self.slow_start_ms {
            return full;
        }
        (full * elapsed / self.slow_start_ms).max(p.weight as u64)
    }

    /// The peer for a hash key: the first available one, not in `tried`, clockwise from
    /// the key's point on the ring.
    pub(crate) fn by_hash(&self, key: u64, now: u64, tried: &[usize]) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        let start = self.ring.partition_point(|&(point, _)| point < key);
        (0..self.ring.len())
            .map(|n| self.ring[(start + n) % self.ring.len()].1 as usize)
            .find(|&i| !tried.contains(&i) && self.available(i, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(addresses: &[&str], ring: bool) -> PeerSet {
        let c = UpstreamConfig {
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            max_fails: Some(2),
            fail_timeout: 10.0,
            ..UpstreamConfig::default()
        };
        PeerSet::new(&c, ring)
    }

    #[test]
    fn removing_one_of_three_peers_moves_only_its_keys() {
        let three = set(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"], true);
        let two = set(&["10.0.0.1:80", "10.0.0.2:80"], true);
        let (mut moved, mut per_peer) = (0, [0; 3]);
        for k in 0..1000 {
            let key = hash(format!("/page/{k}").as_bytes());
            let before = three.by_hash(key, 1, &[]).unwrap();
            let after = two.by_hash(key, 1, &[]).unwrap();
            per_peer[before] += 1;
            if before != 2 {
                assert_eq!(before, after, "a key of a remaining peer moved");
            } else {
                moved += 1;
            }
        }
        assert!(moved <= 400, "{moved} of 1000 keys moved");
        for n in per_peer {
            assert!((300..=370).contains(&n), "uneven ring: {per_peer:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn max_fails_take_a_peer_out_then_one_probe_decides() {
        let s = set(&["10.0.0.1:80", "10.0.0.2:80"], false);
        let now = s.now_ms();
        let t = s.claim(0, now).unwrap();
        s.record(t, false);
        assert_eq!(s.state(0), PeerState::Up, "one failure of max_fails 2");
        s.record(t, false);
        assert_eq!(s.state(0), PeerState::Down);
        assert!(!s.available(0, s.now_ms()));
        assert_eq!(s.healthy(), 1);
        tokio::time::advance(std::time::Duration::from_secs(11)).await;
        let probe = s.claim(0, s.now_ms()).unwrap();
        assert!(s.claim(0, s.now_ms()).is_none(), "one probe at a time");
        s.record(probe, false);
        assert_eq!(s.state(0), PeerState::Down, "a failed probe: out again");
        tokio::time::advance(std::time::Duration::from_secs(11)).await;
        let probe = s.claim(0, s.now_ms()).unwrap();
        s.record(probe, true);
        assert_eq!(s.state(0), PeerState::Up);
        assert_eq!(s.healthy(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reload_keeps_the_health_of_the_peers_it_keeps() {
        let old = Arc::new(set(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"], false));
        for _ in 0..2 {
            old.record(old.claim(1, old.now_ms()).unwrap(), false);
        }
        old.set_checked(2, false);
        old.begin(0);
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        let old_checker = old.take_checks(2);
        let inherited = Inherited::from(std::slice::from_ref(&old));
        let c = UpstreamConfig {
            addresses: ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"]
                .map(String::from)
                .to_vec(),
            fail_timeout: 30.0,
            health: Some(Default::default()),
            ..UpstreamConfig::default()
        };
        let new = PeerSet::inheriting(&c, false, &inherited, inherited.epoch(), None);
        assert_eq!(new.state(1), PeerState::Down, "still out");
        assert_eq!(new.state(2), PeerState::Unhealthy);
        assert!(new.checked_unhealthy(2));
        let new_checker = new.take_checks(2);
        assert!(!old.checks(2, old_checker), "the old checker stops");
        assert!(new.checks(2, new_checker));
        assert_eq!(
            (new.state(3), new.in_flight(3)),
            (PeerState::Up, 0),
            "added: fresh"
        );
        assert_eq!(new.in_flight(0), 1, "a request of the old set still counts");
        old.end(0);
        assert_eq!(new.in_flight(0), 0);
        // Its fail_timeout (10 s, from the old settings) ends on the kept clock.
        tokio::time::advance(std::time::Duration::from_secs(6)).await;
        assert_eq!(new.state(1), PeerState::Down);
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        assert_eq!(new.state(1), PeerState::Probing);
        // Without `[upstream.health]` nothing would bring it back: the verdict goes.
        let unchecked = UpstreamConfig { health: None, ..c };
        let later = PeerSet::inheriting(
            &unchecked,
            false,
            &Inherited::from(&[Arc::new(new)]),
            inherited.epoch(),
            None,
        );
        assert_eq!(later.state(2), PeerState::Up);
        assert!(
            !later.checks(2, new_checker),
            "no checks configured: none run"
        );
    }

    #[test]
    fn names_resolve_at_start_one_peer_per_address() {
        let c = UpstreamConfig {
            addresses: vec!["localhost:8080".into(), "10.0.0.1:80".into()],
            ..UpstreamConfig::default()
        };
        let s = PeerSet::new(&c, false);
        let names: Vec<&str> = s.peers.iter().map(|p| &*p.address).collect();
        assert!(
            names.contains(&"127.0.0.1:8080") || names.contains(&"[::1]:8080"),
            "{names:?}"
        );
        assert!(!names.contains(&"localhost:8080"));
        assert_eq!(names.last(), Some(&"10.0.0.1:80"));
    }
}
