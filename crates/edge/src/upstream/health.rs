//! Active health checks (`[upstream.health]`): one thread per process (not one task per
//! worker: a peer is asked once per interval however many workers there are) with a
//! small runtime of its own, one task per checked peer. Each task asks its peer for
//! `path` every `interval`, each wait drawn within ±10% (and the first within the first
//! second) so that many tessera nodes, or many peers, are not checked in lockstep. The
//! verdict goes into the peer's shared state ([`PeerSet::set_checked`]): an atomic every
//! worker reads on its next pick, no lock.
//!
//! The checker holds the peer sets weakly: when a reload replaces the module, its sets
//! go with it and the checker's tasks end at their next turn. A peer a reload keeps
//! keeps its health ([`crate::upstream::peers::Inherited`]): the new module's checker, with the new
//! `[upstream.health]` settings, takes its checks over (the old one stops at its next
//! turn even while a long request still holds the old module) and goes on from the
//! verdict it had.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{secs, EdgeConfig, HealthConfig, SendProxy};
use crate::upstream::peers::{PeerSet, PeerState};

/// Starts the checker when some upstream has `[upstream.health]`. `sets` are in
/// `config.upstream`'s order.
pub(crate) fn start(config: &EdgeConfig, sets: &Arc<[Arc<PeerSet>]>) {
    let checks: Vec<(usize, (HealthConfig, Option<SendProxy>))> = config
        .upstream
        .iter()
        .enumerate()
        .filter_map(|(i, u)| u.health.clone().map(|h| (i, (h, u.send_proxy))))
        .collect();
    if checks.is_empty() {
        return;
    }
    let weak = Arc::downgrade(sets);
    let spawned = std::thread::Builder::new()
        .name("tessera-health".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "health checks cannot start");
                    return;
                }
            };
            // A LocalSet: a check's connection is the loop's `TcpStream`, which stays
            // on its thread (here, tokio's on this thread without a loop).
            tokio::task::LocalSet::new().block_on(&runtime, async move {
                let mut tasks = Vec::new();
                let Some(sets) = weak.upgrade() else { return };
                for (u, health) in checks {
                    for peer in 0..sets[u].peers.len() {
                        let seed = crate::upstream::peers::hash(
                            format!(
                                "{}{:?}",
                                sets[u].peers[peer].address,
                                std::time::SystemTime::now()
                            )
                            .as_bytes(),
                        );
                        tasks.push(tokio::task::spawn_local(check_peer(
                            weak.clone(),
                            u,
                            peer,
                            health.clone(),
                            seed,
                        )));
                    }
                }
                drop(sets);
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "health checks cannot start");
    }
}

