//! The access log, written off the hot path.
//!
//! Each worker formats lines into its own buffer (no locks, no allocation: buffers are
//! recycled). A full buffer is handed to one writer thread over a bounded channel and an
//! empty one taken back; the writer does the `write(2)`s in large blocks. The writer is
//! not woken for each buffer: it wakes every [`WRITER_PERIOD`], or at once when half of
//! the buffers are waiting for it. If the disk is
//! slow or full and no empty buffer is available, the worker drops the buffered lines
//! rather than wait, and counts them; the count is logged (rate-limited) and readable
//! through [`crate::Running::access_log_dropped`]. Nothing on the request path ever
//! blocks on the log. SIGUSR1 makes the writer reopen the file (logrotate's convention).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use wire::Request;

mod item;
mod noted;
mod style;
mod writer;

use item::{steps, Item, Step};
pub(crate) use writer::Shared;
use writer::{open, writer};

use style::{escape, number, Style};

/// A buffer is handed to the writer when it holds this much.
const BUFFER_SIZE: usize = 64 * 1024;
/// Buffers per worker: one being filled, the others in flight or spare. Eight hold
/// 10 ms of a worker's lines at 50,000 JSON lines of 600 bytes a second.
const BUFFERS_PER_WORKER: usize = 8;

/// Why a log format string was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("unknown directive %{0} in access log format")]
    Unknown(String),
    #[error("unterminated %{{...}} in access log format")]
    Unterminated,
    #[error(
        "`json_fields`: unknown field `{0}` (known: {known})",
        known = JSON_FIELDS.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    )]
    UnknownField(String),
}

/// A compiled log format.
#[derive(Debug, Clone)]
pub struct Format {
    steps: Vec<Step>,
    style: Style,
}

/// What a JSON field writes.
type FieldItem = fn() -> Item;

/// The fields of a JSON line, by name, in the order of the default set.
const JSON_FIELDS: [(&str, FieldItem); 28] = [
    ("time", || Item::TimeIso),
    ("client", || Item::ClientIp),
    ("host", || Item::Host),
    ("route", || Item::Route),
    ("method", || Item::Method),
    ("uri", || Item::Target),
    ("protocol", || Item::Protocol),
    ("status", || Item::Status),
    ("bytes_sent", || Item::BytesSent),
    ("body_bytes_sent", || Item::Bytes),
    ("duration", || Item::Duration),
    ("request_id", || Item::RequestId),
    ("traceparent", || Item::TraceParent),
    ("referer", || Item::RequestHeader("Referer".into())),
    ("user_agent", || Item::RequestHeader("User-Agent".into())),
    ("tls_version", || Item::TlsVersion),
    ("tls_cipher", || Item::TlsCipher),
    ("tls_sni", || Item::TlsSni),
    ("bytes_received", || Item::BytesReceived),
    ("upstream_addr", || Item::Noted(noted::Field::Addr)),
    ("upstream_status", || Item::Noted(noted::Field::Status)),
    ("upstream_connect_time", || {
        Item::Noted(noted::Field::ConnectTime)
    }),
    ("upstream_header_time", || {
        Item::Noted(noted::Field::HeaderTime)
    }),
    ("upstream_response_time", || {
        Item::Noted(noted::Field::ResponseTime)
    }),
    ("cache", || Item::Noted(noted::Field::Cache)),
    ("esi_fragments", || Item::Noted(noted::Field::EsiFragments)),
    ("esi_failed", || Item::Noted(noted::Field::EsiFailed)),
    ("upstream_not_retried", || {
        Item::Noted(noted::Field::NotRetried)
    }),
];

/// `json_fields` when it is not set: every field built but the TLS ones.
pub const DEFAULT_JSON_FIELDS: [&str; 14] = [
    "time",
    "client",
    "host",
    "route",
    "method",
    "uri",
    "protocol",
    "status",
    "bytes_sent",
    "body_bytes_sent",
    "duration",
    "request_id",
    "referer",
    "user_agent",
];

pub const COMBINED: &str = r#"%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i""#;
pub const COMMON: &str = r#"%h %l %u %t "%r" %>s %b"#;

