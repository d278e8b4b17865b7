//! The proxy as a module of the server (`handler::Module`): its routes are
//! handler routes, each worker runs one [`Edge`], and the same worker's `Edge` is the
//! upstream client scripts call (`handler::Upstreams`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use compress::HeadPolicy;
use handler::{
    Answer, BodyError, Chunks, Deferred, KindLabels, LocalFuture, Module, Request, Response,
    ResponseHead, Role, Route, Service, UpstreamReply, UpstreamRequest, Upstreams,
    UpstreamsFactory,
};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::body::Body;
use crate::cache::Cache;
use crate::config::{CacheConfig, EdgeConfig, EsiMode};
use crate::error::{ConfigError, PageError};
use crate::exchange::{ProxyRequest, ProxyResponse};
use crate::headers::ClientInfo;
use crate::proxy::{Edge, WeakEdge};
use crate::route_compression::RoutePolicy;
use crate::upstream::client::Upstream;
use crate::upstream::peers::{Inherited, PeerSet};

thread_local! {
    /// This worker's proxy, once its service started, so that the scripts of the same
    /// worker share its connection pools and breakers: (the module's id, its `Edge`).
    /// Weak: the services hold it, so the `Edge` of a module a reload replaced (and its
    /// idle upstream connections) goes with the last request that used it.
    static WORKER_EDGE: RefCell<Option<(u64, WeakEdge)>> =
        const { RefCell::new(None) };
}

/// Gives each module its id (for `WORKER_EDGE`).
static NEXT_MODULE: AtomicU64 = AtomicU64::new(0);

/// `[[upstream]]`, `[[route]]`, `[esi]` and `[cache]`: the proxy, its cache (one per
/// process) and the upstream client.
pub struct EdgeModule {
    id: u64,
    config: EdgeConfig,
    cache: Arc<Cache>,
    /// Whether some route proxies (else the module is the scripts' client only).
    proxies: bool,
    /// Connections opened per upstream by all workers.
    opened: Arc<[Arc<AtomicU64>]>,
    /// Requests per upstream by outcome and their latency, per worker.
    figures: Arc<crate::metrics::UpstreamFigures>,
    /// Per upstream, what the modules that reloads replaced counted for it, when the
    /// reloads left it unchanged (its counters go on).
    earlier: Vec<crate::metrics::Earlier>,
    /// The server's first listener, which the upstream address `self` stands for; set
    /// once the server has bound it, before any worker starts.
    listening: OnceLock<SocketAddr>,
    /// The peers and their health per upstream, shared by every worker; made when the
    /// first worker starts (after `listening`), with the health checker.
    sets: OnceLock<Arc<[Arc<PeerSet>]>>,
    /// The health of the peers of the module a reload replaced, for `sets`' peers of the
    /// same upstream and address. (Not the old sets themselves: holding them would keep
    /// the old health checker running.)
    inherited: Inherited,
    /// Each upstream's TLS (in `config.upstream`'s order), for `sets`.
    tls: Vec<Option<Arc<crate::upstream::tls::UpstreamTls>>>,
}

impl EdgeModule {
    /// The `kind` labels of its responses in request metrics: a page assembled from
    /// fragments counts apart from the others.
    pub const KINDS: KindLabels = KindLabels {
        answered: "proxy",
        assembled: Some("esi"),
    };

    /// Checks the configuration and builds the process's cache (and its Redis tier). A
    /// configuration with upstreams but no route that proxies is a client for scripts
    /// only: it caches nothing.
    pub fn new(config: EdgeConfig) -> Result<Arc<EdgeModule>, ConfigError> {
        EdgeModule::replacing(config, None)
    }

