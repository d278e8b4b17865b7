//! The server's configuration as `cli` reads it from TOML: every key with its default
//! (docs/config.md), the checks of values (`Config::problems`), and the kind of each
//! listening address. `[tls]` and `[http2]` are in their own modules.

pub(crate) mod acme;
pub(crate) mod http2;
pub(crate) mod http3;
mod kind;
pub(crate) mod tls;
pub(crate) mod tracing;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

pub(crate) use kind::Kind;

/// Everything `tessera serve` can be told, from the config file and the command line.
/// Every key is optional; docs/config.md lists them with their defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Addresses to listen on. Default is 127.0.0.1:8080: loopback only, so a first run
    /// never exposes a machine by accident.
    pub listen: Vec<SocketAddr>,
    /// Addresses to listen on with TLS (docs/tls.md). Default none. Needs a
    /// certificate: `[tls]`, or a `[[host]]`'s `[host.tls]`.
    pub tls_listen: Vec<SocketAddr>,
    /// Addresses that speak HTTP/2 with prior knowledge only (h2c, no HTTP/1.1), as
    /// nginx's `listen ... http2` without `ssl` before 1.25: for a load balancer or
    /// another proxy that talks h2c to its origins (docs/http2.md). Default none.
    pub h2c_listen: Vec<SocketAddr>,
    /// UDP addresses that speak HTTP/3 over QUIC, usually the `tls_listen` ones' (the
    /// same certificates; docs/http3.md). Default none.
    pub quic_listen: Vec<SocketAddr>,
    /// Listening addresses (of `listen`, `tls_listen` or `h2c_listen`) whose connections
    /// begin with a PROXY protocol header, v1 or v2 (docs/security.md, "Client
    /// identity"): HAProxy's `send-proxy`, an AWS NLB, nginx's `proxy_protocol on`. A
    /// connection without a valid header within `timeouts.proxy_protocol` is closed.
    /// Default none.
    pub proxy_protocol: Vec<SocketAddr>,
    /// Networks (`10.0.0.0/8`) or addresses of the proxies in front whose word on the
    /// client is believed: their PROXY header's source and, per `real_ip_from`, their
    /// `X-Forwarded-For` or `Forwarded`. Default none: the socket's peer is the client
    /// (a PROXY header on a `proxy_protocol` listener is then believed from any peer).
    pub trusted_proxies: Vec<String>,
    /// The field a trusted proxy names the client in: `x-forwarded-for`, `forwarded`
    /// (RFC 7239), or `proxy_protocol` (the PROXY header only). Default
    /// `x-forwarded-for` when `trusted_proxies` is set.
    pub real_ip_from: Option<crate::client::RealIpFrom>,
    /// Ordered `allow`/`deny` entries on the client's address for every request of the
    /// default host (a `[[host]]` without its own takes these; a route's own replace
    /// them), the first match deciding (docs/security.md, "Access rules"). Default none.
    pub access: Vec<rules::AccessRule>,
    /// The status a request `access` refuses gets. Default 403.
    pub deny_status: Option<u16>,
    /// `[tls]`: the default certificate and key (docs/tls.md).
    pub tls: tls::TlsConfig,
    /// `[acme]`: certificates from an ACME CA for the hosts without one (docs/tls.md,
    /// "Automatic certificates"). Default none.
    pub acme: Option<acme::AcmeConfig>,
    /// Directory served. Default none: no static files, so every request no module
    /// answers is 404 (a proxy needs no directory). `tessera serve` sets
    /// `examples/site` when it is given no root and that directory exists.
    pub root: Option<PathBuf>,
    /// Worker threads. Default 0 means one per core.
    pub workers: usize,
    /// Listen backlog per listener. Default is 4096, enough to absorb a connection burst
    /// while a worker is busy (the kernel caps it at net.core.somaxconn).
    pub backlog: u32,
    /// File served for a directory request ending in `/`. Default `index.html`.
    pub index: String,
    /// Files at least this large are sent with sendfile(2); smaller ones are kept in the
    /// open-file cache and written from memory with the response head in one
    /// vectored write. Default 16 KiB: below that, one writev beats a second syscall.
    pub sendfile_min_size: u64,
    /// Most paths the process keeps in its open-file cache, shared by all workers (a
    /// file with its precompressed siblings counts once; the bound is split across the
    /// cache's 32 shards, so it is rounded up to a multiple of 32). Default 4096; 0
    /// caches nothing.
    pub file_cache_entries: usize,
    /// Milliseconds a cached file is trusted before it is checked against the file
    /// system again (reopened and compared by device, inode, size and mtime). A changed
    /// or deleted file is noticed within this time. Default 1000, nginx's
    /// `open_file_cache_valid 1s`; 0 checks on every request.
    pub file_cache_valid_ms: u64,
    /// Serve `FILE.br` / `FILE.gz` in place of `FILE` when they exist and the request's
    /// Accept-Encoding allows them (nginx's `gzip_static`, plus Brotli). Default true:
    /// it costs two extra opens only when a file is (re)checked, never per request.
    pub precompressed: bool,
    /// Answer a request for a directory without an index file with an HTML listing of
    /// its entries. Default false: a directory then answers 403, as nginx does, so a
    /// site does not publish file names by accident.
    pub autoindex: bool,
    /// `Cache-Control` values by path prefix; the longest matching prefix wins and a
    /// path matching none gets no Cache-Control. Default: none.
    pub cache_control: Vec<CacheControlRule>,
    /// Seconds a graceful shutdown waits for responses in flight. Default 10.
    pub shutdown_timeout: u64,
    /// Most connections open at once, split evenly across workers. Default 16384. Each
    /// worker's connection slots are allocated at start; when they are all taken the
    /// oldest idle keep-alive connection is closed to admit a new one, and when none is
    /// idle the worker stops accepting until a slot frees (the backlog absorbs the burst).
    pub max_connections: usize,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/status`, `/status.json`;
    /// docs/observability.md).
    /// Default none: off. Never one of `listen`'s addresses.
    pub admin_listen: Option<SocketAddr>,
    /// Clients allowed on the admin listener; when set it is the whole list (loopback
    /// included). Default none: loopback clients only.
    pub admin_allow: Vec<std::net::IpAddr>,
    /// A token that admits any client to the admin listener as `Authorization: Bearer
    /// TOKEN`. Default none.
    pub admin_token: Option<String>,
    /// File `tessera serve` writes its process id to once it serves (at every start,
    /// and by the new process of a binary upgrade), and removes at exit if it still
    /// names it. Default none.
    pub pid_file: Option<PathBuf>,
    /// Access log file, appended to; none (the default) means no access log.
    pub access_log: Option<PathBuf>,
    /// `combined` (the default), `common`, `json` (one JSON object per line, of
    /// `json_fields`), or an Apache format string: `%h %l %u %t %r %m %U %q %H %s %>s %b
    /// %B %D %T %v %{Header}i %{Header}o %{route}x %%` (docs/observability.md).
    pub access_log_format: String,
    /// The fields of a `json` line, in order. Default
    /// `access_log::DEFAULT_JSON_FIELDS`.
    pub json_fields: Option<Vec<String>>,
    pub limits: LimitsConfig,
    /// `[[limit]]`: request-limit zones, named by the `limit` list of a route or a
    /// host (docs/security.md, "Request limits"). Default none.
    pub limit: Vec<crate::limit::LimitConfig>,
    /// Connections one client (its address: the socket's peer, or the source of a
    /// trusted PROXY header) may have open at once, on all listeners together; the
    /// next is closed at once. Default 0: no limit.
    pub limit_conn_per_client: u32,
    pub timeouts: TimeoutsConfig,
    /// `[compression]`: on-the-fly compression of the responses handlers make (proxied,
    /// ESI-assembled, Lua); docs/compression.md. Default on for text types.
    pub compression: compress::CompressionConfig,
    /// Bytes of memory for the compressors of responses compressed while they stream,
    /// for the whole process (every site and route together): each such response
    /// reserves its compressor's measured state (about 0.4 MiB for gzip, 0.9 MiB for
    /// Brotli, 1.8 MiB for zstd) until its body ends, and one that would pass the budget
    /// goes out uncompressed. Default 128 MiB; 0 compresses no stream.
    pub compression_memory: u64,
    /// `http2 = true | false`, or `[http2]` with its limits (docs/http2.md): HTTP/2 over
    /// TLS (ALPN) and in cleartext with prior knowledge. Default on.
    #[serde(deserialize_with = "http2::bool_or_table")]
    pub http2: http2::Http2Config,
    /// `[http3]`: the limits of `quic_listen`'s connections (docs/http3.md).
    pub http3: http3::Http3Config,
    /// `[tracing]`: W3C trace context and OTLP span export (docs/observability.md,
    /// "Tracing"). Default none: off.
    pub tracing: Option<tracing::TracingConfig>,
    /// `[[host]]`: virtual hosts, each with its names and its own files. The top-level
    /// keys (`root`, `index`, `autoindex`, `cache_control`) form the default host, which
    /// answers requests whose host matches no `[[host]]` (unless one is marked
    /// `default`). Default: none, so one site as before.
    pub host: Vec<HostConfig>,
    /// Edits of every response of the default host (a `[[host]]` without its own takes
    /// these): docs/config.md, "Routing and rewriting". Default none.
    pub response_headers: Option<rules::HeaderEdits>,
    /// Pages of the root for error statuses (`"404" = "/404.html"`), for every response
    /// of the default host (a `[[host]]` without its own takes these). Default none.
    pub error_page: Option<std::collections::BTreeMap<String, String>>,
    /// The rule keys of every `[[route]]` and `[[host.route]]`, in file order, each with
    /// its site (0: top level, `i + 1`: `[[host]]` `i`) and whether a module serves it
    /// (it has `upstream` or `root`). Set by `cli`, which reads the routes; no TOML key.
    #[serde(skip)]
    pub routes: Vec<(usize, rules::RouteRules, bool)>,
    /// Where `[[limit]]` zones with `redis = true` keep their counts: `[cache.redis]`'s
    /// `url` and `key_prefix`. Set by `cli`, which reads `[cache]`; no TOML key.
    #[serde(skip)]
    pub limit_redis: Option<crate::limit::LimitRedis>,
}

