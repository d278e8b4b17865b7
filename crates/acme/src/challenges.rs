//! Challenge answers shared between the processes of `storage = "redis"`: a CA's
//! validation of a name reaches whichever node its balancer picks (or, for nodes
//! sharing a port, whichever the kernel hands the connection to), not only the node
//! that ordered. Caddy's certmagic shares them through its storage the same way.
//!
//! The ordering process publishes each HTTP-01 key authorization and TLS-ALPN-01
//! certificate (its key sealed with `storage_key`, as stored keys are) on the channel
//! `PREFIX` `acme:CA:challenges`, and its withdrawal after. Every process (itself too)
//! installs it through its [`Deploy`] and acknowledges it (`INCR` on the message's
//! `ack` key); the publisher tells the CA the challenge is ready only once as many
//! processes acknowledged as the publish reached, or after [`ACK_WAIT`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::StreamExt;
use redis::AsyncCommands;

use crate::redis_store::RedisStore;
use crate::settings::Deploy;

/// The longest the publisher waits for the acknowledgements.
const ACK_WAIT: Duration = Duration::from_secs(2);

/// One challenge answer, or its withdrawal (`value: None`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Message {
    /// `http` (key: the token; value: the key authorization) or `alpn` (key: the name;
    /// value: the sealed certificate and key, base64).
    kind: String,
    key: String,
    value: Option<String>,
    /// Where each process counts the message installed.
    ack: String,
}

/// An answer to share: HTTP-01's key authorization, or TLS-ALPN-01's certificate and
/// key (DER).
pub(crate) enum Answer<'a> {
    Http(&'a str),
    Alpn(&'a [u8], &'a [u8]),
}

fn channel(store: &RedisStore) -> String {
    format!("{}challenges", store.prefix())
}

/// Publishes `answer` for `key` (withdraws it with `None`) and waits for the processes
/// that heard it to install it.
pub(crate) async fn share(store: &RedisStore, kind_key: (&str, &str), answer: Option<Answer<'_>>) {
    let (kind, key) = kind_key;
    let value = match answer {
        None => None,
        Some(Answer::Http(text)) => Some(text.to_string()),
        Some(Answer::Alpn(cert, pkcs8)) => {
            let mut both = (cert.len() as u32).to_be_bytes().to_vec();
            both.extend_from_slice(cert);
            both.extend_from_slice(pkcs8);
            match store.seal(&format!("{}:{key}", channel(store)), &both) {
                Ok(sealed) => Some(base64::engine::general_purpose::STANDARD.encode(sealed)),
                Err(e) => {
                    tracing::warn!(name = key, error = %e, "ACME: cannot seal a challenge to share");
                    return;
                }
            }
        }
    };
    let ack = format!("{}challenge-ack:{}", store.prefix(), fastrand::u64(..));
    let message = Message {
        kind: kind.to_string(),
        key: key.to_string(),
        value,
        ack: ack.clone(),
    };
    let Ok(json) = serde_json::to_string(&message) else {
        return;
    };
    let shared = async {
        let mut conn = store.connection().await?;
        let heard: u64 = conn
            .publish(channel(store), json)
            .await
            .map_err(|e| format!("Redis: PUBLISH: {e}"))?;
        let since = Instant::now();
        loop {
            let acked: Option<u64> = conn.get(&ack).await.map_err(|e| format!("Redis: {e}"))?;
            if acked.unwrap_or(0) >= heard {
                return Ok(());
            }
            if since.elapsed() > ACK_WAIT {
                return Err(format!(
                    "{} of {heard} processes installed it within {ACK_WAIT:?}",
                    acked.unwrap_or(0)
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    if let Err(e) = shared.await {
        tracing::warn!(key, error = %e, "ACME: a challenge answer not shared with every tessera");
    }
}

/// Installs what the processes sharing `store` publish, for as long as the process
/// runs (connecting again after a lost connection).
pub(crate) async fn follow(store: &RedisStore, deploy: Arc<dyn Deploy>) {
    loop {
        if let Err(e) = follow_once(store, &*deploy).await {
            tracing::warn!(error = %e, "ACME: not hearing the other tesseras' challenges; trying again in 1 s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn follow_once(store: &RedisStore, deploy: &dyn Deploy) -> Result<(), String> {
    let redis_error = |e: redis::RedisError| format!("Redis: {e}");
    let mut pubsub = store.pubsub().await?;
    pubsub
        .subscribe(channel(store))
        .await
        .map_err(redis_error)?;
    let mut conn = store.connection().await?;
    tracing::info!("ACME: hearing the challenge answers of the tesseras sharing Redis");
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let Ok(payload) = message.get_payload::<String>() else {
            continue;
        };
        let Ok(message) = serde_json::from_str::<Message>(&payload) else {
            continue;
        };
        install(store, deploy, &message);
        redis::pipe()
            .incr(&message.ack, 1)
            .ignore()
            .expire(&message.ack, 60)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_error)?;
    }
    Err("the subscription ended".to_string())
}

fn install(store: &RedisStore, deploy: &dyn Deploy, message: &Message) {
    match message.kind.as_str() {
        "http" => deploy.http_challenge(&message.key, message.value.as_deref()),
        "alpn" => {
            let cert = message.value.as_ref().map(|value| {
                let sealed = base64::engine::general_purpose::STANDARD
                    .decode(value)
                    .map_err(|e| e.to_string())?;
                let both = store.open(&format!("{}:{}", channel(store), message.key), &sealed)?;
                let (len, rest) = both.split_at_checked(4).ok_or("too short")?;
                let len = u32::from_be_bytes(len.try_into().unwrap_or_default()) as usize;
                let (cert, key) = rest.split_at_checked(len).ok_or("too short")?;
                Ok::<_, String>((cert.to_vec(), key.to_vec()))
            });
            let result = match cert {
                Some(Err(e)) => Err(e),
                Some(Ok(cert)) => deploy.alpn_challenge(&message.key, Some(cert)),
                None => deploy.alpn_challenge(&message.key, None),
            };
            if let Err(e) = result {
                tracing::warn!(name = %message.key, error = %e, "ACME: a shared TLS-ALPN-01 challenge not installed");
            }
        }
        _ => {}
    }
}
