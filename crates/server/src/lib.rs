//! `server` is tessera's HTTP server: thread-per-core workers, connection handling
//! (keep-alive, pipelining, body discarding), TLS termination (rustls, `net::tls`),
//! HTTP/1.1 and HTTP/2 (on `h2codec`), and static files sent with `sendfile(2)` (read and
//! encrypted on TLS).
//!
//! What it is for: accepting connections and answering requests as fast as the machine
//! allows with memory that does not grow with load. Each worker is an OS thread running its
//! own event loop (one `epoll_wait` per turn, `net/event_loop.rs`) with its own
//! `SO_REUSEPORT` listener per address, so the
//! kernel spreads connections across workers and nothing on the request path takes a
//! lock but the shard of the shared open-file cache that holds the file, for one lookup.
//!
//! What it is not for: parsing HTTP (that is `wire`), the proxy and Lua (the `edge` and
//! `script` modules, which it knows only through the `handler` seam), command-line
//! handling or printing (that is `cli`; this crate reports through `tracing` and typed
//! errors).
//!
//! How it fits: `cli` builds a [`Config`] and the modules (`handler::Module`), calls
//! [`Server::bind`] (which opens every listener, so errors surface before anything runs),
//! prints [`Server::local_addrs`], then [`Server::start`]s the workers (each starts its
//! own service of every module) and calls [`Running::shutdown`] on SIGTERM/SIGINT. A
//! connection's protocol is chosen once (`session`); a request is routed once
//! (`exchange`) to the modules' filters and handlers, and to the static files when no
//! handler takes it; a response that comes later is finished by one finisher for both
//! protocols (`exchange::finish`). The modules below are layers, each importing only
//! from those declared before it; docs/architecture.md describes them and follows
//! requests through.

// In layers, lowest first; a module imports only from the layers above it in this list
// (scripts/layering.py checks that no module imports one that imports it back).
mod access_log;
mod admin;
mod auth;
mod client;
mod config;
mod conn_state;
mod date;
mod error;
mod exchange;
mod facts;
mod files;
mod generation;
mod http1;
mod http2;
mod http3;
mod limit;
mod metrics;
mod net;
mod reply;
mod routes;
mod routing;
mod runtime;
mod session;
mod shared;
mod sites;
mod sys;
mod worker;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;

use generation::{Generation, LogPlan};
use net::listeners::{Listeners, Listening};

use config::Kind;
use shared::{Phase, Shared};

/// The stack of a worker thread: 8 MiB, as nginx's workers have (Rust's default is 2 MiB).
const WORKER_STACK: usize = 8 << 20;

/// What is wrong with the htpasswd files of the routes' `basic_auth` in `config`, read
/// as a start would read them (check-config reports it).
pub fn htpasswd_problem(config: &Config) -> Option<String> {
    auth::load_all(config).err()
}

pub use access_log::FormatError;
pub use client::RealIpFrom;
pub use config::acme::AcmeConfig;
pub use config::http2::Http2Config;
pub use config::http3::Http3Config;
pub use config::tls::TlsConfig;
pub use config::tracing::TracingConfig;
pub use config::{CacheControlRule, Config, HostConfig, LimitsConfig, TimeoutsConfig};
pub use conn_state::ConnState;
pub use error::Error;
pub use limit::{LimitConfig, LimitRedis};
pub use net::listeners::Inherited;
pub use net::tls::{AcmeCerts, Demand, Tls};

/// A server whose listeners are open but whose workers have not started.
pub struct Server {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    admin: Option<std::net::TcpListener>,
    tls_addrs: Vec<SocketAddr>,
    h2c_addrs: Vec<SocketAddr>,
    quic_addrs: Vec<SocketAddr>,
}

impl Server {
    /// Checks the configuration, opens the roots and binds every listener. `modules`
    /// answer and filter the paths they route (`handler::Module::routes`); the static
    /// files answer the rest. Request metrics know the kinds of these modules only.
    pub fn bind(config: Config, modules: Vec<Arc<dyn handler::Module>>) -> Result<Server, Error> {
        let kinds: Vec<handler::KindLabels> = modules.iter().map(|m| m.kinds()).collect();
        Server::bind_inheriting(config, modules, &kinds, Inherited::default())
    }