/// One `[[host]]` table: a site chosen by the request's host (the authority of an
/// absolute-form target, else the Host header), matched case-insensitively with the port
/// and a final dot ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// Names this host answers: exact (`www.example.com`), or a wildcard of exactly one
    /// more label (`*.example.com` matches `a.example.com`, not `example.com` nor
    /// `a.b.example.com`). An exact name beats a wildcard. Required; no name may belong
    /// to two hosts.
    pub names: Vec<String>,
    /// Answer the requests whose host matches no `[[host]]` (in place of the top-level
    /// host). Default false; at most one host may say true.
    pub default: bool,
    /// Directory served. Default: the top-level `root`.
    pub root: Option<PathBuf>,
    /// Default: the top-level `index`.
    pub index: Option<String>,
    /// Default: the top-level `autoindex`.
    pub autoindex: Option<bool>,
    /// `[[host.cache_control]]`. Default: the top-level `cache_control` rules.
    pub cache_control: Option<Vec<CacheControlRule>>,
    /// Access log file for this host's requests (in `access_log_format`). Default: the
    /// top-level `access_log`, if any.
    pub access_log: Option<PathBuf>,
    /// `[host.tls]`: this host's certificate and key, chosen when a client's SNI names
    /// one of its names. Default: the `[tls]` certificate.
    pub tls: Option<tls::TlsConfig>,
    /// `[host.compression]`, replacing the top-level `[compression]` table as a whole.
    /// Default: the top-level one.
    pub compression: Option<compress::CompressionConfig>,
    /// Edits of every response of this host, after the top-level ones (docs/config.md,
    /// "Routing and rewriting"). Default: the top-level `response_headers`.
    pub response_headers: Option<rules::HeaderEdits>,
    /// Pages of this host's root for error statuses. Default: the top-level `error_page`.
    pub error_page: Option<std::collections::BTreeMap<String, String>>,
    /// This host's trusted proxies, for the fields of its requests. Default: the
    /// top-level `trusted_proxies`. (A PROXY header is read before any host is known,
    /// so it is trusted by the top-level list.)
    pub trusted_proxies: Option<Vec<String>>,
    /// Default: the top-level `real_ip_from`.
    pub real_ip_from: Option<crate::client::RealIpFrom>,
    /// This host's `access` list. Default: the top-level `access` (and `deny_status`).
    pub access: Option<Vec<rules::AccessRule>>,
    /// The status this host's own `access` refuses with. Default 403.
    pub deny_status: Option<u16>,
    /// The `[[limit]]` zones every request of this host is counted in, unless its route
    /// names its own. Default none.
    pub limit: Vec<String>,
    /// Requests of one key in flight at once on this host, unless its route has its own
    /// `limit_conn`. Default none.
    pub limit_conn: Option<rules::config::LimitConn>,
}

