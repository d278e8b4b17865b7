//! The response cache, one per process: the memory tier ([`Cache`]), request coalescing
//! (`flight`), the phase machine every cached fetch goes through (`lookup`), the Redis
//! tier (`shared_tier`), purges and bans sent to and received from the other processes
//! sharing it (`fanout`), stored responses and their compressed forms (`entry`,
//! `variants`), and the freshness rules that decide what is stored and for how long
//! (`freshness`), this node's disk tier (`disk`), and its settings (`config`). It knows nothing of upstreams or ESI assembly: callers fetch, it keeps.

pub(crate) mod ban_rule;
pub(crate) mod config;
pub(crate) mod disk;
pub(crate) mod entry;
pub(crate) mod fanout;
pub(crate) mod flight;
pub(crate) mod freshness;
pub(crate) mod key_rule;
pub(crate) mod lookup;
pub(crate) mod memory;
pub(crate) mod policy;
pub(crate) mod revalidate;
pub(crate) mod shared_tier;
pub(crate) mod variants;

pub use disk::DiskTierStats;
pub(crate) use entry::{Entry, Memo};
pub use fanout::FanOutStats;
pub(crate) use flight::{FlightGuard, Landing};
pub(crate) use memory::key;
pub use memory::{Cache, CacheStats};
pub use shared_tier::SharedTierStats;
