//! `server` is tessera's HTTP/1.1 server: thread-per-core workers, connection handling
//! (keep-alive, pipelining, body discarding), and static files sent with `sendfile(2)`.
//!
//! What it is for: accepting connections and answering requests as fast as the machine
//! allows with memory that does not grow with load. Each worker is an OS thread running a
//! single-threaded tokio runtime with its own `SO_REUSEPORT` listener per address, so the
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
//! request is routed once (`dispatch`) to the modules' filters and handlers, and to the
//! static files when no handler takes it; docs/architecture.md follows one through.

mod access_log;
mod cache;
mod compressed;
mod conditional;
mod config;
mod conn;
mod date;
mod dispatch;
mod files;
mod listing;
mod output;
mod range;
mod reply;
mod runtime;
mod sites;
mod worker;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub use access_log::FormatError;
pub use config::{CacheControlRule, Config, HostConfig, LimitsConfig, TimeoutsConfig};
pub use worker::ConnState;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot open root directory {path}")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("invalid access_log_format: {0}")]
    LogFormat(#[from] FormatError),
    #[error("cannot open access log {path}")]
    AccessLog {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    #[error(
        "the kernel does not support openat2(2) (Linux 5.6 or newer is needed to serve files safely): {0}"
    )]
    NoOpenat2(std::io::Error),
}

/// What every worker shares, read-only after start.
pub(crate) struct Shared {
    pub config: Config,
    /// The modules (the proxy, Lua scripts): each worker starts its own service of each.
    pub modules: Vec<Arc<dyn handler::Module>>,
    /// Per site, every prefix a module answers or filters, with what each does there.
    pub routes: Vec<handler::Router<dispatch::Routed>>,
    /// The access log's drop counter and reopen flag.
    pub log: Arc<access_log::Shared>,
    /// Requests refused, per reason (indexed by `wire::Error::index`).
    pub refusals: [AtomicU64; wire::Error::ALL.len()],
    /// Connections closed with a lingering close (half-close, then drain), because the
    /// client might have had bytes in flight; every other close after a response is
    /// immediate.
    pub lingering_closes: AtomicU64,
    /// Connections per state for each worker, published by its periodic check.
    pub counts: Vec<[AtomicUsize; worker::ConnState::ALL.len()]>,
    pub limits: wire::Limits,
    /// The sites (the top-level one and one per `[[host]]`): roots, file caches, and
    /// the names that choose them.
    pub sites: sites::Sites,
    /// The origin of every worker's millisecond clock, so that a time one worker
    /// records in the shared file cache means the same to the others.
    pub epoch: std::time::Instant,
}

/// A server whose listeners are open but whose workers have not started.
pub struct Server {
    shared: Arc<Shared>,
    /// One listener per address for each worker, all bound with `SO_REUSEPORT`.
    listeners: Vec<Vec<std::net::TcpListener>>,
    addrs: Vec<SocketAddr>,
    log_format: access_log::Format,
}

