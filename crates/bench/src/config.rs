//! What to load and how: the benchmark configuration and the requests it sends,
//! serialized once before the run.

use crate::h2;
use crate::tls::Tls;
use crate::wire::Wire;
use crate::Error;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One kind of request in the mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    pub method: String,
    pub url: String,
    pub body: Option<Vec<u8>>,
    /// Relative share in the mix. Default 1.
    pub weight: u32,
}

impl RequestSpec {
    pub fn get(url: &str) -> Self {
        RequestSpec {
            method: "GET".into(),
            url: url.into(),
            body: None,
            weight: 1,
        }
    }
}

/// A benchmark run. Every field has a default (see [`Config::new`]).
#[derive(Debug, Clone)]
pub struct Config {
    /// Requests to send, in a weighted mix. All must share one scheme, host and port,
    /// or with [`connect_to`](Config::connect_to) one scheme.
    pub requests: Vec<RequestSpec>,
    /// Extra headers for every request. A `Host` here replaces the one from the URL.
    pub headers: Vec<(String, String)>,
    /// Connect to this unix socket instead of the URL's host and port.
    pub unix_socket: Option<PathBuf>,
    /// Connect to this `HOST[:PORT]` instead of the URLs' (h2load's `--connect-to`);
    /// the URLs may then name different hosts, each request's `Host` (and, over TLS,
    /// the server name its connection sends) being its URL's. Default none.
    pub connect_to: Option<String>,
    /// Connections in total, spread over the threads. Default 50.
    pub connections: usize,
    /// Worker threads, each one event loop. Default: the number of cores available.
    pub threads: usize,
    /// Stop after this many requests. Default none.
    pub requests_total: Option<u64>,
    /// Stop after this long. Default 10 s when no request count is given.
    pub duration: Option<Duration>,
    /// Open model: hold this many requests per second. Default none (closed model).
    pub rate: Option<f64>,
    /// Reuse connections. Default true; false opens one connection per request.
    pub keepalive: bool,
    /// Requests in flight per connection (closed model). Default 1.
    pub pipeline: usize,
    /// Open at most this many connections per second at the start. Default: all at once.
    pub ramp: Option<f64>,
    /// A request (or connect) without an answer after this long fails as a timeout. Default 10 s.
    pub timeout: Duration,
    /// Refuse targets that are not loopback addresses. Default false.
    pub loopback_only: bool,
    /// Speak HTTP/2: over TLS (ALPN `h2`) for `https://`, with prior knowledge for
    /// `http://`. Default false.
    pub http2: bool,
    /// HTTP/2: streams in flight per connection (closed model), or at most that many
    /// (open model). Default 1.
    pub streams: usize,
    /// `https://`: trust this CA file's certificates instead of the system's.
    pub ca: Option<PathBuf>,
    /// `https://`: take any certificate. Default false.
    pub insecure: bool,
    /// Speak HTTP/3 over QUIC (`https://` only). Default false.
    pub http3: bool,
}

impl Config {
    pub fn new(requests: Vec<RequestSpec>) -> Self {
        Config {
            requests,
            headers: Vec::new(),
            unix_socket: None,
            connect_to: None,
            connections: 50,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            requests_total: None,
            duration: None,
            rate: None,
            keepalive: true,
            pipeline: 1,
            ramp: None,
            timeout: Duration::from_secs(10),
            loopback_only: false,
            http2: false,
            streams: 1,
            ca: None,
            insecure: false,
            http3: false,
        }
    }

    /// The duration that applies: the configured one, or 10 s if neither a
    /// duration nor a request count bounds the run.
    pub fn effective_duration(&self) -> Option<Duration> {
        match (self.duration, self.requests_total) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        }
    }

    /// Threads actually used: never more than connections.
    pub fn effective_threads(&self) -> usize {
        self.threads.clamp(1, self.connections.max(1))
    }
}

