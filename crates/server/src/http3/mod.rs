//! HTTP/3 (RFC 9114) over QUIC: quinn for QUIC, h3 for HTTP/3 framing and QPACK, on the
//! worker's own loop ([`runtime`]). Each worker has one UDP socket per `quic_listen`
//! address (SO_REUSEPORT, as its TCP listeners) and one QUIC endpoint on it. Each
//! request stream is answered by the same `exchange` as an HTTP/1 request or an HTTP/2
//! stream ([`stream`]), so files, the proxy, ESI, the cache and Lua answer all three
//! protocols with one code path.
//!
//! A QUIC connection holds one slot of the fixed connection budget, whatever its
//! streams, in the state `Handling` for its whole life: QUIC's own idle timeout
//! (`[http3] idle_timeout`) closes a quiet one. With no slot free a new connection is
//! refused (CONNECTION_REFUSED), and the client may try TCP.
//!
//! New connections faster than `[http3] retry_threshold` a second (per worker) must
//! prove their address first with a stateless Retry; until an address is proven, QUIC
//! sends it at most three times what it received (RFC 9000 section 8.1, quinn's own
//! rule), so the server cannot be used to amplify a spoofed flood.

mod conn;
mod runtime;
mod stream;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::SlotId;

use self::conn::Conn;
use crate::conn_state::ConnState;
use crate::facts::{ConnFacts, TlsFacts};
use crate::net::listeners::Stop;
use crate::worker::Worker;

/// Unidirectional streams a client may open: HTTP/3's control stream and QPACK's two,
/// with room for the reserved (grease) streams some clients add.
const MAX_UNI_STREAMS: u32 = 8;

/// Serves HTTP/3 on `socket` (this worker's UDP socket of one `quic_listen` address)
/// until `stop`; connections open then end as the worker's shutdown has them end.
pub(crate) async fn serve(socket: std::net::UdpSocket, worker: Rc<Worker>, stop: Rc<Stop>) {
    let Some(tls) = worker.shared.tls.as_ref() else {
        return;
    };
    let mut made = Made::default();
    let server_config = match made.config(&worker, tls.quic()) {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(worker = worker.id, error = %e, "cannot start QUIC");
            return;
        }
    };
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some((*server_config).clone()),
        socket,
        Arc::new(runtime::OnLoop),
    );
    let endpoint = match endpoint {
        Ok(endpoint) => endpoint,
        Err(e) => {
            tracing::error!(worker = worker.id, error = %e, "cannot start QUIC");
            return;
        }
    };
    let mut rate = Rate::default();
    loop {
        // A socket a reload removed closes once its connections end. A shutdown (or a
        // binary upgrade, whose successor reads the same socket) keeps reading it only
        // while connections are open, and ignores new ones: a client's next Initial may
        // reach the successor, and one that does not tries again, where a refusal would
        // have failed it. Once none is open it stops reading, and every packet goes to
        // the successor.
        let stopping = stop.stopped.get();
        if stopping && !worker.is_shutting_down() {
            break;
        }
        let incoming = tokio::select! {
            biased;
            incoming = endpoint.accept() => incoming,
            _ = stop.stopped(), if !stopping => continue,
            _ = evloop::time::sleep(Duration::from_millis(50)), if stopping => {
                if endpoint.open_connections() == 0 {
                    break;
                }
                continue;
            }
        };
        let Some(incoming) = incoming else { break };
        if stopping {
            incoming.ignore();
            continue;
        }
        let current = worker.current();
        let threshold = current.gen.config.http3.retry_threshold;
        drop(current);
        worker.clock.refresh();
        if rate.count(worker.clock.millis()) > threshold
            && !incoming.remote_address_validated()
            && incoming.may_retry()
        {
            if let Some(metrics) = worker.metrics() {
                metrics.quic_retry();
            }
            let _ = incoming.retry();
            continue;
        }
        let Some(slot) = take_slot(&worker) else {
            incoming.refuse();
            continue;
        };
        // A reload's certificates and limits apply to the connections that come after.
        let config = match made.config(&worker, tls.quic()) {
            Ok(config) => config,
            Err(_) => server_config.clone(),
        };
        let worker = worker.clone();
        drop(evloop::spawn_local(async move {
            let _free = Free(&worker, slot);
            if let Ok(connecting) = incoming.accept_with(config) {
                connection(connecting, &worker).await;
            }
        }));
    }
    // Connections still open are served to their end: they hold the endpoint's driver.
    drop(endpoint);
}