    /// As [`Server::bind`], with the `kind` labels of request metrics registered by
    /// every module a reload may bring (`handler::KindLabels`, listed in this order), and
    /// taking the listening sockets of a configured address from `inherited` (a binary
    /// upgrade) instead of binding it anew; the inherited sockets no configured address
    /// takes are closed.
    pub fn bind_inheriting(
        config: Config,
        modules: Vec<Arc<dyn handler::Module>>,
        kinds: &[handler::KindLabels],
        mut inherited: Inherited,
    ) -> Result<Server, Error> {
        let workers = config.worker_count();
        let host_labels = metrics::HostLabels::new();
        let kinds = metrics::Kinds::new(kinds);
        let generation =
            Generation::new(1, config, modules, workers, (&host_labels, &kinds), None)?;
        let config = &generation.config;
        let admin = match config.admin_listen {
            Some(addr) => Some(admin::bind(addr).map_err(|source| Error::Listen { addr, source })?),
            None => None,
        };
        let acme = config
            .acme
            .as_ref()
            .map(|_| Arc::new(AcmeCerts::new(config.acme_names())));
        let tls = Tls::new(config, acme.clone()).map_err(Error::Tls)?;
        let listeners = Listeners::new();
        let mut set = Vec::new();
        for (requested, kind) in config.listening() {
            set.push(listeners.open(requested, kind, config.backlog, workers, &mut inherited)?);
        }
        for addr in inherited.unused() {
            tracing::info!(address = %addr, "closing a listening socket taken over but no longer configured");
        }
        let bound = |kind| -> Vec<SocketAddr> {
            set.iter()
                .filter(|l| l.kind == kind)
                .map(|l| l.local)
                .collect()
        };
        let (addrs, tls_addrs, h2c_addrs) =
            (bound(Kind::Plain), bound(Kind::Tls), bound(Kind::H2c));
        let quic_addrs = bound(Kind::Quic);
        listeners.replace(set);
        Ok(Server {
            shared: Arc::new(Shared {
                counts: (0..workers).map(|_| Default::default()).collect(),
                refusals: Default::default(),
                lingering_closes: AtomicU64::new(0),
                log: Arc::new(access_log::Shared {
                    written: AtomicU64::new(0),
                    dropped: AtomicU64::new(0),
                    reopen: AtomicU64::new(0),
                }),
                limits: config.limits.to_wire(),
                workers,
                slots_per_worker: (config.max_connections / workers).max(1),
                per_client: limit::PerClient::new(config.max_connections),
                tls,
                acme,
                https_port: tls_addrs.first().map(|a| a.port()),
                alt_svc: quic_addrs.first().map(|a| {
                    format!("h3=\":{}\"; ma=86400", a.port())
                        .into_bytes()
                        .into()
                }),
                epoch: std::time::Instant::now(),
                listeners,
                metrics_on: admin.is_some(),
                metrics: (0..workers)
                    .map(|_| metrics::WorkerMetrics::new(&kinds))
                    .collect(),
                admin_metrics: metrics::WorkerMetrics::new(&kinds),
                host_labels,
                kinds,
                started_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
                reloads_failed: AtomicU64::new(0),
                generation: AtomicU64::new(1),
                current: ArcSwap::from_pointee(generation),
            }),
            addrs,
            admin,
            tls_addrs,
            h2c_addrs,
            quic_addrs,
        })
    }

