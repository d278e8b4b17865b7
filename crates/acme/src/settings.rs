//! What the client is told (`[acme]`, as `cli` reads it) and where its results go.

use std::path::PathBuf;

/// A challenge type tessera answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Challenge {
    /// `http-01`: the key authorization at `/.well-known/acme-challenge/TOKEN`, port 80.
    Http01,
    /// `tls-alpn-01`: a self-signed certificate for the name with the `acme-tls/1`
    /// ALPN, port 443 (RFC 8737).
    TlsAlpn01,
    /// `dns-01`: a TXT record `_acme-challenge.NAME`, published by the `dns_hook`
    /// command; the only one for a wildcard name.
    Dns01,
}

impl Challenge {
    /// The configuration's name for it (`http-01`, `tls-alpn-01`).
    pub fn parse(name: &str) -> Option<Challenge> {
        match name {
            "http-01" => Some(Challenge::Http01),
            "tls-alpn-01" => Some(Challenge::TlsAlpn01),
            "dns-01" => Some(Challenge::Dns01),
            _ => None,
        }
    }

    /// The configuration's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Challenge::Http01 => "http-01",
            Challenge::TlsAlpn01 => "tls-alpn-01",
            Challenge::Dns01 => "dns-01",
        }
    }
}

/// The certificates' key type (`key_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyType {
    /// ECDSA with P-256: small and fast, what every client of the last decade takes.
    #[default]
    EcdsaP256,
    /// RSA, 2048 bits: for the rare old client without ECDSA.
    Rsa2048,
}

/// What the client needs to know, from `[acme]`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub directory: String,
    pub ca_root: Option<PathBuf>,
    pub email: Option<String>,
    pub state_dir: PathBuf,
    /// In order of preference; the first one the CA offers for a name is used.
    pub challenges: Vec<Challenge>,
    /// The names to keep a certificate for (lowercase DNS names).
    pub names: Vec<String>,
    /// External account binding: the CA's key id and the HMAC key (decoded), given
    /// when the account is created.
    pub eab: Option<(String, Vec<u8>)>,
    /// With `on_demand`: the `ask` URL that allows a name first seen in SNI.
    pub on_demand: Option<String>,
    /// With `storage = "redis"`: where the state lives instead of `state_dir`.
    pub redis: Option<RedisStorage>,
    /// With `dns-01`: the command run as `HOOK set _acme-challenge.NAME VALUE` (and
    /// `clear` after), which publishes (removes) the TXT record and returns once done.
    pub dns_hook: Option<PathBuf>,
    /// The certificates' key type.
    pub key_type: KeyType,
}

/// `storage = "redis"`: the `[cache.redis]` server, and the key that encrypts the
/// private keys stored there.
#[derive(Clone)]
pub struct RedisStorage {
    /// `redis://host:port[/db]`.
    pub url: String,
    /// Prefix of every key (`[cache.redis] key_prefix`).
    pub prefix: String,
    /// `storage_key`'s 32 bytes.
    pub key: [u8; 32],
}

impl std::fmt::Debug for RedisStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStorage")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Where the client's results go: the server's certificate store.
pub trait Deploy: Send + Sync + 'static {
    /// Serve `chain` (PEM, leaf first) with `key` (PEM PKCS#8) for `name` from now on.
    fn certificate(&self, name: &str, chain: &str, key: &str) -> Result<(), String>;
    /// Answer the HTTP-01 `token` with `key_authorization`, or stop (`None`).
    fn http_challenge(&self, token: &str, key_authorization: Option<&str>);
    /// Serve a TLS-ALPN-01 certificate (DER) and key (PKCS#8 DER) for `name`, or stop.
    fn alpn_challenge(&self, name: &str, cert: Option<(Vec<u8>, Vec<u8>)>) -> Result<(), String>;
    /// An order ended: `true` with a certificate, `false` with an error.
    fn order_done(&self, _name: &str, _ok: bool) {}
    /// `name`'s certificate is to be renewed at `at` (planned again when the CA moves
    /// its window).
    fn renewal_planned(&self, _name: &str, _at: std::time::SystemTime) {}
}
