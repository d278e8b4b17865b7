//! On-demand certificates (`on_demand`, with `ask`): the server hands over a name first
//! seen in SNI ([`OnDemand::demand`]); the client asks the `ask` endpoint
//! (`GET ASK?domain=NAME`, Caddy's convention: 200 allows it, anything else refuses
//! it), then serves the name's stored certificate or orders one (within the rate
//! limit), keeps it renewed like the configured names', and answers every handshake
//! that waited for it.
//!
//! Refusals are remembered for [`REFUSED_FOR`], so that a client that keeps
//! connecting with a refused name does not make a request to the endpoint each time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, oneshot};

use crate::keep::{keep, stored};
use crate::order::Context;

/// New orders on demand: at most this many...
pub const ORDERS: usize = 10;
/// ...in any window this long. A name over the limit is not ordered now; its next
/// handshake tries again. A CA's own limits (Let's Encrypt: 300 new orders per 3 hours
/// per account) are far above it.
pub const ORDERS_WINDOW: Duration = Duration::from_secs(60);
/// How long a refusal of the ask endpoint is remembered.
pub const REFUSED_FOR: Duration = Duration::from_secs(60);
/// The longest the ask endpoint may take to answer; no answer is a refusal.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// Names waiting for the client (asked about or ordered) at most; a handshake beyond
/// is not waited for.
const QUEUE: usize = 256;
/// Refusals remembered at most (the oldest are forgotten first).
const REFUSED_MAX: usize = 10_000;

type Request = (String, oneshot::Sender<bool>);

/// The server's way to ask for a name's certificate on demand.
#[derive(Clone)]
pub struct OnDemand(mpsc::Sender<Request>);

impl OnDemand {
    /// Asks for `name`'s certificate: the answer comes on the receiver (`true` once
    /// it is installed); `None` when too many names wait already.
    pub fn demand(&self, name: &str) -> Option<oneshot::Receiver<bool>> {
        let (answer, wait) = oneshot::channel();
        self.0.try_send((name.to_string(), answer)).ok()?;
        Some(wait)
    }
}

/// The door the server knocks at, and what [`serve`] listens to behind it.
pub(crate) fn door() -> (OnDemand, mpsc::Receiver<Request>) {
    let (send, receive) = mpsc::channel(QUEUE);
    (OnDemand(send), receive)
}

/// What a name's task tells the on-demand loop.
pub(crate) enum Event {
    /// The ask endpoint's answer (an error is a refusal not remembered).
    Asked(String, Result<bool, String>),
    /// An order for the name ended, with a certificate or not.
    Ordered(String, bool),
}

