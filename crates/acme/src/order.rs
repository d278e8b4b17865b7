//! The account, and one order for one name: new order, a challenge per pending
//! authorization (answered through [`Deploy`](crate::Deploy) and withdrawn after),
//! finalization with a fresh ECDSA P-256 key, the certificate stored and installed.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    ExternalAccountKey, Identifier, NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};

use crate::challenges::Answer;
use crate::http::Http;
use crate::settings::{Challenge, Deploy, KeyType, Settings};
use crate::storage::Storage;
use crate::store::Stored;

/// What every name's task shares.
pub(crate) struct Context {
    pub settings: Settings,
    /// Where the account and certificates are kept, and the names locked.
    pub storage: Arc<Storage>,
    pub deploy: Arc<dyn Deploy>,
    pub account: Account,
}

/// How long an order may wait for the CA's validation, then for its certificate: the
/// first look after 50 ms, each next one a quarter later than the last (50, 112, 190,
/// 288 ms... after the one before; about 25 looks in 90 s). With a first look at 250 ms
/// and each next one twice as late, a new name's first verified response came 1.04 s
/// after start against Caddy's 0.63 s (`bench/acme.sh`, Pebble without its validation
/// sleeps): a CA that validates at once was still waited for in steps of 250 ms or more.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(50))
    .backoff(1.25)
    .timeout(Duration::from_secs(90));

/// The account with the CA: the stored one, or a new one (then stored). Under the
/// `account` lock, so that processes sharing the storage make one account.
pub(crate) async fn account(settings: &Settings, storage: &Storage) -> Result<Account, String> {
    let lock = storage.lock("account").await?;
    let account = find_or_create(settings, storage).await;
    lock.release().await;
    account
}

