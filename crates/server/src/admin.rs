//! The admin listener (`admin_listen`): `/metrics` for Prometheus, `/healthz` for load
//! balancers and `/status` (a live page fed by `/status.json`) for people, on an address
//! of its own, never one of the public listeners.
//!
//! It runs on a thread of its own, off the workers, answering one short request per
//! connection in turn: a scrape every few seconds and a health check are all it serves,
//! and each connection gets 5 s to send its request before it is dropped, so a client
//! that stalls delays the next scrape by that much at most.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::{self, Answered, WorkerMetrics};
use crate::shared::{Phase, Shared};

/// The live status page: self-contained (inline script, canvas charts), it polls
/// `/status.json` and computes rates from successive samples in the browser.
const STATUS_PAGE: &str = include_str!("status.html");

/// Largest request head the admin listener reads.
const MAX_HEAD: usize = 8192;

/// Binds the admin address (so a bad one fails the start, not later).
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
}

/// Serves the admin listener until the process exits.
pub(crate) fn start(
    listener: TcpListener,
    shared: Arc<Shared>,
    phase: tokio::sync::watch::Receiver<Phase>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("tessera-admin".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => serve(stream, &shared, &phase),
                    Err(e) => {
                        tracing::warn!(error = %e, "admin listener: accept failed");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        })?;
    Ok(())
}

/// Who may use the admin listener: `admin_allow` when it is set (the whole list), else
/// loopback clients; a request with `Authorization: Bearer <admin_token>` always.
fn allowed(config: &crate::Config, client: IpAddr, authorization: Option<&[u8]>) -> bool {
    if let (Some(token), Some(auth)) = (&config.admin_token, authorization) {
        if auth.strip_prefix(b"Bearer ") == Some(token.as_bytes()) {
            return true;
        }
    }
    if config.admin_allow.is_empty() {
        client.is_loopback()
    } else {
        config.admin_allow.contains(&client)
    }
}

fn serve(mut stream: TcpStream, shared: &Shared, phase: &tokio::sync::watch::Receiver<Phase>) {
    let started = std::time::Instant::now();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let Ok(peer) = stream.peer_addr() else { return };
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    // A request that does not parse counts as `other`.
    let mut method = metrics::method_index(wire::Method::Other);
    let (status, content_type, body) = loop {
        let n = match stream.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        len += n;
        let mut storage = wire::HeaderStorage::new();
        match wire::parse_request(&buf[..len], &mut storage, &shared.limits) {
            Ok(Some(req)) => {
                method = metrics::method_index(req.method);
                // `admin_allow` judges the client a trusted proxy names, as the site does.
                let gen = shared.current.load();
                let client = gen.identity[0].named_by_fields(peer, &req);
                let client = client.map_or(peer, |c| c.addr);
                break answer(&req, client.ip(), shared, phase);
            }
            Ok(None) if len < MAX_HEAD => continue,
            _ => break (400, "text/plain", b"bad request\n".to_vec()),
        }
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        wire::reason(status),
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
    let micros = started.elapsed().as_micros() as u64;
    shared.admin_metrics.received(len);
    shared.admin_metrics.record(
        Answered {
            host: 0,
            kind: metrics::kind_index("admin"),
            method,
            request_id: None,
            route: None,
            trace: None,
        },
        status,
        micros,
        (head.len() + body.len()) as u64,
    );
}

fn answer(
    req: &wire::Request<'_, '_>,
    client: IpAddr,
    shared: &Shared,
    phase: &tokio::sync::watch::Receiver<Phase>,
) -> (u16, &'static str, Vec<u8>) {
    let gen = shared.current.load();
    if !allowed(&gen.config, client, req.header("authorization")) {
        return (403, "text/plain", b"forbidden\n".to_vec());
    }
    if !matches!(req.method, wire::Method::Get | wire::Method::Head) {
        return (405, "text/plain", b"method not allowed\n".to_vec());
    }
    match req.path {
        b"/metrics" => {
            // OpenMetrics when the scraper lists it (Prometheus does, first).
            let openmetrics = req.header("accept").is_some_and(|a| {
                memchr::memmem::find(a, b"application/openmetrics-text").is_some()
            });
            let text = render(shared, &gen).render(openmetrics);
            (
                200,
                handler::metrics_content_type(openmetrics),
                text.into_bytes(),
            )
        }
        b"/status" => (200, "text/html; charset=utf-8", STATUS_PAGE.into()),
        b"/status.json" => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            let json = format!(
                "{{\"time\":{now:.3},\"families\":{}}}\n",
                render(shared, &gen).render_json()
            );
            (200, "application/json", json.into_bytes())
        }
        b"/healthz" => match *phase.borrow() {
            Phase::Serve => (200, "text/plain", b"ok\n".to_vec()),
            Phase::Drain => (503, "text/plain", b"draining\n".to_vec()),
            Phase::Stop => (503, "text/plain", b"stopping\n".to_vec()),
        },
        _ => (404, "text/plain", b"not found\n".to_vec()),
    }
}