/// Answers the server's demands until it goes away. `kept`: the names with a task
/// already (the configured ones).
pub(crate) async fn serve(
    context: Arc<Context>,
    ask: String,
    mut requests: mpsc::Receiver<Request>,
    mut kept: HashSet<String>,
) {
    let asker = Arc::new(Asker::new(ask));
    let (events_out, mut events) = mpsc::unbounded_channel();
    let mut waiting: HashMap<String, Vec<oneshot::Sender<bool>>> = HashMap::new();
    let mut refused: HashMap<String, Instant> = HashMap::new();
    let mut orders: VecDeque<Instant> = VecDeque::new();
    loop {
        tokio::select! {
            request = requests.recv() => {
                let Some((name, answer)) = request else { return };
                if let Some(waiters) = waiting.get_mut(&name) {
                    waiters.push(answer);
                } else if kept.contains(&name)
                    || refused.get(&name).is_some_and(|at| at.elapsed() < REFUSED_FOR)
                    || !is_dns_name(&name)
                {
                    // Kept (its certificate is there, or its order failed and is
                    // tried again after a backoff), refused, or no name a CA signs.
                    let _ = answer.send(false);
                } else {
                    waiting.insert(name.clone(), vec![answer]);
                    let (asker, events_out) = (asker.clone(), events_out.clone());
                    tokio::spawn(async move {
                        let allowed = asker.allows(&name).await;
                        let _ = events_out.send(Event::Asked(name, allowed));
                    });
                }
            }
            Some(event) = events.recv() => match event {
                Event::Asked(name, Ok(true)) => {
                    if let Some(stored) = stored(&context, &name).await {
                        tracing::info!(name = %name, "on demand: the ask endpoint allows it; its stored certificate served");
                        kept.insert(name.clone());
                        tokio::spawn(keep(context.clone(), name.clone(), Some(stored), None));
                        answer(&mut waiting, &name, true);
                        continue;
                    }
                    while orders.front().is_some_and(|at| at.elapsed() >= ORDERS_WINDOW) {
                        orders.pop_front();
                    }
                    if orders.len() >= ORDERS {
                        tracing::warn!(name = %name, limit = ORDERS, window = ?ORDERS_WINDOW, "on demand: order rate limit reached; not ordered now");
                        answer(&mut waiting, &name, false);
                        continue;
                    }
                    orders.push_back(Instant::now());
                    tracing::info!(name = %name, "on demand: the ask endpoint allows it; ordering");
                    kept.insert(name.clone());
                    let events = events_out.clone();
                    let ordered = name.clone();
                    let ended = Box::new(move |ok| drop(events.send(Event::Ordered(ordered.clone(), ok))));
                    tokio::spawn(keep(context.clone(), name, None, Some(ended)));
                }
                Event::Asked(name, Ok(false)) => {
                    tracing::info!(name = %name, "on demand: the ask endpoint refuses it; no order");
                    if refused.len() >= REFUSED_MAX {
                        refused.retain(|_, at| at.elapsed() < REFUSED_FOR);
                        if refused.len() >= REFUSED_MAX {
                            refused.clear();
                        }
                    }
                    refused.insert(name.clone(), Instant::now());
                    answer(&mut waiting, &name, false);
                }
                Event::Asked(name, Err(e)) => {
                    tracing::warn!(name = %name, error = %e, "on demand: the ask endpoint did not answer; no order");
                    answer(&mut waiting, &name, false);
                }
                Event::Ordered(name, ok) => answer(&mut waiting, &name, ok),
            }
        }
    }
}

fn answer(waiting: &mut HashMap<String, Vec<oneshot::Sender<bool>>>, name: &str, ok: bool) {
    for waiter in waiting.remove(name).unwrap_or_default() {
        let _ = waiter.send(ok);
    }
}

/// Whether a CA could sign `name`: DNS labels (letters, digits, hyphens) with a dot.
fn is_dns_name(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    name.len() <= 253 && name.contains('.') && name.split('.').all(label)
}

/// The ask endpoint's client.
struct Asker {
    url: String,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl Asker {
    fn new(url: String) -> Asker {
        // The system's roots for an https:// endpoint (as for a public CA).
        let connector = crate::http::connector(None).expect("no file to read");
        Asker {
            url,
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Whether the endpoint answers `GET URL?domain=NAME` with 200.
    async fn allows(&self, name: &str) -> Result<bool, String> {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        let uri: hyper::Uri = format!("{}{separator}domain={name}", self.url)
            .parse()
            .map_err(|e| format!("{}: {e}", self.url))?;
        let response = tokio::time::timeout(ASK_TIMEOUT, self.client.get(uri))
            .await
            .map_err(|_| format!("no answer within {ASK_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        Ok(response.status() == hyper::StatusCode::OK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dns_names_are_ordered() {
        assert!(is_dns_name("a.example.com"));
        assert!(is_dns_name("xn--bcher-kva.example"));
        assert!(!is_dns_name("localhost"));
        assert!(!is_dns_name("a..example"));
        assert!(!is_dns_name("-a.example"));
        assert!(!is_dns_name("a_b.example"));
        assert!(!is_dns_name("a.example/x"));
    }
}
