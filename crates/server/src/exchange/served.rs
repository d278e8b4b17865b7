//! What is recorded for every response served, whichever protocol carried it: its
//! count in the worker's metrics and its access log line.

use std::time::Instant;

use crate::access_log::Entry;
use crate::facts::ConnFacts;
use crate::metrics::Answered;
use crate::net::output::{Mark, Output};
use crate::reply::HeadBuf;
use crate::worker::Worker;

/// What a protocol sent of a response: for the metrics and the access log.
pub(crate) struct Sent<H> {
    pub status: u16,
    /// The head as HTTP/1 lines, for the log's `%{X}o` (HTTP/2 writes them only when a
    /// log is on).
    pub head: H,
    /// The head's size as HTTP/1 lines, which the metrics count.
    pub head_len: u64,
    /// Body bytes sent.
    pub body: u64,
    /// The whole body went out (not cut short by an error or the client).
    pub complete: bool,
}

/// The metrics and the access log line of a response sent:
/// `request` calls its argument with the request as the log sees it, and is called only
/// when an access log is on. `notes`: what the handler noted for the log.
pub(crate) fn account<H: AsRef<[u8]>>(
    worker: &Worker,
    conn: &ConnFacts,
    read_at: Option<Instant>,
    (answered, notes): (Answered, Option<&handler::LogNotes>),
    sent: &Sent<H>,
    request: impl FnOnce(&mut dyn FnMut(Option<&wire::Request<'_, '_>>)),
) {
    count(
        worker,
        answered,
        (sent.status, sent.head_len, sent.body),
        read_at,
    );
    let logging = worker.log.borrow().is_some();
    let traced = answered.trace.filter(|t| t.sampled);
    if logging || traced.is_some() {
        let response = (sent.status, sent.head.as_ref(), sent.body);
        let ids = (answered.request_id, answered.route, notes, answered.trace);
        request(&mut |request| {
            if logging {
                record(worker, conn, (read_at, ids), request, b"", response);
            }
            if let Some(trace) = traced {
                server_span(worker, trace, (answered, sent.status, read_at), request);
            }
        });
    }
}

/// The metrics and access log line of the response just added to `out` (`request`:
/// the request and who answered it; `None` for a request refused before it parsed,
/// which the refusal counters count).
pub(crate) fn log(
    worker: &Worker,
    conn: &ConnFacts,
    read_at: Option<Instant>,
    request: Option<(&wire::Request<'_, '_>, Answered)>,
    raw_line: &[u8],
    out: &Output,
    mark: Mark,
) {
    let logging = worker.log.borrow().is_some();
    let traced = request.is_some_and(|(_, a)| a.trace.is_some_and(|t| t.sampled));
    if !logging && !worker.shared.metrics_on && !traced {
        return;
    }
    // A head written as fields (HTTP/2) is counted and logged as the same head in lines.
    let mut lines = None;
    let (status, head, head_len, body_bytes) = match out.fields() {
        Some(head) => {
            let written = match logging {
                true => {
                    let lines = lines.insert(HeadBuf::take());
                    head.write_lines(lines);
                    &lines[..]
                }
                false => &[][..],
            };
            let body_bytes = out.added_since(mark);
            (head.status(), written, head.lines_len(), body_bytes)
        }
        None => {
            let (status, head, body_bytes) = out.since(mark);
            (status, head, head.len() as u64, body_bytes)
        }
    };
    if let Some((req, answered)) = request {
        count(worker, answered, (status, head_len, body_bytes), read_at);
        if let Some(trace) = answered.trace.filter(|t| t.sampled) {
            server_span(worker, trace, (answered, status, read_at), Some(req));
        }
    }
    if logging {
        let ids = request.map_or((None, None, None, None), |(_, a)| {
            (a.request_id, a.route, None, a.trace)
        });
        let request = request.map(|(r, _)| r);
        let response = (status, head, body_bytes);
        record(worker, conn, (read_at, ids), request, raw_line, response);
    }
}

/// Counts a response, (status, head bytes, body bytes), in this worker's metrics, when
/// they are on.
pub(crate) fn count(
    worker: &Worker,
    answered: Answered,
    (status, head_len, body_bytes): (u16, u64, u64),
    read_at: Option<Instant>,
) {
    if let Some(metrics) = worker.metrics() {
        // The turn's clock, as `read_at` (`evloop::time`).
        let now = evloop::time::now().into_std();
        let micros = read_at.map_or(0, |t| now.saturating_duration_since(t).as_micros() as u64);
        metrics.record(answered, status, micros, head_len + body_bytes);
    }
}