    /// As [`EdgeModule::new`], for a reload: the new module keeps `previous`'s cache,
    /// with everything stored in it, when the `[cache]` settings did not change, and the
    /// health of every peer whose upstream name and address did not change (passive and
    /// active health, slow start, requests in flight).
    pub fn replacing(
        mut config: EdgeConfig,
        previous: Option<&EdgeModule>,
    ) -> Result<Arc<EdgeModule>, ConfigError> {
        let proxies = config.route.iter().any(|r| r.upstream.is_some());
        if !proxies {
            // Script calls are not cached: they are the script's own business.
            config.cache = CacheConfig {
                enabled: false,
                ..Default::default()
            };
        }
        config.validate()?;
        let cache = match previous {
            Some(p) if p.config.cache == config.cache => p.cache.clone(),
            _ => Cache::new(&config.cache)?,
        };
        let mut opened = crate::proxy::opened_totals(&config).to_vec();
        let mut earlier = vec![crate::metrics::Earlier::default(); config.upstream.len()];
        if let Some(p) = previous {
            for (j, u) in config.upstream.iter().enumerate() {
                // Unchanged: the same name and the same settings (compared in their
                // Debug form, which shows every field).
                let same = p
                    .config
                    .upstream
                    .iter()
                    .position(|v| v.name == u.name && format!("{v:?}") == format!("{u:?}"));
                if let Some(i) = same {
                    opened[j] = p.opened[i].clone();
                    earlier[j] = crate::metrics::Earlier::after(&p.earlier[i], &p.figures, i);
                }
            }
        }
        let inherited = previous
            .and_then(|p| p.sets.get())
            .map_or_else(Inherited::default, |sets| Inherited::from(sets));
        let opened: Arc<[Arc<AtomicU64>]> = opened.into();
        // Read anew at each reload (a certificate renewed in place is taken); TLS
        // sessions then start over.
        let tls = crate::proxy::tls_of(&config)?;
        let figures = Arc::new(crate::metrics::UpstreamFigures::new(config.upstream.len()));
        Ok(Arc::new(EdgeModule {
            id: NEXT_MODULE.fetch_add(1, Ordering::Relaxed),
            config,
            cache,
            proxies,
            opened,
            figures,
            earlier,
            listening: OnceLock::new(),
            sets: OnceLock::new(),
            inherited,
            tls,
        }))
    }

    /// Per upstream, its name and the connections every worker opened to it so far.
    pub fn upstream_connections(&self) -> Vec<(String, u64)> {
        self.config
            .upstream
            .iter()
            .zip(self.opened.iter())
            .map(|(u, o)| (u.name.clone(), o.load(Ordering::Relaxed)))
            .collect()
    }

    /// Tells the proxy the address of the server's first listener (its port resolved),
    /// which upstream addresses written `self` ([`crate::SELF_ADDRESS`]) then reach: an
    /// origin served by this same process, a Lua handler under another prefix. Call it
    /// after binding and before the workers start; later calls are ignored.
    pub fn listening_on(&self, addr: SocketAddr) {
        let _ = self.listening.set(addr);
    }

    /// The configuration with every `self` address replaced by the listener's.
    fn resolved(&self) -> EdgeConfig {
        let mut config = self.config.clone();
        if let Some(addr) = self.listening.get() {
            for u in &mut config.upstream {
                let peers = u.peer.iter_mut().map(|p| &mut p.address);
                for a in u.addresses.iter_mut().chain(peers) {
                    if a == crate::SELF_ADDRESS {
                        *a = addr.to_string();
                    }
                }
            }
        }
        config
    }

    /// The cache's counters, when some route proxies.
    pub fn cache_stats(&self) -> Option<crate::CacheStats> {
        self.proxies.then(|| self.cache.stats())
    }

    fn edge(&self, worker: usize) -> Option<Edge> {
        let mine = WORKER_EDGE.with(|e| match &*e.borrow() {
            Some((id, edge)) if *id == self.id => edge.upgrade(),
            _ => None,
        });
        if mine.is_some() {
            return mine;
        }
        let config = self.resolved();
        let sets = self
            .sets
            .get_or_init(|| {
                let sets = crate::proxy::peer_sets(&config, &self.inherited, &self.tls);
                crate::upstream::health::start(&config, &sets);
                sets
            })
            .clone();
        match Edge::build(
            config,
            self.cache.clone(),
            true,
            self.opened.clone(),
            self.figures.for_worker(worker),
            sets,
            worker,
        ) {
            Ok(edge) => {
                WORKER_EDGE.with(|e| *e.borrow_mut() = Some((self.id, edge.downgrade())));
                Some(edge)
            }
            Err(e) => {
                // Validated in `new`; this cannot happen, but never panic a worker.
                tracing::error!(worker, error = %e, "cannot start the proxy");
                None
            }
        }
    }
}

