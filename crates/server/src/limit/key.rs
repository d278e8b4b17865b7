//! What a limit counts a request by: a value with the routing rules' variables, hashed
//! once per request with a hasher seeded at random per limit (so that a client cannot
//! choose keys that crowd one group of a table).

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

/// What a zone counts a request by.
pub(crate) enum Key {
    /// `$remote_addr` alone: the client's address, hashed as its bytes.
    Client,
    Template(rules::Template),
}

/// A limit's key and its hasher.
pub(crate) struct KeyHasher {
    key: Key,
    hasher: foldhash::quality::FixedState,
}

impl KeyHasher {
    /// The key of `text` (`$remote_addr`, `$http_x_user $arg_a`...), hashed with `seed`.
    pub fn new(text: &str, seed: u64) -> Result<KeyHasher, String> {
        let key = match text.trim() {
            "$remote_addr" => Key::Client,
            text => Key::Template(rules::Template::compile(text, None).map_err(|e| e.to_string())?),
        };
        Ok(KeyHasher {
            key,
            hasher: foldhash::quality::FixedState::with_seed(seed),
        })
    }

    /// The hash of the request's key; `None` when the key is empty (not limited).
    pub fn hash(&self, ctx: &rules::Ctx<'_>) -> Option<u64> {
        let mut hasher = self.hasher.build_hasher();
        match &self.key {
            Key::Client => match ctx.peer.ip() {
                IpAddr::V4(a) => hasher.write(&a.octets()),
                IpAddr::V6(a) => hasher.write(&a.octets()),
            },
            Key::Template(t) => {
                let empty = KEY.with_borrow_mut(|key| {
                    key.clear();
                    t.expand(ctx, (b"", &[]), key);
                    hasher.write(key);
                    key.is_empty() || key.len() > 65535
                });
                if empty {
                    return None;
                }
            }
        }
        Some(hasher.finish())
    }
}

thread_local! {
    /// A key being expanded, reused from request to request.
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}
