//! Choosing a request's peer (one worker's view: its own round-robin positions; the
//! process's shared health and requests in flight from [`PeerSet`]) and the hash key of
//! `balance = "hash"`.

use std::cell::Cell;

use http::header::{HeaderName, HeaderValue};

use crate::config::Balance;
use crate::upstream::outgoing::{Fields, Outgoing};
use crate::upstream::peers::{hash, PeerSet, PeerState};

/// What `balance = "hash"` hashes.
pub(crate) enum HashKey {
    /// Host, path and query: the cache key's parts, so a page stays on one peer (and in
    /// its cache) whichever tessera node serves it.
    CacheKey,
    Header(HeaderName),
    Cookie(String),
    /// The client's address (the one a trusted proxy named, docs/security.md): a client
    /// stays on one peer, as nginx's `ip_hash` (which hashes a /24) but by the whole
    /// address.
    Client,
}

impl HashKey {
    /// From a validated `hash_key`.
    pub(crate) fn parse(key: &str) -> HashKey {
        if key == "client" {
            return HashKey::Client;
        }
        if let Some(name) = key.strip_prefix("header:") {
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                return HashKey::Header(name);
            }
        }
        match key.strip_prefix("cookie:") {
            Some(name) => HashKey::Cookie(name.to_string()),
            None => HashKey::CacheKey,
        }
    }

    /// The key of a request, `header` reading its fields; `None` when the header,
    /// cookie or client is absent (the request is balanced round robin; a request the
    /// proxy makes itself, an ESI fragment's, has no client).
    pub(crate) fn of<'a>(
        &self,
        target: &str,
        client: Option<std::net::IpAddr>,
        header: impl Fn(&str) -> Option<&'a HeaderValue>,
        cookies: impl Iterator<Item = &'a HeaderValue>,
    ) -> Option<u64> {
        match self {
            HashKey::CacheKey => {
                let host = header("host").map_or(&b""[..], |h| h.as_bytes());
                let mut key = Vec::with_capacity(host.len() + target.len());
                key.extend_from_slice(host);
                key.extend_from_slice(target.as_bytes());
                Some(hash(&key))
            }
            HashKey::Header(name) => header(name.as_str()).map(|v| hash(v.as_bytes())),
            HashKey::Client => client.map(|ip| match ip.to_canonical() {
                std::net::IpAddr::V4(v4) => hash(&v4.octets()),
                std::net::IpAddr::V6(v6) => hash(&v6.octets()),
            }),
            HashKey::Cookie(name) => cookies
                .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
                .find_map(|pair| {
                    let pair = pair.trim_ascii();
                    let eq = pair.iter().position(|&b| b == b'=')?;
                    (pair[..eq].trim_ascii() == name.as_bytes())
                        .then(|| hash(pair[eq + 1..].trim_ascii()))
                }),
        }
    }
}

/// The peer an upstream's `balancer_script` chooses for `req`, when it has one and it
/// chooses one this request has not tried yet (it is asked again at each attempt, and
/// told which peers were tried); `None`: the configured balancer chooses.
pub(crate) fn hooked(
    hook: Option<&dyn handler::BalancerHook>,
    (upstream, set): (&str, &PeerSet),
    req: &Outgoing<'_>,
    tried: &[usize],
) -> Option<usize> {
    let hook = hook?;
    let peers: Vec<handler::PeerView<'_>> = (0..set.peers.len())
        .map(|i| handler::PeerView {
            address: &set.peers[i].address,
            state: match set.state(i) {
                PeerState::Up => "up",
                PeerState::Down => "down",
                PeerState::Probing => "probing",
                PeerState::Unhealthy => "unhealthy",
            },
            weight: set.peers[i].weight,
            tried: tried.contains(&i),
        })
        .collect();
    let map = match &req.fields {
        Fields::Plain(fields) => *fields,
        Fields::Forwarded(f) => f.client_headers,
    };
    let fields: Vec<(&[u8], &[u8])> = map
        .iter()
        .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
        .collect();
    let request = handler::BalanceRequest {
        upstream,
        method: req.method.as_str(),
        target: req.target,
        client: req.client(),
        fields: &fields,
    };
    let chosen = hook.balance(&request, &peers)?;
    if tried.contains(&chosen) {
        tracing::debug!(upstream, peer = %set.peers[chosen].address,
            "balancer_script chose a peer this request tried already; the configured balancer chooses");
        return None;
    }
    Some(chosen)
}