/// One `[[cache_control]]` table: responses for paths starting with `prefix` (a
/// decoded, normalised path such as `/assets/`) carry `Cache-Control: value`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheControlRule {
    pub prefix: String,
    pub value: String,
}

/// `[timeouts]`, in seconds (fractions allowed). Each is the longest a connection may
/// stay in one state; one periodic check per worker closes those that overstay.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsConfig {
    /// Receiving a whole request head, from its first byte (or from accept). Default 10:
    /// a slowloris client that trickles a header byte at a time is cut off here.
    pub head: f64,
    /// Receiving a whole request body. Default 30.
    pub body: f64,
    /// An idle keep-alive connection waiting for its next request. Default 60.
    pub idle: f64,
    /// A response that makes no write progress (the client stopped reading). Default 60.
    pub write: f64,
    /// Receiving the PROXY header on a `proxy_protocol` listener, from accept. Default
    /// 5: a balancer sends it at once, with or before the first bytes of the client's.
    pub proxy_protocol: f64,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        TimeoutsConfig {
            head: 10.0,
            body: 30.0,
            idle: 60.0,
            write: 60.0,
            proxy_protocol: 5.0,
        }
    }
}

/// `[limits]`: the request limits (see `wire::Limits`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Default 16384 bytes; larger heads get 431.
    pub max_head_size: usize,
    /// Default 8192 bytes; longer targets get 414.
    pub max_uri_length: usize,
    /// Default 100; more header fields get 431.
    pub max_headers: usize,
    /// Default 1048576 bytes; larger bodies get 413.
    pub max_body_size: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            tls_listen: Vec::new(),
            h2c_listen: Vec::new(),
            quic_listen: Vec::new(),
            proxy_protocol: Vec::new(),
            trusted_proxies: Vec::new(),
            real_ip_from: None,
            access: Vec::new(),
            deny_status: None,
            tls: Default::default(),
            acme: None,
            root: None,
            workers: 0,
            backlog: 4096,
            index: "index.html".into(),
            sendfile_min_size: 16 * 1024,
            file_cache_entries: 4096,
            file_cache_valid_ms: 1000,
            precompressed: true,
            autoindex: false,
            cache_control: Vec::new(),
            shutdown_timeout: 10,
            max_connections: 16384,
            admin_listen: None,
            admin_allow: Vec::new(),
            admin_token: None,
            pid_file: None,
            access_log: None,
            access_log_format: "combined".into(),
            json_fields: None,
            limits: LimitsConfig::default(),
            limit: Vec::new(),
            limit_conn_per_client: 0,
            timeouts: TimeoutsConfig::default(),
            compression: Default::default(),
            compression_memory: compress::DEFAULT_STREAM_MEMORY,
            http2: Default::default(),
            http3: Default::default(),
            tracing: None,
            host: Vec::new(),
            response_headers: None,
            error_page: None,
            routes: Vec::new(),
            limit_redis: None,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = wire::Limits::default();
        LimitsConfig {
            max_head_size: l.max_head_size,
            max_uri_length: l.max_uri_length,
            max_headers: l.max_headers,
            max_body_size: l.max_body_size,
        }
    }
}