/// Where connections go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "{a}"),
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// `host[:port]` as written, for the Host header.
    pub authority: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, Error> {
        let bad = |reason| Error::Url {
            url: s.to_string(),
            reason,
        };
        let (https, rest) = if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(bad("expected http://host[:port]/path or https://..."));
        };
        let default_port = if https { 443 } else { 80 };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if authority.is_empty() {
            return Err(bad("missing host"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| bad("unterminated [ in host"))?;
            let host = &v6[..end];
            let port = match &v6[end + 1..] {
                "" => default_port,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| bad("invalid port"))?,
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad("invalid port"))?),
                None => (authority.to_string(), default_port),
            }
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad("spaces or control characters in path"));
        }
        Ok(Url {
            https,
            host,
            port,
            path,
            authority: authority.to_string(),
        })
    }
}

/// Reads a request file: one request per line, `[weight] [METHOD] URL [@body-file]`.
/// A URL may be a path (`/x`), which is then taken relative to `base`.
/// Blank lines and lines starting with `#` are skipped. Body files are read
/// relative to the request file's directory.
pub fn read_request_file(path: &Path, base: Option<&str>) -> Result<Vec<RequestSpec>, Error> {
    let text = std::fs::read_to_string(path).map_err(|cause| Error::ReadFile {
        path: path.to_path_buf(),
        cause,
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |reason: String| Error::RequestFile {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words: Vec<&str> = line.split_whitespace().collect();
        let mut weight = 1;
        if let Ok(w) = words[0].parse::<u32>() {
            if w == 0 || w > 1000 {
                return Err(err("weight must be 1..=1000".into()));
            }
            weight = w;
            words.remove(0);
        }
        let mut body = None;
        if let Some(last) = words.last() {
            if let Some(file) = last.strip_prefix('@') {
                let p = dir.join(file);
                body = Some(std::fs::read(&p).map_err(|cause| Error::ReadFile {
                    path: p.clone(),
                    cause,
                })?);
                words.pop();
            }
        }
        let (method, url) = match words.as_slice() {
            [url] => ("GET", *url),
            [method, url] => (*method, *url),
            _ => return Err(err("expected [weight] [METHOD] URL [@body-file]".into())),
        };
        if !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(err(format!("invalid method {method:?}")));
        }
        let url = if url.starts_with('/') {
            let base =
                base.ok_or_else(|| err("a path needs a base URL on the command line".into()))?;
            let b = Url::parse(base)?;
            let scheme = if b.https { "https" } else { "http" };
            format!("{scheme}://{}{}", b.authority, url)
        } else {
            url.to_string()
        };
        out.push(RequestSpec {
            method: method.to_string(),
            url,
            body,
            weight,
        });
    }
    if out.is_empty() {
        return Err(Error::RequestFile {
            path: path.to_path_buf(),
            line: 0,
            reason: "no requests".into(),
        });
    }
    Ok(out)
}

/// The config turned into what the engine needs.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub address: Address,
    pub wires: Vec<Wire>,
    /// Indices into `wires`, repeated by weight; connections cycle through it.
    pub mix: Vec<u16>,
    pub connections: usize,
    pub threads: usize,
    pub requests_total: Option<u64>,
    pub duration: Option<Duration>,
    pub rate: Option<f64>,
    pub keepalive: bool,
    pub pipeline: usize,
    pub ramp: Option<f64>,
    pub timeout: Duration,
    /// `https://`: the TLS every connection speaks.
    pub tls: Option<Tls>,
    pub http2: bool,
    pub http3: bool,
    /// The requests as given, for the HTTP/3 engine, which builds them its own way.
    pub specs: Vec<Spec>,
    pub headers: Vec<(String, String)>,
}

/// A request of the mix, parsed.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub method: String,
    pub url: Url,
    pub body: Option<Vec<u8>>,
}