/// Every family: the server's, then each module's.
fn render(shared: &Shared, gen: &crate::generation::Generation) -> handler::Metrics {
    let mut out = handler::Metrics::new();
    out.gauge(
        "tessera_build_info",
        "The running build: always 1, with its version.",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    out.gauge(
        "tessera_start_time_seconds",
        "When the process started, in seconds since the Unix epoch.",
        &[],
        shared.started_unix,
    );
    out.gauge(
        "tessera_config_generation",
        "The configuration generation serving (1 at start, one more per reload).",
        &[],
        gen.number as f64,
    );
    let reloads = "Configuration reloads (SIGHUP), by result.";
    for (result, n) in [
        ("ok", gen.number - 1),
        ("failed", shared.reloads_failed.load(Ordering::Relaxed)),
    ] {
        out.counter("tessera_reloads_total", reloads, &[("result", result)], n);
    }
    let all: Vec<&WorkerMetrics> = shared
        .metrics
        .iter()
        .chain(std::iter::once(&shared.admin_metrics))
        .collect();
    metrics::write(&mut out, &all, &shared.host_labels, &shared.kinds);
    crate::limit::write_metrics(&mut out, &gen.limits);
    for state in crate::ConnState::ALL {
        if state == crate::ConnState::Free {
            continue;
        }
        let n: usize = shared
            .counts
            .iter()
            .map(|c| c[state as usize].load(Ordering::Relaxed))
            .sum();
        out.gauge(
            "tessera_connections",
            "Client connections open, by state (as of each worker's last check, 250 ms at most).",
            &[("state", state.name())],
            n as f64,
        );
    }
    out.gauge(
        "tessera_connections_capacity",
        "Client connections the fixed budget admits (max_connections, split across workers).",
        &[],
        (shared.slots_per_worker * shared.workers) as f64,
    );
    for e in wire::Error::ALL {
        out.counter(
            "tessera_refused_requests_total",
            "Requests refused before they could be parsed, by reason.",
            &[("reason", e.name())],
            shared.refusals[e.index()].load(Ordering::Relaxed),
        );
    }
    out.counter(
        "tessera_lingering_closes_total",
        "Connections closed with a lingering close (the client might still have been sending).",
        &[],
        shared.lingering_closes.load(Ordering::Relaxed),
    );
    out.counter(
        "tessera_access_log_lines_total",
        "Access log lines written to their files.",
        &[],
        shared.log.written.load(Ordering::Relaxed),
    );
    out.counter(
        "tessera_access_log_dropped_lines_total",
        "Access log lines dropped because the disk did not keep up.",
        &[],
        shared.log.dropped.load(Ordering::Relaxed),
    );
    out.counter(
        "tessera_trace_spans_exported_total",
        "Spans the OTLP receiver took ([tracing]).",
        &[],
        trace::export::exported(),
    );
    out.counter(
        "tessera_trace_spans_dropped_total",
        "Spans dropped: the exporter's queue was full, or the receiver did not take their batch.",
        &[],
        trace::export::dropped(),
    );
    if let Some(acme) = &shared.acme {
        acme.metrics(&mut out);
    }
    for module in &gen.modules {
        module.metrics(&mut out);
    }
    out
}