async fn find_or_create(settings: &Settings, storage: &Storage) -> Result<Account, String> {
    let builder = || -> Result<_, String> {
        let http =
            Http::new(settings.ca_root.as_deref()).map_err(|e| format!("acme.ca_root {e}"))?;
        Ok(Account::builder_with_http(Box::new(http)))
    };
    if let Some(json) = storage.account().await? {
        let credentials: AccountCredentials =
            serde_json::from_slice(&json).map_err(|e| format!("the stored ACME account: {e}"))?;
        return builder()?
            .from_credentials(credentials)
            .await
            .map_err(|e| e.to_string());
    }
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let eab = settings
        .eab
        .as_ref()
        .map(|(kid, key)| ExternalAccountKey::new(kid.clone(), key));
    let (account, credentials) = builder()?
        .create(&new, settings.directory.clone(), eab.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    let json = serde_json::to_vec(&credentials).map_err(|e| e.to_string())?;
    storage.save_account(&json).await?;
    tracing::info!(account = account.id(), "ACME account created");
    Ok(account)
}

/// Why an order failed, and how long the CA asked to wait (its `Retry-After`, when
/// instant-acme hands it over: a poll that ran out of time with one ahead).
#[derive(Debug)]
pub(crate) struct Failure {
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            message,
            retry_after: None,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A failed poll, with the CA's Retry-After when it had one.
fn polled(what: &str, e: instant_acme::Error) -> Failure {
    let retry_after = match &e {
        instant_acme::Error::Timeout(Some(at)) => {
            Some(at.saturating_duration_since(std::time::Instant::now()))
        }
        _ => None,
    };
    Failure {
        message: format!("{what}: {e}"),
        retry_after,
    }
}

/// Orders `name`'s certificate and installs it.
/// With `replaces`, the order says which certificate it replaces (ARI, RFC 9773
/// section 5), which a CA may exempt from its rate limits.
pub(crate) async fn obtain(
    context: &Context,
    name: &str,
    (replaces, attempt): (Option<CertificateIdentifier<'static>>, usize),
) -> Result<Stored, Failure> {
    let identifiers = [Identifier::Dns(name.to_string())];
    let new = NewOrder::new(&identifiers);
    let new = match replaces {
        Some(id) => new.replaces(id),
        None => new,
    };
    let mut order = context
        .account
        .new_order(&new)
        .await
        .map_err(|e| format!("new order: {e}"))?;
    let mut out = Vec::new();
    let validated = validate(context, &mut order, attempt, &mut out).await;
    let ready = match validated {
        Ok(()) => order
            .poll_ready(&POLL)
            .await
            .map_err(|e| polled("waiting for validation", e)),
        Err(e) => Err(Failure::from(e)),
    };
    for (challenge, token) in out {
        match challenge {
            Challenge::Http01 => {
                context.deploy.http_challenge(&token, None);
                context
                    .storage
                    .share_challenge(("http", &token), None)
                    .await;
            }
            Challenge::TlsAlpn01 => {
                drop(context.deploy.alpn_challenge(name, None));
                context.storage.share_challenge(("alpn", name), None).await;
            }
            Challenge::Dns01 => {
                let (record, value) = token.split_once(' ').unwrap_or((&token, ""));
                if let Err(e) = dns_hook(context, "clear", record, value).await {
                    tracing::warn!(name, error = %e, "dns_hook clear failed");
                }
            }
        }
    }
    match ready? {
        OrderStatus::Ready => {}
        status => return Err(why_not(&mut order, status).await.into()),
    }
    let key = match context.settings.key_type {
        KeyType::EcdsaP256 => order.finalize().await,
        KeyType::Rsa2048 => finalize_rsa(&mut order, name).await,
    }
    .map_err(|e| format!("finalize: {e}"))?;
    let chain = order
        .poll_certificate(&POLL)
        .await
        .map_err(|e| polled("certificate", e))?;
    let stored = Stored::new(chain, key).ok_or("the CA's certificate does not parse")?;
    context.storage.save(name, &stored).await?;
    context
        .deploy
        .certificate(name, &stored.chain, &stored.key)?;
    Ok(stored)
}

/// Finalizes `order` with a new RSA 2048 key (made by the `rsa` crate, off the
/// runtime's thread: it takes a while) and a CSR for `name` signed with it; returns the
/// key, PEM PKCS#8.
async fn finalize_rsa(order: &mut Order, name: &str) -> Result<String, instant_acme::Error> {
    let names = vec![name.to_string()];
    let made = tokio::task::spawn_blocking(move || -> Result<(String, Vec<u8>), String> {
        use rsa::pkcs8::EncodePrivateKey;
        let key =
            rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).map_err(|e| e.to_string())?;
        let der = key.to_pkcs8_der().map_err(|e| e.to_string())?;
        let der = rustls_pki_types::PrivatePkcs8KeyDer::from(der.as_bytes().to_vec());
        let key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256)
            .map_err(|e| e.to_string())?;
        let mut params = rcgen::CertificateParams::new(names).map_err(|e| e.to_string())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key).map_err(|e| e.to_string())?;
        Ok((key.serialize_pem(), csr.der().to_vec()))
    });
    let other = |e: String| instant_acme::Error::Other(e.into());
    let (key, csr) = made
        .await
        .map_err(|e| other(e.to_string()))?
        .map_err(|e| other(format!("RSA key: {e}")))?;
    order.finalize_csr(&csr).await?;
    Ok(key)
}

/// The CA's problem documents for an order that did not become ready: the order's,
/// else those of its failed challenges.
async fn why_not(order: &mut Order, status: OrderStatus) -> String {
    let mut problems: Vec<String> = order.state().error.iter().map(|p| p.to_string()).collect();
    if problems.is_empty() {
        let mut authorizations = order.authorizations();
        while let Some(Ok(mut authorization)) = authorizations.next().await {
            if let Ok(state) = authorization.refresh().await {
                let errors = state.challenges.iter().filter_map(|c| c.error.as_ref());
                problems.extend(errors.map(|p| p.to_string()));
            }
        }
    }
    match problems.is_empty() {
        true => format!("order {status:?}: the CA gave no problem document"),
        false => format!("order {status:?}: {}", problems.join("; ")),
    }
}

