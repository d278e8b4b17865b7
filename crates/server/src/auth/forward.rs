//! `forward_auth` (docs/security.md, "Forward authentication"): before the route's
//! handler, a GET to an upstream with the request's fields and where it was going; a 2xx
//! lets it through with the fields `copy_headers` names taken from that answer, a 401 or
//! 403 goes back to the client as it came, anything else is a failure (500, or through
//! with `auth_failure = "allow"`). Allowing answers may be reused for `cache` per the
//! request's `Authorization` and `Cookie`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::config::http3::duration;

/// Most allowing answers a worker keeps per process; past that the expired ones go, and
/// when none has, all of them.
const CACHED: usize = 4096;

/// Most body bytes read from the upstream's answer (a 401 or 403 page goes to the
/// client).
const MAX_BODY: usize = 64 * 1024;

/// Fields copied from an allowing answer into the request.
pub(crate) type Copied = Rc<CopiedFields>;

/// A field's name and value.
pub(crate) type Field = (Box<[u8]>, Box<[u8]>);

#[derive(Debug)]
pub(crate) struct CopiedFields {
    /// `copy_headers` (lowercase): the request's own fields of these names go.
    pub names: Box<[Box<str>]>,
    /// The answer's fields of those names: name and value.
    pub fields: Box<[Field]>,
}

/// What the upstream said.
#[derive(Clone)]
pub(crate) enum Outcome {
    /// 2xx: through, with these fields.
    Allowed(Copied),
    /// 401 or 403: this answer goes to the client.
    Refused {
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        body: Bytes,
    },
    /// Unreachable, a timeout, another status.
    Failed,
}

/// One route's `forward_auth`, compiled.
#[derive(Debug)]
pub(crate) struct ForwardAuth {
    upstream: String,
    path: String,
    /// Lowercase.
    pub copy: Box<[Box<str>]>,
    /// Lowercase; `None`: every field but the connection's own.
    sent: Option<Box<[Box<str>]>>,
    cache: Option<Duration>,
    pub allow_on_failure: bool,
    /// Random per load: the key of the cached answers, so a reload forgets them.
    salt: [u8; 16],
}

thread_local! {
    /// Allowing answers this worker may reuse, by key: until when, and the fields.
    static ALLOWED: RefCell<HashMap<u128, (Instant, Copied), foldhash::fast::RandomState>> =
        RefCell::new(HashMap::default());
}

/// Fields never sent to the auth upstream as they came: the connection's own, the body's
/// framing (no body is sent), and those this server sets itself.
const NOT_SENT: [&str; 14] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
    "x-forwarded-method",
    "x-forwarded-uri",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-for",
];

