//! Invalidations that reach every process sharing the Redis tier (docs/cache.md,
//! "Purges reach every process"): a purge, soft purge, purge by surrogate key or ban a
//! client sends to one process is applied there at once (the answer does not wait), then
//! sent to the others through Redis pub/sub (`SPUBLISH`/`SSUBSCRIBE`, sharded pub/sub,
//! on a Redis Cluster; `PUBLISH`/`SUBSCRIBE` on one Redis), and each applies it once.
//!
//! - **The log.** A Lua script numbers each invalidation in Redis (an epoch and a
//!   sequence number, in a hash) and appends it to a capped list (`fan_out_log`), in one
//!   step; the numbered message is then published. All three names share one hash tag,
//!   so on a cluster they live in one slot and the script may touch both keys.
//! - **Once per process.** A message carries the id of the process that sent it
//!   ([`node_id`]): that process skips it (it applied it when the client asked). Others
//!   apply the next number they expect and skip those they have seen.
//! - **Catching up.** A process that sees a number past the next one, reconnects, or
//!   finds on its poll (every second) that the log moved on, reads the log back and
//!   applies what it has not seen. When it cannot know what it missed (the log was
//!   trimmed past its last number, Redis lost the log, or it stored objects before it
//!   first reached Redis) it drops its memory tier and logs why.
//!
//! Everything runs on one thread (`tessera-fanout`, its own tokio runtime and its own
//! Redis connection, RESP3 so that one connection both subscribes and sends); workers
//! only queue what they invalidated ([`FanOut::send`], which never waits). While Redis
//! cannot be reached the queue holds what is to be sent (at most [`QUEUE`]; beyond it
//! invalidations are lost for the others, counted and logged).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

pub(crate) mod message;

pub(crate) use message::Invalidation;
use message::{Follow, Live, Message};

use crate::clock::now_ms;
use crate::config::RedisConfig;
use crate::error::ConfigError;

/// Invalidations waiting to be sent, at most.
const QUEUE: usize = 1024;

/// How often the thread tries to reconnect, and the unit of its poll.
const TICK: Duration = Duration::from_millis(250);

/// Ticks between two reads of the log's head (a message lost, a publish that numbered
/// an invalidation but could not broadcast it).
const POLL_TICKS: u32 = 4;

/// The shortest timeout of the thread's commands: reading the log back takes longer
/// than a lookup.
const MIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Numbers an invalidation and keeps it in the capped log, in one step: KEYS[1] the
/// head (a hash of `epoch` and `seq`), KEYS[2] the log; ARGV[1] the message's body,
/// ARGV[2] an epoch for a log that has none, ARGV[3] the log's length.
const NUMBER: &str = r"
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[2])
local epoch = redis.call('HGET', KEYS[1], 'epoch')
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local message = epoch .. ' ' .. seq .. ' ' .. ARGV[1]
redis.call('RPUSH', KEYS[2], message)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return message
";

/// What the fan-out applies other processes' invalidations to: the process's cache
/// (`memory/invalidate.rs`).
pub(crate) trait Invalidated: Send + Sync {
    /// Applies another process's invalidation.
    fn apply_remote(self: Arc<Self>, what: &Invalidation);
    /// Whether nothing is held yet.
    fn memory_empty(&self) -> bool;
    /// Drops everything held: invalidations were missed, and which cannot be known.
    fn drop_memory(&self, why: &str);
}

/// Counters of the fan-out, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FanOutStats {
    /// Invalidations sent to the other processes.
    pub sent: u64,
    /// Invalidations that could not be sent (the queue was full while Redis could not
    /// be reached).
    pub lost: u64,
    /// Other processes' messages received by pub/sub (those seen already included).
    pub received: u64,
    /// Other processes' invalidations applied as their message came.
    pub applied_live: u64,
    /// Other processes' invalidations applied from the log, catching up.
    pub applied_caught_up: u64,
    /// Times the memory tier was dropped because what was missed could not be known.
    pub memory_drops: u64,
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    lost: AtomicU64,
    received: AtomicU64,
    applied_live: AtomicU64,
    applied_caught_up: AtomicU64,
    memory_drops: AtomicU64,
    /// Whether a loss was logged since the queue last had room.
    lost_logged: AtomicBool,
}