impl Module for EdgeModule {
    fn routes(&self) -> Vec<Route> {
        self.config
            .route
            .iter()
            .enumerate()
            .map(|(i, r)| Route {
                prefix: r.prefix.clone(),
                role: Role::Handler,
                tag: i as u32,
                site: r.site,
                rule: r.rule,
            })
            .collect()
    }

    fn start(&self, worker: usize) -> Rc<dyn Service> {
        Rc::new(EdgeService {
            edge: self.edge(worker),
        })
    }

    fn kinds(&self) -> KindLabels {
        EdgeModule::KINDS
    }

    fn upstreams(&self, worker: usize) -> Option<Rc<dyn Upstreams>> {
        UpstreamsFactory::upstreams(self, worker)
    }

    fn metrics(&self, out: &mut handler::Metrics) {
        let names: Vec<&str> = self
            .config
            .upstream
            .iter()
            .map(|u| u.name.as_str())
            .collect();
        self.figures.write(out, &names, &self.earlier);
        if let Some(sets) = self.sets.get() {
            crate::upstream::health::metrics(out, sets);
            crate::grpc::metrics(out);
        }
        for (name, opened) in self.upstream_connections() {
            out.counter(
                "tessera_upstream_connections_opened_total",
                "Connections opened to each upstream by all workers.",
                &[("upstream", &name)],
                opened,
            );
        }
        crate::metrics::write_esi(out);
        let Some(s) = self.cache_stats() else {
            return;
        };
        let lookups = "Cache lookups of the proxy's memory tier, by result.";
        for (result, n) in [
            ("hit", s.hits),
            ("miss", s.misses),
            ("stale", s.stale_served),
            ("coalesced", s.coalesced),
            ("pass", crate::metrics::passes()),
        ] {
            out.counter(
                "tessera_cache_requests_total",
                lookups,
                &[("result", result)],
                n,
            );
        }
        // The same counts under the names `Cache-Status` uses (RFC 9211).
        let lookups = "Cache lookups of the proxy's memory tier, by result, named as \
                       Cache-Status names them.";
        for (result, n) in [
            ("hit", s.hits),
            ("miss", s.misses),
            ("stale", s.stale_served),
            ("collapsed", s.coalesced),
            ("bypass", crate::metrics::passes()),
        ] {
            out.counter(
                "tessera_cache_lookups_total",
                lookups,
                &[("result", result)],
                n,
            );
        }
        crate::metrics::write_cache(out);
        out.gauge(
            "tessera_cache_objects",
            "Objects (and Vary and pass markers) in the memory tier.",
            &[],
            s.entries as f64,
        );
        out.gauge(
            "tessera_cache_bytes",
            "Bytes held by the memory tier.",
            &[],
            s.weight as f64,
        );
        out.gauge(
            "tessera_cache_capacity_bytes",
            "The memory tier's budget.",
            &[],
            s.capacity as f64,
        );
        if let Some(r) = s.shared {
            let redis = "Operations of the Redis tier, by result.";
            for (result, n) in [
                ("hit", r.hits),
                ("miss", r.misses),
                ("error", r.errors),
                ("skipped", r.skipped),
                ("rejected", r.rejected),
            ] {
                out.counter(
                    "tessera_redis_lookups_total",
                    redis,
                    &[("result", result)],
                    n,
                );
            }
            let writes = "Writes to the Redis tier: sent, or dropped because the queue was full.";
            out.counter(
                "tessera_redis_writes_total",
                writes,
                &[("result", "sent")],
                r.writes,
            );
            out.counter(
                "tessera_redis_writes_total",
                writes,
                &[("result", "dropped")],
                r.writes_dropped,
            );
            out.counter(
                "tessera_redis_breaker_opened_total",
                "Times the Redis tier's circuit breaker opened.",
                &[],
                r.breaker_opened,
            );
            out.gauge(
                "tessera_redis_breaker_open",
                "Whether the Redis tier's circuit breaker is open now (Redis skipped): 1 or 0.",
                &[],
                f64::from(u8::from(r.breaker_open)),
            );
        }
        if let Some(f) = s.fan_out {
            write_fan_out(out, &f);
        }
        if let Some(d) = s.disk {
            write_disk(out, &d);
        }
    }
}

