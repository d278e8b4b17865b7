//! HTTP/3 load (`--http3`): one thread's connections over QUIC, with quinn and h3 (the
//! stack tessera's server is to use, issue 47), on a single-threaded tokio runtime of the
//! thread's own. Each connection has a UDP socket of its own, as separate clients would.
//!
//! Closed model: each connection keeps `--streams` requests in flight, each stream
//! sending its next request when its response has ended. Open model (`--rate`): the
//! connections are kept open, and a dispatcher sends each request at its intended time
//! on a connection with a free stream (waiting for one, which the corrected latency
//! then shows). Without keep-alive, every request opens a connection (a full handshake:
//! no 0-RTT, no resumption) and closes it.
//!
//! Unlike the HTTP/1.1 and HTTP/2 engine ([`super::worker`]), this one allocates per
//! request (h3 builds an `http::Request`, quinn its stream state): its own CPU per
//! request is reported in the self-check like any other run's.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

use super::worker::Share;
use super::Progress;
use crate::config::{Address, Plan};
use crate::stats::{micros, FailureKind, ThreadStats};
use crate::Error;

/// After a failed connect, wait this long before the slot tries again.
const CONNECT_RETRY: Duration = Duration::from_millis(1);

/// A request of the mix, made once.
struct Template {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: Option<Bytes>,
}

/// What the thread's tasks share.
struct Run {
    plan: Arc<Plan>,
    templates: Vec<Template>,
    client: quinn::ClientConfig,
    server: SocketAddr,
    name: String,
    stats: RefCell<ThreadStats>,
    /// Requests this thread may still send (count-bounded runs).
    budget: Cell<Option<u64>>,
    deadline: Option<Instant>,
    progress: Arc<Progress>,
    mix_pos: Cell<usize>,
    start: Instant,
    /// This thread's connection slots, and how many have connected at least once.
    slots: usize,
    connected_once: Cell<usize>,
    /// Open model: requests sent and not yet ended.
    pending: Cell<usize>,
    /// Open model: the connections up now, by slot, and a wake-up when one has a stream
    /// free again (or connects).
    live: RefCell<Vec<Option<Rc<Live>>>>,
    freed: tokio::sync::Notify,
}

/// Open model: a connection that takes requests.
struct Live {
    send: Sender,
    inflight: Cell<usize>,
    broken: Cell<bool>,
    gone: tokio::sync::Notify,
}

impl Run {
    fn over(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.progress.stop.load(Ordering::Relaxed)
    }

    fn take_budget(&self) -> bool {
        match self.budget.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                self.budget.set(Some(n - 1));
                true
            }
        }
    }

    fn give_back(&self) {
        if let Some(n) = self.budget.get() {
            self.budget.set(Some(n + 1));
        }
    }

    fn next_template(&self) -> &Template {
        let plan = &self.plan;
        let i = self.mix_pos.get();
        self.mix_pos.set((i + 1) % plan.mix.len());
        &self.templates[plan.mix[i] as usize]
    }

    fn fail(&self, kind: FailureKind, error: &dyn std::fmt::Display) {
        let mut stats = self.stats.borrow_mut();
        if stats.first_error.is_none() {
            stats.first_error = Some(error.to_string());
        }
        stats.failure(Instant::now(), kind, 1);
    }
}

/// The request templates of the plan's mix.
fn templates(plan: &Plan) -> Result<Vec<Template>, Error> {
    let bad = |reason: String| Error::InvalidOption {
        option: "header",
        reason,
    };
    plan.specs
        .iter()
        .map(|spec| {
            let mut headers = http::HeaderMap::new();
            for (name, value) in &plan.headers {
                if name.eq_ignore_ascii_case("host") {
                    continue;
                }
                let name = http::HeaderName::try_from(name.to_ascii_lowercase())
                    .map_err(|e| bad(format!("{name:?}: {e}")))?;
                let value = http::HeaderValue::try_from(value.trim())
                    .map_err(|e| bad(format!("{value:?}: {e}")))?;
                headers.append(name, value);
            }
            if !headers.contains_key(http::header::USER_AGENT) {
                headers.insert(
                    http::header::USER_AGENT,
                    http::HeaderValue::from_static("tessera-bench"),
                );
            }
            let authority = plan
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                .map_or(spec.url.authority.as_str(), |(_, v)| v.trim());
            let uri = http::Uri::builder()
                .scheme("https")
                .authority(authority)
                .path_and_query(spec.url.path.as_str())
                .build()
                .map_err(|e| Error::InvalidOption {
                    option: "url",
                    reason: format!("{}: {e}", spec.url.path),
                })?;
            Ok(Template {
                method: http::Method::from_bytes(spec.method.as_bytes()).map_err(|_| {
                    Error::InvalidOption {
                        option: "method",
                        reason: format!("invalid method {:?}", spec.method),
                    }
                })?,
                uri,
                headers,
                body: spec.body.clone().map(Bytes::from),
            })
        })
        .collect()
}