/// Checks one peer until its set is gone.
async fn check_peer(
    sets: Weak<[Arc<PeerSet>]>,
    upstream: usize,
    peer: usize,
    (health, send_proxy): (HealthConfig, Option<SendProxy>),
    mut seed: u64,
) {
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let interval = secs(health.interval);
    let timeout = secs(health.timeout);
    // Where the last verdict left the peer: a reload keeps it. Taking the checks stops
    // the checker of the configuration the reload replaced.
    let (mut healthy, checker) = match sets.upgrade() {
        Some(sets) => (
            !sets[upstream].checked_unhealthy(peer),
            sets[upstream].take_checks(peer),
        ),
        None => return,
    };
    let first = interval.min(Duration::from_secs(1));
    evloop::time::sleep(first.mul_f64((random() % 1000) as f64 / 1000.0)).await;
    let (mut passed, mut failed) = (0u32, 0u32);
    loop {
        let Some(set) = sets.upgrade().map(|s| s[upstream].clone()) else {
            return;
        };
        if !set.checks(peer, checker) {
            return;
        }
        let address = set.peers[peer].address.clone();
        let checking = check(&set, peer, &health.path, send_proxy);
        let result = evloop::time::timeout(timeout, checking).await;
        let verdict = match result {
            Ok(Ok(status)) if passes(&health, status) => Ok(()),
            Ok(Ok(status)) => Err(format!("status {status}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".into()),
        };
        if !set.checks(peer, checker) {
            // A newer checker took over while this check was out: its verdict counts.
            return;
        }
        match verdict {
            Ok(()) => {
                (passed, failed) = (passed + 1, 0);
                if !healthy && passed >= health.healthy_after {
                    healthy = true;
                    set.set_checked(peer, true);
                }
            }
            Err(why) => {
                (passed, failed) = (0, failed + 1);
                tracing::debug!(upstream = %set.name, peer = %address, %why, "health check failed");
                if healthy && failed >= health.unhealthy_after {
                    healthy = false;
                    set.set_checked(peer, false);
                }
            }
        }
        drop(set);
        let jitter = 0.9 + (random() % 2001) as f64 / 10_000.0;
        evloop::time::sleep(interval.mul_f64(jitter)).await;
    }
}

fn passes(health: &HealthConfig, status: u16) -> bool {
    if health.expect_status.is_empty() {
        (200..400).contains(&status)
    } else {
        health.expect_status.contains(&status)
    }
}

/// `GET path` on a connection of its own to peer `peer` of `set` (over TLS for a TLS
/// peer; in HTTP/2 for an upstream that speaks it; with `send_proxy`, after a v1 `UNKNOWN` or v2 `LOCAL` header: the check is the
/// proxy's own); the response's status.
async fn check(
    set: &PeerSet,
    peer: usize,
    path: &str,
    send_proxy: Option<SendProxy>,
) -> std::io::Result<u16> {
    let address = &set.peers[peer].address;
    // A Unix socket's path is no host name.
    let address = match crate::config::unix_path(address) {
        Some(_) => "localhost",
        None => address,
    };
    let mut stream = crate::upstream::stream::open(set, peer, send_proxy.map(|v| (v, None)))
        .await
        .map_err(std::io::Error::other)?;
    if set.h2 {
        let https = matches!(
            set.peers[peer].transport,
            crate::upstream::peers::Transport::Tls(_)
        );
        return crate::upstream::h2::check(stream, address, path, https).await;
    }
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: tessera-health-check\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut head = Vec::with_capacity(256);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response");
    loop {
        if let Some(end) = head.iter().position(|&b| b == b'\n') {
            // "HTTP/1.1 200 OK": the status is the second word of the first line.
            let line = std::str::from_utf8(&head[..end]).map_err(|_| bad())?;
            let mut words = line.split(' ');
            let version = words.next().unwrap_or("");
            if !version.starts_with("HTTP/1.") {
                return Err(bad());
            }
            return words
                .next()
                .and_then(|s| s.parse().ok())
                .filter(|s| (100..600).contains(s))
                .ok_or_else(bad);
        }
        if head.len() > 8192 || stream.read_buf(&mut head).await? == 0 {
            return Err(bad());
        }
    }
}

/// `tessera_upstream_peer_state`, `tessera_upstream_healthy_peers`,
/// `tessera_upstream_h2_streams` and `tessera_upstream_tls_handshakes_total`.
pub(crate) fn metrics(out: &mut handler::Metrics, sets: &[Arc<PeerSet>]) {
    const STATES: [(PeerState, &str); 4] = [
        (PeerState::Up, "up"),
        (PeerState::Down, "down"),
        (PeerState::Probing, "probing"),
        (PeerState::Unhealthy, "unhealthy"),
    ];
    for set in sets {
        if let Some(tls) = &set.tls {
            tls.metrics(out, &set.name);
        }
        out.gauge(
            "tessera_upstream_healthy_peers",
            "Peers of each upstream that take requests now.",
            &[("upstream", &set.name)],
            set.healthy() as f64,
        );
        for (i, p) in set.peers.iter().enumerate() {
            if set.h2 {
                out.gauge(
                    "tessera_upstream_h2_streams",
                    "Requests in flight to each peer of an HTTP/2 upstream: its open streams \
                     (every worker's).",
                    &[("upstream", &set.name), ("peer", &p.address)],
                    set.in_flight(i) as f64,
                );
            }
            let now = set.state(i);
            for (state, label) in STATES {
                out.gauge(
                    "tessera_upstream_peer_state",
                    "Each peer's state: 1 for the state it is in (up; down or probing for \
                     passive health; unhealthy for the active checks), 0 for the others.",
                    &[
                        ("upstream", &set.name),
                        ("peer", &p.address),
                        ("state", label),
                    ],
                    if now == state { 1.0 } else { 0.0 },
                );
            }
        }
    }
}