impl UpstreamsFactory for EdgeModule {
    fn upstreams(&self, worker: usize) -> Option<Rc<dyn Upstreams>> {
        if self.config.upstream.is_empty() {
            return None;
        }
        self.edge(worker)
            .map(|edge| Rc::new(edge) as Rc<dyn Upstreams>)
    }
}

/// One worker's proxy.
struct EdgeService {
    edge: Option<Edge>,
}

impl Service for EdgeService {
    fn call(&self, req: &Request<'_>) -> Answer {
        let Some(edge) = &self.edge else {
            return Answer::Pass;
        };
        if edge.route_is_files(req.tag as usize) {
            // A `root` route: its files, even under a proxied shorter prefix.
            return Answer::Files;
        }
        let (Some((upstream, mode, policy)), Some(request)) =
            (edge.route_upstream(req.tag as usize), proxy_request(req))
        else {
            return Answer::Pass;
        };
        // The body streams to the origin unless the route buffers it (or the request is
        // an upgrade, whose tunnel carries what follows its head).
        let streams = !edge.route_buffers_body(req.tag as usize)
            && crate::tunnel::upgrade_of(&request).is_none();
        Answer::later(Proxied {
            streams,
            edge: edge.clone(),
            upstream,
            mode,
            policy,
            route: req.tag as usize,
            accepted: compress::Accepted::parse(req.head.header("accept-encoding")),
            request,
        })
    }
}

/// The request as the proxy takes it, copied out of the read buffer so that it can
/// outlive it: its target and field values in one copy, in the worker's block
/// ([`crate::arena`]: no allocation) unless the request has a body, which its client may
/// take long to send. `None` (the request goes to the static files, which answer 400)
/// for a target that is not UTF-8 or a method `http` cannot hold.
fn proxy_request(req: &Request<'_>) -> Option<ProxyRequest> {
    let head = req.head;
    std::str::from_utf8(head.path).ok()?;
    let method = http::Method::from_bytes(head.method_token.as_bytes()).ok()?;
    let slash = head.path.first() == Some(&b'?');
    let target_len = usize::from(slash) + head.path.len();
    let values: usize = head.headers.iter().map(|h| h.value.len()).sum();
    let write = |out: &mut bytes::BytesMut| {
        if slash {
            out.extend_from_slice(b"/");
        }
        out.extend_from_slice(head.path);
        for h in head.headers {
            out.extend_from_slice(h.value);
        }
    };
    let copied = match head.body {
        wire::BodyFraming::None => crate::arena::copy_with(target_len + values, write),
        _ => crate::arena::own_with(target_len + values, write),
    };
    let target = crate::arena::Text::from_utf8(copied.slice(..target_len))?;
    let mut headers = crate::headers::take_map(head.headers.len());
    let mut at = target_len;
    for h in head.headers {
        let value = copied.slice(at..at + h.value.len());
        at += h.value.len();
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_maybe_shared(value),
        ) {
            headers.append(name, value);
        }
    }
    Some(ProxyRequest {
        method,
        target,
        headers,
        body: Bytes::new(),
        streamed: None,
        client: ClientInfo {
            addr: req.client.ip(),
            port: req.client.port(),
            forwarded_for: req.forwarded_for,
            scheme: if req.secure { "https" } else { "http" },
            version: match head.version {
                wire::Version::Http10 => http::Version::HTTP_10,
                wire::Version::Http11 => http::Version::HTTP_11,
                wire::Version::Http2 => http::Version::HTTP_2,
                wire::Version::Http3 => http::Version::HTTP_3,
            },
        },
        notes: req.notes.cloned(),
        request_id: req.request_id,
        trace: req.trace,
    })
}