/// This process's id in messages: random, one per process.
pub(crate) fn node_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u64(now_ms());
        h.finish()
    })
}

/// The workers' side: queues invalidations for the thread.
pub(crate) struct FanOut {
    tx: mpsc::Sender<Invalidation>,
    counts: Arc<Counts>,
}

impl FanOut {
    /// Builds the fan-out of `config` and its thread, not started yet ([`Runner::spawn`]
    /// needs the cache).
    pub(crate) fn new(config: &RedisConfig) -> Result<(FanOut, Runner), ConfigError> {
        let timeout = crate::config::secs(config.timeout).max(MIN_TIMEOUT);
        let (push_tx, push) = mpsc::unbounded_channel();
        let target = if config.cluster.is_empty() {
            let mut info = redis::IntoConnectionInfo::into_connection_info(config.url.as_str())
                .map_err(|e| ConfigError::Invalid(format!("cache.redis.url: {e}")))?;
            info.redis.protocol = redis::ProtocolVersion::RESP3;
            let client = redis::Client::open(info)
                .map_err(|e| ConfigError::Invalid(format!("cache.redis.url: {e}")))?;
            Target::Single(client)
        } else {
            // Its messages come as generation 0: a cluster connection reconnects (and
            // subscribes again) by itself.
            let tx = push_tx.clone();
            let client = redis::cluster::ClusterClient::builder(config.cluster.clone())
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(move |p| tx.send((0, p)))
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .map_err(|e| ConfigError::Invalid(format!("cache.redis.cluster: {e}")))?;
            Target::Cluster(client)
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConfigError::Invalid(format!("cache.redis: cannot start: {e}")))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let counts = Arc::new(Counts::default());
        // One hash tag for the three: one slot on a cluster.
        let tag = format!("{}{{fanout}}", config.key_prefix);
        let runner = Runner {
            rx,
            push,
            push_tx,
            target,
            head: format!("{tag}:head"),
            log: format!("{tag}:log"),
            channel: format!("{tag}:channel"),
            log_len: config.fan_out_log,
            timeout,
            counts: counts.clone(),
            runtime,
        };
        Ok((FanOut { tx, counts }, runner))
    }

    /// Queues `what` for the other processes; never waits.
    pub(crate) fn send(&self, what: Invalidation) {
        match self.tx.try_send(what) {
            Ok(()) => self.counts.lost_logged.store(false, Ordering::Relaxed),
            Err(_) => {
                self.counts.lost.fetch_add(1, Ordering::Relaxed);
                if !self.counts.lost_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        queued = QUEUE,
                        "invalidations cannot reach the other processes (redis unreachable, the queue full): they are lost for them"
                    );
                }
            }
        }
    }

    pub(crate) fn stats(&self) -> FanOutStats {
        let c = &self.counts;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FanOutStats {
            sent: l(&c.sent),
            lost: l(&c.lost),
            received: l(&c.received),
            applied_live: l(&c.applied_live),
            applied_caught_up: l(&c.applied_caught_up),
            memory_drops: l(&c.memory_drops),
        }
    }
}

