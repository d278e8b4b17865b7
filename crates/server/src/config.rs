use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// Everything `tessera serve` can be told, from the config file and the command line.
/// Every key is optional; docs/config.md lists them with their defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Addresses to listen on. Default is 127.0.0.1:8080: loopback only, so a first run
    /// never exposes a machine by accident.
    pub listen: Vec<SocketAddr>,
    /// Directory served. Default is `examples/site`, the demo site in the repository.
    pub root: PathBuf,
    /// Worker threads. Default 0 means one per core.
    pub workers: usize,
    /// Listen backlog per listener. Default is 4096, enough to absorb a connection burst
    /// while a worker is busy (the kernel caps it at net.core.somaxconn).
    pub backlog: u32,
    /// File served for a directory request ending in `/`. Default `index.html`.
    pub index: String,
    /// Files at least this large are sent with sendfile(2); smaller ones are kept in the
    /// worker's file cache and written from memory with the response head in one
    /// vectored write. Default 16 KiB: below that, one writev beats a second syscall.
    pub sendfile_min_size: u64,
    /// Most files each worker keeps open in its file cache. Default 4096.
    pub file_cache_entries: usize,
    /// Seconds a graceful shutdown waits for responses in flight. Default 10.
    pub shutdown_timeout: u64,
    pub limits: LimitsConfig,
}

/// `[limits]`: the request limits (see `wire::Limits`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Default 16384 bytes; larger heads get 431.
    pub max_head_size: usize,
    /// Default 8192 bytes; longer targets get 414.
    pub max_uri_length: usize,
    /// Default 100; more header fields get 431.
    pub max_headers: usize,
    /// Default 1048576 bytes; larger bodies get 413.
    pub max_body_size: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            root: PathBuf::from("examples/site"),
            workers: 0,
            backlog: 4096,
            index: "index.html".into(),
            sendfile_min_size: 16 * 1024,
            file_cache_entries: 4096,
            shutdown_timeout: 10,
            limits: LimitsConfig::default(),
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = wire::Limits::default();
        LimitsConfig {
            max_head_size: l.max_head_size,
            max_uri_length: l.max_uri_length,
            max_headers: l.max_headers,
            max_body_size: l.max_body_size,
        }
    }
}

impl LimitsConfig {
    pub(crate) fn to_wire(&self) -> wire::Limits {
        wire::Limits {
            max_head_size: self.max_head_size,
            max_uri_length: self.max_uri_length,
            max_headers: self.max_headers,
            max_body_size: self.max_body_size,
        }
    }
}

impl Config {
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.listen.is_empty() {
            return Err("`listen` needs at least one address".into());
        }
        if self.index.is_empty() || self.index.contains('/') || self.index == ".." {
            return Err(format!("`index` must be a file name, got {:?}", self.index));
        }
        let l = &self.limits;
        if !(256..=1 << 20).contains(&l.max_head_size) {
            return Err("`limits.max_head_size` must be between 256 and 1048576".into());
        }
        if l.max_uri_length == 0 || l.max_uri_length >= l.max_head_size {
            return Err("`limits.max_uri_length` must be above 0 and below max_head_size".into());
        }
        if !(1..=wire::MAX_HEADERS_CAP).contains(&l.max_headers) {
            return Err(format!(
                "`limits.max_headers` must be between 1 and {}",
                wire::MAX_HEADERS_CAP
            ));
        }
        if self.workers > 1024 {
            return Err("`workers` must be at most 1024".into());
        }
        Ok(())
    }
}
