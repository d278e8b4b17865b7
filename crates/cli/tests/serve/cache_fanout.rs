//! Purges and bans that reach every process sharing Redis (docs/cache.md, "Purges reach
//! every process"): two `tessera serve` processes and a real `redis-server` (or a
//! three-node Redis Cluster); an invalidation sent to one is applied by the other, and
//! one that the other could not hear (cut from Redis, Redis restarted) is caught up from
//! the log, or makes it drop its memory when the log no longer tells.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::{Redis, RedisCluster};
use crate::cache_keys::Origin;
use crate::cache_policy::{body, get_with, request};
use crate::harness::{eventually, pump, stderr_has, Response, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples, sum};

/// The bound on an invalidation's reach from one process to the other on loopback: a
/// correctness bound (the message is pushed, not polled for), not a speed figure.
const REACH: Duration = Duration::from_millis(100);

/// One process proxying to `origin`, sharing `redis` (the TOML of `[cache.redis]`'s
/// keys), with `Cache-Status`, the purge token and an admin listener; once it has
/// subscribed to the other processes' invalidations.
fn serve(site: &Site, origin: &Origin, redis: &str) -> Server {
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(
        &config,
        format!(
            "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n\n\
         [cache]\ncache_status = true\npurge_token = \"s3cret\"\n\n\
         [cache.redis]\ntimeout = 5\n{redis}\n",
            origin.addr
        ),
    )
    .unwrap();
    let root = site.root();
    let args: Vec<String> = [
        "serve",
        "--root",
        root.to_str().unwrap(),
        "--workers",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The first subscription is logged at debug level.
    let server = Server::start_args_env(
        site.dir.path(),
        &args,
        &[("RUST_LOG", "info,edge::cache::fanout=debug")],
    );
    eventually("the fan-out to subscribe", || {
        stderr_has(&server, "invalidation fan-out: subscribed through redis")
    });
    server
}

fn cache_status(r: &Response) -> String {
    r.header("cache-status").unwrap_or_default().to_string()
}

/// Gets `path` from `server` until it is a hit (stored in its memory).
fn held(server: &Server, path: &str) -> String {
    let mut text = String::new();
    eventually("a hit", || {
        let r = get_with(server, path, "");
        text = body(&r);
        cache_status(&r).starts_with("tessera; hit")
    });
    text
}

/// How long after `start` `server` stops answering `path` as a fresh hit (polled).
fn gone_after(server: &Server, path: &str, start: Instant) -> Duration {
    loop {
        let r = get_with(server, path, "");
        if !cache_status(&r).starts_with("tessera; hit") {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{path} still served as a hit: {}",
            body(&r)
        );
    }
}

/// An invalidation sent to `server`, holding the token.
fn invalidate(server: &Server, method: &str, path: &str, fields: &str) -> Response {
    request(
        server,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nX-Purge-Token: s3cret\r\n{fields}\
             Connection: close\r\n\r\n"
        ),
    )
}

fn metric(server: &Server, name: &str, parts: &[&str]) -> f64 {
    let (status, text) = admin_get(admin_addr(server), "/metrics", "");
    assert_eq!(status, 200);
    sum(&samples(&text), name, parts)
}

/// For each kind of invalidation: both processes hold the object; it is sent to `a`,
/// and `b` stops serving it within [`REACH`]; then `b` serves the new version.
fn every_kind_reaches_the_other(a: &Server, b: &Server, origin: &Origin) {
    let cases: [(&str, &str, &str, &str); 5] = [
        ("/doc/url", "PURGE", "/doc/url", ""),
        ("/doc/key", "PURGE", "/", "Surrogate-Key: doc-key\r\n"),
        (
            "/grace/soft",
            "PURGE",
            "/grace/soft",
            "Fastly-Soft-Purge: 1\r\n",
        ),
        ("/tag/regex", "BAN", "/", "X-Ban-Url: ^/tag/re\r\n"),
        ("/doc/prefix", "BAN", "/doc/pre", ""),
    ];
    for (path, method, target, fields) in cases {
        assert!(held(a, path).ends_with(" v1"), "{path}");
        assert!(held(b, path).ends_with(" v1"), "{path}");
        origin.bump(path);
        let start = Instant::now();
        let r = invalidate(a, method, target, fields);
        assert_eq!(r.status, 200, "{method} {target} {fields}");
        // The count is the receiving process's own (a ban by expression has none).
        let count = (!fields.starts_with("X-Ban-Url")).then_some("1");
        assert_eq!(r.header("purged"), count, "{method} {target} {fields}");
        let reach = gone_after(b, path, start);
        assert!(
            reach <= REACH,
            "{method} {target} {fields}: applied by the other process after {reach:?}"
        );
        eventually("the new version", || {
            body(&get_with(b, path, "")).ends_with(" v2")
        });
        // The process the client asked serves the new version too.
        eventually("the new version", || {
            body(&get_with(a, path, "")).ends_with(" v2")
        });
    }
}