/// Answers a challenge of every pending authorization and tells the CA it is ready;
/// `out` gets what was put out, to withdraw after.
async fn validate(
    context: &Context,
    order: &mut Order,
    attempt: usize,
    out: &mut Vec<(Challenge, String)>,
) -> Result<(), String> {
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization.map_err(|e| format!("authorization: {e}"))?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            status => return Err(format!("authorization {status:?}")),
        }
        let name = authorization.identifier().to_string();
        let offered = |c: &Challenge| {
            authorization
                .challenges
                .iter()
                .any(|o| o.r#type == challenge_type(*c))
        };
        // The configured order first, then, after each failure, starting one further:
        // a name that one challenge cannot reach (port 80 closed, say) gets the next.
        let challenges = &context.settings.challenges;
        let mut preferred = challenges
            .iter()
            .cycle()
            .skip(attempt % challenges.len().max(1));
        let Some(&kind) = preferred
            .by_ref()
            .take(challenges.len())
            .find(|c| offered(c))
        else {
            return Err(format!(
                "the CA offers none of the configured challenges for {name}"
            ));
        };
        let mut challenge = authorization
            .challenge(challenge_type(kind))
            .ok_or("challenge gone")?;
        let key_authorization = challenge.key_authorization();
        match kind {
            Challenge::Http01 => {
                let answer = key_authorization.as_str();
                context
                    .deploy
                    .http_challenge(&challenge.token, Some(answer));
                out.push((kind, challenge.token.clone()));
                let shared = Some(Answer::Http(answer));
                let token = challenge.token.as_str();
                context
                    .storage
                    .share_challenge(("http", token), shared)
                    .await;
            }
            Challenge::TlsAlpn01 => {
                let (cert, key) = alpn_certificate(&name, key_authorization.digest().as_ref())?;
                let shared = Some(Answer::Alpn(&cert, &key));
                context
                    .storage
                    .share_challenge(("alpn", &name), shared)
                    .await;
                context
                    .deploy
                    .alpn_challenge(&name, Some((cert.clone(), key.clone())))?;
                out.push((kind, name.clone()));
            }
            Challenge::Dns01 => {
                let record = format!("_acme-challenge.{}", name.trim_start_matches("*."));
                let value = key_authorization.dns_value();
                // Withdrawn after even when publishing failed halfway.
                out.push((kind, format!("{record} {value}")));
                dns_hook(context, "set", &record, &value).await?;
            }
        }
        tracing::info!(name = %name, challenge = kind.name(), "ACME challenge answered");
        challenge
            .set_ready()
            .await
            .map_err(|e| format!("challenge: {e}"))?;
    }
    Ok(())
}

fn challenge_type(challenge: Challenge) -> ChallengeType {
    match challenge {
        Challenge::Http01 => ChallengeType::Http01,
        Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        Challenge::Dns01 => ChallengeType::Dns01,
    }
}

/// The longest a `dns_hook` run is waited for (a DNS provider's API and the wait for
/// the record to be published included); the order fails after it.
const HOOK_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `dns_hook ACTION RECORD VALUE` (off the runtime's thread) to its end; an exit
/// status other than 0 is an error with what the command wrote to stderr.
async fn dns_hook(
    context: &Context,
    action: &str,
    record: &str,
    value: &str,
) -> Result<(), String> {
    let hook = context
        .settings
        .dns_hook
        .clone()
        .ok_or("dns-01 needs acme.dns_hook")?;
    let args = [action.to_string(), record.to_string(), value.to_string()];
    let shown = hook.display().to_string();
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&hook)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
    });
    let out = tokio::time::timeout(HOOK_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!("dns_hook {shown} {action} {record}: still running after {HOOK_TIMEOUT:?}")
        })?
        .map_err(|e| format!("dns_hook {shown}: {e}"))?
        .map_err(|e| format!("dns_hook {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dns_hook {shown} {action} {record}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    tracing::info!(record, action, "dns_hook ran");
    Ok(())
}

/// The TLS-ALPN-01 certificate (RFC 8737 section 3): self-signed for `name`, with the
/// critical acmeIdentifier extension holding the SHA-256 of the key authorization.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let err = |e: rcgen::Error| format!("TLS-ALPN-01 certificate: {e}");
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(err)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert.der().to_vec(), key.serialize_der()))
}