/// One worker's balancer for one upstream.
pub(crate) struct Balancer {
    kind: Balance,
    /// Smooth weighted round robin's current weights (nginx's `ngx_http_upstream_round_robin`).
    current: Box<[Cell<i64>]>,
    /// Where least_conn starts looking, so that ties are spread.
    next: Cell<usize>,
    rng: Cell<u64>,
}

impl Balancer {
    pub(crate) fn new(kind: Balance, peers: usize, seed: u64) -> Balancer {
        Balancer {
            kind,
            current: (0..peers).map(|_| Cell::new(0)).collect(),
            next: Cell::new(0),
            rng: Cell::new(seed | 1),
        }
    }

    /// xorshift64: cheap, and good enough to pick peers.
    fn random(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }

    /// The peer for a request: available, not in `tried`; `in_flight(i)` is the
    /// process's requests in flight to peer `i` (every worker's). `None` when every peer is out.
    pub(crate) fn pick(
        &self,
        set: &PeerSet,
        in_flight: impl Fn(usize) -> u64,
        key: Option<u64>,
        tried: &[usize],
    ) -> Option<usize> {
        let now = set.now_ms();
        let n = set.peers.len();
        let candidate = |i: usize| !tried.contains(&i) && set.available(i, now);
        if let (Balance::Hash, Some(key)) = (self.kind, key) {
            return set.by_hash(key, now, tried);
        }
        match self.kind {
            Balance::RoundRobin | Balance::Hash => {
                let (mut best, mut total) = (None::<usize>, 0i64);
                for i in (0..n).filter(|&i| candidate(i)) {
                    let w = set.effective_weight(i, now) as i64;
                    let c = &self.current[i];
                    c.set(c.get() + w);
                    total += w;
                    if best.map_or(true, |b| c.get() > self.current[b].get()) {
                        best = Some(i);
                    }
                }
                let b = best?;
                self.current[b].set(self.current[b].get() - total);
                Some(b)
            }
            Balance::LeastConn => {
                let start = self.next.get();
                self.next.set(start.wrapping_add(1));
                let load = |i: usize| (in_flight(i), set.effective_weight(i, now));
                (0..n)
                    .map(|k| (start + k) % n)
                    .filter(|&i| candidate(i))
                    .min_by(|&a, &b| {
                        let ((la, wa), (lb, wb)) = (load(a), load(b));
                        (la * wb).cmp(&(lb * wa))
                    })
            }
            Balance::RandomTwo => {
                let candidates: u64 = (0..n)
                    .filter(|&i| candidate(i))
                    .map(|i| set.effective_weight(i, now))
                    .sum();
                if candidates == 0 {
                    return None;
                }
                // Two draws by weight; the one with fewer requests in flight for its
                // weight wins.
                let draw = || {
                    let mut r = self.random() % candidates;
                    (0..n).filter(|&i| candidate(i)).find(|&i| {
                        let w = set.effective_weight(i, now);
                        if r < w {
                            return true;
                        }
                        r -= w;
                        false
                    })
                };
                let (a, b) = (draw()?, draw()?);
                let score = |i: usize| (in_flight(i), set.effective_weight(i, now));
                let ((la, wa), (lb, wb)) = (score(a), score(b));
                Some(if lb * wa < la * wb { b } else { a })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PeerConfig, UpstreamConfig};

    fn weighted(weights: &[u32], kind: Balance) -> (PeerSet, Balancer) {
        let c = UpstreamConfig {
            peer: weights
                .iter()
                .enumerate()
                .map(|(i, &weight)| PeerConfig {
                    address: format!("10.0.0.{i}:80"),
                    weight,
                    ..PeerConfig::default()
                })
                .collect(),
            balance: kind,
            ..UpstreamConfig::default()
        };
        (
            PeerSet::new(&c, kind == Balance::Hash),
            Balancer::new(kind, weights.len(), 7),
        )
    }

    #[test]
    fn round_robin_follows_weights_smoothly() {
        let (set, b) = weighted(&[5, 1, 1], Balance::RoundRobin);
        let picks: Vec<usize> = (0..7)
            .map(|_| b.pick(&set, |_| 0, None, &[]).unwrap())
            .collect();
        assert_eq!(picks.iter().filter(|&&p| p == 0).count(), 5);
        // nginx's smooth order: a a b a c a a, never five of `a` in a row.
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(
            b.pick(&set, |_| 0, None, &[0, 1]),
            Some(2),
            "tried peers skipped"
        );
    }

    #[test]
    fn least_conn_and_random_two_avoid_the_busy_peer() {
        for kind in [Balance::LeastConn, Balance::RandomTwo] {
            let (set, b) = weighted(&[1, 1, 1], kind);
            let busy = |i: usize| if i == 1 { 50 } else { 0 };
            let to_busy = (0..300)
                .filter(|_| b.pick(&set, busy, None, &[]) == Some(1))
                .count();
            // random_two picks the busy one only when both draws are it (1 in 9).
            assert!(to_busy < 60, "{kind:?}: {to_busy} of 300 to the busy peer");
        }
    }

    #[test]
    fn hash_key_reads_the_named_cookie_or_header() {
        let cookie = HeaderValue::from_static("a=1; session=abc ; b=2");
        let key = HashKey::parse("cookie:session");
        let got = key.of("/x", None, |_| None, [&cookie].into_iter());
        assert_eq!(got, Some(hash(b"abc")));
        assert_eq!(
            HashKey::parse("cookie:none").of("/x", None, |_| None, [&cookie].into_iter()),
            None
        );
        let user = HeaderValue::from_static("u7");
        let key = HashKey::parse("header:X-User");
        assert_eq!(
            key.of(
                "/",
                None,
                |n| (n == "x-user").then_some(&user),
                std::iter::empty()
            ),
            Some(hash(b"u7"))
        );
        let key = HashKey::parse("client");
        let of = |ip: &str| key.of("/", Some(ip.parse().unwrap()), |_| None, std::iter::empty());
        assert_eq!(of("192.0.2.1"), of("::ffff:192.0.2.1"));
        assert_ne!(of("192.0.2.1"), of("192.0.2.2"));
        assert_eq!(key.of("/", None, |_| None, std::iter::empty()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_comes_back_ramps_up_over_slow_start() {
        let c = UpstreamConfig {
            addresses: vec!["10.0.0.1:80".into(), "10.0.0.2:80".into()],
            max_fails: Some(1),
            fail_timeout: 1.0,
            slow_start: 10.0,
            ..UpstreamConfig::default()
        };
        let set = PeerSet::new(&c, false);
        let b = Balancer::new(Balance::RoundRobin, 2, 7);
        let down = set.claim(0, set.now_ms()).unwrap();
        set.record(down, false);
        tokio::time::advance(std::time::Duration::from_millis(1100)).await;
        let probe = set.claim(0, set.now_ms()).unwrap();
        set.record(probe, true);
        let share = |n: usize| {
            (0..n)
                .filter(|_| b.pick(&set, |_| 0, None, &[]) == Some(0))
                .count()
        };
        assert!(share(100) <= 2, "just back: almost nothing");
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        let half = share(300);
        assert!(
            (80..=120).contains(&half),
            "half way: weight 1/2, a third of 300: {half}"
        );
        tokio::time::advance(std::time::Duration::from_secs(6)).await;
        assert_eq!(share(300), 150, "after slow_start: its full share");
    }
}