/// A proxied request waiting for its body, then its upstream or its assembled page.
struct Proxied {
    /// Whether the request body streams to the origin as it arrives.
    streams: bool,
    edge: Edge,
    /// The upstream of the route the server matched, and its ESI mode.
    upstream: Rc<Upstream>,
    mode: EsiMode,
    /// The route's cache rules.
    policy: crate::proxy::Policy,
    /// The route (for its `[compression]`) and what the client accepts.
    route: usize,
    accepted: compress::Accepted,
    request: ProxyRequest,
}

impl Deferred for Proxied {
    fn respond(mut self, body: Bytes) -> LocalFuture<Result<Response, u16>> {
        self.request.body = body;
        self.answer()
    }

    fn streams_body(&self) -> bool {
        self.streams
    }

    fn respond_streamed(
        mut self,
        body: handler::RequestBody,
    ) -> LocalFuture<Result<Response, u16>> {
        self.request.streamed = Some(std::rc::Rc::new(body));
        self.answer()
    }
}

impl Proxied {
    /// The response, the request's body in hand (whole, or streaming).
    fn answer(self) -> LocalFuture<Result<Response, u16>> {
        handler::local_future_with(move || async move {
            let Proxied {
                streams: _,
                edge,
                upstream,
                mode,
                policy,
                route,
                accepted,
                request,
            } = self;
            let status = std::cell::Cell::default();
            let notes = request.notes.clone();
            // gRPC to an HTTP/2 upstream: its deadline, and its errors as gRPC statuses.
            let grpc = upstream.speaks_h2() && crate::grpc::is_grpc(&request.headers);
            let deadline = grpc
                .then(|| crate::grpc::timeout(&request.headers))
                .flatten();
            // Each arm awaits the proxy's future where it is made: held in a local first,
            // its 8 KB were copied once more per request (a `memmove` perf showed).
            let answered = match deadline {
                Some(d) => {
                    let proxying = edge.proxy_to(upstream, mode, policy, &status, request);
                    // The deadline is looked at first: once it has passed, the client's
                    // has, whatever the origin answers in the same turn (an origin that
                    // keeps the grpc-timeout sent on to it answers DEADLINE_EXCEEDED
                    // itself a moment after tessera's passed).
                    tokio::select! {
                        biased;
                        () = evloop::time::sleep(d) => {
                            let message = "grpc-timeout passed before the upstream answered";
                            let code = crate::grpc::DEADLINE_EXCEEDED;
                            return Ok(crate::grpc::error_response(code, message));
                        }
                        answered = proxying => answered,
                    }
                }
                None => {
                    edge.proxy_to(upstream, mode, policy, &status, request)
                        .await
                }
            };
            // The log's cache result is what the proxy decided for `Cache-Status`; no
            // result where the site has no cache.
            let result = status.get().log_result();
            if let (Some(notes), Some(result)) = (notes, result) {
                if edge.worker.cache.enabled() {
                    notes.cache(result);
                }
            }
            match answered {
                Ok(response) => {
                    if grpc {
                        // A trailers-only answer: its status is in its head.
                        crate::grpc::count(&response.headers);
                    }
                    let compression = edge.compression.compression(&edge.worker.config, route);
                    let assembled = response.body.is_page();
                    let mut response = response_of(&edge, response, compression, accepted);
                    response.head.set_assembled(assembled);
                    if edge.worker.cache.config.cache_status {
                        cache_status(&mut response.head, status.get());
                    }
                    match edge.compression.policy(route) {
                        _ if response.head.status() == 101 => response.head.set_identity_only(true),
                        Some(RoutePolicy::Own(Some(policy))) => {
                            response.head.set_compression(policy.clone())
                        }
                        Some(RoutePolicy::Own(None)) => response.head.set_identity_only(true),
                        Some(RoutePolicy::Site) | None => {}
                    }
                    Ok(response)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "proxy error before the response head");
                    if grpc {
                        let code = crate::grpc::status_of(&e);
                        return Ok(crate::grpc::error_response(code, &e.to_string()));
                    }
                    Err(e.status())
                }
            }
        })
    }
}

