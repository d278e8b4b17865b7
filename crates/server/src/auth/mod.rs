//! Basic authentication (`basic_auth`; docs/security.md, "Basic authentication"): the
//! users of an htpasswd file, checked against a request's `Authorization: Basic`.
//!
//! A bcrypt or SHA-512-crypt check costs milliseconds of CPU on purpose, which a worker
//! serving thousands of requests cannot spend: a check runs on a small pool of verifier
//! threads shared by the workers (`verifier.rs`), and the worker serves its other
//! connections meanwhile. The queue to the pool is bounded; a request that finds it full
//! is answered 503 at once, so a flood of wrong passwords costs each worker a hash and a
//! failed send, never a stall. A good password is remembered per worker (a keyed SHA-256
//! of user and password, in a bounded set): a known user's next request costs one hash
//! and a lookup, no verification.

pub(crate) mod forward;
mod htpasswd;
mod verifier;

use std::cell::RefCell;
use std::collections::HashSet;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use htpasswd::Hash;

/// Most good credentials a worker remembers; past that it forgets them all and starts
/// again (each costs one verification more).
const REMEMBERED: usize = 4096;

/// Longest `Authorization` value read (a user and password of some 280 bytes): longer
/// ones are refused unread.
const MAX_CREDENTIALS: usize = 384;

/// One route's `basic_auth`, compiled: its users and the challenge it answers with.
#[derive(Debug)]
pub(crate) struct BasicAuth {
    users: htpasswd::Users,
    /// `Basic realm="..."`, the `WWW-Authenticate` value of a 401.
    pub challenge: Box<[u8]>,
    /// Random per load: the key of the remembered credentials, so that a reload (a
    /// changed file) forgets them all.
    salt: [u8; 16],
}

/// What a request's credentials are worth to a route.
pub(crate) enum Verdict {
    /// Known good (remembered).
    Good,
    /// None, malformed, an unknown user: 401.
    Refused,
    /// To verify on the pool.
    Verify(Pending),
}

/// Credentials to verify, with the key they are remembered by when good.
pub(crate) struct Pending {
    hash: Hash,
    password: Vec<u8>,
    key: u128,
}

thread_local! {
    /// Keys of the credentials this worker verified as good.
    static GOOD: RefCell<HashSet<u128, foldhash::fast::RandomState>> =
        RefCell::new(HashSet::default());
}

impl BasicAuth {
    /// Reads the htpasswd file of `config`; the error names the file and line.
    pub fn load(config: &rules::config::BasicAuth) -> Result<BasicAuth, String> {
        let users = htpasswd::read(&config.htpasswd)?;
        if config.realm.contains(['"', '\\']) || config.realm.chars().any(char::is_control) {
            return Err(format!(
                "realm {:?}: no quotes, backslashes or control characters",
                config.realm
            ));
        }
        let mut salt = [0u8; 16];
        fastrand::fill(&mut salt);
        Ok(BasicAuth {
            users,
            challenge: format!("Basic realm=\"{}\"", config.realm)
                .into_bytes()
                .into(),
            salt,
        })
    }

    /// What the request's `Authorization` field (`None`: it has none) is worth.
    pub fn judge(&self, authorization: Option<&[u8]>) -> Verdict {
        let mut buf = [0u8; MAX_CREDENTIALS];
        let Some(len) = authorization.and_then(|v| decode(v, &mut buf)) else {
            return Verdict::Refused;
        };
        let pair = &buf[..len];
        let Some(colon) = memchr::memchr(b':', pair) else {
            return Verdict::Refused;
        };
        let (name, pass) = (&pair[..colon], &pair[colon + 1..]);
        let Some(hash) = self.users.get(name) else {
            return Verdict::Refused;
        };
        let key = self.key(name, pass);
        if GOOD.with(|good| good.borrow().contains(&key)) {
            return Verdict::Good;
        }
        Verdict::Verify(Pending {
            hash: hash.clone(),
            password: pass.to_vec(),
            key,
        })
    }

    fn key(&self, user: &[u8], password: &[u8]) -> u128 {
        let mut sha = Sha256::new();
        sha.update(self.salt);
        sha.update((user.len() as u64).to_le_bytes());
        sha.update(user);
        sha.update(password);
        let digest = sha.finalize();
        u128::from_le_bytes(digest[..16].try_into().unwrap_or_default())
    }
}

impl Pending {
    /// Verifies on the pool: `Some(good)` once verified, `None` when the pool's queue is
    /// full (answered 503). A good password is remembered by this worker.
    pub async fn verify(self) -> Option<bool> {
        let Pending {
            hash,
            password,
            key,
        } = self;
        let good = verifier::verify(hash, password)?.await.unwrap_or(false);
        if good {
            GOOD.with(|set| {
                let mut set = set.borrow_mut();
                if set.len() >= REMEMBERED {
                    set.clear();
                }
                set.insert(key);
            });
        }
        Some(good)
    }
}

/// Decodes the `user:password` of a `Basic` field into `buf` (on the caller's stack):
/// its length.
fn decode(value: &[u8], buf: &mut [u8; MAX_CREDENTIALS]) -> Option<usize> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let encoded = rest.trim_ascii();
    if encoded.len() > MAX_CREDENTIALS {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode_slice(encoded, buf)
        .ok()
}

/// A route's checks that may wait.
#[derive(Debug, Default)]
pub(crate) struct RouteAuth {
    pub basic: Option<BasicAuth>,
    pub forward: Option<forward::ForwardAuth>,
}

/// Per site and rule, the route's checks (`None` for a route without any; an empty list
/// for a site with none).
pub(crate) type SiteAuth = Vec<Vec<Option<std::sync::Arc<RouteAuth>>>>;

/// Reads every route's htpasswd file and compiles its `forward_auth` (`config.routes`,
/// each with its site). The error names the route's key (`route[0].basic_auth`), and
/// the file and the line.
pub(crate) fn load_all(config: &crate::Config) -> Result<SiteAuth, String> {
    let mut sites: SiteAuth = vec![Vec::new(); config.host.len() + 1];
    let none = |r: &rules::RouteRules| r.basic_auth.is_none() && r.forward_auth.is_none();
    if config.routes.iter().all(|(_, r, _)| none(r)) {
        return Ok(sites);
    }
    for (site, rules, _) in &config.routes {
        let basic = match &rules.basic_auth {
            Some(c) => {
                Some(BasicAuth::load(c).map_err(|e| format!("`{}.basic_auth`: {e}", rules.key))?)
            }
            None => None,
        };
        let forward = match &rules.forward_auth {
            Some(c) => Some(
                forward::ForwardAuth::compile(c)
                    .map_err(|e| format!("`{}.forward_auth`: {e}", rules.key))?,
            ),
            None => None,
        };
        let auth = (basic.is_some() || forward.is_some())
            .then(|| std::sync::Arc::new(RouteAuth { basic, forward }));
        sites[*site].push(auth);
    }
    Ok(sites)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_basic_credentials_case_insensitively_and_refuses_others() {
        let user = |v: &[u8]| {
            let mut buf = [0u8; MAX_CREDENTIALS];
            decode(v, &mut buf).map(|n| buf[..n].to_vec())
        };
        assert_eq!(user(b"Basic YW5uOnBhc3M="), Some(b"ann:pass".to_vec()));
        assert_eq!(user(b"basic  YW5uOnBhc3M= "), Some(b"ann:pass".to_vec()));
        assert_eq!(user(b"Bearer YW5uOnBhc3M="), None);
        assert_eq!(user(b"Basic !!!"), None);
        assert_eq!(user(b"Basic"), None);
    }
}
