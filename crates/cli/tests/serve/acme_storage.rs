//! `[acme] storage = "redis"` against Pebble and a real redis-server: tessera processes
//! that share the `[cache.redis]` server order each name once, under a lock per name,
//! and every one of them serves the certificate (docs/tls.md "Automatic certificates").

use std::path::Path;
use std::process::Command;

use crate::acme::{free_port, hosts, start, verified, Pebble};
use crate::cache::Redis;
use crate::harness::{stderr_has, Server};

/// Where a test's tessera processes keep their state.
enum Shared<'a> {
    /// `storage = "redis"` with this `storage_key`.
    Redis(&'a Redis, &'a [u8]),
    /// `storage = "files"` in this `state_dir`.
    Files(&'a Path),
}

/// A tessera on `(http, https)` for `names`, keeping its state in `shared`, its site
/// and config in `site`.
fn serve(services: (&Pebble, &Shared), ports: (u16, u16), site: &Path, names: &[&str]) -> Server {
    serve_with(services, ports, site, names, "[\"http-01\"]")
}

/// [`serve`] with its `challenges`.
fn serve_with(
    (pebble, shared): (&Pebble, &Shared),
    (http, https): (u16, u16),
    site: &Path,
    names: &[&str],
    challenges: &str,
) -> Server {
    std::fs::create_dir_all(site).unwrap();
    if let Shared::Redis(_, key) = shared {
        std::fs::write(site.join("acme.key"), key).unwrap();
    }
    let toml = config((pebble, shared), (http, https), site, names, challenges);
    start(site, &toml)
}

/// The configuration [`serve_with`] runs.
fn config(
    (pebble, shared): (&Pebble, &Shared),
    (http, https): (u16, u16),
    site: &Path,
    names: &[&str],
    challenges: &str,
) -> String {
    let storage = match shared {
        Shared::Redis(redis, _) => format!(
            "storage = \"redis\"\nstorage_key = \"{}\"\n\n[cache.redis]\nurl = \"{}\"\n",
            site.join("acme.key").display(),
            redis.url()
        ),
        Shared::Files(dir) => format!("state_dir = \"{}\"\n", dir.display()),
    };
    format!(
        "listen = [\"127.0.0.1:{http}\"]\ntls_listen = [\"127.0.0.1:{https}\"]\nworkers = 1\n\n\
         [acme]\ndirectory = \"{}\"\nca_root = \"{}\"\nchallenges = {challenges}\n{storage}{}",
        pebble.directory,
        pebble.ca().display(),
        hosts(site, names),
    )
}

/// Two processes sharing `shared`: the first on Pebble's ports orders, the second
/// serves what it stored; exactly one order per name.
fn two_processes(pebble: &Pebble, ports: (u16, u16), shared: Shared, dir: &Path) {
    // Pebble validates HTTP-01 on the first process's port: the first holds the locks
    // and orders; the second, started meanwhile, waits for a lock or finds the
    // certificate stored, and serves what the first stored.
    let names = ["a.test", "b.test"];
    let services = (pebble, &shared);
    let first = serve(services, ports, &dir.join("first"), &names);
    // Both names' locks held: their challenges answered (or certificates installed).
    crate::harness::eventually("the first process ordering both names", || {
        let lines = first.stderr.lock().unwrap();
        let busy = |name: &str| {
            lines.iter().any(|l| {
                l.contains(&format!("name={name} "))
                    && (l.contains("ACME challenge answered")
                        || l.contains("ACME certificate installed"))
            })
        };
        names.iter().all(|n| busy(n))
    });
    let other = (free_port(), free_port());
    let second = serve(services, other, &dir.join("second"), &names);
    let root = pebble.issuing_root();
    for name in names {
        verified(&first, ports.1, &root, name);
        verified(&second, other.1, &root, name);
    }
    assert_eq!(pebble.orders(), 2, "one order per name");
    for name in names {
        let served = |s: &Server| {
            s.stderr.lock().unwrap().iter().any(|l| {
                l.contains(&format!("name={name} "))
                    && (l.contains("serving the stored ACME certificate")
                        || l.contains("as another tessera stored it"))
            })
        };
        assert!(served(&second), "{:?}", second.stderr.lock().unwrap());
    }
}