/// Runs this thread's share of an HTTP/3 load; returns what it measured.
pub(super) fn run(
    plan: Arc<Plan>,
    share: Share,
    start: Instant,
    progress: Arc<Progress>,
) -> Result<ThreadStats, Error> {
    let Address::Tcp(server) = plan.address else {
        return Err(Error::InvalidOption {
            option: "http3",
            reason: "HTTP/3 runs over UDP: not with --unix-socket".into(),
        });
    };
    let tls = plan.tls.as_ref().ok_or_else(|| Error::InvalidOption {
        option: "http3",
        reason: "HTTP/3 needs an https:// URL".into(),
    })?;
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls.config.clone()).map_err(|e| {
            Error::InvalidOption {
                option: "http3",
                reason: e.to_string(),
            }
        })?;
    let client = quinn::ClientConfig::new(Arc::new(crypto));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Io)?;
    let plan_deadline = plan.duration.map(|d| start + d);
    let run = Rc::new(Run {
        templates: templates(&plan)?,
        name: tls.names[0].to_str().into_owned(),
        plan,
        client,
        server,
        stats: RefCell::new(ThreadStats::new(start, share.rate.is_some())),
        budget: Cell::new(share.requests),
        deadline: plan_deadline,
        progress,
        mix_pos: Cell::new(0),
        start,
        slots: share.connections,
        connected_once: Cell::new(0),
        pending: Cell::new(0),
        live: RefCell::new(vec![None; share.connections]),
        freed: tokio::sync::Notify::new(),
    });
    let rate = share.rate;
    let local = tokio::task::LocalSet::new();
    let connections = share.connections;
    let r = run.clone();
    local.block_on(&runtime, async move {
        let ticker = tokio::task::spawn_local(report_progress(r.clone()));
        let mut slots = Vec::with_capacity(connections + 1);
        match rate {
            None => {
                for _ in 0..connections {
                    slots.push(tokio::task::spawn_local(slot(r.clone())));
                }
            }
            Some(rate) => {
                if r.plan.keepalive {
                    for index in 0..connections {
                        slots.push(tokio::task::spawn_local(keep_connected(r.clone(), index)));
                    }
                }
                slots.push(tokio::task::spawn_local(dispatch(r.clone(), rate)));
            }
        }
        // The closed model ends when every slot has; the open one when its dispatcher
        // has (the last slot) and the requests it sent are answered.
        let all = async {
            match rate {
                None => {
                    for s in slots.iter_mut() {
                        let _ = s.await;
                    }
                }
                Some(_) => {
                    if let Some(d) = slots.last_mut() {
                        let _ = d.await;
                    }
                    while r.pending.get() > 0 {
                        r.freed.notified().await;
                    }
                }
            }
        };
        match r.deadline {
            Some(d) => {
                let _ = tokio::time::timeout_at(d.into(), all).await;
            }
            None => all.await,
        }
        for s in &slots {
            s.abort();
        }
        ticker.abort();
    });
    drop(local);
    drop(runtime);
    let run = Rc::try_unwrap(run).map_err(|_| Error::WorkerPanicked)?;
    Ok(run.stats.into_inner())
}

/// Pushes the progress counters every 100 ms.
async fn report_progress(run: Rc<Run>) {
    let mut reported = (0u64, 0u64);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stats = run.stats.borrow();
        let now = (stats.responses, stats.failures.total());
        run.progress
            .responses
            .fetch_add(now.0 - reported.0, Ordering::Relaxed);
        run.progress
            .failures
            .fetch_add(now.1 - reported.1, Ordering::Relaxed);
        reported = now;
    }
}

