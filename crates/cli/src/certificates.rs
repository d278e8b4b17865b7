//! `[acme]` wired to the server: the ACME client (the `acme` crate) hands its
//! certificates and challenge answers to the server's store (`server::AcmeCerts`).

use std::sync::Arc;

use anyhow::Context;

/// The server's store, as the client's [`acme::Deploy`].
struct Store(Arc<server::AcmeCerts>);

impl acme::Deploy for Store {
    fn certificate(&self, name: &str, chain: &str, key: &str) -> Result<(), String> {
        self.0.set_certificate(name, chain, key)
    }

    fn http_challenge(&self, token: &str, key_authorization: Option<&str>) {
        self.0.set_http_challenge(token, key_authorization);
    }

    fn alpn_challenge(&self, name: &str, cert: Option<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        self.0.set_alpn_challenge(name, cert)
    }

    fn order_done(&self, _name: &str, issued: bool) {
        self.0.order_done(issued);
    }

    fn renewal_planned(&self, name: &str, at: std::time::SystemTime) {
        let unix = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.0.renewal_planned(name, unix);
    }
}

/// `storage = "redis"`: the `[cache.redis]` server and the `storage_key` read.
fn redis_storage(config: &server::Config) -> anyhow::Result<Option<acme::RedisStorage>> {
    let Some(acme) = config.acme.as_ref().filter(|a| a.storage == "redis") else {
        return Ok(None);
    };
    let redis = config
        .limit_redis
        .as_ref()
        .context("acme.storage = \"redis\" needs [cache.redis] url")?;
    let path = acme
        .storage_key
        .as_ref()
        .context("acme.storage_key is required with storage = \"redis\"")?;
    let bytes =
        std::fs::read(path).with_context(|| format!("acme.storage_key {}", path.display()))?;
    let key = acme::storage_key(&bytes)
        .map_err(|e| anyhow::anyhow!("acme.storage_key {}: {e}", path.display()))?;
    Ok(Some(acme::RedisStorage {
        url: redis.url.clone(),
        prefix: redis.prefix.clone(),
        key,
    }))
}

/// Starts the ACME client when `[acme]` is configured: stored certificates are served
/// at once, orders run in the background. Prints what it does.
/// Returns where a reload's new names go.
pub fn start(
    config: &server::Config,
    store: Option<Arc<server::AcmeCerts>>,
) -> anyhow::Result<Option<acme::Names>> {
    let (Some(acme), Some(store)) = (&config.acme, store) else {
        return Ok(None);
    };
    let settings = acme::Settings {
        directory: acme.directory.clone(),
        ca_root: acme.ca_root.clone(),
        email: acme.email.clone(),
        // Unused with storage = "redis".
        state_dir: acme.state_dir.clone().unwrap_or_default(),
        challenges: acme
            .challenges
            .iter()
            .filter_map(|c| acme::Challenge::parse(c))
            .collect(),
        names: config.acme_names(),
        eab: acme.eab(),
        on_demand: acme.ask.clone().filter(|_| acme.on_demand),
        redis: redis_storage(config)?,
        dns_hook: acme.dns_hook.clone(),
        key_type: match acme.key_type.as_str() {
            "rsa2048" => acme::KeyType::Rsa2048,
            _ => acme::KeyType::EcdsaP256,
        },
    };
    let names = settings.names.join(", ");
    let directory = settings.directory.clone();
    let ask = settings.on_demand.clone();
    let started = acme::start(settings, Arc::new(Store(store.clone())))?;
    let waiting = match started.waiting.len() {
        0 => String::new(),
        n => format!(" ({n} to order: {})", started.waiting.join(", ")),
    };
    let names = match names.is_empty() {
        true => "names first seen".to_string(),
        false => names,
    };
    eprintln!("tessera: certificates from {directory} for {names}{waiting}");
    if let (Some(door), Some(ask)) = (started.on_demand, ask) {
        store.set_on_demand(Box::new(move |name| door.demand(name)));
        eprintln!(
            "tessera: certificates on demand for names first seen in SNI that {ask} allows (at most {} orders per {} s)",
            acme::ORDERS,
            acme::ORDERS_WINDOW.as_secs()
        );
    }
    Ok(Some(started.names))
}