#[test]
fn two_processes_sharing_redis_order_each_name_once_and_both_serve_it() {
    let redis = Redis::start();
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let dir = tempfile::tempdir().unwrap();
    // 32 random bytes, as `head -c 32 /dev/urandom` writes them; the same for both.
    let mut key = [0u8; 32];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut key)
        .unwrap();
    two_processes(&pebble, ports, Shared::Redis(&redis, &key), dir.path());
    // The private key is in Redis encrypted: no PEM key in the clear there.
    let ca = pebble
        .directory
        .trim_start_matches("https://")
        .replace([':', '/'], "_");
    let out = Command::new("redis-cli")
        .args(["-u", &redis.url(), "--raw", "GET"])
        .arg(format!("tessera:acme:{ca}:a.test.key"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.len() > 100, "{:?}", out);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PRIVATE KEY"));
    let out = Command::new("redis-cli")
        .args(["-u", &redis.url(), "--raw", "GET"])
        .arg(format!("tessera:acme:{ca}:a.test.crt"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("BEGIN CERTIFICATE"));
}

#[test]
fn two_processes_sharing_a_state_dir_order_each_name_once_under_file_locks() {
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    two_processes(&pebble, ports, Shared::Files(&state), dir.path());
}

#[test]
fn redis_storage_needs_its_key_and_the_cache_redis_url() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("check.toml");
    let host = "\n[[host]]\nnames = [\"a.test\"]\n";
    std::fs::write(
        &config,
        format!("[acme]\nstorage = \"redis\"\nstorage_key = \"/k\"\n{host}"),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("check.toml:2: acme.storage: \"redis\" needs `[cache.redis] url`"),
        "{stderr}"
    );
    std::fs::write(
        &config,
        format!(
            "[cache.redis]\nurl = \"redis://127.0.0.1:1\"\n\n[acme]\nstorage = \"redis\"\n{host}"
        ),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("acme.storage_key: is required with storage = \"redis\""),
        "{stderr}"
    );
}

/// Two processes sharing Redis and the same two ports (one `SO_REUSEPORT` group each:
/// the kernel hands each of Pebble's validation connections to either, as a balancer
/// in front of two nodes would). Pebble validates each challenge over 3 connections at
/// once, so without the answers shared most validations would reach a process that did
/// not order. Once both run, a reload gives both four new names: each gets its
/// certificate at its first order (by HTTP-01 from one process, TLS-ALPN-01 from the
/// other), and both processes serve each one.
#[test]
fn processes_sharing_redis_answer_each_others_challenges() {
    let redis = Redis::start();
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let dir = tempfile::tempdir().unwrap();
    let key = [7u8; 32];
    let shared = Shared::Redis(&redis, &key);
    let services = (&pebble, &shared);
    let challenges = [
        "[\"http-01\", \"tls-alpn-01\"]",
        "[\"tls-alpn-01\", \"http-01\"]",
    ];
    let sites = [dir.path().join("a"), dir.path().join("b")];
    let servers =
        [0, 1].map(|i| serve_with(services, ports, &sites[i], &["s0.test"], challenges[i]));
    let root = pebble.issuing_root();
    for server in &servers {
        crate::harness::eventually("each process to hear the other's answers", || {
            stderr_has(
                server,
                "hearing the challenge answers of the tesseras sharing Redis",
            )
        });
        verified(server, ports.1, &root, "s0.test");
    }
    let before = pebble.orders();
    let names = ["s0.test", "s1.test", "s2.test", "s3.test", "s4.test"];
    for (i, server) in servers.iter().enumerate() {
        let toml = config(services, ports, &sites[i], &names, challenges[i]);
        std::fs::write(sites[i].join("tessera.toml"), toml).unwrap();
        server.signal(libc::SIGHUP);
    }
    for name in &names[1..] {
        verified(&servers[0], ports.1, &root, name);
    }
    let failed = |s: &Server| {
        let lines = s.stderr.lock().unwrap();
        let failed: Vec<String> = lines
            .iter()
            .filter(|l| l.contains("ACME order failed") && !l.contains("name=s0.test"))
            .cloned()
            .collect();
        failed
    };
    assert_eq!(failed(&servers[0]), Vec::<String>::new());
    assert_eq!(failed(&servers[1]), Vec::<String>::new());
    assert_eq!(pebble.orders() - before, 4, "one order per new name");
    // Both serve every name: new connections reach either, as the kernel picks.
    for _ in 0..8 {
        for name in names {
            verified(&servers[1], ports.1, &root, name);
        }
    }
}