impl Format {
    /// JSON lines of these fields (`json_fields`), one object per line.
    pub fn json(fields: &[String]) -> Result<Format, FormatError> {
        let mut items = Vec::new();
        for (i, name) in fields.iter().enumerate() {
            let Some((_, item)) = JSON_FIELDS.iter().find(|(n, _)| n == name) else {
                return Err(FormatError::UnknownField(name.clone()));
            };
            let open = if i == 0 { "{" } else { "," };
            items.push(Item::Literal(format!("{open}\"{name}\":").into_bytes()));
            items.push(item());
        }
        items.push(Item::Literal(match fields.is_empty() {
            true => b"{}".to_vec(),
            false => b"}".to_vec(),
        }));
        Ok(Format {
            steps: steps(items),
            style: Style::Json,
        })
    }

    /// Whether a line has the request's id.
    pub fn uses_request_id(&self) -> bool {
        self.items().any(|i| *i == Item::RequestId)
    }

    /// Whether a line has what a handler notes (upstream attempts, the cache's result).
    pub fn uses_notes(&self) -> bool {
        self.items()
            .any(|i| matches!(i, Item::Noted(_) | Item::Var(_)))
    }

    fn items(&self) -> impl Iterator<Item = &Item> {
        self.steps.iter().map(|s| &s.item)
    }

    /// Compiles `combined`, `common`, or an Apache-style format string.
    pub fn parse(spec: &str) -> Result<Format, FormatError> {
        let spec = match spec {
            "combined" => COMBINED,
            "common" => COMMON,
            other => other,
        };
        let mut items = Vec::new();
        let mut literal = Vec::new();
        let bytes = spec.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'%' {
                literal.push(bytes[i]);
                i += 1;
                continue;
            }
            i += 1;
            let mut arg = None;
            if bytes.get(i) == Some(&b'{') {
                let end = spec[i..].find('}').ok_or(FormatError::Unterminated)? + i;
                arg = Some(spec[i + 1..end].to_string());
                i = end + 1;
            }
            if bytes.get(i) == Some(&b'>') {
                i += 1;
            }
            let Some(&directive) = bytes.get(i) else {
                return Err(FormatError::Unknown(String::new()));
            };
            i += 1;
            let item = match (directive, arg) {
                (b'%', None) => {
                    literal.push(b'%');
                    continue;
                }
                (b'h' | b'a', None) => Item::ClientIp,
                (b'l' | b'u', None) => Item::Dash,
                (b't', None) => Item::Time,
                (b'r', None) => Item::RequestLine,
                (b'm', None) => Item::Method,
                (b'U', None) => Item::Path,
                (b'q', None) => Item::Query,
                (b'H', None) => Item::Protocol,
                (b'x', Some(name)) if name == "protocol" => Item::Protocol,
                (b'O', None) => Item::BytesSent,
                (b'I', None) => Item::BytesReceived,
                (b's', None) => Item::Status,
                (b'b', None) => Item::BytesClf,
                (b'B', None) => Item::Bytes,
                (b'D', None) => Item::Micros,
                (b'T', None) => Item::Seconds,
                (b'i', Some(name)) => Item::RequestHeader(name),
                (b'o', Some(name)) => Item::ResponseHeader(name),
                (b'x', Some(name)) if name == "tls_version" => Item::TlsVersion,
                (b'x', Some(name)) if name == "tls_cipher" => Item::TlsCipher,
                (b'x', Some(name)) if name == "tls_sni" => Item::TlsSni,
                (b'x', Some(name)) if name == "request_id" => Item::RequestId,
                (b'x', Some(name)) if name == "route" => Item::Route,
                (b'x', Some(name)) if name == "traceparent" => Item::TraceParent,
                (b'x', Some(name)) if noted::Field::named(&name).is_some() => {
                    Item::Noted(noted::Field::named(&name).unwrap_or(noted::Field::Cache))
                }
                (b'v', None) => Item::Host,
                (b'x', Some(name)) if name == "peer" => Item::PeerIp,
                (b'x', Some(name)) if name.len() > 4 && name.starts_with("var_") => {
                    Item::Var(name[4..].into())
                }
                (b'a', Some(name)) if name == "c" => Item::PeerIp,
                (b'x', Some(name)) if tlv_type(&name).is_some() => {
                    Item::ProxyTlv(tlv_type(&name).unwrap_or_default())
                }
                (d, arg) => {
                    return Err(FormatError::Unknown(match arg {
                        Some(a) => format!("{{{a}}}{}", d as char),
                        None => (d as char).to_string(),
                    }))
                }
            };
            if !literal.is_empty() {
                items.push(Item::Literal(std::mem::take(&mut literal)));
            }
            items.push(item);
        }
        if !literal.is_empty() {
            items.push(Item::Literal(literal));
        }
        Ok(Format {
            steps: steps(items),
            style: Style::Text,
        })
    }
}