/// Adds RFC 9211's `Cache-Status` field saying what the cache did (`[cache]
/// cache_status`).
fn cache_status(head: &mut ResponseHead, status: crate::exchange::CacheStatus) {
    let mut value = Vec::with_capacity(40);
    if status.write(&mut value).is_some() {
        head.append(b"cache-status", &value);
    }
}

/// The seam's response for the proxy's: fields as they are (the connection drops the
/// framing ones and writes its own), the body whole when it is (a cache hit) or streamed.
/// A cached object is served in the form of the coding the client gets (made once per
/// object and coding, [`crate::cache::variants`]), marked so that the server does not compress
/// it again.
fn response_of(
    edge: &Edge,
    response: ProxyResponse,
    compression: Option<&compress::Compression>,
    accepted: compress::Accepted,
) -> Response {
    let mut fields = response.headers;
    let cached = response.head_h1.is_some();
    if cached {
        // A cached object: its Age (all the fields hold when the proxy is lean) and, for
        // a HEAD, its length, then its fields encoded once.
        fields.retain(|name, _| {
            name.eq_ignore_ascii_case(b"age") || name.eq_ignore_ascii_case(b"content-length")
        });
    }
    let mut head = ResponseHead::from_fields(response.status.as_u16(), fields);
    if let Some((lines, date, variants)) = response.head_h1 {
        head.set_encoded(lines.clone(), date);
        if let (Some(policy), Some((variants, entry))) = (compression, variants) {
            let chunks = response.body.ready_chunks();
            if let Some((lines, date, body)) = chunks.and_then(|chunks| {
                let identity = crate::cache::variants::Identity {
                    head: &head,
                    lines: &lines,
                    date,
                    chunks,
                };
                let room = edge.worker.cache.form_room(&entry);
                let grew = || edge.worker.cache.reweigh(&entry);
                variants.respond(policy, accepted, identity, room, grew)
            }) {
                head.set_encoded(lines, date);
                head.set_identity_only(true);
                return Response {
                    head,
                    body,
                    relayed: true,
                };
            }
        }
    }
    let body = match response.body.into_whole() {
        Ok(bytes) => handler::Body::Full(bytes),
        Err(body) => match body.into_ready() {
            Ok(chunks) => handler::Body::Ready(chunks),
            Err(body) => handler::Body::stream(body.content_length(), body),
        },
    };
    // A page assembled from cached parts for this request (the only body that arrives
    // here in pieces without a cached head): stitched from the parts' compressed forms
    // when the client gets gzip or zstd.
    if let (Some(policy), false, handler::Body::Ready(chunks)) = (compression, cached, &body) {
        if let Some(stitched) = edge.compression.stitch(policy, accepted, &mut head, chunks) {
            return Response {
                head,
                body: stitched,
                relayed: true,
            };
        }
    }
    Response {
        head,
        body,
        relayed: true,
    }
}

impl Chunks for Body {
    fn poll_chunk(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        futures_core::Stream::poll_next(self, cx)
            .map(|c| c.map(|r| r.map_err(|e: PageError| BodyError(e.to_string()))))
    }