enum Target {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// A push from a connection of a generation (a single Redis's connections are numbered,
/// so that the end of an old one is not taken for the end of the current one).
type Push = (u64, PushInfo);

/// The thread's side.
pub(crate) struct Runner {
    rx: mpsc::Receiver<Invalidation>,
    push: mpsc::UnboundedReceiver<Push>,
    push_tx: mpsc::UnboundedSender<Push>,
    target: Target,
    head: String,
    log: String,
    channel: String,
    log_len: usize,
    timeout: Duration,
    counts: Arc<Counts>,
    runtime: tokio::runtime::Runtime,
}

impl Runner {
    /// Starts the thread; it ends with the cache.
    pub(crate) fn spawn(self, cache: Weak<dyn Invalidated>) -> Result<(), ConfigError> {
        std::thread::Builder::new()
            .name("tessera-fanout".into())
            .spawn(move || {
                let runtime = self.runtime;
                let state = Thread {
                    push: self.push,
                    push_tx: self.push_tx,
                    target: self.target,
                    head: self.head,
                    log: self.log,
                    channel: self.channel,
                    log_len: self.log_len,
                    timeout: self.timeout,
                    counts: self.counts,
                    cache,
                    me: node_id(),
                    follow: Follow::default(),
                    conn: None,
                    generation: 0,
                    subscribed: false,
                };
                runtime.block_on(state.run(self.rx));
            })
            .map(|_| ())
            .map_err(|e| ConfigError::Invalid(format!("cache.redis: cannot start: {e}")))
    }
}

struct Thread {
    push: mpsc::UnboundedReceiver<Push>,
    push_tx: mpsc::UnboundedSender<Push>,
    target: Target,
    head: String,
    log: String,
    channel: String,
    log_len: usize,
    timeout: Duration,
    counts: Arc<Counts>,
    cache: Weak<dyn Invalidated>,
    me: u64,
    follow: Follow,
    conn: Option<Conn>,
    /// The current connection's number (a single Redis).
    generation: u64,
    /// Whether it has subscribed once.
    subscribed: bool,
}

impl Thread {
    async fn run(mut self, mut rx: mpsc::Receiver<Invalidation>) {
        let mut pending: Option<Invalidation> = None;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks = 0u32;
        loop {
            let mut catch_up = false;
            tokio::select! {
                what = rx.recv(), if self.conn.is_some() && pending.is_none() => {
                    let Some(what) = what else { return };
                    pending = Some(what);
                }
                Some((generation, push)) = self.push.recv() => {
                    catch_up = self.pushed(generation, push);
                }
                _ = tick.tick() => {
                    if self.cache.strong_count() == 0 {
                        return;
                    }
                    ticks = ticks.wrapping_add(1);
                    if self.conn.is_none() {
                        catch_up = self.connect().await;
                    } else {
                        catch_up = ticks % POLL_TICKS == 0;
                    }
                }
            }
            if catch_up && self.conn.is_some() {
                if let Err(e) = self.catch_up().await {
                    self.broken(&e);
                }
            }
            if let (Some(what), Some(_)) = (&pending, &self.conn) {
                match self.publish(what).await {
                    Ok(()) => {
                        pending = None;
                        self.counts.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Err((numbered, e)) => {
                        // Numbered but not broadcast: in the log, which the others
                        // read on their poll. Not numbered: sent again.
                        if numbered {
                            pending = None;
                            self.counts.sent.fetch_add(1, Ordering::Relaxed);
                        }
                        self.broken(&e);
                    }
                }
            }
        }
    }

    fn broken(&mut self, e: &redis::RedisError) {
        tracing::debug!(error = %e, "invalidation fan-out: redis failed");
        if matches!(self.target, Target::Single(_)) {
            self.conn = None;
        }
    }

    /// Connects and subscribes; whether it did (the log is then read back).
    async fn connect(&mut self) -> bool {
        let attempt = async {
            match &self.target {
                Target::Single(client) => {
                    self.generation += 1;
                    let (tx, generation) = (self.push_tx.clone(), self.generation);
                    let config = redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(self.timeout)
                        .set_response_timeout(self.timeout)
                        .set_push_sender(move |p| tx.send((generation, p)));
                    let mut c = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    c.subscribe(&self.channel).await?;
                    Ok(Conn::Single(c))
                }
                Target::Cluster(client) => {
                    let mut c = client.get_async_connection().await?;
                    c.ssubscribe(&self.channel).await?;
                    Ok::<_, redis::RedisError>(Conn::Cluster(c))
                }
            }
        };
        match evloop::time::timeout(self.timeout, attempt).await {
            Ok(Ok(c)) => {
                // The first time is the usual start, not news; again is a recovery.
                if self.subscribed {
                    tracing::info!("invalidation fan-out: subscribed through redis again");
                } else {
                    tracing::debug!("invalidation fan-out: subscribed through redis");
                }
                self.subscribed = true;
                self.conn = Some(c);
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "invalidation fan-out: cannot connect");
                false
            }
            Err(_) => {
                tracing::debug!("invalidation fan-out: connecting timed out");
                false
            }
        }
    }