/// What a log line needs to know about one response.
pub(crate) struct Entry<'a> {
    /// The TLS connection's facts; `None` in cleartext.
    pub tls: Option<&'a crate::facts::TlsFacts>,
    /// The request's client (`%a`, `%h`).
    pub client: SocketAddr,
    /// The socket's peer (`%{peer}x`).
    pub peer: SocketAddr,
    /// The connection's PROXY v2 TLVs, raw (`%{proxy_tlv_0xNN}x`).
    pub proxy_tlvs: &'a [u8],
    /// `None` when the request could not be parsed.
    pub request: Option<&'a Request<'a, 'a>>,
    /// For a request that could not be parsed: its first line as received, if any.
    pub raw_line: &'a [u8],
    pub status: u16,
    /// The response head as sent (for `%{X}o`).
    pub head: &'a [u8],
    pub body_bytes: u64,
    pub micros: u64,
    /// When the line is written: the end of the last upstream attempt's time.
    pub now: std::time::Instant,
    /// The request's id, when its site uses one (`%{request_id}x`).
    pub request_id: Option<u128>,
    /// The host that served it (`%v`).
    pub host: Option<&'a [u8]>,
    /// Its trace context, with `[tracing]` (`%{traceparent}x`).
    pub trace: Option<trace::Context>,
    /// The routing rule that chose its handling (`%{route}x`).
    pub route: Option<&'a str>,
    /// The second it is logged at in ISO 8601 (`time` in JSON), formatted once a second
    /// by the worker's clock.
    pub iso_time: [u8; 20],
    /// What the handler noted, when the log writes it.
    pub notes: Option<std::cell::Ref<'a, handler::Noted>>,
}

impl Format {
    pub(crate) fn write(&self, line: &mut Vec<u8>, entry: &Entry<'_>, time: &[u8]) {
        let request = entry.request;
        let style = self.style;
        for Step { prefix, len, item } in &self.steps {
            let end = line.len() + usize::from(*len);
            line.extend_from_slice(prefix);
            line.truncate(end);
            match item {
                Item::Nothing => {}
                Item::Literal(bytes) => line.extend_from_slice(bytes),
                Item::ClientIp if style == Style::Json => {
                    line.push(b'"');
                    write_ip(line, entry.client.ip());
                    line.push(b'"');
                }
                Item::ClientIp => write_ip(line, entry.client.ip()),
                Item::PeerIp => write_ip(line, entry.peer.ip()),
                Item::ProxyTlv(kind) => match wire::Tlvs(entry.proxy_tlvs).find(|t| t.0 == *kind) {
                    Some((_, value)) => style.string(line, value),
                    None => style.none(line),
                },
                Item::Dash => line.push(b'-'),
                Item::Time => line.extend_from_slice(time),
                Item::TimeIso => style.plain(line, &entry.iso_time),
                Item::RequestLine => match request {
                    Some(r) => {
                        escape(line, r.method_token.as_bytes());
                        line.push(b' ');
                        escape(line, r.target);
                        line.push(b' ');
                        line.extend_from_slice(protocol(r.version));
                    }
                    None if !entry.raw_line.is_empty() => escape(line, entry.raw_line),
                    None => line.push(b'-'),
                },
                // A method the server knows is a token: nothing in it to escape. Another
                // may be one an HTTP/2 request was refused for.
                Item::Method => match request {
                    Some(r) if r.method != wire::Method::Other => {
                        style.plain(line, r.method_token.as_bytes())
                    }
                    Some(r) => style.string(line, r.method_token.as_bytes()),
                    None => style.none(line),
                },
                Item::Path => match request {
                    Some(r) => style.string(line, split_query(r.path).0),
                    None => style.none(line),
                },
                Item::Target => match request {
                    Some(r) => style.string(line, r.path),
                    None => style.none(line),
                },
                Item::Query => {
                    if let Some(query) = request.and_then(|r| split_query(r.path).1) {
                        line.push(b'?');
                        escape(line, query);
                    }
                }
                Item::Protocol => match request {
                    Some(r) => style.plain(line, protocol(r.version)),
                    None => style.none(line),
                },
                Item::Status => number(line, entry.status.into()),
                Item::BytesClf if entry.body_bytes == 0 => line.push(b'-'),
                Item::BytesClf | Item::Bytes => number(line, entry.body_bytes),
                Item::BytesSent => number(line, entry.head.len() as u64 + entry.body_bytes),
                Item::BytesReceived => number(line, received(request, entry.raw_line)),
                Item::Micros => number(line, entry.micros),
                Item::Seconds => number(line, entry.micros / 1_000_000),
                Item::Duration => {
                    number(line, entry.micros / 1_000_000);
                    line.push(b'.');
                    style::digits::<6>(line, entry.micros % 1_000_000);
                }
                Item::RequestHeader(name) => match request.and_then(|r| r.header(name)) {
                    Some(value) => style.string(line, value),
                    None => style.none(line),
                },
                Item::TlsVersion => match entry.tls {
                    Some(t) => style.plain(line, t.version.as_bytes()),
                    None => style.none(line),
                },
                Item::TlsCipher => match entry.tls {
                    Some(t) => style.plain(line, t.cipher.as_bytes()),
                    None => style.none(line),
                },
                Item::TlsSni => match entry.tls.and_then(|t| t.sni.as_deref()) {
                    Some(name) => style.string(line, name.as_bytes()),
                    None => style.none(line),
                },
                Item::RequestId => match entry.request_id {
                    Some(id) => style.plain(line, &crate::facts::request_id_hex(id)),
                    None => style.none(line),
                },
                Item::TraceParent => match entry.trace {
                    Some(t) => style.plain(line, &t.traceparent()),
                    None => style.none(line),
                },
                Item::Host => match entry.host {
                    Some(host) => style.string(line, host),
                    None => style.none(line),
                },
                Item::Route => match entry.route {
                    Some(route) => style.string(line, route.as_bytes()),
                    None => style.none(line),
                },
                Item::Noted(field) => {
                    noted::write(line, style, *field, (entry.notes.as_deref(), entry.now))
                }
                Item::Var(name) => {
                    let notes = entry.notes.as_deref();
                    match notes.and_then(|n| n.vars.iter().find(|(v, _)| v == name)) {
                        Some((_, value)) => style.string(line, value),
                        None => style.none(line),
                    }
                }
                Item::ResponseHeader(name) => match response_header(entry.head, name) {
                    Some(value) => style.string(line, value),
                    None => style.none(line),
                },
            }
        }
        line.push(b'\n');
    }
}