    /// The `listen` addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The admin listener's address, when there is one (port 0 resolved).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|a| a.local_addr().ok())
    }

    /// `[acme]`'s certificates and challenge answers, which the ACME client fills
    /// (`None` without `[acme]`).
    pub fn acme(&self) -> Option<Arc<AcmeCerts>> {
        self.shared.acme.clone()
    }

    /// The TLS addresses actually bound (port 0 resolved).
    pub fn tls_addrs(&self) -> &[SocketAddr] {
        &self.tls_addrs
    }

    /// The `h2c_listen` addresses actually bound (port 0 resolved).
    pub fn h2c_addrs(&self) -> &[SocketAddr] {
        &self.h2c_addrs
    }

    /// The `quic_listen` addresses actually bound (UDP; port 0 resolved).
    pub fn quic_addrs(&self) -> &[SocketAddr] {
        &self.quic_addrs
    }

    /// Starts one thread per worker.
    pub fn start(self) -> Result<Running, Error> {
        let (phase, _) = tokio::sync::watch::channel(Phase::Serve);
        let gen = self.shared.current.load_full();
        let plan = LogPlan::of(&gen.config);
        let (logs, writers) = plan.start(self.shared.workers, &self.shared.log)?;
        if let Some(admin) = self.admin {
            admin::start(admin, self.shared.clone(), phase.subscribe()).map_err(Error::Thread)?;
        }
        // One budget for the process, whatever the sites (docs/compression.md); set once
        // nothing before the workers can fail.
        compress::STREAM_MEMORY.set_capacity(gen.config.compression_memory);
        let mut threads = Vec::new();
        for (id, log) in logs.into_iter().enumerate() {
            let shared = self.shared.clone();
            let phase = phase.subscribe();
            let thread = std::thread::Builder::new()
                .name(format!("tessera-worker-{id}"))
                // nginx's workers run on the main thread's 8 MiB: room for what modules
                // nest (a Lua script's JSON 1000 levels deep); untouched pages cost nothing.
                .stack_size(WORKER_STACK)
                .spawn(move || runtime::run(id, shared, log, phase))
                .map_err(Error::Thread)?;
            threads.push(thread);
        }
        Ok(Running {
            shared: self.shared,
            phase,
            threads,
            log_writers: Mutex::new(writers),
            log_plan: Mutex::new(plan),
        })
    }
}

/// Running workers.
pub struct Running {
    shared: Arc<Shared>,
    phase: tokio::sync::watch::Sender<Phase>,
    threads: Vec<JoinHandle<()>>,
    /// Every access log writer thread started (a reload that changes the logs starts
    /// new ones; the old ones end once every worker has let go of them).
    log_writers: Mutex<Vec<JoinHandle<()>>>,
    log_plan: Mutex<LogPlan>,
}

/// What a reload changed, for its log line.
#[derive(Debug)]
#[non_exhaustive]
pub struct Reloaded {
    /// The new configuration's generation number (1 is the one started with).
    pub generation: u64,
    pub listeners_added: Vec<SocketAddr>,
    pub listeners_removed: Vec<SocketAddr>,
    /// Whether the access logs were reopened with new files or a new format.
    pub access_logs_changed: bool,
    /// Keys whose change takes effect only at the next start or binary upgrade (they
    /// size what every worker allocated at start).
    pub not_applied: Vec<&'static str>,
    /// `[acme]`'s names, when the reload changed them (hosts added or removed): the
    /// server serves them from now on; the ACME client is to be told.
    pub acme_names: Option<Vec<String>>,
}

impl Running {
    /// Connections in `state` across all workers, as of the workers' last periodic check
    /// (at most a quarter second old).
    pub fn connections(&self, state: ConnState) -> usize {
        self.shared
            .counts
            .iter()
            .map(|c| c[state as usize].load(Ordering::Relaxed))
            .sum()
    }

    /// Requests refused so far, per reason (`wire::Error::name`), leaving out reasons
    /// never seen.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        wire::Error::ALL
            .iter()
            .map(|e| {
                (
                    e.name(),
                    self.shared.refusals[e.index()].load(Ordering::Relaxed),
                )
            })
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Connections closed after a response with a lingering close (half-close, then
    /// read and drop what arrives for up to 2 s), because the client might still have
    /// been sending: a body not read, bytes after the last request, a refused request.
    /// A connection whose requests were all read completely closes at once and is not
    /// counted.
    pub fn lingering_closes(&self) -> u64 {
        self.shared.lingering_closes.load(Ordering::Relaxed)
    }

    /// The `listen` addresses listened on now (port 0 resolved), in the configured order:
    /// those that speak HTTP/1.1 in cleartext.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared.listeners.local_addrs()
    }