/// One connection slot: connects, runs its streams, and connects again when the
/// connection ends (every request, without keep-alive) until the run is over.
async fn slot(run: Rc<Run>) {
    let first = Cell::new(true);
    while !run.over() && run.budget.get() != Some(0) {
        if !run.plan.keepalive && !run.take_budget() {
            return;
        }
        let Some((send, endpoint, driver)) = connect(&run, &first).await else {
            // Without keep-alive the request taken above failed with its connect; with
            // it, a failed connect costs one request too, so that a run against a dead
            // server still ends after -n requests (as over TCP).
            if run.plan.keepalive {
                run.take_budget();
            }
            tokio::time::sleep(CONNECT_RETRY).await;
            continue;
        };
        if run.plan.keepalive {
            let mut streams = Vec::with_capacity(run.plan.pipeline);
            for _ in 0..run.plan.pipeline {
                streams.push(tokio::task::spawn_local(stream(run.clone(), send.clone())));
            }
            drop(send);
            for s in streams {
                let _ = s.await;
            }
        } else {
            let mut send = send;
            let _ = request(&run, &mut send, None).await;
        }
        driver.abort();
        endpoint.close(0u32.into(), b"");
    }
}

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// A new QUIC connection with its HTTP/3 control streams: the request sender, its
/// endpoint (a UDP socket of its own) and the connection's driver task. `None` when the
/// connect failed (counted).
async fn connect(
    run: &Rc<Run>,
    first: &Cell<bool>,
) -> Option<(Sender, quinn::Endpoint, tokio::task::JoinHandle<()>)> {
    let started = Instant::now();
    let local: SocketAddr = if run.server.is_ipv4() {
        "0.0.0.0:0".parse().expect("an address")
    } else {
        "[::]:0".parse().expect("an address")
    };
    let endpoint = match quinn::Endpoint::client(local) {
        Ok(e) => e,
        Err(e) => {
            run.fail(FailureKind::Connect, &e);
            return None;
        }
    };
    let connecting = match endpoint.connect_with(run.client.clone(), run.server, &run.name) {
        Ok(c) => c,
        Err(e) => {
            run.fail(FailureKind::Connect, &e);
            return None;
        }
    };
    let connection = match tokio::time::timeout(run.plan.timeout, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let kind = match e {
                quinn::ConnectionError::TransportError(_)
                | quinn::ConnectionError::ConnectionClosed(_) => FailureKind::Tls,
                _ => FailureKind::Connect,
            };
            run.fail(kind, &e);
            return None;
        }
        Err(_) => {
            run.fail(FailureKind::Connect, &"QUIC handshake timed out");
            return None;
        }
    };
    let (mut driver, send) = match h3::client::new(h3_quinn::Connection::new(connection)).await {
        Ok(pair) => pair,
        Err(e) => {
            run.fail(FailureKind::BadResponse, &e);
            return None;
        }
    };
    let driver = tokio::task::spawn_local(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let now = Instant::now();
    let mut stats = run.stats.borrow_mut();
    stats.connects += 1;
    stats
        .connect_time
        .saturating_record(micros(now.saturating_duration_since(started)));
    if first.replace(false) {
        run.connected_once.set(run.connected_once.get() + 1);
        if run.connected_once.get() == run.slots {
            stats.all_connected_at = Some(now.saturating_duration_since(run.start));
        }
    }
    Some((send, endpoint, driver))
}

/// One stream slot of a keep-alive connection: a request after another until the run
/// is over or the connection fails.
async fn stream(run: Rc<Run>, mut send: Sender) {
    while !run.over() && run.take_budget() {
        if request(&run, &mut send, None).await.is_err() {
            return;
        }
    }
}

/// Why a request ended without a response: the connection is then given up.
struct Broken;

/// Sends one request (its budget taken) and reads its response to the end. Open model:
/// `at` is its intended send time and when a stream was free for it (its send lag is
/// counted from the later of the two, as over TCP).
async fn request(
    run: &Rc<Run>,
    send: &mut Sender,
    at: Option<(Instant, Instant)>,
) -> Result<(), Broken> {
    let t = run.next_template();
    let mut req = http::Request::new(());
    *req.method_mut() = t.method.clone();
    *req.uri_mut() = t.uri.clone();
    *req.headers_mut() = t.headers.clone();
    let body = t.body.clone();
    let sent = Instant::now();
    let (intended, free) = at.unwrap_or((sent, sent));
    if let Some(lag) = &mut run.stats.borrow_mut().send_lag {
        lag.saturating_record(micros(sent.saturating_duration_since(free.max(intended))));
    }
    let exchange = async {
        let mut stream = send
            .send_request(req)
            .await
            .map_err(|e| (FailureKind::Reset, e.to_string()))?;
        if let Some(body) = body {
            stream
                .send_data(body)
                .await
                .map_err(|e| (FailureKind::Reset, e.to_string()))?;
        }
        stream
            .finish()
            .await
            .map_err(|e| (FailureKind::Reset, e.to_string()))?;
        let response = stream
            .recv_response()
            .await
            .map_err(|e| (FailureKind::Reset, e.to_string()))?;
        let mut bytes = 0usize;
        while let Some(mut chunk) = stream
            .recv_data()
            .await
            .map_err(|e| (FailureKind::Reset, e.to_string()))?
        {
            bytes += chunk.remaining();
            chunk.advance(chunk.remaining());
        }
        Ok::<_, (FailureKind, String)>((response.status().as_u16(), bytes))
    };
    match tokio::time::timeout(run.plan.timeout, exchange).await {
        Ok(Ok((status, bytes))) => {
            let now = Instant::now();
            let mut stats = run.stats.borrow_mut();
            stats.bytes_read(now, bytes);
            stats.response(now, status, sent, intended);
            Ok(())
        }
        Ok(Err((kind, error))) => {
            if run.over() {
                // Cut by the end of the run, not failed.
                run.give_back();
                return Err(Broken);
            }
            run.fail(kind, &error);
            Err(Broken)
        }
        Err(_) => {
            run.fail(
                FailureKind::Timeout,
                &"no complete response within the timeout",
            );
            Err(Broken)
        }
    }
}

