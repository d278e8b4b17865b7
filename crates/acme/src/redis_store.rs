//! `storage = "redis"`: the account, certificates and keys in the `[cache.redis]` server,
//! under `PREFIX` `acme:CA:` (`tessera:acme:127.0.0.1_14000_dir:a.test.crt`), so that
//! every node of a fleet serves what one of them ordered.
//!
//! The private keys (the account's, inside its credentials, and each certificate's)
//! are stored encrypted with AES-256-GCM under `storage_key` (ring's, as the server's
//! TLS uses), each with a fresh random nonce and its Redis key name as associated data,
//! so a value moved to another key does not decrypt. Certificates are public and
//! stored as they are.
//!
//! A name's lock is `lock:NAME`, set with `SET NX PX` to a random token, its expiry
//! pushed back while the order runs, and deleted by its holder alone (a script compares
//! the token), so a process that dies mid-order holds nothing past [`LOCK_TTL`].

use std::time::Duration;

use redis::AsyncCommands;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use crate::store::Stored;

/// How long a lock outlives its holder's last sign of life.
const LOCK_TTL: Duration = Duration::from_secs(30);
/// How often the holder pushes its lock's expiry back.
const LOCK_RENEW: Duration = Duration::from_secs(10);
/// The longest one Redis command may take.
const TIMEOUT: Duration = Duration::from_secs(5);

const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                       return redis.call('del', KEYS[1]) else return 0 end";

pub(crate) struct RedisStore {
    client: redis::Client,
    /// `PREFIX` `acme:CA:`.
    prefix: String,
    key: LessSafeKey,
}

/// A lock this process holds, kept alive by a task until released.
pub(crate) struct Held {
    client: redis::Client,
    key: String,
    token: String,
    alive: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    /// Not released (its order's task was ended): it expires after [`LOCK_TTL`].
    fn drop(&mut self) {
        self.alive.abort();
    }
}

impl Held {
    pub(crate) async fn release(self) {
        self.alive.abort();
        let release = redis::Script::new(RELEASE);
        if let Ok(mut conn) = connect(&self.client).await {
            let mut invocation = release.key(&self.key);
            invocation.arg(&self.token);
            let done = invocation.invoke_async::<i64>(&mut conn);
            if let Ok(Err(e)) = tokio::time::timeout(TIMEOUT, done).await {
                tracing::warn!(key = %self.key, error = %e, "cannot release an ACME lock in Redis; it expires by itself");
            }
        }
    }
}

async fn connect(client: &redis::Client) -> Result<redis::aio::MultiplexedConnection, String> {
    tokio::time::timeout(TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| format!("Redis: no connection within {TIMEOUT:?}"))?
        .map_err(|e| format!("Redis: {e}"))
}

fn redis_error(e: redis::RedisError) -> String {
    format!("Redis: {e}")
}

impl RedisStore {
    /// The store at `url` (`[cache.redis] url`), its keys under `prefix` (`[cache.redis]
    /// key_prefix`) for the CA `directory`, the private keys encrypted with `key`.
    pub(crate) fn new(
        url: &str,
        prefix: &str,
        directory: &str,
        key: &[u8; 32],
    ) -> Result<RedisStore, String> {
        let client = redis::Client::open(url).map_err(redis_error)?;
        let key =
            UnboundKey::new(&AES_256_GCM, key).map_err(|_| "storage_key: not an AES-256 key")?;
        Ok(RedisStore {
            client,
            prefix: format!("{prefix}acme:{}:", crate::store::ca_folder(directory)),
            key: LessSafeKey::new(key),
        })
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let mut conn = connect(&self.client).await?;
        tokio::time::timeout(TIMEOUT, conn.get(key))
            .await
            .map_err(|_| format!("Redis: GET {key}: no answer within {TIMEOUT:?}"))?
            .map_err(redis_error)
    }

    pub(crate) async fn account(&self) -> Result<Option<Vec<u8>>, String> {
        let key = format!("{}account", self.prefix);
        match self.get(&key).await? {
            Some(sealed) => self.open(&key, &sealed).map(Some),
            None => Ok(None),
        }
    }

    pub(crate) async fn save_account(&self, json: &[u8]) -> Result<(), String> {
        let key = format!("{}account", self.prefix);
        let sealed = self.seal(&key, json)?;
        let mut conn = connect(&self.client).await?;
        conn.set::<_, _, ()>(&key, sealed)
            .await
            .map_err(redis_error)
    }

    pub(crate) async fn load(&self, name: &str) -> Result<Option<Stored>, String> {
        let (crt, key) = self.keys(name);
        let mut conn = connect(&self.client).await?;
        let (chain, sealed): (Option<Vec<u8>>, Option<Vec<u8>>) = tokio::time::timeout(
            TIMEOUT,
            redis::pipe().get(&crt).get(&key).query_async(&mut conn),
        )
        .await
        .map_err(|_| format!("Redis: GET {crt}: no answer within {TIMEOUT:?}"))?
        .map_err(redis_error)?;
        let (Some(chain), Some(sealed)) = (chain, sealed) else {
            return Ok(None);
        };
        let plain = self.open(&key, &sealed)?;
        let chain = String::from_utf8(chain).map_err(|_| format!("{crt}: not PEM"))?;
        let plain = String::from_utf8(plain).map_err(|_| format!("{key}: not PEM"))?;
        Ok(Stored::new(chain, plain))
    }

