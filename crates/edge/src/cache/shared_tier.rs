//! The shared second tier: serialized cache entries in Redis (or Redis Cluster), so
//! every tessera process warms every other.
//!
//! Redis is never on a response's critical path for longer than `timeout`: one thread
//! (`tessera-redis`, its own tokio runtime) owns the connection and runs commands sent
//! to it over a bounded channel. A lookup waits for its answer at most `timeout`; a
//! write is queued and forgotten (dropped and counted when the queue is full). A
//! breaker opens after `breaker_failures` consecutive failures (errors, timeouts,
//! refused connections) and skips Redis for `breaker_cool_down`, then lets requests try
//! again; each opening is logged, and everything is counted in [`SharedTierStats`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::clock::now_ms;
use crate::config::RedisConfig;
use crate::error::ConfigError;

/// Counters of the shared tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedTierStats {
    /// Lookups answered with an object.
    pub hits: u64,
    /// Lookups answered with nothing.
    pub misses: u64,
    /// Lookups and writes that failed (error, timeout, no connection).
    pub errors: u64,
    /// Lookups and writes skipped because the breaker was open.
    pub skipped: u64,
    /// Writes sent.
    pub writes: u64,
    /// Writes dropped because the queue was full.
    pub writes_dropped: u64,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// Records found but refused (malformed or implausible): treated as misses.
    pub rejected: u64,
    /// Whether the breaker is open now (Redis is skipped).
    pub breaker_open: bool,
}

enum Command {
    Get(String, oneshot::Sender<Result<Option<Bytes>, ()>>),
    Set(String, Vec<u8>, u64),
    Del(String),
    Ban(String),
}

#[derive(Default)]
struct State {
    failures: AtomicU32,
    open_until_ms: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    skipped: AtomicU64,
    writes: AtomicU64,
    writes_dropped: AtomicU64,
    breaker_opened: AtomicU64,
    rejected: AtomicU64,
}

pub(crate) struct SharedTier {
    tx: mpsc::Sender<Command>,
    state: Arc<State>,
    prefix: String,
    timeout: Duration,
    breaker_failures: u32,
    cool_down_ms: u64,
}