#[test]
fn purges_key_purges_soft_purges_and_bans_reach_the_other_process() {
    let redis = Redis::start();
    let origin = Origin::start();
    let config = format!("url = \"{}\"\n", redis.url());
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, &config);
    let b = serve(&site_b, &origin, &config);
    every_kind_reaches_the_other(&a, &b, &origin);
    // Sent by one, applied once by the other, skipped by the sender.
    assert_eq!(
        metric(&a, "tessera_cache_invalidations_sent_total", &[]),
        5.0
    );
    assert_eq!(
        metric(&b, "tessera_cache_invalidations_received_total", &[]),
        5.0
    );
    assert_eq!(
        metric(
            &b,
            "tessera_cache_invalidations_applied_total",
            &["message"]
        ),
        5.0
    );
    assert_eq!(
        metric(&a, "tessera_cache_invalidations_applied_total", &[]),
        0.0
    );
    assert_eq!(
        metric(&a, "tessera_cache_invalidations_received_total", &[]),
        0.0
    );
    assert_eq!(
        metric(&b, "tessera_cache_invalidations_memory_drops_total", &[]),
        0.0
    );
}

#[test]
fn purges_reach_the_other_process_through_redis_cluster() {
    let cluster = RedisCluster::start();
    let seeds: Vec<String> = cluster.nodes[..2]
        .iter()
        .map(|n| format!("\"{}\"", n.url()))
        .collect();
    let config = format!("cluster = [{}]\n", seeds.join(", "));
    let origin = Origin::start();
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, &config);
    let b = serve(&site_b, &origin, &config);
    every_kind_reaches_the_other(&a, &b, &origin);
    assert_eq!(
        metric(
            &b,
            "tessera_cache_invalidations_applied_total",
            &["message"]
        ),
        5.0
    );
}