impl Plan {
    pub fn new(cfg: &Config) -> Result<Plan, Error> {
        let invalid = |option, reason: &str| Error::InvalidOption {
            option,
            reason: reason.to_string(),
        };
        if cfg.requests.is_empty() {
            return Err(invalid("url", "at least one URL is required"));
        }
        if cfg.connections == 0 {
            return Err(invalid("connections", "must be at least 1"));
        }
        if cfg.pipeline == 0 || cfg.pipeline > 1024 {
            return Err(invalid("pipeline", "must be 1..=1024"));
        }
        if cfg.pipeline > 1 && !cfg.keepalive {
            return Err(invalid("pipeline", "needs keep-alive connections"));
        }
        if cfg.http2 && cfg.pipeline > 1 {
            return Err(invalid(
                "pipeline",
                "HTTP/2 has streams, not pipelining: use --streams",
            ));
        }
        if cfg.streams == 0 || cfg.streams > 1024 {
            return Err(invalid("streams", "must be 1..=1024"));
        }
        if cfg.http2 && cfg.http3 {
            return Err(invalid("http3", "--http2 or --http3, not both"));
        }
        if cfg.http3 && cfg.pipeline > 1 {
            return Err(invalid(
                "pipeline",
                "HTTP/3 has streams, not pipelining: use --streams",
            ));
        }
        if cfg.http3 && cfg.unix_socket.is_some() {
            return Err(invalid(
                "http3",
                "HTTP/3 runs over UDP: not with --unix-socket",
            ));
        }
        if cfg.streams > 1 && !(cfg.http2 || cfg.http3) {
            return Err(invalid("streams", "needs --http2 or --http3"));
        }
        if cfg.streams > 1 && !cfg.keepalive {
            return Err(invalid("streams", "needs keep-alive connections"));
        }
        if cfg.pipeline > 1 && cfg.rate.is_some() {
            return Err(invalid(
                "pipeline",
                "the open model (--rate) sends one request at a time per connection",
            ));
        }
        if let Some(r) = cfg.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(invalid("rate", "must be a positive number"));
            }
        }
        if let Some(r) = cfg.ramp {
            if !(r.is_finite() && r > 0.0) {
                return Err(invalid("ramp", "must be a positive number"));
            }
        }
        if cfg.requests_total == Some(0) {
            return Err(invalid("requests", "must be at least 1"));
        }
        if cfg.duration.is_some_and(|d| d.is_zero()) {
            return Err(invalid("duration", "must be positive"));
        }
        if cfg.timeout.is_zero() {
            return Err(invalid("timeout", "must be positive"));
        }
        let urls = cfg
            .requests
            .iter()
            .map(|r| Url::parse(&r.url))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &urls[0];
        if cfg.connect_to.is_some() {
            if urls.iter().any(|u| u.https != first.https) {
                return Err(invalid(
                    "url",
                    "all URLs of one run must share their scheme",
                ));
            }
            if cfg.unix_socket.is_some() {
                return Err(invalid(
                    "connect-to",
                    "--connect-to or --unix-socket, not both",
                ));
            }
        } else if urls
            .iter()
            .any(|u| u.host != first.host || u.port != first.port || u.https != first.https)
        {
            return Err(invalid(
                "url",
                "all URLs of one run must share scheme, host and port (use --connect-to for \
                 several names on one server, --compare for two servers)",
            ));
        }
        if cfg.http3 && urls.iter().any(|u| u.host != first.host) {
            return Err(invalid("http3", "HTTP/3 runs take one host name"));
        }
        if first.https && cfg.keepalive && urls.iter().any(|u| u.host != first.host) {
            // A kept connection would carry requests for names other than the one it
            // sent in SNI, which a server answers with 421 (Misdirected Request).
            return Err(invalid(
                "connect-to",
                "https:// URLs of several host names need --no-keepalive (a connection per request, each sending its URL's name)",
            ));
        }
        if !first.https && (cfg.insecure || cfg.ca.is_some()) {
            return Err(invalid("ca", "--ca and --insecure are for https:// URLs"));
        }
        if cfg.http3 && !first.https {
            return Err(invalid("http3", "HTTP/3 needs an https:// URL"));
        }
        let alpn: &[u8] = match (cfg.http2, cfg.http3) {
            (_, true) => b"h3",
            (true, _) => b"h2",
            _ => b"http/1.1",
        };
        let tls = match first.https {
            true => Some(Tls::new(
                &urls.iter().map(|u| u.host.as_str()).collect::<Vec<_>>(),
                cfg.ca.as_deref(),
                cfg.insecure,
                alpn,
            )?),
            false => None,
        };
        let address = match &cfg.unix_socket {
            Some(p) => Address::Unix(p.clone()),
            None => {
                let (host, port) = match &cfg.connect_to {
                    Some(to) => connect_to(to, first.port)?,
                    None => (first.host.clone(), first.port),
                };
                let addr = (host.trim_start_matches('[').trim_end_matches(']'), port)
                    .to_socket_addrs()
                    .map_err(|cause| Error::Resolve {
                        host: host.clone(),
                        cause,
                    })?
                    .next()
                    .ok_or_else(|| Error::Resolve {
                        host: host.clone(),
                        cause: std::io::Error::other("no addresses"),
                    })?;
                if cfg.loopback_only && !addr.ip().is_loopback() {
                    return Err(Error::NotLoopback(addr.to_string()));
                }
                Address::Tcp(addr)
            }
        };
        let mut wires = Vec::new();
        let mut mix = Vec::new();
        for (i, (spec, url)) in cfg.requests.iter().zip(&urls).enumerate() {
            let bytes = serialize(spec, url, &cfg.headers, cfg.keepalive)?;
            let head = spec.method.eq_ignore_ascii_case("HEAD");
            wires.push(match cfg.http2 {
                false => Wire {
                    bytes,
                    head,
                    fields: Vec::new(),
                    body: None,
                },
                true => Wire {
                    bytes: Vec::new(),
                    fields: h2::head_fields(
                        &spec.method.to_ascii_uppercase(),
                        url.https,
                        &url.authority,
                        &url.path,
                        &cfg.headers,
                        spec.body.as_ref().map(Vec::len),
                    ),
                    head,
                    body: spec.body.clone(),
                },
            });
            mix.extend(std::iter::repeat_n(i as u16, spec.weight.max(1) as usize));
        }
        if wires.len() > u16::MAX as usize {
            return Err(invalid("requests", "at most 65535 distinct requests"));
        }
        Ok(Plan {
            address,
            wires,
            mix,
            connections: cfg.connections,
            threads: cfg.effective_threads(),
            requests_total: cfg.requests_total,
            duration: cfg.effective_duration(),
            rate: cfg.rate,
            keepalive: cfg.keepalive,
            // HTTP/2's streams in flight take the place of pipelined requests.
            pipeline: if cfg.http2 || cfg.http3 {
                cfg.streams
            } else {
                cfg.pipeline
            },
            ramp: cfg.ramp,
            timeout: cfg.timeout,
            tls,
            http2: cfg.http2,
            http3: cfg.http3,
            specs: cfg
                .requests
                .iter()
                .zip(urls)
                .map(|(r, url)| Spec {
                    method: r.method.to_ascii_uppercase(),
                    url,
                    body: r.body.clone(),
                })
                .collect(),
            headers: cfg.headers.clone(),
        })
    }
}