impl ForwardAuth {
    /// Compiles `config`; the error says which value is wrong.
    pub fn compile(config: &rules::config::ForwardAuth) -> Result<ForwardAuth, String> {
        if !config.path.starts_with('/') || config.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!(
                "`path`: {:?} is not a path (starting with `/`)",
                config.path
            ));
        }
        let names = |list: &[String], key: &str| -> Result<Box<[Box<str>]>, String> {
            list.iter()
                .map(|n| match !n.is_empty() && n.bytes().all(wire::is_tchar) {
                    true => Ok(n.to_ascii_lowercase().into_boxed_str()),
                    false => Err(format!("`{key}`: {n:?} is not a field name")),
                })
                .collect()
        };
        let cache = match &config.cache {
            Some(text) => Some(duration(text).ok_or_else(|| {
                format!("`cache`: {text:?} is not a duration (`10s`, `2m`, `500ms`)")
            })?),
            None => None,
        };
        let mut salt = [0u8; 16];
        fastrand::fill(&mut salt);
        Ok(ForwardAuth {
            upstream: config.upstream.clone(),
            path: config.path.clone(),
            copy: names(&config.copy_headers, "copy_headers")?,
            sent: match &config.headers {
                Some(list) => Some(names(list, "headers")?),
                None => None,
            },
            cache,
            allow_on_failure: config.auth_failure == rules::config::AuthFailure::Allow,
            salt,
        })
    }

    /// The key of the request's cached answer: its `Authorization` and `Cookie`.
    pub fn key(&self, req: &wire::Request<'_, '_>) -> Option<u128> {
        self.cache?;
        let mut sha = Sha256::new();
        sha.update(self.salt);
        for name in ["authorization", "cookie"] {
            let value = req.header(name).unwrap_or_default();
            sha.update((value.len() as u64).to_le_bytes());
            sha.update(value);
        }
        let digest = sha.finalize();
        Some(u128::from_le_bytes(
            digest[..16].try_into().unwrap_or_default(),
        ))
    }

    /// The allowing answer cached for `key`, while it is fresh.
    pub fn cached(&self, key: Option<u128>) -> Option<Copied> {
        let key = key?;
        ALLOWED.with(|all| {
            let all = all.borrow();
            let (until, copied) = all.get(&key)?;
            (*until > Instant::now()).then(|| copied.clone())
        })
    }

    /// The subrequest for `req` (from `client`, over TLS when `secure`).
    pub fn request(
        &self,
        req: &wire::Request<'_, '_>,
        (client, secure): (std::net::IpAddr, bool),
    ) -> handler::UpstreamRequest {
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = req
            .headers
            .iter()
            .filter(|h| !NOT_SENT.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
            .filter(|h| {
                self.sent
                    .as_ref()
                    .is_none_or(|sent| sent.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
            })
            .map(|h| (h.name.as_bytes().to_vec(), h.value.to_vec()))
            .collect();
        let mut add = |name: &str, value: &[u8]| headers.push((name.into(), value.to_vec()));
        add("X-Forwarded-Method", req.method_token.as_bytes());
        add("X-Forwarded-Uri", req.target);
        if let Some(host) = req.header("host") {
            add("X-Forwarded-Host", host);
        }
        add("X-Forwarded-Proto", if secure { b"https" } else { b"http" });
        add(
            "X-Forwarded-For",
            client.to_canonical().to_string().as_bytes(),
        );
        handler::UpstreamRequest {
            upstream: self.upstream.clone(),
            method: "GET".into(),
            target: self.path.clone(),
            headers,
            body: Bytes::new(),
            max_body: MAX_BODY,
        }
    }

    /// What the upstream's answer (`Err`: none) means; an allowing one is cached under
    /// `key` (`None`: not cached).
    pub fn judge(
        &self,
        reply: Result<handler::UpstreamReply, String>,
        key: Option<u128>,
    ) -> Outcome {
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                tracing::warn!("forward_auth: upstream `{}`: {e}", self.upstream);
                return Outcome::Failed;
            }
        };
        match reply.status {
            200..=299 => {
                let fields = reply
                    .headers
                    .into_iter()
                    .filter(|(n, _)| {
                        self.copy
                            .iter()
                            .any(|c| n.eq_ignore_ascii_case(c.as_bytes()))
                    })
                    .map(|(n, v)| (n.into_boxed_slice(), v.into_boxed_slice()))
                    .collect();
                let copied = Rc::new(CopiedFields {
                    names: self.copy.clone(),
                    fields,
                });
                if let (Some(key), Some(ttl)) = (key, self.cache) {
                    remember(key, Instant::now() + ttl, copied.clone());
                }
                Outcome::Allowed(copied)
            }
            status @ (401 | 403) => Outcome::Refused {
                status,
                headers: reply
                    .headers
                    .into_iter()
                    .filter(|(n, _)| !wire::is_framing_field(n) && !is_own(n))
                    .collect(),
                body: reply.body,
            },
            status => {
                tracing::warn!(
                    "forward_auth: upstream `{}` answered {status}, neither 2xx, 401 nor 403",
                    self.upstream
                );
                Outcome::Failed
            }
        }
    }
}

/// Fields this server writes itself on a response it sends.
fn is_own(name: &[u8]) -> bool {
    ["connection", "keep-alive", "date", "server"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

fn remember(key: u128, until: Instant, copied: Copied) {
    ALLOWED.with(|all| {
        let mut all = all.borrow_mut();
        if all.len() >= CACHED {
            let now = Instant::now();
            all.retain(|_, (until, _)| *until > now);
            if all.len() >= CACHED {
                all.clear();
            }
        }
        all.insert(key, (until, copied));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(duration("1h"), Some(Duration::from_secs(3600)));
        for bad in ["10", "s", "0s", "1.5s", "10 s", "-1s", ""] {
            assert_eq!(duration(bad), None, "{bad}");
        }
    }
}