impl SharedTier {
    pub(crate) fn start(config: &RedisConfig) -> Result<SharedTier, ConfigError> {
        let target = if config.cluster.is_empty() {
            let client = redis::Client::open(config.url.as_str())
                .map_err(|e| ConfigError::Invalid(format!("cache.redis.url: {e}")))?;
            Target::Single(client)
        } else {
            // Like the single connection's: a node that accepts but never answers must
            // fail a command in time, not hold it (and its in-flight slot) forever.
            let timeout = crate::config::secs(config.timeout);
            let client = redis::cluster::ClusterClient::builder(config.cluster.clone())
                .connection_timeout(timeout.max(Duration::from_millis(500)))
                .response_timeout(timeout)
                .build()
                .map_err(|e| ConfigError::Invalid(format!("cache.redis.cluster: {e}")))?;
            Target::Cluster(client)
        };
        let state = Arc::new(State::default());
        let (tx, rx) = mpsc::channel(config.max_pending_writes.max(16));
        let timeout = crate::config::secs(config.timeout);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConfigError::Invalid(format!("cache.redis: cannot start: {e}")))?;
        let st = state.clone();
        let in_flight = config.max_pending_writes.max(16);
        std::thread::Builder::new()
            .name("tessera-redis".into())
            .spawn(move || runtime.block_on(run(target, rx, st, timeout, in_flight)))
            .map_err(|e| ConfigError::Invalid(format!("cache.redis: cannot start: {e}")))?;
        Ok(SharedTier {
            tx,
            state,
            prefix: config.key_prefix.clone(),
            timeout,
            breaker_failures: config.breaker_failures,
            cool_down_ms: (config.breaker_cool_down * 1000.0) as u64,
        })
    }

    pub(crate) fn stats(&self) -> SharedTierStats {
        let s = &self.state;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SharedTierStats {
            hits: l(&s.hits),
            misses: l(&s.misses),
            errors: l(&s.errors),
            skipped: l(&s.skipped),
            writes: l(&s.writes),
            writes_dropped: l(&s.writes_dropped),
            breaker_opened: l(&s.breaker_opened),
            rejected: l(&s.rejected),
            breaker_open: now_ms() < l(&s.open_until_ms),
        }
    }

    /// A record found but refused: counted, and the lookup is a miss.
    pub(crate) fn count_rejected(&self) {
        self.state.rejected.fetch_add(1, Ordering::Relaxed);
    }

    fn open(&self) -> bool {
        if now_ms() < self.state.open_until_ms.load(Ordering::Relaxed) {
            self.state.skipped.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn failed(&self) {
        self.state.errors.fetch_add(1, Ordering::Relaxed);
        let n = self.state.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if self.breaker_failures > 0 && n >= self.breaker_failures {
            self.state.failures.store(0, Ordering::Relaxed);
            self.state
                .open_until_ms
                .store(now_ms() + self.cool_down_ms, Ordering::Relaxed);
            self.state.breaker_opened.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                failures = n,
                cool_down_ms = self.cool_down_ms,
                "redis is failing: the shared cache tier is skipped (serving from memory and origin)"
            );
        }
    }

    fn succeeded(&self) {
        self.state.failures.store(0, Ordering::Relaxed);
    }

    /// The raw value stored under `key`, within `timeout`; `None` on a miss or any
    /// failure.
    pub(crate) async fn get(&self, key: &str) -> Option<Bytes> {
        if self.open() {
            return None;
        }
        let (reply, answer) = oneshot::channel();
        let full_key = format!("{}{key}", self.prefix);
        if self.tx.try_send(Command::Get(full_key, reply)).is_err() {
            self.failed();
            return None;
        }
        match evloop::time::timeout(self.timeout, answer).await {
            Ok(Ok(Ok(v))) => {
                self.succeeded();
                let counter = if v.is_some() {
                    &self.state.hits
                } else {
                    &self.state.misses
                };
                counter.fetch_add(1, Ordering::Relaxed);
                v
            }
            _ => {
                self.failed();
                None
            }
        }
    }

    /// Queues a write; never waits.
    pub(crate) fn set(&self, key: &str, value: Vec<u8>, ttl_secs: u64) {
        self.send(Command::Set(
            format!("{}{key}", self.prefix),
            value,
            ttl_secs,
        ));
    }

    /// Queues the removal of `key` and its Vary variants.
    pub(crate) fn purge(&self, key: &str) {
        self.send(Command::Del(format!("{}{key}", self.prefix)));
    }

    /// Queues the removal of every key under `prefix`.
    pub(crate) fn ban(&self, prefix: &str) {
        self.send(Command::Ban(format!("{}{prefix}", self.prefix)));
    }

    fn send(&self, command: Command) {
        if self.open() {
            return;
        }
        match self.tx.try_send(command) {
            Ok(()) => {
                self.state.writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.state.writes_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

enum Target {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

#[derive(Clone)]
enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Target {
    async fn connect(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Target::Single(c) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Ok(Conn::Single(
                    c.get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Target::Cluster(c) => Ok(Conn::Cluster(c.get_async_connection().await?)),
        }
    }
}

impl Conn {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// The Redis thread: connects when needed (not more often than every `timeout`, and
/// only while commands come), runs each command as its own task so a slow one delays
/// no other, and drops the connection when a command fails so the next reconnects.
/// At most `in_flight` commands run at once: beyond that the queue fills, and writes
/// are dropped (lookups time out at their callers), so a slow Redis costs bounded memory.
async fn run(
    target: Target,
    mut rx: mpsc::Receiver<Command>,
    state: Arc<State>,
    timeout: Duration,
    in_flight: usize,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut conn: Option<Conn> = None;
    let broken = Arc::new(AtomicBool::new(false));
    let mut last_attempt: Option<evloop::time::Instant> = None;
    // A connect may take longer than a lookup's timeout (the handshake), but not long.
    let connect_timeout = timeout.max(Duration::from_millis(500));
    while let Some(command) = rx.recv().await {
        if broken.swap(false, Ordering::Relaxed) {
            conn = None;
        }
        if conn.is_none() && last_attempt.map_or(true, |t| t.elapsed() >= timeout) {
            last_attempt = Some(evloop::time::Instant::now());
            match evloop::time::timeout(connect_timeout, target.connect(connect_timeout)).await {
                Ok(Ok(c)) => {
                    tracing::info!("redis connected");
                    conn = Some(c);
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "redis connect failed"),
                Err(_) => tracing::debug!("redis connect timed out"),
            }
        }
        let Some(mut c) = conn.clone() else {
            // No connection: a lookup fails at once (its caller counts it); a write is lost.
            if let Command::Get(_, reply) = command {
                let _ = reply.send(Err(()));
            } else {
                state.errors.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let broken = broken.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let ok = match command {
                Command::Get(key, reply) => {
                    let r: redis::RedisResult<Option<Vec<u8>>> =
                        c.query(redis::cmd("GET").arg(&key)).await;
                    let ok = r.is_ok();
                    let _ = reply.send(r.map(|v| v.map(Bytes::from)).map_err(|_| ()));
                    ok
                }
                Command::Set(key, value, ttl) => c
                    .query::<()>(redis::cmd("SET").arg(&key).arg(value).arg("EX").arg(ttl))
                    .await
                    .is_ok(),
                Command::Del(key) => del_matching(&mut c, &key, true).await,
                Command::Ban(prefix) => del_matching(&mut c, &prefix, false).await,
            };
            if !ok {
                broken.store(true, Ordering::Relaxed);
                state.errors.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Deletes `key` and the keys under it: with `exact`, `key` and its Vary variants
/// (`key` + NUL ...); otherwise every key starting with `key`. Uses SCAN, bounded by
/// the keyspace; on a cluster, only the exact key is removed (SCAN is per node).
async fn del_matching(c: &mut Conn, key: &str, exact: bool) -> bool {
    let mut ok = true;
    if exact {
        ok &= c.query::<()>(redis::cmd("DEL").arg(key)).await.is_ok();
    }
    if matches!(c, Conn::Cluster(_)) {
        return ok;
    }
    let pattern = format!("{}{}*", glob_escape(key), if exact { "\0" } else { "" });
    let mut cursor: u64 = 0;
    loop {
        let r: redis::RedisResult<(u64, Vec<Vec<u8>>)> = c
            .query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await;
        let Ok((next, keys)) = r else { return false };
        if !keys.is_empty() {
            ok &= c.query::<()>(redis::cmd("DEL").arg(keys)).await.is_ok();
        }
        if next == 0 {
            return ok;
        }
        cursor = next;
    }
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}
