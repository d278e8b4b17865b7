//! `[acme]`: certificates obtained and renewed by tessera itself from an ACME CA (RFC
//! 8555), for every `[[host]]` name that is not a wildcard and has no certificate of its
//! own (docs/tls.md, "Automatic certificates"). The keys are those of issue 46's
//! interface; what is not built yet is refused by [`AcmeConfig::problems`].

use std::path::PathBuf;

use serde::Deserialize;

/// Let's Encrypt's production directory, the default `directory`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The challenge types tessera answers.
pub const CHALLENGES: [&str; 3] = ["http-01", "tls-alpn-01", "dns-01"];

/// The certificates' key types.
pub const KEY_TYPES: [&str; 2] = ["ecdsa-p256", "rsa2048"];

/// `[acme]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AcmeConfig {
    /// The CA's directory URL. Default Let's Encrypt production ([`LETS_ENCRYPT`]).
    pub directory: String,
    /// A PEM root certificate trusted (alone) for the connections to `directory`: a
    /// test or private CA. Default none: the system's roots.
    pub ca_root: Option<PathBuf>,
    /// Contact address given to the CA with the account. Default none.
    pub email: Option<String>,
    /// Directory of the account key, certificates and keys, each file written 0600 and
    /// atomically (written whole to a temporary file, then renamed). Required, but with
    /// `storage = "redis"`.
    pub state_dir: Option<PathBuf>,
    /// Challenge types offered to the CA, in order of preference: `http-01` (answered
    /// on every `listen` address), `tls-alpn-01` (on every `tls_listen` address) and
    /// `dns-01` (through `dns_hook`; wildcard names need it). Default the first two.
    pub challenges: Vec<String>,
    /// With `dns-01`: the command run as `HOOK set _acme-challenge.NAME VALUE` to
    /// publish the TXT record (returning once it is published) and `HOOK clear ...`
    /// after. Required with `dns-01`.
    pub dns_hook: Option<PathBuf>,
    /// Where the state lives: `files` (in `state_dir`) or `redis` (the `[cache.redis]`
    /// server), locked per name either way so that processes sharing it order once.
    pub storage: String,
    /// With `storage = "redis"`: a file of 32 random bytes, the AES-256-GCM key that
    /// encrypts the private keys stored there. Required there.
    pub storage_key: Option<PathBuf>,
    /// Order a certificate for a name first seen in SNI, one no configured certificate
    /// covers, when `ask` allows it (Caddy's on-demand TLS). Default off.
    pub on_demand: bool,
    /// With `on_demand`: the URL asked `GET URL?domain=NAME` before a name's first
    /// order; 200 allows it, any other answer refuses it. Required with `on_demand`.
    pub ask: Option<String>,
    /// The certificates' key type: `ecdsa-p256` (default: small, fast, taken by every
    /// client of the last decade) or `rsa2048` (for the rare client without ECDSA).
    pub key_type: String,
    /// External account binding (RFC 8555, 7.3.4), for CAs that need it (ZeroSSL,
    /// Google Trust Services, a private CA): the key id the CA gave. With
    /// `eab_hmac_key`; used when the account is created.
    pub eab_kid: Option<String>,
    /// The HMAC key that goes with `eab_kid`, base64url as the CA gives it.
    pub eab_hmac_key: Option<String>,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig {
            directory: LETS_ENCRYPT.into(),
            ca_root: None,
            email: None,
            state_dir: None,
            challenges: ["http-01", "tls-alpn-01"].map(String::from).to_vec(),
            dns_hook: None,
            key_type: "ecdsa-p256".into(),
            storage: "files".into(),
            storage_key: None,
            on_demand: false,
            ask: None,
            eab_kid: None,
            eab_hmac_key: None,
        }
    }
}