impl LimitsConfig {
    pub(crate) fn to_wire(&self) -> wire::Limits {
        wire::Limits {
            max_head_size: self.max_head_size,
            max_uri_length: self.max_uri_length,
            max_headers: self.max_headers,
            max_body_size: self.max_body_size,
        }
    }
}

impl Config {
    /// What is wrong with the access log's format, if anything.
    fn log_problem(&self) -> Option<String> {
        let e = self.log_format().err()?;
        let key = match self.access_log_format == "json" {
            true => "json_fields",
            false => "access_log_format",
        };
        Some(match e.starts_with('`') {
            true => e,
            false => format!("`{key}`: {e}"),
        })
    }

    /// The access log's compiled format.
    pub(crate) fn log_format(&self) -> Result<crate::access_log::Format, String> {
        use crate::access_log::{Format, DEFAULT_JSON_FIELDS};
        let format = match self.access_log_format.as_str() {
            "json" => {
                let default = || DEFAULT_JSON_FIELDS.map(String::from).to_vec();
                Format::json(&self.json_fields.clone().unwrap_or_else(default))
            }
            spec => Format::parse(spec),
        };
        format.map_err(|e| e.to_string())
    }

    /// Every address to listen on with what it speaks, in the order `listen`,
    /// `tls_listen`, `h2c_listen`, `quic_listen` (UDP).
    pub(crate) fn listening(&self) -> impl Iterator<Item = (SocketAddr, Kind)> + '_ {
        fn tagged(
            list: &[SocketAddr],
            kind: Kind,
        ) -> impl Iterator<Item = (SocketAddr, Kind)> + '_ {
            list.iter().map(move |a| (*a, kind))
        }
        tagged(&self.listen, Kind::Plain)
            .chain(tagged(&self.tls_listen, Kind::Tls))
            .chain(tagged(&self.h2c_listen, Kind::H2c))
            .chain(tagged(&self.quic_listen, Kind::Quic))
    }

    /// Who each site's client is behind proxies, the top-level site first.
    pub(crate) fn identity(&self) -> Result<Vec<crate::client::Identity>, String> {
        let hosts = self
            .host
            .iter()
            .map(|h| (h.trusted_proxies.as_deref(), h.real_ip_from));
        crate::client::Identity::of_sites((&self.trusted_proxies, self.real_ip_from), hosts)
    }

    /// The request-limit zones and who names them (their state taken from `previous`
    /// where their settings did not change).
    pub(crate) fn limit_zones(
        &self,
        workers: usize,
        previous: Option<&crate::limit::Limits>,
    ) -> Result<crate::limit::Limits, String> {
        use crate::limit::Named;
        let hosts: Vec<Named> = (self.host.iter().enumerate())
            .map(|(i, h)| Named {
                site: i + 1,
                limit: &h.limit,
                limit_conn: h.limit_conn.as_ref(),
            })
            .collect();
        let routes: Vec<Named> = (self.routes.iter())
            .map(|(site, r, _)| Named {
                site: *site,
                limit: &r.limit,
                limit_conn: r.limit_conn.as_ref(),
            })
            .collect();
        let redis = self.limit_redis.as_ref();
        crate::limit::Limits::new((&self.limit, redis), (&hosts, &routes), workers, previous)
    }

    /// Which site a request's host names (site `i + 1` for `host[i]`).
    /// The names `[acme]` gets certificates for: every `[[host]]` name of a host
    /// without a configured certificate, lowercased; a wildcard only with `dns-01`.
    pub fn acme_names(&self) -> Vec<String> {
        let dns = self.acme.as_ref().is_some_and(|a| a.offers("dns-01"));
        self.host
            .iter()
            .filter(|h| {
                h.tls
                    .as_ref()
                    .is_none_or(|t| t.certificate.is_none() && t.acme != Some(false))
            })
            .flat_map(|h| &h.names)
            .filter(|n| dns || !n.starts_with("*."))
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .collect()
    }

    pub fn hosts(&self) -> handler::Hosts {
        let default = self
            .host
            .iter()
            .position(|h| h.default)
            .map_or(0, |i| i + 1);
        handler::Hosts::new(self.host.iter().map(|h| &h.names[..]), default)
    }

    /// The compression policy of each site (`None`: off), the top-level one first.
    pub fn compression(&self) -> Vec<Option<compress::Compression>> {
        std::iter::once(&self.compression)
            .chain(
                self.host
                    .iter()
                    .map(|h| h.compression.as_ref().unwrap_or(&self.compression)),
            )
            .map(|c| c.build().ok().flatten())
            .collect()
    }

    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }

    /// Compiles each site's rules: the routes of the site, and its response edits (a
    /// `[[host]]` without its own takes the top-level ones).
    pub(crate) fn rule_tables(&self) -> Result<Vec<std::sync::Arc<rules::Table>>, String> {
        let config = self;
        (0..=config.host.len())
            .map(|site| {
                let routes: Vec<(rules::RouteRules, bool)> = config
                    .routes
                    .iter()
                    .filter(|(s, _, _)| *s == site)
                    .map(|(_, r, module)| (r.clone(), *module))
                    .collect();
                let (host, routes_key) = match site {
                    0 => (None, "route".to_string()),
                    i => (
                        Some((i - 1, &config.host[i - 1])),
                        format!("host[{}].route", i - 1),
                    ),
                };
                let edits_key = match host {
                    Some((i, h)) if h.response_headers.is_some() => {
                        format!("host[{i}].response_headers")
                    }
                    _ => "response_headers".into(),
                };
                let pages_key = match host {
                    Some((i, h)) if h.error_page.is_some() => format!("host[{i}].error_page"),
                    _ => "error_page".into(),
                };
                let edits = host
                    .and_then(|(_, h)| h.response_headers.as_ref())
                    .or(config.response_headers.as_ref());
                let pages = host
                    .and_then(|(_, h)| h.error_page.as_ref())
                    .or(config.error_page.as_ref());
                let access = match host {
                    Some((i, h)) if h.access.is_some() || h.deny_status.is_some() => (
                        h.access.as_deref().unwrap_or_default(),
                        h.deny_status,
                        format!("host[{i}]"),
                    ),
                    _ => (&config.access[..], config.deny_status, String::new()),
                };
                let host = rules::Host {
                    response: edits.map(|e| (e, edits_key.as_str())),
                    errors: pages.map(|p| (p, pages_key.as_str())),
                    access: Some((access.0, access.1, access.2.as_str())),
                };
                rules::Table::compile(&routes, &routes_key, host)
                    .map(std::sync::Arc::new)
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    /// Every problem of the configuration, each a message that starts with the key it is
    /// about in backquotes (`tessera check-config` lists them all; starting refuses the
    /// first). Only the values are checked here, not the files they name.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = self.rule_tables() {
            problems.push(e);
        }
        problems.extend(self.log_problem());
        if self.listening().next().is_none() {
            problems.push("`listen` needs at least one address".into());
        }
        // Both would join one SO_REUSEPORT group, and the kernel would share the
        // connections out between, say, HTTP/1.1 and TLS. (Port 0 is a new free port at
        // each bind; a wildcard and a specific address may share a port, as the kernel
        // gives a connection to the socket bound to its address.)
        let all: Vec<_> = self.listening().filter(|(a, _)| a.port() != 0).collect();
        for (i, (addr, kind)) in all.iter().enumerate() {
            // A UDP port (QUIC) and a TCP one of the same number are two sockets.
            let same = |(a, k): &&(SocketAddr, Kind)| {
                a == addr && k != kind && (*k == Kind::Quic) == (*kind == Kind::Quic)
            };
            if let Some((_, first)) = all[..i].iter().find(same) {
                problems.push(format!(
                    "`{}` lists {addr}, which `{}` lists already: an address speaks one protocol",
                    kind.key(),
                    first.key()
                ));
            }
        }
        for addr in &self.proxy_protocol {
            if !self.listening().any(|(a, k)| a == *addr && k != Kind::Quic) {
                problems.push(format!(
                    "`proxy_protocol` lists {addr}, which no `listen`, `tls_listen` or `h2c_listen` lists"
                ));
            }
        }
        if let Err(e) = self.identity() {
            problems.push(e);
        }
        if let Err(e) = self.limit_zones(1, None) {
            problems.push(e);
        }
        if !self.h2c_listen.is_empty() && !self.http2.enabled {
            problems.push("`h2c_listen` needs HTTP/2, which `http2 = false` turns off".into());
        }
        problems.extend(tls_problems(self));
        if let Some(acme) = &self.acme {
            let (listen, tls_listen) = (!self.listen.is_empty(), !self.tls_listen.is_empty());
            let redis = self.limit_redis.is_some();
            problems.extend(acme.problems(&self.acme_names(), (listen, tls_listen), redis));
        }
        problems.extend(self.http2.problems());
        problems.extend(self.http3.problems());
        problems.extend(self.tracing.iter().flat_map(|t| t.problems()));
        let l = &self.limits;
        if !(256..=1 << 20).contains(&l.max_head_size) {
            problems.push("`limits.max_head_size` must be between 256 and 1048576".into());
        }
        if l.max_uri_length == 0 || l.max_uri_length >= l.max_head_size {
            problems.push("`limits.max_uri_length` must be above 0 and below max_head_size".into());
        }
        if !(1..=wire::MAX_HEADERS_CAP).contains(&l.max_headers) {
            problems.push(format!(
                "`limits.max_headers` must be between 1 and {}",
                wire::MAX_HEADERS_CAP
            ));
        }
        if self.max_connections < self.worker_count() {
            problems.push("`max_connections` must be at least one per worker".into());
        }
        problems.extend(self.admin_problems());
        let t = &self.timeouts;
        for (name, value) in [
            ("head", t.head),
            ("body", t.body),
            ("idle", t.idle),
            ("write", t.write),
            ("proxy_protocol", t.proxy_protocol),
        ] {
            if !(value > 0.0 && value <= 86400.0) {
                problems.push(format!(
                    "`timeouts.{name}` must be between 0 and 86400 seconds"
                ));
            }
        }
        problems.extend(validate_cache_control("cache_control", &self.cache_control).err());
        problems.extend(validate_index("index", &self.index).err());
        if let Err(e) = self.compression.build() {
            problems.push(format!("`compression`: {e}"));
        }
        let mut seen: Vec<(String, usize)> = Vec::new();
        for (i, host) in self.host.iter().enumerate() {
            let key = |k: &str| format!("host[{i}].{k}");
            if host.names.is_empty() {
                problems.push(format!("`{}` needs at least one name", key("names")));
            }
            for name in &host.names {
                let name = name.to_ascii_lowercase();
                if !handler::is_valid_name(&name) {
                    problems.push(format!(
                        "`{}`: {name:?} is not a host name or a `*.` wildcard",
                        key("names")
                    ));
                }
                if let Some((_, j)) = seen.iter().find(|(n, _)| *n == name) {
                    problems.push(format!(
                        "`{}`: {name:?} is claimed by host[{j}] too",
                        key("names")
                    ));
                }
                seen.push((name, i));
            }
            if host.default {
                if let Some(j) = self.host[..i].iter().position(|h| h.default) {
                    problems.push(format!(
                        "`{}`: host[{j}] is the default host already",
                        key("default")
                    ));
                }
            }
            if let Some(index) = &host.index {
                problems.extend(validate_index(&key("index"), index).err());
            }
            if let Some(Err(e)) = host.compression.as_ref().map(|c| c.build()) {
                problems.push(format!("`{}`: {e}", key("compression")));
            }
            if let Some(rules) = &host.cache_control {
                problems.extend(validate_cache_control(&key("cache_control"), rules).err());
            }
        }
        if self.file_cache_valid_ms > 86_400_000 {
            problems.push("`file_cache_valid_ms` must be at most 86400000".into());
        }
        if self.workers > 1024 {
            problems.push("`workers` must be at most 1024".into());
        }
        problems
    }

    /// What is wrong with the admin listener's settings.
    fn admin_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(admin) = self.admin_listen {
            if let Some((_, kind)) = self.listening().find(|(l, _)| takes_admin(*l, admin)) {
                problems.push(format!(
                    "`admin_listen` {admin} overlaps a public `{}` address: the admin listener needs an address of its own",
                    kind.key()
                ));
            }
            if !admin.ip().is_loopback()
                && self.admin_allow.is_empty()
                && self.admin_token.is_none()
            {
                problems.push(format!(
                    "`admin_listen` {admin} is not a loopback address: list the clients allowed in `admin_allow` or set `admin_token`"
                ));
            }
        }
        if self
            .admin_token
            .as_deref()
            .is_some_and(|t| t.len() < 16 || t.bytes().any(|b| !b.is_ascii_graphic()))
        {
            problems.push(
                "`admin_token` must be at least 16 printable characters without spaces".into(),
            );
        }
        problems
    }
}