/// `%I`: the request's head as received (an HTTP/2 head, which comes as fields, counts
/// as the same head in HTTP/1 lines, as `%O` counts responses) and its body's declared
/// length; for a request refused before it parsed, its first line as received.
fn received(request: Option<&Request<'_, '_>>, raw_line: &[u8]) -> u64 {
    let Some(r) = request else {
        return raw_line.len() as u64;
    };
    let head = match r.version {
        wire::Version::Http2 | wire::Version::Http3 => {
            let line = r.method_token.len() + 1 + r.target.len() + b" HTTP/2.0\r\n".len();
            let fields: usize = r
                .headers
                .iter()
                .map(|h| h.name.len() + 4 + h.value.len())
                .sum();
            (line + fields + 2) as u64
        }
        _ => r.head_len as u64,
    };
    let body = match r.body {
        wire::BodyFraming::Length(n) => n,
        _ => 0,
    };
    head + body
}

fn protocol(version: wire::Version) -> &'static [u8] {
    match version {
        wire::Version::Http10 => b"HTTP/1.0",
        wire::Version::Http11 => b"HTTP/1.1",
        wire::Version::Http2 => b"HTTP/2.0",
        wire::Version::Http3 => b"HTTP/3.0",
    }
}

fn split_query(path: &[u8]) -> (&[u8], Option<&[u8]>) {
    match memchr::memchr(b'?', path) {
        Some(q) => (&path[..q], Some(&path[q + 1..])),
        None => (path, None),
    }
}

fn response_header<'h>(head: &'h [u8], name: &str) -> Option<&'h [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = memchr::memchr(b':', line)?;
        if line[..colon].eq_ignore_ascii_case(name.as_bytes()) {
            let value = &line[colon + 1..];
            let start = value.iter().position(|&b| b != b' ').unwrap_or(value.len());
            Some(&value[start..])
        } else {
            None
        }
    })
}

/// The type of `proxy_tlv_0xNN` (two hex digits, either case).
fn tlv_type(name: &str) -> Option<u8> {
    let hex = name
        .strip_prefix("proxy_tlv_0x")
        .or_else(|| name.strip_prefix("proxy_tlv_0X"))?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The client address without the formatting machinery for the common IPv4 case.
fn write_ip(line: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    line.push(b'.');
                }
                number(line, octet.into());
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(line, "{v6}");
        }
    }
}