    /// Replaces the whole configuration (SIGHUP): checks `config` and opens what it
    /// names (roots, new listeners, changed access logs) first, and changes nothing
    /// when any of that fails. Then every request that starts after this returns uses
    /// it, on old keep-alive connections too (each worker swaps before its next
    /// request, and within a quarter second when idle); requests in flight finish on
    /// the configuration they started with. Listeners no longer configured are closed.
    pub fn reload(
        &self,
        config: Config,
        modules: Vec<Arc<dyn handler::Module>>,
    ) -> Result<Reloaded, Error> {
        let shared = &self.shared;
        let old = shared.current.load_full();
        let number = old.number + 1;
        let mut not_applied = Vec::new();
        if config.worker_count() != shared.workers {
            not_applied.push("workers");
        }
        if (config.max_connections / shared.workers).max(1) != shared.slots_per_worker {
            not_applied.push("max_connections");
        }
        if config.limits.to_wire() != shared.limits {
            not_applied.push("limits");
        }
        if config.admin_listen != old.config.admin_listen {
            not_applied.push("admin_listen");
        }
        if shared.tls.is_none() && !config.tls_listen.is_empty() {
            not_applied.push("tls_listen");
        }
        if shared.tls.is_none() && !config.quic_listen.is_empty() {
            not_applied.push("quic_listen");
        }
        // The ACME client and its store are those of the start; its names follow the
        // hosts (the caller tells the client, `Reloaded::acme_names`).
        let acme_names = match (&shared.acme, &config.acme, &old.config.acme) {
            (Some(_), Some(new), Some(was)) if new == was => {
                let names = config.acme_names();
                (names != old.config.acme_names()).then_some(names)
            }
            (_, new, was) => {
                if new != was {
                    not_applied.push("acme");
                }
                None
            }
        };
        let gen = Generation::new(
            number,
            config,
            modules,
            shared.workers,
            (&shared.host_labels, &shared.kinds),
            Some(&old),
        )?;
        // The certificates, read and matched before anything changes.
        let tls = match &shared.tls {
            Some(tls) => Some(tls.prepare(&gen.config).map_err(Error::Tls)?),
            None => None,
        };
        // A TLS or QUIC address without the certificates that start-up loaded is not
        // applied.
        let wanted = |requested: SocketAddr, kind: Kind| {
            (!matches!(kind, Kind::Tls | Kind::Quic) || shared.tls.is_some())
                && gen.config.listening().any(|l| l == (requested, kind))
        };
        let known: Vec<(SocketAddr, Kind)> = {
            let set = shared
                .listeners
                .set
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            set.iter().map(|l| (l.requested, l.kind)).collect()
        };
        let mut opened = Vec::new();
        for (requested, kind) in gen.config.listening() {
            if known.contains(&(requested, kind)) || !wanted(requested, kind) {
                continue;
            }
            opened.push(shared.listeners.open(
                requested,
                kind,
                gen.config.backlog,
                shared.workers,
                &mut Inherited::default(),
            )?);
        }
        let plan = LogPlan::of(&gen.config);
        let mut current_plan = self.log_plan.lock().unwrap_or_else(|e| e.into_inner());
        let access_logs_changed = plan != *current_plan;
        if access_logs_changed {
            let (logs, writers) = plan.start(shared.workers, &shared.log)?;
            for (slot, logs) in gen.logs.iter().zip(logs) {
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(logs);
            }
            self.log_writers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(writers);
            *current_plan = plan;
        }
        // Nothing can fail from here on.
        compress::STREAM_MEMORY.set_capacity(gen.config.compression_memory);
        let listeners_added = opened.iter().map(|l| l.local).collect();
        let mut listeners_removed = Vec::new();
        {
            let mut set = shared
                .listeners
                .set
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mut kept: Vec<Listening> = Vec::new();
            for l in std::mem::take(&mut *set) {
                if wanted(l.requested, l.kind) {
                    kept.push(l);
                } else {
                    listeners_removed.push(l.local);
                }
            }
            kept.extend(opened);
            let order = |l: &Listening| {
                gen.config
                    .listening()
                    .position(|a| a == (l.requested, l.kind))
            };
            kept.sort_by_key(order);
            *set = kept;
        }
        if let (Some(acme), Some(names)) = (&shared.acme, &acme_names) {
            acme.set_names(names.clone());
        }
        if let (Some(tls), Some(prepared)) = (&shared.tls, tls) {
            tls.install(prepared);
        }
        shared.listeners.version.fetch_add(1, Ordering::Release);
        shared.current.store(Arc::new(gen));
        shared.generation.store(number, Ordering::Release);
        Ok(Reloaded {
            generation: number,
            listeners_added,
            listeners_removed,
            access_logs_changed,
            not_applied,
            acme_names,
        })
    }