/// `--connect-to HOST[:PORT]` (an IPv6 address in brackets), the port defaulting to
/// the URLs'.
fn connect_to(to: &str, default_port: u16) -> Result<(String, u16), Error> {
    let bad = || Error::InvalidOption {
        option: "connect-to",
        reason: format!("{to:?} is not HOST[:PORT]"),
    };
    let (host, port) = match to.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            (h, p.parse::<u16>().map_err(|_| bad())?)
        }
        _ => (to, default_port),
    };
    if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

fn serialize(
    spec: &RequestSpec,
    url: &Url,
    headers: &[(String, String)],
    keepalive: bool,
) -> Result<Vec<u8>, Error> {
    let bad_header = |name: &str| Error::InvalidOption {
        option: "header",
        reason: format!("invalid header {name:?}"),
    };
    if spec.method.is_empty() || !spec.method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(Error::InvalidOption {
            option: "method",
            reason: format!("invalid method {:?}", spec.method),
        });
    }
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(spec.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(url.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !has("host") {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(url.authority.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !has("user-agent") {
        out.extend_from_slice(b"User-Agent: tessera-bench\r\n");
    }
    for (name, value) in headers {
        if name.is_empty()
            || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            || value.bytes().any(|b| b == b'\r' || b == b'\n')
        {
            return Err(bad_header(name));
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.trim().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !keepalive && !has("connection") {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    if let Some(body) = &spec.body {
        if !has("content-length") {
            out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = &spec.body {
        out.extend_from_slice(body);
    }
    Ok(out)
}

/// Parses durations like `10s`, `500ms`, `2m`, `150us` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = if split == 0 {
        return None;
    } else {
        s.split_at(split)
    };
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// Like [`parse_duration`] but a bare number means seconds.
pub fn parse_duration_or_secs(s: &str) -> Option<Duration> {
    match s.trim().parse::<f64>() {
        Ok(v) => Duration::try_from_secs_f64(v).ok(),
        Err(_) => parse_duration(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:8080/a?b=c").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/a?b=c")
        );
        let u = Url::parse("http://[::1]:81").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("::1", 81, "/"));
        let u = Url::parse("http://localhost?x").unwrap();
        assert_eq!(
            (u.port, u.path.as_str(), u.authority.as_str()),
            (80, "/?x", "localhost")
        );
        let u = Url::parse("https://x/").unwrap();
        assert_eq!((u.https, u.port), (true, 443));
        assert!(Url::parse("http://x:y/").is_err());
        assert!(Url::parse("ftp://x/").is_err());
    }

    #[test]
    fn parses_connect_to() {
        let parse = |to| connect_to(to, 8443).ok();
        assert_eq!(parse("127.0.0.1:81"), Some(("127.0.0.1".into(), 81)));
        assert_eq!(parse("localhost"), Some(("localhost".into(), 8443)));
        assert_eq!(parse("[::1]:82"), Some(("[::1]".into(), 82)));
        assert_eq!(parse("[::1]"), Some(("[::1]".into(), 8443)));
        for bad in ["::1", "host:port", ":80", ""] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn serializes_requests() {
        let mut spec = RequestSpec::get("http://h:1/p");
        spec.method = "POST".into();
        spec.body = Some(b"abc".to_vec());
        let url = Url::parse(&spec.url).unwrap();
        let w = serialize(&spec, &url, &[("X-A".into(), "1".into())], false).unwrap();
        assert_eq!(
            String::from_utf8(w).unwrap(),
            "POST /p HTTP/1.1\r\nHost: h:1\r\nUser-Agent: tessera-bench\r\nX-A: 1\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc"
        );
        assert!(serialize(&spec, &url, &[("Bad Name".into(), "1".into())], true).is_err());
        assert!(serialize(&spec, &url, &[("X".into(), "a\r\nb".into())], true).is_err());
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration_or_secs("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("x"), None);
    }

    #[test]
    fn reads_request_files() {
        let dir = std::env::temp_dir().join(format!("tessera-reqfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("body.json"), b"{}").unwrap();
        let f = dir.join("mix.txt");
        std::fs::write(&f, "# mix\n3 GET /a\n/b\n2 POST http://h:9/c @body.json\n").unwrap();
        let r = read_request_file(&f, Some("http://h:9/")).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].weight, r[0].url.as_str()), (3, "http://h:9/a"));
        assert_eq!((r[1].method.as_str(), r[1].weight), ("GET", 1));
        assert_eq!(r[2].body.as_deref(), Some(&b"{}"[..]));
        std::fs::write(&f, "1 2 3 4\n").unwrap();
        assert!(read_request_file(&f, None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