/// A worker's end: the buffer being filled and the way to the writer.
pub(crate) struct WorkerLog {
    pub format: Format,
    current: Vec<u8>,
    /// Lines in `current`, to count drops in lines.
    lines: u64,
    /// Full buffers and their line counts.
    to_writer: SyncSender<(Vec<u8>, u64)>,
    /// Empty buffers the writer gives back.
    spare: Receiver<Vec<u8>>,
    /// Those taken from `spare`, the last given back on top: filled next, so that the
    /// worker and the writer go through two or three buffers that stay in the core's
    /// cache rather than through all of them in turn.
    spares: Vec<Vec<u8>>,
    writer: Writer,
    shared: Arc<Shared>,
}

/// How a worker wakes its log's writer thread.
#[derive(Clone)]
struct Writer {
    /// Buffers handed to it and not written yet, by every worker.
    waiting: Arc<AtomicUsize>,
    thread: std::thread::Thread,
    /// Woken at once when this many buffers wait: half of every worker's.
    wake_at: usize,
}

impl WorkerLog {
    /// Appends one line.
    pub fn record(&mut self, entry: &Entry<'_>, time: &[u8]) {
        self.format.write(&mut self.current, entry, time);
        self.lines += 1;
        if self.current.len() >= BUFFER_SIZE - 4096 {
            self.hand_off();
        }
    }

    /// Hands the current buffer to the writer if an empty one is available to carry on
    /// with; otherwise drops its lines (counted). Called when full and once a second.
    pub fn hand_off(&mut self) {
        if self.current.is_empty() {
            return;
        }
        self.spares.extend(self.spare.try_iter());
        match self.spares.pop() {
            Some(empty) => {
                let full = std::mem::replace(&mut self.current, empty);
                let lines = std::mem::take(&mut self.lines);
                // Never fails while the writer runs: the channel has room for every
                // buffer there is.
                let writer = &self.writer;
                let waiting = writer.waiting.fetch_add(1, Ordering::Relaxed) + 1;
                if self.to_writer.try_send((full, lines)).is_err() {
                    writer.waiting.fetch_sub(1, Ordering::Relaxed);
                    self.shared.dropped.fetch_add(lines, Ordering::Relaxed);
                } else if waiting >= writer.wake_at {
                    writer.thread.unpark();
                }
            }
            None => {
                self.writer.thread.unpark();
                self.shared.dropped.fetch_add(self.lines, Ordering::Relaxed);
                self.current.clear();
                self.lines = 0;
            }
        }
    }

    /// At shutdown: wait for a spare buffer if need be, so nothing is lost.
    pub fn flush_blocking(&mut self) {
        if self.current.is_empty() {
            return;
        }
        let full = std::mem::take(&mut self.current);
        self.writer.waiting.fetch_add(1, Ordering::Relaxed);
        let _ = self.to_writer.send((full, std::mem::take(&mut self.lines)));
        self.writer.thread.unpark();
    }
}

/// Opens the log and starts its writer thread; returns one [`WorkerLog`] per worker.
/// A worker's access logs: one per distinct file, and which one each site writes to.
pub(crate) struct WorkerLogs {
    logs: Vec<WorkerLog>,
    /// Per site (`handler::Hosts`), the index of its log, if it has one.
    by_site: Arc<[Option<usize>]>,
}

impl WorkerLogs {
    pub fn new(logs: Vec<WorkerLog>, by_site: Arc<[Option<usize>]>) -> WorkerLogs {
        WorkerLogs { logs, by_site }
    }

    /// The log of `site`, if it has one.
    pub fn of_site(&mut self, site: usize) -> Option<&mut WorkerLog> {
        let i = (*self.by_site.get(site)?)?;
        self.logs.get_mut(i)
    }

    /// Hands every log's buffered lines to its writer.
    pub fn hand_off(&mut self) {
        self.logs.iter_mut().for_each(WorkerLog::hand_off);
    }

    /// Flushes every log (at shutdown).
    pub fn flush_blocking(&mut self) {
        self.logs.iter_mut().for_each(WorkerLog::flush_blocking);
    }
}