    /// Calls `spawn` with the description of every listening socket (`ADDR=FD,FD;...`,
    /// what [`Inherited::parse`] reads) and their descriptors, which stay open and
    /// unchanged during the call: for starting the process that takes them over.
    pub fn hand_over<R>(&self, spawn: impl FnOnce(&str, &[RawFd]) -> R) -> R {
        let set = self
            .shared
            .listeners
            .set
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut spec = String::new();
        let mut fds = Vec::new();
        for l in set.iter() {
            if !spec.is_empty() {
                spec.push(';');
            }
            spec.push_str(&format!("{}=", l.requested));
            for (i, s) in l.sockets.iter().enumerate() {
                if i > 0 {
                    spec.push(',');
                }
                spec.push_str(&s.fd.as_raw_fd().to_string());
                fds.push(s.fd.as_raw_fd());
            }
        }
        spawn(&spec, &fds)
    }

    /// Counts a reload refused because the configuration was not valid (for
    /// `/metrics`).
    pub fn reload_failed(&self) {
        self.shared.reloads_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Reopens the access log file (for SIGUSR1 after logrotate moved it).
    pub fn reopen_logs(&self) {
        self.shared.log.reopen.fetch_add(1, Ordering::Relaxed);
    }

    /// Access log lines dropped because the disk could not keep up (or failed).
    pub fn access_log_dropped(&self) -> u64 {
        self.shared.log.dropped.load(Ordering::Relaxed)
    }

    /// Graceful shutdown: workers stop accepting, finish the responses in flight, close
    /// idle connections, and exit (after `shutdown_timeout` at the latest).
    pub fn shutdown(&self) {
        self.phase.send_replace(Phase::Stop);
    }

    /// Hands the connections to come to another process (which holds the same
    /// listening sockets, [`Running::hand_over`]): workers stop accepting, answer the
    /// next request on each keep-alive connection with `Connection: close` and close it
    /// after that response, close idle connections only when `timeouts.idle` expires,
    /// and exit when none is left (after `shutdown_timeout` at the latest).
    /// [`Running::shutdown`] still applies while draining.
    pub fn drain(&self) {
        self.phase.send_if_modified(|phase| {
            let serving = *phase == Phase::Serve;
            if serving {
                *phase = Phase::Drain;
            }
            serving
        });
    }

    /// Whether every worker has exited (after [`Running::drain`], once the connections
    /// have ended).
    pub fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Waits for every worker to exit.
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
        // A log writer ends once every worker has flushed and dropped its end, unless
        // the disk stopped answering: then it is left behind (its lines are lost) rather
        // than let a stalled disk keep the process from exiting.
        let timeout = self.shared.current.load().config.shutdown_timeout.max(1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout);
        let writers = self
            .log_writers
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        for writer in writers {
            while !writer.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if writer.is_finished() {
                let _ = writer.join();
            } else {
                tracing::warn!("access log writer stalled on a write; exiting without it");
            }
        }
    }
}