/// A TCP relay to a Redis that the test can cut (every connection closed, new ones
/// refused) and restore: a process behind it is disconnected while the others are not.
struct Relay {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(to: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            open: Arc::new(AtomicBool::new(true)),
            streams: Arc::default(),
        };
        let (open, streams) = (relay.open.clone(), relay.streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if !open.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                let mut all = streams.lock().unwrap();
                all.push(client.try_clone().unwrap());
                all.push(server.try_clone().unwrap());
                pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(server, client);
            }
        });
        relay
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// `b` reaches Redis through a relay that is cut while `a` is purged: `b` keeps serving
/// what it holds (it did not hear), and once the relay is back it reads the log and
/// applies the purges it missed, each once.
#[test]
fn a_process_cut_from_redis_during_a_purge_catches_up_when_it_reconnects() {
    let redis = Redis::start();
    let relay = Relay::start(redis.url()[8..].parse().unwrap());
    let origin = Origin::start();
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, &format!("url = \"{}\"\n", redis.url()));
    let b = serve(&site_b, &origin, &format!("url = \"{}\"\n", relay.url()));
    for path in ["/doc/x", "/doc/y", "/doc/kept"] {
        held(&a, path);
        held(&b, path);
        origin.bump(path);
    }
    relay.cut();
    eventually("b to see the cut", || {
        stderr_has(&b, "invalidation fan-out: disconnected from redis")
    });
    assert_eq!(invalidate(&a, "PURGE", "/doc/x", "").status, 200);
    assert_eq!(invalidate(&a, "PURGE", "/", "xkey: doc-y\r\n").status, 200);
    // Sent, and not heard by b.
    eventually("the purges sent", || {
        metric(&a, "tessera_cache_invalidations_sent_total", &[]) == 2.0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(held(&b, "/doc/x"), "doc x v1", "b could not hear the purge");
    relay.restore();
    eventually("b to catch up", || {
        metric(
            &b,
            "tessera_cache_invalidations_applied_total",
            &["catch_up"],
        ) == 2.0
    });
    assert_eq!(body(&get_with(&b, "/doc/x", "")), "doc x v2");
    assert_eq!(body(&get_with(&b, "/doc/y", "")), "doc y v2");
    assert_eq!(
        body(&get_with(&b, "/doc/kept", "")),
        "doc kept v1",
        "what was not purged stays"
    );
    assert_eq!(
        metric(&b, "tessera_cache_invalidations_memory_drops_total", &[]),
        0.0
    );
}

/// With a log of two, `b` cut from Redis while three purges are made cannot know what
/// it missed: it drops its memory tier (logged and counted) and refuses the older Redis
/// records, so it serves nothing stored before.
#[test]
fn a_process_that_missed_more_than_the_log_holds_drops_its_memory() {
    let redis = Redis::start();
    let relay = Relay::start(redis.url()[8..].parse().unwrap());
    let origin = Origin::start();
    let (site_a, site_b) = (Site::new(), Site::new());
    let log = "fan_out_log = 2\n";
    let a = serve(
        &site_a,
        &origin,
        &format!("url = \"{}\"\n{log}", redis.url()),
    );
    let b = serve(
        &site_b,
        &origin,
        &format!("url = \"{}\"\n{log}", relay.url()),
    );
    for path in ["/doc/1", "/doc/2", "/doc/3", "/doc/other"] {
        held(&a, path);
        held(&b, path);
        origin.bump(path);
    }
    relay.cut();
    eventually("b to see the cut", || {
        stderr_has(&b, "invalidation fan-out: disconnected from redis")
    });
    for path in ["/doc/1", "/doc/2", "/doc/3"] {
        assert_eq!(invalidate(&a, "PURGE", path, "").status, 200);
    }
    eventually("the purges sent", || {
        metric(&a, "tessera_cache_invalidations_sent_total", &[]) == 3.0
    });
    relay.restore();
    eventually("b to drop its memory", || {
        metric(&b, "tessera_cache_invalidations_memory_drops_total", &[]) == 1.0
    });
    assert!(stderr_has(&b, "the memory tier is dropped"));
    // /doc/other was not purged, but b cannot know that: fetched again, not read
    // back from Redis (its record is older than the drop).
    let r = get_with(&b, "/doc/other", "");
    assert_eq!(body(&r), "doc other v2");
    assert_eq!(cache_status(&r), "tessera; fwd=miss; stored");
    assert_eq!(body(&get_with(&b, "/doc/1", "")), "doc 1 v2");
}

/// Redis restarted (empty) while a purge is made: the purging process sends it when
/// Redis is back, and the other, which cannot know what the lost log held, drops its
/// memory; either way it does not serve the purged object again.
#[test]
fn a_purge_made_while_redis_restarts_is_not_served_after_reconnecting() {
    let mut redis = Redis::start();
    let origin = Origin::start();
    let config = format!("url = \"{}\"\n", redis.url());
    let (site_a, site_b) = (Site::new(), Site::new());
    let a = serve(&site_a, &origin, &config);
    let b = serve(&site_b, &origin, &config);
    // A first purge, so that both know the log's epoch.
    held(&a, "/doc/first");
    assert_eq!(invalidate(&a, "PURGE", "/doc/first", "").status, 200);
    eventually("b to apply it", || {
        metric(
            &b,
            "tessera_cache_invalidations_applied_total",
            &["message"],
        ) == 1.0
    });
    held(&a, "/doc/z");
    assert_eq!(held(&b, "/doc/z"), "doc z v1");
    origin.bump("/doc/z");
    redis.kill();
    eventually("b to see Redis gone", || {
        stderr_has(&b, "invalidation fan-out: disconnected from redis")
    });
    assert_eq!(invalidate(&a, "PURGE", "/doc/z", "").status, 200);
    redis.restart();
    eventually("b not to serve the purged object", || {
        body(&get_with(&b, "/doc/z", "")) == "doc z v2"
    });
    for _ in 0..5 {
        assert_eq!(body(&get_with(&b, "/doc/z", "")), "doc z v2");
    }
    eventually("a to send the purge once Redis is back", || {
        metric(&a, "tessera_cache_invalidations_sent_total", &[]) == 2.0
    });
}