impl Server {
    /// Checks the configuration, opens the root and binds every listener. `modules`
    /// answer and filter the paths they route (`handler::Module::routes`); the static
    /// files answer the rest.
    pub fn bind(config: Config, modules: Vec<Arc<dyn handler::Module>>) -> Result<Server, Error> {
        config.validate().map_err(Error::Config)?;
        let routes = dispatch::routes(&modules, config.host.len() + 1);
        let log_format = access_log::Format::parse(&config.access_log_format)?;
        let sites = sites::Sites::open(&config, open_root)?;
        if let Some(root) = sites.all().iter().find_map(|s| s.root.as_ref()) {
            files::probe_openat2(root.as_raw_fd()).map_err(Error::NoOpenat2)?;
        }
        let workers = config.worker_count();
        let mut listeners: Vec<Vec<std::net::TcpListener>> =
            (0..workers).map(|_| Vec::new()).collect();
        let mut addrs = Vec::new();
        for &requested in &config.listen {
            // With port 0 the first bind picks a port; the other workers join that one.
            let mut addr = requested;
            for worker in listeners.iter_mut() {
                let listener = runtime::bind(addr, config.backlog)
                    .map_err(|source| Error::Listen { addr, source })?;
                if addr.port() == 0 {
                    addr = listener
                        .local_addr()
                        .map_err(|source| Error::Listen { addr, source })?;
                }
                worker.push(listener);
            }
            addrs.push(addr);
        }
        let limits = config.limits.to_wire();
        Ok(Server {
            shared: Arc::new(Shared {
                counts: (0..workers).map(|_| Default::default()).collect(),
                refusals: Default::default(),
                lingering_closes: AtomicU64::new(0),
                modules,
                routes,
                log: Arc::new(access_log::Shared {
                    dropped: AtomicU64::new(0),
                    reopen: AtomicU64::new(0),
                }),
                sites,
                epoch: std::time::Instant::now(),
                config,
                limits,
            }),
            listeners,
            addrs,
            log_format,
        })
    }

    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Starts one thread per worker.
    pub fn start(self) -> Result<Running, Error> {
        let (shutdown, _) = tokio::sync::watch::channel(false);
        let mut threads = Vec::new();
        let mut log_writers = Vec::new();
        let workers = self.listeners.len();
        // One writer per distinct file; each site writes to its own (`[[host]]`
        // `access_log`) or else to the top-level one.
        let config = &self.shared.config;
        let mut paths: Vec<&PathBuf> = Vec::new();
        let by_site: Arc<[Option<usize>]> = std::iter::once(config.access_log.as_ref())
            .chain(
                config
                    .host
                    .iter()
                    .map(|h| h.access_log.as_ref().or(config.access_log.as_ref())),
            )
            .map(|path| {
                let path = path?;
                Some(paths.iter().position(|p| *p == path).unwrap_or_else(|| {
                    paths.push(path);
                    paths.len() - 1
                }))
            })
            .collect();
        let mut per_worker: Vec<Vec<access_log::WorkerLog>> =
            (0..workers).map(|_| Vec::new()).collect();
        for path in &paths {
            let (worker_logs, writer) =
                access_log::start(path, &self.log_format, workers, self.shared.log.clone())
                    .map_err(|source| Error::AccessLog {
                        path: (*path).clone(),
                        source,
                    })?;
            for (w, log) in worker_logs.into_iter().enumerate() {
                per_worker[w].push(log);
            }
            log_writers.push(writer);
        }
        let logs: Vec<Option<access_log::WorkerLogs>> = per_worker
            .into_iter()
            .map(|logs| {
                (!logs.is_empty()).then(|| access_log::WorkerLogs::new(logs, by_site.clone()))
            })
            .collect();
        for ((id, listeners), log) in self.listeners.into_iter().enumerate().zip(logs) {
            let shared = self.shared.clone();
            let shutdown = shutdown.subscribe();
            let thread = std::thread::Builder::new()
                .name(format!("tessera-worker-{id}"))
                .spawn(move || runtime::run(id, listeners, shared, log, shutdown))
                .map_err(Error::Thread)?;
            threads.push(thread);
        }
        Ok(Running {
            shared: self.shared,
            shutdown,
            threads,
            log_writers,
        })
    }
}

impl Shared {
    pub(crate) fn slots_per_worker(&self) -> usize {
        (self.config.max_connections / self.config.worker_count()).max(1)
    }
}

/// Running workers.
pub struct Running {
    shared: Arc<Shared>,
    shutdown: tokio::sync::watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    log_writers: Vec<JoinHandle<()>>,
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

    /// Reloads what every module reads from disk (SIGHUP: Lua scripts), between
    /// requests, without closing connections; what fails to load keeps its previous
    /// version (logged).
    pub fn reload(&self) {
        for module in &self.shared.modules {
            module.reload();
        }
    }

    /// Reopens the access log file (for SIGUSR1 after logrotate moved it).
    pub fn reopen_logs(&self) {
        self.shared.log.reopen.fetch_add(1, Ordering::Relaxed);
    }

    /// Access log lines dropped because the disk could not keep up (or failed).
    pub fn access_log_dropped(&self) -> u64 {
        self.shared.log.dropped.load(Ordering::Relaxed)
    }

    /// Every module's counters, as (name, value).
    pub fn module_stats(&self) -> Vec<(String, u64)> {
        self.shared.modules.iter().flat_map(|m| m.stats()).collect()
    }

    /// Graceful shutdown: workers stop accepting, finish the responses in flight, close
    /// idle connections, and exit (after `shutdown_timeout` at the latest).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits for every worker to exit.
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
        // A log writer ends once every worker has flushed and dropped its end, unless
        // the disk stopped answering: then it is left behind (its lines are lost) rather
        // than let a stalled disk keep the process from exiting.
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_secs(self.shared.config.shutdown_timeout.max(1));
        for writer in self.log_writers {
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

fn open_root(path: &std::path::Path) -> Result<OwnedFd, Error> {
    use std::os::unix::ffi::OsStrExt;
    let err = |source| Error::Root {
        path: path.to_owned(),
        source,
    };
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| err(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    // SAFETY: c_path is a valid NUL-terminated string; the result is checked.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