impl AcmeConfig {
    /// What is wrong with the table, each naming its key, given the names it would
    /// get certificates for and which listeners there are.
    /// `redis`: whether `[cache.redis]` has a `url`.
    pub fn problems(
        &self,
        names: &[String],
        (listen, tls_listen): (bool, bool),
        redis: bool,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.directory.starts_with("https://") {
            problems.push(format!(
                "`acme.directory`: must be an https:// URL, not {}",
                self.directory
            ));
        }
        if self.state_dir.is_none() && self.storage != "redis" {
            problems.push(
                "`acme.state_dir` is required: the directory of the account key, certificates and keys"
                    .into(),
            );
        }
        if self.challenges.is_empty() {
            problems.push(
                "`acme.challenges`: needs at least one of http-01, tls-alpn-01, dns-01".into(),
            );
        }
        for challenge in &self.challenges {
            if !CHALLENGES.contains(&challenge.as_str()) {
                problems.push(format!(
                    "`acme.challenges`: \"{challenge}\" is not one of http-01, tls-alpn-01, dns-01"
                ));
            }
        }
        if self.challenges.iter().all(|c| c == "http-01") && !listen {
            problems.push("`acme.challenges`: http-01 alone needs a `listen` address (port 80 for a public CA)".into());
        }
        if self.challenges.iter().all(|c| c == "tls-alpn-01") && !tls_listen {
            problems
                .push("`acme.challenges`: tls-alpn-01 alone needs a `tls_listen` address (port 443 for a public CA)".into());
        }
        if !KEY_TYPES.contains(&self.key_type.as_str()) {
            problems.push(format!(
                "`acme.key_type`: must be \"ecdsa-p256\" or \"rsa2048\", not \"{}\"",
                self.key_type
            ));
        }
        match (self.offers("dns-01"), &self.dns_hook) {
            (true, None) => problems.push(
                "`acme.dns_hook` is required with dns-01: the command that publishes the TXT record"
                    .into(),
            ),
            (false, Some(_)) => problems
                .push("`acme.dns_hook`: goes with \"dns-01\" in `challenges`".into()),
            _ => {}
        }
        match self.storage.as_str() {
            "files" => {}
            "redis" => {
                if !redis {
                    problems.push(
                        "`acme.storage`: \"redis\" needs `[cache.redis] url`, the server it keeps the certificates in".into(),
                    );
                }
                if self.storage_key.is_none() {
                    problems.push(
                        "`acme.storage_key` is required with storage = \"redis\": a file of 32 random bytes that encrypts the private keys stored there".into(),
                    );
                }
            }
            other => problems.push(format!(
                "`acme.storage`: must be \"files\" or \"redis\", not \"{other}\""
            )),
        }
        match (&self.ask, self.on_demand) {
            (None, true) => problems.push(
                "`acme.on_demand`: needs `ask`, the URL that allows a name (GET URL?domain=NAME answers 200): without it anyone could make tessera order certificates for any name"
                    .into(),
            ),
            (Some(url), _) => {
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"));
                let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
                if host.is_none_or(|h| h.is_empty() || h.contains(char::is_whitespace)) {
                    problems.push(format!(
                        "`acme.ask`: must be an http:// or https:// URL, not {url}"
                    ));
                }
            }
            (None, false) => {}
        }
        match (&self.eab_kid, &self.eab_hmac_key) {
            (Some(_), None) => problems
                .push("`acme.eab_hmac_key`: needed with `eab_kid` (the CA gives both)".into()),
            (None, Some(_)) => problems
                .push("`acme.eab_kid`: needed with `eab_hmac_key` (the CA gives both)".into()),
            (Some(kid), Some(key)) => {
                if kid.trim().is_empty() {
                    problems.push("`acme.eab_kid`: is empty".into());
                }
                if let Err(e) = eab_key(key) {
                    problems.push(format!("`acme.eab_hmac_key`: {e}"));
                }
            }
            (None, None) => {}
        }
        for name in names {
            let name = match self.offers("dns-01") {
                true => name.strip_prefix("*.").unwrap_or(name),
                false => name,
            };
            let label_ok = |l: &str| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            };
            if !name.split('.').all(label_ok) || !name.contains('.') {
                problems.push(format!(
                    "`acme`: cannot get a certificate for \"{name}\": a CA issues for DNS names with a dot (no IP address, no localhost); give that host a `[host.tls]` certificate"
                ));
            }
        }
        if names.is_empty() && !self.on_demand {
            problems.push(
                "`acme`: no `[[host]]` name to get a certificate for: each is a wildcard or has a `[host.tls]` certificate (and `on_demand` is off)"
                    .into(),
            );
        }
        problems
    }

    /// The external account binding's key id and decoded HMAC key, when set and valid.
    pub fn eab(&self) -> Option<(String, Vec<u8>)> {
        let (kid, key) = (self.eab_kid.as_ref()?, self.eab_hmac_key.as_ref()?);
        Some((kid.clone(), eab_key(key).ok()?))
    }

    /// Whether a challenge type is offered.
    pub fn offers(&self, challenge: &str) -> bool {
        self.challenges.iter().any(|c| c == challenge)
    }
}

/// An external account binding's HMAC key, from the base64url a CA gives (padding
/// allowed).
pub fn eab_key(key: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(key.trim().trim_end_matches('='))
        .map_err(|e| format!("not base64url ({e}), as the CA gives it"))?;
    if decoded.is_empty() {
        return Err("is empty".into());
    }
    Ok(decoded)
}