    /// Handles a push; whether the log is to be read back.
    fn pushed(&mut self, generation: u64, push: PushInfo) -> bool {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let raw = match push.data.get(1) {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => return false,
                };
                let Some(m) = Message::parse(&raw) else {
                    tracing::debug!(%raw, "invalidation fan-out: a message not understood");
                    return false;
                };
                if m.node != self.me {
                    self.counts.received.fetch_add(1, Ordering::Relaxed);
                }
                match self.follow.live(&m, self.me) {
                    Live::Apply => {
                        if let Some(cache) = self.cache.upgrade() {
                            cache.apply_remote(&m.what);
                            self.counts.applied_live.fetch_add(1, Ordering::Relaxed);
                        }
                        false
                    }
                    Live::Skip => false,
                    Live::CatchUp => true,
                }
            }
            // The current connection to a single Redis ended: reconnect (and catch up).
            PushKind::Disconnection => {
                if matches!(self.target, Target::Single(_)) && generation == self.generation {
                    tracing::info!("invalidation fan-out: disconnected from redis");
                    self.conn = None;
                }
                false
            }
            // A cluster connection subscribed again after a reconnection: what came
            // meanwhile is in the log.
            PushKind::SSubscribe => matches!(self.target, Target::Cluster(_)),
            _ => false,
        }
    }

    /// Reads the log's head and, when it moved past this process, the log; applies what
    /// was not seen, or drops the memory tier when that cannot be known.
    async fn catch_up(&mut self) -> redis::RedisResult<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let head: HashMap<String, String> =
            conn.query(redis::cmd("HGETALL").arg(&self.head)).await?;
        let head = match (
            head.get("epoch"),
            head.get("seq").and_then(|s| s.parse().ok()),
        ) {
            (Some(epoch), Some(seq)) => Some((epoch.clone(), seq)),
            _ => None,
        };
        let moved = match &head {
            Some((epoch, seq)) => !self.follow.at(Some(epoch), *seq),
            None => !self.follow.at(None, 0),
        };
        if !moved {
            return Ok(());
        }
        let log: Vec<String> = match head {
            Some(_) => {
                conn.query(redis::cmd("LRANGE").arg(&self.log).arg(0).arg(-1))
                    .await?
            }
            None => Vec::new(),
        };
        let Some(cache) = self.cache.upgrade() else {
            return Ok(());
        };
        let log = log.iter().filter_map(|raw| Message::parse(raw)).collect();
        let found = self
            .follow
            .catch_up(head, log, cache.memory_empty(), self.me);
        if let Some(why) = found.drop {
            cache.drop_memory(why);
            self.counts.memory_drops.fetch_add(1, Ordering::Relaxed);
        }
        for m in &found.apply {
            cache.clone().apply_remote(&m.what);
        }
        self.counts
            .applied_caught_up
            .fetch_add(found.apply.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Numbers `what` in the log and broadcasts it; on failure, whether it was numbered.
    async fn publish(&mut self, what: &Invalidation) -> Result<(), (bool, redis::RedisError)> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let epoch = format!("{:016x}.{}", self.me, now_ms());
        let message: String = conn
            .query(
                redis::cmd("EVAL")
                    .arg(NUMBER)
                    .arg(2)
                    .arg(&self.head)
                    .arg(&self.log)
                    .arg(message::body(self.me, what))
                    .arg(epoch)
                    .arg(self.log_len),
            )
            .await
            .map_err(|e| (false, e))?;
        let publish = match conn {
            Conn::Single(_) => "PUBLISH",
            Conn::Cluster(_) => "SPUBLISH",
        };
        conn.query::<i64>(redis::cmd(publish).arg(&self.channel).arg(message))
            .await
            .map_err(|e| (true, e))?;
        Ok(())
    }
}