    fn take_tunnel(self: Pin<&mut Self>) -> Option<handler::Tunnel> {
        self.get_mut().take_tunnel()
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<handler::FieldList> {
        self.get_mut().take_trailers()
    }

    fn poll_piece(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<handler::Piece, BodyError>>> {
        self.get_mut()
            .poll_piece(cx)
            .map(|c| c.map(|r| r.map_err(|e: PageError| BodyError(e.to_string()))))
    }
}

impl Upstreams for Edge {
    fn call(&self, req: UpstreamRequest) -> LocalFuture<Result<UpstreamReply, String>> {
        let edge = self.clone();
        handler::local_future(async move {
            let method = http::Method::from_bytes(req.method.as_bytes())
                .map_err(|_| "invalid method".to_string())?;
            let mut headers = HeaderMap::new();
            for (name, value) in &req.headers {
                let name = HeaderName::from_bytes(name).map_err(|_| "invalid header name")?;
                let value = HeaderValue::from_bytes(value).map_err(|_| "invalid header value")?;
                headers.append(name, value);
            }
            let (status, headers, body) = edge
                .call(
                    &req.upstream,
                    method,
                    &req.target,
                    headers,
                    req.body,
                    req.max_body,
                )
                .await
                .map_err(|e| e.to_string())?;
            Ok(UpstreamReply {
                status: status.as_u16(),
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect(),
                body,
            })
        })
    }
}

/// `tessera_cache_invalidations_*`: what went to and came from the other processes
/// sharing Redis (docs/observability.md).
/// The disk tier's families (`[cache.disk]`).
fn write_disk(out: &mut handler::Metrics, d: &crate::cache::DiskTierStats) {
    let gauges = [
        (
            "tessera_cache_disk_objects",
            "Objects in the disk tier.",
            d.objects as f64,
        ),
        (
            "tessera_cache_disk_bytes",
            "Bytes of the disk tier's files.",
            d.bytes as f64,
        ),
        (
            "tessera_cache_disk_capacity_bytes",
            "The disk tier's max_size.",
            d.capacity as f64,
        ),
        (
            "tessera_cache_disk_loaded",
            "Whether the disk tier's loader has read every file since the start: 1 or 0.",
            f64::from(u8::from(d.loaded)),
        ),
        (
            "tessera_cache_disk_full",
            "Whether writes to the disk tier are paused because the disk is full: 1 or 0.",
            f64::from(u8::from(d.full)),
        ),
    ];
    for (name, help, v) in gauges {
        out.gauge(name, help, &[], v);
    }
    let lookups = "Lookups of the disk tier (after a memory miss), by result.";
    for (result, n) in [("hit", d.hits), ("miss", d.misses)] {
        out.counter(
            "tessera_cache_disk_lookups_total",
            lookups,
            &[("result", result)],
            n,
        );
    }
    let fills = "Objects written to the disk tier, or not (an I/O error, a full disk or queue).";
    for (result, n) in [
        ("written", d.fills),
        ("failed", d.fill_errors),
        ("rejected", d.fill_rejected),
    ] {
        out.counter(
            "tessera_cache_disk_fills_total",
            fills,
            &[("result", result)],
            n,
        );
    }
    let evictions = "Objects the disk tier let go, by reason.";
    for (reason, n) in [
        ("size", d.evicted_size),
        ("inactive", d.evicted_inactive),
        ("invalidated", d.evicted_invalidated),
        ("corrupt", d.dropped_corrupt),
    ] {
        out.counter(
            "tessera_cache_disk_evictions_total",
            evictions,
            &[("reason", reason)],
            n,
        );
    }
    out.counter(
        "tessera_cache_disk_loader_files_total",
        "Files the disk tier's loader has read since the start.",
        &[],
        d.loader_files,
    );
}

fn write_fan_out(out: &mut handler::Metrics, f: &crate::cache::FanOutStats) {
    out.counter(
        "tessera_cache_invalidations_sent_total",
        "Invalidations (PURGE, BAN) sent to the other processes sharing Redis.",
        &[],
        f.sent,
    );
    out.counter(
        "tessera_cache_invalidations_lost_total",
        "Invalidations that could not be sent to the other processes (Redis unreachable \
         and the queue full).",
        &[],
        f.lost,
    );
    out.counter(
        "tessera_cache_invalidations_received_total",
        "Other processes' invalidation messages received through Redis pub/sub.",
        &[],
        f.received,
    );
    let applied = "Other processes' invalidations applied here, by how they came.";
    for (via, n) in [
        ("message", f.applied_live),
        ("catch_up", f.applied_caught_up),
    ] {
        out.counter(
            "tessera_cache_invalidations_applied_total",
            applied,
            &[("via", via)],
            n,
        );
    }
    out.counter(
        "tessera_cache_invalidations_memory_drops_total",
        "Times the memory tier was dropped because invalidations were missed and which \
         could not be known.",
        &[],
        f.memory_drops,
    );
}