/// The quinn server configuration made from the current rustls one and `[http3]`, made
/// again only when either changed (a reload).
#[derive(Default)]
struct Made {
    made: Option<(Arc<rustls::ServerConfig>, u64, Arc<quinn::ServerConfig>)>,
}

impl Made {
    fn config(
        &mut self,
        worker: &Worker,
        tls: Arc<rustls::ServerConfig>,
    ) -> Result<Arc<quinn::ServerConfig>, String> {
        let current = worker.current();
        let generation = current.gen.number;
        if let Some((was, number, made)) = &self.made {
            if Arc::ptr_eq(was, &tls) && *number == generation {
                return Ok(made.clone());
            }
        }
        let http3 = &current.gen.config.http3;
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls.clone())
            .map_err(|e| e.to_string())?;
        let mut transport = quinn::TransportConfig::default();
        let idle = quinn::IdleTimeout::try_from(http3.idle()).map_err(|e| e.to_string())?;
        transport
            .max_concurrent_bidi_streams(http3.max_streams.into())
            .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
            .max_idle_timeout(Some(idle))
            .stream_receive_window(http3.stream_window.into())
            .receive_window(http3.connection_window.into());
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(Arc::new(transport));
        let config = Arc::new(config);
        self.made = Some((tls, generation, config.clone()));
        Ok(config)
    }
}

/// New connections counted per second, to tell when a Retry is due.
#[derive(Default)]
struct Rate {
    second: u64,
    seen: u32,
}

impl Rate {
    /// Counts one at `millis`; the count in its second so far.
    fn count(&mut self, millis: u64) -> u32 {
        let second = millis / 1000;
        if second != self.second {
            self.second = second;
            self.seen = 0;
        }
        self.seen = self.seen.saturating_add(1);
        self.seen
    }
}

/// A slot for a new connection, in `Handling` (see the module's doc); none when every
/// slot is taken (QUIC does not evict an idle TCP connection for a new one).
fn take_slot(worker: &Worker) -> Option<SlotId> {
    worker.clock.refresh();
    let mut slots = worker.slots.borrow_mut();
    let slot = slots.take_oldest(ConnState::Free, ConnState::Handling, worker.clock.millis())?;
    slots[slot] = -1;
    Some(slot)
}

/// Frees a connection's slot when its task ends, however it ends.
struct Free<'w>(&'w Rc<Worker>, SlotId);

impl Drop for Free<'_> {
    fn drop(&mut self) {
        self.0.free(self.1);
    }
}