/// Open model, keep-alive: keeps connection `index` up and listed in `run.live`.
async fn keep_connected(run: Rc<Run>, index: usize) {
    let first = Cell::new(true);
    while !run.over() {
        let Some((send, endpoint, driver)) = connect(&run, &first).await else {
            tokio::time::sleep(CONNECT_RETRY).await;
            continue;
        };
        let live = Rc::new(Live {
            send,
            inflight: Cell::new(0),
            broken: Cell::new(false),
            gone: tokio::sync::Notify::new(),
        });
        run.live.borrow_mut()[index] = Some(live.clone());
        run.freed.notify_waiters();
        while !live.broken.get() {
            live.gone.notified().await;
        }
        run.live.borrow_mut()[index] = None;
        driver.abort();
        endpoint.close(0u32.into(), b"");
    }
}

/// A connection with a free stream, the least busy first.
fn pick(run: &Run) -> Option<Rc<Live>> {
    run.live
        .borrow()
        .iter()
        .flatten()
        .filter(|l| !l.broken.get() && l.inflight.get() < run.plan.pipeline)
        .min_by_key(|l| l.inflight.get())
        .cloned()
}

/// Open model: sends request k at `start + k / rate`, on a connection with a free
/// stream (keep-alive) or a new connection of its own, at most `--connections` at once.
async fn dispatch(run: Rc<Run>, rate: f64) {
    let interval_ns = 1e9 / rate;
    let mut k: u64 = 0;
    loop {
        let intended = run.start + Duration::from_nanos((interval_ns * k as f64) as u64);
        if run.deadline.is_some_and(|d| intended >= d) || run.over() || run.budget.get() == Some(0)
        {
            return;
        }
        tokio::time::sleep_until(intended.into()).await;
        // A request waits for a free stream (or, without keep-alive, a free slot) at most
        // the timeout; the wait is in its corrected latency.
        let waited = tokio::time::timeout(run.plan.timeout, async {
            loop {
                let room = if run.plan.keepalive {
                    pick(&run).map(Some)
                } else {
                    (run.pending.get() < run.slots).then_some(None)
                };
                if let Some(room) = room {
                    return room;
                }
                run.freed.notified().await;
            }
        })
        .await;
        if !run.take_budget() {
            return;
        }
        k += 1;
        let free = Instant::now();
        let Ok(live) = waited else {
            run.fail(
                FailureKind::Timeout,
                &"no connection with a free stream within the timeout",
            );
            continue;
        };
        run.pending.set(run.pending.get() + 1);
        if let Some(l) = &live {
            l.inflight.set(l.inflight.get() + 1);
        }
        let run = run.clone();
        tokio::task::spawn_local(async move {
            match live {
                Some(l) => {
                    let mut send = l.send.clone();
                    if request(&run, &mut send, Some((intended, free)))
                        .await
                        .is_err()
                    {
                        l.broken.set(true);
                        l.gone.notify_one();
                    }
                    l.inflight.set(l.inflight.get() - 1);
                }
                None => {
                    let first = Cell::new(true);
                    if let Some((mut send, endpoint, driver)) = connect(&run, &first).await {
                        let _ = request(&run, &mut send, Some((intended, free))).await;
                        driver.abort();
                        endpoint.close(0u32.into(), b"");
                    }
                }
            }
            run.pending.set(run.pending.get() - 1);
            run.freed.notify_waiters();
        });
    }
}