/// The request's id, the rule that routed it (site, rule), what its handler noted, and
/// its trace context.
type Ids<'n> = (
    Option<u128>,
    Option<(u16, u16)>,
    Option<&'n handler::LogNotes>,
    Option<trace::Context>,
);

/// One access log line: `response` is (status, head, body bytes).
pub(crate) fn record(
    worker: &Worker,
    conn: &ConnFacts,
    (read_at, (request_id, route, notes, trace)): (Option<Instant>, Ids<'_>),
    request: Option<&wire::Request<'_, '_>>,
    raw_line: &[u8],
    (status, head, body_bytes): (u16, &[u8], u64),
) {
    let mut logs = worker.log.borrow_mut();
    let current = worker.current.borrow().clone();
    let hosts = &current.gen.sites.hosts;
    let site = request.map_or(hosts.default_site(), |r| hosts.select(r));
    let Some(log) = logs.as_mut().and_then(|l| l.of_site(site)) else {
        return;
    };
    let gen = &current.gen;
    // The host's first name; for the top-level site, the Host as sent, without its port.
    let host = match site {
        0 => request.and_then(|r| r.header("host")).map(|h| {
            match h.iter().rposition(|&b| b == b':') {
                Some(colon) if !h[colon..].contains(&b']') => &h[..colon],
                _ => h,
            }
        }),
        site => gen.config.host[site - 1]
            .names
            .first()
            .map(|n| n.as_bytes()),
    };
    let route = route.and_then(|(site, rule)| {
        let rules = gen.rules.get(usize::from(site))?.rules();
        Some(rules.get(usize::from(rule))?.name.as_str())
    });
    // The request's client, as `exchange::answer` found it (worked out again here: a
    // response that came later is logged from the connection's facts).
    let forwarded = match (request, current.gen.reads_fields) {
        (Some(req), true) => current.gen.identity[site].of_request(conn, req),
        _ => None,
    };
    // The turn's reading of the clock (`evloop::time`), for the request's time and its
    // last upstream attempt's: as old as the turn's work before it, as nginx's
    // `$request_time` and `$upstream_response_time`, which are as of its loop's turn.
    let now = evloop::time::now().into_std();
    let entry = Entry {
        host,
        route,
        iso_time: worker.clock.iso_time(),
        tls: conn.tls.as_ref(),
        client: forwarded.map_or(conn.client, |f| f.addr),
        peer: conn.peer,
        proxy_tlvs: conn.proxy_tlvs(),
        request,
        raw_line,
        status,
        head,
        body_bytes,
        micros: read_at.map_or(0, |t| now.saturating_duration_since(t).as_micros() as u64),
        now,
        request_id,
        trace,
        notes: notes.map(|n| n.noted()),
    };
    log.record(&entry, &worker.clock.clf_time()[..]);
}

/// Exports the server span of a sampled request answered with `status`: from reading the
/// request (`read_at`) to now, a child of the client's span when the trace came from it.
fn server_span(
    worker: &Worker,
    trace: trace::Context,
    (answered, status, read_at): (Answered, u16, Option<Instant>),
    request: Option<&wire::Request<'_, '_>>,
) {
    use trace::Attribute::{Int, Str};
    let end = std::time::SystemTime::now();
    let start = read_at.map_or(end, |t| end - t.elapsed());
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut attributes = vec![Int("http.response.status_code", i64::from(status))];
    if let Some(req) = request {
        let path = memchr::memchr(b'?', req.target).map_or(req.target, |q| &req.target[..q]);
        attributes.push(Str("http.request.method", req.method_token.into()));
        attributes.push(Str("url.path", text(path)));
        if let Some(host) = req.header("host") {
            attributes.push(Str("server.address", text(host)));
        }
    }
    let current = worker.current.borrow().clone();
    let route = answered.route.and_then(|(site, rule)| {
        let rules = current.gen.rules.get(usize::from(site))?.rules();
        Some(rules.get(usize::from(rule))?.name.clone())
    });
    if let Some(route) = route {
        attributes.push(Str("tessera.route", route));
    }
    if let Some(id) = answered.request_id {
        attributes.push(Str(
            "tessera.request_id",
            text(&crate::facts::request_id_hex(id)),
        ));
    }
    trace::emit(trace::SpanRecord {
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        parent_id: trace.parent_id,
        name: request.map_or("HTTP", |r| r.method_token).to_string(),
        kind: trace::Kind::Server,
        start,
        end,
        attributes,
        error: status >= 500,
    });
}