    /// Stores the key and the certificate together (one transaction), so that a reader
    /// never finds one without the other.
    pub(crate) async fn save(&self, name: &str, stored: &Stored) -> Result<(), String> {
        let (crt, key) = self.keys(name);
        let sealed = self.seal(&key, stored.key.as_bytes())?;
        let mut conn = connect(&self.client).await?;
        redis::pipe()
            .atomic()
            .set(&key, sealed)
            .ignore()
            .set(&crt, stored.chain.as_bytes())
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_error)
    }

    /// `name`'s lock when no other process holds it, kept alive until released.
    pub(crate) async fn try_lock(&self, name: &str) -> Result<Option<Held>, String> {
        let key = format!("{}lock:{name}", self.prefix);
        let mut token = [0u8; 16];
        SystemRandom::new()
            .fill(&mut token)
            .map_err(|_| "no random bytes for a lock token")?;
        let token: String = token.iter().map(|b| format!("{b:02x}")).collect();
        let mut conn = connect(&self.client).await?;
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .map_err(redis_error)?;
        if set.is_none() {
            return Ok(None);
        }
        let alive = tokio::spawn({
            let (key, token) = (key.clone(), token.clone());
            async move {
                let renew = redis::Script::new(RENEW);
                loop {
                    tokio::time::sleep(LOCK_RENEW).await;
                    let mut invocation = renew.key(&key);
                    invocation.arg(&token).arg(LOCK_TTL.as_millis() as u64);
                    let pushed = invocation.invoke_async::<i64>(&mut conn).await;
                    if !matches!(pushed, Ok(1)) {
                        tracing::warn!(key = %key, result = ?pushed, "the ACME lock in Redis could not be kept");
                    }
                }
            }
        });
        Ok(Some(Held {
            client: self.client.clone(),
            key,
            token,
            alive,
        }))
    }

    /// `PREFIX` `acme:CA:`: what every key of this store starts with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A connection to the store's server.
    pub(crate) async fn connection(&self) -> Result<redis::aio::MultiplexedConnection, String> {
        connect(&self.client).await
    }

    /// A connection to the store's server for a subscription.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub, String> {
        tokio::time::timeout(TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| format!("Redis: no connection within {TIMEOUT:?}"))?
            .map_err(redis_error)
    }

    fn keys(&self, name: &str) -> (String, String) {
        (
            format!("{}{name}.crt", self.prefix),
            format!("{}{name}.key", self.prefix),
        )
    }

    /// `nonce || ciphertext || tag`, bound to the Redis key `name`.
    pub(crate) fn seal(&self, name: &str, plain: &[u8]) -> Result<Vec<u8>, String> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| "no random bytes for a nonce")?;
        let mut out = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut out,
            )
            .map_err(|_| "cannot encrypt")?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        Ok(sealed)
    }

    pub(crate) fn open(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
        let undecryptable =
            || format!("{name}: does not decrypt with storage_key (another key wrote it?)");
        if sealed.len() < NONCE_LEN {
            return Err(undecryptable());
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| undecryptable())?;
        let mut buf = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut buf)
            .map_err(|_| undecryptable())?;
        Ok(plain.to_vec())
    }
}

/// The `storage_key` file's 32 bytes: as they are, or written as 64 hex digits or in
/// base64 (`openssl rand -hex 32`, `openssl rand -base64 32`).
pub fn storage_key(bytes: &[u8]) -> Result<[u8; 32], String> {
    if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
        return Ok(raw);
    }
    let text = std::str::from_utf8(bytes).map(str::trim).unwrap_or("");
    let hex = (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| {
        (0..32)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap_or(0))
            .collect::<Vec<u8>>()
    });
    let decoded = hex.or_else(|| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(text).ok()
    });
    decoded
        .and_then(|d| <[u8; 32]>::try_from(d).ok())
        .ok_or_else(|| {
            format!(
                "must hold 32 random bytes (as they are, in 64 hex digits or in base64), not {} bytes",
                bytes.len()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_key_opens_under_its_name_only() {
        let store =
            RedisStore::new("redis://127.0.0.1:1", "t:", "https://ca/dir", &[7; 32]).unwrap();
        let sealed = store.seal("t:acme:ca_dir:a.test.key", b"secret").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(
            store.open("t:acme:ca_dir:a.test.key", &sealed).unwrap(),
            b"secret"
        );
        assert!(store.open("t:acme:ca_dir:b.test.key", &sealed).is_err());
        let other =
            RedisStore::new("redis://127.0.0.1:1", "t:", "https://ca/dir", &[8; 32]).unwrap();
        assert!(other.open("t:acme:ca_dir:a.test.key", &sealed).is_err());
    }

    #[test]
    fn the_storage_key_is_32_bytes_raw_hex_or_base64() {
        assert_eq!(storage_key(&[1; 32]).unwrap(), [1; 32]);
        assert_eq!(storage_key("01".repeat(32).as_bytes()).unwrap(), [1; 32]);
        let b64 = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n";
        assert_eq!(storage_key(b64.as_bytes()).unwrap(), [1; 32]);
        assert!(storage_key(b"short").is_err());
    }
}