/// One connection: its handshake, then its request streams, each on a task of its own,
/// until the client closes it, it idles out, or the worker shuts down (GOAWAY, then the
/// streams in flight finish).
async fn connection(connecting: quinn::Connecting, worker: &Rc<Worker>) {
    let zero_rtt = worker.current().gen.config.http3.zero_rtt;
    let head = Duration::from_secs_f64(worker.current().gen.config.timeouts.head);
    let (quic, early) = match zero_rtt {
        true => match connecting.into_0rtt() {
            Ok((quic, accepted)) => (quic, Some(accepted)),
            Err(connecting) => match evloop::time::timeout(head, connecting).await {
                Ok(Ok(quic)) => (quic, None),
                _ => return,
            },
        },
        false => match evloop::time::timeout(head, connecting).await {
            Ok(Ok(quic)) => (quic, None),
            _ => return,
        },
    };
    let conn = Rc::new(Conn {
        worker: worker.clone(),
        facts: facts(worker, &quic),
        confirmed: Cell::new(early.is_none()),
        lost: Cell::new(false),
        handshake: tokio::sync::Notify::new(),
        requests: Cell::new(0),
        answered: tokio::sync::Notify::new(),
    });
    if let Some(accepted) = early {
        let conn = conn.clone();
        let quic = quic.clone();
        drop(evloop::spawn_local(async move {
            // It resolves when the handshake is done, or when the connection is lost
            // before (its value means nothing on a server, quinn says): told apart by
            // whether the connection is still open.
            accepted.await;
            match quic.close_reason() {
                None => conn.confirmed.set(true),
                Some(_) => conn.lost.set(true),
            }
            conn.handshake.notify_waiters();
        }));
    }
    if let Some(metrics) = worker.metrics() {
        metrics.http3_connection();
    }
    let max_head = worker.shared.limits.max_head_size as u64;
    let built = h3::server::builder()
        // One budget for a request head, whichever protocol carries it: past it, h3
        // answers 431 itself.
        .max_field_section_size(max_head)
        .build::<_, Bytes>(h3_quinn::Connection::new(quic.clone()))
        .await;
    let Ok(mut h3) = built else {
        return;
    };
    let mut going_away = false;
    // The highest request stream id accepted, and the GOAWAY's once it is sent: the
    // first id not processed (RFC 9114 section 5.2), one past the last accepted.
    let mut last_id: Option<u64> = None;
    let mut goaway_id: Option<u64> = None;
    loop {
        if worker.is_shutting_down() && !going_away {
            going_away = true;
            // GOAWAY: no stream after those accepted; `accept` ends once they finish.
            // `shutdown(1)` names the stream after the last accepted (`shutdown(0)`
            // would name the last accepted itself, which the client would then take for
            // unprocessed and send again elsewhere).
            if h3.shutdown(1).await.is_err() {
                break;
            }
            goaway_id = Some(last_id.map_or(0, |id| id + 4));
        }
        // After the GOAWAY, the connection ends once its requests are answered: h3's
        // `accept` would wait for the client to close it too, and a client's close
        // that the successor of a binary upgrade reads would never come.
        let accepted = tokio::select! {
            biased;
            _ = conn.all_answered(), if going_away => break,
            _ = worker.shutdown.notified(), if !going_away => continue,
            accepted = h3.accept() => accepted,
        };
        match accepted {
            Ok(Some(resolver)) => {
                // `frame_stream` is public in h3 0.0.8 (hidden from its docs); its id is
                // the request stream's.
                let id = resolver.frame_stream.id().into_inner();
                if goaway_id.is_some_and(|first_unprocessed| id >= first_unprocessed) {
                    // h3 lets in a stream with the GOAWAY's own id, which the client
                    // will send again elsewhere: not processed here.
                    continue;
                }
                last_id = Some(last_id.map_or(id, |last| last.max(id)));
                conn.requests.set(conn.requests.get() + 1);
                drop(evloop::spawn_local(stream::serve(resolver, conn.clone())));
            }
            Ok(None) | Err(_) => break,
        }
    }
    if going_away {
        // A request the client sent before the GOAWAY reached it may still be on its
        // way: the connection stays open a few round trips, so that the GOAWAY arrives
        // (closing would drop it unsent) and tells the client which requests to send
        // again elsewhere.
        let linger = (quic.rtt() * 3 + Duration::from_millis(20)).min(Duration::from_secs(1));
        evloop::time::sleep(linger).await;
    }
    quic.close(0u32.into(), b"");
    // The connection's driver (another task) sends the CONNECTION_CLOSE: let it run
    // before the slot is freed, which may end the worker's shutdown.
    evloop::yield_now().await;
    evloop::yield_now().await;
}

/// The facts the connection's requests are answered with: its peer, and the site its
/// SNI chose (as a TLS connection's: without SNI, or for a name no `[[host]]` has, the
/// default site).
fn facts(worker: &Worker, quic: &quinn::Connection) -> ConnFacts {
    let peer: SocketAddr = quic.remote_address();
    let sni = quic
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let current = worker.current();
    let hosts = &current.gen.sites.hosts;
    let site = sni
        .as_deref()
        .and_then(|n| hosts.named(n.as_bytes()))
        .unwrap_or_else(|| hosts.default_site());
    ConnFacts {
        peer,
        client: peer,
        tls: Some(TlsFacts {
            site: site as u32,
            sni: sni.map(|s| Rc::new(s.into_boxed_str())),
            version: "TLSv1.3",
            cipher: "-",
            h2: false,
            quic: true,
        }),
        proxied: None,
    }
}