fn validate_index(key: &str, index: &str) -> Result<(), String> {
    if index.is_empty() || index.contains('/') || index == ".." {
        return Err(format!("`{key}` must be a file name, got {index:?}"));
    }
    Ok(())
}

fn validate_cache_control(key: &str, rules: &[CacheControlRule]) -> Result<(), String> {
    for rule in rules {
        if !rule.prefix.starts_with('/') {
            return Err(format!(
                "`{key}` prefix must start with `/`, got {:?}",
                rule.prefix
            ));
        }
        if rule.value.is_empty() || rule.value.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(format!(
                "`{key}` value for {:?} must be non-empty printable text",
                rule.prefix
            ));
        }
    }
    Ok(())
}

/// Whether the public listener `l` and the admin listener `admin` would want the same
/// connections: the same port on the same address, or on every address. Port 0 (a free
/// port, chosen at each bind) never does. A public IPv6 listener takes no IPv4
/// connections (`listeners::bind`), but the admin listener on `[::]` takes both.
fn takes_admin(l: SocketAddr, admin: SocketAddr) -> bool {
    let families =
        l.is_ipv4() == admin.is_ipv4() || (admin.is_ipv6() && admin.ip().is_unspecified());
    admin.port() != 0
        && l.port() == admin.port()
        && families
        && (l.ip() == admin.ip() || l.ip().is_unspecified() || admin.ip().is_unspecified())
}