pub(crate) fn start(
    path: &Path,
    format: &Format,
    workers: usize,
    shared: Arc<Shared>,
) -> io::Result<(Vec<WorkerLog>, std::thread::JoinHandle<()>)> {
    let file = open(path)?;
    let (to_writer, from_workers) =
        std::sync::mpsc::sync_channel::<(Vec<u8>, u64)>(workers * BUFFERS_PER_WORKER);
    let mut spares = Vec::new();
    let mut returns = Vec::new();
    for _ in 0..workers {
        let (give, spare) = std::sync::mpsc::sync_channel(BUFFERS_PER_WORKER);
        for _ in 1..BUFFERS_PER_WORKER {
            let _ = give.try_send(Vec::with_capacity(BUFFER_SIZE));
        }
        returns.push(give);
        spares.push(spare);
    }
    let waiting = Arc::new(AtomicUsize::new(0));
    let path = path.to_owned();
    let thread = {
        let (waiting, shared) = (waiting.clone(), shared.clone());
        std::thread::Builder::new()
            .name("tessera-access-log".into())
            .spawn(move || writer(file, path, (from_workers, &waiting), returns, shared))?
    };
    let writer = Writer {
        waiting,
        thread: thread.thread().clone(),
        wake_at: (workers * BUFFERS_PER_WORKER / 2).max(1),
    };
    let logs = spares
        .into_iter()
        .map(|spare| WorkerLog {
            format: format.clone(),
            current: Vec::with_capacity(BUFFER_SIZE),
            lines: 0,
            to_writer: to_writer.clone(),
            spare,
            spares: Vec::with_capacity(BUFFERS_PER_WORKER),
            writer: writer.clone(),
            shared: shared.clone(),
        })
        .collect();
    Ok((logs, thread))
}

#[cfg(test)]
mod tests {
    use super::style::json_escape;
    use super::*;

    #[test]
    fn escapes_like_apache() {
        let mut line = Vec::new();
        escape(&mut line, b"a\"b\\c\x01\xff d");
        assert_eq!(line, b"a\\\"b\\\\c\\x01\\xff d");
    }

    #[test]
    fn parses_formats_and_refuses_unknown_directives() {
        assert_eq!(
            Format::parse("combined").unwrap().steps,
            Format::parse(COMBINED).unwrap().steps
        );
        assert!(matches!(Format::parse("%h %Z"), Err(FormatError::Unknown(d)) if d == "Z"));
        assert!(matches!(
            Format::parse("%{Referer"),
            Err(FormatError::Unterminated)
        ));
        let f = Format::parse("100%% %D %{X-A}o").unwrap();
        assert_eq!(&f.steps[0].prefix[..5], b"100% ");
        assert_eq!(f.steps[0].item, Item::Micros);
        assert_eq!(f.steps[1].item, Item::ResponseHeader("X-A".into()));
        assert_eq!(f.steps.len(), 2);
        let json = Format::json(&["status".to_string()]).unwrap();
        assert_eq!(&json.steps[0].prefix[..10], b"{\"status\":");
        assert_eq!(
            (json.steps[1].len, &json.steps[1].item),
            (1, &Item::Nothing)
        );
        let long = "%h a literal longer than thirty-two bytes %s";
        let f = Format::parse(long).unwrap();
        let items: Vec<&Item> = f.items().collect();
        assert!(matches!(
            items[..],
            [Item::ClientIp, Item::Literal(_), Item::Status]
        ));
    }

    #[test]
    fn escapes_json_strings_and_invalid_utf8() {
        let mut line = Vec::new();
        json_escape(&mut line, "a\"b\\c\n\u{1}é\u{7f}".as_bytes());
        assert_eq!(line, "a\\\"b\\\\c\\n\\u0001é\u{7f}".as_bytes());
        line.clear();
        json_escape(&mut line, b"x\xff\xc3y");
        assert_eq!(line, b"x\\ufffd\\ufffdy");
    }

    #[test]
    fn json_fields_are_known_or_refused_by_name() {
        let fields = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(Format::json(&fields(&DEFAULT_JSON_FIELDS)).is_ok());
        assert!(Format::json(&fields(&["status", "traceparent"])).is_ok());
        assert!(Format::json(&fields(&["upstream_addr", "cache"])).is_ok_and(|f| f.uses_notes()));
        assert!(matches!(
            Format::json(&fields(&["stauts"])),
            Err(FormatError::UnknownField(f)) if f == "stauts"
        ));
    }

    #[test]
    fn finds_response_headers() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"x\"\r\n\r\n";
        assert_eq!(response_header(head, "etag"), Some(&b"\"x\""[..]));
        assert_eq!(response_header(head, "missing"), None);
    }
}