/// Every problem of the TLS keys (values only, like `Config::problems`).
fn tls_problems(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    let pair = |key: &str, tls: &tls::TlsConfig, problems: &mut Vec<String>| {
        if tls.certificate.is_some() != tls.key.is_some() {
            problems.push(format!(
                "`{key}` needs both `certificate` and `key`, or neither"
            ));
        }
    };
    pair("tls", &config.tls, &mut problems);
    if let Some(hsts) = &config.tls.hsts {
        if hsts.is_empty() || hsts.bytes().any(|b| b < 0x20 || b == 0x7f) {
            problems.push("`tls.hsts` must be non-empty printable text".into());
        }
    }
    if config.tls.redirect_https_port == Some(0) {
        problems.push("`tls.redirect_https_port` must be between 1 and 65535".into());
    }
    if config.tls.acme.is_some() {
        problems.push(
            "`tls.acme`: only `[host.tls]` has it, to say whether `[acme]` gets that host's certificate"
                .into(),
        );
    }
    for (i, host) in config.host.iter().enumerate() {
        if let Some(tls) = &host.tls {
            pair(&format!("host[{i}].tls"), tls, &mut problems);
            // `[host.tls]` shares `[tls]`'s shape but only its certificate is per host.
            let set = [
                ("hsts", tls.hsts.is_some()),
                ("redirect_https", tls.redirect_https),
                ("redirect_https_port", tls.redirect_https_port.is_some()),
                ("certificate_script", tls.certificate_script.is_some()),
            ];
            for (key, _) in set.iter().filter(|(_, set)| *set) {
                problems.push(format!(
                    "`host[{i}].tls.{key}`: only `[tls]` has it, for every host"
                ));
            }
            match (tls.acme, tls.certificate.is_some(), config.acme.is_some()) {
                (Some(true), true, _) => problems.push(format!(
                    "`host[{i}].tls.acme`: true with a `certificate` of its own: one or the other"
                )),
                (Some(true), false, false) => problems.push(format!(
                    "`host[{i}].tls.acme`: true needs an `[acme]` table"
                )),
                _ => {}
            }
        }
    }
    if !(config.tls_listen.is_empty() && config.quic_listen.is_empty())
        && config.acme.is_none()
        && config.tls.certificate.is_none()
        && config.tls.certificate_script.is_none()
        && !config
            .host
            .iter()
            .any(|h| h.tls.as_ref().is_some_and(|t| t.certificate.is_some()))
    {
        let key = match config.tls_listen.is_empty() {
            true => "quic_listen",
            false => "tls_listen",
        };
        problems.push(format!("`{key}` needs a certificate: `[tls] certificate` and `key` (or --cert and --key), `[acme]`, or `[tls] certificate_script`"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(listen: &[&str], tls: &[&str], h2c: &[&str]) -> Vec<String> {
        let addrs = |list: &[&str]| list.iter().map(|a| a.parse().unwrap()).collect();
        let config = Config {
            listen: addrs(listen),
            tls_listen: addrs(tls),
            h2c_listen: addrs(h2c),
            ..Config::default()
        };
        config
            .problems()
            .into_iter()
            .filter(|p| p.contains("one protocol"))
            .collect()
    }

    #[test]
    fn an_address_speaks_one_protocol() {
        assert_eq!(
            problems(&["127.0.0.1:80"], &[], &["127.0.0.1:80"]),
            ["`h2c_listen` lists 127.0.0.1:80, which `listen` lists already: an address speaks one protocol"]
        );
        assert_eq!(problems(&[], &["[::1]:80"], &["[::1]:80"]).len(), 1);
        // Twice in one list, a wildcard beside an address, different ports, families,
        // or port 0 (a new free port each time): as before.
        assert!(problems(&["127.0.0.1:80", "127.0.0.1:80"], &[], &[]).is_empty());
        assert!(problems(&["0.0.0.0:80"], &["127.0.0.1:80"], &[]).is_empty());
        assert!(problems(&["127.0.0.1:80"], &["127.0.0.1:443"], &["127.0.0.1:81"]).is_empty());
        assert!(problems(&["0.0.0.0:80", "[::]:80"], &[], &[]).is_empty());
        assert!(problems(&["127.0.0.1:0"], &[], &["127.0.0.1:0"]).is_empty());
    }

    #[test]
    fn the_admin_listener_needs_a_port_no_public_listener_takes() {
        let admin = |admin: &str, listen: &str| {
            Config {
                listen: vec![listen.parse().unwrap()],
                admin_listen: Some(admin.parse().unwrap()),
                ..Config::default()
            }
            .problems()
            .iter()
            .any(|p| p.contains("overlaps a public `listen` address"))
        };
        assert!(admin("127.0.0.1:9100", "127.0.0.1:9100"));
        assert!(admin("127.0.0.1:9100", "0.0.0.0:9100"));
        assert!(admin("0.0.0.0:9100", "127.0.0.1:9100"));
        // The admin listener on [::] takes IPv4 too; a public one on [::] does not.
        assert!(admin("[::]:9100", "0.0.0.0:9100"));
        assert!(!admin("0.0.0.0:9100", "[::]:9100"));
        assert!(!admin("127.0.0.1:9101", "127.0.0.1:9100"));
        assert!(!admin("127.0.0.1:0", "127.0.0.1:0"));
    }
}
